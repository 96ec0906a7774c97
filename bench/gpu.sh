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
#       Python environment holds), data/ Fashion-MNIST, jobs/ the example jobs.
#
#   bench/gpu.sh --run DIR [--out FILE.md] [--mlp_epochs N] [--cnn_epochs N] [--rounds N]
#       On the GPU machine (one GPU, CUDA driver, PyTorch; no Bazel, no
#       network): finds cuBLAS/cuDNN/NCCL (PyTorch's nvidia-* packages, then
#       /usr/local/cuda), runs every GPU test binary, trains
#       examples/fmnist_mlp.pbtxt and examples/fmnist_cnn.pbtxt on GPU:0 with
#       `weft train` (the CNN also with WEFT_CUDNN=0, cuDNN's fallback, and
#       with WEFT_CUDNN_AUTOTUNE=0, cuDNN's heuristic choice everywhere),
#       trains the same models with PyTorch eager on the same GPU
#       (bench/gpu/torch_fmnist.py), each N rounds (default 3, the median
#       reported), runs `weft local` across processes on the
#       GPU, and MIRRORED over NCCL when the machine has two GPUs or more, and
#       prints samples/s side by side; the table is also written as markdown
#       (FILE.md, default DIR/gpu_bench.md).
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
  cp "$REPO"/examples/fmnist_*.pbtxt "$bundle/jobs/"
  git -C "$REPO" rev-parse --short HEAD > "$bundle/COMMIT" 2>/dev/null || echo unknown > "$bundle/COMMIT"
  # Binaries and libraries compress about 3x; the data is gzip already.
  tar -cJf "$bundle/binaries.tar.xz" -C "$bundle" bin tests lib
  rm -rf "$bundle/bin" "$bundle/tests" "$bundle/lib"
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
  local bundle out mlp_epochs cnn_epochs rounds data
  data="$(cd "$1/data" && pwd -P)"; out="$2"; mlp_epochs="$3"; cnn_epochs="$4"; rounds="$5"
  [ -f "$1/binaries.tar.xz" ] || die "$1 holds no binaries.tar.xz: build it with bench/gpu.sh --bundle $1"
  local work
  work="$(mktemp -d "${TMPDIR:-/tmp}/weft-gpu.XXXXXX")"
  # The bundle may be read-only: unpack next to the run's scratch files.
  "$PYTHON" -c 'import sys, tarfile; tarfile.open(sys.argv[1]).extractall(sys.argv[2])' \
    "$1/binaries.tar.xz" "$work/bundle"
  cp -r "$1/jobs" "$1/COMMIT" "$work/bundle/"
  ln -s "$data" "$work/bundle/data"
  bundle="$work/bundle"
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

  echo "== GPU tests" >&2
  # A GPU run must not pass by skipping: every GPU test that would skip for
  # want of as many GPUs as this machine has fails instead.
  local gpus
  gpus="$(nvidia-smi -L 2>/dev/null | grep -c '^GPU' || true)"
  export WEFT_TEST_REQUIRE_GPUS="$(( gpus > 0 ? gpus : 1 ))"
  local failed=0 line results="$work/tests.txt"
  : > "$results"
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

  echo "== training: weft vs PyTorch eager, one GPU, batch 64, $rounds round(s)" >&2
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
  for round in $(seq 1 "$rounds"); do
    for model in mlp cnn; do
      epochs=$mlp_epochs; [ "$model" = cnn ] && epochs=$cnn_epochs
      job="$work/fmnist_$model.pbtxt"
      # The example job, pointed at the bundle's data, for the benchmark's epochs.
      sed -e "s|^\( *dir:\).*|\1 \"$bundle/data\"|" -e "s|^epochs:.*|epochs: $epochs|" \
        "$bundle/jobs/fmnist_$model.pbtxt" > "$job"
      train weft "$model" "$job"
      if [ "$round" = 1 ]; then grep -m1 "training step on" "$work/weft.$model.err" || true; fi
      if [ "$model" = cnn ]; then
        # cuDNN off: the im2col + cuBLAS convolutions and the CUDA pooling
        # kernels. And cuDNN without autotuning: its heuristic's algorithm
        # wherever it has one, never timed against the fallback.
        train weft-im2col "$model" "$job" WEFT_CUDNN=0
        train weft-cudnn "$model" "$job" WEFT_CUDNN_AUTOTUNE=0
      fi
      if "$PYTHON" "$REPO/bench/gpu/torch_fmnist.py" --model "$model" --data "$bundle/data" --epochs "$epochs" \
          > "$work/torch.$model.json" 2> "$work/torch.$model.err"; then
        echo "torch $model $(grep -m1 '^{' "$work/torch.$model.json")" | tee -a "$runs"
      else
        echo "torch $model failed:"; tail -20 "$work/torch.$model.err"; failed=1
      fi
    done
  done
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
  "$PYTHON" "$REPO/bench/gpu/gpu_md.py" --runs "$runs" --tests "$results" --commit "$(cat "$bundle/COMMIT")" \
    --markdown "$out" || failed=1
  echo "gpu.sh: markdown in $out" >&2
  return $failed
}

# ---------------------------------------------------------------------- main
mode=build bundle="$REPO/gpu-bundle" out="" mlp_epochs=3 cnn_epochs=2 rounds=3
while [ $# -gt 0 ]; do
  case "$1" in
    --bundle) bundle="$2"; shift 2 ;;
    --run) mode=run; bundle="$2"; shift 2 ;;
    --out) out="$2"; shift 2 ;;
    --mlp_epochs) mlp_epochs="$2"; shift 2 ;;
    --cnn_epochs) cnn_epochs="$2"; shift 2 ;;
    --rounds) rounds="$2"; shift 2 ;;
    -h|--help) sed -n '2,25p' "$0"; exit 0 ;;
    *) die "unknown argument '$1' (see --help)" ;;
  esac
done
if [ "$mode" = build ]; then
  build "$bundle"
else
  run "$bundle" "${out:-$bundle/gpu_bench.md}" "$mlp_epochs" "$cnn_epochs" "$rounds"
fi
