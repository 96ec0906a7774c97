#!/usr/bin/env python3
"""PNG plots for the strategy benchmarks (called by bench/strategies.sh).

Usage: plot_strategies.py ALLREDUCE_TABLE MWM_RESULTS OUT_DIR

ALLREDUCE_TABLE is the markdown table bench/allreduce.sh prints; MWM_RESULTS
holds lines "weft {json}" / "ddp {json}". Writes OUT_DIR/allreduce.png (time
per call by ranks and size, weft against gloo and OpenMPI, log scale) and
OUT_DIR/mwm_ddp.png (training samples/s, each round and the median). A
missing input (a run of one part only, STRATEGIES_PARTS) leaves its plot as
it is.
"""
import json
import os
import statistics
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def allreduce(table, out):
    rows = []
    tls = ""
    for line in open(table):
        if "over TLS sockets" in line:  # the header: weft's sockets and gRPC ran with mutual TLS
            tls = " (TLS)"
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) < 5 or not cells[0].isdigit():
            continue
        # ranks, MiB, weft, weft over sockets, weft over gRPC, gloo, mpi
        rows.append((int(cells[0]), int(cells[1]), *[float(c) for c in cells[2:7]]))
    if not rows:
        return
    labels = [f"{n} ranks\n{mib} MiB" for n, mib, *_ in rows]
    x = range(len(rows))
    width = 0.16
    fig, ax = plt.subplots(figsize=(9, 4))
    series = [("weft (shared memory)", "#1f77b4"), (f"weft over its sockets{tls}", "#6baed6"),
              (f"weft over gRPC{tls}", "#c6dbef"), ("gloo", "#ff7f0e"), ("OpenMPI", "#7f7f7f")]
    for k, (name, color) in enumerate(series):
        ax.bar([i + (k - 2) * width for i in x], [r[2 + k] for r in rows], width, label=name, color=color)
    ax.set_xticks(list(x))
    ax.set_xticklabels(labels)
    ax.set_yscale("log")
    ax.set_ylabel("ms per all-reduce (median, log scale)")
    ax.set_title("float32 all-reduce, ranks on one host (lower is better)")
    ax.legend()
    fig.tight_layout()
    fig.savefig(f"{out}/allreduce.png", dpi=100)


def mwm(results, out):
    runs = {"weft": [], "weft1": [], "weft16": [], "ddp": [], "ddpm": []}
    for line in open(results):
        who, js = line.split(" ", 1)
        r = json.loads(js)
        runs[who].append(r.get("samples_per_second", r.get("samples_per_s", 0.0)))
    if not runs["weft"] or not runs["ddp"]:
        return
    fig, ax = plt.subplots(figsize=(6, 4))
    order = [w for w in ["weft", "weft1", "weft16", "ddp", "ddpm"] if runs[w]]
    label = {"weft": "weft MWM", "weft1": "weft MWM\n1 step/dispatch", "weft16": "weft MWM\nfloat16 all-reduce",
             "ddp": "PyTorch DDP\n(gloo)",
             "ddpm": "DDP, glibc\nmmap threshold up"}
    names = [label[w] for w in order]
    meds = [statistics.median(runs[w]) for w in order]
    color = {"weft": "#1f77b4", "weft1": "#aec7e8", "weft16": "#9edae5", "ddp": "#ff7f0e", "ddpm": "#ffbb78"}
    ax.bar(range(len(order)), meds, 0.5, color=[color[w] for w in order])
    for i, who in enumerate(order):
        ax.scatter([i] * len(runs[who]), runs[who], color="black", s=12, zorder=3)
    ax.set_xticks(range(len(order)))
    ax.set_xticklabels(names)
    ax.set_ylabel("training samples/s (bars: median, dots: rounds)")
    ax.set_title("MLP, 2 workers x batch 64 (higher is better)")
    fig.tight_layout()
    fig.savefig(f"{out}/mwm_ddp.png", dpi=100)


if __name__ == "__main__":
    if os.path.exists(sys.argv[1]):
        allreduce(sys.argv[1], sys.argv[3])
    if os.path.exists(sys.argv[2]):
        mwm(sys.argv[2], sys.argv[3])
