// WorkerInterface: how the master (and peers) talk to one task.
//
// The master drives every task through this interface, so an in-process
// worker, a remote one over gRPC (GrpcRemoteWorker) and a test fake are
// interchangeable. Every method is asynchronous: it returns at once and calls
// `done` exactly once, from any thread, with the outcome; the request and
// response must outlive the call. A remote implementation maps transport
// failures to UNAVAILABLE naming the task, and applies a deadline to every
// call (`timeout` where given, else its default).
//
// Thread-safety: implementations are thread-safe.
#ifndef WEFT_WORKER_WORKER_INTERFACE_H_
#define WEFT_WORKER_WORKER_INTERFACE_H_

#include <functional>
#include <string>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "absl/strings/str_cat.h"
#include "proto/ps_service.pb.h"
#include "proto/worker_service.pb.h"

namespace weft {

using StatusCallback = std::function<void(const absl::Status&)>;

class WorkerInterface {
 public:
  virtual ~WorkerInterface() = default;

  // "/job:worker/task:0": for messages.
  virtual const std::string& task() const = 0;

  virtual void GetStatusAsync(const GetStatusRequest* request, GetStatusResponse* response, StatusCallback done) = 0;
  virtual void RegisterGraphAsync(const RegisterGraphRequest* request, RegisterGraphResponse* response,
                                  StatusCallback done) = 0;
  virtual void DeregisterGraphAsync(const DeregisterGraphRequest* request, DeregisterGraphResponse* response,
                                    StatusCallback done) = 0;
  // `timeout`: absl::InfiniteDuration() for none (a step may be long).
  virtual void RunGraphAsync(const RunGraphRequest* request, RunGraphResponse* response, absl::Duration timeout,
                             StatusCallback done) = 0;
  virtual void AbortStepAsync(const AbortStepRequest* request, AbortStepResponse* response, StatusCallback done) = 0;
  virtual void CleanupStepAsync(const CleanupStepRequest* request, CleanupStepResponse* response,
                                StatusCallback done) = 0;

  // What the task's running steps wait on, and its last steps
  // (master/step_watch.h). `timeout` bounds the call: a stopped task never
  // answers, and that silence is the diagnosis. An implementation without
  // it fails with UNIMPLEMENTED naming the task.
  virtual void GetStepStateAsync(const GetStepStateRequest*, GetStepStateResponse*, absl::Duration /*timeout*/,
                                 StatusCallback done) {
    done(absl::UnimplementedError(absl::StrCat("task ", task(), ": GetStepState is not served")));
  }

  // Clears variable containers on the task (WorkerService.ResetContainers):
  // the master's Reset sends it to every task. An implementation without it
  // fails with UNIMPLEMENTED naming the task.
  virtual void ResetContainersAsync(const ResetContainersRequest*, ResetContainersResponse*, StatusCallback done) {
    done(absl::UnimplementedError(absl::StrCat("task ", task(), ": ResetContainers is not served")));
  }

  // Stores a chunk of an uploaded dataset on the task
  // (WorkerService.PutDataset; master/dataset_push.h). An implementation
  // without it fails with UNIMPLEMENTED naming the task.
  virtual void PutDatasetAsync(const PutDatasetRequest*, PutDatasetResponse*, StatusCallback done) {
    done(absl::UnimplementedError(absl::StrCat("task ", task(), ": PutDataset is not served")));
  }

  // The task's ParameterServer service (proto/ps_service.proto): how the
  // master lists, saves and restores the variables a session holds there.
  // `weft ps` and `weft worker` both serve it; an implementation without it
  // fails with UNIMPLEMENTED naming the task.
  virtual void ListShardsAsync(const ListShardsRequest*, ListShardsResponse*, StatusCallback done) {
    done(Unserved("ListShards"));
  }
  virtual void SaveShardAsync(const SaveShardRequest*, SaveShardResponse*, StatusCallback done) {
    done(Unserved("SaveShard"));
  }
  virtual void RestoreShardAsync(const RestoreShardRequest*, RestoreShardResponse*, StatusCallback done) {
    done(Unserved("RestoreShard"));
  }

 private:
  absl::Status Unserved(const char* call) const {
    return absl::UnimplementedError(
        absl::StrCat("task ", task(), ": ", call, " is not served (no ParameterServer service on this task)"));
  }
};


}  // namespace weft

#endif  // WEFT_WORKER_WORKER_INTERFACE_H_
