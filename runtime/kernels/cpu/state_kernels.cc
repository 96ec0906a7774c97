// CPU kernels for Placeholder, Const, Variable, Identity and NoOp.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>

#include "Eigen/Core"
#include "Eigen/QR"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "graph/ops/variable_shapes.h"
#include "runtime/device.h"
#include "runtime/op_kernel.h"

namespace weft {
namespace {

class PlaceholderOp : public OpKernel {
 public:
  using OpKernel::OpKernel;
  void Compute(OpKernelContext* ctx) override {
    // The executor replaces fed placeholders; reaching this means no feed.
    ctx->SetStatus(absl::InvalidArgumentError(
        absl::StrCat("placeholder '", ctx->node().name(), "' must be fed a value")));
  }
};

class ConstOp : public OpKernel {
 public:
  explicit ConstOp(OpKernelConstruction* c) : OpKernel(c) {
    auto t = GetTensorAttr(c->def(), "value");
    if (!t.ok()) {
      c->SetStatus(t.status());
      return;
    }
    value_ = *std::move(t);
  }
  void Compute(OpKernelContext* ctx) override { ctx->set_output(0, value_); }

 private:
  Tensor value_;
};

// Saxe et al.'s orthogonal initialisation, as Keras's Orthogonal: the Q of a
// standard normal matrix's QR, its columns' signs fixed by R's diagonal, for
// the [rows, cols] matrix p (orthonormal rows or columns, whichever are fewer).
void Orthogonal(const TensorShape& shape, std::mt19937_64* rng, float* p) {
  const int64_t rows = shape.dim(0), cols = shape.dim(1);
  const int64_t big = std::max(rows, cols), small = std::min(rows, cols);
  std::normal_distribution<double> dist(0.0, 1.0);
  Eigen::MatrixXd a(big, small);
  for (int64_t i = 0; i < a.size(); ++i) a.data()[i] = dist(*rng);
  Eigen::HouseholderQR<Eigen::MatrixXd> qr(a);
  Eigen::MatrixXd q = qr.householderQ() * Eigen::MatrixXd::Identity(big, small);
  const Eigen::MatrixXd r = qr.matrixQR().topRows(small).triangularView<Eigen::Upper>();
  for (int64_t j = 0; j < small; ++j) {
    if (r(j, j) < 0) q.col(j) = -q.col(j);
  }
  for (int64_t i = 0; i < rows; ++i) {
    for (int64_t j = 0; j < cols; ++j) p[i * cols + j] = static_cast<float>(rows >= cols ? q(i, j) : q(j, i));
  }
}

class VariableOp : public OpKernel {
 public:
  explicit VariableOp(OpKernelConstruction* c) : OpKernel(c) {
    auto dtype = GetTypeAttr(c->def(), "dtype");
    auto shapes = GetVariableShapes(c->def());
    auto init = GetStringAttrOr(c->def(), "initializer", "zeros");
    auto seed = GetIntAttrOr(c->def(), "seed", 0);
    auto value = GetFloatAttrOr(c->def(), "init_value", 0.0f);
    auto shared = GetStringAttrOr(c->def(), "shared_name", "");
    auto init_name = GetStringAttrOr(c->def(), "init_name", "");
    auto container = GetStringAttrOr(c->def(), "container", "");
    for (const absl::Status& s : {dtype.status(), shapes.status(), init.status(), seed.status(), value.status(),
                                  shared.status(), init_name.status(), container.status()}) {
      if (!s.ok()) {
        c->SetStatus(s);
        return;
      }
    }
    dtype_ = *dtype;
    shape_ = shapes->shape;
    initializer_ = *init;
    seed_ = *seed;
    init_value_ = *value;
    // Replicas of one variable on different tasks (a strategy's copies) keep
    // its name; without the attr the node's name is the variable's.
    resource_name_ = shared->empty() ? c->def().name() : *shared;
    // Copies of one variable under different names (one per local device)
    // draw the same initial values when they share an init_name.
    init_name_ = init_name->empty() ? resource_name_ : *init_name;
    // A row shard of a larger variable draws the whole variable's initial
    // values and keeps its rows [row_offset, row_offset + rows). The
    // attributes were checked as in the shape function (which a graph may
    // have skipped): same trailing dims, rows inside init_shape.
    init_shape_ = shapes->init_shape;
    row_offset_ = shapes->row_offset;
    // A variable in a container lives in the task's store of that container,
    // shared across sessions; resolved once here, not per step.
    if (!container->empty()) {
      absl::StatusOr<ResourceMgr*> store = c->container(*container);
      if (!store.ok()) {
        c->SetStatus(store.status());
        return;
      }
      container_store_ = *store;
    }
  }

  void Compute(OpKernelContext* ctx) override {
    ResourceMgr* store = container_store_ != nullptr ? container_store_ : ctx->resources();
    auto var = store->LookupOrCreateVariable(
        resource_name_, dtype_, shape_, [this](Tensor* t) { return Initialize(t); });
    OP_REQUIRES_OK(ctx, var.status());
    ctx->set_output(0, *std::move(var));
  }

 private:
  absl::Status Initialize(Tensor* t) const {
    if (init_shape_ == shape_) return InitializeWhole(t, shape_);
    // Through Allocate: init_shape comes from the graph and may be far
    // larger than this daemon can hold.
    absl::StatusOr<Tensor> whole = Tensor::Allocate(dtype_, init_shape_);
    if (!whole.ok()) {
      return Annotate(whole.status(), absl::StrCat("node ", node().DebugName(), ": the initial values of attribute "
                                                   "'init_shape' (the whole variable)"));
    }
    RETURN_IF_ERROR(InitializeWhole(&*whole, init_shape_));
    // Row size from the trailing dims, not whole bytes / rows: a variable
    // with no rows has no row size to divide out. Both fit, since `whole`
    // was allocated.
    int64_t row_elements = 1;
    for (int d = 1; d < init_shape_.rank(); ++d) row_elements *= init_shape_.dim(d);
    const size_t row_bytes = static_cast<size_t>(row_elements) * DTypeSize(dtype_);
    if (t->TotalBytes() > 0) {
      std::memcpy(t->raw_data(),
                  static_cast<const char*>(whole->raw_data()) + row_bytes * static_cast<size_t>(row_offset_),
                  t->TotalBytes());
    }
    return absl::OkStatus();
  }

  absl::Status InitializeWhole(Tensor* t, const TensorShape& shape) const {
    if (dtype_ != DType::kFloat32) {
      if (initializer_ != "zeros") {
        return absl::InvalidArgumentError(absl::StrCat("variable '", node().name(), "': initializer '", initializer_,
                                                       "' needs dtype float32"));
      }
      std::memset(t->raw_data(), 0, t->TotalBytes());
      return absl::OkStatus();
    }
    float* p = t->data<float>();
    const int64_t n = t->NumElements();
    if (initializer_ == "unit_forget_bias") {  // an LSTM's bias: the forget gate's quarter 1, the rest 0
      const int64_t h = n / 4;
      for (int64_t i = 0; i < n; ++i) p[i] = i >= h && i < 2 * h ? 1.0f : 0.0f;
      return absl::OkStatus();
    }
    if (initializer_ == "zeros" || initializer_ == "ones" || initializer_ == "constant") {
      const float v = initializer_ == "zeros" ? 0.0f : initializer_ == "ones" ? 1.0f : init_value_;
      std::fill(p, p + n, v);
      return absl::OkStatus();
    }
    // fan_in / fan_out: for a matrix [in, out]; for a conv filter [h, w, in, out].
    double fan_in = 1, fan_out = 1;
    const int r = shape.rank();
    if (r >= 2) {
      double receptive = 1;
      for (int i = 0; i < r - 2; ++i) receptive *= static_cast<double>(shape.dim(i));
      fan_in = receptive * static_cast<double>(shape.dim(r - 2));
      fan_out = receptive * static_cast<double>(shape.dim(r - 1));
    } else if (r == 1) {
      fan_in = fan_out = static_cast<double>(shape.dim(0));
    }
    std::mt19937_64 rng(static_cast<uint64_t>(seed_) * 0x9E3779B97F4A7C15ull + std::hash<std::string>()(init_name_));
    if (initializer_ == "orthogonal") {
      Orthogonal(shape, &rng, p);
    } else if (initializer_ == "glorot_uniform") {
      const double limit = std::sqrt(6.0 / (fan_in + fan_out));
      std::uniform_real_distribution<double> dist(-limit, limit);
      for (int64_t i = 0; i < n; ++i) p[i] = static_cast<float>(dist(rng));
    } else {  // he_normal, truncated at two standard deviations
      const double stddev = std::sqrt(2.0 / fan_in);
      std::normal_distribution<double> dist(0.0, stddev);
      for (int64_t i = 0; i < n; ++i) {
        double v;
        do v = dist(rng); while (std::abs(v) > 2 * stddev);
        p[i] = static_cast<float>(v);
      }
    }
    return absl::OkStatus();
  }

  DType dtype_ = DType::kFloat32;
  TensorShape shape_;
  std::string initializer_;
  int64_t seed_ = 0;
  float init_value_ = 0;
  std::string resource_name_;
  // The container's store (outlives the kernel), or nullptr: the context's.
  ResourceMgr* container_store_ = nullptr;
  std::string init_name_;
  TensorShape init_shape_;
  int64_t row_offset_ = 0;
};

class IdentityOp : public OpKernel {
 public:
  using OpKernel::OpKernel;
  void Compute(OpKernelContext* ctx) override { ctx->set_output(0, ctx->input(0)); }
};

// CrossReplicaSum of one replica (graph/ops/collective_ops.cc): each input
// is its own sum.
class CrossReplicaSumOp : public OpKernel {
 public:
  using OpKernel::OpKernel;
  void Compute(OpKernelContext* ctx) override {
    for (int i = 0; i < ctx->num_inputs(); ++i) ctx->set_output(i, ctx->input(i));
  }
};

class NoOpOp : public OpKernel {
 public:
  using OpKernel::OpKernel;
  void Compute(OpKernelContext*) override {}
};

WEFT_REGISTER_KERNEL("Placeholder", "CPU", PlaceholderOp);
WEFT_REGISTER_KERNEL("Const", "CPU", ConstOp);
WEFT_REGISTER_KERNEL("Variable", "CPU", VariableOp);
WEFT_REGISTER_KERNEL("Identity", "CPU", IdentityOp);
WEFT_REGISTER_KERNEL("CrossReplicaSum", "CPU", CrossReplicaSumOp);
WEFT_REGISTER_KERNEL("NoOp", "CPU", NoOpOp);
// Neither reads a payload, so they serve a GPU as they are.
WEFT_REGISTER_KERNEL("Identity", "GPU", IdentityOp);
WEFT_REGISTER_KERNEL("CrossReplicaSum", "GPU", CrossReplicaSumOp);
WEFT_REGISTER_KERNEL("NoOp", "GPU", NoOpOp);

}  // namespace
}  // namespace weft
