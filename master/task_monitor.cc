#include "master/task_monitor.h"

#include <memory>
#include <set>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "common/logging.h"
#include "master/cluster_probe.h"

namespace weft {
namespace master {

std::vector<TaskHealth> ProbeTasks(WorkerCacheInterface* workers, absl::Duration timeout) {
  ClusterProbe probe = ProbeCluster(workers, timeout);
  std::vector<TaskHealth> out(probe.tasks.size());
  for (size_t i = 0; i < probe.tasks.size(); ++i) {
    TaskProbe& t = probe.tasks[i];
    TaskHealth& h = out[i];
    h.task = std::move(t.task);
    if (!t.status.ok()) {
      h.error = std::move(t.status);
    } else {
      h.answered = true;
      h.incarnation = t.response.incarnation();
      h.draining = t.response.draining();
    }
  }
  return out;
}

std::vector<TaskFailure> FailedTasks(const std::vector<TaskHealth>& probe,
                                     const std::map<std::string, uint64_t>& known) {
  std::vector<TaskFailure> failed;
  for (const TaskHealth& h : probe) {
    auto it = known.find(h.task);
    if (it == known.end()) continue;
    if (!h.answered) {
      failed.push_back({h.task, absl::StrCat("unreachable: ", h.error.message())});
    } else if (h.incarnation != it->second) {
      failed.push_back({h.task, absl::StrCat("restarted (incarnation ", absl::Hex(it->second), " -> ",
                                             absl::Hex(h.incarnation), "), losing its state")});
    }
  }
  return failed;
}

namespace {

// Probes every `poll` until `done(probe, &missing)` holds; `missing` names
// what is still awaited, for the deadline's error.
absl::Status PollTasks(WorkerCacheInterface* workers, absl::Duration limit, const std::function<bool()>& stop,
                       absl::Duration poll,
                       const std::function<bool(const std::vector<TaskHealth>&, std::vector<std::string>*)>& done) {
  const absl::Time deadline = absl::Now() + limit;
  for (;;) {
    std::vector<std::string> missing;
    if (done(ProbeTasks(workers, std::min(poll * 5, absl::Seconds(2))), &missing)) return absl::OkStatus();
    if (stop && stop()) return absl::CancelledError("stopped waiting for the job's tasks (cancel or preemption)");
    if (absl::Now() >= deadline) {
      return absl::DeadlineExceededError(absl::StrCat("waited ", absl::FormatDuration(limit),
                                                      " for the job's tasks; still missing: ",
                                                      absl::StrJoin(missing, "; ")));
    }
    // Waiting for a process to be restarted: the poll interval bounds how
    // late recovery notices it.
    absl::SleepFor(std::min(poll, deadline - absl::Now()));
  }
}

std::string Missing(const TaskHealth& h) {
  return h.answered ? absl::StrCat(h.task, " (stopping after SIGTERM)")
                    : absl::StrCat(h.task, " (", h.error.message(), ")");
}

}  // namespace

absl::StatusOr<std::map<std::string, uint64_t>> WaitForTasks(WorkerCacheInterface* workers, absl::Duration limit,
                                                             const std::function<bool()>& stop,
                                                             absl::Duration poll) {
  std::map<std::string, uint64_t> incarnations;
  absl::Status s = PollTasks(workers, limit, stop, poll, [&](const std::vector<TaskHealth>& probe,
                                                             std::vector<std::string>* missing) {
    incarnations.clear();
    for (const TaskHealth& h : probe) {
      if (h.answered && !h.draining) {
        incarnations[h.task] = h.incarnation;
      } else {
        missing->push_back(Missing(h));
      }
    }
    return missing->empty();
  });
  if (!s.ok()) return s;
  return incarnations;
}

absl::StatusOr<uint64_t> WaitForRestart(WorkerCacheInterface* workers, const std::string& task,
                                        uint64_t old_incarnation, absl::Duration limit,
                                        const std::function<bool()>& stop, absl::Duration poll) {
  uint64_t incarnation = 0;
  absl::Status s = PollTasks(workers, limit, stop, poll, [&](const std::vector<TaskHealth>& probe,
                                                             std::vector<std::string>* missing) {
    for (const TaskHealth& h : probe) {
      if (h.task != task) continue;
      if (h.answered && !h.draining && h.incarnation != old_incarnation) {
        incarnation = h.incarnation;
        return true;
      }
      missing->push_back(h.answered && !h.draining ? absl::StrCat(task, " (not restarted yet)") : Missing(h));
    }
    if (missing->empty()) missing->push_back(absl::StrCat(task, " (not in the cluster)"));
    return false;
  });
  if (!s.ok()) return s;
  return incarnation;
}

Heartbeat::Heartbeat(WorkerCacheInterface* workers, std::map<std::string, uint64_t> known, absl::Duration interval,
                     absl::Duration timeout, std::function<void(const TaskFailure&)> on_failure,
                     std::function<void(const std::string& task)> on_draining)
    : workers_(workers),
      known_(std::move(known)),
      interval_(interval),
      timeout_(timeout),
      on_failure_(std::move(on_failure)),
      on_draining_(std::move(on_draining)),
      thread_([this] { Loop(); }) {}

Heartbeat::~Heartbeat() {
  stop_.Notify();
  thread_.join();
}

void Heartbeat::Update(const std::string& task, uint64_t incarnation) {
  absl::MutexLock lock(&mu_);
  known_[task] = incarnation;
  reported_.erase(task);
}

void Heartbeat::Loop() {
  std::set<std::string> draining;
  while (!stop_.WaitForNotificationWithTimeout(interval_)) {
    std::vector<TaskHealth> probe = ProbeTasks(workers_, timeout_);
    if (stop_.HasBeenNotified()) return;
    for (const TaskHealth& h : probe) {
      if (h.answered && h.draining && draining.insert(h.task).second && on_draining_) on_draining_(h.task);
    }
    std::vector<TaskFailure> fresh;
    {
      absl::MutexLock lock(&mu_);
      for (TaskFailure& f : FailedTasks(probe, known_)) {
        if (reported_.insert(f.task).second) fresh.push_back(std::move(f));
      }
    }
    for (const TaskFailure& f : fresh) {
      Logger("master")->warn("heartbeat: task {} {}", f.task, f.reason);
      if (on_failure_) on_failure_(f);
    }
  }
}

}  // namespace master
}  // namespace weft
