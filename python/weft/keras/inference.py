"""The forward pass of a trained Sequential model as a weft graph, for ``predict``.

The model's ModelSpec is lowered again here, op by op as graph/lowering.cc
lowers it (variables ``<layer name>/kernel`` and ``/bias``, layers named
``layer<i>_<kind>`` unless named), with the trained values as constants and
a softmax at the end, and run in a Session on the cluster.
"""
from __future__ import annotations

from typing import Dict

import numpy as np

from weft import ops
from weft._pb import job_pb2
from weft.graph import Graph, Tensor

_KIND = {"dense": "dense", "conv2d": "conv2d", "max_pool": "max_pool", "flatten": "flatten", "dropout": "dropout",
         "activation": "activation", "reshape": "reshape"}
_ACT = {job_pb2.RELU: ops.relu, job_pb2.SIGMOID: ops.sigmoid, job_pb2.TANH: ops.tanh, job_pb2.SOFTMAX: ops.softmax}


def _activate(x: Tensor, activation: int) -> Tensor:
    return _ACT[activation](x) if activation in _ACT else x


def _weights(weights: Dict[str, np.ndarray], prefix: str):
    kernel = weights.get(f"{prefix}/kernel")
    if kernel is None:
        raise ValueError(f"the checkpoint has no variable {prefix}/kernel: it is not this model's")
    return kernel, weights.get(f"{prefix}/bias")


def forward_graph(model: "job_pb2.ModelSpec", weights: Dict[str, np.ndarray]):
    """(graph, input placeholder, class probabilities) for ``model`` with ``weights``."""
    g = Graph()
    with g.as_default():
        x = ops.placeholder("float32", [None] + list(model.input_shape), name="input")
        h = x
        for i, layer in enumerate(model.layer):
            kind = layer.WhichOneof("kind")
            prefix = layer.name or f"layer{i}_{_KIND[kind]}"
            if kind == "dense":
                kernel, bias = _weights(weights, prefix)
                h = ops.matmul(h, ops.constant(kernel))
                if bias is not None:
                    h = ops.bias_add(h, ops.constant(bias))
                h = _activate(h, layer.dense.activation)
            elif kind == "conv2d":
                kernel, bias = _weights(weights, prefix)
                c = layer.conv2d
                h = g.op("Conv2D", [h, ops.constant(kernel)],
                         {"stride": c.stride or 1, "padding": c.padding or "SAME"})
                h = _activate(ops.bias_add(h, ops.constant(bias)), c.activation)
            elif kind == "max_pool":
                p = layer.max_pool
                k = p.pool_size or 2
                h = g.op("MaxPool", [h], {"ksize": k, "stride": p.stride or k, "padding": p.padding or "VALID"})
            elif kind == "flatten":
                h = ops.reshape(h, [-1, int(np.prod(_shape_after(model, i)))])
            elif kind == "reshape":
                h = ops.reshape(h, [-1] + list(layer.reshape.shape))
            elif kind == "activation":
                h = _activate(h, layer.activation.activation)
            # dropout: the identity at inference
        probs = ops.softmax(h, name="probabilities")
    return g, x, probs


def _shape_after(model: "job_pb2.ModelSpec", upto: int):
    """One example's shape before layer ``upto`` (for Flatten), from the layer geometry."""
    shape = list(model.input_shape)
    for layer in model.layer[:upto]:
        kind = layer.WhichOneof("kind")
        if kind == "conv2d":
            c = layer.conv2d
            s = c.stride or 1
            if (c.padding or "SAME") == "SAME":
                shape = [-(-shape[0] // s), -(-shape[1] // s), c.filters]
            else:
                shape = [(shape[0] - c.kernel_size) // s + 1, (shape[1] - c.kernel_size) // s + 1, c.filters]
        elif kind == "max_pool":
            p = layer.max_pool
            k = p.pool_size or 2
            s = p.stride or k
            if (p.padding or "VALID") == "SAME":
                shape = [-(-shape[0] // s), -(-shape[1] // s), shape[2]]
            else:
                shape = [(shape[0] - k) // s + 1, (shape[1] - k) // s + 1, shape[2]]
        elif kind == "dense":
            shape = [layer.dense.units]
        elif kind == "flatten":
            shape = [int(np.prod(shape))]
        elif kind == "reshape":
            shape = list(layer.reshape.shape)
    return shape
