#include "master/member_workers.h"

#include <algorithm>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace weft {
namespace master {

bool IsWorkerTask(const std::string& task) { return absl::StartsWith(task, "/job:worker/"); }

MemberWorkers::MemberWorkers(WorkerCacheInterface* cluster) : cluster_(cluster) {
  for (const std::string& t : cluster_->ListTasks()) {
    if (IsWorkerTask(t)) workers_.insert(t);
  }
}

std::vector<std::string> MemberWorkers::ListTasks() const {
  absl::MutexLock lock(&mu_);
  std::vector<std::string> out;
  for (const std::string& t : cluster_->ListTasks()) {
    if (!IsWorkerTask(t) || workers_.count(t) > 0) out.push_back(t);
  }
  return out;
}

absl::Status MemberWorkers::SetWorkers(const std::set<std::string>& workers) {
  const std::vector<std::string> known = ClusterWorkers();
  for (const std::string& w : workers) {
    if (std::find(known.begin(), known.end(), w) == known.end()) {
      return absl::InvalidArgumentError(absl::StrCat("task ", w, " is not a worker of the cluster"));
    }
  }
  absl::MutexLock lock(&mu_);
  workers_ = workers;
  return absl::OkStatus();
}

std::vector<std::string> MemberWorkers::Workers() const {
  std::vector<std::string> out;
  for (const std::string& t : ListTasks()) {
    if (IsWorkerTask(t)) out.push_back(t);
  }
  return out;
}

std::vector<std::string> MemberWorkers::ClusterWorkers() const {
  std::vector<std::string> out;
  for (const std::string& t : cluster_->ListTasks()) {
    if (IsWorkerTask(t)) out.push_back(t);
  }
  return out;
}

}  // namespace master
}  // namespace weft
