#include "runtime/testing/test_util.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <numeric>
#include <random>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "common/tensor_proto_coding.h"
#include "graph/graph.h"
#include "runtime/executor.h"

namespace weft {
namespace testing {

Tensor RandomTensor(const TensorShape& shape, uint64_t seed, float lo, float hi) {
  Tensor t(DType::kFloat32, shape);
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  for (float& v : t.flat<float>()) v = dist(rng);
  return t;
}

Tensor RandomAwayFromZero(const TensorShape& shape, uint64_t seed, float margin) {
  Tensor t(DType::kFloat32, shape);
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> dist(margin, 1.0f);
  std::bernoulli_distribution sign(0.5);
  for (float& v : t.flat<float>()) v = sign(rng) ? dist(rng) : -dist(rng);
  return t;
}

Tensor DistinctTensor(const TensorShape& shape, uint64_t seed, float step) {
  Tensor t(DType::kFloat32, shape);
  const int64_t n = t.NumElements();
  std::vector<int64_t> order(n);
  std::iota(order.begin(), order.end(), 0);
  std::shuffle(order.begin(), order.end(), std::mt19937_64(seed));
  float* p = t.data<float>();
  for (int64_t i = 0; i < n; ++i) p[i] = (static_cast<float>(order[i]) - 0.5f * static_cast<float>(n)) * step;
  return t;
}

Tensor FloatTensor(const TensorShape& shape, const std::vector<float>& values) {
  auto t = Tensor::FromVector<float>(shape, values);
  if (!t.ok()) std::abort();  // a bug in the test itself
  return *std::move(t);
}

Tensor IntTensor(const TensorShape& shape, const std::vector<int32_t>& values) {
  auto t = Tensor::FromVector<int32_t>(shape, values);
  if (!t.ok()) std::abort();
  return *std::move(t);
}

double MaxAbsDiff(const Tensor& a, const Tensor& b) {
  if (a.shape() != b.shape() || a.dtype() != DType::kFloat32 || b.dtype() != DType::kFloat32) {
    return std::numeric_limits<double>::infinity();
  }
  double m = 0;
  for (int64_t i = 0; i < a.NumElements(); ++i) {
    const double d = std::abs(static_cast<double>(a.data<float>()[i]) - b.data<float>()[i]);
    if (!(d <= m)) m = std::isnan(d) ? std::numeric_limits<double>::infinity() : d;
  }
  return m;
}

absl::StatusOr<std::vector<Tensor>> RunKernelSkippingInference(NodeDef def, const std::vector<Tensor>& inputs,
                                                               const std::vector<DType>& output_types,
                                                               Device* device) {
  Graph g;
  std::vector<std::pair<std::string, Tensor>> feeds;
  def.clear_input();
  for (size_t i = 0; i < inputs.size(); ++i) {
    NodeDef in;
    in.set_name(absl::StrCat(def.name(), "_in", i));
    in.set_op("Placeholder");
    (*in.mutable_attr())["dtype"].set_type(DTypeToProto(inputs[i].dtype()));
    ShapeToProto(inputs[i].shape(), (*in.mutable_attr())["shape"].mutable_shape());
    def.add_input(in.name());
    feeds.emplace_back(in.name(), inputs[i]);
    RETURN_IF_ERROR(g.AddNode(std::move(in)).status());
  }
  ASSIGN_OR_RETURN(Node * node, g.AddNodeSkippingInference(std::move(def), output_types));
  std::vector<std::string> fetches;
  for (int k = 0; k < node->num_outputs(); ++k) fetches.push_back(absl::StrCat(node->name(), ":", k));
  std::vector<std::string> targets;
  if (fetches.empty()) targets.push_back(node->name());
  return RunGraphOnce(g, device, feeds, fetches, targets);
}

absl::Status RunGraph(const Graph& g, const std::vector<std::pair<std::string, Tensor>>& feeds,
                      const std::vector<std::string>& fetches, std::vector<Tensor>* out, int threads) {
  CpuDevice device("/device:CPU:0", threads);
  ExecutorOptions opts;
  std::vector<Tensor> values;
  for (const auto& [name, t] : feeds) {
    opts.feeds.push_back(name);
    values.push_back(t);
  }
  opts.fetches = fetches;
  auto exec = Executor::Create(&g, &device, opts);
  if (!exec.ok()) return exec.status();
  return (*exec)->Run(values, out, /*step_id=*/1);
}

bool StatusHas(const absl::Status& s, const std::string& piece) {
  return std::string(s.message()).find(piece) != std::string::npos;
}

}  // namespace testing
}  // namespace weft
