"""Keras-style layers, each one LayerSpec of a weft ModelSpec (proto/job.proto).

Only what weft's model lowering has: Dense, Conv2D, MaxPooling2D, Flatten,
Dropout, Activation, Reshape, and ``Input`` for the input shape. Arguments
are checked when the layer is made; a wrong one raises ValueError or
TypeError naming the layer and the argument.
"""
from __future__ import annotations

from typing import Optional, Sequence, Tuple, Union

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


class Layer:
    """A layer of a Sequential model."""
    kind = "layer"

    def __init__(self, name: Optional[str] = None, input_shape: Optional[Sequence[int]] = None) -> None:
        if name is not None and not isinstance(name, str):
            raise TypeError(f"{self.kind}: name must be a string, not {type(name).__name__}")
        self.name = name
        self.input_shape = _shape(self.describe(), "input_shape", input_shape) if input_shape is not None else None

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


class InputLayer(Layer):
    """The input's shape (one example), as ``keras.Input(shape=...)`` gives it."""

    def __init__(self, shape: Sequence[int], name: Optional[str] = None) -> None:
        super().__init__(name=name, input_shape=shape)


def Input(shape: Sequence[int], name: Optional[str] = None) -> InputLayer:  # noqa: N802 (Keras' name)
    return InputLayer(shape, name)


class Dense(Layer):
    def __init__(self, units: int, activation: Optional[str] = None, use_bias: bool = True, **kw) -> None:
        super().__init__(**kw)
        self.units = _positive_int(self.describe(), "units", units)
        self.activation = activation
        self._act = _activation(self.describe(), activation)
        if not isinstance(use_bias, bool):
            raise TypeError(f"{self.describe()}: use_bias must be a bool")
        self.use_bias = use_bias

    def _fill(self, spec):
        spec.dense.units = self.units
        spec.dense.activation = self._act
        spec.dense.no_bias = not self.use_bias


class Conv2D(Layer):
    def __init__(self, filters: int, kernel_size: Union[int, Tuple[int, int]], strides: Union[int, Tuple] = 1,
                 padding: str = "valid", activation: Optional[str] = None, **kw) -> None:
        super().__init__(**kw)
        d = self.describe()
        self.filters = _positive_int(d, "filters", filters)
        self.kernel_size = _square(d, "kernel_size", kernel_size)
        self.strides = _square(d, "strides", strides)
        self.padding = _padding(d, padding)
        self._act = _activation(d, activation)

    def _fill(self, spec):
        c = spec.conv2d
        c.filters, c.kernel_size, c.stride, c.padding, c.activation = (
            self.filters, self.kernel_size, self.strides, self.padding, self._act)


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
