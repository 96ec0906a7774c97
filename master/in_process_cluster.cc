#include "master/in_process_cluster.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "graph/device_name.h"

namespace weft {
namespace master {

absl::StatusOr<std::unique_ptr<InProcessCluster>> InProcessCluster::Create(const std::vector<std::string>& tasks,
                                                                           const worker::WorkerOptions& options) {
  std::unique_ptr<InProcessCluster> c(new InProcessCluster());
  for (const std::string& t : tasks) {
    ASSIGN_OR_RETURN(DeviceName d, DeviceName::Parse(t));
    if (d.job.empty() || d.task < 0 || !d.type.empty()) {
      return absl::InvalidArgumentError(absl::StrCat("'", t, "' is not a task name like /job:worker/task:0"));
    }
    worker::WorkerOptions o = options;
    o.job = d.job;
    o.task_index = d.task;
    o.puller = &c->puller_;
    auto w = std::make_unique<worker::Worker>(o);
    c->puller_.AddWorker(w.get());
    if (!c->workers_.emplace(w->task(), std::move(w)).second) {
      return absl::InvalidArgumentError(absl::StrCat("task ", t, " is listed twice"));
    }
  }
  InProcessCluster* self = c.get();
  ASSIGN_OR_RETURN(c->cache_, WorkerCache::CreateLocal(tasks, [self](const std::string& task, const std::string&) {
                     return std::make_unique<worker::LocalWorker>(self->workers_.at(task).get());
                   }));
  return c;
}

InProcessCluster::~InProcessCluster() {
  cache_.reset();
  // Every worker stops its steps before any is destroyed: a step on one may
  // still pull from another.
  for (auto& [task, w] : workers_) w->Shutdown();
  workers_.clear();
}

worker::Worker* InProcessCluster::worker(const std::string& task) {
  auto it = workers_.find(task);
  return it == workers_.end() ? nullptr : it->second.get();
}

}  // namespace master
}  // namespace weft
