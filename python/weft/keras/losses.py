"""Losses weft's models train with: sparse softmax cross-entropy."""
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

    def to_proto(self) -> int:
        return job_pb2.SPARSE_SOFTMAX_CROSS_ENTROPY


_NAMES = {"sparse_categorical_crossentropy": False, "sparsecategoricalcrossentropy": False}


def get(identifier) -> SparseCategoricalCrossentropy:
    if isinstance(identifier, SparseCategoricalCrossentropy):
        return identifier
    if isinstance(identifier, str):
        if identifier.lower() not in _NAMES:
            raise ValueError(f"loss: unknown loss {identifier!r}; weft has 'sparse_categorical_crossentropy'")
        return SparseCategoricalCrossentropy(from_logits=_NAMES[identifier.lower()])
    raise TypeError(f"loss must be a loss object or a name, not {type(identifier).__name__}")
