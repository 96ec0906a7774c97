// GraphMgr's pipelined steps: a RunGraph that names the step before it
// (RunGraphRequest.after_step_id) waits here, without a thread, until that
// step has ended on this task. See graph_mgr.h.
#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "worker/graph_mgr.h"

namespace weft {
namespace worker {

namespace {

absl::Status PredecessorFailed(const RunGraphRequest& request, int64_t before, const absl::Status& failure) {
  return absl::AbortedError(absl::StrCat("step ", before, ", which step ", request.step_id(), " follows on graph ",
                                         request.graph_handle(), ", failed: ", failure.message()));
}

}  // namespace

absl::StatusOr<bool> GraphMgr::Admit(QueuedRun& run) {
  const RunGraphRequest& request = *run.request;
  const int64_t before = request.after_step_id();
  if (before == 0) return true;
  if (before >= request.step_id()) {
    return absl::InvalidArgumentError(absl::StrCat("after_step_id ", before, " must be below the step's id ",
                                                   request.step_id()));
  }
  absl::MutexLock lock(&mu_);
  if (cancelled_.load(std::memory_order_acquire)) return cancel_status_;  // nothing would release it
  auto held = graphs_.find(request.graph_handle());
  if (held == graphs_.end() || held->second->session_handle != request.session_handle()) {
    return NotRegistered(request.session_handle(), request.graph_handle());
  }
  const std::shared_ptr<Item>& item = held->second;
  const int remembered = std::min(item->ended_count, kRememberedEnds);
  int64_t oldest = INT64_MAX;
  for (int i = 0; i < remembered; ++i) {
    const auto& [step, status] = item->ended[i];
    if (step == before) {
      if (!status.ok()) return PredecessorFailed(request, before, status);
      return true;
    }
    oldest = std::min(oldest, step);
  }
  // Steps end in the order they were sent: one older than every remembered
  // end ended long ago.
  if (remembered == kRememberedEnds && before < oldest) return true;
  const int waiting = static_cast<int>(
      std::count_if(queued_.begin(), queued_.end(), [&](const Queued& q) { return q.item == item; }));
  if (waiting >= limits_.max_queued_steps) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "graph ", request.graph_handle(), " already has ", waiting, " steps waiting on task ", task_,
        " for the steps before them, its quota (--max_queued_steps=", limits_.max_queued_steps, ")"));
  }
  queued_.push_back(Queued{item, std::move(run)});
  return false;
}

std::optional<std::pair<QueuedRun, absl::Status>> GraphMgr::Ended(const RunGraphRequest& request,
                                                                  const absl::Status& status) {
  absl::MutexLock lock(&mu_);
  auto it = graphs_.find(request.graph_handle());
  if (it != graphs_.end() && it->second->session_handle == request.session_handle()) {
    Item& item = *it->second;
    item.ended[item.ended_count % kRememberedEnds] = {request.step_id(), status};
    ++item.ended_count;
  }
  for (auto q = queued_.begin(); q != queued_.end(); ++q) {
    const RunGraphRequest& next = *q->run.request;
    if (next.after_step_id() != request.step_id() || q->item->handle != request.graph_handle()) continue;
    std::pair<QueuedRun, absl::Status> released{std::move(q->run), absl::OkStatus()};
    if (!status.ok()) released.second = PredecessorFailed(next, request.step_id(), status);
    queued_.erase(q);
    return released;
  }
  return std::nullopt;
}

std::vector<QueuedRun> GraphMgr::TakeQueued(const std::function<bool(const RunGraphRequest&)>& which) {
  std::vector<QueuedRun> taken;
  absl::MutexLock lock(&mu_);
  for (auto q = queued_.begin(); q != queued_.end();) {
    if (!which(*q->run.request)) {
      ++q;
      continue;
    }
    taken.push_back(std::move(q->run));
    q = queued_.erase(q);
  }
  return taken;
}

}  // namespace worker
}  // namespace weft
