#include "worker/remote_rendezvous.h"

#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "graph/device_name.h"

namespace weft {
namespace worker {

std::shared_ptr<RemoteRendezvous> RemoteRendezvous::Create(std::string local_task, int64_t step_id,
                                                           TensorPullerInterface* puller) {
  return std::shared_ptr<RemoteRendezvous>(new RemoteRendezvous(std::move(local_task), step_id, puller));
}

absl::Status RemoteRendezvous::Send(const std::string& key, const Tensor& value, bool is_dead) {
  return local_.Send(key, value, is_dead);
}

void RemoteRendezvous::RecvLocalAsync(const std::string& key, DoneCallback done) {
  local_.RecvAsync(key, std::move(done));
}

void RemoteRendezvous::RecvAsync(const std::string& key, DoneCallback done) {
  auto parsed = ParseRendezvousKey(key);
  if (!parsed.ok()) return done(parsed.status(), Tensor(), false);
  auto device = DeviceName::Parse(parsed->send_device);
  if (!device.ok()) return done(device.status(), Tensor(), false);
  if (device->job.empty() || device->task < 0) return local_.RecvAsync(key, std::move(done));
  const std::string task = TaskName(device->job, device->task);
  if (task == local_task_) return local_.RecvAsync(key, std::move(done));
  if (puller_ == nullptr) {
    return done(absl::FailedPreconditionError(absl::StrCat("task ", local_task_, " has no peers to receive '",
                                                           parsed->tensor_name, "' from ", task)),
                Tensor(), false);
  }

  uint64_t id = 0;
  absl::Status aborted;
  {
    absl::MutexLock lock(&mu_);
    if (status_.ok()) {
      id = next_pull_++;
      pulls_[id].done = std::move(done);
    } else {
      aborted = status_;
    }
  }
  if (!aborted.ok()) return done(aborted, Tensor(), false);
  // The pull's callback keeps the rendezvous alive until the pull ends, and
  // `self` until this call ends: the pull may complete, and the step finish
  // and drop every other reference, before PullAsync returns.
  std::shared_ptr<RemoteRendezvous> self = shared_from_this();
  std::function<void()> cancel =
      puller_->PullAsync(task, step_id_, key, [self, id](const absl::Status& s, const Tensor& v, bool dead) {
        self->Pulled(id, s, v, dead);
      });
  {
    absl::MutexLock lock(&mu_);
    auto it = pulls_.find(id);
    if (it != pulls_.end()) {
      it->second.cancel = std::move(cancel);
      return;
    }
  }
  // Finished already, or aborted before the cancel function existed.
  if (cancel) cancel();
}

void RemoteRendezvous::Pulled(uint64_t id, const absl::Status& s, const Tensor& value, bool is_dead) {
  DoneCallback done;
  {
    absl::MutexLock lock(&mu_);
    auto it = pulls_.find(id);
    if (it == pulls_.end()) return;  // aborted: its receiver was told already
    done = std::move(it->second.done);
    pulls_.erase(it);
  }
  done(s, value, is_dead);
}

void RemoteRendezvous::StartAbort(const absl::Status& status) {
  std::vector<Pull> pulls;
  absl::Status abort;
  {
    absl::MutexLock lock(&mu_);
    if (status_.ok()) status_ = status.ok() ? absl::UnknownError("rendezvous aborted with an OK status") : status;
    abort = status_;
    for (auto& [id, pull] : pulls_) pulls.push_back(std::move(pull));
    pulls_.clear();
  }
  local_.StartAbort(abort);
  for (Pull& pull : pulls) {
    if (pull.cancel) pull.cancel();
    pull.done(abort, Tensor(), false);
  }
}

int RemoteRendezvous::NumPendingPulls() const {
  absl::MutexLock lock(&mu_);
  return static_cast<int>(pulls_.size());
}

}  // namespace worker
}  // namespace weft
