"""The PyTorch side of the transformer rows: examples/kjv_transformer.pbtxt's
character-level language model (bench/torch_models.py CharTransformer) on
the same corpus, examples and schedule.

The corpus is read byte by byte as weft's TEXT datasets read it: the last
10% is the validation split, and example i is the --sequence bytes from
offset i * sequence with the next byte at every position as its labels.
Each process trains on every Nth training example, as weft's replicas read
their shards, with `--batch` sequences a step; DistributedDataParallel over
gloo when --workers > 1. AdamW (--lr, weight decay 0.01) with a linear
warm-up over --warmup steps, then a cosine to 1% over the rest of the run,
and gradients clipped to a global norm of 1 (after DDP's averaging).

    python3 bench/torch_transformer.py --corpus kjv.txt --workers 2 --batch 16 --epochs 1

On a GPU (bench/gpu.sh): --device cuda, one process, and --compile default
or reduce-overhead for torch.compile's modes; timing then starts after the
first step (which compiles) and waits for the device.

Prints one JSON line: samples_per_s (sequences a second over the training
steps; also as samples_per_second) and val_loss (mean cross-entropy per
byte, nats, over the validation split).
"""
import argparse
import json
import math
import os
import time

import numpy as np
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch import nn

from torch_models import CharTransformer


def examples(corpus, sequence, train):
    """[n, sequence] inputs and labels of one split, as weft's TEXT reader makes them."""
    data = np.fromfile(corpus, dtype=np.uint8)
    boundary = len(data) - int(math.floor(len(data) * 0.1))
    part = data[:boundary] if train else data[boundary:]
    n = (len(part) - 1) // sequence
    x = part[:n * sequence].reshape(n, sequence).astype(np.int64)
    y = part[1:n * sequence + 1].reshape(n, sequence).astype(np.int64)
    return torch.from_numpy(x), torch.from_numpy(y)


def rate(step, lr, warmup, total):
    """weft's schedule at update `step` (1-based): warm-up, then cosine to 1%."""
    if step <= warmup:
        return lr * step / warmup
    s = min(step - warmup - 1, total - warmup)
    return lr * (0.01 + 0.99 * 0.5 * (1 + math.cos(math.pi * s / max(1, total - warmup))))


def replica(rank, args):
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(args.port)
    torch.set_num_threads(args.threads)
    distributed = args.workers > 1
    if distributed:
        dist.init_process_group("gloo", rank=rank, world_size=args.workers)
    torch.manual_seed(1)
    x, y = examples(args.corpus, args.sequence, train=True)
    if args.train_limit:
        x, y = x[:args.train_limit], y[:args.train_limit]
    x, y = x[rank::args.workers], y[rank::args.workers]
    device = torch.device(args.device)
    x, y = x.to(device), y.to(device)
    model = CharTransformer(sequence=args.sequence).to(device)
    net = model
    if distributed:
        model = nn.parallel.DistributedDataParallel(model)
    if args.compile != "none":
        model = torch.compile(model, mode=None if args.compile == "default" else args.compile)
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=0.01, eps=1e-7)
    loss_fn = nn.CrossEntropyLoss()
    amp_dtype = {"none": None, "fp16": torch.float16, "bf16": torch.bfloat16}[args.amp]
    scaler = torch.amp.GradScaler(device.type) if args.amp == "fp16" else None
    steps_per_epoch = len(x) // args.batch
    total = steps_per_epoch * args.epochs
    if distributed:
        dist.barrier()
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    start = time.perf_counter()
    trained, step = 0, 0
    for epoch in range(args.epochs):
        order = torch.randperm(len(x), generator=torch.Generator().manual_seed(100 + epoch))
        for i in range(steps_per_epoch):
            step += 1
            for group in optimizer.param_groups:
                group["lr"] = rate(step, args.lr, args.warmup, total)
            pick = order[i * args.batch:(i + 1) * args.batch]
            optimizer.zero_grad(set_to_none=True)
            with torch.autocast(device_type=device.type, dtype=amp_dtype, enabled=amp_dtype is not None):
                logits = model(x[pick])
                loss = loss_fn(logits.reshape(-1, 256), y[pick].reshape(-1))
            if scaler is None:
                loss.backward()
                torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
                optimizer.step()
            else:
                scaler.scale(loss).backward()
                scaler.unscale_(optimizer)
                torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
                scaler.step(optimizer)
                scaler.update()
            if step == 1 and device.type == "cuda":
                sync()  # the first step compiles and warms up: not timed
                start = time.perf_counter()
                continue
            trained += len(pick)
    if distributed:
        dist.barrier()
    sync()
    seconds = time.perf_counter() - start
    if rank == 0:
        vx, vy = examples(args.corpus, args.sequence, train=False)
        if args.test_limit:
            vx, vy = vx[:args.test_limit], vy[:args.test_limit]
        vx, vy = vx.to(device), vy.to(device)
        net.eval()
        total_loss = 0.0
        with torch.no_grad():
            for i in range(0, len(vx), 256):
                logits = net(vx[i:i + 256])
                total_loss += nn.functional.cross_entropy(logits.reshape(-1, 256), vy[i:i + 256].reshape(-1),
                                                          reduction="sum").item()
        print(json.dumps({
            "peer": f"torch-{'ddp-gloo-' if distributed else ''}transformer", "torch": torch.__version__,
            "workers": args.workers, "batch_per_worker": args.batch, "epochs": args.epochs, "steps": step,
            "device": args.device, "compile": args.compile, "amp": args.amp, "state": "SUCCEEDED",
            "seconds": round(seconds, 3), "samples_per_s": round(trained * args.workers / seconds, 1),
            "samples_per_second": round(trained * args.workers / seconds, 1),
            "val_loss": round(total_loss / vy.numel(), 4)}))
    if distributed:
        dist.destroy_process_group()


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--corpus", required=True)
    parser.add_argument("--sequence", type=int, default=128)
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--epochs", type=int, default=1)
    parser.add_argument("--batch", type=int, default=32, help="sequences per worker and step")
    parser.add_argument("--lr", type=float, default=2e-3)
    parser.add_argument("--warmup", type=int, default=100)
    parser.add_argument("--train_limit", type=int, default=0)
    parser.add_argument("--test_limit", type=int, default=0)
    parser.add_argument("--threads", type=int, default=1, help="torch threads per worker")
    parser.add_argument("--port", type=int, default=29535)
    parser.add_argument("--device", default="cpu", help="cpu, or cuda (one process)")
    parser.add_argument("--compile", choices=["none", "default", "reduce-overhead"], default="none")
    parser.add_argument("--amp", choices=["none", "fp16", "bf16"], default="none",
                        help="autocast of the forward pass to float16 (with GradScaler) or bfloat16 (cuda)")
    args = parser.parse_args()
    if args.device != "cpu" and args.workers != 1:
        parser.error("--device cuda runs one process (--workers 1)")
    if args.workers == 1:
        replica(0, args)
    else:
        mp.spawn(replica, args=(args,), nprocs=args.workers)


if __name__ == "__main__":
    main()
