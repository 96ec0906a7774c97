"""The exceptions weft raises, one per kind of failure a caller handles differently.

Every error from the cluster carries its gRPC status ``code`` (a
``grpc.StatusCode``) and the master's message, which names what was wrong
and where (a node, a task, a file). Argument errors found before anything is
sent are plain ``ValueError`` / ``TypeError`` naming the argument.
"""
from __future__ import annotations

from typing import Optional

import grpc


class WeftError(Exception):
    """An error reported by (or on the way to) a weft master."""

    def __init__(self, message: str, code: Optional[grpc.StatusCode] = None) -> None:
        super().__init__(message)
        self.message = message
        self.code = code


class UnavailableError(WeftError):
    """The master could not be reached (not running, wrong address, network down)."""


class PermissionDeniedError(WeftError):
    """The caller's certificate or token does not allow the call."""


class UnauthenticatedError(WeftError):
    """The master did not accept the caller's credentials."""


class NotFoundError(WeftError):
    """The job, session or checkpoint named does not exist (or is not the caller's)."""


class InvalidArgumentError(WeftError, ValueError):
    """The master refused the request's content (a bad job, graph or feed)."""


class ResourceExhaustedError(WeftError):
    """A quota or size limit of the cluster was reached; the message names it."""


class DeadlineExceededError(WeftError):
    """The call did not finish within its timeout."""


class JobFailedError(WeftError):
    """A job ended FAILED; ``status`` is its final JobStatus."""

    def __init__(self, message: str, status=None, code: Optional[grpc.StatusCode] = None) -> None:
        super().__init__(message, code)
        self.status = status


class JobCancelledError(JobFailedError):
    """A job ended CANCELLED (by ``Client.cancel``, ``weft cancel`` or Ctrl-C)."""


_BY_CODE = {
    grpc.StatusCode.UNAVAILABLE: UnavailableError,
    grpc.StatusCode.PERMISSION_DENIED: PermissionDeniedError,
    grpc.StatusCode.UNAUTHENTICATED: UnauthenticatedError,
    grpc.StatusCode.NOT_FOUND: NotFoundError,
    grpc.StatusCode.INVALID_ARGUMENT: InvalidArgumentError,
    grpc.StatusCode.RESOURCE_EXHAUSTED: ResourceExhaustedError,
    grpc.StatusCode.DEADLINE_EXCEEDED: DeadlineExceededError,
}


def from_rpc_error(e: grpc.RpcError, what: str, target: str) -> WeftError:
    """The WeftError for a failed call ``what`` to the master at ``target``."""
    code = e.code() if hasattr(e, "code") else None
    details = e.details() if hasattr(e, "details") else str(e)
    if code == grpc.StatusCode.UNAVAILABLE:
        message = f"{what}: the master at {target} is unavailable ({details})"
    else:
        message = f"{what}: {details}"
    return _BY_CODE.get(code, WeftError)(message, code)
