// MembershipWatch: while an attempt of an elastic job runs, asks the
// cluster's workers at an interval whether the job should change its
// membership at the next step boundary: a worker that is not a member
// answers and the job may grow onto it (up to elastic.max_workers, a count
// that splits the global batch), or `weft scale` asked for another size. It
// says so once, through a callback; the checkpoint hook then ends the
// attempt between steps and the runner re-forms the group
// (master/job_runner.h). A member that fails is the heartbeat's business,
// not the watch's.
//
// Thread-safety: WhyRegroup is a pure function; a watch runs its probes on
// its own thread, and the callback there, until it is destroyed.
#ifndef WEFT_MASTER_MEMBERSHIP_WATCH_H_
#define WEFT_MASTER_MEMBERSHIP_WATCH_H_

#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "master/member_workers.h"
#include "proto/job.pb.h"

namespace weft {
namespace master {

// Why an elastic job that trains on `members` should change, or "" when it
// should not: `standbys` are other workers that answer, `target` the size
// `weft scale` asked for (0: none). The job takes as many of all of them as
// ElasticReplicaCount allows under `target`.
std::string WhyRegroup(const JobSpec& job, const std::vector<std::string>& members,
                       const std::vector<std::string>& standbys, int target);

class MembershipWatch {
 public:
  // Probes every `interval`, each probe given `timeout`; `target` reads the
  // size asked for; `regroup` gets WhyRegroup's reason, once. Everything
  // borrowed outlives the watch.
  MembershipWatch(const JobSpec& job, MemberWorkers* members, std::function<int()> target, absl::Duration interval,
                  absl::Duration timeout, std::function<void(const std::string&)> regroup);
  // Stops the probes and joins the thread.
  ~MembershipWatch();
  MembershipWatch(const MembershipWatch&) = delete;
  MembershipWatch& operator=(const MembershipWatch&) = delete;

 private:
  void Loop();

  const JobSpec& job_;
  MemberWorkers* const members_;
  const std::function<int()> target_;
  const absl::Duration interval_;
  const absl::Duration timeout_;
  const std::function<void(const std::string&)> regroup_;
  absl::Notification stop_;
  std::thread thread_;
};

}  // namespace master
}  // namespace weft

#endif  // WEFT_MASTER_MEMBERSHIP_WATCH_H_
