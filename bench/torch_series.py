#!/usr/bin/env python3
"""PyTorch's side of examples/seattle_weather_lstm.pbtxt, for bench/regression.sh:
the same data, model, optimizer and batch, trained the way `weft train`
trains it, on the CPU.

Usage: torch_series.py --csv FILE [--column temp_max] [--window 30] [--epochs 30]
                       [--batch 32] [--lr 0.005] [--units 32] [--threads 1] [--seed 1]

The data as weft's SERIES dataset gives them: the column's values in file
order, the last 10% the test split, every value standardised with the train
split's mean and (population) deviation, example i the `window` values
from value i and its target the value after them; test windows lie inside
the test split. The model: one LSTM layer of `units` (PyTorch's, with two
biases where Keras's has one) reading the window, its last output, a dense
layer to one value. Adam at `lr`, gradients clipped at a global norm of 5,
mean squared error, shuffled batches with the last partial one dropped.

Prints one JSON line: samples_per_second over the training steps (setup
left out), train_loss (the last epoch's mean), test_loss (the test split's
mean squared error) and the baselines' test losses: repeating the window's
last value, and the least-squares linear fit of the window.
"""
import argparse
import csv
import json
import time

import numpy as np
import torch
from torch import nn


def windows(values, window):
    n = len(values) - window
    x = np.stack([values[i:i + window] for i in range(n)]).astype(np.float32)
    return x, values[window:window + n].astype(np.float32)


class Regressor(nn.Module):
    def __init__(self, units):
        super().__init__()
        self.lstm = nn.LSTM(1, units, batch_first=True)
        self.dense = nn.Linear(units, 1)

    def forward(self, x):
        out, _ = self.lstm(x.unsqueeze(-1))
        return self.dense(out[:, -1]).squeeze(-1)


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--csv", required=True)
    p.add_argument("--column", default="temp_max")
    p.add_argument("--window", type=int, default=30)
    p.add_argument("--epochs", type=int, default=30)
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--lr", type=float, default=0.005)
    p.add_argument("--units", type=int, default=32)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--seed", type=int, default=1)
    a = p.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(a.seed)
    with open(a.csv, newline="") as f:
        v = np.array([float(r[a.column]) for r in csv.DictReader(f)], dtype=np.float64)
    test = int(np.floor(len(v) * 0.1))
    train_part = v[:len(v) - test]
    z = (v - train_part.mean()) / train_part.std()
    xs, ys = windows(z[:len(v) - test], a.window)
    tx, ty = windows(z[len(v) - test:], a.window)
    persistence = float(np.mean((tx[:, -1] - ty) ** 2))
    fit = np.linalg.lstsq(np.c_[xs, np.ones(len(xs))], ys, rcond=None)[0]
    linear = float(np.mean((np.c_[tx, np.ones(len(tx))] @ fit - ty) ** 2))

    model = Regressor(a.units)
    opt = torch.optim.Adam(model.parameters(), lr=a.lr, eps=1e-7)
    lossf = nn.MSELoss()
    xs_t, ys_t = torch.from_numpy(xs), torch.from_numpy(ys)
    steps = len(xs) // a.batch
    g = torch.Generator().manual_seed(a.seed)
    start, seen, last = time.perf_counter(), 0, float("nan")
    for _ in range(a.epochs):
        perm = torch.randperm(len(xs), generator=g)
        total = 0.0
        for s in range(steps):
            b = perm[s * a.batch:(s + 1) * a.batch]
            opt.zero_grad(set_to_none=True)
            loss = lossf(model(xs_t[b]), ys_t[b])
            loss.backward()
            nn.utils.clip_grad_norm_(model.parameters(), 5.0)
            opt.step()
            total += loss.item()
            seen += len(b)
        last = total / steps
    seconds = time.perf_counter() - start
    model.eval()
    with torch.no_grad():
        test_loss = lossf(model(torch.from_numpy(tx)), torch.from_numpy(ty)).item()
    print(json.dumps({"peer": "torch-lstm-regression", "torch": torch.__version__, "epochs": a.epochs,
                      "steps": steps * a.epochs, "seconds": round(seconds, 3),
                      "samples_per_second": round(seen / seconds, 1), "train_loss": round(last, 6),
                      "test_loss": round(test_loss, 6), "test_examples": len(tx),
                      "persistence_test_loss": round(persistence, 6), "linear_test_loss": round(linear, 6)}))


if __name__ == "__main__":
    main()
