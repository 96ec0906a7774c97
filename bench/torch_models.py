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

Images come as [N, 1, 28, 28] (the MLP flattens them itself).
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
    raise ValueError(f"unknown model {model!r} (mlp, cnn, resnet)")
