// A worker task's registration with the master (`weft worker --master`):
// the task tells the master that it exists and where it is reached, so the
// master adds it to its cluster and elastic jobs can grow onto it.
//
// It registers at once and then again every `every`, whether the last call
// succeeded or not: the master keeps no record across a restart, so
// re-registering is how a restarted master learns of the task again, and a
// failed call (master not up yet, unreachable, refusing) is retried at the
// same pace. The first success is logged, and each distinct failure once
// until the next success, so a master that is down for an hour costs one
// log line, not 720.
//
// The calls run on a thread of the object's own. The destructor cancels the
// call in flight, wakes the thread from its wait (no sleep: it waits on a
// notification) and joins it, so it returns promptly whatever `every` and
// `timeout` are.
//
// Thread-safety: the accessors are thread-safe.
#ifndef WEFT_WORKER_MASTER_REGISTRATION_H_
#define WEFT_WORKER_MASTER_REGISTRATION_H_

#include <cstdint>
#include <memory>
#include <string>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "spdlog/spdlog.h"

namespace grpc {
class ChannelCredentials;
}  // namespace grpc

namespace weft {
namespace worker {

class GrpcRemoteMaster;

struct MasterRegistrationOptions {
  std::string master;   // "host:port" of the master
  std::string task;     // "/job:worker/task:3"
  std::string address;  // "host:port" where the master and peers reach this task
  // The task's own (TransportSecurity::ChannelCredentials, mTLS: the master
  // checks that the certificate's name is `task`); null: plaintext.
  std::shared_ptr<grpc::ChannelCredentials> credentials;
  // How often the task says again that it is there. Below 1 ms counts as
  // 1 ms.
  absl::Duration every = absl::Seconds(5);
  // Each call's deadline.
  absl::Duration timeout = absl::Seconds(5);
};

class MasterRegistration {
 public:
  // Starts the thread; the first call is made at once.
  static std::unique_ptr<MasterRegistration> Start(MasterRegistrationOptions options);
  // Stops the thread promptly (see above).
  ~MasterRegistration();

  MasterRegistration(const MasterRegistration&) = delete;
  MasterRegistration& operator=(const MasterRegistration&) = delete;

  // Calls answered OK, and calls made (answered or failed).
  int64_t successes() const;
  int64_t attempts() const;
  // The outcome of the latest call: OK, or why it failed (the master's
  // error, UNAVAILABLE when it cannot be reached, DEADLINE_EXCEEDED). OK
  // before the first call ends.
  absl::Status last_status() const;

 private:
  explicit MasterRegistration(MasterRegistrationOptions options);

  void Run();
  // Counts the outcome of one call and logs it if it is news.
  void Record(const absl::Status& s, bool added, int tasks);

  const MasterRegistrationOptions options_;
  const std::unique_ptr<GrpcRemoteMaster> master_;
  const std::shared_ptr<spdlog::logger> log_;
  absl::Notification stop_;

  mutable absl::Mutex mu_;
  int64_t successes_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t attempts_ ABSL_GUARDED_BY(mu_) = 0;
  absl::Status last_status_ ABSL_GUARDED_BY(mu_);

  // What was logged last; touched only by the thread.
  bool ever_registered_ = false;
  bool failing_ = false;
  absl::Status last_logged_failure_;

  std::thread thread_;  // last: starts after every member above exists
};

}  // namespace worker
}  // namespace weft

#endif  // WEFT_WORKER_MASTER_REGISTRATION_H_
