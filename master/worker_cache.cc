#include "master/worker_cache.h"

#include <set>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "graph/device_name.h"

namespace weft {
namespace master {

WorkerCache::WorkerCache(std::vector<std::string> tasks, std::map<std::string, std::string> addresses,
                         ClusterDef cluster, WorkerFactory factory)
    : tasks_(std::move(tasks)),
      cluster_(std::move(cluster)),
      addresses_(std::move(addresses)),
      factory_(std::move(factory)) {}

absl::StatusOr<std::unique_ptr<WorkerCache>> WorkerCache::Create(const ClusterDef& cluster, WorkerFactory factory) {
  std::vector<std::string> tasks;
  std::map<std::string, std::string> addresses;
  std::set<std::string> jobs;
  ClusterDef tasks_cluster;
  for (const JobDef& job : cluster.job()) {
    if (job.name().empty()) return absl::InvalidArgumentError("cluster: a job has no name");
    if (!jobs.insert(job.name()).second) {
      return absl::InvalidArgumentError(absl::StrCat("cluster: job '", job.name(), "' is listed twice"));
    }
    if (job.name() == "master") continue;  // the master is not a task it drives
    *tasks_cluster.add_job() = job;
    if (job.tasks().empty()) {
      return absl::InvalidArgumentError(absl::StrCat("cluster: job '", job.name(), "' has no tasks"));
    }
    // map<int32, string> iterates in no particular order: sort by index.
    std::map<int, std::string> by_index(job.tasks().begin(), job.tasks().end());
    for (const auto& [index, address] : by_index) {
      if (index < 0) {
        return absl::InvalidArgumentError(absl::StrCat("cluster: job '", job.name(), "' has task index ", index));
      }
      const std::string task = TaskName(job.name(), index);
      if (address.empty()) return absl::InvalidArgumentError(absl::StrCat("cluster: task ", task, " has no address"));
      tasks.push_back(task);
      addresses[task] = address;
    }
  }
  return std::unique_ptr<WorkerCache>(
      new WorkerCache(std::move(tasks), std::move(addresses), std::move(tasks_cluster), std::move(factory)));
}

absl::StatusOr<std::unique_ptr<WorkerCache>> WorkerCache::CreateLocal(const std::vector<std::string>& tasks,
                                                                      WorkerFactory factory) {
  std::map<std::string, std::string> addresses;
  for (const std::string& t : tasks) {
    ASSIGN_OR_RETURN(DeviceName d, DeviceName::Parse(t));
    if (d.job.empty() || d.task < 0 || !d.type.empty()) {
      return absl::InvalidArgumentError(absl::StrCat("'", t, "' is not a task name like /job:worker/task:0"));
    }
    if (!addresses.emplace(t, "").second) {
      return absl::InvalidArgumentError(absl::StrCat("task ", t, " is listed twice"));
    }
  }
  return std::unique_ptr<WorkerCache>(new WorkerCache(tasks, std::move(addresses), ClusterDef(), std::move(factory)));
}

WorkerInterface* WorkerCache::GetOrCreateWorker(const std::string& task) {
  auto addr = addresses_.find(task);
  if (addr == addresses_.end()) return nullptr;
  absl::MutexLock lock(&mu_);
  std::unique_ptr<WorkerInterface>& w = workers_[task];
  if (w == nullptr) w = factory_(task, addr->second);
  return w.get();
}

absl::Status WithTask(const absl::Status& s, const std::string& task) {
  if (s.ok()) return s;
  const std::string prefix = absl::StrCat("task ", task, ":");
  if (absl::StartsWith(s.message(), prefix)) return s;
  return Annotate(s, absl::StrCat("task ", task));
}

}  // namespace master
}  // namespace weft
