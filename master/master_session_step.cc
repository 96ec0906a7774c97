// MasterSession's steps: RunGraph on every partition of a plan, AbortStep
// when one fails, and the cleanup of finished steps on their tasks.
#include "master/master_session.h"

#include <functional>
#include <memory>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "common/logging.h"
#include "common/status_macros.h"
#include "common/tensor_proto_coding.h"
#include "runtime/trace_recorder.h"
#include "master/master_session_internal.h"

namespace weft {
namespace master {
namespace session_internal {

// One step in flight: its RunGraph calls and the AbortStep calls that a
// failure or AbortRunningSteps sends. Callbacks hold a reference, so the
// state outlives every call it issued. Nothing here waits: the thread of
// the last answer carries the step on (OnRunsDone, WhenAbortsDone).
class Step : public std::enable_shared_from_this<Step> {
 public:
  Step(int64_t step_id, std::shared_ptr<const Plan> plan, StepObserver* observer)
      : step_id_(step_id),
        plan_(std::move(plan)),
        observer_(observer),
        requests_(plan_->parts.size()),
        responses_(plan_->parts.size()) {}

  int64_t step_id() const { return step_id_; }
  // Pipelining (RunAsync's after_previous), under the session's mutex: the
  // step came with after_previous, and the step started behind it (0: none).
  bool chained = false;
  int64_t successor = 0;
  // Every task runs this step after its step `before` (before Start).
  void After(int64_t before) {
    for (RunGraphRequest& r : requests_) r.set_after_step_id(before);
  }
  const Plan& plan() const { return *plan_; }
  RunGraphRequest* request(int i) { return &requests_[i]; }
  const RunGraphResponse& response(int i) const { return responses_[i]; }

  // Asks every task for a trace of this step (before Start).
  void TraceThisStep() {
    traced_ = true;
    for (RunGraphRequest& r : requests_) r.set_trace(true);
    answered_us_.assign(plan_->parts.size(), 0);
  }
  // After WaitRuns: each task's part of a traced step.
  std::vector<TracedCall> TracedCalls() const {
    std::vector<TracedCall> calls(plan_->parts.size());
    for (size_t i = 0; i < calls.size(); ++i) {
      calls[i].task = plan_->parts[i].task;
      calls[i].step_id = step_id_;
      calls[i].sent_us = sent_us_;
      calls[i].answered_us = answered_us_[i];
      calls[i].trace = responses_[i].trace();
    }
    return calls;
  }

  // Called once, on the thread of the last RunGraph answer, after any
  // AbortStep that a failure among them sends has been issued. Set before
  // Start.
  void OnRunsDone(std::function<void()> fn) { on_runs_done_ = std::move(fn); }

  void Start(absl::Duration timeout, absl::Time now) {
    start_ = now;
    if (traced_) sent_us_ = TraceRecorder::NowMicros();
    {
      absl::MutexLock lock(&mu_);
      pending_runs_ = static_cast<int>(plan_->parts.size());
    }
    if (plan_->parts.empty()) return on_runs_done_();  // no answer will come to end it
    auto self = shared_from_this();
    for (size_t i = 0; i < plan_->parts.size(); ++i) {
      const Partition& p = plan_->parts[i];
      p.worker->RunGraphAsync(&requests_[i], &responses_[i], timeout,
                              [self, i](const absl::Status& s) { self->RunDone(i, s); });
    }
  }

  // Sends AbortStep(reason) to every task of the step except `except_task`
  // and those already told. Returns at once.
  void Abort(const absl::Status& reason, const std::string& except_task) {
    std::vector<std::pair<WorkerInterface*, Abortion*>> calls;
    {
      absl::MutexLock lock(&mu_);
      if (ended_) return;  // WhenAbortsDone: too late, the cleanup may be under way
      for (const Partition& p : plan_->parts) {
        if (p.task == except_task || !aborted_.insert(p.task).second) continue;
        auto a = std::make_unique<Abortion>();
        a->request.set_step_id(step_id_);
        a->request.set_code(static_cast<int>(reason.code()));
        a->request.set_message(std::string(reason.message()));
        a->task = p.task;
        calls.emplace_back(p.worker, a.get());
        abortions_.push_back(std::move(a));
        ++pending_aborts_;
      }
    }
    auto self = shared_from_this();
    for (auto& [worker, a] : calls) {
      worker->AbortStepAsync(&a->request, &a->response, [self, a = a](const absl::Status& s) {
        if (!s.ok()) Logger("master")->debug("AbortStep on {}: {}", a->task, s.ToString());
        std::function<void()> then;
        {
          absl::MutexLock lock(&self->mu_);
          if (--self->pending_aborts_ == 0) then = std::move(self->after_aborts_);
        }
        if (then) then();
      });
    }
  }

  // Runs `fn` once no AbortStep call of this step is under way: now, or on
  // the thread of the last one's answer. Later Abort calls send nothing.
  void WhenAbortsDone(std::function<void()> fn) {
    {
      absl::MutexLock lock(&mu_);
      ended_ = true;
      if (pending_aborts_ > 0) {
        after_aborts_ = std::move(fn);
        return;
      }
    }
    fn();
  }
  // The root cause among the partitions' errors: one that neither an abort
  // nor a failed pull from a peer caused, else the first to arrive.
  absl::Status status() const {
    absl::MutexLock lock(&mu_);
    const absl::Status* best = nullptr;
    int best_rank = 3;
    for (const absl::Status& e : errors_) {
      const int rank = ErrorRank(e);
      if (rank < best_rank) {
        best = &e;
        best_rank = rank;
      }
    }
    return best == nullptr ? absl::OkStatus() : *best;
  }

 private:
  struct Abortion {
    std::string task;
    AbortStepRequest request;
    AbortStepResponse response;
  };

  // 0: a root cause; 1: a _Recv that got a peer's failure; 2: the abort.
  static int ErrorRank(const absl::Status& e) {
    if (e.code() == absl::StatusCode::kAborted || e.code() == absl::StatusCode::kCancelled) return 2;
    if (absl::StrContains(e.message(), "(_Recv): ")) return 1;
    return 0;
  }

  void RunDone(size_t i, const absl::Status& s) {
    const Partition& p = plan_->parts[i];
    if (traced_) answered_us_[i] = TraceRecorder::NowMicros();
    if (observer_ != nullptr) {
      // A pipelined step's time on the task counts from when it started
      // there, not from when it was queued behind the step before.
      absl::Duration elapsed = absl::Now() - start_;
      if (s.ok()) elapsed -= absl::Microseconds(responses_[i].queued_us());
      observer_->RunGraphDone(step_id_, p.task, elapsed, s);
    }
    absl::Status error;
    if (!s.ok()) {
      absl::MutexLock lock(&mu_);
      errors_.push_back(WithTask(s, p.task));
      if (errors_.size() == 1) error = errors_.back();
    }
    // The step cannot finish on the other tasks: their _Recv nodes may wait
    // for tensors this partition will never send. Issued before this answer
    // counts, so the step's end sees the AbortStep calls under way.
    if (!error.ok()) Abort(error, p.task);
    bool last = false;
    {
      absl::MutexLock lock(&mu_);
      last = --pending_runs_ == 0;
    }
    if (last) on_runs_done_();
  }

  const int64_t step_id_;
  const std::shared_ptr<const Plan> plan_;
  StepObserver* const observer_;  // may be null
  absl::Time start_;              // set by Start, before any RunGraph
  bool traced_ = false;           // TraceThisStep, before Start
  int64_t sent_us_ = 0;           // traced: when the RunGraphs went out
  std::vector<int64_t> answered_us_;  // traced: when each answered
  std::vector<RunGraphRequest> requests_;
  std::vector<RunGraphResponse> responses_;
  std::function<void()> on_runs_done_;  // set before Start
  mutable absl::Mutex mu_;
  int pending_runs_ ABSL_GUARDED_BY(mu_) = 0;
  int pending_aborts_ ABSL_GUARDED_BY(mu_) = 0;
  std::vector<absl::Status> errors_ ABSL_GUARDED_BY(mu_);  // in arrival order
  std::set<std::string> aborted_ ABSL_GUARDED_BY(mu_);
  std::vector<std::unique_ptr<Abortion>> abortions_ ABSL_GUARDED_BY(mu_);
  std::function<void()> after_aborts_ ABSL_GUARDED_BY(mu_);  // WhenAbortsDone
  bool ended_ ABSL_GUARDED_BY(mu_) = false;                   // WhenAbortsDone was called
};

}  // namespace session_internal

void MasterSession::SetTrace(std::shared_ptr<TraceCollector> collector) {
  absl::MutexLock lock(&mu_);
  trace_ = std::move(collector);
  trace_armed_.store(trace_ != nullptr, std::memory_order_relaxed);
}

std::shared_ptr<TraceCollector> MasterSession::TraceThisStep() {
  absl::MutexLock lock(&mu_);
  if (trace_ == nullptr) return nullptr;
  if (trace_->TakeStep()) return trace_;
  trace_.reset();  // every step it wanted is taken
  trace_armed_.store(false, std::memory_order_relaxed);
  return nullptr;
}

void MasterSession::StartPlan(std::shared_ptr<const Plan> plan,
                              const std::vector<std::pair<std::string, Tensor>>& feeds, int iterations, bool trains,
                              RunCallback done, bool after_previous) {
  // Iteration i of the run uses step id step_id + i on every task.
  const int64_t step_id = static_cast<int64_t>(step_id_base_ + step_counter_.fetch_add(iterations));
  StepObserver* const observer = options_.observer;
  auto step = std::make_shared<Step>(step_id, plan, observer);
  for (size_t i = 0; i < plan->parts.size(); ++i) {
    RunGraphRequest* r = step->request(static_cast<int>(i));
    r->set_session_handle(handle_);
    r->set_graph_handle(plan->parts[i].graph_handle);
    r->set_step_id(step_id);
    r->set_iterations(iterations);
    for (const std::string& f : plan->parts[i].fetches) r->add_recv_key(f);
    if (plan->carries_cleanup[i]) {
      for (int64_t id : TakeDeferredCleanup(plan->parts[i].task)) r->add_cleanup_step_id(id);
    }
  }
  for (size_t k = 0; k < feeds.size(); ++k) {
    const auto& [part, name] = plan->feed_routes[k];
    if (part < 0) continue;
    NamedTensorProto* send = step->request(part)->add_send();
    send->set_name(name);
    TensorToProto(feeds[k].second, send->mutable_tensor());
  }
  int64_t after = 0;
  {
    absl::MutexLock lock(&mu_);
    if (after_previous) {
      // Behind the newest pipelined step of this plan still running.
      Step* before = nullptr;
      for (const auto& [id, other] : running_) {
        if (other->chained && &other->plan() == plan.get() && (before == nullptr || id > before->step_id())) {
          before = other.get();
        }
      }
      if (before != nullptr) {
        before->successor = step_id;
        after = before->step_id();
        step->After(after);
      }
      step->chained = true;
    }
    running_.emplace(step_id, step);
  }
  std::shared_ptr<TraceCollector> trace =
      trace_armed_.load(std::memory_order_relaxed) ? TraceThisStep() : nullptr;
  if (trace != nullptr) step->TraceThisStep();
  const absl::Time start = absl::Now();
  if (observer != nullptr) observer->StepStarted({step_id, iterations, trains, &plan->tasks, start, after});
  // The step holds itself through its calls; this callback, which the step
  // holds, points at it without owning it, so the two form no cycle.
  Step* const raw = step.get();
  step->OnRunsDone([this, raw, trace = std::move(trace), done = std::move(done)]() mutable {
    EndStep(raw, std::move(trace), std::move(done));
  });
  step->Start(options_.step_timeout, start);
}

void MasterSession::EndStep(Step* step, std::shared_ptr<TraceCollector> trace, RunCallback done) {
  const int64_t step_id = step->step_id();
  if (trace != nullptr) trace->AddStep(step->TracedCalls());
  std::shared_ptr<Step> held, successor;
  const absl::Status status = step->status();
  if (options_.observer != nullptr) options_.observer->StepEnded(step_id, status);
  {
    absl::MutexLock lock(&mu_);
    auto it = running_.find(step_id);
    held = std::move(it->second);
    running_.erase(it);
    if (!status.ok() && held->successor != 0) {
      auto next = running_.find(held->successor);
      if (next != running_.end()) successor = next->second;
    }
  }
  // The step queued behind this one must not run after it failed; a task
  // that never got this step would hold it for ever.
  if (successor != nullptr) {
    successor->Abort(absl::AbortedError(absl::StrCat("step ", step_id, ", which it follows, failed: ",
                                                     status.message())),
                     "");
  }
  // No AbortStep can start now; those under way end before the cleanup, so
  // none reaches a task after its CleanupStep.
  held->WhenAbortsDone([this, held, done = std::move(done)] {
    const Plan& plan = held->plan();
    DeferCleanup(plan, held->step_id());
    std::vector<Tensor> outputs;
    absl::Status status = held->status();
    if (status.ok()) status = TakeFetches(plan, *held, &outputs);
    EndRun();
    done(std::move(status), std::move(outputs));
  });
}

absl::Status MasterSession::TakeFetches(const Plan& plan, const Step& step, std::vector<Tensor>* outputs) const {
  outputs->clear();
  for (size_t k = 0; k < plan.fetch_routes.size(); ++k) {
    const auto& [part, name] = plan.fetch_routes[k];
    const RunGraphResponse& resp = step.response(part);
    const NamedTensorProto* found = nullptr;
    for (const NamedTensorProto& t : resp.recv()) {
      if (t.name() == name) found = &t;
    }
    if (found == nullptr) {
      return absl::InternalError(
          absl::StrCat("task ", plan.parts[part].task, " returned no value for fetch '", name, "'"));
    }
    auto t = TensorFromProto(found->tensor());
    if (!t.ok()) return WithTask(Annotate(t.status(), absl::StrCat("fetch '", name, "'")), plan.parts[part].task);
    outputs->push_back(*std::move(t));
  }
  return absl::OkStatus();
}

void MasterSession::DeferCleanup(const Plan& plan, int64_t step_id) {
  std::vector<std::pair<std::string, std::vector<int64_t>>> flush;
  {
    absl::MutexLock lock(&mu_);
    for (const std::string& task : plan.tasks) {
      std::vector<int64_t>& ids = deferred_cleanup_[task];
      ids.push_back(step_id);
      // A task that this session's recent steps leave out is told directly.
      if (ids.size() >= kMaxDeferredCleanups) flush.emplace_back(task, std::move(ids));
    }
    for (const auto& [task, ids] : flush) deferred_cleanup_.erase(task);
  }
  for (auto& [task, ids] : flush) SendCleanup(task, std::move(ids));
}

std::vector<int64_t> MasterSession::TakeDeferredCleanup(const std::string& task) {
  absl::MutexLock lock(&mu_);
  auto it = deferred_cleanup_.find(task);
  if (it == deferred_cleanup_.end()) return {};
  std::vector<int64_t> ids = std::move(it->second);
  deferred_cleanup_.erase(it);
  return ids;
}

void MasterSession::SendCleanup(const std::string& task, std::vector<int64_t> step_ids) {
  if (step_ids.empty()) return;
  // Fire and forget: no step's result depends on it. Close waits for the
  // calls still under way, so none outlives the session's workers.
  struct Call {
    CleanupStepRequest request;
    CleanupStepResponse response;
  };
  auto call = std::make_shared<Call>();
  call->request.set_step_id(step_ids[0]);
  for (size_t i = 1; i < step_ids.size(); ++i) call->request.add_more_step_id(step_ids[i]);
  {
    absl::MutexLock lock(&mu_);
    ++pending_cleanups_;
  }
  WorkerInterface* w = workers_->GetOrCreateWorker(task);
  w->CleanupStepAsync(&call->request, &call->response, [this, call, task](const absl::Status& s) {
    if (!s.ok()) Logger("master")->warn("CleanupStep {} on {}: {}", call->request.step_id(), task, s.ToString());
    absl::MutexLock lock(&mu_);
    --pending_cleanups_;
  });
}

void MasterSession::AbortRunningSteps(const absl::Status& reason) {
  // Aborted outside mu_: an abort can end a step at once (a task that fails
  // its RunGraph as it takes the AbortStep), and the step's end takes mu_. A
  // step that ends meanwhile ignores the abort (Step::WhenAbortsDone).
  std::vector<std::shared_ptr<Step>> steps;
  {
    absl::MutexLock lock(&mu_);
    for (auto& [id, step] : running_) steps.push_back(step);
  }
  for (auto& step : steps) step->Abort(reason, "");
}

}  // namespace master
}  // namespace weft
