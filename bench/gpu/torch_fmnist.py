#!/usr/bin/env python3
"""PyTorch eager on one GPU: the Fashion-MNIST models of examples/fmnist_mlp.pbtxt
and examples/fmnist_cnn.pbtxt, trained the way `weft train` trains them (same
layers, optimizer, learning rate, batch), for bench/gpu.sh.

Usage: torch_fmnist.py --model mlp|cnn --data DIR [--epochs N] [--batch 64]
                       [--lr LR] [--device cuda]
Prints one JSON line: samples/s over the training steps (loading and the final
evaluation excluded, the first epoch's first steps included as in weft),
the final train loss and the test accuracy.

The whole training split sits on the GPU as float32 (scaled by 1/255) and
each epoch draws a fresh permutation there, so the loop measures the model's
steps, not a data loader: the strongest ordinary eager loop. The loss is read
back once per epoch, not per step.
"""
import argparse
import gzip
import json
import os
import struct
import time

import numpy as np
import torch
import torch.nn as nn


def idx(path):
    with gzip.open(path, "rb") as f:
        data = f.read()
    magic, n = struct.unpack(">II", data[:8])
    if magic == 2051:
        r, c = struct.unpack(">II", data[8:16])
        return np.frombuffer(data, np.uint8, offset=16).reshape(n, r * c)
    return np.frombuffer(data, np.uint8, offset=8)


def mlp():
    return nn.Sequential(nn.Linear(784, 256), nn.ReLU(), nn.Linear(256, 128), nn.ReLU(), nn.Linear(128, 10))


def cnn():
    # conv2d 3x3 SAME + ReLU, max-pool 2; twice; dense 128 ReLU; dense 10.
    return nn.Sequential(
        nn.Conv2d(1, 16, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(16, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Flatten(), nn.Linear(32 * 7 * 7, 128), nn.ReLU(), nn.Linear(128, 10))


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--model", choices=["mlp", "cnn"], required=True)
    p.add_argument("--data", required=True)
    p.add_argument("--epochs", type=int, default=1)
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--lr", type=float, default=None)
    p.add_argument("--device", default="cuda")
    a = p.parse_args()
    lr = a.lr if a.lr is not None else (0.0005 if a.model == "mlp" else 0.001)
    dev = torch.device(a.device)
    torch.manual_seed(1)

    shape = (-1, 784) if a.model == "mlp" else (-1, 1, 28, 28)
    xs = torch.from_numpy(idx(os.path.join(a.data, "train-images-idx3-ubyte.gz")).copy())
    ys = torch.from_numpy(idx(os.path.join(a.data, "train-labels-idx1-ubyte.gz")).astype(np.int64))
    xs = (xs.to(dev).float() / 255.0).reshape(shape)
    ys = ys.to(dev)
    model = (mlp() if a.model == "mlp" else cnn()).to(dev)
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    lossf = nn.CrossEntropyLoss()
    n = xs.shape[0]
    steps_per_epoch = n // a.batch

    torch.cuda.synchronize(dev)
    t0, seen, last_loss = time.perf_counter(), 0, float("nan")
    for ep in range(a.epochs):
        g = torch.Generator(device=dev).manual_seed(ep)
        perm = torch.randperm(n, device=dev, generator=g)
        total = torch.zeros((), device=dev)
        for s in range(steps_per_epoch):
            b = perm[s * a.batch:(s + 1) * a.batch]
            opt.zero_grad(set_to_none=True)
            loss = lossf(model(xs[b]), ys[b])
            loss.backward()
            opt.step()
            total += loss.detach()
            seen += a.batch
        last_loss = (total / steps_per_epoch).item()  # one sync per epoch
    torch.cuda.synchronize(dev)
    dt = time.perf_counter() - t0

    tx = torch.from_numpy(idx(os.path.join(a.data, "t10k-images-idx3-ubyte.gz")).copy()).to(dev).float() / 255.0
    ty = torch.from_numpy(idx(os.path.join(a.data, "t10k-labels-idx1-ubyte.gz")).astype(np.int64)).to(dev)
    with torch.no_grad():
        acc = (model(tx.reshape(shape)).argmax(1) == ty).float().mean().item()
    print(json.dumps({"system": "torch", "model": a.model, "torch": torch.__version__,
                      "gpu": torch.cuda.get_device_name(dev), "batch": a.batch, "epochs": a.epochs,
                      "steps": seen // a.batch, "seconds": round(dt, 3),
                      "samples_per_second": round(seen / dt, 1), "train_loss": round(last_loss, 4),
                      "test_accuracy": round(acc, 4)}))


if __name__ == "__main__":
    main()
