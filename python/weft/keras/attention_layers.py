"""Keras's ``MultiHeadAttention`` as weft's self-attention layer (proto/job.proto's
MultiHeadAttentionLayer; graph/attention_lowering.cc lowers it).

Reached as ``weft.keras.layers.MultiHeadAttention``: layers.py imports this
module at its end. The layer reads a sequence (seq, features) and gives the
same shape: query, key and value projections (features -> num_heads *
key_dim, with biases), scaled dot-product attention per head (with
``use_causal_mask=True``, position i attends to positions 0..i only), and an
output projection back to features. Its variables are ``<name>/query/kernel``
and ``/query/bias``, ``/key/...``, ``/value/...`` and
``/attention_output/kernel`` and ``/bias``; a kernel is 2-D,
``[features, num_heads * key_dim]`` (Keras keeps it as ``[features,
num_heads, key_dim]``: the same values, reshaped).

Only self-attention: ``layer(x)``, ``layer(x, x)``, ``layer(x, x, x)`` or
``layer(query=x, value=x)``; cross-attention, masks, returned scores and
attention dropout are refused, naming the argument.
"""
from __future__ import annotations

from typing import Optional, Sequence

from weft.keras.layers import KerasTensor, Layer, _bool, _only_weft_values, _positive_int

# Keras's MultiHeadAttention arguments that weft fixes, with the value it has.
_FIXED = {
    "dropout": (0.0, 0), "use_bias": True, "output_shape": None, "attention_axes": (None, 1, (1,), [1], -2),
    "kernel_initializer": "glorot_uniform", "bias_initializer": "zeros", "kernel_regularizer": None,
    "bias_regularizer": None, "activity_regularizer": None, "kernel_constraint": None, "bias_constraint": None,
    "seed": None, "flash_attention": (None, False), "trainable": True,
}
_WHAT = ("weft's multi_head_attention is self-attention over the sequence axis with biased glorot_uniform "
         "projections back to the input's width, and no attention dropout")


class MultiHeadAttention(Layer):
    """Multi-head self-attention over a sequence (seq, features) -> (seq, features).

    ``key_dim``: each head's width; None (weft's) takes features / num_heads.
    ``value_dim``: None or key_dim (weft's heads have one width).
    ``causal`` (weft's): mask the future in a Sequential model, as
    ``use_causal_mask=True`` does in a functional call.
    """

    def __init__(self, num_heads: int, key_dim: Optional[int] = None, value_dim: Optional[int] = None, *,
                 causal: bool = False, name: Optional[str] = None, input_shape: Optional[Sequence[int]] = None,
                 **keras) -> None:
        super().__init__(name=name, input_shape=input_shape)
        d = self.describe()
        self.num_heads = _positive_int(d, "num_heads", num_heads)
        self.key_dim = _positive_int(d, "key_dim", key_dim, allow_none=True)
        if value_dim is not None and value_dim != self.key_dim:
            raise ValueError(f"{d}: value_dim={value_dim!r} is not supported: weft's heads have one width "
                             f"(value_dim=None or key_dim={self.key_dim!r})")
        _only_weft_values(d, keras, _FIXED, _WHAT)
        self.causal = _bool(d, "causal", causal)

    def __call__(self, query, value=None, key=None, query_mask=None, value_mask=None, key_mask=None,
                 attention_mask=None, return_attention_scores=False, training=None,
                 use_causal_mask=False) -> KerasTensor:
        """Self-attention on ``query``: ``value`` and ``key``, when given, must be ``query`` itself."""
        d = self.describe()
        for other, what in ((value, "value"), (key, "key")):
            if other is not None and other is not query:
                raise ValueError(f"{d}: cross-attention is not supported: weft's multi_head_attention is "
                                 f"self-attention, so {what} must be the query tensor itself (or left out)")
        for arg, given in (("query_mask", query_mask), ("value_mask", value_mask), ("key_mask", key_mask),
                           ("attention_mask", attention_mask)):
            if given is not None:
                raise ValueError(f"{d}: {arg} is not supported: weft masks nothing but the future "
                                 "(use_causal_mask=True)")
        if return_attention_scores is not False:
            raise ValueError(f"{d}: return_attention_scores=True is not supported: the layer returns its output only")
        if training not in (None, True, False):
            raise TypeError(f"{d}: training must be a bool or None, not {type(training).__name__}")
        if _bool(d, "use_causal_mask", use_causal_mask):
            self.causal = True
        if isinstance(query, KerasTensor):
            self._check_input(tuple(query.shape[1:]))
        return super().__call__(query)

    def _check_input(self, shape) -> None:
        d = self.describe()
        if len(shape) != 2:
            raise ValueError(f"{d}: multi_head_attention needs a sequence input (seq, features), got {shape}")
        if self.key_dim is None and shape[1] % self.num_heads:
            raise ValueError(f"{d}: num_heads {self.num_heads} does not divide the input's {shape[1]} features; "
                             "set key_dim")

    def _fill(self, spec):
        a = spec.multi_head_attention
        a.num_heads, a.key_dim, a.causal = self.num_heads, self.key_dim or 0, self.causal


def lower_for_predict(g, spec, name: str, h, shape, weights):
    """The layer's forward pass for predict (weft.keras.inference), as
    graph/attention_lowering.cc lowers it: ``h`` is the input tensor,
    ``shape`` one example's (seq, features)."""
    from weft import ops
    from weft.keras.inference import _variable

    seq, features = shape
    width = spec.num_heads * (spec.key_dim or features // spec.num_heads)
    rows = ops.reshape(h, [-1, features])

    def project(x, scope):
        return ops.bias_add(ops.matmul(x, _variable(weights, name, f"{scope}/kernel")),
                            _variable(weights, name, f"{scope}/bias"))

    q, k, v = (ops.reshape(project(rows, s), [-1, seq, width]) for s in ("query", "key", "value"))
    out = g.op("Attention", [q, k, v], {"num_heads": spec.num_heads, "causal": bool(spec.causal)}, num_outputs=2)[0]
    return ops.reshape(project(ops.reshape(out, [-1, width]), "attention_output"), [-1, seq, features])
