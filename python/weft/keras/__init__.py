"""Keras-style models that train on a weft cluster (``weft.keras.Sequential``)."""
from weft.keras import callbacks, layers, losses, optimizers
from weft.keras.layers import Input
from weft.keras.models import Sequential

__all__ = ["Sequential", "Input", "layers", "optimizers", "losses", "callbacks"]
