#!/usr/bin/env bash
# The distributed-runtime benchmarks (issue 3), called by bench/run.sh after
# the MLP benchmark; writes the "dist-runtime" section of BENCHMARKS.md.
#
# In one run, on loopback only:
#   1. the wire: one TCP stream, iperf3 -c 127.0.0.1 -n 4G (bits_per_second);
#   2. the peer: shared/peers/torch_rpc_latency.py (no-op p50/p99, 64 MiB pull);
#   3. weft: a `weft master` and two `weft worker` processes driven by
#      bench/transfer_bench: the no-op step's latency over both workers, then
#      RecvTensor of 1, 4, 64 and 256 MiB float32 from worker:1 to worker:0,
#      with the sender's peak RSS above idle.
# Every process started here is stopped on exit, failure included.
#
# Environment (as bench/run.sh, plus):
#   TRANSFER_BENCH  the bench binary; default: built here, bazel-bin/bench/transfer_bench
#   TRANSFER_MIB    sizes in MiB; default 1,4,64,256
#   TRANSFER_STEPS  timed steps per size; default 20 (after 3 warm-ups)
#   NOOP_CALLS      timed no-op steps; default 2000 (after 200 warm-ups)
#   BAZEL           default bazel
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BENCH="$REPO/bench"
PEERS_DIR="${PEERS_DIR:-$REPO/../shared/peers}"
WEFT_BIN="${WEFT:-$REPO/bazel-bin/client/weft}"
PYTHON="${PYTHON:-/usr/bin/python3}"
OUT="${BENCH_OUT:-$REPO/BENCHMARKS.md}"
MIB="${TRANSFER_MIB:-1,4,64,256}"
STEPS="${TRANSFER_STEPS:-20}"
CALLS="${NOOP_CALLS:-2000}"
RUN_TIMEOUT=240  # seconds per measured program

die() { echo "bench: $*" >&2; exit 1; }

PEER="$PEERS_DIR/torch_rpc_latency.py"
[ -f "$PEER" ] || die "no torch RPC peer at $PEER: check out shared/ beside the repository, or set PEERS_DIR"
[ -x "$WEFT_BIN" ] || die "no weft binary at $WEFT_BIN: run 'make bench' (or 'bazel build //client:weft'), or set WEFT"
[ -x "$PYTHON" ] || die "no Python at $PYTHON: install Debian's python3 (make bench does), or set PYTHON"
"$REPO/tools/install_deps.sh" iperf3
command -v iperf3 > /dev/null || die "no iperf3 after installing it"
if [ -z "${TRANSFER_BENCH:-}" ]; then
  (cd "$REPO" && "${BAZEL:-bazel}" build ${BAZEL_FLAGS:-} //bench:transfer_bench) >&2 || die "cannot build //bench:transfer_bench"
  TRANSFER_BENCH="$REPO/bazel-bin/bench/transfer_bench"
fi
[ -x "$TRANSFER_BENCH" ] || die "no bench binary at $TRANSFER_BENCH"

TMP="$(mktemp -d "${TMPDIR:-/tmp}/weft-transfer.XXXXXX")"
PIDS=()
cleanup() {
  local p
  for p in "${PIDS[@]}"; do kill "$p" 2> /dev/null || true; done
  for p in "${PIDS[@]}"; do
    # A task that ignores SIGTERM for 10 s is killed.
    for _ in $(seq 100); do kill -0 "$p" 2> /dev/null || break; sleep 0.1; done
    kill -9 "$p" 2> /dev/null || true
  done
  wait 2> /dev/null || true
  rm -rf "$TMP"
}
trap cleanup EXIT
trap 'exit 130' INT TERM
# Private copies, so a concurrent `bazel build` cannot swap a binary mid-run.
cp "$WEFT_BIN" "$TMP/weft"
cp "$TRANSFER_BENCH" "$TMP/transfer_bench"

THREAD_ENV=(OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 MKL_NUM_THREADS=1)
free_port() {
  "$PYTHON" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}
# Waits until LOG shows the process serving, or fails with its log.
await_serving() {  # await_serving NAME PID LOG
  for _ in $(seq 200); do
    grep -q 'serving on' "$3" 2> /dev/null && return 0
    kill -0 "$2" 2> /dev/null || break
    sleep 0.05
  done
  echo "bench: $1 did not start; its log:" >&2
  tail -n 20 "$3" >&2
  exit 1
}
RESULTS="$TMP/results.txt"  # lines: "<system> <json>"
: > "$RESULTS"
LOAD_START="$(cut -d' ' -f1-3 /proc/loadavg)"

# 1. The wire.
echo "bench: loopback TCP stream (iperf3, 4 GiB)" >&2
port="$(free_port)"
# A server that stays up (not -1, where a client that came too early used up
# its one test), then one client once it listens.
iperf3 -s -p "$port" > "$TMP/iperf3_server.log" 2>&1 &
IPERF_PID=$!
PIDS+=($IPERF_PID)
for _ in $(seq 100); do
  grep -q "Server listening" "$TMP/iperf3_server.log" 2> /dev/null && break
  sleep 0.1
done
timeout 120 iperf3 -c 127.0.0.1 -p "$port" -n 4G -J > "$TMP/iperf3.json" 2> "$TMP/iperf3.err" || true
kill "$IPERF_PID" 2> /dev/null || true
# iperf3 reports its own failures inside the JSON ("error"), and has been
# seen to print text around it: take the outermost object and say what is
# wrong instead of a traceback.
wire="$("$PYTHON" - "$TMP/iperf3.json" <<'PY'
import json, sys
text = open(sys.argv[1], errors="replace").read()
start, end = text.find("{"), text.rfind("}")
try:
    report = json.loads(text[start:end + 1]) if 0 <= start < end else None
except ValueError as e:
    sys.exit("iperf3 printed no readable JSON (%s): %r" % (e, text[:300]))
if report is None:
    sys.exit("iperf3 printed no JSON: %r" % text[:300])
if report.get("error"):
    sys.exit("iperf3 failed: %s" % report["error"])
try:
    bps = report["end"]["sum_received"]["bits_per_second"]
except (KeyError, TypeError):
    sys.exit("iperf3's JSON has no end.sum_received.bits_per_second")
print(json.dumps({"bits_per_second": bps}))
PY
)" || { tail -n 20 "$TMP/iperf3.err" "$TMP/iperf3_server.log" >&2; die "iperf3 failed"; }
echo "iperf3 $wire" >> "$RESULTS"

# 2. The peer.
echo "bench: torch RPC peer (no-op x$CALLS, 64 MiB pull)" >&2
port="$(free_port)"
if ! env "${THREAD_ENV[@]}" timeout "$RUN_TIMEOUT" "$PYTHON" "$PEER" --calls "$CALLS" --bytes 67108864 --port "$port" \
    > "$TMP/torch.out" 2> "$TMP/torch.err"; then
  tail -n 20 "$TMP/torch.out" "$TMP/torch.err" >&2
  die "the torch RPC peer failed"
fi
line="$(grep -m1 '^{' "$TMP/torch.out")" || { tail -n 20 "$TMP/torch.err" >&2; die "the torch RPC peer printed no JSON"; }
echo "torch $line" >> "$RESULTS"

# 3. weft: two workers and a master, each its own process.
P0="$(free_port)"; P1="$(free_port)"; PM="$(free_port)"
while [ "$P1" = "$P0" ]; do P1="$(free_port)"; done
while [ "$PM" = "$P0" ] || [ "$PM" = "$P1" ]; do PM="$(free_port)"; done
CLUSTER="worker=127.0.0.1:$P0,127.0.0.1:$P1"
# Over mutual TLS, as users run weft (bench/tls_cost.sh compares with
# --insecure): a throwaway CA, a certificate per daemon and one for the bench.
TLS="$TMP/tls"
"$TMP/weft" certs init "$TLS" > /dev/null
for name in master /job:worker/task:0 /job:worker/task:1; do
  "$TMP/weft" certs issue "$TLS" --name="$name" --hosts=127.0.0.1 > /dev/null
done
"$TMP/weft" certs issue "$TLS" --name=bench --role=admin > /dev/null
tls() { echo "--ca=$TLS/ca.crt" "--cert=$TLS/$1.crt" "--key=$TLS/$1.key"; }
export WEFT_CA="$TLS/ca.crt" WEFT_CERT="$TLS/bench.crt" WEFT_KEY="$TLS/bench.key"
# shellcheck disable=SC2046
"$TMP/weft" worker --task=worker:0 --cluster="$CLUSTER" --listen="127.0.0.1:$P0" $(tls worker-0) > "$TMP/w0.log" 2>&1 &
W0=$!; PIDS+=("$W0")
# shellcheck disable=SC2046
"$TMP/weft" worker --task=worker:1 --cluster="$CLUSTER" --listen="127.0.0.1:$P1" $(tls worker-1) > "$TMP/w1.log" 2>&1 &
W1=$!; PIDS+=("$W1")
# shellcheck disable=SC2046
"$TMP/weft" master --cluster="$CLUSTER" --listen="127.0.0.1:$PM" $(tls master) > "$TMP/master.log" 2>&1 &
WM=$!; PIDS+=("$WM")
await_serving worker:0 "$W0" "$TMP/w0.log"
await_serving worker:1 "$W1" "$TMP/w1.log"
await_serving master "$WM" "$TMP/master.log"

# "busy total ours" in clock ticks: all CPUs' busy and total time from
# /proc/stat, and the CPU time of the three daemons plus this script's waited
# children (the bench client). Their differences over weft's measurements say
# how much of the machine other processes (a concurrent build) took.
cpu_sample() {
  local busy total ours=0 p t
  read -r busy total < <(awk '/^cpu /{b=$2+$3+$4+$7+$8+$9; print b, b+$5+$6}' /proc/stat)
  for p in "$W0" "$W1" "$WM"; do
    t="$(sed 's/.*) //' "/proc/$p/stat" | awk '{print $12+$13}')"
    ours=$((ours + t))
  done
  t="$(sed 's/.*) //' "/proc/$$/stat" | awk '{print $14+$15}')"
  echo "$busy $total $((ours + t))"
}

run_bench() {  # run_bench NAME ARGS...
  local name="$1"; shift
  if ! timeout "$RUN_TIMEOUT" "$TMP/transfer_bench" "$@" --master="127.0.0.1:$PM" > "$TMP/$name.out" 2> "$TMP/$name.err"; then
    echo "bench: transfer_bench $name failed:" >&2
    tail -n 20 "$TMP/$name.out" "$TMP/$name.err" "$TMP/master.log" "$TMP/w0.log" "$TMP/w1.log" >&2
    exit 1
  fi
  sed 's/^/weft /' "$TMP/$name.out" >> "$RESULTS"
}
read -r BUSY0 TOTAL0 OURS0 < <(cpu_sample)
echo "bench: weft no-op step over two workers (x$CALLS)" >&2
run_bench noop noop --calls="$CALLS" --warmup=200
echo "bench: weft RecvTensor of $MIB MiB ($STEPS steps each)" >&2
run_bench transfer transfer --sender_pid="$W1" --mib="$MIB" --steps="$STEPS" --warmup=3
read -r BUSY1 TOTAL1 OURS1 < <(cpu_sample)

FACTS="$TMP/facts.txt"
{
  echo "load_start=$LOAD_START"
  echo "load_end=$(cut -d' ' -f1-3 /proc/loadavg)"
  echo "cpus=$(nproc)"
  # CPUs' worth of time that processes other than weft's took while it ran.
  awk -v b=$((BUSY1 - BUSY0)) -v t=$((TOTAL1 - TOTAL0)) -v o=$((OURS1 - OURS0)) -v n="$(nproc)" \
    'BEGIN { x = (t > 0) ? (b - o) / t * n : 0; if (x < 0) x = 0; printf "others_cpus=%.2f\nweft_cpus=%.2f\n", x, (t > 0) ? o / t * n : 0 }'
  echo "others_top=$(ps -eo pcpu=,comm= --sort=-pcpu | awk -v me="$$" '$2 != "weft" && $2 != "ps" {print $2; n++} n == 3 {exit}' | paste -sd, -)"
  echo "iperf3=$(iperf3 --version 2>&1 | head -n1)"
  echo "torch=$("$PYTHON" -c 'import torch; print(torch.__version__)' 2>/dev/null || echo unknown)"
  echo "commit=$(git -C "$REPO" rev-parse --short HEAD 2>/dev/null || echo unknown)$(
    [ -n "$(git -C "$REPO" status --porcelain 2>/dev/null)" ] && echo ' (with local changes)')"
} > "$FACTS"

cp "$RESULTS" "${TRANSFER_RESULTS_COPY:-/dev/null}" 2> /dev/null || true
"$PYTHON" "$BENCH/transfer_md.py" --results "$RESULTS" --facts "$FACTS" --markdown "$TMP/section.md" > "$TMP/summary.txt"
"$PYTHON" "$BENCH/bench_md.py" "$OUT" dist-runtime < "$TMP/section.md"
echo "$(cat "$TMP/summary.txt") -> ${OUT#"$REPO"/}"
