"""Keras's ``AveragePooling2D`` and ``Concatenate``, each one LayerSpec of a
weft ModelSpec (proto/job.proto's AvgPoolLayer and ConcatenateLayer).

They are reached as ``weft.keras.layers.AveragePooling2D`` (``AvgPool2D``)
and ``weft.keras.layers.Concatenate``: layers.py imports them, and this
module's ``output_shape`` (which knows their shapes and hands every other
layer to the one before it) at its end, so that a layer's call and
``predict`` shape them as graph/join_lowering.cc does.
"""
from __future__ import annotations

from typing import Optional, Sequence, Tuple, Union

from weft._pb import job_pb2
from weft.keras import layers as _layers
from weft.keras.layers import Layer, _padding, _square, _window

_base_output_shape = _layers.output_shape


def output_shape(spec: "job_pb2.LayerSpec", inputs: Sequence[Tuple[int, ...]]) -> Tuple[int, ...]:
    """layers.output_shape, with avg_pool's and concatenate's shapes."""
    kind = spec.WhichOneof("kind")
    if kind == "avg_pool":
        x = tuple(inputs[0])
        if len(x) != 3:
            raise ValueError(f"avg_pool needs an image input (height, width, channels), got {x}")
        p = spec.avg_pool
        k, s, padding = p.pool_size or 2, p.stride or p.pool_size or 2, p.padding or "VALID"
        h, w = _window(x[0], k, s, padding), _window(x[1], k, s, padding)
        if h <= 0 or w <= 0:
            raise ValueError(f"avg_pool: a {k}x{k} window does not fit the input {x} with {padding} padding")
        return (h, w, x[2])
    if kind == "concatenate":
        x = tuple(inputs[0])
        for k, other in enumerate(inputs[1:], 1):
            other = tuple(other)
            if len(other) != len(x) or other[:-1] != x[:-1] or not x:
                raise ValueError(f"concatenate's inputs must agree on every dimension but the last: input 0 is "
                                 f"{x}, input {k} is {other}")
        return x[:-1] + (sum(tuple(i)[-1] for i in inputs),)
    return _base_output_shape(spec, inputs)


class AveragePooling2D(Layer):
    """The mean of each ``pool_size`` x ``pool_size`` window; with ``'same'``
    padding, of the window's positions inside the image only (as Keras)."""

    def __init__(self, pool_size: Union[int, Tuple[int, int]] = 2, strides=None, padding: str = "valid",
                 data_format: Optional[str] = None, **kw) -> None:
        super().__init__(**kw)
        d = self.describe()
        if data_format not in (None, "channels_last"):
            raise ValueError(f"{d}: data_format must be 'channels_last' (weft images are NHWC), got {data_format!r}")
        self.pool_size = _square(d, "pool_size", pool_size)
        self.strides = _square(d, "strides", strides) if strides is not None else self.pool_size
        self.padding = _padding(d, padding)

    def _fill(self, spec):
        spec.avg_pool.pool_size, spec.avg_pool.stride, spec.avg_pool.padding = (
            self.pool_size, self.strides, self.padding)


AvgPool2D = AveragePooling2D


class Concatenate(Layer):
    """Two or more tensors joined along the last axis (channels or
    features); they agree on every other dimension. Only ``axis=-1``."""
    kind = "concatenate"
    reads_many = True

    def __init__(self, axis: int = -1, **kw) -> None:
        super().__init__(**kw)
        if isinstance(axis, bool) or axis != -1:
            raise ValueError(f"{self.describe()}: weft concatenates along the last axis only (axis=-1), got {axis!r}")

    def _fill(self, spec):
        spec.concatenate.SetInParent()
