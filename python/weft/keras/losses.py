"""Losses weft's models train with: sparse softmax cross-entropy over class
labels (or over one-hot rows: categorical cross-entropy), binary cross-entropy over labels 0 and 1, and mean squared
error over float targets (a regression on a ``weft.data.series`` dataset)."""
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
    name = "sparse_categorical_crossentropy"

    def to_proto(self) -> int:
        return job_pb2.SPARSE_SOFTMAX_CROSS_ENTROPY

    def labels(self, y, where: str = "y"):
        """The labels weft trains on: ``y`` as it is."""
        return y


class CategoricalCrossentropy(SparseCategoricalCrossentropy):
    """Keras' categorical cross-entropy over one-hot label rows: the same loss
    as the sparse one on each row's class, which is what weft trains on.

    A row that is not one-hot (a distribution over the classes) is refused,
    naming it, as is ``label_smoothing``: weft's data carries one class per
    example.
    """

    name = "categorical_crossentropy"

    def __init__(self, from_logits: bool = False, label_smoothing: float = 0.0) -> None:
        super().__init__(from_logits=from_logits)
        if label_smoothing != 0:
            raise ValueError(f"label_smoothing={label_smoothing!r}: weft trains on one class per example and has no "
                             f"label smoothing; leave it at 0")

    def labels(self, y, where: str = "y"):
        """The class of each one-hot row of ``y`` ([examples, classes])."""
        import numpy as np
        y = np.asarray(y)
        if y.ndim != 2:
            raise ValueError(f"{where}: categorical_crossentropy takes one-hot rows [examples, classes], got shape "
                             f"{y.shape}; pass class labels with sparse_categorical_crossentropy")
        ones = np.count_nonzero(y == 1, axis=1)
        zeros = np.count_nonzero(y == 0, axis=1)
        bad = np.nonzero((ones != 1) | (ones + zeros != y.shape[1]))[0]
        if bad.size:
            raise ValueError(f"{where}: row {int(bad[0])} is not one-hot ({y[bad[0]].tolist()[:8]}...); weft trains "
                             f"on one class per example, not on label distributions")
        return np.argmax(y, axis=1).astype(np.int32)


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

    def labels(self, y, where: str = "y"):
        return y


class MeanSquaredError:
    """The mean over every target of (output - target) ** 2: the model's last
    layer gives one value per target (a series' horizon), with no
    activation, and the dataset has float targets (``weft.data.series``)."""

    regression = True
    binary = False
    from_logits = True  # the outputs are used as they are

    def to_proto(self) -> int:
        return job_pb2.MEAN_SQUARED_ERROR

    def labels(self, y, where: str = "y"):
        return y


_NAMES = {"sparse_categorical_crossentropy": lambda: SparseCategoricalCrossentropy(from_logits=False),
          "sparsecategoricalcrossentropy": lambda: SparseCategoricalCrossentropy(from_logits=False),
          "categorical_crossentropy": lambda: CategoricalCrossentropy(from_logits=False),
          "categoricalcrossentropy": lambda: CategoricalCrossentropy(from_logits=False),
          "binary_crossentropy": lambda: BinaryCrossentropy(from_logits=False),
          "binarycrossentropy": lambda: BinaryCrossentropy(from_logits=False),
          "mse": MeanSquaredError, "mean_squared_error": MeanSquaredError, "meansquarederror": MeanSquaredError}


def get(identifier):
    if isinstance(identifier, (SparseCategoricalCrossentropy, BinaryCrossentropy, MeanSquaredError)):
        return identifier
    if isinstance(identifier, str):
        if identifier.lower() not in _NAMES:
            raise ValueError(f"loss: unknown loss {identifier!r}; weft has 'sparse_categorical_crossentropy', "
                             f"'categorical_crossentropy' (one-hot rows), 'binary_crossentropy' and "
                             f"'mean_squared_error' ('mse')")
        return _NAMES[identifier.lower()]()
    raise TypeError(f"loss must be a loss object or a name, not {type(identifier).__name__}")
