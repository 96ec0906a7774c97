#include "master/job_runner.h"

#include <algorithm>
#include <chrono>
#include <map>
#include <optional>
#include <utility>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "common/logging.h"
#include "common/status_macros.h"
#include "master/checkpoint_hook.h"
#include "master/cluster_probe.h"
#include "master/dataset_push.h"
#include "master/evaluation.h"
#include "master/task_monitor.h"
#include "runtime/data/dataset.h"
#if WEFT_WITH_NCCL
#include "runtime/gpu/nccl_communicators.h"
#endif

namespace weft {
namespace master {
namespace {

using Clock = std::chrono::steady_clock;

double Seconds(Clock::time_point since) { return std::chrono::duration<double>(Clock::now() - since).count(); }

int64_t NowUnixMillis() { return absl::ToUnixMillis(absl::Now()); }

// The NCCL unique ids of all-reduce groups on GPUs. Made here because the
// maker hosts NCCL's bootstrap root until every rank has joined, and the
// master outlives the job's workers' setup; a build without NCCL makes none.
NcclIdGenerator NcclIdsOfThisBuild() {
#if WEFT_WITH_NCCL
  return [] { return gpu::NewNcclUniqueId(); };
#else
  return nullptr;
#endif
}

}  // namespace

JobRunner::JobRunner(JobSpec job, TrainingGraph training, std::string session_handle,
                     WorkerCacheInterface* workers, JobRunnerOptions options)
    : job_(std::move(job)),
      training_(std::move(training)),
      session_handle_(std::move(session_handle)),
      members_(job_.has_elastic() ? std::make_unique<MemberWorkers>(workers) : nullptr),
      snapshot_(members_ == nullptr ? std::make_unique<TaskSnapshot>(workers) : nullptr),
      workers_(members_ != nullptr ? static_cast<WorkerCacheInterface*>(members_.get()) : snapshot_.get()),
      options_(std::move(options)) {}

JobRunner::~JobRunner() = default;

absl::StatusOr<std::shared_ptr<TraceCollector>> JobRunner::StartTrace(int steps) {
  absl::MutexLock lock(&mu_);
  if (session_ == nullptr) {
    return absl::FailedPreconditionError(
        absl::StrCat("job '", job_.name(), "' runs no steps now (queued, recovering or ending): nothing to trace"));
  }
  auto collector = std::make_shared<TraceCollector>(steps);
  session_->SetTrace(collector);
  return collector;
}

void JobRunner::Cancel() {
  cancelled_.store(true);
  absl::MutexLock lock(&mu_);
  if (session_ != nullptr) session_->AbortRunningSteps(absl::CancelledError(absl::StrCat("job cancelled")));
}

void JobRunner::Preempt() {
  preempted_.store(true);
  // A job without a strategy has no checkpoints: it stops like a cancel.
  if (job_.strategy().kind() == StrategySpec::NONE) Cancel();
}

absl::StatusOr<TrainResult> JobRunner::Run(const std::function<void(const TrainProgress&)>& on_progress) {
  if (snapshot_ != nullptr) snapshot_->Freeze();
  watch_ = std::make_unique<StepWatch>(job_.name(), workers_, options_.step_watch, options_.update_status,
                                       options_.amend_status);
  watch_->ExportMetrics(std::string(absl::StripPrefix(session_handle_, "job/")));
  // A stall the previous master saw is over: its steps are gone.
  if (options_.resumed) UpdateStatus([](JobStatus* s) { s->set_diagnosis_active(false); });
  auto progress = [this, &on_progress](const TrainProgress& p) {
    watch_->NoteProgress(p.step);
    if (on_progress) on_progress(p);
  };
  absl::StatusOr<TrainResult> result =
      job_.strategy().kind() != StrategySpec::NONE ? RunDistributed(progress) : RunUndistributed(progress);
  watch_.reset();  // every session is closed: no step reports to it any more
  return result;
}

TrainResult JobRunner::Cancelled(Clock::time_point created) const {
  TrainResult r;
  r.state = CANCELLED;
  r.job = job_.name();
  r.wall_seconds = Seconds(created);
  return r;
}

TrainResult JobRunner::Preempted(int64_t step) const {
  TrainResult r;
  r.state = PREEMPTED;
  r.job = job_.name();
  r.steps = step;
  return r;
}

absl::StatusOr<MasterSession*> JobRunner::OpenSession(const std::string& handle, const GraphDef& graph,
                                                      const ClusterProbe* probe) {
  MasterSessionOptions session_options;
  session_options.observer = watch_.get();
  ASSIGN_OR_RETURN(std::unique_ptr<MasterSession> owned,
                   probe != nullptr ? MasterSession::Create(handle, graph, workers_, *probe, session_options)
                                    : MasterSession::Create(handle, graph, workers_, session_options));
  MasterSession* session = owned.get();
  absl::MutexLock lock(&mu_);
  session_ = std::move(owned);
  return session;
}

void JobRunner::CloseSession() {
  std::unique_ptr<MasterSession> owned;
  {
    absl::MutexLock lock(&mu_);
    owned = std::move(session_);
  }
  CloseOwned(std::move(owned));
}

void JobRunner::CloseOwned(std::unique_ptr<MasterSession> owned) const {
  if (owned == nullptr) return;
  absl::Status closed = owned->Close();
  if (!closed.ok()) Logger("master")->warn("job '{}': closing its session: {}", job_.name(), closed.ToString());
}

absl::StatusOr<TrainResult> JobRunner::RunUndistributed(
    const std::function<void(const TrainProgress&)>& on_progress) {
  const Clock::time_point created = Clock::now();
  // The task that trains reads the examples; the master counts them from the
  // files' headers for the epoch's steps.
  ASSIGN_OR_RETURN(const int64_t train_examples, data::CountExamples(job_.dataset(), /*train=*/true));
  ASSIGN_OR_RETURN(const DistributedPlan plan, PlanUndistributedJob(job_, training_));
  if (cancelled_.load()) return Cancelled(created);  // before any task does work for the job
  // The session's default device reads the data: every worker may be it.
  std::vector<std::string> readers;
  for (const std::string& t : workers_->ListTasks()) {
    if (absl::StartsWith(t, "/job:worker/")) readers.push_back(t);
  }
  RETURN_IF_ERROR(ShipDataset(readers));
  ASSIGN_OR_RETURN(MasterSession * session, OpenSession(session_handle_, plan.graph));
  absl::StatusOr<TrainResult> result = Train(session, plan, train_examples, created, on_progress);
  CloseSession();
  if (result.ok()) result->wall_seconds = Seconds(created);
  return result;
}

// LocalTrainer's loop (runtime/training_loop.h), each step one session Run
// whose batch the task reads itself.
absl::StatusOr<TrainResult> JobRunner::Train(MasterSession* session, const DistributedPlan& plan,
                                             int64_t train_examples, Clock::time_point created,
                                             const std::function<void(const TrainProgress&)>& on_progress) {
  Logger("master")->info("job '{}' runs on {} device(s)", job_.name(), session->devices().size());
  const std::vector<std::string> fetches = {training_.loss};
  const std::vector<std::string> targets = {training_.train_op};
  const int64_t batch = plan.replica_batch;
  StepSource source;
  source.examples = train_examples;
  source.batches_per_epoch = train_examples / batch;  // the last partial batch is dropped
  source.step = [&, out = std::vector<Tensor>()](int64_t) mutable -> absl::StatusOr<StepResult> {
    RETURN_IF_ERROR(session->Run({}, fetches, targets, &out));
    return StepResult{out[0].data<float>()[0], batch, 1};
  };
  source.evaluate = DistributedEvaluation(plan, session, &cancelled_);
  return RunTrainingLoop(job_, source, on_progress, &cancelled_, created);
}

// A job with a strategy: the replicated graph, each replica reading its
// shard on its task; sync steps run every replica at once, async replicas
// each run their own steps on a thread, as fast as they go, and so do k-of-N
// sync replicas, whose job steps are the ps's global steps. Attempts follow
// one another until one ends the job; between them the job recovers.
absl::StatusOr<TrainResult> JobRunner::RunDistributed(const std::function<void(const TrainProgress&)>& on_progress) {
  const Clock::time_point created = Clock::now();
  Env* env = options_.env != nullptr ? options_.env : Env::Default();
  CheckpointerOptions checkpointer_options;
  checkpointer_options.root = options_.checkpoint_root;
  checkpointer_options.owner = options_.owner;
  checkpointer_options.observer = watch_.get();
  ASSIGN_OR_RETURN(std::unique_ptr<Checkpointer> checkpointer,
                   Checkpointer::Create(env, workers_, job_.name(), job_.checkpoint(),
                                        std::move(checkpointer_options)));
  // The epoch's steps come from the training split's size, read from its
  // files' headers: the examples themselves stay on the workers.
  ASSIGN_OR_RETURN(int64_t train_examples, data::CountExamples(job_.dataset(), /*train=*/true));
  if (members_ != nullptr) RETURN_IF_ERROR(ChooseFirstMembers());
  ASSIGN_OR_RETURN(std::optional<ps::CheckpointEntry> resume, StartingPoint(checkpointer.get()));
  // A failed elastic attempt's session may still be open when the job ends.
  absl::Cleanup close_retired = [this] { CloseRetiredSession(); };
  int restarts = 0;
  for (int attempt = 0;; ++attempt) {
    if (preempted_.load() && !cancelled_.load()) return Preempted(resume.has_value() ? resume->step : 0);
    if (cancelled_.load()) return Cancelled(created);
    AttemptState a;
    absl::StatusOr<TrainResult> result =
        RunAttempt(attempt, resume, checkpointer.get(), train_examples, on_progress, &a);
    if (result.ok()) {
      result->wall_seconds = Seconds(created);
      return result;
    }
    if (cancelled_.load()) return result;
    ASSIGN_OR_RETURN(std::optional<TrainResult> ended,
                     Recover(result.status(), &a, &restarts, checkpointer.get(), &resume));
    if (ended.has_value()) return *std::move(ended);
  }
}

absl::StatusOr<TrainResult> JobRunner::RunAttempt(int attempt, const std::optional<ps::CheckpointEntry>& resume,
                                                  Checkpointer* checkpointer, int64_t train_examples,
                                                  const std::function<void(const TrainProgress&)>& on_progress,
                                                  AttemptState* a) {
  const Clock::time_point started = Clock::now();
  int64_t start_step = resume.has_value() ? resume->step : from_memory_ ? memory_step_ : 0;
  // One probe of the cluster plans the attempt and opens its session.
  const ClusterProbe probe = ProbeCluster(workers_);
  ASSIGN_OR_RETURN(DistributedPlan plan, PlanAttempt(start_step, probe));
  RETURN_IF_ERROR(ShipDataset(plan.replica_tasks));
  // An elastic job keeps one session handle: a task's variables belong to
  // it, and the next attempt's graphs share them while the last one's are
  // still registered.
  const std::string handle = attempt == 0 || members_ != nullptr
                                 ? session_handle_
                                 : absl::StrCat(session_handle_, "/attempt-", attempt);
  ASSIGN_OR_RETURN(MasterSession * session, OpenSession(handle, plan.graph, &probe));
  if (from_memory_) {
    absl::Status resumed = ResumeFromMembers(handle, probe, &plan, &session, &start_step);
    if (!resumed.ok()) {
      RetireSession();
      return resumed;
    }
  }
  watch_->SetPeers(plan.replica_tasks);
  // From here on a failed or restarted task aborts the running steps, so
  // that none waits for a peer that is gone.
  std::unique_ptr<Heartbeat> heartbeat = WatchTasks(plan, session, a);
  std::unique_ptr<MembershipWatch> membership = WatchMembership(a);
  const absl::Status ready = PrepareAttempt(attempt, handle, plan, session, resume, start_step, checkpointer);
  if (ready.ok() && change_restores_) {
    change_restores_ = false;
    RecordMembershipChange(start_step, plan.replica_tasks,
                           resume.has_value() ? absl::StrCat("from the checkpoint ", resume->path)
                                              : "no checkpoint yet: from the start");
  }
  Logger("master")->info("job '{}': {} with {} replica(s) of batch {}{}", job_.name(),
                         StrategySpec::Kind_Name(job_.strategy().kind()), plan.num_replicas, plan.replica_batch,
                         attempt > 0 ? absl::StrCat(" (attempt ", attempt + 1, ")") : "");
  absl::StatusOr<TrainResult> result = absl::InternalError("the attempt did not train");
  if (!ready.ok()) {
    result = ready;
  } else {
    // Async replicas take turns in the count: an epoch is the steps that
    // together see each example once. A global step of k-of-N replicas
    // trains on k replicas' batches.
    const StepCounts counts = CountSteps(job_, train_examples, plan.num_replicas, plan.replica_batch, plan.sync,
                                         plan.replicas_to_aggregate);
    StepDriver driver(job_, plan, session, counts, start_step, &cancelled_, ReplicaRecoveryOf(a));
    CheckpointHook checkpoints(job_, checkpointer, handle, a, &driver, &preempted_, options_.update_status);
    StepSource source;
    source.examples = train_examples;
    source.start_step = start_step;
    source.batches_per_epoch = counts.batches_per_epoch;
    source.step = [&driver](int64_t max_steps) { return driver.Step(max_steps); };
    source.after_steps = [&checkpoints](int64_t step) { return checkpoints.AfterSteps(step); };
    source.evaluate = DistributedEvaluation(plan, session, &cancelled_);
    result = RunTrainingLoop(job_, source, on_progress, &cancelled_, started);
    a->over.store(true);
    if (!result.ok() && a->preempted) result = Preempted(a->reached_step.load());
    // The last state of a finished job, for a later job to start from.
    if (result.ok() && result->state == SUCCEEDED) {
      if (absl::Status s = checkpoints.Finish(result->steps); !s.ok()) result = s;
    }
    driver.Stop();
  }
  if (!result.ok()) session->AbortRunningSteps(result.status());
  membership.reset();
  a->heartbeat = nullptr;
  heartbeat.reset();
  a->session = nullptr;
  // A failed elastic attempt's graphs keep its variables for the next.
  if (!result.ok() && members_ != nullptr) {
    RetireSession();
  } else {
    CloseSession();
  }
  return result;
}

ReplicaRecovery JobRunner::ReplicaRecoveryOf(AttemptState* a) {
  // Only async replicas use it. An elastic job's replica whose worker does
  // not come back ends the attempt, and the members change then.
  if (job_.strategy().kind() != StrategySpec::PARAMETER_SERVER || job_.recovery().max_restarts() < 0) {
    return nullptr;
  }
  return [this, a](const absl::Status& error, const std::string& task) { return RecoverReplica(error, task, a); };
}

absl::StatusOr<DistributedPlan> JobRunner::PlanAttempt(int64_t start_step, const ClusterProbe& probe) {
  auto log = Logger("master");
  ASSIGN_OR_RETURN(std::vector<DeviceAttributes> attrs, ClusterDevices(probe));
  std::vector<std::string> devices;
  for (const DeviceAttributes& d : attrs) devices.push_back(d.name());
  NcclIdGenerator nccl_ids = NcclIdsOfThisBuild();
  if (nccl_ids != nullptr) {
    const std::string why_not = WhyNotNccl(attrs);
    if (!why_not.empty()) {
      log->info("job '{}': no NCCL: {}; GPU all-reduces take the gRPC ring", job_.name(), why_not);
      nccl_ids = nullptr;
    }
  }
  ASSIGN_OR_RETURN(DistributedPlan plan, PlanDistributedJob(job_, training_, devices, nccl_ids, start_step));
  if (plan.replicated.num_nccl_groups > 0) {
    log->info("job '{}': {} all-reduce group(s) on GPUs reduce through NCCL", job_.name(),
              plan.replicated.num_nccl_groups);
  }
  if (!plan.replicated.nccl_id_status.ok()) {
    log->warn("job '{}': {}; those GPUs all-reduce through host copies and the gRPC ring instead", job_.name(),
              plan.replicated.nccl_id_status.ToString());
  }
  return plan;
}

absl::Status JobRunner::ShipDataset(const std::vector<std::string>& tasks) {
  const std::string& id = job_.dataset().upload_id();
  if (id.empty()) return absl::OkStatus();
  if (options_.uploads == nullptr) {
    return absl::FailedPreconditionError(absl::StrCat("job '", job_.name(), "' names upload_id ", id,
                                                      " but this master keeps no uploaded datasets"));
  }
  return PushDataset(*options_.uploads, id, workers_, tasks);
}

std::unique_ptr<Heartbeat> JobRunner::WatchTasks(const DistributedPlan& plan, MasterSession* session,
                                                 AttemptState* a) {
  a->session = session;
  a->replica_tasks = plan.replica_tasks;
  for (const std::string& t : workers_->ListTasks()) {
    if (std::find(plan.replica_tasks.begin(), plan.replica_tasks.end(), t) == plan.replica_tasks.end()) {
      a->ps_tasks.insert(t);
    }
  }
  {
    absl::MutexLock lock(&a->mu);
    a->incarnations = session->task_incarnations();
  }
  const RecoverySettings recovery = EffectiveRecovery(job_);
  auto heartbeat = std::make_unique<Heartbeat>(
      workers_, session->task_incarnations(), recovery.heartbeat_interval, recovery.heartbeat_timeout,
      [a, session](const TaskFailure& f) {
        {
          absl::MutexLock lock(&a->mu);
          if (!a->heartbeat_failure.has_value()) a->heartbeat_failure = f;
        }
        session->AbortRunningSteps(absl::UnavailableError(absl::StrCat("task ", f.task, " ", f.reason)));
      },
      [a](const std::string& task) {
        absl::MutexLock lock(&a->mu);
        if (a->draining.empty()) a->draining = task;
      });
  a->heartbeat = heartbeat.get();
  return heartbeat;
}

absl::Status JobRunner::PrepareAttempt(int attempt, const std::string& handle, const DistributedPlan& plan,
                                       MasterSession* session, const std::optional<ps::CheckpointEntry>& resume,
                                       int64_t start_step, Checkpointer* checkpointer) {
  // The training signatures, registered before a restore so that every task
  // holding variables knows the session.
  if (resume.has_value()) {
    for (const auto& [fetches, targets] : TrainingSignatures(plan)) {
      RETURN_IF_ERROR(session->Prepare(fetches, targets));
    }
    // An elastic mirrored job's members each take a whole replica, from
    // their own shard or another's (they need not be the tasks that saved).
    const bool mirrored_members = members_ != nullptr && !SharesVariables();
    RETURN_IF_ERROR(checkpointer->Restore(handle, *resume,
                                          mirrored_members ? plan.replica_tasks : std::vector<std::string>{}));
  }
  if (attempt > 0 || options_.resumed) {
    UpdateStatus([&](JobStatus* s) {
      // After a failure; a membership change asked for between steps
      // leaves the job RUNNING and its last recovery as it was.
      const bool recovered = s->state() == RECOVERING;
      s->set_state(RUNNING);
      s->set_step(start_step);  // where training resumes
      if (s->failure_time_unix_ms() > 0 && recovered) {
        s->set_recovery_seconds(static_cast<double>(NowUnixMillis() - s->failure_time_unix_ms()) / 1000.0);
      }
    });
  }
  return absl::OkStatus();
}

}  // namespace master
}  // namespace weft
