"""Training data for ``fit``: dataset files on the cluster, or NumPy arrays sent to it.

``Dataset`` names IDX (or TFRecord) files that every task reads from its own
``--data_root`` (``weft.data.fashion_mnist()`` is Debian's Fashion-MNIST).

NumPy arrays are written as IDX files (uint8 examples, uint8 labels) and
streamed to the master once (``MasterService.UploadDataset``), which keeps
them by content hash and copies them to the tasks that read them; each task
then takes its own shard, as from files. Nothing goes through the master per
step, and sending the same arrays again costs no transfer on the tasks.
weft's datasets hold 8-bit examples: arrays must be uint8, or floats that are
exactly such bytes divided by a scale (``x / 255.0``), with integer labels
in 0..255. Integer examples are pixels, divided by 255, unless the model's
first layer is an Embedding: they are then token ids, used as they are.
"""
from __future__ import annotations

import hashlib
import os
import struct
from typing import Iterator, Optional, Sequence, Tuple

import numpy as np

from weft._pb import job_pb2

#: Bytes per UploadDataset message.
CHUNK_BYTES = 1 << 20
FASHION_MNIST = "/usr/share/datasets/fashion-mnist"


class Dataset:
    """Dataset files the tasks read (a DatasetSpec): IDX by default.

    ``dir``: the folder (absolute, inside the tasks' --data_root). The IDX
    file names default to MNIST's (train-images-idx3-ubyte.gz, ...).
    ``scale``: examples are divided by it (255 for 8-bit images).
    """

    def __init__(self, dir: Optional[str] = None, *, scale: float = 255.0, train_images: str = "",  # noqa: A002
                 train_labels: str = "", test_images: str = "", test_labels: str = "", shuffle: bool = True,
                 train_limit: int = 0, test_limit: int = 0, spec: Optional["job_pb2.DatasetSpec"] = None) -> None:
        if spec is not None:
            if not isinstance(spec, job_pb2.DatasetSpec):
                raise TypeError(f"spec must be a DatasetSpec, not {type(spec).__name__}")
            self.spec = spec
            return
        if dir is not None and not isinstance(dir, str):
            raise TypeError(f"dir must be a string, not {type(dir).__name__}")
        if not dir and not train_images:
            raise ValueError("dir: name the dataset's folder (or train_images=...)")
        if isinstance(scale, bool) or not isinstance(scale, (int, float)) or scale <= 0:
            raise ValueError(f"scale must be a positive number, got {scale!r}")
        for name, v in (("train_limit", train_limit), ("test_limit", test_limit)):
            if isinstance(v, bool) or not isinstance(v, int) or v < 0:
                raise ValueError(f"{name} must be an int >= 0, got {v!r}")
        self.spec = job_pb2.DatasetSpec(format=job_pb2.DatasetSpec.IDX, dir=dir or "", scale=float(scale),
                                        train_images=train_images, train_labels=train_labels,
                                        test_images=test_images, test_labels=test_labels,
                                        no_shuffle=not shuffle, train_limit=train_limit, test_limit=test_limit)

    def to_proto(self) -> "job_pb2.DatasetSpec":
        return self.spec

    def __repr__(self) -> str:
        return f"Dataset(dir={self.spec.dir!r})"


def series(path: str, column: str, window: int, *, inputs: Optional[Sequence[str]] = None, horizon: int = 1,
           test_fraction: float = 0.1, raw: bool = False, train_limit: int = 0, test_limit: int = 0) -> Dataset:
    """A time series in a CSV file on the tasks (format SERIES), in file
    order: example i is ``window`` rows of the ``inputs`` columns (default:
    ``column`` alone; shape ``(window, len(inputs))``) and its float targets
    the ``horizon`` values of ``column`` after them. The last
    ``test_fraction`` is the test split; each column is standardised with
    its train split's mean and deviation unless ``raw``. For
    ``loss="mean_squared_error"``.
    """
    if not isinstance(path, str) or not os.path.isabs(path):
        raise ValueError(f"path: the CSV file's absolute path on the tasks, got {path!r}")
    if not isinstance(column, str) or not column:
        raise ValueError(f"column: name the CSV column, got {column!r}")
    for name, v, low in (("window", window, 1), ("horizon", horizon, 1), ("train_limit", train_limit, 0),
                         ("test_limit", test_limit, 0)):
        if isinstance(v, bool) or not isinstance(v, int) or v < low:
            raise ValueError(f"{name} must be an int >= {low}, got {v!r}")
    if isinstance(test_fraction, bool) or not isinstance(test_fraction, (int, float)) or not 0 < test_fraction < 1:
        raise ValueError(f"test_fraction must be in (0, 1), got {test_fraction!r}")
    spec = job_pb2.DatasetSpec(format=job_pb2.DatasetSpec.SERIES, dir=os.path.dirname(path),
                               train_files=[os.path.basename(path)], train_limit=train_limit, test_limit=test_limit)
    spec.series.column = column
    spec.series.window = window
    spec.series.horizon = horizon
    spec.series.test_fraction = float(test_fraction)
    spec.series.raw = bool(raw)
    if inputs is not None:
        if isinstance(inputs, str) or not all(isinstance(c, str) and c for c in inputs) or not inputs:
            raise ValueError(f"inputs: a list of CSV column names, got {inputs!r}")
        spec.series.inputs.extend(inputs)
    return Dataset(spec=spec)


def fashion_mnist(**kw) -> Dataset:
    """Debian's Fashion-MNIST (package dataset-fashion-mnist) on every task."""
    return Dataset(FASHION_MNIST, **kw)


def _as_examples(x, name: str, ids: bool = False) -> Tuple[np.ndarray, float]:
    """uint8 examples and the scale that maps them back to ``x``. With ``ids``
    (a model whose input is token ids), integer arrays are ids, kept as they
    are; otherwise they are 8-bit pixels, divided by 255."""
    if not isinstance(x, np.ndarray):
        try:
            x = np.asarray(x)
        except Exception:
            raise TypeError(f"{name} must be a NumPy array, not {type(x).__name__}") from None
    if x.ndim < 2 or x.shape[0] == 0:
        raise ValueError(f"{name} must hold at least one example: shape (examples, ...), got {x.shape}")
    if any(d == 0 for d in x.shape[1:]):
        raise ValueError(f"{name}: every dimension must be positive, got {x.shape}")
    if x.dtype.kind in "iu":
        if x.min() < 0 or x.max() > 255:
            raise ValueError(f"{name}: integer examples must be in 0..255 (weft's datasets are 8-bit), "
                             f"got {x.min()}..{x.max()}")
        return (x if x.dtype == np.uint8 else x.astype(np.uint8)), 1.0 if ids else 255.0
    if x.dtype.kind != "f":
        raise TypeError(f"{name} must hold numbers, not {x.dtype}")
    if not np.isfinite(x).all():
        raise ValueError(f"{name} holds NaN or infinite values")
    for scale in (255.0, 1.0):
        q = np.rint(x * scale)
        if q.min() >= 0 and q.max() <= 255 and np.allclose(q / scale, x, rtol=0, atol=1e-6):
            return q.astype(np.uint8), scale
    raise ValueError(f"{name}: weft's datasets hold 8-bit examples; float arrays must be bytes / 255 "
                     f"(or whole numbers 0..255), got values in {x.min():g}..{x.max():g}")


def _as_labels(y, name: str, count: int) -> np.ndarray:
    y = np.asarray(y)
    if y.ndim == 2 and y.shape[1] == 1:
        y = y[:, 0]
    if y.ndim != 1:
        raise ValueError(f"{name} must be one integer label per example (shape ({count},)), got shape {y.shape}")
    if y.shape[0] != count:
        raise ValueError(f"{name} has {y.shape[0]} labels for {count} examples")
    if y.dtype.kind == "f":
        if not np.all(np.equal(np.mod(y, 1), 0)):
            raise ValueError(f"{name} must hold integer class labels")
    elif y.dtype.kind not in "iu":
        raise TypeError(f"{name} must hold integer class labels, not {y.dtype}")
    if y.min() < 0 or y.max() > 255:
        raise ValueError(f"{name}: labels must be in 0..255, got {y.min()}..{y.max()}")
    return y.astype(np.uint8)


def idx_bytes(array: np.ndarray) -> bytes:
    """An uncompressed IDX file of uint8 ``array``."""
    assert array.dtype == np.uint8
    header = struct.pack(">BBBB", 0, 0, 0x08, array.ndim) + b"".join(struct.pack(">I", d) for d in array.shape)
    return header + np.ascontiguousarray(array).tobytes()


class ArrayData:
    """NumPy arrays prepared for upload: IDX bytes per split, and their scale."""

    def __init__(self, x, y, x_test=None, y_test=None, ids: bool = False) -> None:
        images, self.scale = _as_examples(x, "x", ids)
        self.example_shape = tuple(images.shape[1:])
        self.files = {"train_images": idx_bytes(images), "train_labels": idx_bytes(_as_labels(y, "y", len(images)))}
        self.train_examples = len(images)
        self.test_examples = 0
        if x_test is not None:
            test, scale = _as_examples(x_test, "validation_data x", ids)
            if tuple(test.shape[1:]) != self.example_shape:
                raise ValueError(f"validation_data: examples of shape {tuple(test.shape[1:])}, the training "
                                 f"examples have {self.example_shape}")
            if scale != self.scale:
                raise ValueError("validation_data: x and the validation x must have the same scale")
            self.files["test_images"] = idx_bytes(test)
            self.files["test_labels"] = idx_bytes(_as_labels(y_test, "validation_data y", len(test)))
            self.test_examples = len(test)

    def digest(self) -> str:
        h = hashlib.sha256()
        for name in sorted(self.files):
            h.update(name.encode() + b"\0" + str(len(self.files[name])).encode() + b"\0" + self.files[name])
        return h.hexdigest()

    def requests(self, request_type, file_type) -> Iterator:
        for name, data in self.files.items():
            yield request_type(file=file_type(name=name, size=len(data)))
            view = memoryview(data)
            for at in range(0, len(data), CHUNK_BYTES):
                yield request_type(data=bytes(view[at:at + CHUNK_BYTES]))

    def upload(self, client) -> "job_pb2.DatasetSpec":
        """Sends the arrays to ``client``'s master; the DatasetSpec that names them."""
        from weft import errors
        from weft._pb import master_service_pb2 as ms
        if not hasattr(ms, "UploadDatasetRequest"):
            raise errors.WeftError("this weft build has no dataset upload (MasterService.UploadDataset)")
        import grpc
        try:
            r = client.stub.UploadDataset(self.requests(ms.UploadDatasetRequest, ms.UploadedFile),
                                          timeout=max(client.timeout, 600.0))
        except grpc.RpcError as e:
            raise errors.from_rpc_error(e, "UploadDataset", client.master) from None
        return job_pb2.DatasetSpec(format=job_pb2.DatasetSpec.IDX, upload_id=r.dataset_id, scale=self.scale)
