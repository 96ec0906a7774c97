#include "master/cluster_probe.h"

#include <memory>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"

namespace weft {
namespace master {

ClusterProbe ProbeCluster(WorkerCacheInterface* workers, absl::Duration timeout) {
  // The calls may outlive this function (a task that does not answer in
  // time): their state is shared with the callbacks.
  struct Calls {
    absl::Mutex mu;
    int pending ABSL_GUARDED_BY(mu) = 0;
    std::vector<GetStatusRequest> requests;
    std::vector<GetStatusResponse> responses;  // responses[i] is the worker's until done[i]
    std::vector<absl::Status> statuses ABSL_GUARDED_BY(mu);
    std::vector<bool> done ABSL_GUARDED_BY(mu);
  };
  const std::vector<std::string> tasks = workers->ListTasks();
  const size_t n = tasks.size();
  auto calls = std::make_shared<Calls>();
  calls->requests.resize(n);
  calls->responses.resize(n);
  // Not under calls->mu: a cache may take its own lock, which a worker may
  // hold while it runs a callback that takes calls->mu.
  std::vector<WorkerInterface*> clients(n);
  for (size_t i = 0; i < n; ++i) clients[i] = workers->GetOrCreateWorker(tasks[i]);
  {
    absl::MutexLock lock(&calls->mu);
    calls->statuses.resize(n);
    calls->done.assign(n, false);
    for (size_t i = 0; i < n; ++i) {
      if (clients[i] == nullptr) {
        calls->statuses[i] = absl::NotFoundError("the worker cache has no client for the task");
        calls->done[i] = true;
      } else {
        ++calls->pending;
      }
    }
  }
  for (size_t i = 0; i < n; ++i) {
    if (clients[i] == nullptr) continue;
    clients[i]->GetStatusAsync(&calls->requests[i], &calls->responses[i], [calls, i](const absl::Status& s) {
      absl::MutexLock lock(&calls->mu);
      calls->statuses[i] = s;
      calls->done[i] = true;
      --calls->pending;
    });
  }

  ClusterProbe probe;
  probe.tasks.resize(n);
  absl::MutexLock lock(&calls->mu);
  calls->mu.AwaitWithTimeout(absl::Condition(+[](int* pending) { return *pending == 0; }, &calls->pending),
                             timeout);
  for (size_t i = 0; i < n; ++i) {
    TaskProbe& t = probe.tasks[i];
    t.task = tasks[i];
    t.has_client = clients[i] != nullptr;
    if (!calls->done[i]) {
      // The worker may still write responses[i]: leave it alone.
      t.status = absl::DeadlineExceededError(
          absl::StrCat("task ", tasks[i], ": no answer to GetStatus within ", absl::FormatDuration(timeout)));
    } else {
      t.status = calls->statuses[i];
      if (t.status.ok()) t.response = std::move(calls->responses[i]);
    }
  }
  return probe;
}

absl::StatusOr<std::vector<DeviceAttributes>> ClusterDevices(const ClusterProbe& probe) {
  std::vector<DeviceAttributes> devices;
  for (const TaskProbe& t : probe.tasks) {
    if (!t.has_client) {
      return WithTask(absl::NotFoundError(absl::StrCat("task ", t.task, " is not in the cluster")), t.task);
    }
    if (!t.status.ok()) return WithTask(t.status, t.task);
    for (const DeviceAttributes& d : t.response.device()) devices.push_back(d);
  }
  return devices;
}

absl::StatusOr<std::vector<DeviceAttributes>> ListClusterDevices(WorkerCacheInterface* workers) {
  return ClusterDevices(ProbeCluster(workers));
}

}  // namespace master
}  // namespace weft
