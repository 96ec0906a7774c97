"""``weft.LocalCluster``: a real cluster of weft processes on this machine, for examples and tests.

Starts ``weft local --workers=N --ps=M`` (a master and its tasks on
127.0.0.1, over mTLS with certificates it makes), waits until the master
lists every task's devices, and gives a ``Client`` for it. Stopping it (or
leaving its ``with`` block) stops every process.
"""
from __future__ import annotations

import os
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path
from typing import List, Optional

from weft.client import Client


def find_weft_binary() -> str:
    """The ``weft`` executable: $WEFT_BINARY, the source tree's Bazel build, or PATH."""
    env = os.environ.get("WEFT_BINARY") or os.environ.get("WEFT")
    candidates = [env] if env else []
    here = Path(__file__).resolve().parent.parent.parent
    candidates += [str(here / "bazel-bin" / "client" / "weft"), shutil.which("weft") or ""]
    for c in candidates:
        if c and os.access(c, os.X_OK) and not os.path.isdir(c):
            return c
    raise FileNotFoundError("the weft binary was not found: set WEFT_BINARY, build it (bazel build //client:weft) "
                            "or put it on PATH")


class LocalCluster:
    """``weft local`` with ``workers`` workers and ``ps`` parameter servers."""

    def __init__(self, workers: int = 2, ps: int = 0, *, binary: Optional[str] = None,
                 log_dir: Optional[str] = None, checkpoint_root: Optional[str] = None,
                 data_root: Optional[str] = None, extra_args: Optional[List[str]] = None,
                 timeout: float = 120.0) -> None:
        for name, v, low in (("workers", workers, 1), ("ps", ps, 0)):
            if isinstance(v, bool) or not isinstance(v, int) or v < low:
                raise ValueError(f"{name} must be an int >= {low}, got {v!r}")
        self.binary = binary or find_weft_binary()
        self._own_dir = log_dir is None
        self.log_dir = Path(log_dir or tempfile.mkdtemp(prefix="weft-local-"))
        self.log_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        self.checkpoint_root = checkpoint_root or str(self.log_dir / "checkpoints")
        args = [self.binary, "local", f"--workers={workers}", f"--ps={ps}", f"--log_dir={self.log_dir}",
                f"--checkpoint_root={self.checkpoint_root}"]
        if data_root:
            args.append(f"--data_root={data_root}")
        args += list(extra_args or [])
        self._out = open(self.log_dir / "weft-local.out", "w")
        self.proc = subprocess.Popen(args, stdout=self._out, stderr=subprocess.STDOUT, start_new_session=True)
        self.tasks = workers + ps
        try:
            self._wait(timeout)
        except BaseException:
            self.stop()
            raise

    @property
    def tls_dir(self) -> Path:
        return self.log_dir / "tls"

    @property
    def master(self) -> str:
        return f"127.0.0.1:{(self.log_dir / 'master-0.port').read_text().strip()}"

    def client(self, **kw) -> Client:
        """A Client for this cluster with its local user's certificate."""
        return Client(self.master, ca=str(self.tls_dir / "ca.crt"), cert=str(self.tls_dir / "local.crt"),
                      key=str(self.tls_dir / "local.key"), **kw)

    def env(self) -> dict:
        """Environment variables that point weft (and the CLI) at this cluster."""
        return {"WEFT_MASTER": self.master, "WEFT_CA": str(self.tls_dir / "ca.crt"),
                "WEFT_CERT": str(self.tls_dir / "local.crt"), "WEFT_KEY": str(self.tls_dir / "local.key")}

    def _wait(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        last = None
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"weft local exited with {self.proc.returncode}: {self.output()[-2000:]}")
            if (self.log_dir / "master-0.port").is_file() and (self.tls_dir / "local.key").is_file():
                try:
                    with self.client(timeout=5) as c:
                        if len(c.devices()) >= self.tasks:
                            return
                except Exception as e:  # not up yet
                    last = e
            time.sleep(0.2)
        raise TimeoutError(f"the local cluster did not come up within {timeout} s (last: {last})")

    def output(self) -> str:
        self._out.flush()
        return (self.log_dir / "weft-local.out").read_text(errors="replace")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
        self._out.close()

    def __enter__(self) -> "LocalCluster":
        return self

    def __exit__(self, *exc) -> None:
        self.stop()
