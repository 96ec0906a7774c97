// FakeWorker: a WorkerInterface for tests whose RPCs fail with UNIMPLEMENTED
// unless a subclass overrides them. Each call completes synchronously, on
// the caller's thread, unless the override decides otherwise.
//
// Thread-safety: the base class is stateless; subclasses guard their state.
#ifndef WEFT_MASTER_FAKE_WORKER_H_
#define WEFT_MASTER_FAKE_WORKER_H_

#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "worker/worker_interface.h"

namespace weft {
namespace master {

class FakeWorker : public WorkerInterface {
 public:
  explicit FakeWorker(std::string task) : task_(std::move(task)) {}

  const std::string& task() const override { return task_; }

  void GetStatusAsync(const GetStatusRequest*, GetStatusResponse*, StatusCallback done) override {
    done(Unimplemented("GetStatus"));
  }
  void RegisterGraphAsync(const RegisterGraphRequest*, RegisterGraphResponse*, StatusCallback done) override {
    done(Unimplemented("RegisterGraph"));
  }
  void DeregisterGraphAsync(const DeregisterGraphRequest*, DeregisterGraphResponse*, StatusCallback done) override {
    done(Unimplemented("DeregisterGraph"));
  }
  void RunGraphAsync(const RunGraphRequest*, RunGraphResponse*, absl::Duration, StatusCallback done) override {
    done(Unimplemented("RunGraph"));
  }
  void AbortStepAsync(const AbortStepRequest*, AbortStepResponse*, StatusCallback done) override {
    done(Unimplemented("AbortStep"));
  }
  void CleanupStepAsync(const CleanupStepRequest*, CleanupStepResponse*, StatusCallback done) override {
    done(Unimplemented("CleanupStep"));
  }
  void GetStepStateAsync(const GetStepStateRequest*, GetStepStateResponse*, absl::Duration,
                         StatusCallback done) override {
    done(Unimplemented("GetStepState"));
  }

 protected:
  absl::Status Unimplemented(const char* rpc) const {
    return absl::UnimplementedError(absl::StrCat("FakeWorker ", task_, " does not implement ", rpc));
  }

 private:
  const std::string task_;
};

}  // namespace master
}  // namespace weft

#endif  // WEFT_MASTER_FAKE_WORKER_H_
