"""NumPy arrays to and from weft's TensorProto (proto/tensor.proto)."""
from __future__ import annotations

from typing import Any

import numpy as np

from weft._pb import tensor_pb2

_TO_NUMPY = {
    tensor_pb2.DT_FLOAT: np.dtype("<f4"),
    tensor_pb2.DT_HALF: np.dtype("<f2"),
    tensor_pb2.DT_INT32: np.dtype("<i4"),
    tensor_pb2.DT_INT64: np.dtype("<i8"),
    tensor_pb2.DT_BOOL: np.dtype("bool"),
}
_NAMES = {"float32": tensor_pb2.DT_FLOAT, "float16": tensor_pb2.DT_HALF, "int32": tensor_pb2.DT_INT32,
          "int64": tensor_pb2.DT_INT64, "bool": tensor_pb2.DT_BOOL}


def as_dtype(dtype: Any) -> int:
    """weft's DataType for a NumPy dtype, a name ("float32") or a DataType."""
    if isinstance(dtype, int) and dtype in _TO_NUMPY:
        return dtype
    try:
        name = np.dtype(dtype).name
    except TypeError:
        raise TypeError(f"dtype: {dtype!r} is not a dtype") from None
    if name not in _NAMES:
        raise TypeError(f"dtype: weft has no {name} tensors (float32, float16, int32, int64, bool)")
    return _NAMES[name]


def numpy_dtype(dtype: int) -> np.dtype:
    if dtype not in _TO_NUMPY:
        raise ValueError(f"unknown DataType {dtype}")
    return _TO_NUMPY[dtype]


def to_proto(value: Any, dtype: Any = None, out: "tensor_pb2.TensorProto" = None) -> "tensor_pb2.TensorProto":
    """A TensorProto holding ``value`` (anything np.asarray takes).

    Python floats become float32 and ints int32 unless ``dtype`` says
    otherwise, as in TensorFlow.
    """
    arr = np.asarray(value)
    if dtype is None:
        if arr.dtype.kind == "f":
            dtype = tensor_pb2.DT_HALF if arr.dtype == np.float16 else tensor_pb2.DT_FLOAT
        elif arr.dtype.kind in "iu":
            dtype = tensor_pb2.DT_INT64 if arr.dtype == np.int64 and arr.size and (
                arr.max() > 2**31 - 1 or arr.min() < -2**31) else tensor_pb2.DT_INT32
        elif arr.dtype.kind == "b":
            dtype = tensor_pb2.DT_BOOL
        else:
            raise TypeError(f"cannot convert {arr.dtype} values to a weft tensor")
    dtype = as_dtype(dtype)
    arr = np.asarray(arr, dtype=numpy_dtype(dtype), order="C")  # (ascontiguousarray makes scalars 1-d)
    t = out if out is not None else tensor_pb2.TensorProto()
    t.dtype = dtype
    del t.shape.dim[:]
    t.shape.dim.extend(int(d) for d in arr.shape)
    t.content = arr.tobytes()
    return t


def to_numpy(t: "tensor_pb2.TensorProto") -> np.ndarray:
    """The array a TensorProto holds (a read-only view of its bytes)."""
    dt = numpy_dtype(t.dtype)
    shape = tuple(int(d) for d in t.shape.dim)
    count = int(np.prod(shape, dtype=np.int64)) if shape else 1
    if len(t.content) != count * dt.itemsize:
        raise ValueError(f"tensor of shape {list(shape)} {dt.name}: {len(t.content)} bytes, "
                         f"expected {count * dt.itemsize}")
    arr = np.frombuffer(t.content, dtype=dt, count=count).reshape(shape)
    return arr[()] if shape == () else arr
