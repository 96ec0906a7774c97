"""Keras-style models that train on a weft cluster: ``weft.keras.Sequential``
and the functional ``weft.keras.Model`` (layers called on ``weft.keras.Input``)."""
from weft.keras import callbacks, layers, losses, mixed_precision, optimizers
from weft.keras.layers import Input
from weft.keras.models import Model, Sequential

__all__ = ["Model", "Sequential", "Input", "layers", "optimizers", "losses", "callbacks", "mixed_precision"]
