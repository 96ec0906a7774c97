#include "master/evaluation.h"

#include <string>
#include <vector>

#include "common/status_macros.h"

namespace weft {
namespace master {

std::function<absl::StatusOr<EvalResult>()> DistributedEvaluation(const DistributedPlan& plan,
                                                                  MasterSession* session,
                                                                  const std::atomic<bool>* cancelled) {
  if (plan.eval_correct.empty() && plan.eval_loss.empty()) return nullptr;
  // labels, then correct, eval_loss and correct_top_k where the plan has them
  // (a regression has no correct: its accuracy stays -1).
  std::vector<std::string> fetches = {plan.eval_labels};
  const int correct_at = plan.eval_correct.empty() ? -1 : static_cast<int>(fetches.size());
  if (correct_at >= 0) fetches.push_back(plan.eval_correct);
  const int loss_at = plan.eval_loss.empty() ? -1 : static_cast<int>(fetches.size());
  if (loss_at >= 0) fetches.push_back(plan.eval_loss);
  const int top_k_at = plan.eval_correct_top_k.empty() ? -1 : static_cast<int>(fetches.size());
  if (top_k_at >= 0) fetches.push_back(plan.eval_correct_top_k);
  return [session, cancelled, fetches = std::move(fetches), correct_at, loss_at, top_k_at,
          out = std::vector<Tensor>()]() mutable -> absl::StatusOr<EvalResult> {
    double correct = 0, loss = 0, top_k = 0;
    EvalResult e;
    for (;;) {
      if (cancelled->load()) return absl::CancelledError("job cancelled during evaluation");
      RETURN_IF_ERROR(Annotate(session->Run({}, fetches, {}, &out), "evaluation"));
      const int64_t n = out[0].NumElements();
      if (n == 0) break;  // the end of the test pass
      if (correct_at >= 0) correct += out[correct_at].data<float>()[0];
      if (loss_at >= 0) loss += out[loss_at].data<float>()[0];
      if (top_k_at >= 0) top_k += out[top_k_at].data<float>()[0];
      e.examples += n;
    }
    if (e.examples > 0) {
      e.accuracy = correct_at >= 0 ? correct / static_cast<double>(e.examples) : -1;
      e.loss = loss / static_cast<double>(e.examples);
      if (top_k_at >= 0) e.top_k_accuracy = top_k / static_cast<double>(e.examples);
    }
    return e;
  };
}

}  // namespace master
}  // namespace weft
