"""Job control against a weft master: ``weft.Client``.

The master's address and the caller's credentials come from the arguments,
else from the environment the ``weft`` command line reads: ``WEFT_MASTER``
(or TF_CONFIG's ``master``/``chief`` task), ``WEFT_CA``, ``WEFT_CERT``,
``WEFT_KEY``, ``WEFT_TOKEN_FILE``. Like the command line, a client with no
credentials refuses to connect rather than fall back to plaintext; pass
``insecure=True`` only for a master started with ``--insecure``.
"""
from __future__ import annotations

import json
import os
import stat
from pathlib import Path
from typing import Any, Dict, Iterator, List, Optional, Union

import grpc

from weft import errors
from weft._pb import job_pb2, master_service_pb2 as ms, master_service_pb2_grpc as ms_grpc
from weft.job import JobStatus, as_job_spec

#: Seconds a unary call may take before it fails with DeadlineExceededError.
DEFAULT_TIMEOUT = 60.0
_MAX_MESSAGE = 256 << 20


def _master_from_env() -> Optional[str]:
    if os.environ.get("WEFT_MASTER"):
        return os.environ["WEFT_MASTER"]
    raw = os.environ.get("TF_CONFIG")
    if not raw:
        return None
    try:
        cluster = json.loads(raw).get("cluster", {})
    except (ValueError, AttributeError) as e:
        raise ValueError(f"TF_CONFIG is not a JSON object with a 'cluster': {e}") from None
    for job in ("master", "chief"):
        tasks = cluster.get(job)
        if isinstance(tasks, list) and tasks:
            return str(tasks[0])
        if isinstance(tasks, dict) and tasks:
            return str(tasks.get("0") or tasks[sorted(tasks)[0]])
    return None


def _read(path: str, what: str) -> bytes:
    try:
        return Path(path).read_bytes()
    except OSError as e:
        raise ValueError(f"{what}: cannot read {path}: {e.strerror}") from None


def read_token_file(path: str) -> str:
    """The bearer token in ``path``, checked as the command line checks it."""
    try:
        mode = os.stat(path).st_mode
    except OSError as e:
        raise ValueError(f"token_file: cannot read {path}: {e.strerror}") from None
    if mode & (stat.S_IRWXO):
        raise ValueError(f"token_file: {path} is open to other users: chmod 600 it")
    token = _read(path, "token_file").decode("utf-8", "replace").strip()
    if not token:
        raise ValueError(f"token_file: {path} is empty")
    if any(c.isspace() for c in token):
        raise ValueError(f"token_file: {path} holds more than one word; it must hold only the token")
    return token


class Client:
    """A connection to a weft master for submitting and following jobs.

    Args:
      master: "host:port" of the master; default ``WEFT_MASTER`` or TF_CONFIG.
      ca: PEM file of the cluster's CA (``WEFT_CA``), to verify the master.
      cert, key: PEM files of the user's certificate (``weft certs issue``).
      token: a bearer token, instead of a certificate; or ``token_file``.
      insecure: plaintext, for a master started with ``--insecure``.
      timeout: seconds per call (``watch`` streams without a deadline).
    """

    def __init__(self, master: Optional[str] = None, *, ca: Optional[str] = None, cert: Optional[str] = None,
                 key: Optional[str] = None, token: Optional[str] = None, token_file: Optional[str] = None,
                 insecure: bool = False, timeout: float = DEFAULT_TIMEOUT) -> None:
        for name, value in (("master", master), ("ca", ca), ("cert", cert), ("key", key), ("token", token),
                            ("token_file", token_file)):
            if value is not None and not isinstance(value, (str, os.PathLike)):
                raise TypeError(f"{name} must be a string, not {type(value).__name__}")
        if not isinstance(timeout, (int, float)) or timeout <= 0:
            raise ValueError(f"timeout must be a positive number of seconds, got {timeout!r}")
        self.master = str(master) if master else _master_from_env()
        if not self.master:
            raise ValueError("master: pass master='HOST:PORT' or set WEFT_MASTER (or TF_CONFIG)")
        if ":" not in self.master:
            raise ValueError(f"master: {self.master!r} is not HOST:PORT")
        self.timeout = float(timeout)
        self._channel = grpc.secure_channel(self.master, self._credentials(ca, cert, key, token, token_file),
                                            options=self._options()) if not insecure else \
            grpc.insecure_channel(self.master, options=self._options())
        self._stub = ms_grpc.MasterServiceStub(self._channel)

    @staticmethod
    def _options() -> List[tuple]:
        return [("grpc.max_receive_message_length", _MAX_MESSAGE), ("grpc.max_send_message_length", _MAX_MESSAGE)]

    @staticmethod
    def _credentials(ca, cert, key, token, token_file) -> grpc.ChannelCredentials:
        ca = ca or os.environ.get("WEFT_CA")
        cert = cert or os.environ.get("WEFT_CERT")
        key = key or os.environ.get("WEFT_KEY")
        token_file = token_file or (None if token else os.environ.get("WEFT_TOKEN_FILE"))
        if not ca:
            raise ValueError("ca: no CA certificate: pass ca= (or set WEFT_CA) to verify the master, "
                             "or insecure=True for a master started with --insecure")
        if bool(cert) != bool(key):
            raise ValueError("cert and key: pass both (WEFT_CERT, WEFT_KEY) or neither")
        if not cert and not token and not token_file:
            raise ValueError("no user credentials: pass cert= and key= (WEFT_CERT, WEFT_KEY) or token= / "
                             "token_file= (WEFT_TOKEN_FILE)")
        creds = grpc.ssl_channel_credentials(
            root_certificates=_read(ca, "ca"),
            private_key=_read(key, "key") if key else None,
            certificate_chain=_read(cert, "cert") if cert else None)
        if token_file:
            token = read_token_file(token_file)
        if token:
            creds = grpc.composite_channel_credentials(creds, grpc.access_token_call_credentials(token))
        return creds

    # ---- plumbing ---------------------------------------------------------------

    def _call(self, what: str, method, request, timeout: Optional[float] = None):
        try:
            return method(request, timeout=timeout or self.timeout)
        except grpc.RpcError as e:
            raise errors.from_rpc_error(e, what, self.master) from None

    @property
    def stub(self) -> ms_grpc.MasterServiceStub:
        """The raw MasterService stub, for calls this class does not wrap."""
        return self._stub

    def close(self) -> None:
        self._channel.close()

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # ---- jobs -------------------------------------------------------------------

    def submit(self, job: Union["job_pb2.JobSpec", str, os.PathLike, Dict[str, Any]]) -> str:
        """Submits a job and returns its id.

        ``job``: a JobSpec, a job file's path (text format, as ``weft submit``
        takes), or a dict in the JobSpec's JSON form.
        """
        spec = as_job_spec(job)
        return self._call("SubmitJob", self._stub.SubmitJob, ms.SubmitJobRequest(job=spec)).job_id

    def status(self, job_id: str) -> JobStatus:
        """The job's status now."""
        _check_id(job_id)
        return JobStatus(self._call(f"GetJob {job_id}", self._stub.GetJob, ms.GetJobRequest(job_id=job_id)))

    def jobs(self) -> List[JobStatus]:
        """Every job the caller may see (their own; an admin sees all), newest first."""
        jobs = [JobStatus(j) for j in self._call("ListJobs", self._stub.ListJobs, ms.ListJobsRequest()).job]
        return sorted(jobs, key=lambda j: j.submit_time_unix_ms, reverse=True)

    def cancel(self, job_id: str) -> None:
        """Asks the master to cancel the job; it ends CANCELLED shortly after."""
        _check_id(job_id)
        self._call(f"CancelJob {job_id}", self._stub.CancelJob, ms.CancelJobRequest(job_id=job_id))

    def watch(self, job_id: str, timeout: Optional[float] = None) -> Iterator[JobStatus]:
        """Yields the job's status now, at every change and about once a second, until it ends.

        ``timeout``: seconds for the whole watch (default: none).
        """
        _check_id(job_id)
        stream = self._stub.WatchJob(ms.WatchJobRequest(job_id=job_id), timeout=timeout)
        try:
            for status in stream:
                yield JobStatus(status)
        except grpc.RpcError as e:
            raise errors.from_rpc_error(e, f"WatchJob {job_id}", self.master) from None
        finally:
            stream.cancel()

    def wait(self, job_id: str, timeout: Optional[float] = None) -> JobStatus:
        """Follows the job to its end and returns its final status.

        Raises JobFailedError (FAILED) or JobCancelledError (CANCELLED).
        """
        last = None
        for last in self.watch(job_id, timeout=timeout):
            pass
        if last is None or not last.done:
            last = self.status(job_id)
        last.raise_for_state()
        return last

    def trace(self, job_id: str, steps: int = 3, timeout: Optional[float] = None) -> Dict[str, Any]:
        """A Chrome trace-event document of the job's next ``steps`` steps (``weft trace``)."""
        _check_id(job_id)
        if not isinstance(steps, int) or not 1 <= steps <= 100:
            raise ValueError(f"steps must be an int in 1..100, got {steps!r}")
        r = self._call(f"TraceJob {job_id}", self._stub.TraceJob,
                       ms.TraceJobRequest(job_id=job_id, steps=steps), timeout=timeout or 120.0)
        return json.loads(r.trace_json)

    def read_checkpoint(self, job_id: str, step: int = 0) -> Dict[str, Any]:
        """The variables of the job's newest valid checkpoint (or of ``step``), by name.

        Read by the master from the job's checkpoint directory and sent a
        page at a time, so this works from any machine that reaches the
        master. The job's owner or an admin.
        """
        from weft import tensors
        _check_id(job_id)
        if isinstance(step, bool) or not isinstance(step, int) or step < 0:
            raise ValueError(f"step must be an int >= 0 (0: the newest), got {step!r}")
        out: Dict[str, Any] = {}
        first = 0
        while True:
            page = self._call(f"ReadJobCheckpoint {job_id}", self._stub.ReadJobCheckpoint,
                              ms.ReadJobCheckpointRequest(job_id=job_id, step=step, first=first))
            step = page.step  # later pages: the same checkpoint
            for v in page.variable:
                out[v.name] = tensors.to_numpy(v.tensor)
            if page.next == 0:
                return out
            first = page.next

    # ---- the cluster ------------------------------------------------------------

    def devices(self) -> List[Dict[str, Any]]:
        """Every device of the cluster's tasks: name, type, memory limit."""
        r = self._call("ListDevices", self._stub.ListDevices, ms.ListDevicesRequest())
        return [{"name": d.name, "device_type": d.device_type, "memory_limit": d.memory_limit,
                 "physical_device_desc": d.physical_device_desc} for d in r.device]

    def checkpoints(self, directory: Union[str, os.PathLike]):
        """The checkpoints under a job's checkpoint directory, newest first.

        Reads the directory as ``weft checkpoints DIR`` does (it must be
        reachable from here: the local cluster's, or a mounted shared
        volume), checking each against its manifest.
        """
        from weft.checkpoints import list_checkpoints
        return list_checkpoints(directory)


def _check_id(job_id: Any) -> None:
    if not isinstance(job_id, str):
        raise TypeError(f"job_id must be a string, not {type(job_id).__name__}")
    if not job_id:
        raise ValueError("job_id is empty")
