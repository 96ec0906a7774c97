"""Embedding layers for sequence models: Keras's ``Embedding`` and weft's
``PositionEmbedding``, each one LayerSpec of a weft ModelSpec
(proto/job.proto's EmbeddingLayer and PositionEmbeddingLayer).

They are reached as ``weft.keras.layers.Embedding`` and
``weft.keras.layers.PositionEmbedding``: layers.py imports them, and this
module's ``output_shape`` (which knows their shapes and hands every other
layer to layers.py's) at its end, so that a layer's call and ``predict``
shape them as graph/embedding_lowering.cc does.
"""
from __future__ import annotations

from typing import Optional, Sequence, Tuple

from weft._pb import job_pb2
from weft.keras import layers as _layers
from weft.keras.layers import Layer, _only_weft_values, _positive_int

_base_output_shape = _layers.output_shape


def output_shape(spec: "job_pb2.LayerSpec", inputs: Sequence[Tuple[int, ...]]) -> Tuple[int, ...]:
    """layers.output_shape, with the embedding layers' shapes."""
    kind = spec.WhichOneof("kind")
    if kind == "embedding":
        return tuple(inputs[0]) + (spec.embedding.output_dim,)
    if kind == "position_embedding":
        x = tuple(inputs[0])
        if len(x) != 2:
            raise ValueError(f"position_embedding needs (sequence, features), got {x}; put it after an Embedding "
                             "layer")
        return x
    return _base_output_shape(spec, inputs)


# Keras's Embedding arguments that weft fixes, with the value it has.
_EMBEDDING_FIXED = {
    "embeddings_initializer": "glorot_uniform", "embeddings_regularizer": None, "embeddings_constraint": None,
    "activity_regularizer": None, "mask_zero": False, "input_length": None, "sparse": False, "lora_rank": None,
    "weights": None, "trainable": True,
}


class Embedding(Layer):
    """Looks up each id's row of a trainable ``input_dim`` x ``output_dim``
    table: (sequence,) ids -> (sequence, output_dim).

    The ids are the model's input as whole numbers in [0, input_dim) (fed
    as floats, like every weft feature); an id outside that range fails the
    step, naming its position and value. The table starts glorot_uniform
    (Keras starts it uniform in [-0.05, 0.05]); masking, regularisers and
    constraints are not supported.
    """

    def __init__(self, input_dim: int, output_dim: int, name: Optional[str] = None,
                 input_shape: Optional[Sequence[int]] = None, **keras) -> None:
        super().__init__(name=name, input_shape=input_shape)
        d = self.describe()
        self.input_dim = _positive_int(d, "input_dim", input_dim)
        self.output_dim = _positive_int(d, "output_dim", output_dim)
        _only_weft_values(d, keras, _EMBEDDING_FIXED,
                          "weft's embedding is a trainable table initialised glorot_uniform, with no masking")

    def _fill(self, spec):
        spec.embedding.input_dim, spec.embedding.output_dim = self.input_dim, self.output_dim


class PositionEmbedding(Layer):
    """Adds a trainable (sequence, features) table to its input, the same for
    every example: learned position embeddings, put after an Embedding.
    (keras_nlp's PositionEmbedding returns the table; this one adds it.) The
    table starts glorot_uniform.
    """

    def __init__(self, name: Optional[str] = None, input_shape: Optional[Sequence[int]] = None, **keras) -> None:
        super().__init__(name=name, input_shape=input_shape)
        _only_weft_values(self.describe(), keras, {"initializer": "glorot_uniform", "trainable": True},
                          "weft's position embedding is a trainable table initialised glorot_uniform")

    def _fill(self, spec):
        spec.position_embedding.SetInParent()
