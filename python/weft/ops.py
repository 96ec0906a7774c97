"""Functions for the ops of weft's registry, adding nodes to the default graph.

Each returns the new node's output Tensor. Any other registered op can be
added with ``weft.get_default_graph().op("OpName", inputs, attrs)``.
"""
from __future__ import annotations

from typing import Optional, Sequence

import numpy as np

from weft.graph import Tensor, get_default_graph


def _g(*inputs):
    for t in inputs:
        if isinstance(t, Tensor):
            return t.graph
    return get_default_graph()


def _t(graph, value, dtype=None) -> Tensor:
    return value if isinstance(value, Tensor) else constant(value, dtype=dtype, graph=graph)


def placeholder(dtype, shape: Sequence[Optional[int]], name: Optional[str] = None) -> Tensor:
    """Fed by ``Session.run(feed_dict=...)``; None marks a dimension of any size."""
    return get_default_graph().op("Placeholder", attrs={"dtype": dtype, "shape": list(shape)},
                                  name=name or "Placeholder")


def constant(value, dtype=None, name: Optional[str] = None, graph=None) -> Tensor:
    from weft import tensors
    return (graph or get_default_graph()).op("Const", attrs={"value": tensors.to_proto(value, dtype)},
                                             name=name or "Const")


def variable(shape: Sequence[int], dtype="float32", initializer: str = "zeros", init_value: float = 0.0,
             seed: int = 0, name: Optional[str] = None, container: Optional[str] = None,
             shared_name: Optional[str] = None) -> Tensor:
    """A variable of ``shape`` on the node's task, created by the first step that reads it.

    initializer: zeros, ones, constant (``init_value``), glorot_uniform or he_normal.
    container: keep the variable in this named container of the task, where
    it outlives the session and every session of the same user naming the
    same container and variable shares it, until ``weft.reset`` clears it.
    """
    if initializer not in ("zeros", "ones", "constant", "glorot_uniform", "he_normal"):
        raise ValueError(f"initializer: unknown {initializer!r} (zeros, ones, constant, glorot_uniform, he_normal)")
    attrs = {"dtype": dtype, "shape": [int(d) for d in shape], "initializer": initializer,
             "init_value": float(init_value), "seed": int(seed), "container": container or None,
             "shared_name": shared_name or None}
    return get_default_graph().op("Variable", attrs=attrs, name=name or "Variable")


def assign(ref: Tensor, value, name: Optional[str] = None) -> Tensor:
    """Writes ``value`` into variable ``ref`` (same dtype and shape); outputs the variable."""
    g = _g(ref)
    return g.op("Assign", [ref, _t(g, value)], name=name or "Assign", device=_device_of(ref))


def assign_add(ref: Tensor, value, name: Optional[str] = None) -> Tensor:
    """Adds ``value`` to variable ``ref`` in place; outputs the variable."""
    g = _g(ref)
    return g.op("AssignAdd", [ref, _t(g, value)], name=name or "AssignAdd", device=_device_of(ref))


def _device_of(t: Tensor) -> Optional[str]:
    for node in t.graph._nodes:  # an update runs where its variable lives
        if node.name == t.op:
            return node.device or None
    return None


def _binary(op, a, b, name):
    g = _g(a, b)
    return g.op(op, [_t(g, a), _t(g, b)], name=name or op)


def add(a, b, name=None) -> Tensor:
    return _binary("Add", a, b, name)


def sub(a, b, name=None) -> Tensor:
    return _binary("Sub", a, b, name)


def mul(a, b, name=None) -> Tensor:
    return _binary("Mul", a, b, name)


def equal(a, b, name=None) -> Tensor:
    return _binary("Equal", a, b, name)


def matmul(a, b, transpose_a: bool = False, transpose_b: bool = False, name=None) -> Tensor:
    g = _g(a, b)
    return g.op("MatMul", [_t(g, a), _t(g, b)], {"transpose_a": transpose_a, "transpose_b": transpose_b},
                name=name or "MatMul")


def bias_add(x, bias, name=None) -> Tensor:
    return _binary("BiasAdd", x, bias, name)


def _unary(op, x, name):
    g = _g(x)
    return g.op(op, [_t(g, x)], name=name or op)


def neg(x, name=None) -> Tensor:
    return _unary("Neg", x, name)


def relu(x, name=None) -> Tensor:
    return _unary("Relu", x, name)


def sigmoid(x, name=None) -> Tensor:
    return _unary("Sigmoid", x, name)


def tanh(x, name=None) -> Tensor:
    return _unary("Tanh", x, name)


def softmax(x, name=None) -> Tensor:
    return _unary("Softmax", x, name)


def identity(x, name=None) -> Tensor:
    return _unary("Identity", x, name)


def reduce_sum(x, name=None) -> Tensor:
    """The sum of every element (a scalar)."""
    return _unary("Sum", x, name)


def reduce_mean(x, name=None) -> Tensor:
    """The mean of every element (a scalar)."""
    return _unary("Mean", x, name)


def argmax(x, name=None) -> Tensor:
    """Index of the largest value of each row."""
    return _unary("ArgMax", x, name)


def cast(x, dtype, name=None) -> Tensor:
    g = _g(x)
    return g.op("Cast", [_t(g, x)], {"dtype": dtype}, name=name or "Cast")


def reshape(x, shape: Sequence[int], name=None) -> Tensor:
    g = _g(x)
    from weft._pb import graph_pb2
    dims = graph_pb2.AttrValue(list=graph_pb2.AttrValue.ListValue(i=[int(d) for d in shape]))
    return g.op("Reshape", [_t(g, x)], {"shape": dims}, name=name or "Reshape")


def no_op(control_inputs: Sequence[Tensor] = (), name=None) -> Tensor:
    return get_default_graph().op("NoOp", control_inputs=control_inputs, name=name or "NoOp", num_outputs=1)


def apply_gradient_descent(var, grad, learning_rate: float, name=None) -> Tensor:
    g = _g(var, grad)
    return g.op("ApplyGradientDescent", [var, _t(g, grad)], {"learning_rate": float(learning_rate)},
                name=name or "ApplyGradientDescent", device=_device_of(var))


__all__ = [n for n in dir() if not n.startswith("_") and n not in ("np", "Optional", "Sequence", "Tensor",
                                                                     "annotations", "get_default_graph")]
