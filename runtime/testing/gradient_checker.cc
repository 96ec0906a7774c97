#include "runtime/testing/gradient_checker.h"

#include <cmath>
#include <memory>
#include <random>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "graph/gradients.h"
#include "graph/ops/ops.h"
#include "runtime/device.h"
#include "runtime/executor.h"

namespace weft {
namespace testing {
namespace {

// sum_k w[k] * y[k] in double.
double WeightedSum(const Tensor& y, const Tensor& w) {
  const float* yp = y.data<float>();
  const float* wp = w.data<float>();
  double total = 0;
  for (int64_t k = 0; k < y.NumElements(); ++k) total += static_cast<double>(wp[k]) * yp[k];
  return total;
}

// Input i's analytic gradient against central differences of
// sum(y * w), element by element, folded into *result. *feeds holds the
// inputs and gets input i back unchanged.
absl::Status CompareInput(Executor* y_exec, const std::vector<Tensor>& inputs, int i, const Tensor& analytic,
                          const Tensor& w, double eps, std::vector<Tensor>* feeds, GradientCheckResult* result) {
  if (analytic.shape() != inputs[i].shape()) {
    return absl::InternalError(absl::StrCat("gradient of input ", i, " has shape ", analytic.shape().DebugString(),
                                            ", the input ", inputs[i].shape().DebugString()));
  }
  (*feeds)[i] = inputs[i].DeepCopy();
  float* p = (*feeds)[i].data<float>();
  std::vector<Tensor> fetched;
  for (int64_t j = 0; j < (*feeds)[i].NumElements(); ++j) {
    const float orig = p[j];
    const float hi = static_cast<float>(orig + eps);
    const float lo = static_cast<float>(orig - eps);
    p[j] = hi;
    RETURN_IF_ERROR(y_exec->Run(*feeds, &fetched));
    const double l_hi = WeightedSum(fetched[0], w);
    p[j] = lo;
    RETURN_IF_ERROR(y_exec->Run(*feeds, &fetched));
    const double l_lo = WeightedSum(fetched[0], w);
    p[j] = orig;
    // The actual float step, not 2 * eps: hi and lo are rounded.
    const double numeric = (l_hi - l_lo) / (static_cast<double>(hi) - static_cast<double>(lo));
    const double a = analytic.data<float>()[j];
    const double err = std::abs(a - numeric) / std::max(1.0, std::abs(numeric));
    // `!(err <= max)` also catches NaN.
    if (result->elements_checked == 0 || !(err <= result->max_error)) {
      result->max_error = std::isnan(err) ? INFINITY : err;
      result->worst = absl::StrCat("input ", i, " ", inputs[i].shape().DebugString(), " element ", j,
                                   ": analytic ", a, ", numeric ", numeric);
    }
    ++result->elements_checked;
  }
  (*feeds)[i] = inputs[i];
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<GradientCheckResult> ComputeGradientError(const OpBuildFn& build, const std::vector<Tensor>& inputs,
                                                         const GradientCheckOptions& options) {
  CpuDevice device("/device:CPU:0", 1);
  Graph graph;
  GraphBuilder b(&graph);
  std::vector<Output> xs;
  std::vector<std::string> feed_names;
  for (size_t i = 0; i < inputs.size(); ++i) {
    xs.push_back(b.Placeholder(inputs[i].dtype(), inputs[i].shape(), absl::StrCat("x", i)));
    feed_names.push_back(absl::StrCat("x", i));
  }
  const Output y = build(&b, xs);
  RETURN_IF_ERROR(b.status());
  if (!y.valid() || y.dtype() != DType::kFloat32) {
    return absl::InvalidArgumentError("the op under test must return a valid float32 output");
  }

  std::vector<int> check = options.inputs_to_check;
  if (check.empty()) {
    for (size_t i = 0; i < inputs.size(); ++i) {
      if (inputs[i].dtype() == DType::kFloat32) check.push_back(static_cast<int>(i));
    }
  }

  // W is fed, so the whole graph exists before any executor is built; its
  // value needs y's run-time shape.
  const Output w_in = b.Placeholder(DType::kFloat32, y.shape(), "W");
  const Output loss = ops::Sum(&b, ops::Mul(&b, y, w_in), "L");
  std::vector<Output> targets;
  for (int i : check) targets.push_back(xs[i]);
  ASSIGN_OR_RETURN(std::vector<Output> grads, AddGradients(&b, loss, targets));

  ExecutorOptions y_opts;
  y_opts.feeds = feed_names;
  y_opts.fetches = {y.name()};
  ASSIGN_OR_RETURN(auto y_exec, Executor::Create(&graph, &device, y_opts));
  ExecutorOptions g_opts;
  g_opts.feeds = feed_names;
  g_opts.feeds.push_back(w_in.name());
  for (const Output& g : grads) g_opts.fetches.push_back(g.name());
  ASSIGN_OR_RETURN(auto g_exec, Executor::Create(&graph, &device, g_opts));

  std::vector<Tensor> fetched;
  RETURN_IF_ERROR(y_exec->Run(inputs, &fetched));
  Tensor w(DType::kFloat32, fetched[0].shape());
  std::mt19937_64 rng(options.seed);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  for (float& v : w.flat<float>()) v = dist(rng);

  std::vector<Tensor> g_feeds = inputs;
  g_feeds.push_back(w);
  std::vector<Tensor> analytic;
  RETURN_IF_ERROR(g_exec->Run(g_feeds, &analytic));

  GradientCheckResult result;
  std::vector<Tensor> feeds = inputs;
  for (size_t c = 0; c < check.size(); ++c) {
    RETURN_IF_ERROR(CompareInput(y_exec.get(), inputs, check[c], analytic[c], w, options.eps, &feeds, &result));
  }
  return result;
}

absl::Status CheckGradients(const OpBuildFn& build, const std::vector<Tensor>& inputs,
                            const GradientCheckOptions& options) {
  ASSIGN_OR_RETURN(GradientCheckResult r, ComputeGradientError(build, inputs, options));
  if (r.elements_checked == 0) return absl::InvalidArgumentError("no input elements to check");
  if (!(r.max_error <= options.tolerance)) {
    return absl::InternalError(absl::StrCat("gradient error ", r.max_error, " exceeds tolerance ",
                                            options.tolerance, " at ", r.worst, " (", r.elements_checked,
                                            " elements checked)"));
  }
  return absl::OkStatus();
}

}  // namespace testing
}  // namespace weft
