"""Keras' mixed-precision policy, as weft runs it: ``set_global_policy("mixed_float16")``
before ``compile`` makes the model's matrix products compute in float16 (``"mixed_bfloat16"``:
bfloat16) on the GPU's tensor cores, with float32 weights, activations and updates, and
(for float16) dynamic loss scaling that skips a step whose gradients overflow. The job
field is ``mixed_precision`` (proto/job.proto)."""
from typing import Optional

_POLICIES = ("float32", "mixed_float16", "mixed_bfloat16")


class Policy:
    """A named policy: ``"float32"``, ``"mixed_float16"`` or ``"mixed_bfloat16"``."""

    def __init__(self, name: str) -> None:
        if name not in _POLICIES:
            raise ValueError(f"mixed precision policy {name!r} is unknown; weft has {', '.join(_POLICIES)}")
        self.name = name

    @property
    def compute_dtype(self) -> str:
        return {"float32": "float32", "mixed_float16": "float16", "mixed_bfloat16": "bfloat16"}[self.name]

    @property
    def variable_dtype(self) -> str:
        return "float32"

    def __repr__(self) -> str:
        return f'<Policy "{self.name}">'


_global = Policy("float32")


def set_global_policy(policy) -> None:
    """Sets the policy that models compiled from now on train with."""
    global _global
    _global = policy if isinstance(policy, Policy) else Policy(str(policy))


def global_policy() -> Policy:
    return _global


def to_proto(policy: Policy, job_pb2, *, initial_loss_scale: Optional[float] = None):
    """The JobSpec's MixedPrecision for `policy` (None for float32)."""
    if policy.name == "float32":
        return None
    mp = job_pb2.MixedPrecision(compute=job_pb2.MixedPrecision.FLOAT16 if policy.name == "mixed_float16"
                                else job_pb2.MixedPrecision.BFLOAT16)
    if initial_loss_scale is not None:
        mp.initial_loss_scale = float(initial_loss_scale)
    return mp
