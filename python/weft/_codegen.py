"""Generates weft's gRPC and protobuf Python modules from the repository's proto/.

Used twice: by ``setup.py`` when the package is built or installed
(``pip install ./python``), and on first import from a source tree (the
``python/`` folder on ``sys.path``) when the generated modules are missing or
older than the ``.proto`` files. Both run Debian's ``protoc`` with
``grpc_python_plugin``; nothing is downloaded.

protoc names imports after the proto paths (``from proto import tensor_pb2``);
the generated files are rewritten to import from ``weft._generated.proto`` so
that the package owns its namespace and no top-level ``proto`` module is
installed.
"""
from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import List, Optional

PACKAGE_DIR = Path(__file__).resolve().parent
GENERATED_DIR = PACKAGE_DIR / "_generated"
STAMP = "SOURCES.sha256"

_IMPORT = re.compile(r"^from proto import (\w+) as (\w+)$", re.M)


def find_proto_root() -> Optional[Path]:
    """The repository root holding proto/*.proto, when this is a source tree."""
    for candidate in (PACKAGE_DIR.parent.parent, Path(os.environ.get("WEFT_PROTO_ROOT", "/nonexistent"))):
        if (candidate / "proto" / "master_service.proto").is_file():
            return candidate
    return None


def _sources(root: Path) -> List[Path]:
    return sorted((root / "proto").glob("*.proto"))


def sources_digest(root: Path) -> str:
    h = hashlib.sha256()
    for p in _sources(root):
        h.update(p.name.encode() + b"\0" + p.read_bytes() + b"\0")
    return h.hexdigest()


def is_current(root: Path, out: Path = GENERATED_DIR) -> bool:
    stamp = out / STAMP
    return stamp.is_file() and stamp.read_text().strip() == sources_digest(root)


def _tool(name: str) -> str:
    path = shutil.which(name) or (f"/usr/bin/{name}" if os.access(f"/usr/bin/{name}", os.X_OK) else None)
    if path is None:
        raise RuntimeError(
            f"{name} not found: weft's Python modules are generated from proto/ with Debian's "
            "protobuf-compiler and protobuf-compiler-grpc packages")
    return path


def generate(root: Path, out: Path = GENERATED_DIR) -> None:
    """Writes weft/_generated/proto/*_pb2(_grpc).py for root/proto/*.proto.

    The new tree is built beside ``out`` and renamed into place, so a
    concurrent importer sees the old modules or the new ones, never half.
    """
    protoc, plugin = _tool("protoc"), _tool("grpc_python_plugin")
    out = Path(out).resolve()
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix="._generated-", dir=out.parent))
    try:
        sources = [str(p.relative_to(root)) for p in _sources(root)]
        subprocess.run([protoc, f"-I{root}", f"--python_out={tmp}", f"--grpc_out={tmp}",
                        f"--plugin=protoc-gen-grpc={plugin}", *sources],
                       check=True, cwd=root, capture_output=True, text=True)
        for f in (tmp / "proto").glob("*.py"):
            text = _IMPORT.sub(r"from weft._generated.proto import \1 as \2", f.read_text())
            f.write_text(text)
        (tmp / "__init__.py").write_text("")
        (tmp / "proto" / "__init__.py").write_text("")
        (tmp / STAMP).write_text(sources_digest(root) + "\n")
        old = None
        if out.exists():
            old = Path(tempfile.mkdtemp(prefix="._old-", dir=out.parent))
            os.rename(out, old / "g")
        os.rename(tmp, out)
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)
    except subprocess.CalledProcessError as e:
        shutil.rmtree(tmp, ignore_errors=True)
        raise RuntimeError(f"protoc failed on weft's protos: {e.stderr.strip()}") from e
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def ensure_generated() -> None:
    """Generates the modules in a source tree when missing or stale."""
    root = find_proto_root()
    if root is None:
        if not (GENERATED_DIR / "proto" / "master_service_pb2.py").is_file():
            raise ImportError("weft's generated protocol modules are missing and no proto/ folder was found "
                              "to generate them from: install with `pip install ./python`")
        return
    if not is_current(root):
        generate(root)
