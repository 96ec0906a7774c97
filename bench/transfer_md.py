#!/usr/bin/env python3
"""Turns bench/transfer.sh's results into the "dist-runtime" section of
BENCHMARKS.md and a one-line summary on stdout.

Usage: transfer_md.py --results FILE --facts FILE --markdown OUT

FILE (results) has lines "<system> <json>": "iperf3 {bits_per_second}",
"torch {noop_p50_us, noop_p99_us, pull_GBps}", "weft {kind: noop, ...}" and
"weft {kind: transfer, mib, ...}" per size.
"""
import argparse
import json

# The goals.
GOAL_WIRE = 0.6      # weft 64 MiB RecvTensor / one loopback TCP stream
GOAL_TORCH = 3.0     # weft 64 MiB RecvTensor / torch RPC 64 MiB pull
GOAL_P50 = 0.5       # weft no-op p50 / torch no-op p50 (at most)
GOAL_TAIL = 3.0      # weft no-op p99 / weft no-op p50 (at most)
GOAL_RSS = 1.1       # sender's peak RSS above idle / payload (at most)


def verdict(ok):
    return "met" if ok else "**not met**"


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--results", required=True)
    p.add_argument("--facts", required=True)
    p.add_argument("--markdown", required=True)
    a = p.parse_args()
    wire = torch = noop = None
    transfers = []
    for line in open(a.results, encoding="utf-8"):
        system, _, js = line.strip().partition(" ")
        if not js:
            continue
        r = json.loads(js)
        if system == "iperf3":
            wire = r
        elif system == "torch":
            torch = r
        elif r.get("kind") == "noop":
            noop = r
        elif r.get("kind") == "transfer":
            transfers.append(r)
    if wire is None or torch is None or noop is None or not transfers:
        raise SystemExit("transfer_md.py: results lack iperf3, torch, weft noop or weft transfer lines")
    facts = dict(l.rstrip("\n").split("=", 1) for l in open(a.facts, encoding="utf-8") if "=" in l)
    wire_gbps = wire["bits_per_second"] / 8e9
    t64 = next((t for t in transfers if t["mib"] == 64), None)

    md = ["## Distributed runtime (issue 3)", ""]
    md += [
        "Two `weft worker` processes (worker:0, worker:1) and a `weft master`, each",
        "its own process on 127.0.0.1, driven by `bench/transfer_bench` through a",
        "RemoteSession; the peers run in the same `bench/transfer.sh` run, just before.",
        "",
        "**Tensor transfer.** A float32 Variable (\"ones\") on worker:1 is read by an",
        "Identity on worker:0; a step targets the Identity and fetches nothing, so the",
        "payload crosses once, worker:1 → worker:0, by RecvTensor (header + the",
        "sender's buffer as a slice; the receiver copies it into a fresh tensor). The",
        "time is the client's wall clock of one `Run`, so it includes the master's",
        "dispatch to both tasks (see the no-op step below for that cost).",
        f"{transfers[0]['steps']} timed steps per size after 3 warm-ups; GB/s = bytes / 10⁹ / median step time.",
        "The wire is one loopback TCP stream (`iperf3 -c 127.0.0.1 -n 4G`); the peer",
        "is `torch_rpc_latency.py`'s 64 MiB pull (median of 5). Sender RSS: the",
        "worker:1 process's VmHWM over the timed steps (reset through",
        "`/proc/PID/clear_refs` first) minus its VmRSS once the variable exists.",
        "",
        "| size | weft median ms | min | max | weft GB/s (median) | best | / wire | / torch pull | sender peak RSS above idle |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for t in transfers:
        gb = t["GBps_median"]
        rss = t["sender_peak_above_idle_kib"] * 1024 / t["bytes"]
        torch_ratio = f"{gb / torch['pull_GBps']:.2f}" if t["mib"] == 64 else ""
        md.append(
            f"| {t['mib']} MiB | {t['ms_median']:.2f} | {t['ms_min']:.2f} | {t['ms_max']:.2f} | {gb:.3f} | "
            f"{t['GBps_best']:.3f} | {gb / wire_gbps:.2f} | {torch_ratio} | "
            f"{t['sender_peak_above_idle_kib'] / 1024:.1f} MiB ({rss:.2f}x payload) |")
    md += [
        f"| wire: one TCP stream (iperf3) | | | | {wire_gbps:.3f} | | 1.00 | | |",
        f"| torch RPC pull, 64 MiB | | | | {torch['pull_GBps']:.3f} | | {torch['pull_GBps'] / wire_gbps:.2f} | 1.00 | |",
        "",
    ]
    bad = [t["mib"] for t in transfers if abs(t["check_sum"] - t["expected_sum"]) > 1e-3 * t["expected_sum"]]
    if bad:
        md += [f"**The receiver's sum of the payload was wrong at {bad} MiB.**", ""]

    md += [
        "**Step overhead.** One step that runs a NoOp on worker:0 and a NoOp on",
        "worker:1, nothing fed or fetched: client → master → both workers (RunGraph)",
        f"→ master → client. {noop['calls']} timed calls after 200 warm-ups, one at a time. The",
        "peer's figure is one torch RPC round trip (`rpc_sync` of a no-op) to one",
        f"other process, {noop['calls']} calls after 200 warm-ups.",
        "",
        "| | p50 µs | p99 µs | p99 / p50 |",
        "|---|---:|---:|---:|",
        f"| weft no-op step (2 workers, through the master) | {noop['p50_us']:.0f} | {noop['p99_us']:.0f} | "
        f"{noop['p99_us'] / noop['p50_us']:.2f} |",
        f"| torch RPC no-op round trip | {torch['noop_p50_us']:.0f} | {torch['noop_p99_us']:.0f} | "
        f"{torch['noop_p99_us'] / torch['noop_p50_us']:.2f} |",
        "",
    ]

    goals = []
    if t64 is not None:
        r_wire = t64["GBps_median"] / wire_gbps
        r_torch = t64["GBps_median"] / torch["pull_GBps"]
        r_rss = t64["sender_peak_above_idle_kib"] * 1024 / t64["bytes"]
        goals += [
            ("64 MiB RecvTensor / one TCP stream", f"≥ {GOAL_WIRE}", f"{r_wire:.2f}", r_wire >= GOAL_WIRE),
            ("64 MiB RecvTensor / torch RPC pull", f"≥ {GOAL_TORCH}", f"{r_torch:.2f}", r_torch >= GOAL_TORCH),
            ("sender peak RSS above idle / payload (64 MiB)", f"≤ {GOAL_RSS}", f"{r_rss:.2f}", r_rss <= GOAL_RSS),
        ]
    big = max(transfers, key=lambda t: t["mib"])
    if big is not t64:
        r = big["sender_peak_above_idle_kib"] * 1024 / big["bytes"]
        goals.append((f"sender peak RSS above idle / payload ({big['mib']} MiB)", f"≤ {GOAL_RSS}", f"{r:.2f}",
                      r <= GOAL_RSS))
    r_p50 = noop["p50_us"] / torch["noop_p50_us"]
    r_tail = noop["p99_us"] / noop["p50_us"]
    goals += [
        ("no-op step p50 / torch RPC no-op p50", f"≤ {GOAL_P50}", f"{r_p50:.2f}", r_p50 <= GOAL_P50),
        ("no-op step p99 / its p50", f"≤ {GOAL_TAIL}", f"{r_tail:.2f}", r_tail <= GOAL_TAIL),
    ]
    md += ["| goal | target | this run | |", "|---|---:|---:|---|"]
    md += [f"| {g} | {target} | {got} | {verdict(ok)} |" for g, target, got, ok in goals]
    md += [
        "",
        "On a 2-core machine the medians move with whatever else runs: when other",
        "processes take CPU (the line below says how much), the \"best\" column is",
        "closer to weft's own cost, and ratios between runs mean little.",
        "",
        f"Machine: {facts.get('cpus', '?')} CPUs, load average {facts.get('load_start', '?')} at the start and "
        f"{facts.get('load_end', '?')} at the end; while weft ran, its processes used "
        f"{facts.get('weft_cpus', '?')} CPUs' worth and other processes {facts.get('others_cpus', '?')} "
        f"(by ps, the busiest others: {facts.get('others_top', '?')}); {facts.get('iperf3', 'iperf3')}; PyTorch "
        f"{facts.get('torch', '?')}; weft at {facts.get('commit', '?')}.",
    ]
    with open(a.markdown, "w", encoding="utf-8") as f:
        f.write("\n".join(md) + "\n")
    met = sum(1 for *_, ok in goals if ok)
    summary = (f"dist-runtime: 64 MiB RecvTensor {t64['GBps_median'] if t64 else float('nan'):.3f} GB/s "
               f"(wire {wire_gbps:.3f}, torch pull {torch['pull_GBps']:.3f}); no-op step p50 {noop['p50_us']:.0f} µs "
               f"p99 {noop['p99_us']:.0f} µs (torch p50 {torch['noop_p50_us']:.0f} µs); {met}/{len(goals)} goals met")
    print(summary)


if __name__ == "__main__":
    main()
