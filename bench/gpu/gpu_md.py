#!/usr/bin/env python3
"""Summarises bench/gpu.sh --run: a table of samples/s, weft against PyTorch
eager on the same GPU, printed and written as a markdown section for
BENCHMARKS.md.

Usage: gpu_md.py --runs R --tests T --commit C --markdown OUT

R holds lines "<system> <model> <json>" (system weft, weft-im2col,
weft-cudnn, torch or weft-local), one per round; T holds one
line per GPU test binary, "<name> PASS|FAIL passed=N skipped=N failed=N".
"""
import argparse
import datetime
import json
import sys

GOALS = {"mlp": 1.5, "cnn": 1.0}  # weft / PyTorch eager, from the issue
MODELS = {"mlp": "MLP 784-256-128-10 (examples/fmnist_mlp.pbtxt)",
          "cnn": "CNN conv16-pool-conv32-pool-128-10 (examples/fmnist_cnn.pbtxt)"}


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--runs", required=True)
    p.add_argument("--tests", required=True)
    p.add_argument("--commit", default="unknown")
    p.add_argument("--markdown", required=True)
    a = p.parse_args()

    rounds = {}
    for line in open(a.runs, encoding="utf-8"):
        parts = line.strip().split(" ", 2)
        if len(parts) == 3:
            rounds.setdefault((parts[0], parts[1]), []).append(json.loads(parts[2]))
    # Each (system, model): the round with the median samples/s; a failed
    # round stands for the whole when there is one.
    runs, spread = {}, {}
    for key, rs in rounds.items():
        bad = [r for r in rs if r.get("state", "SUCCEEDED") != "SUCCEEDED"]
        if bad:
            runs[key] = bad[0]
            continue
        rs = sorted(rs, key=lambda r: r.get("samples_per_second", 0))
        runs[key] = rs[(len(rs) - 1) // 2]
        spread[key] = (len(rs), rs[0].get("samples_per_second", 0), rs[-1].get("samples_per_second", 0))
    tests = [line.split() for line in open(a.tests, encoding="utf-8") if line.strip()]

    gpu = next((r.get("gpu") for r in runs.values() if r.get("gpu")), "GPU")
    torch_version = next((r.get("torch") for r in runs.values() if r.get("torch")), "?")
    rows, ok = [], True
    for model in ("mlp", "cnn"):
        w, t = runs.get(("weft", model)), runs.get(("torch", model))
        if w is None or t is None or w.get("state") != "SUCCEEDED":
            rows.append(f"| {MODELS[model]} | {'failed' if w is None or w.get('state') != 'SUCCEEDED' else ''} | "
                        f"{'failed' if t is None else ''} | | |")
            ok = False
            continue
        ws, ts = w["samples_per_second"], t["samples_per_second"]
        ratio = ws / ts
        goal = GOALS[model]
        rows.append(f"| {MODELS[model]} | {ws:,.0f} (acc {w['test_accuracy']:.3f}, {w['epochs']} ep) | "
                    f"{ts:,.0f} (acc {t['test_accuracy']:.3f}, {t['epochs']} ep) | **{ratio:.2f}x** | "
                    f"{goal:.1f}x {'met' if ratio >= goal else 'not met'} |")
    w_cnn = runs.get(("weft", "cnn"))
    for system, label in (("weft-im2col", "CNN with `WEFT_CUDNN=0` (im2col + cuBLAS, CUDA pooling)"),
                          ("weft-cudnn", "CNN with `WEFT_CUDNN_AUTOTUNE=0` (cuDNN's heuristic pick wherever "
                                         "cuDNN applies)")):
        r = runs.get((system, "cnn"))
        if r is None:
            continue
        if r.get("state") != "SUCCEEDED" or w_cnn is None or w_cnn.get("state") != "SUCCEEDED":
            rows.append(f"| {label} | failed | | | |")
            ok = False
            continue
        rows.append(f"| {label} | {r['samples_per_second']:,.0f} (acc {r['test_accuracy']:.3f}) | | "
                    f"default / this: **{w_cnn['samples_per_second'] / r['samples_per_second']:.2f}x** | |")
    spread_rows = [f"{system} {model}: {n} rounds, {lo:,.0f} to {hi:,.0f}"
                   for (system, model), (n, lo, hi) in sorted(spread.items()) if n > 1]
    local_rows = []
    for kind in ("parameter_server", "multi_worker_mirrored", "mirrored"):
        r = runs.get(("weft-local", kind))
        if r is None:
            continue
        sps = r.get("samples_per_second", 0)
        who = ("1 worker, every GPU, NCCL in process" if kind == "mirrored" else
               f"2 workers{', 1 ps' if kind == 'parameter_server' else ''}")
        local_rows.append(f"| {kind.upper()} ({who}) | "
                          f"{r.get('state', '?')} | {sps:,.0f} |")
        if r.get("state") != "SUCCEEDED":
            ok = False
    test_rows = [f"| {t[0]} | {t[1]} | {' '.join(t[2:])} |" for t in tests]
    if any(t[1] != "PASS" for t in tests):
        ok = False

    md = f"""## One GPU: weft against PyTorch eager (issue 5)

`bench/gpu.sh` on {gpu}, {datetime.date.today().isoformat()}, weft at {a.commit}, PyTorch {torch_version}.
Fashion-MNIST, batch 64, Adam as in each example job; weft runs `weft train`
(compute on GPU:0, the input batches fed from the host each step, the loss
read back each step); PyTorch eager keeps the whole training split on the
GPU and reads the loss once per epoch. samples/s over the training steps
(the first step included: cuDNN's autotuning and PyTorch's warm-up), the
median of the rounds.

| model | weft samples/s | PyTorch eager samples/s | weft / PyTorch | goal |
|---|---|---|---|---|
""" + "\n".join(rows) + """

Spread (slowest to fastest round): """ + ("; ".join(spread_rows) or "one round") + """.

GPU tests (each CUDA kernel against the CPU kernel on fresh random inputs,
outputs poisoned before each run; the device, allocator, copies, placement,
cross-device _Send/_Recv, training on the GPU, NCCL):

| test binary | result | cases |
|---|---|---|
""" + "\n".join(test_rows) + "\n"
    if local_rows:
        md += """
`weft local`, the MLP for 300 steps (PARAMETER_SERVER and
MULTI_WORKER_MIRRORED: both workers share GPU:0, and replicas compute there,
so tensors cross processes as GPU -> pinned host -> RecvTensor -> GPU;
MIRRORED, where there are two GPUs or more: one replica per GPU):

| strategy | state | samples/s |
|---|---|---|
""" + "\n".join(local_rows) + "\n"
    with open(a.markdown, "w", encoding="utf-8") as f:
        f.write(md)
    print(md)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
