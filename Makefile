# weft's two everyday commands:
#   make demo   train the bundled default job (installs what it needs)
#   make test   build everything and run every test (installs what it needs)
# and `make bench` for the side-by-side benchmarks (writes BENCHMARKS.md),
# `make sanitize` (CI runs it after `make test`) and `make fuzz`.

SHELL := /bin/bash
BAZEL ?= bazel

BUILD_PACKAGES := bazel-bootstrap bazel-rules-java default-jdk-headless g++ pkg-config \
  libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler libabsl-dev \
  libspdlog-dev libfmt-dev libgtest-dev libgmock-dev libeigen3-dev zlib1g-dev libssl-dev \
  libc-ares-dev libre2-dev libsqlite3-dev libcpp-httplib-dev \
  python3-yaml python3-kubernetes python3-pytest iproute2 util-linux prometheus chromium \
  python3-grpcio python3-protobuf python3-numpy python3-tqdm python3-setuptools python3-pip
DATA_PACKAGES := dataset-fashion-mnist bible-kjv
# Data whose package's recommendations (plotting, a numerical stack) the data
# do not need: examples/seattle_weather_lstm.pbtxt's CSV files.
DATA_PACKAGES_ALONE := python3-vega-datasets
BENCH_PACKAGES := python3 python3-numpy python3-torch python3-matplotlib libopenblas0-pthread openmpi-bin libopenmpi-dev iperf3

# CUDA code is compiled whenever the toolkit is present, so CI compiles it
# too: tools/configure.sh puts --config=cuda in .bazelrc.user on such machines.
BAZEL_FLAGS ?=

# Sanitizer and fuzz builds use clang (libFuzzer is clang's) in an output base
# of their own, so that switching never throws away the gcc build's cache.
SANITIZE_PACKAGES := clang-14 libclang-rt-14-dev lld-14
# One per checkout, the same as tools/fuzz.sh's.
WEFT_SANITIZE_OUTPUT_BASE ?= $(HOME)/.cache/bazel/weft-sanitize-$(shell printf %s "$(CURDIR)" | md5sum | cut -c1-12)
export WEFT_SANITIZE_OUTPUT_BASE
SANITIZE_BAZEL = $(BAZEL) --output_base=$(WEFT_SANITIZE_OUTPUT_BASE)
# The unit tests CI runs under ASan and UBSan, and the fuzz targets' corpus
# replays (tests/fuzz). Not the GPU tests: the sanitizer build has no CUDA
# (--define=cuda=0), so they would build stubs and skip every case. Not
# ps_service_test either: it alone pulls the worker, its gRPC services and
# the collective transports into the clang build (39 of its 222 sources, the
# slowest to compile), which had grown CI past its 35 minutes; the ps's file
# formats (shard files, manifests, the checkpoint index) stay in, as do the
# fuzz targets.
SANITIZE_SCOPE := (//common/... + //graph/... + //runtime/... + //job/... + //ps/... + //tests/fuzz/... \
                   - //runtime/gpu/... - //runtime/kernels/cuda/... - //ps:ps_service_test)
# Seconds each fuzz target runs: `make fuzz` and the smoke run of `make sanitize`.
FUZZ_SECONDS ?= 180
SMOKE_FUZZ_SECONDS ?= 5
# Targets tagged "sanitize" (tests/fuzz) mean something only under the
# sanitizers: `make sanitize` runs them, `make test` leaves them out.
NOT_SANITIZE := --build_tag_filters=-sanitize --test_tag_filters=-sanitize

.PHONY: deps build test sanitize fuzz demo bench clean

# The deploy checks render with real kustomize (`kubectl kustomize`): Debian's
# kubernetes-client, unless the machine already has a kubectl where tests
# look (their PATH).
deps:
	@tools/install_deps.sh $(BUILD_PACKAGES) $(DATA_PACKAGES) \
	  $$(PATH=/bin:/usr/bin:/usr/local/bin command -v kubectl >/dev/null || echo kubernetes-client)
	@tools/install_deps.sh --no-install-recommends $(DATA_PACKAGES_ALONE)
	@tools/configure.sh

build: deps
	$(BAZEL) build $(BAZEL_FLAGS) //...

# The summary line comes from this run's build events (tools/test_summary.py):
# a target passes only if Bazel says it passed now; cases are counted from
# each target's own report. --keep_going: one target that fails to build
# does not hide the results of the others.
test: deps
	@status=0; events=$$(mktemp); \
	$(BAZEL) test --keep_going --build_event_json_file="$$events" $(NOT_SANITIZE) $(BAZEL_FLAGS) //... || status=$$?; \
	targets=$$($(BAZEL) query 'tests(//...) except attr(tags, manual, //...) except attr(tags, sanitize, //...)' 2>/dev/null); \
	/usr/bin/python3 tools/test_summary.py --bep "$$events" $$targets || status=1; \
	rm -f "$$events"; \
	if [ "$${CI:-}" = "true" ]; then $(BAZEL) shutdown; fi; \
	exit $$status

# The unit tests of common/, graph/, runtime/ and ps/ built with clang, ASan
# and UBSan (--config=sanitize: --config=fuzz at -O0, coverage-instrumented,
# so one build serves the fuzz targets), then every fuzz target for
# SMOKE_FUZZ_SECONDS.
sanitize: deps
	@tools/install_deps.sh $(SANITIZE_PACKAGES)
	@status=0; events=$$(mktemp); \
	targets=$$($(SANITIZE_BAZEL) query 'tests($(SANITIZE_SCOPE)) except attr(tags, manual, $(SANITIZE_SCOPE))' 2>/dev/null); \
	$(SANITIZE_BAZEL) test --config=sanitize --symlink_prefix=/ --keep_going --build_event_json_file="$$events" $$targets || status=$$?; \
	echo "Under ASan and UBSan:"; \
	/usr/bin/python3 tools/test_summary.py --bep "$$events" $$targets || status=1; \
	rm -f "$$events"; \
	tools/fuzz.sh --config sanitize --seconds $(SMOKE_FUZZ_SECONDS) || status=1; \
	if [ "$${CI:-}" = "true" ]; then $(SANITIZE_BAZEL) shutdown; fi; \
	exit $$status

# Every fuzz target for FUZZ_SECONDS each (docs/fuzzing.md).
fuzz: deps
	@tools/install_deps.sh $(SANITIZE_PACKAGES)
	tools/fuzz.sh --seconds $(FUZZ_SECONDS)

demo: deps
	$(BAZEL) build $(BAZEL_FLAGS) //client:weft
	"$$($(BAZEL) info bazel-bin 2>/dev/null)/client/weft" local --workers=2 --ps=1 examples/fmnist_mlp.pbtxt

bench: deps
	@tools/install_deps.sh $(BENCH_PACKAGES)
	$(BAZEL) build $(BAZEL_FLAGS) //client:weft //bench:transfer_bench //bench/allreduce:allreduce_bench
	bench/run.sh

clean:
	$(BAZEL) clean
