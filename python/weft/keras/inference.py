"""The forward pass of a trained model as a weft graph, for ``predict``.

The model's ModelSpec is lowered again here, op by op as
graph/model_lowering.cc lowers it for evaluation (variables ``<layer
name>/kernel`` and ``/bias``, ``/gamma``, ``/beta``, ``/moving_mean`` and
``/moving_variance``, ``/embeddings``, ``/recurrent_kernel``; layers named ``layer<i>_<kind>`` unless named; each
layer reads the layers its ``inputs`` name, else the layer before it), with
the trained values as constants and a softmax at the end, and run in a
Session on the cluster. Batch normalisation uses the moving statistics;
layer normalisation each example's own, as in training.
"""
from __future__ import annotations

from typing import Dict, List, Tuple

import numpy as np

from weft import ops
from weft._pb import job_pb2
from weft.graph import Graph, Tensor
from weft.keras.layers import output_shape

_ACT = {job_pb2.RELU: ops.relu, job_pb2.SIGMOID: ops.sigmoid, job_pb2.TANH: ops.tanh, job_pb2.SOFTMAX: ops.softmax}
_INPUT = "input"


def layer_name(spec: "job_pb2.LayerSpec", i: int) -> str:
    """Layer ``i``'s name in the model (and the scope of its variables)."""
    return spec.name or f"layer{i}_{spec.WhichOneof('kind') or 'layer'}"


def _activate(x: Tensor, activation: int, last: bool) -> Tensor:
    # The model's last layer leaves a softmax to the loss (and to forward_graph's end).
    if last and activation == job_pb2.SOFTMAX:
        return x
    return _ACT[activation](x) if activation in _ACT else x


def _variable(weights: Dict[str, np.ndarray], prefix: str, name: str, required: bool = True):
    value = weights.get(f"{prefix}/{name}")
    if value is None and required:
        raise ValueError(f"the checkpoint has no variable {prefix}/{name}: it is not this model's")
    return None if value is None else ops.constant(np.asarray(value, np.float32))


def forward_graph(model: "job_pb2.ModelSpec", weights: Dict[str, np.ndarray]):
    """(graph, input placeholder, class probabilities) for ``model`` with ``weights`` (for a
    mean-squared-error model, its outputs; for a binary one, class 1's probability)."""
    g = Graph()
    with g.as_default():
        x = ops.placeholder("float32", [None] + list(model.input_shape), name="input")
        # Each layer's output (and one example's shape) by name; "input" is the model's input.
        outs: Dict[str, Tuple[Tensor, Tuple[int, ...]]] = {_INPUT: (x, tuple(model.input_shape))}
        previous = _INPUT
        last = len(model.layer) - 1
        for i, layer in enumerate(model.layer):
            name = layer_name(layer, i)
            reads = list(layer.inputs) or [previous]
            missing = [r for r in reads if r not in outs]
            if missing:
                raise ValueError(f"model layer {i} ({name}) reads {missing[0]!r}, which names no earlier layer")
            ins = [outs[r][0] for r in reads]
            shape = output_shape(layer, [outs[r][1] for r in reads])
            outs[name] = (_lower(g, layer, name, ins, shape, weights, i == last), shape)
            previous = name
        if model.loss == job_pb2.MEAN_SQUARED_ERROR:
            probs = ops.identity(outs[previous][0], name="outputs")  # a regression's outputs as they are
        elif model.loss == job_pb2.BINARY_CROSS_ENTROPY:
            probs = ops.sigmoid(outs[previous][0], name="probabilities")  # class 1's, as Keras gives them
        else:
            probs = ops.softmax(outs[previous][0], name="probabilities")
    return g, x, probs


def _lower(g: Graph, layer: "job_pb2.LayerSpec", name: str, ins: List[Tensor], shape: Tuple[int, ...],
           weights: Dict[str, np.ndarray], last: bool) -> Tensor:
    """Layer ``layer``'s output from its inputs ``ins``; ``shape``: one example's, after it."""
    kind = layer.WhichOneof("kind")
    h = ins[0]
    if kind == "dense":
        d = layer.dense
        kernel = _variable(weights, name, "kernel")
        if len(shape) == 2:  # a sequence: each position projected, as rows of features
            h = ops.reshape(h, [-1, np.shape(weights[f"{name}/kernel"])[0]])
        h = ops.matmul(h, kernel)
        bias = _variable(weights, name, "bias", required=not d.no_bias)
        if bias is not None:
            h = ops.bias_add(h, bias)
        h = _activate(h, d.activation, last)
        return ops.reshape(h, [-1] + list(shape)) if len(shape) == 2 else h
    if kind == "multi_head_attention":
        from weft.keras.attention_layers import lower_for_predict
        return lower_for_predict(g, layer.multi_head_attention, name, h, shape, weights)
    if kind == "conv2d":
        c = layer.conv2d
        h = g.op("Conv2D", [h, _variable(weights, name, "kernel")],
                 {"stride": c.stride or 1, "padding": c.padding or "SAME"})
        bias = _variable(weights, name, "bias", required=not c.no_bias)
        if bias is not None:
            h = ops.bias_add(h, bias)
        return _activate(h, c.activation, last)
    if kind == "max_pool":
        p = layer.max_pool
        k = p.pool_size or 2
        return g.op("MaxPool", [h], {"ksize": k, "stride": p.stride or k, "padding": p.padding or "VALID"})
    if kind == "batch_norm":
        bn = layer.batch_norm
        stats = [_variable(weights, name, v) for v in ("gamma", "beta", "moving_mean", "moving_variance")]
        h = g.op("BatchNormInference", [h] + stats, {"epsilon": float(bn.epsilon or 1e-3)})
        return _activate(h, bn.activation, last)
    if kind == "layer_norm":
        ln = layer.layer_norm
        scale = [_variable(weights, name, v) for v in ("gamma", "beta")]
        h = g.op("LayerNorm", [h] + scale, {"epsilon": float(ln.epsilon or 1e-3)}, num_outputs=3)[0]
        return _activate(h, ln.activation, last)
    if kind == "embedding":
        return g.op("Embedding", [_variable(weights, name, "embeddings"), h])
    if kind == "position_embedding":  # a [seq, width] table added to every example, as a flat BiasAdd
        flat = shape[0] * shape[1]
        table = ops.reshape(_variable(weights, name, "embeddings"), [flat])
        return ops.reshape(ops.bias_add(ops.reshape(h, [-1, flat]), table), [-1] + list(shape))
    if kind in ("lstm", "gru"):
        weights_of = [_variable(weights, name, v) for v in ("kernel", "recurrent_kernel", "bias")]
        return g.op(kind.upper(), [h] + weights_of,
                    {"return_sequences": bool(getattr(layer, kind).return_sequences)}, num_outputs=4)[0]
    if kind == "add":
        return _activate(g.op("AddN", ins), layer.add.activation, last)
    if kind == "avg_pool":
        p = layer.avg_pool
        k = p.pool_size or 2
        return g.op("AvgPool", [h], {"ksize": k, "stride": p.stride or k, "padding": p.padding or "VALID"})
    if kind == "concatenate":
        return g.op("Concat", ins)
    if kind == "global_avg_pool":
        return g.op("GlobalAvgPool", [h])
    if kind in ("flatten", "reshape"):
        return ops.reshape(h, [-1] + list(shape))
    if kind == "activation":
        return _activate(h, layer.activation.activation, last)
    if kind == "dropout":
        return h  # the identity at inference
    raise ValueError(f"layer {name}: predict cannot lower a {kind or 'kind-less'} layer")
