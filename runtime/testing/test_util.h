// Tensor helpers for kernel and gradient tests: seeded random fills and
// comparisons.
#ifndef WEFT_RUNTIME_TESTING_TEST_UTIL_H_
#define WEFT_RUNTIME_TESTING_TEST_UTIL_H_

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "common/tensor.h"
#include "graph/graph.h"
#include "proto/graph.pb.h"
#include "runtime/device.h"

namespace weft {
namespace testing {

// Uniform in [lo, hi).
Tensor RandomTensor(const TensorShape& shape, uint64_t seed, float lo = -1.0f, float hi = 1.0f);
// |v| uniform in [margin, 1) with a random sign: keeps inputs off a kink at 0.
Tensor RandomAwayFromZero(const TensorShape& shape, uint64_t seed, float margin = 0.1f);
// A random permutation of {0, step, 2*step, ...} centred on zero: no ties, and
// any two elements differ by at least `step`.
Tensor DistinctTensor(const TensorShape& shape, uint64_t seed, float step = 0.05f);
// A float32 tensor from values (sizes must agree).
Tensor FloatTensor(const TensorShape& shape, const std::vector<float>& values);
Tensor IntTensor(const TensorShape& shape, const std::vector<int32_t>& values);
// max |a - b| over float32 tensors; infinity when the shapes differ.
double MaxAbsDiff(const Tensor& a, const Tensor& b);

// Runs graph `g` once on a CPU device of `threads` threads, feeding each
// (name, value) of `feeds` and fetching `fetches` into *out: the step's
// error, or OK.
absl::Status RunGraph(const Graph& g, const std::vector<std::pair<std::string, Tensor>>& feeds,
                      const std::vector<std::string>& fetches, std::vector<Tensor>* out, int threads = 1);
// Whether the message of `s` contains `piece`.
bool StatusHas(const absl::Status& s, const std::string& piece);

// Runs the kernel of `def` once on `device` with `inputs`, without its op's
// shape function (Graph::AddNodeSkippingInference): what a kernel sees from
// a graph whose inference never ran. Each input is fed through a Placeholder
// named "<def.name>_in<i>"; def's own inputs are replaced. Returns the
// outputs, whose dtypes are `output_types`, or the step's error.
absl::StatusOr<std::vector<Tensor>> RunKernelSkippingInference(NodeDef def, const std::vector<Tensor>& inputs,
                                                               const std::vector<DType>& output_types,
                                                               Device* device);

}  // namespace testing
}  // namespace weft

#endif  // WEFT_RUNTIME_TESTING_TEST_UTIL_H_
