"""Reading a job's checkpoint directory from Python, as ``weft checkpoints DIR`` does.

A checkpoint is ``DIR/step-<12 digits>/`` holding shard files and a MANIFEST
(proto/checkpoint.proto; layout in ps/manifest.h): magic "WEFTMANI", u32
version, u32 length N, u32 masked CRC-32C, then N bytes of CheckpointManifest.
"""
from __future__ import annotations

import os
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import List, Optional, Union

from weft._pb import checkpoint_pb2

_MAGIC = b"WEFTMANI"
_MAX_MANIFEST = 16 << 20


def _crc32c_table() -> List[int]:
    table = []
    for i in range(256):
        c = i
        for _ in range(8):
            c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1
        table.append(c)
    return table


_TABLE = _crc32c_table()


def crc32c(data: bytes) -> int:
    c = 0xFFFFFFFF
    for b in data:
        c = _TABLE[(c ^ b) & 0xFF] ^ (c >> 8)
    return c ^ 0xFFFFFFFF


def _unmask(masked: int) -> int:
    rot = (masked - 0xA282EAD8) & 0xFFFFFFFF
    return ((rot >> 17) | (rot << 15)) & 0xFFFFFFFF


@dataclass
class Checkpoint:
    """One checkpoint directory and what its manifest says."""
    path: str
    step: Optional[int]
    valid: bool
    job: Optional[str] = None
    wall_time_micros: Optional[int] = None
    shards: Optional[int] = None
    bytes: Optional[int] = None
    problem: Optional[str] = None


def read_manifest(directory: Union[str, os.PathLike]) -> "checkpoint_pb2.CheckpointManifest":
    """The manifest of one checkpoint directory; ValueError naming the file and what is wrong."""
    path = Path(directory) / "MANIFEST"
    try:
        size = path.stat().st_size
    except OSError as e:
        raise ValueError(f"manifest {path}: {e.strerror}") from None
    if size > _MAX_MANIFEST:
        raise ValueError(f"manifest {path}: {size} bytes, over the limit of {_MAX_MANIFEST} for a manifest")
    data = path.read_bytes()
    if len(data) < 20:
        raise ValueError(f"manifest {path}: truncated: {len(data)} bytes")
    if data[:8] != _MAGIC:
        raise ValueError(f"manifest {path}: bad magic: not a weft manifest")
    version, n, masked = struct.unpack_from("<III", data, 8)
    if version != 1:
        raise ValueError(f"manifest {path} has format version {version}; this client reads version 1")
    if n != len(data) - 20:
        raise ValueError(f"manifest {path}: the length field records {n} bytes of body, the file has {len(data) - 20}")
    body = data[20:]
    if _unmask(masked) != crc32c(body):
        raise ValueError(f"manifest {path}: checksum mismatch")
    m = checkpoint_pb2.CheckpointManifest()
    m.ParseFromString(body)
    return m


def list_checkpoints(directory: Union[str, os.PathLike]) -> List[Checkpoint]:
    """Every ``step-*`` checkpoint under ``directory``, newest first, each checked.

    A checkpoint is valid when its manifest reads and every shard file it
    lists exists with the recorded size (the shards' CRCs are checked by a
    restore, not here).
    """
    root = Path(directory)
    if not root.is_dir():
        raise ValueError(f"directory: {root} is not a directory")
    out = []
    for d in sorted(root.glob("step-*"), reverse=True):
        if not d.is_dir():
            continue
        try:
            step = int(d.name[len("step-"):])
        except ValueError:
            step = None
        try:
            m = read_manifest(d)
            total, problem = 0, None
            for shard in m.shard:
                f = d / shard.file
                if ".." in Path(shard.file).parts or not f.is_file():
                    problem = f"shard file {f} is missing"
                    break
                if f.stat().st_size != shard.size:
                    problem = f"shard file {f} has {f.stat().st_size} bytes, the manifest records {shard.size}"
                    break
                total += shard.size
            out.append(Checkpoint(str(d), m.step, problem is None, m.job_name, m.wall_time_micros, len(m.shard),
                                  total, problem))
        except ValueError as e:
            out.append(Checkpoint(str(d), step, False, problem=str(e)))
    out.sort(key=lambda c: (c.step is not None, c.step or 0), reverse=True)
    return out


_SHARD_MAGIC = b"WEFTSHRD"


def _newest_valid(path: Path) -> Path:
    if (path / "MANIFEST").is_file():
        return path
    for c in list_checkpoints(path):
        if c.valid:
            return Path(c.path)
    raise ValueError(f"checkpoint: no valid checkpoint under {path}")


def read_shard(path: Union[str, os.PathLike]):
    """The variables of one shard file (ps/shard_file.h's layout), each checked against its CRC-32C."""
    import numpy as np
    from weft.tensors import numpy_dtype
    data = Path(path).read_bytes()
    if len(data) < 20 or data[:8] != _SHARD_MAGIC:
        raise ValueError(f"shard {path}: not a weft shard file")
    version, n, masked = struct.unpack_from("<III", data, 8)
    if version != 1:
        raise ValueError(f"shard {path} has format version {version}; this client reads version 1")
    if 20 + n > len(data) or _unmask(masked) != crc32c(data[20:20 + n]):
        raise ValueError(f"shard {path}: header checksum mismatch or truncated")
    header = checkpoint_pb2.ShardHeader()
    header.ParseFromString(data[20:20 + n])
    if header.file_size != len(data):
        raise ValueError(f"shard {path}: {len(data)} bytes, the header records {header.file_size}")
    out = {}
    for e in header.entry:
        dt = numpy_dtype(e.dtype)
        shape = tuple(e.shape.dim)
        count = int(np.prod(shape, dtype=np.int64)) if shape else 1
        if e.length != count * dt.itemsize or e.offset + e.length > len(data):
            raise ValueError(f"shard {path}: entry {e.name!r} has a bad length or offset")
        payload = data[e.offset:e.offset + e.length]
        if crc32c(payload) != e.crc32c:
            raise ValueError(f"shard {path}: entry {e.name!r}: checksum mismatch")
        out[e.name] = np.frombuffer(payload, dtype=dt).reshape(shape).copy()
    return out


def read_variables(checkpoint: Union[str, os.PathLike]):
    """Every variable of a checkpoint (a step directory, or the newest valid one under a job's dir)."""
    d = _newest_valid(Path(checkpoint))
    m = read_manifest(d)
    out = {}
    for shard in m.shard:
        out.update(read_shard(d / shard.file))
    return out
