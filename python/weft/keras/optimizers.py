"""Keras-style optimizers, each one OptimizerSpec (proto/job.proto)."""
from __future__ import annotations

import types

from weft._pb import job_pb2


def _rate(who: str, name: str, value, low: float = 0.0, high: float = float("inf"), open_low=True) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{who}: {name} must be a number, not {type(value).__name__}")
    if (value <= low if open_low else value < low) or value > high:
        raise ValueError(f"{who}: {name} must be in {'(' if open_low else '['}{low}, {high}], got {value}")
    return float(value)


class LearningRateSchedule:
    """A learning rate that changes with the update count (OptimizerSpec.schedule)."""

    initial_learning_rate: float

    def _fill(self, spec: "job_pb2.LearningRateSchedule") -> None:
        raise NotImplementedError


def _steps(who: str, name: str, value, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{who}: {name} must be an int, not {type(value).__name__}")
    if value < minimum:
        raise ValueError(f"{who}: {name} must be at least {minimum}, got {value}")
    return value


class CosineDecay(LearningRateSchedule):
    """Keras's CosineDecay: an optional linear warm-up to ``warmup_target``, then
    a cosine decay over ``decay_steps`` updates to ``alpha`` times the peak.

    weft's warm-up starts from 0 (``initial_learning_rate`` must then be 0, as
    Keras's examples write it), and the rate of update t is that of Keras's step
    t (so no update has a rate of 0).
    """

    def __init__(self, initial_learning_rate: float, decay_steps: int, alpha: float = 0.0,
                 warmup_target: float | None = None, warmup_steps: int = 0) -> None:
        self.decay_steps = _steps("CosineDecay", "decay_steps", decay_steps, 1)
        self.warmup_steps = _steps("CosineDecay", "warmup_steps", warmup_steps, 0)
        self.alpha = _rate("CosineDecay", "alpha", alpha, 0.0, 1.0, open_low=False)
        if warmup_target is None:
            if self.warmup_steps:
                raise ValueError("CosineDecay: warmup_steps needs warmup_target, the rate the warm-up reaches")
            self.initial_learning_rate = _rate("CosineDecay", "initial_learning_rate", initial_learning_rate)
        else:
            if initial_learning_rate != 0:
                raise ValueError("CosineDecay: weft's warm-up starts from 0: give initial_learning_rate=0.0 "
                                 "and the peak as warmup_target")
            self.initial_learning_rate = _rate("CosineDecay", "warmup_target", warmup_target)

    def _fill(self, spec):
        spec.warmup_steps = self.warmup_steps
        spec.cosine.decay_steps = self.decay_steps
        spec.cosine.alpha = self.alpha


class ExponentialDecay(LearningRateSchedule):
    """Keras's ExponentialDecay with ``staircase=True``: the rate is multiplied by
    ``decay_rate`` every ``decay_steps`` updates (PyTorch's StepLR)."""

    def __init__(self, initial_learning_rate: float, decay_steps: int, decay_rate: float,
                 staircase: bool = False) -> None:
        if staircase is not True:
            raise ValueError("ExponentialDecay: weft decays in steps only: pass staircase=True")
        self.initial_learning_rate = _rate("ExponentialDecay", "initial_learning_rate", initial_learning_rate)
        self.decay_steps = _steps("ExponentialDecay", "decay_steps", decay_steps, 1)
        self.decay_rate = _rate("ExponentialDecay", "decay_rate", decay_rate, 0.0, 1.0)

    def _fill(self, spec):
        spec.step.every_steps = self.decay_steps
        spec.step.factor = self.decay_rate


schedules = types.SimpleNamespace(LearningRateSchedule=LearningRateSchedule, CosineDecay=CosineDecay,
                                  ExponentialDecay=ExponentialDecay)


class Optimizer:
    """Every optimizer takes ``learning_rate`` as a number or a schedule,
    ``global_clipnorm``: each replica scales its gradients to a global norm of at
    most this before they are averaged, and ``gradient_accumulation_steps``
    k: as Keras', one update every k batches with the mean of their gradients
    (``fit``'s job then takes steps of k * batch_size examples, each run as k
    micro-batches of batch_size one after another, so its steps count updates)."""

    def __init__(self, who: str, learning_rate, global_clipnorm, clipnorm,
                 gradient_accumulation_steps=None) -> None:
        k = gradient_accumulation_steps
        if k is not None and (isinstance(k, bool) or not isinstance(k, int) or k < 1):
            raise ValueError(f"{who}: gradient_accumulation_steps must be an int >= 1, got {k!r}")
        self.gradient_accumulation_steps = k or 1
        if clipnorm is not None:
            raise ValueError(f"{who}: weft clips by the global norm of all gradients: use global_clipnorm, "
                             "not clipnorm")
        if isinstance(learning_rate, LearningRateSchedule):
            self.schedule = learning_rate
            self.learning_rate = learning_rate.initial_learning_rate
        else:
            self.schedule = None
            self.learning_rate = _rate(who, "learning_rate", learning_rate)
        self.global_clipnorm = (None if global_clipnorm is None
                                else _rate(who, "global_clipnorm", global_clipnorm))

    def _spec(self) -> "job_pb2.OptimizerSpec":
        spec = job_pb2.OptimizerSpec()
        if self.schedule is not None:
            self.schedule._fill(spec.schedule)
        if self.global_clipnorm is not None:
            spec.clip_global_norm = self.global_clipnorm
        if self.gradient_accumulation_steps > 1:
            spec.gradient_accumulation_steps = self.gradient_accumulation_steps
        return spec

    def to_proto(self) -> "job_pb2.OptimizerSpec":
        raise NotImplementedError


class SGD(Optimizer):
    """Gradient descent, with momentum (and Nesterov's) when ``momentum`` > 0.
    ``weight_decay`` adds weight_decay * var to the gradient (PyTorch's SGD)."""

    def __init__(self, learning_rate=0.01, momentum: float = 0.0, nesterov: bool = False,
                 weight_decay: float = 0.0, global_clipnorm: float | None = None, clipnorm=None,
                 gradient_accumulation_steps: int | None = None) -> None:
        super().__init__("SGD", learning_rate, global_clipnorm, clipnorm, gradient_accumulation_steps)
        self.momentum = _rate("SGD", "momentum", momentum, 0.0, 1.0, open_low=False)
        self.weight_decay = _rate("SGD", "weight_decay", weight_decay, 0.0, open_low=False)
        if not isinstance(nesterov, bool):
            raise TypeError("SGD: nesterov must be a bool")
        self.nesterov = nesterov

    def to_proto(self):
        spec = self._spec()
        if self.momentum == 0 and not self.nesterov:
            spec.sgd.learning_rate = self.learning_rate
            spec.sgd.weight_decay = self.weight_decay
        else:
            spec.momentum.learning_rate = self.learning_rate
            spec.momentum.momentum = self.momentum
            spec.momentum.nesterov = self.nesterov
            spec.momentum.weight_decay = self.weight_decay
        return spec


class Adam(Optimizer):
    def __init__(self, learning_rate=0.001, beta_1: float = 0.9, beta_2: float = 0.999,
                 epsilon: float = 1e-7, global_clipnorm: float | None = None, clipnorm=None,
                 gradient_accumulation_steps: int | None = None) -> None:
        super().__init__(type(self).__name__, learning_rate, global_clipnorm, clipnorm, gradient_accumulation_steps)
        who = type(self).__name__
        self.beta_1 = _rate(who, "beta_1", beta_1, 0.0, 1.0, open_low=False)
        self.beta_2 = _rate(who, "beta_2", beta_2, 0.0, 1.0, open_low=False)
        self.epsilon = _rate(who, "epsilon", epsilon)

    def _fill(self, adam) -> None:
        adam.learning_rate, adam.beta1, adam.beta2, adam.epsilon = (
            self.learning_rate, self.beta_1, self.beta_2, self.epsilon)

    def to_proto(self):
        spec = self._spec()
        self._fill(spec.adam)
        return spec


class AdamW(Adam):
    """Adam with decoupled weight decay: var -= lr * weight_decay * var each step."""

    def __init__(self, learning_rate=0.001, weight_decay: float = 0.004, beta_1: float = 0.9,
                 beta_2: float = 0.999, epsilon: float = 1e-7, global_clipnorm: float | None = None,
                 clipnorm=None, gradient_accumulation_steps: int | None = None) -> None:
        super().__init__(learning_rate, beta_1, beta_2, epsilon, global_clipnorm, clipnorm,
                         gradient_accumulation_steps)
        self.weight_decay = _rate("AdamW", "weight_decay", weight_decay)

    def to_proto(self):
        spec = self._spec()
        self._fill(spec.adamw)
        spec.adamw.weight_decay = self.weight_decay
        return spec


_BY_NAME = {"sgd": SGD, "adam": Adam, "adamw": AdamW}


def get(identifier) -> Optimizer:
    """An Optimizer from an instance or a name ("sgd", "adam", "adamw")."""
    if isinstance(identifier, Optimizer):
        return identifier
    if isinstance(identifier, str):
        if identifier.lower() not in _BY_NAME:
            raise ValueError(f"optimizer: unknown optimizer {identifier!r}; weft has {', '.join(_BY_NAME)}")
        return _BY_NAME[identifier.lower()]()
    raise TypeError(f"optimizer must be an Optimizer or a name, not {type(identifier).__name__}")
