#include "master/evaluation.h"

#include <string>
#include <vector>

#include "common/status_macros.h"

namespace weft {
namespace master {

std::function<absl::StatusOr<EvalResult>()> DistributedEvaluation(const DistributedPlan& plan,
                                                                  MasterSession* session,
                                                                  const std::atomic<bool>* cancelled) {
  if (plan.eval_correct.empty()) return nullptr;
  std::vector<std::string> fetches = {plan.eval_labels, plan.eval_correct};
  if (!plan.eval_loss.empty()) fetches.push_back(plan.eval_loss);
  return [session, cancelled, fetches = std::move(fetches),
          out = std::vector<Tensor>()]() mutable -> absl::StatusOr<EvalResult> {
    double correct = 0, loss = 0;
    EvalResult e;
    for (;;) {
      if (cancelled->load()) return absl::CancelledError("job cancelled during evaluation");
      RETURN_IF_ERROR(Annotate(session->Run({}, fetches, {}, &out), "evaluation"));
      const int64_t n = out[0].NumElements();
      if (n == 0) break;  // the end of the test pass
      correct += out[1].data<float>()[0];
      if (out.size() > 2) loss += out[2].data<float>()[0];
      e.examples += n;
    }
    if (e.examples > 0) {
      e.accuracy = correct / static_cast<double>(e.examples);
      e.loss = loss / static_cast<double>(e.examples);
    }
    return e;
  };
}

}  // namespace master
}  // namespace weft
