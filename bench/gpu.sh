#!/usr/bin/env bash
# The GPU proof, in two halves.
#
#   bench/gpu.sh [--bundle DIR]
#       Here (a machine with the CUDA toolkit and Bazel): builds weft and every
#       GPU test with --config=cuda and assembles DIR (default: gpu-bundle in
#       the repo root, ignored by git): bin/ the binaries, lib/ the shared
#       libraries they need that a GPU machine may lack (gRPC, protobuf,
#       Abseil, spdlog, ..., and the CUDA runtime; not the driver, and not
#       cuBLAS, cuDNN or NCCL, which are large and which the GPU machine's
#       Python environment holds), data/ Fashion-MNIST and the KJV corpus,
#       jobs/ the example jobs.
#
#   bench/gpu.sh --run DIR [--out FILE.md] [--mlp_epochs N] [--cnn_epochs N] [--resnet_epochs N] [--lstm_epochs N]
#                [--transformer_steps N] [--models "mlp cnn resnet transformer lstm"] [--rounds N]
#                [--skip_tests] [--no_local] [--precisions "float32 fp16 bf16"]
#                [--peers "none default reduce-overhead"]
#       On the GPU machine (one GPU, CUDA driver, PyTorch 2; no Bazel, no
#       network): finds cuBLAS/cuDNN/NCCL (PyTorch's nvidia-* packages, then
#       /usr/local/cuda), runs every GPU test binary, trains
#       examples/fmnist_mlp.pbtxt, examples/fmnist_cnn.pbtxt and
#       examples/fmnist_resnet.pbtxt, examples/kjv_transformer.pbtxt (for
#       --transformer_steps steps) and examples/fmnist_lstm.pbtxt (those
#       --models names; the default leaves the LSTM out) on GPU:0 with
#       `weft train` (each also with WEFT_CUDA_GRAPHS=0, every kernel launched
#       from the host rather than the step replayed as a CUDA graph, and with
#       WEFT_COPY_AHEAD=0, each batch copied in by its own step; the CNN
#       also with WEFT_CUDNN=0, cuDNN's fallback, and
#       with WEFT_CUDNN_AUTOTUNE=0, cuDNN's heuristic choice everywhere),
#       trains the same models with PyTorch on the same GPU
#       (bench/gpu/torch_fmnist.py, bench/torch_transformer.py): eager,
#       torch.compile's default mode and
#       its mode="reduce-overhead" (CUDA graphs), each N rounds (default 3,
#       the median reported), runs `weft local` across processes on the
#       GPU, and MIRRORED over NCCL when the machine has two GPUs or more, and
#       prints samples/s side by side; the table is also written as markdown
#       (FILE.md, default DIR/gpu_bench.md).
#       It also trains examples/seattle_weather_lstm.pbtxt on the GPU once, as
#       a check (float targets), when the bundle has its data.
#       --precisions: float32 (the default), and fp16 / bf16 for mixed
#       precision: weft's job with `mixed_precision { compute: FLOAT16 }` (or
#       BFLOAT16) against PyTorch's autocast (fp16 with GradScaler), rows
#       "MODEL-fp16" / "MODEL-bf16" of the table. --peers: which PyTorch
#       runs (eager "none", and torch.compile's modes; default all three, ""
#       for weft alone), so that a short GPU session can spend its time where
#       it must.
#       --skip_tests leaves out the GPU test binaries and --no_local the
#       `weft local` and NCCL runs, so that a short session on a GPU spends
#       its time on the training figures.
#
# Environment: PYTHON (default python3), BAZEL (default bazel), DATA_DIR
# (default /usr/share/datasets/fashion-mnist, used when building).
set -euo pipefail

REPO="$(cd "$(dirname "$0")/.." && pwd)"
PYTHON="${PYTHON:-python3}"
die() { echo "gpu.sh: $*" >&2; exit 1; }

# ---------------------------------------------------------------- build here
build() {
  local bundle="$1"
  local bazel="${BAZEL:-bazel}"
  local data="${DATA_DIR:-/usr/share/datasets/fashion-mnist}"
  [ -x /usr/local/cuda/bin/nvcc ] || die "no CUDA toolkit (/usr/local/cuda/bin/nvcc): nothing GPU to build"
  [ -f "$data/train-images-idx3-ubyte.gz" ] || die "no Fashion-MNIST in $data (set DATA_DIR)"
  cd "$REPO"
  # Every test that uses the GPU test fixture, plus the CUDA plumbing's.
  local tests
  tests="$("$bazel" query --noshow_progress \
    'kind(cc_test, rdeps(//..., //runtime/gpu:gpu_test_util, 1)) + //runtime/kernels/cuda:cuda_util_test' 2>/dev/null)"
  [ -n "$tests" ] || die "bazel query found no GPU tests"
  echo "gpu.sh: building weft and $(echo "$tests" | wc -l) GPU test(s) with --config=cuda" >&2
  # .bazelrc.user already names --config=cuda on a machine with the toolkit
  # (tools/configure.sh); naming it twice would change the options and throw
  # away Bazel's analysis cache for every other build in this tree.
  local config="--config=cuda"
  if grep -qs -- "--config=cuda" "$REPO/.bazelrc.user"; then config=""; fi
  # shellcheck disable=SC2086
  "$bazel" build $config //client:weft $tests
  local bin
  bin="$("$bazel" info bazel-bin 2>/dev/null)"

  rm -rf "$bundle"
  mkdir -p "$bundle/bin" "$bundle/tests" "$bundle/lib" "$bundle/data" "$bundle/jobs"
  install -m 755 "$bin/client/weft" "$bundle/bin/weft"
  local t path originals=("$bin/client/weft")
  for t in $tests; do
    path="${t#//}"; path="${path/://}"
    install -m 755 "$bin/$path" "$bundle/tests/$(basename "$path")"
    originals+=("$bin/$path")
  done
  # Shared libraries: everything ldd resolves except the C runtime (glibc,
  # libstdc++, libgcc: the GPU machine's are newer) and the CUDA libraries
  # the GPU machine has (driver, cuBLAS, cuDNN, NCCL). The CUDA runtime is
  # small and must match what the binaries were built against: carried.
  local skip='^(linux-vdso|ld-linux|libc\.|libm\.|libdl\.|librt\.|libpthread\.|libstdc\+\+|libgcc_s|libcuda\.|libcublas|libcublasLt|libcudnn|libnccl)'
  # (ldd on Bazel's own outputs: tests find their libraries relative to
  # where Bazel put them, through $ORIGIN, and the copies only through lib/.)
  for f in "${originals[@]}"; do
    ldd "$f" | awk '$2 == "=>" && $3 ~ /^\// {print $1, $3}' | while read -r name target; do
      if [[ "$name" =~ $skip ]]; then continue; fi
      [ -e "$bundle/lib/$name" ] || install -m 644 "$(readlink -f "$target")" "$bundle/lib/$name"
    done
    if ldd "$f" | grep -q "not found"; then die "$f: unresolved libraries here: $(ldd "$f" | grep 'not found')"; fi
  done
  # Bazel keeps symbols (--strip=never); the copies need none.
  strip --strip-unneeded "$bundle"/bin/* "$bundle"/tests/* "$bundle"/lib/* 2>/dev/null || true
  cp "$data"/{train,t10k}-{images-idx3,labels-idx1}-ubyte.gz "$bundle/data/"
  cp "$REPO"/examples/fmnist_*.pbtxt "$REPO"/examples/kjv_transformer.pbtxt "$bundle/jobs/"
  "$REPO/tools/kjv_corpus.sh" "$bundle/data/kjv.txt"
  # The regression example's series (python3-vega-datasets), where installed.
  local weather=/usr/lib/python3/dist-packages/vega_datasets/_data/seattle-weather.csv
  if [ -r "$weather" ]; then
    cp "$weather" "$bundle/data/"
    cp "$REPO/examples/seattle_weather_lstm.pbtxt" "$bundle/jobs/"
  fi
  git -C "$REPO" rev-parse --short HEAD > "$bundle/COMMIT" 2>/dev/null || echo unknown > "$bundle/COMMIT"
  # Binaries and libraries compress about 3x; the data is gzip already.
  tar -cJf "$bundle/binaries.tar.xz" -C "$bundle" bin tests lib
  rm -rf "${bundle:?}/bin" "${bundle:?}/tests" "${bundle:?}/lib"
  local mib
  mib=$(( $(du -sb "$bundle" | cut -f1) / 1048576 ))
  echo "gpu.sh: bundle $bundle: ${mib} MiB ($(echo "$tests" | wc -w) test binaries; $(ls "$bundle")" >&2
  [ "$mib" -lt 60 ] || die "the bundle is ${mib} MiB; it must stay under 60"
}

# ------------------------------------------------------- run on the GPU machine
cuda_library_path() {
  # PyTorch's nvidia-* wheels (cuBLAS, cuDNN, NCCL), then the toolkit.
  local dirs=""
  local site
  site="$("$PYTHON" -c 'import nvidia, os; print(os.path.dirname(list(nvidia.__path__)[0]))' 2>/dev/null || true)"
  if [ -n "$site" ]; then
    for d in "$site"/nvidia/*/lib "$site"/nvidia/cu13/lib; do
      [ -d "$d" ] && dirs="$dirs:$d"
    done
  fi
  for d in /usr/local/cuda/lib64 /usr/local/cuda/lib /usr/local/nvidia/lib64 /usr/local/nvidia/lib; do
    [ -d "$d" ] && dirs="$dirs:$d"
  done
  echo "${dirs#:}"
}

run() {
  local bundle out mlp_epochs cnn_epochs resnet_epochs rounds data skip_tests no_local models transformer_steps lstm_epochs
  local precisions peers
  data="$(cd "$1/data" && pwd -P)"; out="$2"; mlp_epochs="$3"; cnn_epochs="$4"; rounds="$5"
  skip_tests="$6"; no_local="$7"; resnet_epochs="$8"; models="$9"; transformer_steps="${10}"; lstm_epochs="${11}"
  precisions="${12}"; peers="${13}"
  [ -f "$1/binaries.tar.xz" ] || die "$1 holds no binaries.tar.xz: build it with bench/gpu.sh --bundle $1"
  local work
  work="$(mktemp -d "${TMPDIR:-/tmp}/weft-gpu.XXXXXX")"
  # The bundle may be read-only: unpack next to the run's scratch files.
  "$PYTHON" -c 'import sys, tarfile; tarfile.open(sys.argv[1]).extractall(sys.argv[2])' \
    "$1/binaries.tar.xz" "$work/bundle"
  cp -r "$1/jobs" "$1/COMMIT" "$work/bundle/"
  ln -s "$data" "$work/bundle/data"
  bundle="$work/bundle"
  # PyTorch runs with the machine's own library path, not the bundle's.
  local torch_env=(env -u LD_LIBRARY_PATH)
  [ -z "${LD_LIBRARY_PATH:-}" ] || torch_env=(env "LD_LIBRARY_PATH=$LD_LIBRARY_PATH")
  export LD_LIBRARY_PATH="$bundle/lib:$(cuda_library_path)${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  echo "== GPU machine" >&2
  nvidia-smi -L 2>/dev/null || echo "(no nvidia-smi)"
  echo "bundle commit $(cat "$bundle/COMMIT"); LD_LIBRARY_PATH=$LD_LIBRARY_PATH"
  local f missing=0
  for f in "$bundle/bin/weft" "$bundle"/tests/*; do
    if ldd "$f" | grep "not found"; then echo "$f: missing libraries above"; missing=1; fi
  done
  [ "$missing" = 0 ] || die "libraries missing on this machine (see above)"
  "$bundle/tests/cuda_util_test" --gtest_filter='*Version*' 2>&1 | grep -E "CUDA runtime|OK|FAIL" || true

  local failed=0 line results="$work/tests.txt"
  : > "$results"
  local gpus
  gpus="$(nvidia-smi -L 2>/dev/null | grep -c '^GPU' || true)"
  # A GPU run must not pass by skipping: every GPU test that would skip for
  # want of as many GPUs as this machine has fails instead.
  export WEFT_TEST_REQUIRE_GPUS="$(( gpus > 0 ? gpus : 1 ))"
  if [ "$skip_tests" = 1 ]; then
    echo "== GPU tests: skipped (--skip_tests)" >&2
  else
    echo "== GPU tests" >&2
    for f in "$bundle"/tests/*; do
      local name log
      name="$(basename "$f")"; log="$work/$name.log"
      if WEFT_FMNIST_DIR="$bundle/data" timeout 600 "$f" > "$log" 2>&1; then status=PASS; else status=FAIL; failed=1; fi
      local passed skipped failures
      passed=$(grep -c '^\[       OK \]' "$log" || true)
      # Per-case lines end in "(N ms)"; gtest's closing summary repeats names without.
      skipped=$(grep -cE '^\[  SKIPPED \] .* \([0-9]+ ms\)$' "$log" || true)
      failures=$(grep -cE '^\[  FAILED  \] .* \([0-9]+ ms\)$' "$log" || true)
      line="$name $status passed=$passed skipped=$skipped failed=$failures"
      echo "$line" | tee -a "$results"
      if [ "$status" = FAIL ]; then grep -E "Failure|FAILED|error|Expected|Which is|actual" "$log" | head -40; fi
      if [ "$skipped" != 0 ]; then grep '^\[  SKIPPED \]' "$log" | head -10; fi
    done
  fi

  echo "== training: weft vs PyTorch eager and torch.compile, one GPU, batch 64, $rounds round(s)" >&2
  local runs="$work/runs.txt"
  : > "$runs"
  local model epochs job round
  # train SYSTEM MODEL JOB [ENV=VALUE...]: one `weft train`, its JSON line
  # appended to $runs.
  train() {
    local system="$1" model="$2" job="$3"; shift 3
    if env "$@" "$bundle/bin/weft" train "$job" --output=json > "$work/$system.$model.json" \
        2> "$work/$system.$model.err"; then
      echo "$system $model $(grep -m1 '^{' "$work/$system.$model.json")" | tee -a "$runs"
    else
      echo "$system $model ($*) failed:"; tail -20 "$work/$system.$model.err"; failed=1
    fi
  }
  # peer SYSTEM MODEL EPOCHS COMPILE: one bench/gpu/torch_fmnist.py run
  # (COMPILE: none, default or reduce-overhead), its JSON line appended to
  # $runs; a failure appends {"state": "FAILED", "error": ...} so that the
  # table says failed. Only the eager peer's failure fails the benchmark:
  # torch.compile needs PyTorch 2 and a working Triton, and without them the
  # table says so.
  peer() {
    local system="$1" tag="$2" epochs="$3" compile="$4" amp="${5:-none}" rc=0 error model="${2%%-*}"
    [[ " $peers " == *" $compile "* ]] || return 0
    if [ "$model" = transformer ]; then
      # The same steps of batch 32 as weft's run (bench/torch_transformer.py).
      (cd "$REPO/bench" && "${torch_env[@]}" timeout 600 "$PYTHON" torch_transformer.py --device cuda \
        --corpus "$bundle/data/kjv.txt" --train_limit $((transformer_steps * 32)) --batch 32 --test_limit 256 \
        --compile "$compile" --amp "$amp") > "$work/$system.$tag.json" 2> "$work/$system.$tag.err" || rc=$?
    else
      "${torch_env[@]}" timeout 600 "$PYTHON" "$REPO/bench/gpu/torch_fmnist.py" --model "$model" \
        --data "$bundle/data" --epochs "$epochs" --compile "$compile" --amp "$amp" \
        > "$work/$system.$tag.json" 2> "$work/$system.$tag.err" || rc=$?
    fi
    if [ "$rc" = 0 ] && grep -q '^{' "$work/$system.$tag.json"; then
      echo "$system $tag $(grep -m1 '^{' "$work/$system.$tag.json")" | tee -a "$runs"
      return 0
    fi
    echo "$system $tag failed (exit status $rc):"; tail -20 "$work/$system.$tag.err"
    error="$(grep -v '^[[:space:]]*$' "$work/$system.$tag.err" | tail -1 | cut -c1-300 || true)"
    [ -n "$error" ] || error="exit status $rc"
    echo "$system $tag $("$PYTHON" -c 'import json, sys; print(json.dumps({"state": "FAILED", "error": sys.argv[1]}))' \
      "$error")" >> "$runs"
    [ "$compile" != none ] || failed=1
  }
  for round in $(seq 1 "$rounds"); do
    for model in $models; do
      case "$model" in
        mlp) epochs=$mlp_epochs ;; cnn) epochs=$cnn_epochs ;; lstm) epochs=$lstm_epochs ;; *) epochs=$resnet_epochs ;;
      esac
      job="$work/fmnist_$model.pbtxt"
      # The example job, pointed at the bundle's data, for the benchmark's epochs
      # (the transformer: its steps, on the first 256 validation sequences).
      if [ "$model" = transformer ]; then
        sed -e "s|^\( *dir:\).*|\1 \"$bundle/data\"|" -e "s|^epochs:.*|steps: $transformer_steps|" \
          -e "s|^  text {|  test_limit: 256\n  text {|" "$bundle/jobs/kjv_transformer.pbtxt" > "$job"
      else
        sed -e "s|^\( *dir:\).*|\1 \"$bundle/data\"|" -e "s|^epochs:.*|epochs: $epochs|" \
          "$bundle/jobs/fmnist_$model.pbtxt" > "$job"
      fi
      local precision
      for precision in $precisions; do
        if [ "$precision" = float32 ]; then
          train weft "$model" "$job"
          if [ "$round" = 1 ]; then grep -m1 "training step on" "$work/weft.$model.err" || true; fi
          if [ "$round" = 1 ]; then
            grep -m1 "replayed from a CUDA graph\|run kernel by kernel" "$work/weft.$model.err" || true
          fi
          # Every kernel launched from the host, no CUDA graph: what recording the step gains.
          train weft-launched "$model" "$job" WEFT_CUDA_GRAPHS=0
          # Recorded, but each step copies its own batch in: what copying it ahead gains.
          train weft-noahead "$model" "$job" WEFT_COPY_AHEAD=0
          if [ "$model" = cnn ]; then
            # cuDNN off: the im2col + cuBLAS convolutions and the CUDA pooling
            # kernels. And cuDNN without autotuning: its heuristic's algorithm
            # wherever it has one, never timed against the fallback.
            train weft-im2col "$model" "$job" WEFT_CUDNN=0
            train weft-cudnn "$model" "$job" WEFT_CUDNN_AUTOTUNE=0
          fi
          peer torch "$model" "$epochs" none
          peer torch-compile "$model" "$epochs" default
          peer torch-compile-ro "$model" "$epochs" reduce-overhead
          continue
        fi
        # Mixed precision: the same job with its products in float16 or
        # bfloat16, against PyTorch's autocast.
        local compute=FLOAT16
        [ "$precision" = bf16 ] && compute=BFLOAT16
        { cat "$job"; echo "mixed_precision { compute: $compute }"; } > "$work/$model-$precision.pbtxt"
        train weft "$model-$precision" "$work/$model-$precision.pbtxt"
        train weft-launched "$model-$precision" "$work/$model-$precision.pbtxt" WEFT_CUDA_GRAPHS=0
        peer torch "$model-$precision" "$epochs" none "$precision"
        peer torch-compile "$model-$precision" "$epochs" default "$precision"
        peer torch-compile-ro "$model-$precision" "$epochs" reduce-overhead "$precision"
      done
    done
  done
  regression_check
  if [ "$no_local" = 1 ]; then
    echo "== distributed and NCCL: skipped (--no_local)" >&2
  else
    local_runs
  fi
  "$PYTHON" "$REPO/bench/gpu/gpu_md.py" --runs "$runs" --tests "$results" --commit "$(cat "$bundle/COMMIT")" \
    --markdown "$out" || failed=1
  echo "gpu.sh: markdown in $out" >&2
  return $failed
}

# The regression example on the GPU (float targets fed to it, the squared
# errors computed there): a check, not a row of the table. Its test loss must
# beat 0.3 (an untrained model's is near 1). run()'s locals are visible here.
regression_check() {
  [ -f "$bundle/jobs/seattle_weather_lstm.pbtxt" ] || { echo "== regression: not in the bundle" >&2; return 0; }
  echo "== regression on the GPU (examples/seattle_weather_lstm.pbtxt)" >&2
  local job="$work/regression.pbtxt"
  sed -e "s|^\( *dir:\).*|\1 \"$bundle/data\"|" -e '$a device: GPU' "$bundle/jobs/seattle_weather_lstm.pbtxt" > "$job"
  if "$bundle/bin/weft" train "$job" --output=json > "$work/regression.json" 2> "$work/regression.err" &&
      "$PYTHON" -c 'import json, sys
r = json.loads(next(l for l in open(sys.argv[1]) if l.startswith("{")))
print("weft-regression", json.dumps(r))
sys.exit(0 if 0 < r["test_loss"] < 0.3 else 1)' "$work/regression.json"; then
    grep -m1 "training step on" "$work/regression.err" || true
  else
    echo "regression on the GPU failed:"; tail -20 "$work/regression.err"; failed=1
  fi
}

# `weft local` across processes on the GPU, and MIRRORED over NCCL where there
# are two GPUs or more; run()'s locals ($work, $bundle, $data, $runs, $failed)
# are visible here.
local_runs() {
  local job
  echo "== distributed: weft local on the GPU (tensors crossing processes)" >&2
  # Each worker opens GPU:0 (here both share the one GPU): the replicas'
  # compute goes there, the ps keeps the variables on its CPU, so gradients
  # and weights cross processes as GPU -> pinned host -> RecvTensor -> GPU.
  local kind args
  for kind in parameter_server multi_worker_mirrored; do
    job="$work/local_$kind.pbtxt"
    sed -e "s|^\( *dir:\).*|\1 \"$data\"|" -e "/^epochs:/d" -e "/^steps:/d" \
      "$bundle/jobs/fmnist_mlp_$kind.pbtxt" > "$job"
    echo "steps: 300" >> "$job"
    args=(--workers=2); [ "$kind" = parameter_server ] && args+=(--ps=1)
    mkdir -p "$work/local_$kind"
    if timeout 180 "$bundle/bin/weft" local "${args[@]}" --data_root="$data" --log_dir="$work/local_$kind" "$job" --output=json \
        > "$work/local_$kind.json" 2> "$work/local_$kind.err"; then
      echo "weft-local $kind $(grep -m1 '^{' "$work/local_$kind.json")" | tee -a "$runs"
    else
      echo "weft local $kind failed:"; tail -20 "$work/local_$kind.err"; tail -5 "$work/local_$kind"/*.log; failed=1
    fi
    grep -h "has /job" "$work/local_$kind"/*.log 2>/dev/null | sed 's/^/  /' | head -4 || true
  done
  # MIRRORED over NCCL needs GPUs of their own for its replicas: one worker,
  # every GPU of the machine, gradients all-reduced in process by NCCL.
  local gpus
  gpus="$(nvidia-smi -L 2>/dev/null | grep -c '^GPU' || true)"
  if [ "${gpus:-0}" -ge 2 ]; then
    echo "== MIRRORED over NCCL on $gpus GPUs of one worker" >&2
    job="$work/local_mirrored.pbtxt"
    sed -e "s|^\( *dir:\).*|\1 \"$data\"|" -e "/^epochs:/d" -e "/^steps:/d" \
      -e "s|kind: MIRRORED|kind: MIRRORED cross_device_ops: NCCL|" \
      "$bundle/jobs/fmnist_mlp_mirrored.pbtxt" > "$job"
    echo "steps: 300" >> "$job"
    mkdir -p "$work/local_mirrored"
    if timeout 180 "$bundle/bin/weft" local --workers=1 --data_root="$data" --log_dir="$work/local_mirrored" "$job" --output=json \
        > "$work/local_mirrored.json" 2> "$work/local_mirrored.err"; then
      echo "weft-local mirrored $(grep -m1 '^{' "$work/local_mirrored.json")" | tee -a "$runs"
    else
      echo "weft local mirrored failed:"; tail -20 "$work/local_mirrored.err"; tail -5 "$work/local_mirrored"/*.log
      failed=1
    fi
  else
    echo "== MIRRORED over NCCL: skipped, this machine has ${gpus:-0} GPU(s) and it needs two" >&2
  fi
}

# ---------------------------------------------------------------------- main
mode=build bundle="$REPO/gpu-bundle" out="" mlp_epochs=3 cnn_epochs=2 resnet_epochs=1 lstm_epochs=1 rounds=3
skip_tests=0 no_local=0 precisions=float32 peers="none default reduce-overhead"
transformer_steps=300 models="mlp cnn resnet transformer"
while [ $# -gt 0 ]; do
  case "$1" in
    --bundle) bundle="$2"; shift 2 ;;
    --run) mode=run; bundle="$2"; shift 2 ;;
    --out) out="$2"; shift 2 ;;
    --mlp_epochs) mlp_epochs="$2"; shift 2 ;;
    --cnn_epochs) cnn_epochs="$2"; shift 2 ;;
    --resnet_epochs) resnet_epochs="$2"; shift 2 ;;
    --transformer_steps) transformer_steps="$2"; shift 2 ;;
    --lstm_epochs) lstm_epochs="$2"; shift 2 ;;
    --models) models="$2"; shift 2
      for m in $models; do
        case "$m" in
          mlp|cnn|resnet|transformer|lstm) ;;
          *) die "--models: unknown model '$m' (mlp, cnn, resnet, transformer, lstm)" ;;
        esac
      done ;;
    --rounds) rounds="$2"; shift 2 ;;
    --peers) peers="$2"; shift 2
      for m in $peers; do
        case "$m" in none|default|reduce-overhead) ;; *) die "--peers: unknown '$m' (none, default, reduce-overhead)" ;; esac
      done ;;
    --precisions) precisions="$2"; shift 2
      for m in $precisions; do
        case "$m" in float32|fp16|bf16) ;; *) die "--precisions: unknown '$m' (float32, fp16, bf16)" ;; esac
      done ;;
    --skip_tests) skip_tests=1; shift ;;
    --no_local) no_local=1; shift ;;
    -h|--help) sed -n '2,50p' "$0"; exit 0 ;;
    *) die "unknown argument '$1' (see --help)" ;;
  esac
done
if [ "$mode" = build ]; then
  build "$bundle"
else
  run "$bundle" "${out:-$bundle/gpu_bench.md}" "$mlp_epochs" "$cnn_epochs" "$rounds" "$skip_tests" "$no_local" \
    "$resnet_epochs" "$models" "$transformer_steps" "$lstm_epochs" "$precisions" "$peers"
fi
