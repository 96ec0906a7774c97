#!/usr/bin/env bash
# Ring all-reduce benchmark: weft's ring (bench/allreduce/allreduce_bench, one
# process per rank) over shared-memory rings, as workers on one host run it,
# over its sockets (--transport=socket, the path between hosts, on loopback
# here) and over gRPC alone (--transport=grpc, --collective_transport=grpc),
# both with mutual TLS unless ALLREDUCE_TLS=0,
# against torch.distributed gloo and OpenMPI, all-reducing float32 on one
# host, in the same run.
#
# For 2 and 4 ranks and 4 and 64 MiB, each round runs weft, weft over its
# sockets, weft over gRPC, gloo and MPI (the order rotates per round), each
# reporting the median over
# its reps of the slowest rank's time per call. Prints a table: median ms,
# busbw (nccl-tests: bytes * 2(n-1)/n / time), the ratios weft/gloo and
# weft/mpi (below 1: weft is faster) and what one weft call costs all its
# ranks together (CPU ms and context switches, barrier included, from
# getrusage), the median over rounds, plus the load average before and after.
#
# Environment:
#   PEERS_DIR        the peers (torch_gloo_allreduce.py, mpi_allreduce.c);
#                    default: ../shared/peers beside the repository
#   ALLREDUCE_RANKS  default "2 4";  ALLREDUCE_BYTES  default "4194304 67108864"
#   ALLREDUCE_REPS   reps per measurement, default 10;  ALLREDUCE_ROUNDS  default 3
#   ALLREDUCE_CHUNK  weft's chunk bytes, default 1048576
#   ALLREDUCE_TLS    1 (default): weft's sockets and gRPC use mutual TLS, as
#                    between hosts in a cluster; 0: plaintext, like the peers
#   ALLREDUCE_BENCH  the weft binary; default: built here
#   WEFT             the weft client that makes the sockets' certificates;
#                    default: built here
#   PYTHON           default /usr/bin/python3;  BAZEL  default bazel
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PEERS_DIR="${PEERS_DIR:-$REPO/../shared/peers}"
PYTHON="${PYTHON:-/usr/bin/python3}"
RANKS="${ALLREDUCE_RANKS:-2 4}"
SIZES="${ALLREDUCE_BYTES:-4194304 67108864}"
REPS="${ALLREDUCE_REPS:-10}"
ROUNDS="${ALLREDUCE_ROUNDS:-3}"
CHUNK="${ALLREDUCE_CHUNK:-1048576}"
TLS="${ALLREDUCE_TLS:-1}"
RUN_TIMEOUT=180  # seconds per measured program

die() { echo "allreduce.sh: $*" >&2; exit 1; }

[ -f "$PEERS_DIR/torch_gloo_allreduce.py" ] || die "no gloo peer in $PEERS_DIR: set PEERS_DIR"
[ -f "$PEERS_DIR/mpi_allreduce.c" ] || die "no MPI peer in $PEERS_DIR: set PEERS_DIR"
"$REPO/tools/install_deps.sh" python3-torch libopenblas0-pthread openmpi-bin libopenmpi-dev

TMP="$(mktemp -d "${TMPDIR:-/tmp}/weft-allreduce.XXXXXX")"
PIDS=()
cleanup() {
  local p
  for p in "${PIDS[@]}"; do kill "$p" 2> /dev/null || true; done
  wait 2> /dev/null || true
  rm -rf "$TMP"
}
trap cleanup EXIT

if [ -z "${ALLREDUCE_BENCH:-}" ]; then
  (cd "$REPO" && "${BAZEL:-bazel}" build ${BAZEL_FLAGS:-} //bench/allreduce:allreduce_bench) >&2 ||
    die "cannot build //bench/allreduce:allreduce_bench"
  # A copy: other builds may repoint bazel-bin while this runs.
  cp "$REPO/bazel-bin/bench/allreduce/allreduce_bench" "$TMP/allreduce_bench"
  ALLREDUCE_BENCH="$TMP/allreduce_bench"
fi
[ -x "$ALLREDUCE_BENCH" ] || die "no bench binary at $ALLREDUCE_BENCH"
if [ "$TLS" = 1 ] && [ -z "${WEFT:-}" ]; then
  (cd "$REPO" && "${BAZEL:-bazel}" build ${BAZEL_FLAGS:-} //client:weft) >&2 || die "cannot build //client:weft"
  WEFT="$REPO/bazel-bin/client/weft"
fi
# The certificates: a throwaway CA and one per rank, as a cluster has.
if [ "$TLS" = 1 ]; then
  "$WEFT" certs init "$TMP/tls" > /dev/null || die "weft certs init failed"
  max_rank=0
  for n in $RANKS; do if [ "$n" -gt "$max_rank" ]; then max_rank=$n; fi; done
  for ((r = 0; r < max_rank; r++)); do
    "$WEFT" certs issue "$TMP/tls" --name="/job:worker/task:$r" > /dev/null || die "weft certs issue failed"
  done
fi
mpicc -O2 -o "$TMP/mpi_allreduce" "$PEERS_DIR/mpi_allreduce.c" || die "mpicc failed"

export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 MKL_NUM_THREADS=1

# N free loopback ports, comma-separated as host:port.
free_addresses() {
  "$PYTHON" -c "
import socket
ss = [socket.socket() for _ in range($1)]
for s in ss: s.bind(('127.0.0.1', 0))
print(','.join('127.0.0.1:%d' % s.getsockname()[1] for s in ss))"
}
free_port() { free_addresses 1 | cut -d: -f2; }

# Prints the median_ms of one run (empty on failure, reason on stderr); keeps
# its per-call CPU ms and context switches in $TMP/weft_usage.
run_weft() {  # N BYTES [TRANSPORT]
  local n=$1 bytes=$2 transport=${3:-shm} addrs r out tls=()
  [ "$transport" != shm ] && [ "$TLS" = 1 ] && tls=(--tls_dir="$TMP/tls")
  addrs="$(free_addresses "$n")"
  PIDS=()
  for r in $(seq 1 $((n - 1))); do
    timeout "$RUN_TIMEOUT" "$ALLREDUCE_BENCH" --rank="$r" --addresses="$addrs" --bytes="$bytes" --reps="$REPS" \
      --chunk_bytes="$CHUNK" --transport="$transport" "${tls[@]}" > /dev/null 2>> "$TMP/weft.err" &
    PIDS+=($!)
  done
  out="$(timeout "$RUN_TIMEOUT" "$ALLREDUCE_BENCH" --rank=0 --addresses="$addrs" --bytes="$bytes" --reps="$REPS" \
    --chunk_bytes="$CHUNK" --transport="$transport" "${tls[@]}" 2>> "$TMP/weft.err")" || { cat "$TMP/weft.err" >&2; }
  for r in "${PIDS[@]}"; do wait "$r" || true; done
  PIDS=()
  echo "$(json_field "$out" cpu_ms) $(json_field "$out" ctx_switches)" > "$TMP/weft_usage"
  json_field "$out" median_ms
}
run_weftgrpc() { run_weft "$1" "$2" grpc; }
run_weftsock() { run_weft "$1" "$2" socket; }
run_gloo() {
  local out
  out="$(timeout "$RUN_TIMEOUT" "$PYTHON" "$PEERS_DIR/torch_gloo_allreduce.py" --ranks "$1" --bytes "$2" --reps "$REPS" \
    --port "$(free_port)" 2> "$TMP/gloo.err" | tail -1)" || cat "$TMP/gloo.err" >&2
  json_field "$out" median_ms
}
run_mpi() {
  local out
  out="$(timeout "$RUN_TIMEOUT" mpirun --allow-run-as-root --oversubscribe -np "$1" "$TMP/mpi_allreduce" "$2" "$REPS" \
    2> "$TMP/mpi.err" | tail -1)" || cat "$TMP/mpi.err" >&2
  json_field "$out" median_ms
}
json_field() {
  "$PYTHON" -c "
import json, sys
try: print(json.loads(sys.argv[1])[sys.argv[2]])
except Exception: print('')" "$1" "$2"
}

echo "load before: $(cut -d' ' -f1-3 /proc/loadavg)"
RESULTS="$TMP/results.txt"
: > "$RESULTS"
round=0
for ((round = 0; round < ROUNDS; round++)); do
  for n in $RANKS; do
    for bytes in $SIZES; do
      impls=(weft gloo weftsock weftgrpc mpi)
      for k in 0 1 2 3 4; do
        impl="${impls[$(((k + round) % 5))]}"
        ms="$("run_$impl" "$n" "$bytes")"
        echo "round $round: $impl ranks=$n bytes=$bytes median_ms=${ms:-FAILED} (load $(cut -d' ' -f1 /proc/loadavg))" >&2
        echo "$n $bytes $impl ${ms:-nan}" >> "$RESULTS"
        if [ "$impl" = weft ] && [ -n "$ms" ]; then  # the shared-memory path's cost
          read -r cpu cs < "$TMP/weft_usage"
          echo "$n $bytes weft_cpu_ms ${cpu:-nan}" >> "$RESULTS"
          echo "$n $bytes weft_switches ${cs:-nan}" >> "$RESULTS"
        fi
      done
    done
  done
done
echo "load after:  $(cut -d' ' -f1-3 /proc/loadavg)"

"$PYTHON" - "$RESULTS" "$TLS" <<'PY'
import collections, statistics, sys
runs = collections.defaultdict(list)
for line in open(sys.argv[1]):
    n, b, impl, ms = line.split()
    if ms != "nan": runs[(int(n), int(b), impl)].append(float(ms))
def med(key): return statistics.median(runs[key]) if runs.get(key) else float("nan")
def bw(n, b, ms): return b * 2 * (n - 1) / n / (ms / 1e3) / 1e9
tls = "TLS " if sys.argv[2] == "1" else "plaintext "
print(f"| ranks | MiB | weft ms | weft over {tls}sockets ms | weft over {tls}gRPC ms | gloo ms | mpi ms | weft busbw GB/s "
      "| gloo busbw | mpi busbw | weft/gloo | weft/mpi | sockets/gloo | sockets/gRPC | weft CPU ms per call "
      "| weft context switches per call |")
print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
for n, b in sorted({(k[0], k[1]) for k in runs}):
    w, ws, wg = med((n, b, "weft")), med((n, b, "weftsock")), med((n, b, "weftgrpc"))
    g, m = med((n, b, "gloo")), med((n, b, "mpi"))
    cpu, cs = med((n, b, "weft_cpu_ms")), med((n, b, "weft_switches"))
    print(f"| {n} | {b >> 20} | {w:.2f} | {ws:.1f} | {wg:.1f} | {g:.1f} | {m:.1f} | {bw(n, b, w):.2f} "
          f"| {bw(n, b, g):.2f} | {bw(n, b, m):.2f} | {w / g:.2f} | {w / m:.2f} | {ws / g:.2f} | {ws / wg:.2f} "
          f"| {cpu:.1f} | {cs:.0f} |")
# Spread: each implementation's per-round medians.
print()
print("Per-round medians (ms), the spread behind each figure:")
print()
for n, b in sorted({(k[0], k[1]) for k in runs}):
    parts = [f"{impl} " + ", ".join(f"{v:.2f}" for v in runs[(n, b, impl)])
             for impl in ("weft", "weftsock", "weftgrpc", "gloo", "mpi")]
    print(f"- {n} ranks x {b >> 20} MiB: " + "; ".join(parts))
PY
