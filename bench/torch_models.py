"""The example jobs' networks in PyTorch, for the peers that time them:
bench/torch_ddp_cnn.py on CPU and bench/gpu/torch_fmnist.py on a GPU.

    network("mlp")     examples/fmnist_mlp.pbtxt: dense 256, 128 (ReLU), 10
    network("cnn")     examples/fmnist_cnn.pbtxt: 3x3 convolutions of 16 and
                       32 filters (SAME, ReLU), each with a 2x2 max-pool;
                       dense 128 (ReLU), 10
    network("resnet")  examples/fmnist_resnet.pbtxt: a batch-normalised stem
                       of 32 filters and a max-pool, a residual block of 32,
                       a strided block of 64 with a 1x1 projection shortcut,
                       global average pooling, dense 10
    network("lstm")    examples/fmnist_lstm.pbtxt: the 28 rows as 28 steps
                       of an LSTM of 128 units, its last output, dense 10
    CharTransformer()  examples/kjv_transformer.pbtxt: byte embeddings and
                       learned positions, pre-norm blocks of causal
                       multi-head self-attention and a ReLU feed-forward
                       (each with a residual join), a final layer norm and
                       dense logits over the 256 bytes

Images come as [N, 1, 28, 28] (the MLP flattens them itself, the LSTM reads
them as rows); text as
[N, sequence] byte ids.
"""
import torch
from torch import nn


def bn(channels):
    # weft's batch_norm defaults: moving-average decay 0.99 (PyTorch's
    # momentum is 1 - decay), epsilon 1e-3.
    return nn.BatchNorm2d(channels, eps=1e-3, momentum=0.01)


class Block(nn.Module):
    """conv-bn-relu-conv-bn plus the shortcut, then relu (the example's b1, b2)."""

    def __init__(self, cin, cout, stride):
        super().__init__()
        self.body = nn.Sequential(
            nn.Conv2d(cin, cout, 3, stride, padding=1, bias=False), bn(cout), nn.ReLU(),
            nn.Conv2d(cout, cout, 3, padding=1, bias=False), bn(cout))
        self.shortcut = nn.Identity() if stride == 1 and cin == cout else nn.Sequential(
            nn.Conv2d(cin, cout, 1, stride, bias=False), bn(cout))

    def forward(self, x):
        return torch.relu(self.shortcut(x) + self.body(x))


def network(model):
    if model == "mlp":
        return nn.Sequential(nn.Flatten(), nn.Linear(784, 256), nn.ReLU(), nn.Linear(256, 128), nn.ReLU(),
                             nn.Linear(128, 10))
    if model == "cnn":
        return nn.Sequential(
            nn.Conv2d(1, 16, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(16, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
            nn.Flatten(), nn.Linear(7 * 7 * 32, 128), nn.ReLU(), nn.Linear(128, 10))
    if model == "resnet":
        return nn.Sequential(
            nn.Conv2d(1, 32, 3, padding=1, bias=False), bn(32), nn.ReLU(), nn.MaxPool2d(2),
            Block(32, 32, 1), Block(32, 64, 2),
            nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(64, 10))
    if model == "lstm":
        return RowLstm(28, 128, 10)
    raise ValueError(f"unknown model {model!r} (mlp, cnn, resnet, lstm)")


class RowLstm(nn.Module):
    """An image's rows as the steps of one LSTM layer; its last output, dense.
    PyTorch's LSTM has two biases where Keras's (and weft's) has one, with the
    forget gate's set to 1: that is the one initial difference."""

    def __init__(self, row, units, classes):
        super().__init__()
        self.row = row
        self.lstm = nn.LSTM(row, units, batch_first=True)
        self.dense = nn.Linear(units, classes)

    def forward(self, x):
        out, _ = self.lstm(x.reshape(x.shape[0], -1, self.row))
        return self.dense(out[:, -1])


class TransformerBlock(nn.Module):
    """x + attention(layer_norm(x)), then that + feed_forward(layer_norm(that));
    weft's layer_norm epsilon is 1e-3."""

    def __init__(self, width, heads, hidden):
        super().__init__()
        self.ln1 = nn.LayerNorm(width, eps=1e-3)
        self.attention = nn.MultiheadAttention(width, heads, batch_first=True)
        self.ln2 = nn.LayerNorm(width, eps=1e-3)
        self.feed_forward = nn.Sequential(nn.Linear(width, hidden), nn.ReLU(), nn.Linear(hidden, width))

    def forward(self, x, mask):
        h = self.ln1(x)
        x = x + self.attention(h, h, h, attn_mask=mask, need_weights=False)[0]
        return x + self.feed_forward(self.ln2(x))


class CharTransformer(nn.Module):
    def __init__(self, sequence=128, width=128, heads=4, hidden=512, blocks=2, vocabulary=256):
        super().__init__()
        self.embedding = nn.Embedding(vocabulary, width)
        self.position = nn.Parameter(torch.zeros(sequence, width))
        self.blocks = nn.ModuleList(TransformerBlock(width, heads, hidden) for _ in range(blocks))
        self.ln = nn.LayerNorm(width, eps=1e-3)
        self.logits = nn.Linear(width, vocabulary)
        # -inf above the diagonal: a position attends to itself and earlier ones
        # (a float mask: DDP's gloo broadcast of buffers takes no bool tensor).
        self.register_buffer("mask", torch.full((sequence, sequence), float("-inf")).triu(1))

    def forward(self, ids):
        x = self.embedding(ids) + self.position
        for block in self.blocks:
            x = block(x, self.mask)
        return self.logits(self.ln(x))
