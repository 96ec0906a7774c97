"""The PyTorch side of the convolutional rows: the CNN and the ResNet.

PyTorch DistributedDataParallel over gloo, on CPU (one process without DDP
when --workers 1), training the network of an example job, Adam at 1e-3:
  --model cnn     examples/fmnist_cnn.pbtxt: 3x3 convolutions of 16 and 32
                  filters with SAME padding and ReLU, each followed by a 2x2
                  max-pool, then dense 128 (ReLU) and dense 10;
  --model resnet  examples/fmnist_resnet.pbtxt: a batch-normalised stem, a
                  max-pool, two residual blocks (the second strided, with a
                  1x1 projection shortcut), global average pooling, dense 10.
Each process trains on every Nth training image, as weft's replicas read
their shards, with `--batch` images a step.

    python3 bench/torch_ddp_cnn.py --workers 2 --batch 64 --epochs 1

Prints one JSON line (samples_per_s over the training steps, test_accuracy).
"""
import argparse
import gzip
import json
import os
import struct
import time

import numpy as np
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch import nn

from torch_models import network

DATA = "/usr/share/datasets/fashion-mnist"


def read_idx(name):
    """An IDX file of Debian's dataset: images as float [n, 1, 28, 28] in [0, 1], labels as int64."""
    with gzip.open(os.path.join(DATA, name), "rb") as f:
        raw = f.read()
    magic, count = struct.unpack(">II", raw[:8])
    if magic == 2051:
        rows, cols = struct.unpack(">II", raw[8:16])
        pixels = np.frombuffer(raw, dtype=np.uint8, offset=16)
        return pixels.reshape(count, 1, rows, cols).astype(np.float32) / 255.0
    if magic == 2049:
        return np.frombuffer(raw, dtype=np.uint8, offset=8).astype(np.int64)
    raise ValueError(f"{name}: not an IDX image or label file (magic {magic:#x})")


def replica(rank, args):
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(args.port)
    torch.set_num_threads(args.threads)
    distributed = args.workers > 1
    if distributed:
        dist.init_process_group("gloo", rank=rank, world_size=args.workers)
    torch.manual_seed(1)
    images = torch.from_numpy(np.ascontiguousarray(read_idx("train-images-idx3-ubyte.gz")[rank::args.workers]))
    labels = torch.from_numpy(np.ascontiguousarray(read_idx("train-labels-idx1-ubyte.gz")[rank::args.workers]))
    model = network(args.model)
    if distributed:
        model = nn.parallel.DistributedDataParallel(model)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    loss_fn = nn.CrossEntropyLoss()
    steps_per_epoch = len(images) // args.batch
    if distributed:
        dist.barrier()
    start = time.perf_counter()
    trained = 0
    for epoch in range(args.epochs):
        order = torch.randperm(len(images), generator=torch.Generator().manual_seed(100 + epoch))
        for step in range(steps_per_epoch):
            pick = order[step * args.batch:(step + 1) * args.batch]
            optimizer.zero_grad(set_to_none=True)
            loss_fn(model(images[pick]), labels[pick]).backward()
            optimizer.step()
            trained += len(pick)
    if distributed:
        dist.barrier()
    seconds = time.perf_counter() - start
    if rank == 0:
        test_x = torch.from_numpy(read_idx("t10k-images-idx3-ubyte.gz"))
        test_y = torch.from_numpy(read_idx("t10k-labels-idx1-ubyte.gz"))
        # The bare network: a DDP forward would broadcast batch norm's buffers
        # to the other ranks, which have finished.
        net = model.module if distributed else model
        net.eval()
        with torch.no_grad():
            accuracy = (net(test_x).argmax(1) == test_y).float().mean().item()
        print(json.dumps({
            "peer": f"torch-{'ddp-gloo-' if distributed else ''}{args.model}", "torch": torch.__version__, "workers": args.workers,
            "batch_per_worker": args.batch, "epochs": args.epochs, "seconds": round(seconds, 3),
            "samples_per_s": round(trained * args.workers / seconds, 1), "test_accuracy": round(accuracy, 4)}))
    if distributed:
        dist.destroy_process_group()


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", choices=["cnn", "resnet"], default="cnn")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--epochs", type=int, default=1)
    parser.add_argument("--batch", type=int, default=64, help="images per worker and step")
    parser.add_argument("--threads", type=int, default=1, help="torch threads per worker")
    parser.add_argument("--port", type=int, default=29534)
    args = parser.parse_args()
    if args.workers == 1:
        replica(0, args)
    else:
        mp.spawn(replica, args=(args,), nprocs=args.workers)


if __name__ == "__main__":
    main()
