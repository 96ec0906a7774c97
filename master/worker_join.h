// A worker that joins the cluster while the master runs
// (MasterService.RegisterWorker, `weft worker --master`).
//
// The caller must be a cluster task and may register only itself (its
// certificate's name; an insecure master takes the request's); only worker
// tasks join. Before the task is added, the master asks the address for its
// status: it must answer as that task, so a mistyped --advertise, or an
// address that is another task's, is refused with what answered there.
// Then WorkerCacheInterface::AddTask: elastic jobs take the worker at their
// next step boundary (master/membership_watch.h), other jobs when they
// start. The periodic calls of a task already in at that address are
// answered at once, with nothing dialled.
//
// Thread-safety: thread-safe.
#ifndef WEFT_MASTER_WORKER_JOIN_H_
#define WEFT_MASTER_WORKER_JOIN_H_


#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "common/caller.h"
#include "master/worker_cache.h"
#include "proto/master_service.pb.h"

namespace weft {
namespace master {

class WorkerJoins {
 public:
  // At most this many joins are checked at once; more are refused
  // (RESOURCE_EXHAUSTED) until one answers.
  static constexpr int kMaxInFlight = 64;

  // `workers` outlives this.
  explicit WorkerJoins(WorkerCacheInterface* workers) : workers_(workers) {}
  // Waits for the checks under way (each bounded by the worker client's
  // call timeout).
  ~WorkerJoins();
  WorkerJoins(const WorkerJoins&) = delete;
  WorkerJoins& operator=(const WorkerJoins&) = delete;

  // Checks and adds the task; `done` runs once, maybe on an RPC thread.
  // `request` and `response` live until then.
  void Join(const Caller& caller, const RegisterWorkerRequest* request, RegisterWorkerResponse* response,
            StatusCallback done);

 private:
  // The check of a join answered: adds the task and answers the call.
  void Checked(const absl::Status& s, const GetStatusResponse& status, const RegisterWorkerRequest* request,
               RegisterWorkerResponse* response, const StatusCallback& done);

  WorkerCacheInterface* const workers_;
  absl::Mutex mu_;
  int in_flight_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace master
}  // namespace weft

#endif  // WEFT_MASTER_WORKER_JOIN_H_
