"""Keras's ``LSTM`` and ``GRU``, each one LayerSpec of a weft ModelSpec
(proto/job.proto's LstmLayer and GruLayer).

They are reached as ``weft.keras.layers.LSTM`` and ``.GRU``: layers.py
imports them, and this module's ``output_shape`` (which knows their shapes
and hands every other layer to the one before it) at its end, so that a
layer's call and ``predict`` shape them as graph/recurrent_lowering.cc does.
"""
from __future__ import annotations

from typing import Optional, Sequence, Tuple

from weft._pb import job_pb2
from weft.keras import layers as _layers
from weft.keras.layers import Layer, _bool, _only_weft_values, _positive_int

_base_output_shape = _layers.output_shape


def output_shape(spec: "job_pb2.LayerSpec", inputs: Sequence[Tuple[int, ...]]) -> Tuple[int, ...]:
    """The output_shape before this one, with lstm's and gru's shapes."""
    kind = spec.WhichOneof("kind")
    if kind in ("lstm", "gru"):
        x = tuple(inputs[0])
        if len(x) != 2:
            raise ValueError(f"{kind} needs a sequence (steps, features), got {x}; a Reshape((28, 28)) makes an "
                             "image's rows its steps")
        layer = getattr(spec, kind)
        return (x[0], layer.units) if layer.return_sequences else (layer.units,)
    return _base_output_shape(spec, inputs)


# Keras's LSTM arguments that weft fixes, with the value it has.
_LSTM_FIXED = {
    "activation": "tanh", "recurrent_activation": "sigmoid", "use_bias": True,
    "kernel_initializer": "glorot_uniform", "recurrent_initializer": "orthogonal", "bias_initializer": "zeros",
    "unit_forget_bias": True, "kernel_regularizer": None, "recurrent_regularizer": None, "bias_regularizer": None,
    "activity_regularizer": None, "kernel_constraint": None, "recurrent_constraint": None, "bias_constraint": None,
    "dropout": 0.0, "recurrent_dropout": 0.0, "seed": None, "return_state": False, "go_backwards": False,
    "stateful": False, "unroll": False, "use_cudnn": "auto", "trainable": True,
}


class _Recurrent(Layer):
    """What LSTM and GRU share: ``units``, ``return_sequences``, and Keras's
    other arguments only at the values weft implements."""

    _KIND = ""
    _FIXED: dict = {}
    _WHAT = ""

    def __init__(self, units: int, return_sequences: bool = False, name: Optional[str] = None,
                 input_shape: Optional[Sequence[int]] = None, **keras) -> None:
        super().__init__(name=name, input_shape=input_shape)
        d = self.describe()
        self.units = _positive_int(d, "units", units)
        self.return_sequences = _bool(d, "return_sequences", return_sequences)
        _only_weft_values(d, keras, self._FIXED, self._WHAT)

    def _fill(self, spec):
        layer = getattr(spec, self._KIND)
        layer.units, layer.return_sequences = self.units, self.return_sequences


class LSTM(_Recurrent):
    """A long short-term memory layer over (steps, features): the last step's
    (units,) output, or every step's (steps, units) with
    ``return_sequences=True``. Keras's defaults throughout (tanh and sigmoid,
    glorot_uniform and orthogonal kernels, a forget-gate bias of 1); dropout,
    states and masking are not supported.
    """

    _KIND = "lstm"
    _FIXED = _LSTM_FIXED
    _WHAT = "weft's LSTM has Keras's default activations and initialisers, without dropout or states"


# Keras's GRU arguments that weft fixes, with the value it has.
_GRU_FIXED = dict(_LSTM_FIXED, reset_after=True)
del _GRU_FIXED["unit_forget_bias"]


class GRU(_Recurrent):
    """A gated recurrent unit layer over (steps, features), as Keras's GRU with
    its defaults (reset_after, two bias rows); outputs as LSTM's.
    """

    _KIND = "gru"
    _FIXED = _GRU_FIXED
    _WHAT = ("weft's GRU has Keras's default activations and initialisers (reset_after), without dropout or "
             "states")
