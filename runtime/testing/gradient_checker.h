// Numerical gradient checking for ops' gradient functions (tests only).
//
// For an op under test y = f(x_0, ..., x_k), the checker builds
//
//   L = Sum(Mul(y, W))          W: fixed random weights in [-1, 1]
//
// asks AddGradients for dL/dx_i, runs it once (the analytic gradient), and
// compares it elementwise with central differences
//
//   dL/dx_i[j] ~ (L(x_i[j] + eps) - L(x_i[j] - eps)) / 2 eps
//
// where L is recomputed in double on the host from the fetched float32 y.
// The error of an element is |analytic - numeric| / max(1, |numeric|).
//
// Inputs must be chosen away from the op's kinks (Relu at 0, ties in MaxPool)
// by more than eps, or the central difference straddles them.
//
// Thread-safety: the functions are thread-compatible; each builds its own
// graph and device.
#ifndef WEFT_RUNTIME_TESTING_GRADIENT_CHECKER_H_
#define WEFT_RUNTIME_TESTING_GRADIENT_CHECKER_H_

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/tensor.h"
#include "graph/builder.h"

namespace weft {
namespace testing {

// Adds the op under test, reading `inputs` (placeholders "x0", "x1", ...
// carrying the values given to the checker), and returns the float32 output
// to check.
using OpBuildFn = std::function<Output(GraphBuilder* b, const std::vector<Output>& inputs)>;

struct GradientCheckOptions {
  double eps = 1e-2;
  // Largest acceptable |analytic - numeric| / max(1, |numeric|).
  double tolerance = 2e-3;
  // Seeds the loss weights W.
  uint64_t seed = 17;
  // Inputs to differentiate; empty means every float32 input.
  std::vector<int> inputs_to_check;
};

struct GradientCheckResult {
  double max_error = 0;
  int64_t elements_checked = 0;
  // The element with the largest error: "input 1 [5]: analytic 0.1, numeric 0.2".
  std::string worst;
};

// Errors for graphs that cannot be built or run; a large error is not one.
absl::StatusOr<GradientCheckResult> ComputeGradientError(const OpBuildFn& build, const std::vector<Tensor>& inputs,
                                                         const GradientCheckOptions& options = {});

// OK when ComputeGradientError succeeds with max_error <= tolerance;
// otherwise the error names the worst element.
absl::Status CheckGradients(const OpBuildFn& build, const std::vector<Tensor>& inputs,
                            const GradientCheckOptions& options = {});

}  // namespace testing
}  // namespace weft

#endif  // WEFT_RUNTIME_TESTING_GRADIENT_CHECKER_H_
