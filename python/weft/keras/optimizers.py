"""Keras-style optimizers, each one OptimizerSpec (proto/job.proto)."""
from __future__ import annotations

from weft._pb import job_pb2


def _rate(who: str, name: str, value, low: float = 0.0, high: float = float("inf"), open_low=True) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{who}: {name} must be a number, not {type(value).__name__}")
    if (value <= low if open_low else value < low) or value > high:
        raise ValueError(f"{who}: {name} must be in {'(' if open_low else '['}{low}, {high}], got {value}")
    return float(value)


class Optimizer:
    def to_proto(self) -> "job_pb2.OptimizerSpec":
        raise NotImplementedError


class SGD(Optimizer):
    """Gradient descent, with momentum (and Nesterov's) when ``momentum`` > 0."""

    def __init__(self, learning_rate: float = 0.01, momentum: float = 0.0, nesterov: bool = False) -> None:
        self.learning_rate = _rate("SGD", "learning_rate", learning_rate)
        self.momentum = _rate("SGD", "momentum", momentum, 0.0, 1.0, open_low=False)
        if not isinstance(nesterov, bool):
            raise TypeError("SGD: nesterov must be a bool")
        self.nesterov = nesterov

    def to_proto(self):
        spec = job_pb2.OptimizerSpec()
        if self.momentum == 0 and not self.nesterov:
            spec.sgd.learning_rate = self.learning_rate
        else:
            spec.momentum.learning_rate = self.learning_rate
            spec.momentum.momentum = self.momentum
            spec.momentum.nesterov = self.nesterov
        return spec


class Adam(Optimizer):
    def __init__(self, learning_rate: float = 0.001, beta_1: float = 0.9, beta_2: float = 0.999,
                 epsilon: float = 1e-7) -> None:
        self.learning_rate = _rate("Adam", "learning_rate", learning_rate)
        self.beta_1 = _rate("Adam", "beta_1", beta_1, 0.0, 1.0, open_low=False)
        self.beta_2 = _rate("Adam", "beta_2", beta_2, 0.0, 1.0, open_low=False)
        self.epsilon = _rate("Adam", "epsilon", epsilon)

    def to_proto(self):
        spec = job_pb2.OptimizerSpec()
        spec.adam.learning_rate, spec.adam.beta1, spec.adam.beta2, spec.adam.epsilon = (
            self.learning_rate, self.beta_1, self.beta_2, self.epsilon)
        return spec


_BY_NAME = {"sgd": SGD, "adam": Adam}


def get(identifier) -> Optimizer:
    """An Optimizer from an instance or a name ("sgd", "adam")."""
    if isinstance(identifier, Optimizer):
        return identifier
    if isinstance(identifier, str):
        if identifier.lower() not in _BY_NAME:
            raise ValueError(f"optimizer: unknown optimizer {identifier!r}; weft has {', '.join(_BY_NAME)}")
        return _BY_NAME[identifier.lower()]()
    raise TypeError(f"optimizer must be an Optimizer or a name, not {type(identifier).__name__}")
