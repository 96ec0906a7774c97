#!/usr/bin/env bash
# What mutual TLS costs (the security issue): the same measurements with
# certificates and with --insecure, alternating which goes first, in one run.
#
#   1. RecvTensor of 64 MiB between two `weft worker` processes through a
#      `weft master` (bench/transfer_bench, 20 steps after 3 warm-up ones):
#      the median step's GB/s.
#   2. MULTI_WORKER_MIRRORED training, `weft local --workers=2` on the
#      Fashion-MNIST MLP example (2 epochs): samples/s.
#
# Writes the block `tls-cost` of BENCHMARKS.md and a summary line to stdout.
#
# Environment:
#   BENCH_ROUNDS     rounds of (TLS, insecure); default 3
#   WEFT             the weft binary; default <repo>/bazel-bin/client/weft
#   TRANSFER_BENCH   default <repo>/bazel-bin/bench/transfer_bench
#   BENCH_OUT        default <repo>/BENCHMARKS.md
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
ROUNDS="${BENCH_ROUNDS:-3}"
WEFT_BIN="${WEFT:-$REPO/bazel-bin/client/weft}"
BENCH_BIN="${TRANSFER_BENCH:-$REPO/bazel-bin/bench/transfer_bench}"
OUT="${BENCH_OUT:-$REPO/BENCHMARKS.md}"
PYTHON="${PYTHON:-/usr/bin/python3}"
die() { echo "tls_cost: $*" >&2; exit 1; }
[[ "$ROUNDS" =~ ^[1-9][0-9]*$ ]] || die "BENCH_ROUNDS must be a positive integer"
[ -x "$WEFT_BIN" ] || die "no weft binary at $WEFT_BIN (bazel build //client:weft)"
[ -x "$BENCH_BIN" ] || die "no transfer_bench at $BENCH_BIN (bazel build //bench:transfer_bench)"

TMP="$(mktemp -d "${TMPDIR:-/tmp}/weft-tls-cost.XXXXXX")"
PIDS=()
cleanup() { for p in "${PIDS[@]}"; do kill "$p" 2> /dev/null || true; done; wait 2> /dev/null || true; rm -rf "$TMP"; }
trap cleanup EXIT
cp "$WEFT_BIN" "$TMP/weft"
cp "$BENCH_BIN" "$TMP/transfer_bench"

TLS="$TMP/tls"
"$TMP/weft" certs init "$TLS" > /dev/null
for name in master /job:worker/task:0 /job:worker/task:1; do
  "$TMP/weft" certs issue "$TLS" --name="$name" --hosts=127.0.0.1 > /dev/null
done
"$TMP/weft" certs issue "$TLS" --name=bench --role=admin > /dev/null

free_port() { "$PYTHON" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
await_serving() {  # NAME PID LOG
  for _ in $(seq 200); do
    grep -q 'serving on' "$3" 2> /dev/null && return 0
    kill -0 "$2" 2> /dev/null || break
    sleep 0.05
  done
  tail -n 20 "$3" >&2
  die "$1 did not start"
}

# recv_tensor MODE: prints the median GB/s of a 64 MiB RecvTensor.
recv_tensor() {
  local mode="$1" p0 p1 pm flags0 flags1 flagsm
  p0="$(free_port)"; p1="$(free_port)"; pm="$(free_port)"
  local cluster="worker=127.0.0.1:$p0,127.0.0.1:$p1"
  if [ "$mode" = tls ]; then
    flags0="--ca=$TLS/ca.crt --cert=$TLS/worker-0.crt --key=$TLS/worker-0.key"
    flags1="--ca=$TLS/ca.crt --cert=$TLS/worker-1.crt --key=$TLS/worker-1.key"
    flagsm="--ca=$TLS/ca.crt --cert=$TLS/master.crt --key=$TLS/master.key"
  else
    flags0="--insecure"; flags1="--insecure"; flagsm="--insecure"
  fi
  # shellcheck disable=SC2086
  "$TMP/weft" worker --task=worker:0 --cluster="$cluster" --listen="127.0.0.1:$p0" $flags0 > "$TMP/w0.log" 2>&1 &
  local w0=$!; PIDS+=("$w0")
  # shellcheck disable=SC2086
  "$TMP/weft" worker --task=worker:1 --cluster="$cluster" --listen="127.0.0.1:$p1" $flags1 > "$TMP/w1.log" 2>&1 &
  local w1=$!; PIDS+=("$w1")
  # shellcheck disable=SC2086
  "$TMP/weft" master --cluster="$cluster" --listen="127.0.0.1:$pm" $flagsm > "$TMP/m.log" 2>&1 &
  local wm=$!; PIDS+=("$wm")
  await_serving worker:0 "$w0" "$TMP/w0.log"; await_serving worker:1 "$w1" "$TMP/w1.log"
  await_serving master "$wm" "$TMP/m.log"
  local env=()
  [ "$mode" = tls ] && env=(WEFT_CA="$TLS/ca.crt" WEFT_CERT="$TLS/bench.crt" WEFT_KEY="$TLS/bench.key")
  env "${env[@]}" timeout 300 "$TMP/transfer_bench" transfer --master="127.0.0.1:$pm" --sender_pid="$w1" --mib=64 \
    --steps=20 --warmup=3 > "$TMP/transfer.out" 2> "$TMP/transfer.err" || { tail "$TMP/transfer.err" >&2; die "transfer_bench ($mode) failed"; }
  kill "$w0" "$w1" "$wm"; wait "$w0" "$w1" "$wm" 2> /dev/null || true
  "$PYTHON" -c 'import json,sys; print(json.loads(sys.stdin.readline())["GBps_median"])' < "$TMP/transfer.out"
}

# mwm MODE: prints samples/s of MULTI_WORKER_MIRRORED over two workers.
JOB="$TMP/mwm.pbtxt"
sed 's/^epochs:.*/epochs: 2/' "$REPO/examples/fmnist_mlp_multi_worker_mirrored.pbtxt" > "$JOB"
grep -q '^epochs: 2' "$JOB" || echo 'epochs: 2' >> "$JOB"
mwm() {
  local args=(local --workers=2 "$JOB" --output=json --log_dir="$TMP/local-$1")
  [ "$1" = insecure ] && args+=(--insecure)
  rm -rf "$TMP/local-$1"; mkdir -p "$TMP/local-$1"
  timeout 600 "$TMP/weft" "${args[@]}" 2> "$TMP/local.err" | grep '^{' | tail -n1 |
    "$PYTHON" -c 'import json,sys; r=json.loads(sys.stdin.read()); assert r["state"]=="SUCCEEDED", r; print(r["samples_per_second"])' ||
    { tail "$TMP/local.err" >&2; die "weft local ($1) failed"; }
}

RESULTS="$TMP/results.txt"; : > "$RESULTS"
for r in $(seq "$ROUNDS"); do
  order=(tls insecure); [ $((r % 2)) -eq 0 ] && order=(insecure tls)
  for m in "${order[@]}"; do
    echo "tls_cost: round $r: RecvTensor 64 MiB, $m" >&2
    echo "recv $m $(recv_tensor "$m")" >> "$RESULTS"
    echo "tls_cost: round $r: MULTI_WORKER_MIRRORED, $m" >&2
    echo "mwm $m $(mwm "$m")" >> "$RESULTS"
  done
done

"$PYTHON" - "$RESULTS" "$ROUNDS" "$(git -C "$REPO" rev-parse --short HEAD 2>/dev/null || echo unknown)" \
  "$(cut -d' ' -f1-3 /proc/loadavg)" > "$TMP/section.md" 2> "$TMP/summary.txt" <<'PY'
import statistics, sys
path, rounds, commit, load = sys.argv[1:5]
v = {}
for line in open(path):
    what, mode, x = line.split()
    v.setdefault((what, mode), []).append(float(x))
def med(k): return statistics.median(v[k])
rows = [("RecvTensor 64 MiB (GB/s, median step)", "recv"), ("MULTI_WORKER_MIRRORED, 2 workers (samples/s)", "mwm")]
print("## What mutual TLS costs\n")
print(f"`bench/tls_cost.sh`, {rounds} rounds alternating which goes first, at `{commit}` (load {load} at the end),"
      f" {__import__('os').cpu_count()} CPUs. Each figure is the median of its rounds; the ratio is TLS over --insecure.\n")
print("| measurement | mTLS | --insecure | mTLS / insecure | rounds (mTLS; insecure) |")
print("|---|---:|---:|---:|---|")
summary = []
for label, key in rows:
    t, i = med((key, "tls")), med((key, "insecure"))
    each = "; ".join(", ".join(f"{x:.3g}" for x in v[(key, m)]) for m in ("tls", "insecure"))
    print(f"| {label} | {t:.4g} | {i:.4g} | {t / i:.2f}x | {each} |")
    summary.append(f"{key} {t / i:.2f}x")
print("tls_cost: TLS / insecure: " + ", ".join(summary), file=sys.stderr)
PY
"$PYTHON" "$REPO/bench/bench_md.py" "$OUT" tls-cost < "$TMP/section.md"
echo "$(cat "$TMP/summary.txt") -> ${OUT#"$REPO"/}"
