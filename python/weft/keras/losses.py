"""Losses weft's models train with: sparse softmax cross-entropy over class
labels, binary cross-entropy over labels 0 and 1, and mean squared error over float targets (a regression on a
``weft.data.series`` dataset)."""
from __future__ import annotations

from weft._pb import job_pb2


class SparseCategoricalCrossentropy:
    """Cross-entropy of integer class labels against the model's logits.

    weft computes it on logits: with ``from_logits=False`` (Keras' default)
    the model's last layer must end in a softmax, which the loss then
    absorbs (the same function, computed stably).
    """

    def __init__(self, from_logits: bool = False) -> None:
        if not isinstance(from_logits, bool):
            raise TypeError(f"from_logits must be a bool, not {type(from_logits).__name__}")
        self.from_logits = from_logits

    regression = False
    binary = False

    def to_proto(self) -> int:
        return job_pb2.SPARSE_SOFTMAX_CROSS_ENTROPY


class BinaryCrossentropy:
    """Cross-entropy of class labels 0 and 1 against one logit per example.

    The model's last layer gives one unit. With ``from_logits=False``
    (Keras' default) it must end in a sigmoid, which the loss then absorbs
    (the same function, computed stably); a logit above 0 predicts class 1.
    """

    regression = False
    binary = True

    def __init__(self, from_logits: bool = False) -> None:
        if not isinstance(from_logits, bool):
            raise TypeError(f"from_logits must be a bool, not {type(from_logits).__name__}")
        self.from_logits = from_logits

    def to_proto(self) -> int:
        return job_pb2.BINARY_CROSS_ENTROPY


class MeanSquaredError:
    """The mean over every target of (output - target) ** 2: the model's last
    layer gives one value per target (a series' horizon), with no
    activation, and the dataset has float targets (``weft.data.series``)."""

    regression = True
    binary = False
    from_logits = True  # the outputs are used as they are

    def to_proto(self) -> int:
        return job_pb2.MEAN_SQUARED_ERROR


_NAMES = {"sparse_categorical_crossentropy": lambda: SparseCategoricalCrossentropy(from_logits=False),
          "sparsecategoricalcrossentropy": lambda: SparseCategoricalCrossentropy(from_logits=False),
          "binary_crossentropy": lambda: BinaryCrossentropy(from_logits=False),
          "binarycrossentropy": lambda: BinaryCrossentropy(from_logits=False),
          "mse": MeanSquaredError, "mean_squared_error": MeanSquaredError, "meansquarederror": MeanSquaredError}


def get(identifier):
    if isinstance(identifier, (SparseCategoricalCrossentropy, BinaryCrossentropy, MeanSquaredError)):
        return identifier
    if isinstance(identifier, str):
        if identifier.lower() not in _NAMES:
            raise ValueError(f"loss: unknown loss {identifier!r}; weft has 'sparse_categorical_crossentropy', "
                             f"'binary_crossentropy' and 'mean_squared_error' ('mse')")
        return _NAMES[identifier.lower()]()
    raise TypeError(f"loss must be a loss object or a name, not {type(identifier).__name__}")
