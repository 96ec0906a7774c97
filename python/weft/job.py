"""Job specifications and statuses: JobSpec in, JobStatus out."""
from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Dict, Union

from google.protobuf import json_format, text_format

from weft import errors
from weft._pb import job_pb2, master_service_pb2 as ms

_DONE = {job_pb2.SUCCEEDED, job_pb2.FAILED, job_pb2.CANCELLED}


def as_job_spec(job: Union["job_pb2.JobSpec", str, os.PathLike, Dict[str, Any]]) -> "job_pb2.JobSpec":
    """A JobSpec from a JobSpec, a job file's path (text format) or a JSON-form dict."""
    if isinstance(job, job_pb2.JobSpec):
        return job
    if isinstance(job, dict):
        try:
            return json_format.ParseDict(job, job_pb2.JobSpec())
        except json_format.ParseError as e:
            raise ValueError(f"job: {e}") from None
    if isinstance(job, (str, os.PathLike)):
        path = Path(job)
        try:
            text = path.read_text()
        except OSError as e:
            raise ValueError(f"job: cannot read job file {path}: {e.strerror}") from None
        try:
            return text_format.Parse(text, job_pb2.JobSpec())
        except text_format.ParseError as e:
            raise ValueError(f"job: {path}:{e}") from None
    raise TypeError(f"job must be a JobSpec, a job file's path or a dict, not {type(job).__name__}")


class JobStatus:
    """A job's status (proto JobStatus) with its fields as attributes.

    ``state`` is the state's name ("RUNNING", "SUCCEEDED", ...); ``done`` is
    true once it ended.
    """

    def __init__(self, proto: "ms.JobStatus") -> None:
        self.proto = proto

    def __getattr__(self, name: str) -> Any:
        return getattr(self.proto, name)

    @property
    def state(self) -> str:
        return job_pb2.JobState.Name(self.proto.state)

    @property
    def done(self) -> bool:
        return self.proto.state in _DONE

    def raise_for_state(self) -> None:
        """Raises JobFailedError / JobCancelledError for a job that ended so."""
        if self.proto.state == job_pb2.FAILED:
            raise errors.JobFailedError(f"job {self.job_id} failed: {self.error}", self)
        if self.proto.state == job_pb2.CANCELLED:
            raise errors.JobCancelledError(f"job {self.job_id} was cancelled", self)

    def to_dict(self) -> Dict[str, Any]:
        return json_format.MessageToDict(self.proto, preserving_proto_field_name=True)

    def __repr__(self) -> str:
        return (f"JobStatus(job_id={self.job_id!r}, state={self.state}, step={self.step}/{self.total_steps}, "
                f"loss={self.loss:.4g})")
