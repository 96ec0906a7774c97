#!/usr/bin/env python3
"""Summarises bench/gpu.sh --run: a table of samples/s, weft against PyTorch
eager and against compiled PyTorch (torch.compile, default mode and
mode="reduce-overhead") on the same GPU, printed and written as a markdown
section for BENCHMARKS.md.

Usage: gpu_md.py --runs R --tests T --commit C --markdown OUT

R holds lines "<system> <model> <json>" (system weft, weft-launched, weft-noahead, weft-im2col,
weft-cudnn, torch, torch-compile, torch-compile-ro or weft-local), one per
round; a failed run's json is {"state": "FAILED", "error": ...}. T holds one
line per GPU test binary, "<name> PASS|FAIL passed=N skipped=N failed=N", and
is empty when the tests were skipped (bench/gpu.sh --skip_tests).

A failed or missing weft run, or PyTorch eager run, fails the summary (exit
status 1); a failed or missing torch.compile run is only reported as such,
since it needs PyTorch 2 and a working Triton.
"""
import argparse
import datetime
import json
import sys

# weft / PyTorch, from the issues: against eager (issue 5), and against
# torch.compile, either mode.
# The ResNet's and the transformer's goal against compiled PyTorch (1.0x) is with mixed precision
# (the "-fp16" / "-bf16" rows); their float32 rows are measured against it all
# the same. Against eager the issues set none: 1.0x stands in.
# The LSTM has no goal of its own: 1.0x stands in.
GOALS = {"torch": {"mlp": 1.5, "cnn": 1.0, "resnet": 1.0, "transformer": 1.0, "lstm": 1.0},
         "torch-compile": {"mlp": 1.5, "cnn": 1.5, "resnet": 1.0, "transformer": 1.0, "lstm": 1.0},
         "torch-compile-ro": {"mlp": 1.5, "cnn": 1.5, "resnet": 1.0, "transformer": 1.0, "lstm": 1.0}}
PEERS = (("torch", "eager"),
         ("torch-compile", "`torch.compile`, default mode"),
         ("torch-compile-ro", "`torch.compile`, `mode=\"reduce-overhead\"`"))
MODELS = {"mlp": "MLP 784-256-128-10 (examples/fmnist_mlp.pbtxt)",
          "cnn": "CNN conv16-pool-conv32-pool-128-10 (examples/fmnist_cnn.pbtxt)",
          "resnet": "ResNet, batch norm, 2 residual blocks (examples/fmnist_resnet.pbtxt), float32",
          "transformer": "character transformer, 2 causal attention blocks (examples/kjv_transformer.pbtxt), float32",
          "lstm": "LSTM of 128 units over the image's rows (examples/fmnist_lstm.pbtxt), float32"}
# Mixed precision's rows (bench/gpu.sh --precisions): weft's job with
# mixed_precision against PyTorch's autocast; the goals are the model's.
for _base in list(MODELS):
    for _amp, _words in (("fp16", "mixed float16 (weft: dynamic loss scaling; PyTorch: autocast + GradScaler)"),
                         ("bf16", "mixed bfloat16 (PyTorch: autocast)")):
        MODELS[f"{_base}-{_amp}"] = MODELS[_base].replace(", float32", "") + ", " + _words


def goal(system, model):
    return GOALS[system][model.split("-")[0]]


def succeeded(r):
    return r is not None and r.get("state", "SUCCEEDED") == "SUCCEEDED" and "samples_per_second" in r


def cell(r, epochs=True):
    """samples/s (accuracy, epochs) of a run; "not run" or "failed (why)" else."""
    if r is None:
        return "not run"
    if not succeeded(r):
        why = " ".join(str(r.get("error", "")).replace("|", "/").split())
        if len(why) > 100:
            why = why[:97] + "..."
        return f"failed ({why})" if why else "failed"
    s = f"{r['samples_per_second']:,.0f}"
    extra = []
    if "test_accuracy" in r:
        extra.append(f"acc {r['test_accuracy']:.3f}")
    if epochs and "epochs" in r:
        extra.append(f"{r['epochs']} ep")
    return s + (f" ({', '.join(extra)})" if extra else "")


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
        if len(parts) != 3:
            continue
        try:
            r = json.loads(parts[2])
        except ValueError:
            r = {"state": "FAILED", "error": "unreadable result line"}
        if not isinstance(r, dict):
            r = {"state": "FAILED", "error": "unreadable result line"}
        rounds.setdefault((parts[0], parts[1]), []).append(r)
    # Each (system, model): the round with the median samples/s; a failed
    # round stands for the whole when there is one.
    runs, spread = {}, {}
    for key, rs in rounds.items():
        bad = [r for r in rs if not succeeded(r)]
        if bad:
            runs[key] = bad[0]
            continue
        rs = sorted(rs, key=lambda r: r["samples_per_second"])
        runs[key] = rs[(len(rs) - 1) // 2]
        spread[key] = (len(rs), rs[0]["samples_per_second"], rs[-1]["samples_per_second"])
    tests = [line.split() for line in open(a.tests, encoding="utf-8") if line.strip()]

    gpu = next((r.get("gpu") for r in runs.values() if r.get("gpu")), "GPU")
    torch_version = next((r.get("torch") for r in runs.values() if r.get("torch")), "?")
    rows, ok = [], True
    for model in MODELS:
        w = runs.get(("weft", model))
        if w is None and all(runs.get((s, model)) is None for s, _ in PEERS):
            continue  # not run (e.g. --resnet_epochs 0)
        if not succeeded(w):
            ok = False
        first = True
        for system, label in PEERS:
            t = runs.get((system, model))
            if system == "torch" and t is not None and not succeeded(t):
                ok = False
            ratio, goal_cell = "", ""
            if succeeded(w) and succeeded(t) and t["samples_per_second"] > 0:
                x = w["samples_per_second"] / t["samples_per_second"]
                target = goal(system, model)
                ratio = f"**{x:.2f}x**"
                goal_cell = f"{target:.1f}x {'met' if x >= target else 'not met'}"
            elif t is not None or system == "torch":
                goal_cell = f"{goal(system, model):.1f}x"
            name, weft_cell = (MODELS[model], cell(w)) if first else ("", "")
            rows.append(f"| {name} | {weft_cell} | {label} | {cell(t)} | {ratio} | {goal_cell} |")
            first = False
    for model, system, what, ratio_name in (
            [(m, "weft-launched", "`WEFT_CUDA_GRAPHS=0` (every kernel launched, no CUDA graph)",
              "CUDA graphs / launched") for m in MODELS] +
            [(m, "weft-noahead", "`WEFT_COPY_AHEAD=0` (each batch copied in by its own step)",
              "copied ahead / not") for m in MODELS]):
        w, r = runs.get(("weft", model)), runs.get((system, model))
        if r is None:
            continue
        label = f"{MODELS[model]} with {what}"
        if not succeeded(r) or not succeeded(w):
            rows.append(f"| {label} | {cell(r, epochs=False)} | | | | |")
            ok = False
            continue
        rows.append(f"| {label} | {cell(r, epochs=False)} | | | "
                    f"{ratio_name}: **{w['samples_per_second'] / r['samples_per_second']:.2f}x** | |")
    w_cnn = runs.get(("weft", "cnn"))
    for system, label in (("weft-im2col", "CNN with `WEFT_CUDNN=0` (im2col + cuBLAS, CUDA pooling)"),
                          ("weft-cudnn", "CNN with `WEFT_CUDNN_AUTOTUNE=0` (cuDNN's heuristic pick wherever "
                                         "cuDNN applies)")):
        r = runs.get((system, "cnn"))
        if r is None:
            continue
        if not succeeded(r) or not succeeded(w_cnn):
            rows.append(f"| {label} | {cell(r, epochs=False)} | | | | |")
            ok = False
            continue
        rows.append(f"| {label} | {cell(r, epochs=False)} | | | "
                    f"default / this: **{w_cnn['samples_per_second'] / r['samples_per_second']:.2f}x** | |")
    spread_rows = [f"{system} {model}: {n} rounds, {lo:,.0f} to {hi:,.0f}"
                   for (system, model), (n, lo, hi) in sorted(spread.items()) if n > 1]
    warm_rows = []
    for model in MODELS:
        for system in ("weft", "torch", "torch-compile", "torch-compile-ro"):
            r = runs.get((system, model))
            if not succeeded(r) or "warmup_seconds" not in r:
                continue
            steps = f"{r['warmup_steps']} step(s), " if "warmup_steps" in r else "first call, "
            warm_rows.append(f"{system} {model}: {steps}{r['warmup_seconds']:.2f} s")
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
    test_rows = [f"| {t[0]} | {t[1] if len(t) > 1 else '?'} | {' '.join(t[2:])} |" for t in tests]
    if any(len(t) < 2 or t[1] != "PASS" for t in tests):
        ok = False

    def warmup_steps(systems, default):
        n = sorted({r["warmup_steps"] for (s, _), r in runs.items()
                    if s in systems and succeeded(r) and "warmup_steps" in r})
        return "/".join(str(x) for x in n) if n else str(default)

    eager_warmup = warmup_steps({"torch"}, 1)
    compiled_warmup = warmup_steps({"torch-compile", "torch-compile-ro"}, 3)
    md = f"""## One GPU: weft against PyTorch eager and compiled PyTorch (issues 5 and 22)

`bench/gpu.sh` on {gpu}, {datetime.date.today().isoformat()}, weft at {a.commit}, PyTorch {torch_version}.
Fashion-MNIST, batch 64, Adam as in each example job; weft runs `weft train`
(compute on GPU:0, the input batches fed from the host each step, the loss
read back each step); PyTorch keeps the whole training split on the GPU and
reads the loss once per epoch, eager, and with one training step (forward,
loss, backward, Adam step) compiled by `torch.compile` in its default mode
(Inductor's generated kernels) and with `mode="reduce-overhead"` (CUDA
graphs as well). samples/s over the training steps with the first call left
out on both sides: weft's first call of steps (its `warmup_seconds`: cuDNN's
autotuning, the first allocations) and the peers' warm-up steps ({eager_warmup}
eager, {compiled_warmup} compiled: compilation and CUDA-graph recording), which still
train; the median of the rounds. Goals: against eager 1.5x for the MLP
and 1.0x for the CNN, against compiled PyTorch 1.5x for both; the ResNet's
and the transformer's, 1.0x compiled PyTorch, are set for mixed precision
(the rows "mixed float16/bfloat16": weft's `mixed_precision`, whose matrix
products compute in half on the tensor cores, against PyTorch's autocast),
so their float32 rows only show where they stand.

| model | weft samples/s | PyTorch | PyTorch samples/s | weft / PyTorch | goal |
|---|---|---|---|---|---|
""" + "\n".join(rows) + """

Spread (slowest to fastest round): """ + ("; ".join(spread_rows) or "one round") + """.

Left out as warm-up (the median round's): """ + ("; ".join(warm_rows) or "none reported") + """.
"""
    if test_rows:
        md += """
GPU tests (each CUDA kernel against the CPU kernel on fresh random inputs,
outputs poisoned before each run; the device, allocator, copies, placement,
cross-device _Send/_Recv, training on the GPU, NCCL):

| test binary | result | cases |
|---|---|---|
""" + "\n".join(test_rows) + "\n"
    else:
        md += "\nGPU tests: skipped in this run (`bench/gpu.sh --skip_tests`).\n"
    if local_rows:
        md += """
`weft local`, the MLP for 300 steps (PARAMETER_SERVER and
MULTI_WORKER_MIRRORED: both workers share GPU:0, and replicas compute there,
so tensors cross processes as GPU -> pinned host -> RecvTensor -> GPU;
MIRRORED, where there are two GPUs or more: one replica per GPU):

| strategy | state | samples/s |
|---|---|---|
""" + "\n".join(local_rows) + "\n"
    else:
        md += "\n`weft local` and MIRRORED over NCCL: not run (`bench/gpu.sh --no_local`) or none reported.\n"
    with open(a.markdown, "w", encoding="utf-8") as f:
        f.write(md)
    print(md)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
