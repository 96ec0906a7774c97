// Every GPU kernel against the CPU kernel of the same op, on fresh random
// inputs (the seed is printed; set WEFT_TEST_SEED to replay one), several
// shapes each (odd sizes, scalar operands, size 0 where the op allows it).
//
// Each case builds one node, runs the CPU kernel on a CpuDevice and the GPU
// kernel on the test GPU with its inputs copied there. Before the GPU run,
// blocks of each output's size are taken from the device allocator, poisoned
// (NaN) and handed back, so the kernel's outputs land in poisoned memory and
// an element it does not write fails the comparison. Floats compare within
// |gpu - cpu| <= atol + rtol |cpu|; integers and bools exactly. Error cases
// must fail on both devices with the same code.
//
// The convolutions and max pooling run every case through both of their GPU
// paths, cuDNN and the fallback (im2col + cuBLAS, CUDA pooling kernels),
// flipping gpu_kernels::SetUseCudnn in between, and check which path ran
// (with autotuning off, so that cuDNN runs wherever it can); one test
// covers the autotuned choice between the two.
//
// Without a GPU every test skips.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "graph/builder.h"
#include "graph/graph.h"
#include "graph/ops/ops.h"
#include "graph/ops/window_geometry.h"
#include "gtest/gtest.h"
#include "runtime/device.h"
#include "runtime/gpu/gpu_device.h"
#include "runtime/gpu/gpu_test_util.h"
#include "runtime/kernels/cuda/cudnn_conv.h"
#include "runtime/op_kernel.h"
#include "runtime/resource_mgr.h"
#include "runtime/testing/test_util.h"

namespace weft {
namespace gpu_kernels {
namespace {

using gpu::GpuDevice;

uint64_t BaseSeed() {
  static const uint64_t seed = [] {
    const char* env = std::getenv("WEFT_TEST_SEED");
    const uint64_t s = env != nullptr ? std::strtoull(env, nullptr, 10) : std::random_device()();
    std::printf("gpu_kernels_test: WEFT_TEST_SEED=%llu\n", static_cast<unsigned long long>(s));
    return s;
  }();
  return seed;
}

// A fresh seed per call.
uint64_t NextSeed() {
  static uint64_t counter = 0;
  return BaseSeed() * 0x9E3779B97F4A7C15ull + ++counter;
}

Tensor Rand(const TensorShape& shape, float lo = -1.0f, float hi = 1.0f) {
  return testing::RandomTensor(shape, NextSeed(), lo, hi);
}

// Values from {lo, lo + 1, ..., hi} as floats: many ties.
Tensor RandSteps(const TensorShape& shape, int lo, int hi) {
  Tensor t(DType::kFloat32, shape);
  std::mt19937_64 rng(NextSeed());
  std::uniform_int_distribution<int> d(lo, hi);
  for (float& v : t.flat<float>()) v = static_cast<float>(d(rng));
  return t;
}

template <typename T>
Tensor RandInts(const TensorShape& shape, int64_t lo, int64_t hi) {
  Tensor t(DTypeOf<T>::value, shape);
  std::mt19937_64 rng(NextSeed());
  std::uniform_int_distribution<int64_t> d(lo, hi);
  for (T& v : t.flat<T>()) v = static_cast<T>(d(rng));
  return t;
}

Tensor RandBools(const TensorShape& shape) {
  Tensor t(DType::kBool, shape);
  std::mt19937_64 rng(NextSeed());
  for (bool& v : t.flat<bool>()) v = (rng() & 1) != 0;
  return t;
}

struct Tolerance {
  double atol = 1e-6;
  double rtol = 1e-6;
};
constexpr Tolerance kExact{0, 0};
constexpr Tolerance kElementwise{1e-6, 2e-6};
constexpr Tolerance kReduction{1e-5, 1e-5};
constexpr Tolerance kGemm{1e-4, 1e-4};
// A sum of n values in [-1, 1]: the CPU accumulates in float, in an order of
// its own, so its rounding error grows with n. BiasAddGrad adds row after
// row (seen: 1.5e-3 apart for 50176 rows); Sum adds 4096-element blocks
// summed in float (seen: 7e-5 apart for 2^20 elements).
Tolerance SumTolerance(double n, double per_element = 1e-7) { return Tolerance{1e-5 + per_element * n, 1e-5}; }

// Compares a CPU result with a GPU result copied back to the host.
void ExpectMatches(const Tensor& cpu, const Tensor& gpu, Tolerance tol, const std::string& what) {
  ASSERT_EQ(cpu.dtype(), gpu.dtype()) << what;
  ASSERT_EQ(cpu.shape(), gpu.shape()) << what;
  const int64_t n = cpu.NumElements();
  int bad = 0;
  if (cpu.dtype() == DType::kFloat32) {
    const float* c = cpu.data<float>();
    const float* g = gpu.data<float>();
    for (int64_t i = 0; i < n && bad < 5; ++i) {
      const double bound = tol.atol + tol.rtol * std::fabs(c[i]);
      const bool ok = std::isnan(c[i]) ? std::isnan(g[i]) : (c[i] == g[i] || std::fabs(double{g[i]} - c[i]) <= bound);
      if (!ok) {
        ++bad;
        ADD_FAILURE() << what << ": element " << i << " of " << cpu.shape().DebugString() << ": cpu " << c[i]
                      << ", gpu " << g[i];
      }
    }
    return;
  }
  const size_t elem = cpu.TotalBytes() / std::max<int64_t>(n, 1);
  const char* c = static_cast<const char*>(cpu.raw_data());
  const char* g = static_cast<const char*>(gpu.raw_data());
  for (int64_t i = 0; i < n && bad < 5; ++i) {
    if (std::memcmp(c + i * elem, g + i * elem, elem) != 0) {
      ++bad;
      ADD_FAILURE() << what << ": element " << i << " of " << DTypeName(cpu.dtype()) << cpu.shape().DebugString()
                    << " differs";
    }
  }
}

struct KernelRun {
  absl::Status status;
  std::vector<Tensor> outputs;
};

// One node of `op` reading placeholders shaped like `inputs` (or with every
// dim unknown, so shape checks are left to the kernels), with a kernel for
// each device. Kernels persist across Runs, as in an executor.
class OpUnderTest {
 public:
  OpUnderTest(const std::string& op, const std::vector<Tensor>& inputs, const AttrList& attrs,
              bool unknown_dims = false)
      : cpu_("/device:CPU:0", 1) {
    GraphBuilder b(&graph_);
    std::vector<Output> ins;
    for (size_t i = 0; i < inputs.size(); ++i) {
      TensorShape s = inputs[i].shape();
      if (unknown_dims) {
        for (int d = 0; d < s.rank(); ++d) s.set_dim(d, -1);
      }
      ins.push_back(b.Placeholder(inputs[i].dtype(), s, absl::StrCat("x", i)));
    }
    node_ = b.AddNode(op, ins, attrs, "under_test");
    status_ = b.status();
    if (!status_.ok()) return;
    gpu_ = gpu::TestGpu();
    auto ck = KernelRegistry::Global()->Create(node_, &cpu_);
    if (!ck.ok()) {
      status_ = ck.status();
      return;
    }
    cpu_kernel_ = *std::move(ck);
    auto gk = KernelRegistry::Global()->Create(node_, gpu_);
    if (!gk.ok()) {
      status_ = gk.status();
      return;
    }
    gpu_kernel_ = *std::move(gk);
  }

  const absl::Status& status() const { return status_; }
  const Node* node() const { return node_; }
  GpuDevice* gpu() const { return gpu_; }
  ResourceMgr* cpu_resources() { return &cpu_rm_; }
  ResourceMgr* gpu_resources() { return &gpu_rm_; }

  KernelRun RunCpu(const std::vector<Tensor>& inputs, int64_t step_id = 1) {
    return RunKernel(cpu_kernel_.get(), &cpu_, &cpu_rm_, inputs, step_id);
  }

  // `inputs` are device tensors. Outputs come back on the device; `poison`
  // lists the (dtype, shape) of the outputs expected, to be poisoned first.
  KernelRun RunGpu(const std::vector<Tensor>& inputs, const std::vector<Tensor>& poison_like, int64_t step_id = 1) {
    poisoned_.clear();
    {
      std::vector<Tensor> blocks;
      for (int copy = 0; copy < 3; ++copy) {
        for (const Tensor& like : poison_like) {
          if (like.TotalBytes() == 0) continue;
          blocks.emplace_back(like.dtype(), like.shape(), gpu_->allocator());
          gpu::Poison(gpu_, &blocks.back());
          poisoned_.insert(blocks.back().raw_data());
        }
      }
      EXPECT_TRUE(gpu_->Synchronize().ok());
      // Handed back last-first, so the first output's block is reused first.
      while (!blocks.empty()) blocks.pop_back();
    }
    KernelRun r = RunKernel(gpu_kernel_.get(), gpu_, &gpu_rm_, inputs, step_id);
    absl::Status sync = gpu_->Synchronize();
    if (r.status.ok()) r.status = sync;
    return r;
  }

  // True when output `t` (a device tensor) sits in a block poisoned before
  // the run, or is one of `inputs` forwarded.
  bool WasPoisoned(const Tensor& t, const std::vector<Tensor>& inputs) const {
    if (t.TotalBytes() == 0) return true;
    for (const Tensor& in : inputs) {
      if (t.SharesBufferWith(in)) return true;
    }
    return poisoned_.contains(t.raw_data());
  }

 private:
  KernelRun RunKernel(OpKernel* k, Device* d, ResourceMgr* rm, const std::vector<Tensor>& inputs, int64_t step_id) {
    KernelRun r;
    std::vector<const Tensor*> ptrs;
    for (const Tensor& t : inputs) ptrs.push_back(&t);
    r.outputs.resize(node_->num_outputs());
    OpKernelContext::Params p;
    p.node = node_;
    p.device = d;
    p.step_id = step_id;
    p.resources = rm;
    p.inputs = ptrs;
    p.outputs = absl::MakeSpan(r.outputs);
    OpKernelContext ctx(p);
    k->Compute(&ctx);
    r.status = ctx.status();
    return r;
  }

  Graph graph_;
  Node* node_ = nullptr;
  absl::Status status_;
  CpuDevice cpu_;
  GpuDevice* gpu_ = nullptr;
  ResourceMgr cpu_rm_, gpu_rm_;
  std::unique_ptr<OpKernel> cpu_kernel_, gpu_kernel_;
  absl::flat_hash_set<const void*> poisoned_;
};

std::vector<Tensor> ToDeviceAll(GpuDevice* gpu, const std::vector<Tensor>& host) {
  std::vector<Tensor> dev;
  for (const Tensor& t : host) {
    auto d = gpu::ToDevice(gpu, t);
    EXPECT_TRUE(d.ok()) << d.status();
    dev.push_back(d.ok() ? *std::move(d) : Tensor());
  }
  return dev;
}

std::string Describe(const std::string& op, const std::vector<Tensor>& inputs) {
  std::string s = op + "(";
  for (size_t i = 0; i < inputs.size(); ++i) {
    absl::StrAppend(&s, i > 0 ? ", " : "", DTypeName(inputs[i].dtype()), inputs[i].shape().DebugString());
  }
  return s + ")";
}

// Runs `op` on both devices: with unknown_dims the placeholders hide the
// shapes, for cases only a kernel can reject. check_poison: the outputs must
// land in the poisoned blocks (not for Const, whose value is copied to the
// device when its kernel is built). Sets *ok once both devices agreed on the
// status; then `cpu` holds the CPU's outputs and `gpu` the GPU's, copied to
// the host (both empty when the op failed).
void RunOnBothDevices(const std::string& op, const std::vector<Tensor>& inputs, const AttrList& attrs,
                      bool unknown_dims, int64_t step_id, bool check_poison, std::vector<Tensor>* cpu_out,
                      std::vector<Tensor>* gpu_out, bool* ok) {
  *ok = false;
  GpuDevice* gpu = gpu::TestGpu();
  ASSERT_NE(gpu, nullptr);
  OpUnderTest t(op, inputs, attrs, unknown_dims);
  ASSERT_TRUE(t.status().ok()) << t.status()
                                << (unknown_dims ? "\n(an error case the graph rejects never reaches a kernel)" : "");
  KernelRun cpu = t.RunCpu(inputs, step_id);
  std::vector<Tensor> dev_in = ToDeviceAll(gpu, inputs);
  KernelRun dev = t.RunGpu(dev_in, cpu.status.ok() ? cpu.outputs : std::vector<Tensor>{}, step_id);
  ASSERT_EQ(cpu.status.code(), dev.status.code()) << "cpu: " << cpu.status << "\ngpu: " << dev.status;
  if (cpu.status.ok()) {
    ASSERT_EQ(cpu.outputs.size(), dev.outputs.size());
    for (size_t i = 0; i < cpu.outputs.size(); ++i) {
      ASSERT_TRUE(dev.outputs[i].IsInitialized()) << "output " << i << " not set";
      EXPECT_TRUE(!check_poison || t.WasPoisoned(dev.outputs[i], dev_in))
          << "output " << i << " was not allocated in poisoned memory; the allocator did not reuse the block";
      auto host = gpu::ToHost(gpu, dev.outputs[i]);
      ASSERT_TRUE(host.ok()) << host.status();
      cpu_out->push_back(cpu.outputs[i]);
      gpu_out->push_back(*std::move(host));
    }
  }
  *ok = true;
}

// Runs `op` on both devices (see RunOnBothDevices) and compares every output.
void ExpectGpuMatchesCpu(const std::string& op, const std::vector<Tensor>& inputs, const AttrList& attrs = {},
                         Tolerance tol = kElementwise, bool unknown_dims = false, int64_t step_id = 1,
                         bool check_poison = true) {
  if (gpu::TestGpu() == nullptr) GTEST_SKIP() << "no GPU";
  const std::string what = Describe(op, inputs);
  SCOPED_TRACE(what);
  std::vector<Tensor> cpu, gpu;
  bool ok = false;
  RunOnBothDevices(op, inputs, attrs, unknown_dims, step_id, check_poison, &cpu, &gpu, &ok);
  if (!ok) return;
  for (size_t i = 0; i < cpu.size(); ++i) ExpectMatches(cpu[i], gpu[i], tol, absl::StrCat(what, " output ", i));
}

void ExpectBothFail(const std::string& op, const std::vector<Tensor>& inputs, const AttrList& attrs = {}) {
  ExpectGpuMatchesCpu(op, inputs, attrs, kElementwise, /*unknown_dims=*/true);
}

#define SKIP_WITHOUT_GPU() \
  if (gpu::TestGpu() == nullptr) GTEST_SKIP() << "no GPU"

// ---- Registration -------------------------------------------------------------------

TEST(GpuKernelRegistrationTest, EveryComputeOpHasAGpuKernel) {
  for (const char* op :
       {"Add", "AddN", "ApplyAdam", "Attention", "AttentionGrad", "ApplyGradientDescent", "ApplyMomentum", "ApplyMovingAverage", "ArgMax",
        "AvgPool", "AvgPoolGrad", "Concat", "ConcatGrad",
        "BatchNorm", "BatchNormGrad", "BatchNormInference", "BatchNormSums", "BatchNormSumsGrad",
        "BatchNormFromSums", "BatchNormFromSumsGrad", "BiasAdd", "BiasAddGrad", "Cast", "ConcatRows", "Const",
        "Conv2D", "Conv2DBackpropFilter", "Conv2DBackpropInput", "Dropout", "Embedding", "EmbeddingGrad", "Equal", "GlobalAvgPool",
        "GlobalAvgPoolGrad", "GlobalNormScale", "GRU", "GRUGrad", "Identity", "InTopK", "LayerNorm", "LayerNormGrad", "LSTM", "LSTMGrad",
        "MatMul", "MaxPool",
        "MaxPoolGrad", "Mean", "MeanGrad", "Mul", "Neg",
        "NoOp", "Relu", "ReluGrad", "Reshape", "ReshapeLike", "RowDot", "ScaleRows", "Sigmoid", "SigmoidGrad",
        "MicroBatch", "SliceRows", "Softmax", "SoftmaxGrad", "SparseSoftmaxCrossEntropyWithLogits", "Sub", "Sum", "SumGrad",
        "Tanh", "TanhGrad", "UnscaleGradients", "ApplyLossScale", "Variable"}) {
    EXPECT_TRUE(KernelRegistry::Global()->Has(op, "CPU")) << op;
    EXPECT_TRUE(KernelRegistry::Global()->Has(op, "GPU")) << op;
  }
}

// ---- Elementwise ---------------------------------------------------------------------

const std::vector<TensorShape>& Shapes() {
  static const auto* shapes = new std::vector<TensorShape>{{0}, {1}, {7}, {3, 5}, {2, 3, 4}, {64, 128}, {1000003}};
  return *shapes;
}

TEST(GpuKernelTest, Activations) {
  SKIP_WITHOUT_GPU();
  for (const TensorShape& s : Shapes()) {
    Tensor x = Rand(s, -12.0f, 12.0f);
    ExpectGpuMatchesCpu("Relu", {x}, {}, kExact);
    ExpectGpuMatchesCpu("Neg", {x}, {}, kExact);
    ExpectGpuMatchesCpu("Sigmoid", {x});
    ExpectGpuMatchesCpu("Tanh", {x});
    ExpectGpuMatchesCpu("ReluGrad", {Rand(s), RandSteps(s, -1, 1)}, {}, kExact);  // x = 0 included
    ExpectGpuMatchesCpu("SigmoidGrad", {Rand(s, 0.0f, 1.0f), Rand(s)});
    ExpectGpuMatchesCpu("TanhGrad", {Rand(s), Rand(s)});
  }
  ExpectBothFail("ReluGrad", {Rand({3, 4}), Rand({4, 3})});
}

TEST(GpuKernelTest, AddSubMulWithSameShapeOrScalar) {
  SKIP_WITHOUT_GPU();
  for (const char* op : {"Add", "Sub", "Mul"}) {
    for (const TensorShape& s : Shapes()) {
      ExpectGpuMatchesCpu(op, {Rand(s), Rand(s)}, {}, kExact);
      ExpectGpuMatchesCpu(op, {Rand(s), Rand({})}, {}, kExact);
    }
    ExpectBothFail(op, {Rand({3, 4}), Rand({4, 3})});
  }
}

TEST(GpuKernelTest, BiasAddAndGrad) {
  SKIP_WITHOUT_GPU();
  for (const TensorShape& s : std::vector<TensorShape>{{5}, {0, 5}, {7, 3}, {64, 128}, {2, 5, 5, 16}, {3, 0}}) {
    Tensor bias = Rand({s.dim(s.rank() - 1)});
    ExpectGpuMatchesCpu("BiasAdd", {Rand(s), bias}, {}, kExact);
  }
  // Many rows take the two-pass path.
  for (const TensorShape& s : std::vector<TensorShape>{
           {5}, {0, 5}, {7, 3}, {64, 10}, {300, 33}, {257, 40}, {64, 28, 28, 16}, {3, 0}}) {
    const double rows = static_cast<double>(s.num_elements()) / std::max<int64_t>(1, s.dim(s.rank() - 1));
    ExpectGpuMatchesCpu("BiasAddGrad", {Rand(s)}, {}, SumTolerance(rows));
  }
  ExpectBothFail("BiasAdd", {Rand({3, 4}), Rand({3})});
}

TEST(GpuKernelTest, AddNSumsInOrder) {
  SKIP_WITHOUT_GPU();
  for (int n : {1, 2, 3, 16, 17, 35}) {
    for (const TensorShape& s : std::vector<TensorShape>{{0}, {5, 7}, {4099}}) {
      std::vector<Tensor> in;
      for (int i = 0; i < n; ++i) in.push_back(Rand(s));
      ExpectGpuMatchesCpu("AddN", in, {}, kElementwise);
    }
  }
  ExpectBothFail("AddN", {Rand({3, 4}), Rand({4, 3})});
}

TEST(GpuKernelTest, ReductionsAndTheirGradients) {
  SKIP_WITHOUT_GPU();
  for (const TensorShape& s : std::vector<TensorShape>{{}, {0}, {1}, {64}, {3, 1000}, {1 << 20}}) {
    ExpectGpuMatchesCpu("Sum", {Rand(s)}, {}, SumTolerance(static_cast<double>(s.num_elements()), 1e-9));
    ExpectGpuMatchesCpu("Mean", {Rand(s)}, {}, kReduction);  // NaN for size 0 on both
    ExpectGpuMatchesCpu("SumGrad", {Rand({}), Rand(s)}, {}, kExact);
    ExpectGpuMatchesCpu("MeanGrad", {Rand({}), Rand(s)}, {}, kExact);
  }
}

TEST(GpuKernelTest, RowOps) {
  SKIP_WITHOUT_GPU();
  for (const TensorShape& s : std::vector<TensorShape>{{0, 3}, {5, 7}, {64, 10}, {3, 1000}, {4, 0}}) {
    ExpectGpuMatchesCpu("ScaleRows", {Rand(s), Rand({s.dim(0)})}, {}, kExact);
    ExpectGpuMatchesCpu("RowDot", {Rand(s), Rand(s)}, {}, kReduction);
  }
  ExpectBothFail("ScaleRows", {Rand({3, 4}), Rand({4})});
  ExpectBothFail("RowDot", {Rand({3, 4}), Rand({3, 5})});
}

TEST(GpuKernelTest, ArgMaxTakesTheFirstMaximum) {
  SKIP_WITHOUT_GPU();
  for (const TensorShape& s : std::vector<TensorShape>{{7}, {0, 3}, {5, 7}, {64, 10}, {3, 4, 5}, {2, 1000}}) {
    ExpectGpuMatchesCpu("ArgMax", {Rand(s)}, {}, kExact);
    ExpectGpuMatchesCpu("ArgMax", {RandSteps(s, 0, 2)}, {}, kExact);  // ties
  }
  ExpectBothFail("ArgMax", {Rand({3, 0})});
}

TEST(GpuKernelTest, EqualForEveryDtype) {
  SKIP_WITHOUT_GPU();
  for (const TensorShape& s : std::vector<TensorShape>{{0}, {7}, {64, 10}}) {
    ExpectGpuMatchesCpu("Equal", {RandSteps(s, 0, 2), RandSteps(s, 0, 2)}, {}, kExact);
    ExpectGpuMatchesCpu("Equal", {RandInts<int32_t>(s, 0, 2), RandInts<int32_t>(s, 0, 2)}, {}, kExact);
    ExpectGpuMatchesCpu("Equal", {RandInts<int64_t>(s, 0, 2), RandInts<int64_t>(s, 0, 2)}, {}, kExact);
    ExpectGpuMatchesCpu("Equal", {RandBools(s), RandBools(s)}, {}, kExact);
  }
  ExpectBothFail("Equal", {Rand({3}), Rand({4})});
}

TEST(GpuKernelTest, CastBetweenEveryPair) {
  SKIP_WITHOUT_GPU();
  // Floats beyond int32 and int64 range, NaN and infinities saturate as on the CPU.
  Tensor f = Rand({1001}, -5e9f, 5e9f);
  f.data<float>()[0] = NAN;
  f.data<float>()[1] = INFINITY;
  f.data<float>()[2] = -INFINITY;
  f.data<float>()[3] = 2.5f;
  f.data<float>()[4] = -2.5f;
  f.data<float>()[5] = 1e30f;
  const std::vector<Tensor> sources = {f, RandInts<int32_t>({1001}, INT32_MIN, INT32_MAX),
                                      RandInts<int64_t>({1001}, INT64_MIN / 2, INT64_MAX / 2), RandBools({1001}),
                                      Rand({0})};
  for (const Tensor& x : sources) {
    for (DType to : {DType::kFloat32, DType::kInt32, DType::kInt64, DType::kBool}) {
      ExpectGpuMatchesCpu("Cast", {x}, {Attr("dtype", to)}, kExact);
    }
  }
}

// ---- Softmax, loss, dropout ----------------------------------------------------------

TEST(GpuKernelTest, SoftmaxAndGrad) {
  SKIP_WITHOUT_GPU();
  for (const TensorShape& s : std::vector<TensorShape>{{7}, {0, 5}, {5, 7}, {64, 10}, {3, 1000}, {2, 3, 4}}) {
    Tensor x = Rand(s, -20.0f, 20.0f);
    if (x.NumElements() > 0) x.data<float>()[0] = 1000.0f;  // stability
    ExpectGpuMatchesCpu("Softmax", {x}, {}, kElementwise);
    ExpectGpuMatchesCpu("SoftmaxGrad", {Rand(s, 0.0f, 1.0f), Rand(s)}, {}, kReduction);
  }
  ExpectBothFail("SoftmaxGrad", {Rand({2, 3}), Rand({3, 2})});
}

TEST(GpuKernelTest, SparseSoftmaxCrossEntropy) {
  SKIP_WITHOUT_GPU();
  for (const TensorShape& s : std::vector<TensorShape>{{0, 10}, {1, 1}, {7, 3}, {64, 10}, {3, 1000}}) {
    Tensor logits = Rand(s, -10.0f, 10.0f);
    if (logits.NumElements() > 0) logits.data<float>()[0] = 500.0f;
    ExpectGpuMatchesCpu("SparseSoftmaxCrossEntropyWithLogits",
                        {logits, RandInts<int32_t>({s.dim(0)}, 0, s.dim(1) - 1)}, {}, kReduction);
  }
  ExpectBothFail("SparseSoftmaxCrossEntropyWithLogits", {Rand({3, 4}), RandInts<int32_t>({4}, 0, 3)});
}

// A label out of range cannot be seen on the host without waiting for the
// device: the step's loss and backprop rows are NaN, and the node's next run
// reports the CPU's error.
TEST(GpuKernelTest, BadLabelIsReportedByTheNextRun) {
  SKIP_WITHOUT_GPU();
  Tensor logits = Rand({3, 5});
  Tensor bad = testing::IntTensor({3}, {2, 7, 0});
  Tensor good = testing::IntTensor({3}, {2, 4, 0});
  OpUnderTest t("SparseSoftmaxCrossEntropyWithLogits", {logits, bad}, {});
  ASSERT_TRUE(t.status().ok()) << t.status();
  KernelRun cpu = t.RunCpu({logits, bad});
  EXPECT_EQ(cpu.status.code(), absl::StatusCode::kInvalidArgument);
  GpuDevice* gpu = t.gpu();
  KernelRun first = t.RunGpu(ToDeviceAll(gpu, {logits, bad}), {});
  ASSERT_TRUE(first.status.ok()) << first.status;
  auto loss = gpu::ToHost(gpu, first.outputs[0]);
  auto backprop = gpu::ToHost(gpu, first.outputs[1]);
  ASSERT_TRUE(loss.ok() && backprop.ok());
  EXPECT_FALSE(std::isnan(loss->data<float>()[0]));
  EXPECT_TRUE(std::isnan(loss->data<float>()[1]));
  EXPECT_FALSE(std::isnan(loss->data<float>()[2]));
  for (int j = 0; j < 5; ++j) EXPECT_TRUE(std::isnan(backprop->data<float>()[5 + j]));
  KernelRun second = t.RunGpu(ToDeviceAll(gpu, {logits, good}), {});
  EXPECT_EQ(second.status.code(), absl::StatusCode::kInvalidArgument) << second.status;
  EXPECT_NE(second.status.message().find("label 7 in row 1 is outside the valid range [0, 5)"), std::string::npos)
      << second.status;
  KernelRun third = t.RunGpu(ToDeviceAll(gpu, {logits, good}), {});
  EXPECT_TRUE(third.status.ok()) << third.status;
}

TEST(GpuKernelTest, DropoutMasksAreTheCpus) {
  SKIP_WITHOUT_GPU();
  for (const TensorShape& s : std::vector<TensorShape>{{0}, {1}, {7}, {64, 128}, {100001}}) {
    for (float rate : {0.0f, 0.3f, 0.5f, 0.9f}) {
      for (int64_t step : {1, 2, 1000}) {
        ExpectGpuMatchesCpu("Dropout", {Rand(s)}, {Attr("rate", rate), Attr("seed", int64_t{7})}, kExact,
                            /*unknown_dims=*/false, step);
      }
    }
  }
}

// ---- Matrix products and windows -----------------------------------------------------

TEST(GpuKernelTest, MatMulEveryTranspose) {
  SKIP_WITHOUT_GPU();
  struct Mkn {
    int64_t m, k, n;
  };
  for (const Mkn& d : std::vector<Mkn>{{1, 1, 1}, {7, 5, 3}, {64, 784, 128}, {64, 128, 10}, {0, 5, 3}, {5, 0, 3},
                                       {5, 3, 0}, {33, 17, 65}}) {
    for (bool ta : {false, true}) {
      for (bool tb : {false, true}) {
        Tensor a = Rand(ta ? TensorShape{d.k, d.m} : TensorShape{d.m, d.k});
        Tensor b = Rand(tb ? TensorShape{d.n, d.k} : TensorShape{d.k, d.n});
        ExpectGpuMatchesCpu("MatMul", {a, b}, {Attr("transpose_a", ta), Attr("transpose_b", tb)}, kGemm);
      }
    }
  }
  ExpectBothFail("MatMul", {Rand({3, 4}), Rand({5, 2})});
}

// Sets a process-wide switch of the GPU window kernels (UseCudnn,
// CudnnAutotune) for a scope.
class ScopedSwitch {
 public:
  ScopedSwitch(bool (*get)(), void (*set)(bool), bool value) : set_(set), saved_(get()) { set_(value); }
  ~ScopedSwitch() { set_(saved_); }
  ScopedSwitch(const ScopedSwitch&) = delete;
  ScopedSwitch& operator=(const ScopedSwitch&) = delete;

 private:
  void (*const set_)(bool);
  const bool saved_;
};

// TensorFlow's padding of one dimension is symmetric (cuDNN can run it).
bool Symmetric(int64_t in, int64_t k, int64_t stride, Padding padding) {
  const WindowDim d = *ComputeWindow(in, k, stride, padding, "dim");
  return d.pad_before == d.pad_after;
}

struct ConvCase {
  int64_t n, h, w, cin, kh, kw, cout, stride;
  const char* padding;
};

TEST(GpuKernelTest, ConvolutionAndBackpropsOnBothPaths) {
  SKIP_WITHOUT_GPU();
  ScopedSwitch heuristics_only(CudnnAutotune, SetCudnnAutotune, false);  // cuDNN wherever it has an algorithm
  for (bool cudnn : {true, false}) {
    ScopedSwitch use(UseCudnn, SetUseCudnn, cudnn);
    SCOPED_TRACE(cudnn ? "cuDNN on" : "cuDNN off");
    for (const ConvCase& c : std::vector<ConvCase>{
             // Symmetric padding: cuDNN when it is on.
             {2, 5, 5, 3, 3, 3, 4, 1, "VALID"},
             {2, 8, 8, 3, 3, 3, 4, 1, "SAME"},   // 3x3 stride 1: one on each side
             {1, 9, 9, 2, 5, 5, 3, 1, "SAME"},   // 5x5: two on each side
             {2, 9, 9, 3, 3, 3, 4, 2, "VALID"},  // stride 2
             {2, 7, 7, 3, 3, 3, 4, 2, "SAME"},   // stride 2, total padding 2
             {1, 6, 6, 2, 2, 2, 3, 2, "SAME"},   // total padding 0
             {2, 9, 9, 3, 1, 1, 4, 2, "SAME"},   // 1x1 with stride
             {1, 6, 6, 1, 3, 3, 1, 1, "SAME"},   // one channel in and out
             {3, 5, 7, 1, 3, 3, 8, 1, "VALID"},  // one input channel, non-square input
             {64, 28, 28, 1, 3, 3, 16, 1, "SAME"},
             {64, 14, 14, 16, 3, 3, 32, 1, "SAME"},
             // Asymmetric SAME (one more after): the fallback, on both settings.
             {2, 8, 8, 3, 3, 3, 4, 2, "SAME"},
             {2, 4, 5, 3, 2, 3, 2, 1, "SAME"},  // rows only; non-square filter
             {1, 6, 6, 4, 4, 4, 2, 1, "SAME"},  // even window, stride 1
             {16, 14, 14, 8, 3, 3, 8, 2, "SAME"},
             // Pointwise: one GEMM on both settings.
             {3, 8, 8, 4, 1, 1, 5, 1, "VALID"},
             {1, 5, 5, 1, 1, 1, 1, 1, "SAME"},
             // Empty batch.
             {0, 5, 5, 3, 3, 3, 4, 1, "SAME"},
         }) {
      const ConvParams p{c.stride, c.padding[0] == 'S' ? Padding::kSame : Padding::kValid};
      const int64_t ho = ComputeWindow(c.h, c.kh, c.stride, p.padding, "h")->out;
      const int64_t wo = ComputeWindow(c.w, c.kw, c.stride, p.padding, "w")->out;
      const bool pointwise = c.kh == 1 && c.kw == 1 && c.stride == 1;  // no padding then either
      const bool via_cudnn = cudnn && c.n > 0 && !pointwise && Symmetric(c.h, c.kh, c.stride, p.padding) &&
                             Symmetric(c.w, c.kw, c.stride, p.padding);
      Tensor x = Rand({c.n, c.h, c.w, c.cin});
      Tensor f = Rand({c.kh, c.kw, c.cin, c.cout});
      Tensor g = Rand({c.n, ho, wo, c.cout});
      const AttrList attrs = {Attr("stride", c.stride), Attr("padding", std::string(c.padding))};
      const int64_t before = CudnnConvolutionCount();
      ExpectGpuMatchesCpu("Conv2D", {x, f}, attrs, kGemm);
      ExpectGpuMatchesCpu("Conv2DBackpropInput", {x, f, g}, attrs, kGemm);
      ExpectGpuMatchesCpu("Conv2DBackpropFilter", {x, f, g}, attrs, Tolerance{1e-3, 1e-4});
      EXPECT_EQ(CudnnConvolutionCount() - before, via_cudnn ? 3 : 0)
          << Describe("Conv2D", {x, f}) << " " << c.padding << " stride " << c.stride
          << (via_cudnn ? ": cuDNN found no acceptable algorithm (see the gpu log)" : ": cuDNN ran");
    }
    const AttrList attrs = {Attr("stride", int64_t{1}), Attr("padding", std::string("VALID"))};
    ExpectBothFail("Conv2D", {Rand({1, 5, 5, 3}), Rand({3, 3, 2, 4})}, attrs);
    ExpectBothFail("Conv2D", {Rand({1, 2, 2, 3}), Rand({3, 3, 3, 4})}, attrs);
    ExpectBothFail("Conv2DBackpropInput", {Rand({1, 5, 5, 3}), Rand({3, 3, 3, 4}), Rand({1, 3, 3, 5})}, attrs);
  }
}

// With autotuning (the default), each pass of a new shape is timed once,
// cuDNN against the fallback, and keeps its choice: later runs time
// nothing and take the same path, and both give the CPU's results. Shapes
// seen by no other test, since a shape keeps its first choice for the
// process's life.
TEST(GpuKernelTest, AutotunedConvolutionsKeepTheirPathAndMatchTheCpu) {
  SKIP_WITHOUT_GPU();
  ScopedSwitch use(UseCudnn, SetUseCudnn, true);
  ScopedSwitch autotune(CudnnAutotune, SetCudnnAutotune, true);
  for (const ConvCase& c : std::vector<ConvCase>{
           {3, 10, 10, 5, 3, 3, 6, 1, "SAME"},
           {2, 11, 11, 4, 5, 5, 7, 1, "SAME"},
           {5, 12, 12, 2, 3, 3, 3, 2, "VALID"},
           {32, 28, 28, 1, 3, 3, 16, 1, "SAME"},  // the example CNN's, at batch 32
           {32, 14, 14, 16, 3, 3, 32, 1, "SAME"},
       }) {
    const ConvParams p{c.stride, c.padding[0] == 'S' ? Padding::kSame : Padding::kValid};
    ASSERT_TRUE(Symmetric(c.h, c.kh, c.stride, p.padding) && Symmetric(c.w, c.kw, c.stride, p.padding));
    const int64_t ho = ComputeWindow(c.h, c.kh, c.stride, p.padding, "h")->out;
    const int64_t wo = ComputeWindow(c.w, c.kw, c.stride, p.padding, "w")->out;
    const AttrList attrs = {Attr("stride", c.stride), Attr("padding", std::string(c.padding))};
    int64_t via_cudnn[2] = {0, 0};
    for (int run = 0; run < 2; ++run) {
      SCOPED_TRACE(run == 0 ? "first use" : "second use");
      Tensor x = Rand({c.n, c.h, c.w, c.cin});
      Tensor f = Rand({c.kh, c.kw, c.cin, c.cout});
      Tensor g = Rand({c.n, ho, wo, c.cout});
      const int64_t timed_before = ConvolutionPathTimings();
      const int64_t cudnn_before = CudnnConvolutionCount();
      ExpectGpuMatchesCpu("Conv2D", {x, f}, attrs, kGemm);
      ExpectGpuMatchesCpu("Conv2DBackpropInput", {x, f, g}, attrs, kGemm);
      ExpectGpuMatchesCpu("Conv2DBackpropFilter", {x, f, g}, attrs, Tolerance{1e-3, 1e-4});
      via_cudnn[run] = CudnnConvolutionCount() - cudnn_before;
      EXPECT_EQ(ConvolutionPathTimings() - timed_before, run == 0 ? 3 : 0)
          << Describe("Conv2D", {x, f}) << ": each pass is timed on its first use only";
    }
    EXPECT_EQ(via_cudnn[1], via_cudnn[0]) << Describe("Conv2D", {Rand({c.n, c.h, c.w, c.cin})})
                                          << ": the second use took another path";
  }
}

// A warm convolution or pooling (same shapes again) takes its filter
// transpose, workspace and recomputed pooling output from the allocator's
// cache: no cudaMalloc.
TEST(GpuKernelTest, CudnnPathAllocatesNothingNewOnceWarm) {
  SKIP_WITHOUT_GPU();
  ScopedSwitch use(UseCudnn, SetUseCudnn, true);
  ScopedSwitch heuristics_only(CudnnAutotune, SetCudnnAutotune, false);  // cuDNN wherever it has an algorithm
  GpuDevice* gpu = gpu::TestGpu();
  struct Case {
    std::string op;
    std::vector<Tensor> inputs;
    AttrList attrs;
  };
  const AttrList conv = {Attr("stride", int64_t{1}), Attr("padding", std::string("SAME"))};
  const AttrList pool = {Attr("ksize", int64_t{3}), Attr("stride", int64_t{1}), Attr("padding", std::string("SAME"))};
  const std::vector<Case> cases = {
      {"Conv2D", {Rand({8, 12, 12, 6}), Rand({3, 3, 6, 10})}, conv},
      {"Conv2DBackpropInput", {Rand({8, 12, 12, 6}), Rand({3, 3, 6, 10}), Rand({8, 12, 12, 10})}, conv},
      {"Conv2DBackpropFilter", {Rand({8, 12, 12, 6}), Rand({3, 3, 6, 10}), Rand({8, 12, 12, 10})}, conv},
      {"MaxPool", {Rand({8, 12, 12, 6})}, pool},
      {"MaxPoolGrad", {Rand({8, 12, 12, 6}), Rand({8, 12, 12, 6}), Rand({8, 12, 12, 6})}, pool},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(Describe(c.op, c.inputs));
    OpUnderTest t(c.op, c.inputs, c.attrs);
    ASSERT_TRUE(t.status().ok()) << t.status();
    KernelRun cpu = t.RunCpu(c.inputs);
    ASSERT_TRUE(cpu.status.ok()) << cpu.status;
    const std::vector<Tensor> dev_in = ToDeviceAll(gpu, c.inputs);
    const int64_t cudnn_before = CudnnConvolutionCount() + CudnnPoolingCount();
    {
      KernelRun warm = t.RunGpu(dev_in, cpu.outputs);  // chooses the algorithm, fills the cache
      ASSERT_TRUE(warm.status.ok()) << warm.status;
    }
    const Allocator::Stats before = gpu->allocator()->GetStats();
    KernelRun again = t.RunGpu(dev_in, cpu.outputs);
    ASSERT_TRUE(again.status.ok()) << again.status;
    const Allocator::Stats after = gpu->allocator()->GetStats();
    EXPECT_EQ(after.system_allocs, before.system_allocs);
    EXPECT_EQ(CudnnConvolutionCount() + CudnnPoolingCount() - cudnn_before, 2) << "both runs went through cuDNN";
    auto host = gpu::ToHost(gpu, again.outputs[0]);
    ASSERT_TRUE(host.ok()) << host.status();
    ExpectMatches(cpu.outputs[0], *host, c.op == "Conv2DBackpropFilter" ? Tolerance{1e-3, 1e-4} : kGemm,
                  "second run");
  }
}

// No two elements equal, in about [-1, 1].
Tensor Distinct(const TensorShape& shape) {
  return testing::DistinctTensor(shape, NextSeed(), 2.0f / std::max<int64_t>(shape.num_elements(), 1));
}

// v + offset for every element.
Tensor Shifted(Tensor t, float offset) {
  for (float& v : t.flat<float>()) v += offset;
  return t;
}

// A ReLU's output: about half zeros (where a window of zeros ties), the
// rest distinct and positive.
Tensor ReluOf(Tensor t) {
  for (float& v : t.flat<float>()) v = std::max(v, 0.0f);
  return t;
}

// Where x <= 0, v is zeroed, as ReluGrad(v, x) does.
Tensor ReluGradOf(Tensor v, const Tensor& x) {
  const float* xp = x.data<float>();
  float* vp = v.data<float>();
  for (int64_t i = 0; i < v.NumElements(); ++i) vp[i] = xp[i] > 0.0f ? vp[i] : 0.0f;
  return v;
}

double SumOf(const Tensor& t) {
  double s = 0;
  for (float v : t.flat<float>()) s += v;
  return s;
}

struct PoolCase {
  int64_t n, h, w, c, k, stride;
  const char* padding;
};

const std::vector<PoolCase>& PoolCases() {
  static const auto* cases = new std::vector<PoolCase>{
      // Symmetric padding: cuDNN when it is on.
      {2, 8, 8, 3, 2, 2, "VALID"},
      {2, 7, 7, 3, 2, 2, "VALID"},  // a row and column left over
      {2, 8, 8, 5, 3, 1, "SAME"},   // overlapping windows, one on each side
      {1, 5, 5, 2, 3, 2, "SAME"},   // one on each side, stride 2
      {1, 9, 9, 1, 5, 1, "SAME"},   // two on each side, one channel
      {3, 9, 9, 4, 3, 2, "VALID"},
      {64, 28, 28, 16, 2, 2, "VALID"},
      // Asymmetric SAME: the CUDA kernels on both settings.
      {2, 7, 7, 3, 2, 2, "SAME"},
      {2, 8, 8, 3, 3, 2, "SAME"},
      {1, 6, 6, 1, 2, 1, "SAME"},
      // Empty batch.
      {0, 4, 4, 2, 2, 2, "VALID"},
  };
  return *cases;
}

TEST(GpuKernelTest, MaxPoolAndGradOnBothPaths) {
  SKIP_WITHOUT_GPU();
  for (bool cudnn : {true, false}) {
    ScopedSwitch use(UseCudnn, SetUseCudnn, cudnn);
    SCOPED_TRACE(cudnn ? "cuDNN on" : "cuDNN off");
    for (const PoolCase& c : PoolCases()) {
      const Padding pad = c.padding[0] == 'S' ? Padding::kSame : Padding::kValid;
      const int64_t ho = ComputeWindow(c.h, c.k, c.stride, pad, "h")->out;
      const int64_t wo = ComputeWindow(c.w, c.k, c.stride, pad, "w")->out;
      const bool via_cudnn =
          cudnn && c.n > 0 && Symmetric(c.h, c.k, c.stride, pad) && Symmetric(c.w, c.k, c.stride, pad);
      const AttrList attrs = {Attr("ksize", c.k), Attr("stride", c.stride), Attr("padding", std::string(c.padding))};
      const TensorShape xs{c.n, c.h, c.w, c.c}, ys{c.n, ho, wo, c.c};
      Tensor y(DType::kFloat32, ys);  // only its shape is read
      const int64_t before = CudnnPoolingCount();
      // Without ties every path routes the same way. All negative: padding
      // must never win a maximum.
      for (const Tensor& x : {Distinct(xs), Shifted(Distinct(xs), -2.0f)}) {
        ExpectGpuMatchesCpu("MaxPool", {x}, attrs, kExact);
        ExpectGpuMatchesCpu("MaxPoolGrad", {x, y, Rand(ys)}, attrs, kElementwise);
      }
      // After a ReLU, windows of zeros tie. Where the gradient of such a
      // window goes may differ (see gpu_matmul_conv_kernels.cc), but
      // ReluGrad then zeroes it wherever it went, so that must match.
      {
        Tensor x = ReluOf(Distinct(xs));
        ExpectGpuMatchesCpu("MaxPool", {x}, attrs, kExact);
        std::vector<Tensor> cpu, gpu;
        bool ok = false;
        RunOnBothDevices("MaxPoolGrad", {x, y, Rand(ys)}, attrs, false, 1, true, &cpu, &gpu, &ok);
        if (ok && !cpu.empty()) {
          ExpectMatches(ReluGradOf(cpu[0], x), ReluGradOf(gpu[0], x), kElementwise, "ReluGrad(MaxPoolGrad)");
        }
      }
      EXPECT_EQ(CudnnPoolingCount() - before, via_cudnn ? 6 : 0) << c.padding << " ksize " << c.k;
    }
    const AttrList attrs = {Attr("ksize", int64_t{2}), Attr("stride", int64_t{2}),
                            Attr("padding", std::string("VALID"))};
    ExpectBothFail("MaxPool", {Rand({1, 1, 4, 2})}, attrs);
    ExpectBothFail("MaxPoolGrad", {Rand({1, 4, 4, 2}), Rand({1, 2, 2, 2}), Rand({1, 2, 3, 2})}, attrs);
  }
}

// Many ties (values from {-2, -1, 0, 1}). The CUDA kernels route each
// window's gradient to its first maximum, as the CPU does. cuDNN picks one
// of the tied positions its own way: the values it routes must still add up
// to the gradient's total, each window's gradient going to exactly one place.
TEST(GpuKernelTest, MaxPoolGradTies) {
  SKIP_WITHOUT_GPU();
  for (bool cudnn : {false, true}) {
    ScopedSwitch use(UseCudnn, SetUseCudnn, cudnn);
    SCOPED_TRACE(cudnn ? "cuDNN on" : "cuDNN off");
    for (const PoolCase& c : PoolCases()) {
      const Padding pad = c.padding[0] == 'S' ? Padding::kSame : Padding::kValid;
      const int64_t ho = ComputeWindow(c.h, c.k, c.stride, pad, "h")->out;
      const int64_t wo = ComputeWindow(c.w, c.k, c.stride, pad, "w")->out;
      const bool first_maximum =
          !cudnn || !(Symmetric(c.h, c.k, c.stride, pad) && Symmetric(c.w, c.k, c.stride, pad));
      const AttrList attrs = {Attr("ksize", c.k), Attr("stride", c.stride), Attr("padding", std::string(c.padding))};
      const TensorShape xs{c.n, c.h, c.w, c.c}, ys{c.n, ho, wo, c.c};
      Tensor x = RandSteps(xs, -2, 1);
      Tensor y(DType::kFloat32, ys);
      // Gradients in steps of 1/8: their sums are exact in float.
      Tensor g = RandSteps(ys, -8, 8);
      for (float& v : g.flat<float>()) v /= 8.0f;
      ExpectGpuMatchesCpu("MaxPool", {x}, attrs, kExact);
      if (first_maximum) {
        ExpectGpuMatchesCpu("MaxPoolGrad", {x, y, g}, attrs, kExact);
        continue;
      }
      std::vector<Tensor> cpu, gpu;
      bool ok = false;
      RunOnBothDevices("MaxPoolGrad", {x, y, g}, attrs, false, 1, true, &cpu, &gpu, &ok);
      if (!ok || cpu.empty()) continue;
      EXPECT_EQ(SumOf(gpu[0]), SumOf(g)) << c.padding << " ksize " << c.k << " stride " << c.stride;
      EXPECT_EQ(SumOf(cpu[0]), SumOf(g));
    }
  }
}

// ---- Normalisation and global pooling ------------------------------------------------

// Dense layers' batches (one block per channel tile finishes the op) and
// images' (partial sums per chunk of rows, combined), odd channel counts and
// a single channel or row.
const std::vector<TensorShape>& NormShapes() {
  static const auto* shapes = new std::vector<TensorShape>{
      {1, 5}, {7, 3}, {64, 256}, {300, 33}, {5000, 1}, {2, 5, 5, 16}, {3, 7, 9, 1}, {4, 6, 6, 48}, {64, 28, 28, 16}};
  return *shapes;
}

double RowsOf(const TensorShape& s) {
  return static_cast<double>(s.num_elements()) / std::max<int64_t>(1, s.dim(s.rank() - 1));
}

TEST(GpuKernelTest, BatchNormTrainingGradAndInference) {
  SKIP_WITHOUT_GPU();
  const AttrList eps = {Attr("epsilon", 1e-3f)};
  for (const TensorShape& s : NormShapes()) {
    const TensorShape c{s.dim(s.rank() - 1)};
    // Both devices sum in double: the statistics agree closely however
    // many rows there are, and dgamma and dbeta to a float sum's rounding.
    const Tolerance sums = SumTolerance(RowsOf(s), 1e-9);
    Tensor x = Rand(s, -2.0f, 2.0f), gamma = Rand(c, 0.5f, 2.0f), beta = Rand(c);
    ExpectGpuMatchesCpu("BatchNorm", {x, gamma, beta}, eps, sums);
    // An offset that E[x^2] - E[x]^2 in float would lose; a mean one ulp
    // apart moves y by about ulp(100) gamma inv_std.
    ExpectGpuMatchesCpu("BatchNorm", {Shifted(x.DeepCopy(), 100.0f), gamma, beta}, eps, Tolerance{1e-4, 1e-4});
    ExpectGpuMatchesCpu("BatchNormGrad", {Rand(s), x, gamma, Rand(c, -0.1f, 0.1f), Rand(c, 0.5f, 2.0f)}, {}, sums);
    ExpectGpuMatchesCpu("BatchNormInference", {x, gamma, beta, Rand(c), Rand(c, 0.0f, 2.0f)}, eps, kElementwise);
  }
  // No rows: the gradient's sums are zero, and inference has nothing to do.
  ExpectGpuMatchesCpu("BatchNormGrad", {Rand({0, 5}), Rand({0, 5}), Rand({5}), Rand({5}), Rand({5})}, {}, kExact);
  ExpectGpuMatchesCpu("BatchNormInference", {Rand({0, 3, 3, 5}), Rand({5}), Rand({5}), Rand({5}), Rand({5})}, eps,
                      kExact);
  ExpectBothFail("BatchNorm", {Rand({4, 3}), Rand({2}), Rand({3})}, eps);  // gamma of the wrong length
  ExpectBothFail("BatchNorm", {Rand({0, 3}), Rand({3}), Rand({3})}, eps);  // an empty batch
  ExpectBothFail("BatchNorm", {Rand({2, 0, 4, 3}), Rand({3}), Rand({3})}, eps);
  ExpectBothFail("BatchNormGrad", {Rand({4, 3}), Rand({4, 3}), Rand({4}), Rand({3}), Rand({3})});
  ExpectBothFail("BatchNormGrad", {Rand({3, 4}), Rand({4, 3}), Rand({3}), Rand({3}), Rand({3})});
  ExpectBothFail("BatchNormInference", {Rand({4, 3}), Rand({3}), Rand({3}), Rand({3}), Rand({2})}, eps);
}

// Per-channel sums of x and of its squares, in double, stored as float: what
// BatchNormSums gives and CrossReplicaSum passes on with one replica.
void ChannelSums(const Tensor& x, Tensor* sum, Tensor* sum_sq) {
  const int64_t nc = x.shape().dim(x.shape().rank() - 1);
  std::vector<double> s(nc), ss(nc);
  const float* xp = x.data<float>();
  for (int64_t i = 0; nc > 0 && i < x.NumElements(); ++i) {
    s[i % nc] += xp[i];
    ss[i % nc] += static_cast<double>(xp[i]) * xp[i];
  }
  *sum = Tensor(DType::kFloat32, TensorShape{nc});
  *sum_sq = Tensor(DType::kFloat32, TensorShape{nc});
  for (int64_t c = 0; c < nc; ++c) {
    sum->data<float>()[c] = static_cast<float>(s[c]);
    sum_sq->data<float>()[c] = static_cast<float>(ss[c]);
  }
}

// Synchronised batch norm as one replica runs it: BatchNormFromSums gets the
// sums of the x it normalises (so the variance is positive) and its row
// count, 1 for a lone row (the biased variance). Large batches take the
// chunked sums.
TEST(GpuKernelTest, SyncBatchNormSumsAndFromSums) {
  SKIP_WITHOUT_GPU();
  const AttrList eps = {Attr("epsilon", 1e-3f)};
  for (const TensorShape& s : NormShapes()) {
    const TensorShape c{s.dim(s.rank() - 1)};
    // Both devices sum in double: the sums agree to a float's rounding.
    const Tolerance sums = SumTolerance(RowsOf(s), 1e-9);
    Tensor x = Rand(s, -2.0f, 2.0f), gamma = Rand(c, 0.5f, 2.0f), beta = Rand(c);
    ExpectGpuMatchesCpu("BatchNormSums", {x}, {}, sums);
    ExpectGpuMatchesCpu("BatchNormSumsGrad", {x, Rand(c), Rand(c)}, {}, kElementwise);
    Tensor sum, sum_sq;
    ChannelSums(x, &sum, &sum_sq);
    const Tensor count = Tensor::Scalar(static_cast<float>(RowsOf(s)));
    ExpectGpuMatchesCpu("BatchNormFromSums", {x, gamma, beta, sum, sum_sq, count}, eps, kReduction);
    ExpectGpuMatchesCpu("BatchNormFromSumsGrad",
                        {Rand(s), x, gamma, Rand(c, -0.1f, 0.1f), Rand(c, 0.5f, 2.0f), count}, {}, sums);
  }
  // No rows on this replica: zero sums and count, statistics from the other
  // replicas' sums, and zero sums in the gradient.
  ExpectGpuMatchesCpu("BatchNormSums", {Rand({0, 5})}, {}, kExact);
  ExpectGpuMatchesCpu("BatchNormSums", {Rand({0, 3, 3, 5})}, {}, kExact);
  const Tensor four = Tensor::Scalar(4.0f);
  ExpectGpuMatchesCpu("BatchNormFromSums",
                      {Rand({0, 5}), Rand({5}, 0.5f, 2.0f), Rand({5}), Rand({5}), Rand({5}, 1.0f, 2.0f), four}, eps,
                      kReduction);
  ExpectGpuMatchesCpu("BatchNormFromSumsGrad",
                      {Rand({0, 5}), Rand({0, 5}), Rand({5}), Rand({5}), Rand({5}, 0.5f, 2.0f), four}, {}, kExact);
  // gamma of the wrong length, g_sum_squares of the wrong length, dy not x's shape.
  ExpectBothFail("BatchNormFromSums", {Rand({4, 3}), Rand({2}), Rand({3}), Rand({3}), Rand({3}), four}, eps);
  ExpectBothFail("BatchNormSumsGrad", {Rand({4, 3}), Rand({3}), Rand({4})});
  ExpectBothFail("BatchNormFromSumsGrad", {Rand({3, 4}), Rand({4, 3}), Rand({3}), Rand({3}), Rand({3}), four});
}

// The GPU cannot refuse a count below 1 without reading it on the host
// (the CPU does): its statistics are NaN. And the chunked sums of a large
// batch, added without atomics, are the same on every run.
TEST(GpuKernelTest, SyncBatchNormNaNForNoCountAndDeterministicSums) {
  SKIP_WITHOUT_GPU();
  const Tensor x = Rand({4, 3});
  const std::vector<Tensor> in = {x, Rand({3}), Rand({3}), Rand({3}), Rand({3}, 1.0f, 2.0f), Tensor::Scalar(0.0f)};
  OpUnderTest from_sums("BatchNormFromSums", in, {Attr("epsilon", 1e-3f)});
  ASSERT_TRUE(from_sums.status().ok()) << from_sums.status();
  EXPECT_EQ(from_sums.RunCpu(in).status.code(), absl::StatusCode::kInvalidArgument);
  KernelRun dev = from_sums.RunGpu(ToDeviceAll(from_sums.gpu(), in), {});
  ASSERT_TRUE(dev.status.ok()) << dev.status;
  for (const Tensor& out : dev.outputs) {
    auto host = gpu::ToHost(from_sums.gpu(), out);
    ASSERT_TRUE(host.ok()) << host.status();
    for (float v : host->flat<float>()) EXPECT_TRUE(std::isnan(v));
  }
  const std::vector<Tensor> big = {Rand({100000, 64})};
  OpUnderTest sums("BatchNormSums", big, {});
  ASSERT_TRUE(sums.status().ok()) << sums.status();
  KernelRun first = sums.RunGpu(ToDeviceAll(sums.gpu(), big), {});
  KernelRun second = sums.RunGpu(ToDeviceAll(sums.gpu(), big), {});
  ASSERT_TRUE(first.status.ok() && second.status.ok()) << first.status << second.status;
  for (int i = 0; i < 3; ++i) {
    auto a = gpu::ToHost(sums.gpu(), first.outputs[i]);
    auto b = gpu::ToHost(sums.gpu(), second.outputs[i]);
    ASSERT_TRUE(a.ok() && b.ok());
    ExpectMatches(*a, *b, kExact, absl::StrCat("BatchNormSums output ", i, ", second run"));
  }
}

// Wide rows (a warp strides over them), narrow ones (most lanes idle), one
// channel, and many rows, whose dgamma and dbeta go through chunk partials.
TEST(GpuKernelTest, LayerNormAndGrad) {
  SKIP_WITHOUT_GPU();
  const AttrList eps = {Attr("epsilon", 1e-3f)};
  for (const TensorShape& s : std::vector<TensorShape>{{1, 5}, {7, 3}, {64, 256}, {300, 33}, {5000, 1}, {3, 1000},
                                                        {2, 5, 5, 16}, {4, 6, 6, 48}, {64, 28, 28, 16}}) {
    const TensorShape c{s.dim(s.rank() - 1)};
    // Both devices sum each row in double: the statistics agree closely;
    // dgamma and dbeta, summed over the rows in double, to a float sum's
    // rounding.
    const Tolerance sums = SumTolerance(RowsOf(s), 1e-9);
    Tensor x = Rand(s, -2.0f, 2.0f), gamma = Rand(c, 0.5f, 2.0f), beta = Rand(c);
    ExpectGpuMatchesCpu("LayerNorm", {x, gamma, beta}, eps, Tolerance{1e-5, 1e-5});
    // An offset that E[x^2] - E[x]^2 in float would lose; a mean one ulp
    // apart moves y by about ulp(1000) gamma inv_std.
    Tensor shifted = Shifted(x.DeepCopy(), 1000.0f);
    ExpectGpuMatchesCpu("LayerNorm", {shifted, gamma, beta}, eps, Tolerance{5e-4, 1e-4});
    const TensorShape rows{static_cast<int64_t>(RowsOf(s))};
    ExpectGpuMatchesCpu("LayerNormGrad", {Rand(s), x, gamma, Rand(rows, -0.1f, 0.1f), Rand(rows, 0.5f, 2.0f)}, {},
                        sums);
  }
  // No rows: empty outputs, and the gradient's sums are zero.
  ExpectGpuMatchesCpu("LayerNorm", {Rand({0, 3, 3, 5}), Rand({5}), Rand({5})}, eps, kExact);
  ExpectGpuMatchesCpu("LayerNormGrad", {Rand({0, 5}), Rand({0, 5}), Rand({5}), Rand({0}), Rand({0})}, {}, kExact);
  ExpectBothFail("LayerNorm", {Rand({4, 3}), Rand({2}), Rand({3})}, eps);  // gamma of the wrong length
  ExpectBothFail("LayerNorm", {Rand({4, 0}), Rand({0}), Rand({0})}, eps);  // rows of no values
  ExpectBothFail("LayerNormGrad", {Rand({4, 3}), Rand({4, 3}), Rand({3}), Rand({3}), Rand({4})});  // mean
  ExpectBothFail("LayerNormGrad", {Rand({3, 4}), Rand({4, 3}), Rand({3}), Rand({4}), Rand({4})});  // dy
}

// One head and several, causal and not: a lone position, odd sequence
// lengths and head widths, and a batch of longer sequences. The products
// are cuBLAS's on the GPU and Eigen's on the CPU, summed in other orders.
TEST(GpuKernelTest, AttentionAndGrad) {
  SKIP_WITHOUT_GPU();
  struct Case {
    int64_t batch, seq, width, heads;
  };
  for (const Case& c : std::vector<Case>{{1, 1, 8, 2}, {2, 5, 6, 1}, {2, 5, 6, 3}, {3, 33, 64, 4}, {4, 128, 64, 2}}) {
    const TensorShape s{c.batch, c.seq, c.width};
    const TensorShape probs{c.batch, c.heads, c.seq, c.seq};
    for (bool causal : {false, true}) {
      const AttrList attrs = {Attr("num_heads", c.heads), Attr("causal", causal)};
      ExpectGpuMatchesCpu("Attention", {Rand(s, -2.0f, 2.0f), Rand(s, -2.0f, 2.0f), Rand(s)}, attrs, kGemm);
      // Scores in the hundreds: the softmax must subtract each row's maximum.
      ExpectGpuMatchesCpu("Attention", {Rand(s, -20.0f, 20.0f), Rand(s, -20.0f, 20.0f), Rand(s)}, attrs,
                          Tolerance{1e-3, 1e-3});
    }
    ExpectGpuMatchesCpu("AttentionGrad", {Rand(s), Rand(s), Rand(s), Rand(s), Rand(probs, 0.0f, 1.0f)},
                        {Attr("num_heads", c.heads)}, Tolerance{2e-4, 1e-4});
  }
  // No examples or no positions: empty outputs.
  const AttrList two = {Attr("num_heads", 2)};
  for (const TensorShape& s : {TensorShape{0, 3, 4}, TensorShape{2, 0, 4}}) {
    ExpectGpuMatchesCpu("Attention", {Rand(s), Rand(s), Rand(s)}, two, kExact);
    const TensorShape probs{s.dim(0), 2, s.dim(1), s.dim(1)};
    ExpectGpuMatchesCpu("AttentionGrad", {Rand(s), Rand(s), Rand(s), Rand(s), Rand(probs)}, two, kExact);
  }
  ExpectBothFail("Attention", {Rand({2, 3, 4}), Rand({2, 3, 4}), Rand({2, 3, 6})}, two);       // v's shape
  ExpectBothFail("Attention", {Rand({2, 3, 5}), Rand({2, 3, 5}), Rand({2, 3, 5})}, two);       // 2 does not divide 5
  ExpectBothFail("AttentionGrad", {Rand({2, 3, 4}), Rand({2, 3, 4}), Rand({2, 3, 4}), Rand({2, 3, 4}),
                                   Rand({2, 2, 3, 2})}, two);                                  // probs' shape
}

// LSTMGrad's h, c and gates come from the CPU's LSTM on the same operands,
// so the backward pass sees a real forward pass. Odd sizes, a single step,
// no features, no examples, and a batch of longer sequences whose
// gradients sum over 640 rows (BiasAddGrad's two-pass path). Weights are
// small enough that the gates do not saturate; the products are cuBLAS's
// on the GPU and Eigen's on the CPU, summed in other orders, and their
// differences carry through the steps.
TEST(GpuKernelTest, LstmAndGrad) {
  SKIP_WITHOUT_GPU();
  struct Case {
    int64_t batch, steps, features, units;
  };
  for (const Case& c : std::vector<Case>{{2, 3, 4, 5}, {1, 1, 3, 2}, {4, 7, 6, 8}, {0, 2, 3, 4}, {3, 2, 0, 3},
                                         {16, 40, 12, 32}}) {
    SCOPED_TRACE(absl::StrCat("B=", c.batch, " T=", c.steps, " F=", c.features, " H=", c.units));
    const TensorShape state{c.batch, c.steps, c.units};
    const int64_t G = 4 * c.units;
    const std::vector<Tensor> in = {Rand({c.batch, c.steps, c.features}), Rand({c.features, G}, -0.5f, 0.5f),
                                    Rand({c.units, G}, -0.5f, 0.5f), Rand({G})};
    for (bool sequences : {true, false}) {
      const AttrList attrs = {Attr("return_sequences", sequences)};
      ExpectGpuMatchesCpu("LSTM", in, attrs, Tolerance{1e-4, 1e-4});
      OpUnderTest forward("LSTM", in, attrs);
      ASSERT_TRUE(forward.status().ok()) << forward.status();
      KernelRun saved = forward.RunCpu(in);
      ASSERT_TRUE(saved.status.ok()) << saved.status;
      const Tensor dy = Rand(sequences ? state : TensorShape{c.batch, c.units});
      std::vector<Tensor> grad_in = {dy};
      grad_in.insert(grad_in.end(), in.begin(), in.end());
      grad_in.insert(grad_in.end(), saved.outputs.begin() + 1, saved.outputs.end());  // h, c, gates
      const double rows = static_cast<double>(c.batch * c.steps);
      ExpectGpuMatchesCpu("LSTMGrad", grad_in, attrs, Tolerance{2e-4 + 2e-6 * rows, 2e-4});
    }
  }
  const std::vector<Tensor> bad = {Rand({2, 3, 4}), Rand({5, 20}), Rand({5, 20}), Rand({20})};  // kernel [5, 20]
  ExpectBothFail("LSTM", bad);
  const std::vector<Tensor> good = {Rand({2, 3, 4}), Rand({4, 20}), Rand({5, 20}), Rand({20})};
  ExpectBothFail("LSTM", {good[0], good[1], Rand({5, 16}), good[3]});  // recurrent_kernel [5, 16]
  const TensorShape state{2, 3, 5};
  ExpectBothFail("LSTMGrad", {Rand(state), good[0], bad[1], good[2], good[3], Rand(state), Rand(state),
                              Rand({2, 3, 20}, 0.0f, 1.0f)});  // kernel [5, 20]
  ExpectBothFail("LSTMGrad", {Rand(state), good[0], good[1], good[2], good[3], Rand(state), Rand(state),
                              Rand({2, 3, 16}, 0.0f, 1.0f)});  // gates [2, 3, 16]
  ExpectBothFail("LSTMGrad", {Rand({2, 4}), good[0], good[1], good[2], good[3], Rand(state), Rand(state),
                              Rand({2, 3, 20}, 0.0f, 1.0f)},
                 {Attr("return_sequences", false)});  // dy [2, 4] for y [2, 5]
}

// GRUGrad's h, gates and hn come from the CPU's GRU on the same operands,
// as LstmAndGrad's; the same sizes, including 640 rows summed into each of
// dbias's two rows. The bias is [2, 3H]: row 0 the input side's, row 1 the
// recurrent side's, which r scales in the n block.
TEST(GpuKernelTest, GruAndGrad) {
  SKIP_WITHOUT_GPU();
  struct Case {
    int64_t batch, steps, features, units;
  };
  for (const Case& c : std::vector<Case>{{2, 3, 4, 5}, {1, 1, 3, 2}, {4, 7, 6, 8}, {0, 2, 3, 4}, {3, 2, 0, 3},
                                         {16, 40, 12, 32}}) {
    SCOPED_TRACE(absl::StrCat("B=", c.batch, " T=", c.steps, " F=", c.features, " H=", c.units));
    const TensorShape state{c.batch, c.steps, c.units};
    const int64_t G = 3 * c.units;
    const std::vector<Tensor> in = {Rand({c.batch, c.steps, c.features}), Rand({c.features, G}, -0.5f, 0.5f),
                                    Rand({c.units, G}, -0.5f, 0.5f), Rand({2, G})};
    for (bool sequences : {true, false}) {
      const AttrList attrs = {Attr("return_sequences", sequences)};
      ExpectGpuMatchesCpu("GRU", in, attrs, Tolerance{1e-4, 1e-4});
      OpUnderTest forward("GRU", in, attrs);
      ASSERT_TRUE(forward.status().ok()) << forward.status();
      KernelRun saved = forward.RunCpu(in);
      ASSERT_TRUE(saved.status.ok()) << saved.status;
      const Tensor dy = Rand(sequences ? state : TensorShape{c.batch, c.units});
      std::vector<Tensor> grad_in = {dy};
      grad_in.insert(grad_in.end(), in.begin(), in.end());
      grad_in.insert(grad_in.end(), saved.outputs.begin() + 1, saved.outputs.end());  // h, gates, hn
      const double rows = static_cast<double>(c.batch * c.steps);
      ExpectGpuMatchesCpu("GRUGrad", grad_in, attrs, Tolerance{2e-4 + 2e-6 * rows, 2e-4});
    }
  }
  const std::vector<Tensor> good = {Rand({2, 3, 4}), Rand({4, 15}), Rand({5, 15}), Rand({2, 15})};
  // An LSTM's [3H] bias is the graph's to refuse (its rank); a one-row [1, 3H]
  // one has the rank and only the kernels see it.
  ExpectBothFail("GRU", {good[0], good[1], good[2], Rand({1, 15})});        // bias [1, 15]
  ExpectBothFail("GRU", {good[0], Rand({5, 15}), good[2], good[3]});        // kernel [5, 15]
  ExpectBothFail("GRU", {good[0], good[1], Rand({5, 20}), Rand({2, 20})});  // recurrent_kernel [5, 20]
  const TensorShape state{2, 3, 5};
  const Tensor gates = Rand({2, 3, 15}, 0.0f, 1.0f);
  ExpectBothFail("GRUGrad", {Rand(state), good[0], good[1], good[2], Rand({1, 15}), Rand(state), gates,
                             Rand(state)});  // bias [1, 15]
  ExpectBothFail("GRUGrad", {Rand(state), good[0], Rand({5, 15}), good[2], good[3], Rand(state), gates,
                             Rand(state)});  // kernel [5, 15]
  ExpectBothFail("GRUGrad", {Rand(state), good[0], good[1], good[2], good[3], Rand(state),
                             Rand({2, 3, 20}, 0.0f, 1.0f), Rand(state)});  // gates [2, 3, 20]
  ExpectBothFail("GRUGrad", {Rand(state), good[0], good[1], good[2], good[3], Rand(state), gates,
                             Rand({2, 3, 4})});  // hn [2, 3, 4]
  ExpectBothFail("GRUGrad", {Rand({2, 4}), good[0], good[1], good[2], good[3], Rand(state), gates, Rand(state)},
                 {Attr("return_sequences", false)});  // dy [2, 4] for y [2, 5]
}

// Lookups of float and int32 ids (a row each, rows repeated when the table
// is small), and the scatter-add of their gradient: atomicAdd on the GPU,
// in id order on the CPU, so repeated rows' sums agree to rounding.
TEST(GpuKernelTest, EmbeddingAndGrad) {
  SKIP_WITHOUT_GPU();
  struct Case {
    TensorShape ids;
    int64_t rows, width;
  };
  for (const Case& c : std::vector<Case>{{{0}, 4, 3},
                                         {{1}, 1, 1},
                                         {{7}, 3, 5},
                                         {{4, 16}, 50, 8},
                                         {{3, 5, 2}, 2, 33},
                                         {{64, 256}, 65, 64},
                                         {{8, 128}, 30000, 16}}) {
    Tensor params = Rand({c.rows, c.width});
    TensorShape out = c.ids;
    out.AddDim(c.width);
    const Tolerance sums = SumTolerance(static_cast<double>(c.ids.num_elements()));
    for (const Tensor& ids : {RandSteps(c.ids, 0, static_cast<int>(c.rows - 1)),
                              RandInts<int32_t>(c.ids, 0, c.rows - 1)}) {
      ExpectGpuMatchesCpu("Embedding", {params, ids}, {}, kExact);
      ExpectGpuMatchesCpu("EmbeddingGrad", {ids, Rand(out), params}, {}, sums);
    }
  }
  // g's shape is not ids' and a row: only the kernels see it.
  ExpectBothFail("EmbeddingGrad", {RandSteps({2}, 0, 2), Rand({2, 3}), Rand({3, 2})});
}

// A bad id cannot be seen on the host without waiting for the device: the
// step's rows for it are NaN (its gradient is left out), and the node's
// next run reports the CPU's error with the id's flat position.
TEST(GpuKernelTest, BadIdIsReportedByTheNextRun) {
  SKIP_WITHOUT_GPU();
  Tensor params = Rand({5, 4});
  Tensor bad = testing::FloatTensor({3}, {2, 7.5f, 0});
  Tensor good = testing::FloatTensor({3}, {2, 4, 0});
  OpUnderTest t("Embedding", {params, bad}, {});
  ASSERT_TRUE(t.status().ok()) << t.status();
  KernelRun cpu = t.RunCpu({params, bad});
  EXPECT_EQ(cpu.status.code(), absl::StatusCode::kInvalidArgument);
  GpuDevice* gpu = t.gpu();
  KernelRun first = t.RunGpu(ToDeviceAll(gpu, {params, bad}), {});
  ASSERT_TRUE(first.status.ok()) << first.status;
  auto rows = gpu::ToHost(gpu, first.outputs[0]);
  ASSERT_TRUE(rows.ok()) << rows.status();
  for (int j = 0; j < 4; ++j) {
    EXPECT_EQ(rows->data<float>()[j], params.data<float>()[2 * 4 + j]);
    EXPECT_TRUE(std::isnan(rows->data<float>()[4 + j]));
  }
  KernelRun second = t.RunGpu(ToDeviceAll(gpu, {params, good}), {});
  EXPECT_EQ(second.status.code(), absl::StatusCode::kInvalidArgument) << second.status;
  EXPECT_NE(second.status.message().find("(flat index 1) is 7.5: an id must be a whole number in [0, 5)"),
            std::string::npos)
      << second.status;
  KernelRun third = t.RunGpu(ToDeviceAll(gpu, {params, good}), {});
  EXPECT_TRUE(third.status.ok()) << third.status;

  Tensor bad_ints = testing::IntTensor({2, 2}, {0, 1, 1, -4});
  OpUnderTest grad("EmbeddingGrad", {bad_ints, Rand({2, 2, 4}), params}, {});
  ASSERT_TRUE(grad.status().ok()) << grad.status();
  KernelRun g1 = grad.RunGpu(ToDeviceAll(gpu, {bad_ints, Rand({2, 2, 4}), params}), {});
  ASSERT_TRUE(g1.status.ok()) << g1.status;
  KernelRun g2 = grad.RunGpu(ToDeviceAll(gpu, {bad_ints, Rand({2, 2, 4}), params}), {});
  EXPECT_NE(g2.status.message().find("ids (flat index 3) is -4"), std::string::npos) << g2.status;
}

TEST(GpuKernelTest, GlobalAvgPoolAndGrad) {
  SKIP_WITHOUT_GPU();
  for (const TensorShape& s : std::vector<TensorShape>{
           {1, 1, 1, 1}, {2, 3, 3, 5}, {3, 7, 7, 33}, {64, 7, 7, 512}, {2, 56, 56, 3}, {64, 28, 28, 16}, {0, 4, 4, 3},
           {2, 3, 3, 0}}) {
    ExpectGpuMatchesCpu("GlobalAvgPool", {Rand(s)}, {}, kReduction);
    ExpectGpuMatchesCpu("GlobalAvgPoolGrad", {Rand(s), Rand({s.dim(0), s.dim(3)})}, {}, kExact);
  }
  ExpectBothFail("GlobalAvgPool", {Rand({2, 0, 3, 4})});
  ExpectBothFail("GlobalAvgPoolGrad", {Rand({2, 3, 3, 4}), Rand({2, 5})});
  ExpectBothFail("GlobalAvgPoolGrad", {Rand({2, 3, 3, 4}), Rand({3, 4})});
}

// ---- Array and state ops -------------------------------------------------------------

TEST(GpuKernelTest, ReshapesAndIdentityShareTheBuffer) {
  SKIP_WITHOUT_GPU();
  ExpectGpuMatchesCpu("Reshape", {Rand({6, 4})}, {Attr("shape", std::vector<int64_t>{-1, 8})}, kExact);
  ExpectGpuMatchesCpu("Reshape", {Rand({0, 4})}, {Attr("shape", std::vector<int64_t>{-1, 4})}, kExact);
  ExpectGpuMatchesCpu("ReshapeLike", {Rand({6, 4}), Rand({3, 8})}, {}, kExact);
  ExpectGpuMatchesCpu("Identity", {RandInts<int32_t>({5}, 0, 9)}, {}, kExact);
  ExpectBothFail("Reshape", {Rand({5, 3})}, {Attr("shape", std::vector<int64_t>{-1, 4})});
  ExpectBothFail("ReshapeLike", {Rand({5, 3}), Rand({4, 4})});
}

TEST(GpuKernelTest, ConcatAndSliceRows) {
  SKIP_WITHOUT_GPU();
  ExpectGpuMatchesCpu("ConcatRows", {Rand({2, 3}), Rand({0, 3}), Rand({5, 3})}, {}, kExact);
  ExpectGpuMatchesCpu("ConcatRows", {RandInts<int32_t>({4}, 0, 9), RandInts<int32_t>({3}, 0, 9)}, {}, kExact);
  ExpectGpuMatchesCpu("ConcatRows", {Rand({7, 2, 3})}, {}, kExact);
  for (int64_t begin : {0, 3, 9}) {
    for (int64_t size : {0, 1, 1}) {
      ExpectGpuMatchesCpu("SliceRows", {Rand({10, 3, 2})}, {Attr("begin", begin), Attr("size", size)}, kExact);
    }
  }
  ExpectBothFail("SliceRows", {Rand({4, 3})}, {Attr("begin", int64_t{3}), Attr("size", int64_t{2})});
  for (int64_t index : {0, 2}) {
    const AttrList attrs = {Attr("index", index), Attr("count", int64_t{3})};
    ExpectGpuMatchesCpu("MicroBatch", {Rand({6, 2, 3})}, attrs, kExact);
    ExpectGpuMatchesCpu("MicroBatch", {RandInts<int32_t>({9}, 0, 9)}, attrs, kExact);
  }
  ExpectBothFail("MicroBatch", {Rand({4, 3})}, {Attr("index", int64_t{0}), Attr("count", int64_t{3})});
}

TEST(GpuKernelTest, ConstIsCopiedToTheDevice) {
  SKIP_WITHOUT_GPU();
  for (const Tensor& v : {Rand({3, 4}), Rand({0}), RandInts<int64_t>({5}, -9, 9)}) {
    ExpectGpuMatchesCpu("Const", {}, {Attr("value", v)}, kExact, false, 1, /*check_poison=*/false);
  }
}

TEST(GpuKernelTest, VariablesStartWithTheCpusValues) {
  SKIP_WITHOUT_GPU();
  struct VarCase {
    std::string initializer;
    TensorShape shape;
    AttrList extra;
  };
  const std::vector<VarCase> cases = {
      {"zeros", {7}, {}},
      {"ones", {3, 4}, {}},
      {"constant", {5}, {Attr("init_value", 0.25f)}},
      {"glorot_uniform", {784, 128}, {}},
      {"he_normal", {3, 3, 1, 16}, {}},
      {"glorot_uniform", {10, 6}, {Attr("shared_name", std::string("shared/w"))}},
      {"he_normal", {4, 6}, {Attr("init_name", std::string("other"))}},
      // A row shard of a [10, 6] variable: rows [3, 7) of its values.
      {"glorot_uniform", {4, 6}, {Attr("init_shape", TensorShape{10, 6}), Attr("row_offset", int64_t{3})}},
      {"zeros", {0, 3}, {}},
  };
  for (const VarCase& c : cases) {
    AttrList attrs = {Attr("dtype", DType::kFloat32), Attr("shape", c.shape), Attr("initializer", c.initializer),
                      Attr("seed", int64_t{42})};
    attrs.insert(attrs.end(), c.extra.begin(), c.extra.end());
    SCOPED_TRACE(c.initializer + c.shape.DebugString());
    OpUnderTest t("Variable", {}, attrs);
    ASSERT_TRUE(t.status().ok()) << t.status();
    KernelRun cpu = t.RunCpu({});
    ASSERT_TRUE(cpu.status.ok()) << cpu.status;
    KernelRun dev = t.RunGpu({}, {});
    ASSERT_TRUE(dev.status.ok()) << dev.status;
    auto host = gpu::ToHost(t.gpu(), dev.outputs[0]);
    ASSERT_TRUE(host.ok()) << host.status();
    ExpectMatches(cpu.outputs[0], *host, kExact, "initial value");
    // The value lives in the ResourceMgr under the CPU's name, and later
    // runs return the same buffer.
    const std::string name = t.cpu_resources()->VariableNames().at(0);
    EXPECT_EQ(t.gpu_resources()->VariableNames(), std::vector<std::string>{name});
    KernelRun again = t.RunGpu({}, {});
    ASSERT_TRUE(again.status.ok()) << again.status;
    EXPECT_TRUE(again.outputs[0].SharesBufferWith(dev.outputs[0]));
  }
}

// ---- Training ops ---------------------------------------------------------------------

// Runs `steps` updates on both devices from the same start and fresh
// gradients, then compares every updated input (var and slots).
void ExpectUpdatesMatch(const std::string& op, const AttrList& attrs, const std::vector<Tensor>& start,
                        int grad_index, int steps, Tolerance tol) {
  GpuDevice* gpu = gpu::TestGpu();
  const std::string what = Describe(op, start);
  SCOPED_TRACE(what);
  OpUnderTest t(op, start, attrs);
  ASSERT_TRUE(t.status().ok()) << t.status();
  std::vector<Tensor> cpu_in, dev_in;
  for (const Tensor& s : start) cpu_in.push_back(s.DeepCopy());
  dev_in = ToDeviceAll(gpu, start);
  for (int step = 0; step < steps; ++step) {
    Tensor grad = Rand(start[grad_index].shape());
    cpu_in[grad_index] = grad;
    auto dg = gpu::ToDevice(gpu, grad);
    ASSERT_TRUE(dg.ok());
    dev_in[grad_index] = *dg;
    KernelRun cpu = t.RunCpu(cpu_in);
    ASSERT_TRUE(cpu.status.ok()) << cpu.status;
    KernelRun dev = t.RunGpu(dev_in, {});
    ASSERT_TRUE(dev.status.ok()) << dev.status;
    EXPECT_TRUE(dev.outputs[0].SharesBufferWith(dev_in[0])) << "var is forwarded";
  }
  for (size_t i = 0; i < start.size(); ++i) {
    if (static_cast<int>(i) == grad_index) continue;
    auto host = gpu::ToHost(gpu, dev_in[i]);
    ASSERT_TRUE(host.ok());
    ExpectMatches(cpu_in[i], *host, tol, absl::StrCat(what, " input ", i, " after ", steps, " steps"));
  }
}

TEST(GpuKernelTest, OptimizerUpdatesMatchAfterSeveralSteps) {
  SKIP_WITHOUT_GPU();
  for (const TensorShape& s : std::vector<TensorShape>{{0}, {7}, {64, 128}, {300001}}) {
    ExpectUpdatesMatch("ApplyGradientDescent", {Attr("learning_rate", 0.1f)}, {Rand(s), Rand(s)}, 1, 5, kElementwise);
    for (bool nesterov : {false, true}) {
      ExpectUpdatesMatch("ApplyMomentum",
                         {Attr("learning_rate", 0.1f), Attr("momentum", 0.9f), Attr("use_nesterov", nesterov)},
                         {Rand(s), Rand(s), Rand(s)}, 2, 5, Tolerance{1e-5, 1e-5});
    }
    // Adam's t starts at 0 and must count 5 updates on both devices.
    ExpectUpdatesMatch("ApplyAdam",
                       {Attr("learning_rate", 0.01f), Attr("beta1", 0.9f), Attr("beta2", 0.999f),
                        Attr("epsilon", 1e-7f)},
                       {Rand(s), Rand(s, -0.1f, 0.1f), Rand(s, 0.0f, 0.01f), Tensor::Scalar(0.0f), Rand(s)}, 4, 5,
                       Tolerance{1e-5, 1e-4});
    // A moving statistic: momentum 0 takes the value itself.
    for (float momentum : {0.0f, 0.9f, 0.99f}) {
      ExpectUpdatesMatch("ApplyMovingAverage", {Attr("momentum", momentum)}, {Rand(s), Rand(s)}, 1, 5, kElementwise);
    }
  }
  ExpectBothFail("ApplyGradientDescent", {Rand({3}), Rand({4})}, {Attr("learning_rate", 0.1f)});
  ExpectBothFail("ApplyMovingAverage", {Rand({3}), Rand({4})}, {Attr("momentum", 0.9f)});
}

// A warm-up and a decay read at each update's count t, which both devices
// must advance once per update; weight decay coupled (SGD, momentum) and
// decoupled (AdamW).
TEST(GpuKernelTest, ScheduledUpdatesWithWeightDecayMatchAfterSeveralSteps) {
  SKIP_WITHOUT_GPU();
  const AttrList cosine = {Attr("learning_rate", 0.1f), Attr("warmup_steps", int64_t{2}), Attr("decay", "cosine"),
                           Attr("decay_steps", int64_t{3}), Attr("decay_alpha", 0.1f), Attr("weight_decay", 0.01f)};
  for (const TensorShape& s : std::vector<TensorShape>{{0}, {7}, {300001}}) {
    ExpectUpdatesMatch("ApplyGradientDescent", cosine, {Rand(s), Tensor::Scalar(0.0f), Rand(s)}, 2, 7,
                       Tolerance{1e-5, 1e-5});
    AttrList step = {Attr("learning_rate", 0.1f), Attr("momentum", 0.9f), Attr("decay", "step"),
                     Attr("decay_steps", int64_t{2}), Attr("decay_factor", 0.5f), Attr("weight_decay", 0.01f)};
    ExpectUpdatesMatch("ApplyMomentum", step, {Rand(s), Rand(s), Tensor::Scalar(0.0f), Rand(s)}, 3, 7,
                       Tolerance{1e-5, 1e-5});
    AttrList adamw = cosine;
    for (auto a : {Attr("beta1", 0.9f), Attr("beta2", 0.999f), Attr("epsilon", 1e-7f)}) adamw.push_back(a);
    ExpectUpdatesMatch("ApplyAdam", adamw,
                       {Rand(s), Rand(s, -0.1f, 0.1f), Rand(s, 0.0f, 0.01f), Tensor::Scalar(0.0f), Rand(s)}, 4, 7,
                       Tolerance{1e-5, 1e-4});
  }
}

TEST(GpuKernelTest, GlobalNormScaleMatchesTheCpu) {
  SKIP_WITHOUT_GPU();
  GpuDevice* gpu = gpu::TestGpu();
  for (float clip : {0.5f, 1e6f}) {
    const std::vector<Tensor> in = {Rand({0}), Rand({7}), Rand({300001}), Rand({64, 128})};
    OpUnderTest t("GlobalNormScale", in, {Attr("clip_norm", clip)});
    ASSERT_TRUE(t.status().ok()) << t.status();
    KernelRun cpu = t.RunCpu(in);
    ASSERT_TRUE(cpu.status.ok()) << cpu.status;
    // Twice: the device accumulator must be back at zero after a step.
    for (int run = 0; run < 2; ++run) {
      KernelRun dev = t.RunGpu(ToDeviceAll(gpu, in), {});
      ASSERT_TRUE(dev.status.ok()) << dev.status;
      for (int o = 0; o < 2; ++o) {
        auto host = gpu::ToHost(gpu, dev.outputs[o]);
        ASSERT_TRUE(host.ok());
        ExpectMatches(cpu.outputs[o], *host, Tolerance{1e-6, 1e-6}, absl::StrCat("output ", o, " run ", run));
      }
    }
  }
}

// Ties (logits from a few steps), k past the classes, and no rows; bad
// operands fail on both devices. (A label out of range is the CPU's error
// and the GPU's miss, so it is not compared.)
TEST(GpuKernelTest, InTopKMatchesTheCpu) {
  SKIP_WITHOUT_GPU();
  for (const TensorShape& s : std::vector<TensorShape>{{0, 10}, {1, 1}, {7, 3}, {64, 10}, {500, 1000}}) {
    const Tensor labels = RandInts<int32_t>({s.dim(0)}, 0, s.dim(1) - 1);
    for (int64_t k : {1, 3, 5, 2000}) {
      ExpectGpuMatchesCpu("InTopK", {Rand(s), labels}, {Attr("k", k)}, kExact);
      ExpectGpuMatchesCpu("InTopK", {RandSteps(s, 0, 2), labels}, {Attr("k", k)}, kExact);
    }
  }
  ExpectBothFail("InTopK", {Rand({3, 4}), RandInts<int32_t>({4}, 0, 3)}, {Attr("k", int64_t{1})});
}

// AvgPool and its gradient, over the pooling cases (uneven SAME padding
// included: windows at the bottom and right edge hold fewer positions);
// bad operands fail on both devices.
TEST(GpuKernelTest, AvgPoolAndGradMatchTheCpu) {
  SKIP_WITHOUT_GPU();
  for (const PoolCase& c : PoolCases()) {
    const Padding pad = c.padding[0] == 'S' ? Padding::kSame : Padding::kValid;
    const int64_t ho = ComputeWindow(c.h, c.k, c.stride, pad, "h")->out;
    const int64_t wo = ComputeWindow(c.w, c.k, c.stride, pad, "w")->out;
    const AttrList attrs = {Attr("ksize", c.k), Attr("stride", c.stride), Attr("padding", std::string(c.padding))};
    const TensorShape xs{c.n, c.h, c.w, c.c}, ys{c.n, ho, wo, c.c};
    ExpectGpuMatchesCpu("AvgPool", {Rand(xs)}, attrs, kReduction);
    ExpectGpuMatchesCpu("AvgPoolGrad", {Rand(xs), Rand(ys)}, attrs, kReduction);
  }
  const AttrList attrs = {Attr("ksize", int64_t{2}), Attr("stride", int64_t{2}), Attr("padding", std::string("VALID"))};
  ExpectBothFail("AvgPool", {Rand({1, 1, 4, 2})}, attrs);
  ExpectBothFail("AvgPoolGrad", {Rand({1, 4, 4, 2}), Rand({1, 2, 3, 2})}, attrs);
}

// Concat along the last axis and its gradient's split: images and matrices,
// an empty input among others, no rows; mismatched inputs fail on both.
TEST(GpuKernelTest, ConcatAndGradMatchTheCpu) {
  SKIP_WITHOUT_GPU();
  const std::vector<std::vector<TensorShape>> cases = {
      {{2, 5, 5, 3}, {2, 5, 5, 4}},
      {{64, 7}, {64, 1}, {64, 33}},
      {{3, 4}, {3, 0}, {3, 2}},
      {{0, 3}, {0, 5}},
      {{9}, {4}},
  };
  for (const auto& shapes : cases) {
    std::vector<Tensor> xs;
    int64_t total = 0;
    for (const TensorShape& s : shapes) {
      xs.push_back(Rand(s));
      total += s.dim(s.rank() - 1);
    }
    ExpectGpuMatchesCpu("Concat", xs, {}, kExact);
    TensorShape joined = shapes[0];
    joined.set_dim(joined.rank() - 1, total);
    std::vector<Tensor> grad_in = {Rand(joined)};
    grad_in.insert(grad_in.end(), xs.begin(), xs.end());
    ExpectGpuMatchesCpu("ConcatGrad", grad_in, {Attr("num_split", static_cast<int64_t>(xs.size()))}, kExact);
  }
  ExpectBothFail("Concat", {Rand({2, 3}), Rand({3, 3})});
  ExpectBothFail("ConcatGrad", {Rand({2, 5}), Rand({2, 3}), Rand({2, 3})}, {Attr("num_split", int64_t{2})});
}

}  // namespace
}  // namespace gpu_kernels
}  // namespace weft

// ---- Mixed precision ------------------------------------------------------------------

namespace weft {
namespace gpu_kernels {
namespace {

// The tensor cores' products of rounded operands against the CPU's
// rounding: a product of two float16 (or bfloat16) values is exact in
// float32, so only the order of the sums differs.
TEST(GpuMixedPrecisionTest, HalfMatMulsMatchTheCpusRoundedOperands) {
  SKIP_WITHOUT_GPU();
  struct Mkn {
    int64_t m, k, n;
  };
  for (const char* type : {"float16", "bfloat16"}) {
    for (const Mkn& d : std::vector<Mkn>{{1, 1, 1}, {7, 5, 3}, {64, 784, 128}, {5, 0, 3}, {33, 17, 65}}) {
      for (bool ta : {false, true}) {
        for (bool tb : {false, true}) {
          Tensor a = Rand(ta ? TensorShape{d.k, d.m} : TensorShape{d.m, d.k});
          Tensor b = Rand(tb ? TensorShape{d.n, d.k} : TensorShape{d.k, d.n});
          ExpectGpuMatchesCpu("MatMul", {a, b},
                              {Attr("transpose_a", ta), Attr("transpose_b", tb), Attr("compute_type", type)}, kGemm);
        }
      }
    }
  }
  // The rounding happened: 1 + 2^-12 is 1 in float16, and 1 + 2^-10 is 1 in bfloat16.
  const float tiny = std::ldexp(1.0f, -12), small = std::ldexp(1.0f, -10);
  std::vector<Tensor> cpu, gpu;
  bool ok = false;
  const std::vector<Tensor> probe = {testing::FloatTensor({1, 2}, {1.0f + tiny, 1.0f + small}),
                                     testing::FloatTensor({2, 2}, {1, 0, 0, 1})};
  RunOnBothDevices("MatMul", probe, {Attr("compute_type", "float16")}, false, 1, true, &cpu, &gpu, &ok);
  ASSERT_TRUE(ok);
  EXPECT_EQ(gpu[0].data<float>()[0], 1.0f);
  EXPECT_EQ(gpu[0].data<float>()[1], 1.0f + small);
  cpu.clear();
  gpu.clear();
  RunOnBothDevices("MatMul", probe, {Attr("compute_type", "bfloat16")}, false, 1, true, &cpu, &gpu, &ok);
  ASSERT_TRUE(ok);
  EXPECT_EQ(gpu[0].data<float>()[1], 1.0f);
}

TEST(GpuMixedPrecisionTest, UnscaleGradientsMarksAnOverflowOnBothDevices) {
  SKIP_WITHOUT_GPU();
  GpuDevice* gpu = gpu::TestGpu();
  Tensor finite = Rand({300001});
  Tensor overflowed = Rand({300001});
  overflowed.data<float>()[123456] = std::numeric_limits<float>::infinity();
  // The flag must be back at zero after each step: finite, overflowed, finite.
  const std::vector<Tensor> steps[] = {{Tensor::Scalar(8.0f), Rand({0}), Rand({7, 3}), finite},
                                       {Tensor::Scalar(8.0f), Rand({0}), Rand({7, 3}), overflowed},
                                       {Tensor::Scalar(8.0f), Rand({0}), Rand({7, 3}), finite}};
  OpUnderTest t("UnscaleGradients", steps[0], {});
  ASSERT_TRUE(t.status().ok()) << t.status();
  for (int s = 0; s < 3; ++s) {
    KernelRun cpu = t.RunCpu(steps[s]);
    ASSERT_TRUE(cpu.status.ok()) << cpu.status;
    KernelRun dev = t.RunGpu(ToDeviceAll(gpu, steps[s]), {});
    ASSERT_TRUE(dev.status.ok()) << dev.status;
    ASSERT_EQ(dev.outputs.size(), 4u);
    for (int o = 0; o < 4; ++o) {
      auto host = gpu::ToHost(gpu, dev.outputs[o]);
      ASSERT_TRUE(host.ok());
      ExpectMatches(cpu.outputs[o], *host, kExact, absl::StrCat("step ", s, " output ", o));
    }
    EXPECT_EQ(std::isnan(cpu.outputs[3].data<float>()[0]), s == 1);
  }
}

TEST(GpuMixedPrecisionTest, LossScaleAndSkippedUpdatesMatchTheCpu) {
  SKIP_WITHOUT_GPU();
  GpuDevice* gpu = gpu::TestGpu();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  // ApplyLossScale through backoff, the floor of 1 and growth.
  OpUnderTest scale("ApplyLossScale", {Tensor::Scalar(4.0f), Tensor::Scalar(0.0f), Tensor::Scalar(0.0f)},
                    {Attr("growth_interval", int64_t{2})});
  ASSERT_TRUE(scale.status().ok()) << scale.status();
  std::vector<Tensor> cpu_in = {Tensor::Scalar(4.0f), Tensor::Scalar(0.0f), Tensor::Scalar(0.0f)};
  std::vector<Tensor> dev_in = ToDeviceAll(gpu, cpu_in);
  for (float overflow : {nan, 0.0f, 0.0f, nan, nan, nan, nan, 0.0f}) {
    cpu_in[2] = Tensor::Scalar(overflow);
    dev_in[2] = *gpu::ToDevice(gpu, cpu_in[2]);
    ASSERT_TRUE(scale.RunCpu(cpu_in).status.ok());
    ASSERT_TRUE(scale.RunGpu(dev_in, {}).status.ok());
    for (int i = 0; i < 2; ++i) {
      ExpectMatches(cpu_in[i], *gpu::ToHost(gpu, dev_in[i]), kExact, absl::StrCat("input ", i));
    }
  }
  EXPECT_EQ(cpu_in[0].data<float>()[0], 1.0f);
  // Updates with skip_nonfinite leave var, slots and t alone on a marked step.
  const TensorShape s{300001};
  AttrList adam = {Attr("learning_rate", 0.01f), Attr("beta1", 0.9f), Attr("beta2", 0.999f), Attr("epsilon", 1e-7f),
                   Attr("skip_nonfinite", true)};
  std::vector<Tensor> start = {Rand(s), Rand(s, -0.1f, 0.1f), Rand(s, 0.0f, 0.01f), Tensor::Scalar(0.0f), Rand(s)};
  OpUnderTest t("ApplyAdam", start, adam);
  ASSERT_TRUE(t.status().ok()) << t.status();
  std::vector<Tensor> dev = ToDeviceAll(gpu, start);
  Tensor marked = Rand(s);
  marked.data<float>()[0] = nan;
  dev[4] = *gpu::ToDevice(gpu, marked);
  ASSERT_TRUE(t.RunGpu(dev, {}).status.ok());
  for (int i = 0; i < 4; ++i) ExpectMatches(start[i], *gpu::ToHost(gpu, dev[i]), kExact, absl::StrCat("input ", i));
  std::vector<Tensor> cpu = {start[0].DeepCopy(), start[1].DeepCopy(), start[2].DeepCopy(), Tensor::Scalar(0.0f),
                             Rand(s)};
  dev[4] = *gpu::ToDevice(gpu, cpu[4]);
  ASSERT_TRUE(t.RunCpu(cpu).status.ok());
  ASSERT_TRUE(t.RunGpu(dev, {}).status.ok());
  for (int i = 0; i < 4; ++i) {
    ExpectMatches(cpu[i], *gpu::ToHost(gpu, dev[i]), Tolerance{1e-5, 1e-4}, absl::StrCat("after a finite step ", i));
  }
  EXPECT_EQ(cpu[3].data<float>()[0], 1.0f);
}

}  // namespace
}  // namespace gpu_kernels
}  // namespace weft
