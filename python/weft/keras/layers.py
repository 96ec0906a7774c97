"""Keras-style layers, each one LayerSpec of a weft ModelSpec (proto/job.proto).

Only what weft's model lowering has: Dense, Conv2D, MaxPooling2D, Flatten,
Dropout, Activation, Reshape, BatchNormalization, LayerNormalization, Add,
GlobalAveragePooling2D, and ``Input`` for the input (and, from the modules
imported at the end, Embedding, PositionEmbedding, MultiHeadAttention,
AveragePooling2D, Concatenate, LSTM and GRU). Arguments are checked
when the layer is made; a wrong one, or a Keras argument weft lacks, raises
ValueError or TypeError naming the layer and the argument.

A layer is used in a ``Sequential`` list, or called on the symbolic tensor
``Input`` gives (or another layer's call returned) to build a functional
``weft.keras.Model``: ``x = layers.Conv2D(8, 3)(inp)``,
``y = layers.Add()([a, b])``. Each call records which tensors the layer
reads; a layer owns its variables, so it is called once (no sharing).
"""
from __future__ import annotations

import itertools
import math
from typing import List, Optional, Sequence, Tuple, Union

from weft._pb import job_pb2

_ACTIVATIONS = {None: job_pb2.ACTIVATION_NONE, "linear": job_pb2.ACTIVATION_NONE, "relu": job_pb2.RELU,
                "sigmoid": job_pb2.SIGMOID, "tanh": job_pb2.TANH, "softmax": job_pb2.SOFTMAX}


def _activation(layer: str, value) -> int:
    if value is not None and not isinstance(value, str):
        raise TypeError(f"{layer}: activation must be a name ({', '.join(k for k in _ACTIVATIONS if k)}), "
                        f"not {type(value).__name__}")
    if value not in _ACTIVATIONS:
        raise ValueError(f"{layer}: unknown activation {value!r}; weft has "
                         f"{', '.join(k for k in _ACTIVATIONS if k)}")
    return _ACTIVATIONS[value]


def _positive_int(layer: str, name: str, value, allow_none: bool = False) -> Optional[int]:
    if value is None and allow_none:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{layer}: {name} must be an int, not {type(value).__name__}")
    if value <= 0:
        raise ValueError(f"{layer}: {name} must be positive, got {value}")
    return value


def _shape(layer: str, name: str, value) -> Tuple[int, ...]:
    if isinstance(value, int) and not isinstance(value, bool):
        value = (value,)
    if not isinstance(value, (tuple, list)) or not value:
        raise TypeError(f"{layer}: {name} must be a non-empty tuple of ints, not {value!r}")
    for d in value:
        _positive_int(layer, f"{name} dimension", d)
    return tuple(int(d) for d in value)


def _square(layer: str, name: str, value) -> int:
    if isinstance(value, (tuple, list)):
        if len(value) != 2 or value[0] != value[1]:
            raise ValueError(f"{layer}: {name} must be square (weft has square windows), got {tuple(value)}")
        value = value[0]
    return _positive_int(layer, name, value)


def _padding(layer: str, value: str) -> str:
    if not isinstance(value, str) or value.lower() not in ("same", "valid"):
        raise ValueError(f"{layer}: padding must be 'same' or 'valid', got {value!r}")
    return value.upper()


def _bool(layer: str, name: str, value) -> bool:
    if not isinstance(value, bool):
        raise TypeError(f"{layer}: {name} must be a bool, not {type(value).__name__}")
    return value


def _fraction(layer: str, name: str, value, low: float, high: float = math.inf) -> float:
    """A number in the open interval (low, high)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{layer}: {name} must be a number, not {type(value).__name__}")
    if not low < value < high:
        raise ValueError(f"{layer}: {name} must be " + (f"in ({low}, {high})" if high < math.inf else f"> {low}")
                         + f", got {value}")
    return float(value)


def _only_weft_values(layer: str, given: dict, fixed: dict, what: str) -> None:
    """Refuses Keras arguments weft has no way to honour: each of ``given``
    must be a Keras argument of this layer (a key of ``fixed``) and hold a
    value weft implements (its value there, or one of them for a tuple)."""
    for name, value in given.items():
        if name not in fixed:
            raise TypeError(f"{layer}: unknown argument {name!r}")
        allowed = fixed[name] if isinstance(fixed[name], tuple) else (fixed[name],)
        if not any(value is a or (type(value) is type(a) and value == a) for a in allowed):
            raise ValueError(f"{layer}: {name}={value!r} is not supported: {what} (weft has {name}={allowed[0]!r})")


# ---- shapes ---------------------------------------------------------------------

def _window(size: int, k: int, s: int, padding: str) -> int:
    return -(-size // s) if padding == "SAME" else (size - k) // s + 1


def output_shape(spec: "job_pb2.LayerSpec", inputs: Sequence[Tuple[int, ...]]) -> Tuple[int, ...]:
    """One example's shape after layer ``spec`` reading ``inputs`` (one example's
    shape each), as graph/model_lowering.cc shapes it; ValueError when the
    layer cannot read them."""
    kind = spec.WhichOneof("kind")
    x = tuple(inputs[0])
    if kind == "add":
        for k, other in enumerate(inputs[1:], 1):
            if tuple(other) != x:
                raise ValueError(f"add's inputs must have one shape: input 0 is {x}, input {k} is {tuple(other)}")
        return x
    if kind in ("conv2d", "max_pool", "global_avg_pool") and len(x) != 3:
        raise ValueError(f"{kind} needs an image input (height, width, channels), got {x}")
    if kind == "dense":
        if len(x) == 2:  # a sequence (seq, features): each position projected
            return (x[0], spec.dense.units)
        if len(x) != 1:
            raise ValueError(f"dense needs a flat input (features,) or a sequence (seq, features), got {x}; "
                             "add a Flatten layer before it")
        return (spec.dense.units,)
    if kind in ("conv2d", "max_pool"):
        if kind == "conv2d":
            c = spec.conv2d
            k, s, padding, channels = c.kernel_size, c.stride or 1, c.padding or "SAME", c.filters
        else:
            p = spec.max_pool
            k, s, padding, channels = p.pool_size or 2, p.stride or p.pool_size or 2, p.padding or "VALID", x[2]
        h, w = _window(x[0], k, s, padding), _window(x[1], k, s, padding)
        if h <= 0 or w <= 0:
            raise ValueError(f"{kind}: a {k}x{k} window does not fit the input {x} with {padding} padding")
        return (h, w, channels)
    if kind == "global_avg_pool":
        return (x[2],)
    if kind == "flatten":
        return (math.prod(x),)
    if kind == "reshape":
        target = tuple(spec.reshape.shape)
        if math.prod(target) != math.prod(x):
            raise ValueError(f"reshape to {target} holds {math.prod(target)} values per example; its input {x} "
                             f"has {math.prod(x)}")
        return target
    return x  # dropout, activation, batch_norm, layer_norm


# ---- layers and symbolic tensors ------------------------------------------------

_CALLS = itertools.count()  # orders layer calls: a functional model lists its layers in this order

class KerasTensor:
    """The symbolic output of a layer (or of ``Input``) in a functional model:
    what the next layer reads. ``shape`` is one example's, led by None for the
    batch."""

    def __init__(self, layer: "Layer", shape: Tuple[int, ...]) -> None:
        self.layer = layer
        self.shape = (None,) + tuple(shape)

    def __repr__(self) -> str:
        return f"<KerasTensor shape={self.shape} from {self.layer.describe()}>"


class Layer:
    """A layer of a Sequential or functional model."""
    kind = "layer"
    reads_many = False  # Add reads a list of tensors; every other layer one

    def __init__(self, name: Optional[str] = None, input_shape: Optional[Sequence[int]] = None, **unknown) -> None:
        if name is not None and not isinstance(name, str):
            raise TypeError(f"{self.kind}: name must be a string, not {type(name).__name__}")
        self.name = name
        if unknown:
            raise TypeError(f"{self.describe()}: unknown argument {next(iter(unknown))!r}")
        self.input_shape = _shape(self.describe(), "input_shape", input_shape) if input_shape is not None else None
        self.inbound: Optional[List[KerasTensor]] = None  # what a functional call read
        self.call_index = -1  # when it was called (see _CALLS)
        self.output: Optional[KerasTensor] = None

    def describe(self) -> str:
        return f"{type(self).__name__}{'(' + repr(self.name) + ')' if getattr(self, 'name', None) else ''}"

    def to_proto(self) -> "job_pb2.LayerSpec":
        spec = job_pb2.LayerSpec()
        if self.name:
            spec.name = self.name
        self._fill(spec)
        return spec

    def _fill(self, spec: "job_pb2.LayerSpec") -> None:
        raise NotImplementedError

    def __call__(self, inputs: Union[KerasTensor, Sequence[KerasTensor]]) -> KerasTensor:
        """Records that this layer reads ``inputs`` (a list for Add); returns its output."""
        d = self.describe()
        if self.inbound is not None:
            raise ValueError(f"{d}: the layer was already called; weft layers own their variables (one LayerSpec "
                             "each), so a layer cannot be shared between calls: make another layer")
        if self.reads_many:
            if not isinstance(inputs, (list, tuple)):
                raise TypeError(f"{d}: call it on a list of tensors, not {type(inputs).__name__}")
            tensors = list(inputs)
            if len(tensors) < 2:
                raise ValueError(f"{d}: {self.kind} needs two or more inputs, got {len(tensors)}")
        else:
            if isinstance(inputs, (list, tuple)):
                raise TypeError(f"{d}: reads one tensor, not a list of {len(inputs)}")
            tensors = [inputs]
        for t in tensors:
            if not isinstance(t, KerasTensor):
                raise TypeError(f"{d}: inputs must be tensors from weft.keras.Input or a layer's call, "
                                f"not {type(t).__name__}")
        try:
            shape = output_shape(self.to_proto(), [t.shape[1:] for t in tensors])
        except ValueError as e:
            raise ValueError(f"{d}: {e}") from None
        self.inbound = tensors
        self.call_index = next(_CALLS)
        self.output = KerasTensor(self, shape)
        return self.output


class InputLayer(Layer):
    """The input's shape (one example), as ``keras.Input(shape=...)`` gives it."""

    def __init__(self, shape: Sequence[int], name: Optional[str] = None) -> None:
        super().__init__(name=name, input_shape=shape)
        self.output = KerasTensor(self, self.input_shape)

    def __call__(self, inputs):
        raise TypeError(f"{self.describe()}: an input reads nothing; use weft.keras.Input(shape=...)")


def Input(shape: Sequence[int], name: Optional[str] = None) -> KerasTensor:  # noqa: N802 (Keras' name)
    """The model's input, as a symbolic tensor (also the first item of a Sequential)."""
    return InputLayer(shape, name).output


class Dense(Layer):
    def __init__(self, units: int, activation: Optional[str] = None, use_bias: bool = True, **kw) -> None:
        super().__init__(**kw)
        self.units = _positive_int(self.describe(), "units", units)
        self.activation = activation
        self._act = _activation(self.describe(), activation)
        self.use_bias = _bool(self.describe(), "use_bias", use_bias)

    def _fill(self, spec):
        spec.dense.units = self.units
        spec.dense.activation = self._act
        spec.dense.no_bias = not self.use_bias


class Conv2D(Layer):
    def __init__(self, filters: int, kernel_size: Union[int, Tuple[int, int]], strides: Union[int, Tuple] = 1,
                 padding: str = "valid", activation: Optional[str] = None, use_bias: bool = True, **kw) -> None:
        super().__init__(**kw)
        d = self.describe()
        self.filters = _positive_int(d, "filters", filters)
        self.kernel_size = _square(d, "kernel_size", kernel_size)
        self.strides = _square(d, "strides", strides)
        self.padding = _padding(d, padding)
        self.activation = activation
        self._act = _activation(d, activation)
        self.use_bias = _bool(d, "use_bias", use_bias)

    def _fill(self, spec):
        c = spec.conv2d
        c.filters, c.kernel_size, c.stride, c.padding, c.activation = (
            self.filters, self.kernel_size, self.strides, self.padding, self._act)
        c.no_bias = not self.use_bias


class MaxPooling2D(Layer):
    def __init__(self, pool_size: Union[int, Tuple[int, int]] = 2, strides=None, padding: str = "valid",
                 **kw) -> None:
        super().__init__(**kw)
        d = self.describe()
        self.pool_size = _square(d, "pool_size", pool_size)
        self.strides = _square(d, "strides", strides) if strides is not None else self.pool_size
        self.padding = _padding(d, padding)

    def _fill(self, spec):
        spec.max_pool.pool_size, spec.max_pool.stride, spec.max_pool.padding = (
            self.pool_size, self.strides, self.padding)


MaxPool2D = MaxPooling2D


class Flatten(Layer):
    def _fill(self, spec):
        spec.flatten.SetInParent()


class Dropout(Layer):
    def __init__(self, rate: float, **kw) -> None:
        super().__init__(**kw)
        if isinstance(rate, bool) or not isinstance(rate, (int, float)):
            raise TypeError(f"{self.describe()}: rate must be a number, not {type(rate).__name__}")
        if not 0 <= rate < 1:
            raise ValueError(f"{self.describe()}: rate must be in [0, 1), got {rate}")
        self.rate = float(rate)

    def _fill(self, spec):
        spec.dropout.rate = self.rate


class Activation(Layer):
    def __init__(self, activation: str, **kw) -> None:
        super().__init__(**kw)
        self.activation = activation
        self._act = _activation(self.describe(), activation)

    def _fill(self, spec):
        spec.activation.activation = self._act


class Reshape(Layer):
    def __init__(self, target_shape: Sequence[int], **kw) -> None:
        super().__init__(**kw)
        self.target_shape = _shape(self.describe(), "target_shape", target_shape)

    def _fill(self, spec):
        spec.reshape.shape.extend(self.target_shape)


# Keras's BatchNormalization arguments that weft fixes, with the value it has.
_BATCH_NORM_FIXED = {
    "axis": -1, "center": True, "scale": True, "beta_initializer": "zeros", "gamma_initializer": "ones",
    "moving_mean_initializer": "zeros", "moving_variance_initializer": "ones", "beta_regularizer": None,
    "gamma_regularizer": None, "beta_constraint": None, "gamma_constraint": None, "renorm": False,
    "trainable": True, "fused": None, "virtual_batch_size": None, "adjustment": None,
}


class BatchNormalization(Layer):
    """Normalises the last axis: with each batch's statistics while training
    (keeping their moving averages), with the moving averages after.

    ``activation`` (weft's, not Keras's) is applied after normalising, as an
    Activation layer after it would be. ``synchronized=True`` normalises with
    the statistics of the global batch across the replicas (one all-reduce
    each way), as Keras's does under a distribution strategy.
    """

    def __init__(self, momentum: float = 0.99, epsilon: float = 1e-3, activation: Optional[str] = None,
                 synchronized: bool = False, name: Optional[str] = None,
                 input_shape: Optional[Sequence[int]] = None, **keras) -> None:
        super().__init__(name=name, input_shape=input_shape)
        d = self.describe()
        _only_weft_values(d, keras, _BATCH_NORM_FIXED,
                          "weft's batch_norm normalises the last axis, with a trainable gamma (ones) and beta (zeros)")
        self.momentum = _fraction(d, "momentum", momentum, 0.0, 1.0)
        self.epsilon = _fraction(d, "epsilon", epsilon, 0.0)
        self.activation = activation
        self._act = _activation(d, activation)
        if not isinstance(synchronized, bool):
            raise TypeError(f"{d}: synchronized must be True or False, got {synchronized!r}")
        self.synchronized = synchronized

    def _fill(self, spec):
        bn = spec.batch_norm
        bn.momentum, bn.epsilon, bn.activation = self.momentum, self.epsilon, self._act
        bn.synchronized = self.synchronized


# Keras's LayerNormalization arguments that weft fixes, with the value it has.
_LAYER_NORM_FIXED = {
    "axis": (-1, [-1], (-1,)), "center": True, "scale": True, "beta_initializer": "zeros",
    "gamma_initializer": "ones", "beta_regularizer": None, "gamma_regularizer": None, "beta_constraint": None,
    "gamma_constraint": None, "rms_scaling": False, "trainable": True,
}


class LayerNormalization(Layer):
    """Normalises each example over its last axis with that example's own
    mean and variance (the same in training and inference: no moving
    statistics), then scales by gamma and shifts by beta.

    ``activation`` (weft's, not Keras's) is applied after normalising, as an
    Activation layer after it would be.
    """

    def __init__(self, axis=-1, epsilon: float = 1e-3, activation: Optional[str] = None,
                 name: Optional[str] = None, input_shape: Optional[Sequence[int]] = None, **keras) -> None:
        super().__init__(name=name, input_shape=input_shape)
        d = self.describe()
        _only_weft_values(d, dict(keras, axis=axis), _LAYER_NORM_FIXED,
                          "weft's layer_norm normalises the last axis, with a trainable gamma (ones) and beta (zeros)")
        self.axis = -1
        self.epsilon = _fraction(d, "epsilon", epsilon, 0.0)
        self.activation = activation
        self._act = _activation(d, activation)

    def _fill(self, spec):
        ln = spec.layer_norm
        ln.epsilon, ln.activation = self.epsilon, self._act


class Add(Layer):
    """The elementwise sum of two or more tensors of one shape (a residual join).

    ``activation`` (weft's, not Keras's) is applied to the sum.
    """
    kind = "add"
    reads_many = True

    def __init__(self, activation: Optional[str] = None, **kw) -> None:
        super().__init__(**kw)
        self.activation = activation
        self._act = _activation(self.describe(), activation)

    def _fill(self, spec):
        spec.add.activation = self._act


class GlobalAveragePooling2D(Layer):
    """(height, width, channels) -> (channels,): the mean over every position."""

    def __init__(self, name: Optional[str] = None, input_shape: Optional[Sequence[int]] = None, **keras) -> None:
        super().__init__(name=name, input_shape=input_shape)
        _only_weft_values(self.describe(), keras, {"data_format": (None, "channels_last"), "keepdims": False},
                          "weft pools channels-last images to (channels,)")

    def _fill(self, spec):
        spec.global_avg_pool.SetInParent()


GlobalAvgPool2D = GlobalAveragePooling2D

from weft.keras.embedding_layers import Embedding, PositionEmbedding, output_shape  # noqa: E402,F401,F811 (see there)
from weft.keras.attention_layers import MultiHeadAttention  # noqa: E402,F401 (imports this module: at the end)
from weft.keras.join_layers import AveragePooling2D, AvgPool2D, Concatenate, output_shape  # noqa: E402,F401,F811 (see there)
from weft.keras.recurrent_layers import GRU, LSTM, output_shape  # noqa: E402,F401,F811 (see there)
