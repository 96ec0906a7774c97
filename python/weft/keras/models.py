"""weft.keras's models: ``Sequential`` (a stack of layers) and ``Model`` (the functional form).

Both are trained as weft jobs by what they share (weft.keras.training:
compile, fit, evaluate, predict, the weights, summary, to_job_spec); each
only says which LayerSpecs its ModelSpec holds. A Sequential's layers read
the layer before them. A functional Model's layers read what they were
called on, and its ModelSpec names every layer (as Keras would: ``conv2d``,
``conv2d_1``, ... unless the layer has a name) and lists what each reads
(``inputs``: layer names, or "input" for the model's input).
"""
from __future__ import annotations

import re
from typing import Dict, List, Optional, Sequence, Tuple, Union

from weft._pb import job_pb2
from weft.keras import layers as layers_mod
from weft.keras.layers import InputLayer, KerasTensor
from weft.keras.training import BaseModel

_INPUT = "input"  # what a LayerSpec's inputs call the model's input


class Sequential(BaseModel):
    """A linear stack of layers (weft's ModelSpec)."""

    def __init__(self, layers: Optional[Sequence[layers_mod.Layer]] = None, name: Optional[str] = None) -> None:
        if name is not None and not isinstance(name, str):
            raise TypeError(f"name must be a string, not {type(name).__name__}")
        super().__init__(name or "sequential")
        for layer in layers or []:
            self.add(layer)

    def add(self, layer: Union[layers_mod.Layer, KerasTensor]) -> None:
        """Appends ``layer`` (or, first, the input that ``weft.keras.Input`` gave)."""
        if isinstance(layer, KerasTensor) and isinstance(layer.layer, InputLayer):
            layer = layer.layer
        if not isinstance(layer, layers_mod.Layer):
            raise TypeError(f"layers must be weft.keras.layers objects, not {type(layer).__name__}")
        if layer.input_shape is not None:
            if self.layers or self._input_shape is not None:
                raise ValueError(f"{layer.describe()}: only the first layer may give input_shape")
            self._input_shape = layer.input_shape
        if not isinstance(layer, InputLayer):
            self.layers.append(layer)

    def _layer_specs(self) -> List[Tuple[layers_mod.Layer, "job_pb2.LayerSpec"]]:
        return [(layer, layer.to_proto()) for layer in self.layers]


def _one(what: str, value) -> KerasTensor:
    if isinstance(value, (list, tuple)):
        if len(value) != 1:
            raise ValueError(f"{what}: weft models have one {what[:-1]}, got {len(value)}")
        value = value[0]
    if not isinstance(value, KerasTensor):
        raise TypeError(f"{what}: expected a tensor from weft.keras.Input or a layer's call, "
                        f"not {type(value).__name__}")
    return value


def _snake(name: str) -> str:
    """A layer class's name as Keras names its layers: Conv2D -> conv2d, BatchNormalization -> batch_normalization."""
    return re.sub(r"([a-z])([A-Z])", r"\1_\2", re.sub(r"(.)([A-Z][a-z]+)", r"\1_\2", name)).lower()


class Model(BaseModel):
    """A functional model: the layers between ``inputs`` and ``outputs``.

        inp = weft.keras.Input(shape=(28, 28, 1))
        x = layers.Conv2D(32, 3, padding="same", activation="relu")(inp)
        y = layers.Conv2D(32, 3, padding="same")(x)
        x = layers.Add(activation="relu")([x, y])
        x = layers.GlobalAveragePooling2D()(x)
        model = weft.keras.Model(inputs=inp, outputs=layers.Dense(10, activation="softmax")(x))

    inputs: the tensor ``weft.keras.Input`` gave (weft models have one
    input); outputs: the tensor of the last layer, a Dense classifier (or an
    Activation of one), as for Sequential. Layers the output does not read
    are left out.
    """

    def __init__(self, inputs: Union[KerasTensor, Sequence[KerasTensor]],
                 outputs: Union[KerasTensor, Sequence[KerasTensor]], name: Optional[str] = None) -> None:
        if name is not None and not isinstance(name, str):
            raise TypeError(f"name must be a string, not {type(name).__name__}")
        super().__init__(name or "model")
        inp, out = _one("inputs", inputs), _one("outputs", outputs)
        if not isinstance(inp.layer, InputLayer):
            raise ValueError(f"inputs: pass the tensor weft.keras.Input(shape=...) made, not {inp.layer.describe()}'s "
                             "output")
        if out is inp:
            raise ValueError("outputs: the output is the model's input; call layers on it")
        self.inputs, self.outputs = [inp], [out]
        self._input_layer = inp.layer
        self._input_shape = inp.layer.input_shape
        self.layers = self._order(out.layer)
        self._names = self._name_layers(self.layers)

    def _order(self, output: layers_mod.Layer) -> List[layers_mod.Layer]:
        """The layers ``output`` depends on, in the order they were called: each
        after those it reads, ``output`` last, a one-input output right after
        what it reads (any other layer called before it is one it reads)."""
        found: Dict[int, layers_mod.Layer] = {}
        stack = [output]
        while stack:
            layer = stack.pop()
            if id(layer) in found:
                continue
            if isinstance(layer, InputLayer):
                if layer is not self._input_layer:
                    raise ValueError(f"outputs: the output depends on {layer.describe()} (shape {layer.input_shape}), "
                                     "an Input that is not the model's inputs")
                continue
            found[id(layer)] = layer
            stack.extend(t.layer for t in layer.inbound)
        return sorted(found.values(), key=lambda layer: layer.call_index)

    @staticmethod
    def _name_layers(order: List[layers_mod.Layer]) -> Dict[layers_mod.Layer, str]:
        """Each layer's name in the ModelSpec: its own, else Keras's (class name in
        snake case, then _1, _2, ... in the model's order), unique in the model."""
        taken = set()
        for layer in order:
            if layer.name is None:
                continue
            if layer.name == _INPUT:
                raise ValueError(f"{layer.describe()}: the name {_INPUT!r} stands for the model's input; "
                                 "name the layer otherwise")
            if layer.name in taken:
                raise ValueError(f"{layer.describe()}: another layer of the model has the name {layer.name!r}; "
                                 "layer names must be unique")
            taken.add(layer.name)
        names, counts = {}, {}
        for layer in order:
            if layer.name is not None:
                names[layer] = layer.name
                continue
            base = _snake(type(layer).__name__)
            n = counts.get(base, 0)
            while (f"{base}_{n}" if n else base) in taken:
                n += 1
            names[layer] = f"{base}_{n}" if n else base
            counts[base] = n + 1
            taken.add(names[layer])
        return names

    def _layer_specs(self) -> List[Tuple[layers_mod.Layer, "job_pb2.LayerSpec"]]:
        out = []
        for layer in self.layers:
            spec = layer.to_proto()
            spec.name = self._names[layer]
            spec.inputs.extend(_INPUT if t.layer is self._input_layer else self._names[t.layer]
                               for t in layer.inbound)
            out.append((layer, spec))
        return out

    def get_layer(self, name: str) -> layers_mod.Layer:
        """The model's layer of that name (its own, or the one the model gave it)."""
        for layer, layer_name in self._names.items():
            if layer_name == name:
                return layer
        raise ValueError(f"get_layer: the model has no layer {name!r} (it has {', '.join(self._names.values())})")
