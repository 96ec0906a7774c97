#!/usr/bin/env python3
"""PyTorch on one GPU, eager or compiled: the Fashion-MNIST models of
examples/fmnist_{mlp,cnn,resnet,lstm}.pbtxt, trained the way
`weft train` trains them (same layers, optimizer, learning rate, batch), for
bench/gpu.sh.

Usage: torch_fmnist.py --model mlp|cnn|resnet|lstm --data DIR [--epochs N] [--batch 64]
                       [--lr LR] [--device cuda]
                       [--compile none|default|reduce-overhead] [--warmup N] [--amp none|fp16|bf16]
Prints one JSON line: samples/s over the training steps, the final train loss
and the test accuracy. Loading, the final evaluation and the warm-up steps
are left out of samples/s: the first --warmup steps (default 1; with
--compile at least 3, so that compilation and CUDA-graph recording happen
there) train on the first epoch's first batches before the clock starts, as
weft leaves its run's first call of steps out (its "warmup_seconds"). They
still count as training: the run trains the same steps either way, and the
JSON reports them as "warmup_steps" and "warmup_seconds".

--compile none is PyTorch eager. --compile default or reduce-overhead wraps
one training step (forward, loss, backward, Adam step, zero_grad) in one
function compiled with torch.compile(fn, mode=...) (graph breaks allowed, as
at backward); reduce-overhead also replays CUDA graphs. Needs PyTorch 2 or
newer: without torch.compile it exits non-zero, saying so.

The whole training split sits on the GPU as float32 (scaled by 1/255) and
each epoch draws a fresh permutation there, so the loop measures the model's
steps, not a data loader: the strongest ordinary loop. The loss is read back
once per epoch, not per step.
"""
import argparse
import gzip
import json
import os
import struct
import sys
import time

import numpy as np
import torch
import torch.nn as nn

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from torch_models import network  # noqa: E402 (bench/, found through the path above)


def idx(path):
    with gzip.open(path, "rb") as f:
        data = f.read()
    magic, n = struct.unpack(">II", data[:8])
    if magic == 2051:
        r, c = struct.unpack(">II", data[8:16])
        return np.frombuffer(data, np.uint8, offset=16).reshape(n, r * c)
    return np.frombuffer(data, np.uint8, offset=8)


def sync(dev):
    if dev.type == "cuda":
        torch.cuda.synchronize(dev)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--model", choices=["mlp", "cnn", "resnet", "lstm"], required=True)
    p.add_argument("--data", required=True)
    p.add_argument("--epochs", type=int, default=1)
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--lr", type=float, default=None)
    p.add_argument("--device", default="cuda")
    p.add_argument("--compile", choices=["none", "default", "reduce-overhead"], default="none")
    p.add_argument("--warmup", type=int, default=1, help="untimed steps first (with --compile at least 3)")
    p.add_argument("--amp", choices=["none", "fp16", "bf16"], default="none",
                   help="automatic mixed precision: autocast of the forward pass and loss to float16 (with "
                        "GradScaler's dynamic loss scaling) or bfloat16; weights and Adam stay float32")
    a = p.parse_args()
    if a.compile != "none" and not hasattr(torch, "compile"):
        sys.exit(f"torch_fmnist.py: --compile {a.compile} needs torch.compile (PyTorch 2 or newer); "
                 f"this is PyTorch {torch.__version__}")
    # The example jobs' learning rates; the LSTM's job also clips the
    # gradients' global norm at 5.
    lr = a.lr if a.lr is not None else {"mlp": 0.0005, "lstm": 0.002}.get(a.model, 0.001)
    clip = 5.0 if a.model == "lstm" else None
    dev = torch.device(a.device)
    torch.manual_seed(1)

    shape = (-1, 784) if a.model == "mlp" else (-1, 1, 28, 28)
    xs = torch.from_numpy(idx(os.path.join(a.data, "train-images-idx3-ubyte.gz")).copy())
    ys = torch.from_numpy(idx(os.path.join(a.data, "train-labels-idx1-ubyte.gz")).astype(np.int64))
    xs = (xs.to(dev).float() / 255.0).reshape(shape)
    ys = ys.to(dev)
    model = network(a.model).to(dev)
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    lossf = nn.CrossEntropyLoss()
    n = xs.shape[0]
    steps_per_epoch = n // a.batch
    total_steps = steps_per_epoch * a.epochs
    warmup = max(a.warmup, 3) if a.compile != "none" else max(a.warmup, 0)
    warmup = min(warmup, max(total_steps - 1, 0))  # leave at least one timed step

    amp_dtype = {"none": None, "fp16": torch.float16, "bf16": torch.bfloat16}[a.amp]
    scaler = torch.amp.GradScaler("cuda") if a.amp == "fp16" else None

    def forward_backward_update(x, y):
        """One step's forward (under autocast with --amp), loss, backward and Adam update."""
        with torch.autocast(device_type=dev.type, dtype=amp_dtype, enabled=amp_dtype is not None):
            loss = lossf(model(x), y)
        if scaler is None:
            loss.backward()
            if clip is not None:
                nn.utils.clip_grad_norm_(model.parameters(), clip)
            opt.step()
        else:
            scaler.scale(loss).backward()
            if clip is not None:
                scaler.unscale_(opt)
                nn.utils.clip_grad_norm_(model.parameters(), clip)
            scaler.step(opt)
            scaler.update()
        return loss.detach()

    if a.compile == "none":
        def step(x, y):
            opt.zero_grad(set_to_none=True)
            return forward_backward_update(x, y)
    else:
        def train_step(x, y):
            loss = forward_backward_update(x, y)
            opt.zero_grad(set_to_none=True)
            return loss

        compiled = torch.compile(train_step, mode=a.compile)
        # CUDA graphs (reduce-overhead) reuse their output buffers: each call
        # is a new step whose loss is consumed (added to the epoch's total)
        # before the next call.
        mark = getattr(getattr(torch, "compiler", None), "cudagraph_mark_step_begin", None)
        if a.compile == "reduce-overhead" and mark is not None:
            def step(x, y):
                mark()
                return compiled(x, y)
        else:
            step = compiled

    sync(dev)
    t_start = time.perf_counter()
    t0, done, seen, last_loss, warmup_seconds = t_start, 0, 0, float("nan"), 0.0
    for ep in range(a.epochs):
        g = torch.Generator(device=dev).manual_seed(ep)
        perm = torch.randperm(n, device=dev, generator=g)
        total = torch.zeros((), device=dev)
        for s in range(steps_per_epoch):
            b = perm[s * a.batch:(s + 1) * a.batch]
            total += step(xs[b], ys[b])
            done += 1
            if done == warmup:
                # The warm-up ends: the clock starts after its last step.
                sync(dev)
                t0 = time.perf_counter()
                warmup_seconds = t0 - t_start
            elif done > warmup:
                seen += a.batch
        last_loss = (total / steps_per_epoch).item()  # one sync per epoch
    sync(dev)
    dt = time.perf_counter() - t0

    tx = torch.from_numpy(idx(os.path.join(a.data, "t10k-images-idx3-ubyte.gz")).copy()).to(dev).float() / 255.0
    ty = torch.from_numpy(idx(os.path.join(a.data, "t10k-labels-idx1-ubyte.gz")).astype(np.int64)).to(dev)
    model.eval()
    with torch.no_grad():
        acc = (model(tx.reshape(shape)).argmax(1) == ty).float().mean().item()
    system = {"none": "torch", "default": "torch-compile", "reduce-overhead": "torch-compile-ro"}[a.compile]
    if a.amp != "none":
        system += "-" + a.amp
    gpu = torch.cuda.get_device_name(dev) if dev.type == "cuda" else str(dev)
    print(json.dumps({"system": system, "model": a.model, "torch": torch.__version__, "gpu": gpu,
                      "compile": a.compile, "amp": a.amp, "batch": a.batch, "epochs": a.epochs, "steps": done,
                      "warmup_steps": warmup, "warmup_seconds": round(warmup_seconds, 3),
                      "seconds": round(dt, 3), "samples_per_second": round(seen / dt, 1) if dt > 0 else 0,
                      "train_loss": round(last_loss, 4), "test_accuracy": round(acc, 4)}))


if __name__ == "__main__":
    main()
