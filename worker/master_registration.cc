#include "worker/master_registration.h"

#include <algorithm>
#include <utility>

#include "absl/memory/memory.h"
#include "common/logging.h"
#include "worker/grpc_remote_master.h"

namespace weft {
namespace worker {
namespace {

// A zero or negative period would turn the loop into a busy one.
constexpr absl::Duration kMinEvery = absl::Milliseconds(1);

MasterRegistrationOptions Checked(MasterRegistrationOptions options) {
  options.every = std::max(options.every, kMinEvery);
  return options;
}

}  // namespace

std::unique_ptr<MasterRegistration> MasterRegistration::Start(MasterRegistrationOptions options) {
  return absl::WrapUnique(new MasterRegistration(std::move(options)));
}

MasterRegistration::MasterRegistration(MasterRegistrationOptions options)
    : options_(Checked(std::move(options))),
      master_(std::make_unique<GrpcRemoteMaster>(options_.master, options_.credentials, options_.every)),
      log_(Logger("worker")),
      thread_([this] { Run(); }) {}

MasterRegistration::~MasterRegistration() {
  stop_.Notify();
  master_->Cancel();
  thread_.join();
}

int64_t MasterRegistration::successes() const {
  absl::MutexLock lock(&mu_);
  return successes_;
}

int64_t MasterRegistration::attempts() const {
  absl::MutexLock lock(&mu_);
  return attempts_;
}

absl::Status MasterRegistration::last_status() const {
  absl::MutexLock lock(&mu_);
  return last_status_;
}

void MasterRegistration::Run() {
  RegisterWorkerRequest request;
  request.set_task(options_.task);
  request.set_address(options_.address);
  do {
    absl::StatusOr<RegisterWorkerResponse> response = master_->RegisterWorker(request, options_.timeout);
    if (response.ok()) {
      Record(absl::OkStatus(), response->added(), response->tasks());
    } else {
      Record(response.status(), false, 0);
    }
  } while (!stop_.WaitForNotificationWithTimeout(options_.every));
}

void MasterRegistration::Record(const absl::Status& s, bool added, int tasks) {
  {
    absl::MutexLock lock(&mu_);
    ++attempts_;
    if (s.ok()) ++successes_;
    last_status_ = s;
  }
  // A call cut short by the destructor is no news.
  if (stop_.HasBeenNotified()) return;
  if (s.ok()) {
    // The first success, the first after failures, and a master that added
    // the task again (it restarted, or had dropped the task) are news; the
    // periodic confirmations are not.
    if (!ever_registered_ || failing_ || added) {
      const char* again = !ever_registered_ ? ""
                          : added           ? " again (the master had restarted or dropped the task)"
                                            : " again";
      log_->info("{} registered with the master at {} as {}{} ({} task(s) in its cluster)", options_.task,
                 options_.master, options_.address, again, tasks);
    }
    ever_registered_ = true;
    failing_ = false;
    last_logged_failure_ = absl::OkStatus();
    return;
  }
  failing_ = true;
  if (s == last_logged_failure_) return;
  last_logged_failure_ = s;
  log_->warn("{} cannot register with the master (retrying every {}): {}", options_.task,
             absl::FormatDuration(options_.every), s.ToString());
}

}  // namespace worker
}  // namespace weft
