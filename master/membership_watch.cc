#include "master/membership_watch.h"

#include <algorithm>
#include <limits>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "job/defaults.h"
#include "master/task_monitor.h"

namespace weft {
namespace master {

std::string WhyRegroup(const JobSpec& job, const std::vector<std::string>& members,
                       const std::vector<std::string>& standbys, int target) {
  const int now = static_cast<int>(members.size());
  int cap = now + static_cast<int>(standbys.size());
  if (target > 0) cap = std::min(cap, target);
  const int want = ElasticReplicaCount(job, cap);
  if (want == 0 || want == now) return "";
  if (want < now) return absl::StrCat("weft scale asked for ", target, " worker(s): ", now, " -> ", want);
  const std::vector<std::string> joining(standbys.begin(), standbys.begin() + (want - now));
  return absl::StrCat(absl::StrJoin(joining, ", "), " answer(s) and may join: ", now, " -> ", want, " workers");
}

MembershipWatch::MembershipWatch(const JobSpec& job, MemberWorkers* members, std::function<int()> target,
                                 absl::Duration interval, absl::Duration timeout,
                                 std::function<void(const std::string&)> regroup)
    : job_(job),
      members_(members),
      target_(std::move(target)),
      interval_(interval),
      timeout_(timeout),
      regroup_(std::move(regroup)),
      thread_([this] { Loop(); }) {}

MembershipWatch::~MembershipWatch() {
  stop_.Notify();
  thread_.join();
}

void MembershipWatch::Loop() {
  while (!stop_.WaitForNotificationWithTimeout(interval_)) {
    const std::vector<std::string> members = members_->Workers();
    std::vector<std::string> standbys;
    for (const TaskHealth& h : ProbeTasks(members_->cluster_cache(), timeout_)) {
      if (!IsWorkerTask(h.task) || !h.answered || h.draining) continue;
      if (std::find(members.begin(), members.end(), h.task) == members.end()) standbys.push_back(h.task);
    }
    const std::string why = WhyRegroup(job_, members, standbys, target_());
    if (!why.empty()) {
      regroup_(why);
      return;
    }
  }
}

}  // namespace master
}  // namespace weft
