"""A small graph-building API over weft's GraphDef (proto/graph.proto).

A ``Graph`` collects NodeDefs; ``Graph.op`` adds one with unique name,
inputs, attributes and the device of the enclosing ``g.device(...)``.
Ops the registry has get functions in ``weft.ops``. Shapes and types are
checked by the master when the graph reaches it (CreateSession /
ExtendSession), whose errors name the node.

    g = weft.Graph()
    with g.as_default():
        x = weft.ops.placeholder("float32", [None, 3], name="x")
        with g.device("/job:ps/task:0"):
            w = weft.ops.variable([3, 1], initializer="ones", name="w")
        y = weft.ops.matmul(x, w)
"""
from __future__ import annotations

import contextlib
import re
import threading
from typing import Any, Dict, Iterator, List, Optional, Sequence, Union

import numpy as np

from weft import tensors
from weft._pb import graph_pb2, tensor_pb2

_NAME = re.compile(r"^[A-Za-z0-9_.][A-Za-z0-9_.\-/]*$")
_TYPE_ATTRS = {"dtype", "T", "SrcT", "DstT", "out_type"}
_local = threading.local()


class Tensor:
    """Output ``index`` of node ``op`` in ``graph``: "op" or "op:index"."""

    def __init__(self, graph: "Graph", op: str, index: int = 0) -> None:
        self.graph, self.op, self.index = graph, op, index

    @property
    def name(self) -> str:
        return self.op if self.index == 0 else f"{self.op}:{self.index}"

    def __repr__(self) -> str:
        return f"<weft.Tensor {self.name!r}>"

    # Arithmetic builds nodes, as in TensorFlow.
    def __add__(self, other):
        from weft import ops
        return ops.add(self, other)

    def __sub__(self, other):
        from weft import ops
        return ops.sub(self, other)

    def __mul__(self, other):
        from weft import ops
        return ops.mul(self, other)

    def __neg__(self):
        from weft import ops
        return ops.neg(self)

    def __matmul__(self, other):
        from weft import ops
        return ops.matmul(self, other)


def attr_value(key: str, value: Any) -> "graph_pb2.AttrValue":
    """An AttrValue for a Python value: bool, int, float, str, a dtype (for
    type attributes), a shape (list with None for unknown dims, for
    ``shape``), a NumPy array (a tensor), or a list of ints/floats/strings."""
    a = graph_pb2.AttrValue()
    if isinstance(value, graph_pb2.AttrValue):
        return value
    if key in _TYPE_ATTRS and not isinstance(value, bool):
        a.type = tensors.as_dtype(value)
    elif key in ("shape", "init_shape") and isinstance(value, (list, tuple)):
        a.shape.dim.extend(-1 if d is None else int(d) for d in value)
    elif isinstance(value, bool):
        a.b = value
    elif isinstance(value, (int, np.integer)):
        a.i = int(value)
    elif isinstance(value, (float, np.floating)):
        a.f = float(value)
    elif isinstance(value, str):
        a.s = value
    elif isinstance(value, np.ndarray) or isinstance(value, tensor_pb2.TensorProto):
        a.tensor.CopyFrom(value if isinstance(value, tensor_pb2.TensorProto) else tensors.to_proto(value))
    elif isinstance(value, (list, tuple)):
        if all(isinstance(v, (int, np.integer)) and not isinstance(v, bool) for v in value):
            a.list.i.extend(int(v) for v in value)
        elif all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in value):
            a.list.f.extend(float(v) for v in value)
        elif all(isinstance(v, str) for v in value):
            a.list.s.extend(value)
        else:
            raise TypeError(f"attribute {key!r}: a list must hold only ints, floats or strings")
    else:
        raise TypeError(f"attribute {key!r}: cannot hold a {type(value).__name__}")
    return a


class Graph:
    """Nodes for a Session; ``as_graph_def()`` is what the master receives."""

    def __init__(self) -> None:
        self._nodes: List["graph_pb2.NodeDef"] = []
        self._names: Dict[str, int] = {}
        self._device: List[str] = []
        self._scope: List[str] = []
        self._lock = threading.Lock()

    # ---- scopes -----------------------------------------------------------------

    @contextlib.contextmanager
    def as_default(self) -> Iterator["Graph"]:
        stack = getattr(_local, "stack", [])
        _local.stack = stack + [self]
        try:
            yield self
        finally:
            _local.stack = stack

    @contextlib.contextmanager
    def device(self, device: str) -> Iterator[None]:
        """Nodes made inside request ``device``, e.g. "/job:ps/task:0" or "/job:worker/task:1/device:CPU:0"."""
        if not isinstance(device, str):
            raise TypeError(f"device must be a string, not {type(device).__name__}")
        if device and not device.startswith("/"):
            raise ValueError(f"device {device!r}: expected /job:NAME/task:I[/device:TYPE:N]")
        self._device.append(device)
        try:
            yield
        finally:
            self._device.pop()

    @contextlib.contextmanager
    def name_scope(self, name: str) -> Iterator[None]:
        if not isinstance(name, str) or not _NAME.match(name):
            raise ValueError(f"name_scope: {name!r} is not a valid name")
        self._scope.append(name)
        try:
            yield
        finally:
            self._scope.pop()

    # ---- nodes ------------------------------------------------------------------

    def unique_name(self, base: str) -> str:
        if not isinstance(base, str) or not _NAME.match(base):
            raise ValueError(f"name {base!r}: names are letters, digits and _ . - /")
        name = "/".join(self._scope + [base])
        with self._lock:
            if name not in self._names:
                self._names[name] = 0
                return name
            while True:
                self._names[name] += 1
                candidate = f"{name}_{self._names[name]}"
                if candidate not in self._names:
                    self._names[candidate] = 0
                    return candidate

    def op(self, op_type: str, inputs: Sequence[Union[Tensor, str]] = (), attrs: Optional[Dict[str, Any]] = None,
           name: Optional[str] = None, num_outputs: int = 1, control_inputs: Sequence[Union[Tensor, str]] = (),
           device: Optional[str] = None) -> Union[Tensor, List[Tensor]]:
        """Adds a node of ``op_type``; returns its output (or outputs, with num_outputs != 1)."""
        if not isinstance(op_type, str) or not op_type:
            raise TypeError("op_type must be an op's name")
        node = graph_pb2.NodeDef(name=self.unique_name(name or op_type), op=op_type)
        for t in inputs:
            node.input.append(self._input_name(t, "inputs"))
        for t in control_inputs:
            node.input.append("^" + self._input_name(t, "control_inputs").split(":")[0])
        for k, v in (attrs or {}).items():
            if v is not None:
                node.attr[k].CopyFrom(attr_value(k, v))
        node.device = device if device is not None else next((d for d in reversed(self._device) if d), "")
        with self._lock:
            self._nodes.append(node)
        outs = [Tensor(self, node.name, i) for i in range(num_outputs)]
        return outs[0] if num_outputs == 1 else outs

    def _input_name(self, t, what: str) -> str:
        if isinstance(t, Tensor):
            if t.graph is not self:
                raise ValueError(f"{what}: {t.name} belongs to another graph")
            return t.name
        if isinstance(t, str) and t:
            return t
        raise TypeError(f"{what}: expected a weft.Tensor or a tensor name, not {type(t).__name__}")

    def as_graph_def(self, start: int = 0) -> "graph_pb2.GraphDef":
        """The graph (nodes from index ``start`` on) as a GraphDef."""
        with self._lock:
            return graph_pb2.GraphDef(node=self._nodes[start:])

    def __len__(self) -> int:
        return len(self._nodes)

    def get_tensor(self, name: str) -> Tensor:
        op, _, index = name.partition(":")
        if op not in self._names:
            raise KeyError(f"no node {op!r} in the graph")
        return Tensor(self, op, int(index or 0))


_default_graph = Graph()


def get_default_graph() -> Graph:
    stack = getattr(_local, "stack", [])
    return stack[-1] if stack else _default_graph
