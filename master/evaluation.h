// How the master evaluates a job: a distributed job's evaluation copy of
// replica 0 reads the test split on that replica's task
// (DistributedPlan::eval_*), fetched step by step until its labels come back
// empty at the end of the test pass.
//
// Thread-safety: the returned function is called from one thread at a time.
#ifndef WEFT_MASTER_EVALUATION_H_
#define WEFT_MASTER_EVALUATION_H_

#include <atomic>
#include <functional>

#include "absl/status/statusor.h"
#include "master/distributed_job.h"
#include "master/master_session.h"
#include "runtime/training_loop.h"

namespace weft {
namespace master {

// StepSource::evaluate for `plan`, or null when the plan has no evaluation.
// `plan`, `session` and `cancelled` outlive the function; a set `cancelled`
// ends an evaluation CANCELLED between its steps.
std::function<absl::StatusOr<EvalResult>()> DistributedEvaluation(const DistributedPlan& plan,
                                                                  MasterSession* session,
                                                                  const std::atomic<bool>* cancelled);

}  // namespace master
}  // namespace weft

#endif  // WEFT_MASTER_EVALUATION_H_
