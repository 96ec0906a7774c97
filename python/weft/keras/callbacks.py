"""Keras-style callbacks: what ``fit`` calls as a job trains on the cluster.

``on_epoch_end(epoch, logs)`` gets the epoch's mean training ``loss`` and,
when the job evaluated after it, ``val_loss`` / ``val_accuracy``.
``on_train_batch_end(step, logs)`` is called as step counts arrive (the
master reports about once a second, not every step). A callback may set
``model.stop_training = True`` to cancel the job after the current epoch.
"""
from __future__ import annotations

from typing import Any, Dict, List, Optional


class Callback:
    def __init__(self) -> None:
        self.model = None
        self.params: Dict[str, Any] = {}

    def set_model(self, model) -> None:
        self.model = model

    def set_params(self, params: Dict[str, Any]) -> None:
        self.params = params

    def on_train_begin(self, logs: Optional[Dict[str, float]] = None) -> None: ...

    def on_train_end(self, logs: Optional[Dict[str, float]] = None) -> None: ...

    def on_epoch_begin(self, epoch: int, logs: Optional[Dict[str, float]] = None) -> None: ...

    def on_epoch_end(self, epoch: int, logs: Optional[Dict[str, float]] = None) -> None: ...

    def on_train_batch_end(self, batch: int, logs: Optional[Dict[str, float]] = None) -> None: ...


class History(Callback):
    """``history[metric]``: one value per epoch, as Keras' History."""

    def __init__(self) -> None:
        super().__init__()
        self.epoch: List[int] = []
        self.history: Dict[str, List[float]] = {}

    def on_epoch_end(self, epoch, logs=None):
        self.epoch.append(epoch)
        for k, v in (logs or {}).items():
            self.history.setdefault(k, []).append(v)


class LambdaCallback(Callback):
    def __init__(self, on_epoch_end=None, on_train_batch_end=None, on_train_end=None) -> None:
        super().__init__()
        if on_epoch_end:
            self.on_epoch_end = on_epoch_end
        if on_train_batch_end:
            self.on_train_batch_end = on_train_batch_end
        if on_train_end:
            self.on_train_end = on_train_end


class EarlyStopping(Callback):
    """Stops training when ``monitor`` has not improved for ``patience`` epochs."""

    def __init__(self, monitor: str = "val_loss", patience: int = 0, min_delta: float = 0.0, mode: str = "auto"):
        super().__init__()
        if mode not in ("auto", "min", "max"):
            raise ValueError(f"EarlyStopping: mode must be auto, min or max, got {mode!r}")
        self.monitor, self.patience, self.min_delta = monitor, patience, abs(min_delta)
        self.sign = -1 if mode == "max" or (mode == "auto" and "acc" in monitor) else 1
        self.best, self.wait, self.stopped_epoch = None, 0, None

    def on_epoch_end(self, epoch, logs=None):
        value = (logs or {}).get(self.monitor)
        if value is None:
            return
        if self.best is None or self.sign * (value - self.best) < -self.min_delta:
            self.best, self.wait = value, 0
            return
        self.wait += 1
        if self.wait > self.patience:
            self.stopped_epoch = epoch
            self.model.stop_training = True
