#include "master/worker_cache.h"

#include <algorithm>
#include <set>
#include <utility>

#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/cluster_spec.h"
#include "common/status_macros.h"
#include "graph/device_name.h"

namespace weft {
namespace master {

absl::StatusOr<bool> WorkerCacheInterface::AddTask(const std::string& task, const std::string&) {
  return absl::UnimplementedError(absl::StrCat("task ", task, " cannot join: this cluster's tasks are fixed"));
}

std::unique_ptr<WorkerInterface> WorkerCacheInterface::NewClient(const std::string&, const std::string&) {
  return nullptr;
}

void TaskSnapshot::Freeze() {
  std::vector<std::string> tasks = cluster_->ListTasks();
  absl::MutexLock lock(&mu_);
  tasks_ = std::move(tasks);
}

std::vector<std::string> TaskSnapshot::ListTasks() const {
  {
    absl::MutexLock lock(&mu_);
    if (tasks_.has_value()) return *tasks_;
  }
  return cluster_->ListTasks();
}

WorkerInterface* TaskSnapshot::GetOrCreateWorker(const std::string& task) {
  {
    absl::MutexLock lock(&mu_);
    if (tasks_.has_value() && std::find(tasks_->begin(), tasks_->end(), task) == tasks_->end()) return nullptr;
  }
  return cluster_->GetOrCreateWorker(task);
}

WorkerCache::WorkerCache(std::vector<std::string> tasks, std::map<std::string, std::string> addresses,
                         ClusterDef cluster, WorkerFactory factory)
    : factory_(std::move(factory)),
      fixed_(tasks.begin(), tasks.end()),
      tasks_(std::move(tasks)),
      cluster_(std::move(cluster)),
      addresses_(std::move(addresses)) {}

std::vector<std::string> WorkerCache::ListTasks() const {
  absl::MutexLock lock(&mu_);
  return tasks_;
}

ClusterDef WorkerCache::cluster() const {
  absl::MutexLock lock(&mu_);
  return cluster_;
}

absl::StatusOr<int> JoiningWorkerIndex(const std::string& task) {
  absl::StatusOr<DeviceName> d = DeviceName::Parse(task);
  if (!d.ok() || d->job != "worker" || d->task < 0 || !d->type.empty() || TaskName(d->job, d->task) != task) {
    return absl::InvalidArgumentError(absl::StrCat("'", absl::CHexEscape(task.substr(0, 200)),
                                                   "' is not a worker task like /job:worker/task:3: only workers "
                                                   "join a running cluster"));
  }
  return d->task;
}

bool WorkerCache::Knows(const std::string& task, const std::string& address) const {
  absl::MutexLock lock(&mu_);
  auto it = addresses_.find(task);
  return it != addresses_.end() && it->second == address;
}

absl::StatusOr<bool> WorkerCache::AddTask(const std::string& task, const std::string& address) {
  ASSIGN_OR_RETURN(const int index, JoiningWorkerIndex(task));
  RETURN_IF_ERROR(CheckHostPort(address, absl::StrCat("task ", task)));
  absl::MutexLock lock(&mu_);
  for (const auto& [other, at] : addresses_) {
    if (at == address && other != task) {
      return absl::FailedPreconditionError(
          absl::StrCat("task ", task, " cannot join at ", address, ": task ", other, " is there"));
    }
  }
  auto known = addresses_.find(task);
  if (known != addresses_.end()) {
    if (known->second == address) return false;
    if (fixed_.count(task) > 0) {
      return absl::FailedPreconditionError(absl::StrCat("task ", task, " is in the master's --cluster at ",
                                                        known->second, "; it cannot move to ", address));
    }
    if (moved_.size() >= static_cast<size_t>(kMaxTasks)) {
      return absl::ResourceExhaustedError(absl::StrCat("task ", task, " cannot move: ", kMaxTasks, " moves already"));
    }
    auto client = workers_.find(task);
    if (client != workers_.end()) {
      moved_.push_back(std::move(client->second));
      workers_.erase(client);
    }
  } else if (tasks_.size() >= static_cast<size_t>(kMaxTasks)) {
    return absl::ResourceExhaustedError(absl::StrCat("task ", task, " cannot join: the cluster has ", kMaxTasks,
                                                     " tasks, the most a master drives"));
  } else {
    // Before the first worker of higher index, else after the last worker,
    // else last: the cluster's order stays job order, then index.
    auto pos = tasks_.end(), last_worker = tasks_.end();
    for (auto it = tasks_.begin(); it != tasks_.end(); ++it) {
      absl::StatusOr<DeviceName> t = DeviceName::Parse(*it);
      if (!t.ok() || t->job != "worker") continue;
      if (t->task > index) {
        pos = it;
        break;
      }
      last_worker = it;
    }
    if (pos == tasks_.end() && last_worker != tasks_.end()) pos = last_worker + 1;
    tasks_.insert(pos, task);
  }
  addresses_[task] = address;
  JobDef* job = nullptr;
  for (JobDef& j : *cluster_.mutable_job()) {
    if (j.name() == "worker") job = &j;
  }
  if (job == nullptr) {
    job = cluster_.add_job();
    job->set_name("worker");
  }
  (*job->mutable_tasks())[index] = address;
  return true;
}

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
  absl::MutexLock lock(&mu_);
  auto addr = addresses_.find(task);
  if (addr == addresses_.end()) return nullptr;
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
