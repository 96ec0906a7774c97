#!/usr/bin/env python3
"""Turns a profile of weft's training step into BENCHMARKS.md's Profile block.

Usage: profile_summary.py --self S --inclusive I --steps N --command CMD
                          [--perf P --perf-command PCMD] > block.md

S and I are `callgrind_annotate` listings of one run, by self and by inclusive
cost (`--inclusive=yes --threshold=100`); P is optional `perf report --stdio
--no-children --sort dso,sym` output of a native run. Prints markdown: the
top functions, where a step's instructions go (kernels by op, executor,
allocator, data pipeline), and, with P, where its time goes.
"""
import argparse
import re
import sys

LINE = re.compile(r"^\s*([\d,]+)\s+\(\s*([\d.]+)%\)\s+(.*\S)\s*$")
PERF_LINE = re.compile(r"^\s*([\d.]+)%\s+(\S+)\s+\[(.)\]\s+(.*\S)\s*$")
COMPUTE = re.compile(r"(?:^|::)([A-Za-z_]\w*(?:<.*>)?)::Compute\(weft::OpKernelContext\*\)$")

# Categories by the function a cost is spent in, first match wins.
CATEGORIES = [
    ("GEMM (Eigen)", re.compile(r"^Eigen::")),
    ("memset / memcpy (libc)", re.compile(r"^__(memset|memmove|memcpy)|^mem(set|cpy|move)$")),
    ("other kernels (bias, ReLU, loss, SGD, variables)",
     re.compile(r"^weft::(cpu::|\(anonymous namespace\)::\w+Op::)|^__(exp|log)f|^(expf|logf)$")),
    ("allocator", re.compile(r"^weft::(CachingAllocator|Allocator|Buffer)::|malloc|^_int_|free$|^operator (new|delete)")),
    ("executor and tensors", re.compile(r"^weft::(Executor|OpKernelContext|OpKernel|Tensor|TensorShape|RunState)\b")),
    ("data pipeline", re.compile(r"^weft::data::")),
    ("locks, threads, syscalls", re.compile(r"^absl::|pthread|futex|^syscall$|^__lll_|^std::thread")),
    ("trainer loop and progress", re.compile(r"^weft::(LocalTrainer|ProgressDisplay)|^spdlog::|^fmt::")),
]


def function_of(entry):
    """'file:function [object]' -> function."""
    entry = re.sub(r"\s+\[[^\]]*\]$", "", entry)  # the object file
    m = re.match(r"^(\?\?\?|[^:]*[/.][^:]*):(.*)$", entry)
    return m.group(2) if m else entry


def strip_params(name):
    """Drops a trailing parameter list and clone suffixes."""
    name = re.sub(r"\s*\[clone [^\]]*\]", "", name).strip()
    name = re.sub(r"\)\s+const$", ")", name)
    if name.endswith(")"):
        depth = 0
        for i in range(len(name) - 1, -1, -1):
            depth += {")": 1, "(": -1}.get(name[i], 0)
            if depth == 0:
                if name[:i] and name[:i] != "operator":
                    name = name[:i]
                break
    return name


def short(name):
    name = strip_params(name)
    name = name.replace("weft::cpu::(anonymous namespace)::", "").replace("(anonymous namespace)::", "")
    name = re.sub(r"absl::debian\d*::", "absl::", name)
    if name.startswith("Eigen::"):
        name = name.replace("Eigen::internal::", "").replace("Eigen::", "")
        return "Eigen " + re.sub(r"\s*float __vector\(\d+\),", "", name)
    if len(name) > 90:
        out, depth = [], 0  # template arguments collapse to <…>
        for ch in name:
            if ch == "<":
                if depth == 0:
                    out.append("<…>")
                depth += 1
            elif ch == ">":
                depth -= 1
            elif depth == 0:
                out.append(ch)
        name = "".join(out)
    return name


def category(name):
    for label, pattern in CATEGORIES:
        if pattern.search(name):
            return label
    return "other"


def read_callgrind(path):
    total, rows = None, []
    for line in open(path, encoding="utf-8", errors="replace"):
        m = LINE.match(line)
        if not m:
            continue
        ir, what = int(m.group(1).replace(",", "")), m.group(3)
        if what == "PROGRAM TOTALS":
            total = ir
        else:
            rows.append((ir, function_of(what)))
    if not total:
        sys.exit(f"profile_summary.py: no PROGRAM TOTALS in {path}: not callgrind_annotate output?")
    return total, rows


def memset_from_gemm(path):
    """Share of memset/memcpy's self cost that MatMul's GEMMs asked for, from
    a `callgrind_annotate --tree=caller` listing: (share, cost) or None."""
    callers, from_gemm, cost = [], 0, 0
    for line in open(path, encoding="utf-8", errors="replace"):
        m = LINE.match(line)
        if not m:
            if not line.strip():
                callers = []
            continue
        ir, what = int(m.group(1).replace(",", "")), m.group(3)
        if what.startswith("<"):
            callers.append((ir, what))
        elif what.startswith("*"):
            if re.search(r"__mem(set|move|cpy)", what):
                cost += ir
                from_gemm += sum(c for c, w in callers if re.search(r"Gemm<|MatMulOp|Eigen::", w))
            callers = []
    return (from_gemm / cost, cost) if cost else None


def pct(x, total):
    return f"{100.0 * x / total:.1f}%"


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--self", dest="self_path", required=True)
    p.add_argument("--inclusive", required=True)
    p.add_argument("--steps", type=int, required=True)
    p.add_argument("--command", required=True)
    p.add_argument("--callers", help="callgrind_annotate --tree=caller listing")
    p.add_argument("--perf")
    p.add_argument("--perf-command", default="")
    p.add_argument("--top", type=int, default=10)
    a = p.parse_args()

    total, self_rows = read_callgrind(a.self_path)
    _, incl_rows = read_callgrind(a.inclusive)
    incl = {}
    for ir, fn in incl_rows:
        incl[strip_params(fn)] = max(ir, incl.get(strip_params(fn), 0))

    def incl_of(prefix):
        return max((v for k, v in incl.items() if k == prefix), default=0)

    ops = {}
    for fn, ir in incl.items():
        m = COMPUTE.search(fn + "(weft::OpKernelContext*)")
        if m and "{lambda" not in fn:
            op = short(m.group(1))
            ops[op] = ops.get(op, 0) + ir
    run = incl_of("weft::Executor::Run")
    train = incl_of("weft::LocalTrainer::Train")
    nxt = incl_of("weft::data::BatchIterator::Next")
    prefetch = incl_of("weft::data::BatchIterator::PrefetchLoop")
    alloc = incl_of("weft::CachingAllocator::Allocate") + incl_of("weft::CachingAllocator::Release")
    kernels = sum(ops.values())
    matmul = ops.get("MatMulOp", 0)

    out = []
    w = out.append
    w("### Profile\n")
    w(f"Instructions of {a.steps} training steps (batch 64) under callgrind, counted only inside the trainer's")
    w(f"loop and the batch-prefetch thread, so loading and start-up are left out: {total / a.steps / 1e6:.2f} M")
    w("instructions a step. Produced by\n")
    w(f"    {a.command}\n")
    w("Where a step's instructions go (inclusive cost):\n")
    w("| part | % of instructions |")
    w("|---|---:|")
    w(f"| MatMul kernels (Eigen SGEMM, with Eigen's zeroing of each output) | {pct(matmul, total)} |")
    for op, ir in sorted(ops.items(), key=lambda kv: -kv[1]):
        if op != "MatMulOp" and ir / total >= 0.001:
            w(f"| {op} | {pct(ir, total)} |")
    rest = sum(ir for op, ir in ops.items() if op != "MatMulOp" and ir / total < 0.001)
    w(f"| other kernels, each under 0.1% | {pct(rest, total)} |")
    w(f"| executor (Executor::Run outside the kernels) | {pct(max(run - kernels, 0), total)} |")
    w(f"| allocator (CachingAllocator, inside the rows above) | {pct(alloc, total)} |")
    w(f"| data pipeline (prefetch thread and BatchIterator::Next) | {pct(prefetch + nxt, total)} |")
    w(f"| trainer loop outside Executor::Run | {pct(max(train - run - nxt, 0), total)} |")
    w("")
    init = max((v for k, v in incl.items() if k.endswith("VariableOp::Initialize")), default=0)
    if init and "VariableOp" in ops:
        w(f"VariableOp's row includes initialising the variables in the first step ({pct(init, total)}).\n")
    w(f"Top {a.top} functions by self cost (callgrind_annotate):\n")
    w("| % of instructions | function |")
    w("|---:|---|")
    for ir, fn in sorted(self_rows, key=lambda r: -r[0])[:a.top]:
        w(f"| {pct(ir, total)} | `{short(fn)}` |")
    w("")
    shares = memset_from_gemm(a.callers) if a.callers else None
    if shares:
        w(f"Of the instructions in libc's memset and memcpy ({pct(shares[1], total)} in all), {100 * shares[0]:.0f}% are")
        w("MatMul's: Eigen zeroes each GEMM output (`c.noalias() = a * b`) before accumulating into it.\n")
    if a.perf:
        cats, samples = {}, 0.0
        for line in open(a.perf, encoding="utf-8", errors="replace"):
            m = PERF_LINE.match(line)
            if not m:
                continue
            share, kind, sym = float(m.group(1)), m.group(3), m.group(4)
            label = "OS kernel (page faults, scheduling)" if kind == "k" else category(sym)
            if m.group(2).startswith("libz"):
                label = "other"
            cats[label] = cats.get(label, 0.0) + share
            samples += share
        if samples > 0:
            w("Instructions are not time: a `rep stosb` memset counts one per byte and an AVX2 FMA")
            w("does 8 multiply-adds in one. Where a step's time goes natively (perf's cpu-clock samples by")
            w("the function they land in, both threads, loading skipped):\n")
            w(f"    {a.perf_command}\n")
            w("| part | % of samples |")
            w("|---|---:|")
            for label, share in sorted(cats.items(), key=lambda kv: -kv[1]):
                w(f"| {label} | {100.0 * share / samples:.1f}% |")
            w("")
    sys.stdout.write("\n".join(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
