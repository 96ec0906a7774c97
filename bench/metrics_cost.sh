#!/usr/bin/env bash
# What being watched costs (the observability issue): make bench's
# MULTI_WORKER_MIRRORED job (`weft local --workers=2`, mTLS, 2 epochs) with
# every daemon's /metrics scraped once a second over HTTPS, as Prometheus
# would, against the same job with no metrics port at all; alternating which
# goes first each round, in one run. The goal: no more than 2% apart.
#
# Writes the block `metrics-cost` of BENCHMARKS.md and a summary line to
# stdout.
#
# Environment:
#   BENCH_ROUNDS     rounds of (scraped, none); default 5
#   WEFT             the weft binary; default <repo>/bazel-bin/client/weft
#   BENCH_OUT        default <repo>/BENCHMARKS.md
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
ROUNDS="${BENCH_ROUNDS:-5}"
WEFT_BIN="${WEFT:-$REPO/bazel-bin/client/weft}"
OUT="${BENCH_OUT:-$REPO/BENCHMARKS.md}"
PYTHON="${PYTHON:-/usr/bin/python3}"
die() { echo "metrics_cost: $*" >&2; exit 1; }
[[ "$ROUNDS" =~ ^[1-9][0-9]*$ ]] || die "BENCH_ROUNDS must be a positive integer"
[ -x "$WEFT_BIN" ] || die "no weft binary at $WEFT_BIN (bazel build //client:weft)"

TMP="$(mktemp -d "${TMPDIR:-/tmp}/weft-metrics-cost.XXXXXX")"
SCRAPER=""
cleanup() { [ -n "$SCRAPER" ] && kill "$SCRAPER" 2> /dev/null; wait 2> /dev/null || true; rm -rf "$TMP"; }
trap cleanup EXIT
cp "$WEFT_BIN" "$TMP/weft"

JOB="$TMP/mwm.pbtxt"
sed 's/^epochs:.*/epochs: 2/' "$REPO/examples/fmnist_mlp_multi_worker_mirrored.pbtxt" > "$JOB"

# scrape DIR: every second, GET /metrics of every daemon whose port file has
# appeared, with the local cluster's admin certificate over a kept-alive
# HTTPS connection per daemon (as Prometheus scrapes), from a separate
# process. Counts the scrapes in DIR/scrapes.
scrape() {
  "$PYTHON" - "$1" <<'PY' &
import glob, http.client, os, ssl, sys, time
d = sys.argv[1]
n = 0
conns = {}  # port -> a kept-alive connection, as Prometheus keeps one per target
while True:
    tls = os.path.join(d, "tls")
    if os.path.exists(os.path.join(tls, "local.key")):
        ctx = ssl.create_default_context(cafile=os.path.join(tls, "ca.crt"))
        ctx.load_cert_chain(os.path.join(tls, "local.crt"), os.path.join(tls, "local.key"))
        for f in glob.glob(os.path.join(d, "*.metrics_port")):
            try:
                port = int(open(f).read())
                c = conns.get(port) or http.client.HTTPSConnection("127.0.0.1", port, context=ctx, timeout=2)
                conns[port] = c
                c.request("GET", "/metrics")
                r = c.getresponse()
                r.read()
                if r.status == 200:
                    n += 1
                    open(os.path.join(d, "scrapes"), "w").write(str(n))
            except (OSError, ValueError, http.client.HTTPException):
                conns.pop(port, None)
    time.sleep(1)
PY
  SCRAPER=$!
}

mwm() {  # scraped | none: prints samples/s
  local dir="$TMP/local-$1" args=(local --workers=2 "$JOB" --output=json)
  rm -rf "$dir"; mkdir -p "$dir"; args+=(--log_dir="$dir")
  if [ "$1" = scraped ]; then
    args+=(--metrics_port=0)
    scrape "$dir"
  fi
  timeout 600 "$TMP/weft" "${args[@]}" 2> "$TMP/local.err" | grep '^{' | tail -n1 > "$TMP/result.json" ||
    { tail "$TMP/local.err" >&2; die "weft local ($1) failed"; }
  if [ -n "$SCRAPER" ]; then kill "$SCRAPER" 2> /dev/null; wait "$SCRAPER" 2> /dev/null || true; SCRAPER=""; fi
  if [ "$1" = scraped ] && [ ! -s "$dir/scrapes" ]; then die "nothing was scraped"; fi
  "$PYTHON" -c 'import json,sys; r=json.load(open(sys.argv[1])); assert r["state"]=="SUCCEEDED", r; print(r["samples_per_second"])' \
    "$TMP/result.json" || { tail "$TMP/local.err" >&2; die "weft local ($1) failed"; }
}

RESULTS="$TMP/results.txt"; : > "$RESULTS"
for r in $(seq "$ROUNDS"); do
  order=(scraped none); [ $((r % 2)) -eq 0 ] && order=(none scraped)
  for m in "${order[@]}"; do
    echo "metrics_cost: round $r: MULTI_WORKER_MIRRORED, $m" >&2
    echo "$m $(mwm "$m")" >> "$RESULTS"
  done
done

"$PYTHON" - "$RESULTS" "$ROUNDS" "$(git -C "$REPO" rev-parse --short HEAD 2>/dev/null || echo unknown)" \
  "$(cut -d' ' -f1-3 /proc/loadavg)" > "$TMP/section.md" 2> "$TMP/summary.txt" <<'PY'
import os, statistics, sys
path, rounds, commit, load = sys.argv[1:5]
v = {}
for line in open(path):
    mode, x = line.split()
    v.setdefault(mode, []).append(float(x))
s, n = statistics.median(v["scraped"]), statistics.median(v["none"])
print("## What metrics cost\n")
print(f"`bench/metrics_cost.sh`, {rounds} rounds alternating which goes first, at `{commit}` (load {load} at the end),"
      f" {os.cpu_count()} CPUs: make bench's MULTI_WORKER_MIRRORED job over mTLS with every daemon's /metrics scraped"
      " once a second over HTTPS, against no metrics port. Medians of the rounds; the goal is within 2%.\n")
print("| MULTI_WORKER_MIRRORED, 2 workers | scraped every second | no metrics | scraped / none | rounds (scraped; none) |")
print("|---|---:|---:|---:|---|")
each = "; ".join(", ".join(f"{x:.0f}" for x in v[m]) for m in ("scraped", "none"))
print(f"| samples/s | {s:.0f} | {n:.0f} | {s / n:.3f}x | {each} |")
print(f"metrics_cost: scraped / none: {s / n:.3f}x", file=sys.stderr)
PY
"$PYTHON" "$REPO/bench/bench_md.py" "$OUT" metrics-cost < "$TMP/section.md"
echo "$(cat "$TMP/summary.txt") -> ${OUT#"$REPO"/}"
