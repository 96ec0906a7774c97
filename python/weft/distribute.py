"""Distribution strategies under TensorFlow's names, as weft StrategySpecs.

A strategy says how ``fit`` spreads a model over the cluster; the cluster
itself is the master the strategy's ``client`` talks to (default: a
``weft.Client()`` from the environment, WEFT_MASTER or TF_CONFIG)::

    strategy = weft.distribute.MultiWorkerMirroredStrategy()
    with strategy.scope():
        model = weft.keras.Sequential([...])
        model.compile(optimizer="adam", loss="sparse_categorical_crossentropy", metrics=["accuracy"])
    model.fit(x, y, epochs=10, batch_size=64)

``batch_size`` is the global batch, split evenly across the replicas.
"""
from __future__ import annotations

import contextlib
import threading
from typing import Iterator, Optional

from weft._pb import job_pb2

_current = threading.local()


class Strategy:
    """Base of the strategies; ``kind`` is a StrategySpec.Kind."""
    kind = job_pb2.StrategySpec.NONE

    def __init__(self, client=None, steps_per_execution="auto") -> None:
        from weft.client import Client
        if client is not None and not isinstance(client, Client):
            raise TypeError(f"client must be a weft.Client, not {type(client).__name__}")
        if steps_per_execution != "auto" and (isinstance(steps_per_execution, bool) or
                                              not isinstance(steps_per_execution, int) or steps_per_execution < 1):
            raise ValueError(f"steps_per_execution must be 'auto' or a positive int, got {steps_per_execution!r}")
        self._client = client
        self.steps_per_execution = steps_per_execution

    @property
    def client(self):
        """The Client jobs go to (made from the environment on first use)."""
        if self._client is None:
            from weft.client import Client
            self._client = Client()
        return self._client

    @contextlib.contextmanager
    def scope(self) -> Iterator["Strategy"]:
        """Models compiled inside train with this strategy."""
        stack = getattr(_current, "stack", [])
        _current.stack = stack + [self]
        try:
            yield self
        finally:
            _current.stack = stack

    def to_proto(self) -> "job_pb2.StrategySpec":
        spec = job_pb2.StrategySpec(kind=self.kind)
        # "auto" is the job's 0: the master sizes each dispatch as it runs.
        if self.steps_per_execution != "auto":
            spec.steps_per_execution = self.steps_per_execution
        self._fill(spec)
        return spec

    def _fill(self, spec: "job_pb2.StrategySpec") -> None:
        pass

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"


class OneDeviceStrategy(Strategy):
    """One replica on worker 0's first device (the default strategy of ``fit``).

    Runs as MIRRORED over one device, so that its variables are checkpointed
    like every other strategy's.
    """
    kind = job_pb2.StrategySpec.MIRRORED

    def _fill(self, spec):
        spec.num_devices = 1


class MirroredStrategy(Strategy):
    """Replicas on the devices of worker 0 (GPUs first), gradients all-reduced.

    ``num_devices``: how many (default every GPU, or every CPU device).
    ``cross_device_ops``: "auto", "nccl" or "reduce_to_first_device".
    """
    kind = job_pb2.StrategySpec.MIRRORED
    _OPS = {"auto": job_pb2.StrategySpec.AUTO, "nccl": job_pb2.StrategySpec.NCCL,
            "reduce_to_first_device": job_pb2.StrategySpec.REDUCE_TO_FIRST_DEVICE}

    def __init__(self, num_devices: int = 0, cross_device_ops: str = "auto", fusion_bytes: int = 0, **kw) -> None:
        super().__init__(**kw)
        if isinstance(num_devices, bool) or not isinstance(num_devices, int) or num_devices < 0:
            raise ValueError(f"num_devices must be an int >= 0, got {num_devices!r}")
        if cross_device_ops not in self._OPS:
            raise ValueError(f"cross_device_ops must be one of {', '.join(self._OPS)}, got {cross_device_ops!r}")
        _check_bytes("fusion_bytes", fusion_bytes)
        self.num_devices, self.cross_device_ops, self.fusion_bytes = num_devices, cross_device_ops, fusion_bytes

    def _fill(self, spec):
        spec.num_devices = self.num_devices
        spec.cross_device_ops = self._OPS[self.cross_device_ops]
        spec.fusion_bytes = self.fusion_bytes


class MultiWorkerMirroredStrategy(Strategy):
    """One replica per worker task; gradients all-reduced in buckets of ``fusion_bytes``."""
    kind = job_pb2.StrategySpec.MULTI_WORKER_MIRRORED

    def __init__(self, fusion_bytes: int = 0, **kw) -> None:
        super().__init__(**kw)
        _check_bytes("fusion_bytes", fusion_bytes)
        self.fusion_bytes = fusion_bytes

    def _fill(self, spec):
        spec.fusion_bytes = self.fusion_bytes


class ParameterServerStrategy(Strategy):
    """Variables on the ps tasks, one replica per worker.

    ``sync``: apply the mean of all replicas' gradients once per step (True)
    or each replica's as it arrives (False, the default, as in TensorFlow).
    ``replicas_to_aggregate``: with sync, apply the first k gradients per step.
    ``max_shard_bytes``: split larger variables into row shards over the ps tasks.
    """
    kind = job_pb2.StrategySpec.PARAMETER_SERVER

    def __init__(self, sync: bool = False, replicas_to_aggregate: int = 0, max_shard_bytes: int = 0, **kw) -> None:
        super().__init__(**kw)
        if not isinstance(sync, bool):
            raise TypeError(f"sync must be a bool, not {type(sync).__name__}")
        if isinstance(replicas_to_aggregate, bool) or not isinstance(replicas_to_aggregate, int) \
                or replicas_to_aggregate < 0:
            raise ValueError(f"replicas_to_aggregate must be an int >= 0, got {replicas_to_aggregate!r}")
        if replicas_to_aggregate and not sync:
            raise ValueError("replicas_to_aggregate needs sync=True")
        _check_bytes("max_shard_bytes", max_shard_bytes)
        self.sync, self.replicas_to_aggregate, self.max_shard_bytes = sync, replicas_to_aggregate, max_shard_bytes

    def _fill(self, spec):
        spec.sync = self.sync
        spec.replicas_to_aggregate = self.replicas_to_aggregate
        spec.max_shard_bytes = self.max_shard_bytes


class CentralStorageStrategy(Strategy):
    """Variables on one device (a ps task), replicas on worker 0's devices."""
    kind = job_pb2.StrategySpec.CENTRAL_STORAGE

    def __init__(self, num_devices: int = 0, **kw) -> None:
        super().__init__(**kw)
        if isinstance(num_devices, bool) or not isinstance(num_devices, int) or num_devices < 0:
            raise ValueError(f"num_devices must be an int >= 0, got {num_devices!r}")
        self.num_devices = num_devices

    def _fill(self, spec):
        spec.num_devices = self.num_devices


def _check_bytes(name: str, value) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"{name} must be an int >= 0, got {value!r}")


_default = None


def get_strategy() -> Strategy:
    """The strategy of the innermost ``scope()``, else the default OneDeviceStrategy."""
    global _default
    stack = getattr(_current, "stack", [])
    if stack:
        return stack[-1]
    if _default is None:
        _default = OneDeviceStrategy()
    return _default


def has_strategy() -> bool:
    return bool(getattr(_current, "stack", []))
