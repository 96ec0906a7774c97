#include "master/job_runner.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <map>
#include <optional>
#include <set>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/logging.h"
#include "common/status_macros.h"
#include "master/distributed_job.h"
#include "master/replica_drivers.h"
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

struct JobRunner::Data {
  data::InMemoryDataset train;
  data::InMemoryDataset test;
  bool can_evaluate = false;  // the graph has `correct`
  Clock::time_point created;
};

JobRunner::JobRunner(JobSpec job, TrainingGraph training, std::string session_handle,
                     WorkerCacheInterface* workers, JobRunnerOptions options)
    : job_(std::move(job)),
      training_(std::move(training)),
      session_handle_(std::move(session_handle)),
      workers_(workers),
      options_(std::move(options)) {}

JobRunner::~JobRunner() = default;

void JobRunner::Cancel() {
  cancelled_.store(true);
  absl::MutexLock lock(&mu_);
  if (session_ != nullptr) session_->AbortRunningSteps(absl::CancelledError(absl::StrCat("job cancelled")));
}

absl::StatusOr<TrainResult> JobRunner::Run(const std::function<void(const TrainProgress&)>& on_progress) {
  if (job_.strategy().kind() != StrategySpec::NONE) return RunDistributed(on_progress);
  if (job_.strategy().replicas_to_aggregate() != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "job '", job_.name(), "': strategy replicas_to_aggregate ", job_.strategy().replicas_to_aggregate(),
        " applies to kind PARAMETER_SERVER with sync: true only, and the job has no strategy kind"));
  }
  Data d;
  d.created = Clock::now();
  d.can_evaluate = !training_.correct.empty();
  const int64_t num_classes = job_.has_model() ? job_.model().num_classes() : 0;
  const std::vector<int64_t> shape(training_.example_shape.dims().begin(), training_.example_shape.dims().end());
  ASSIGN_OR_RETURN(d.train, data::LoadDataset(job_.dataset(), /*train=*/true, shape, num_classes));
  if (!job_.eval().skip() && d.can_evaluate) {
    ASSIGN_OR_RETURN(d.test, data::LoadDataset(job_.dataset(), /*train=*/false, shape, num_classes));
  }

  if (cancelled_.load()) {  // before any task does work for the job
    TrainResult r;
    r.state = "CANCELLED";
    r.job = job_.name();
    r.wall_seconds = Seconds(d.created);
    return r;
  }
  ASSIGN_OR_RETURN(std::unique_ptr<MasterSession> owned,
                   MasterSession::Create(session_handle_, training_.graph->ToGraphDef(), workers_));
  MasterSession* session = owned.get();
  {
    absl::MutexLock lock(&mu_);
    session_ = std::move(owned);
  }
  absl::StatusOr<TrainResult> result = Train(session, d, on_progress);
  {
    absl::MutexLock lock(&mu_);
    owned = std::move(session_);
  }
  absl::Status closed = owned->Close();
  if (!closed.ok()) Logger("master")->warn("job '{}': closing its session: {}", job_.name(), closed.ToString());
  if (result.ok()) result->wall_seconds = Seconds(d.created);
  return result;
}

// LocalTrainer's loop (runtime/training_loop.h), with steps run through the
// session.
absl::StatusOr<TrainResult> JobRunner::Train(MasterSession* session, const Data& d,
                                             const std::function<void(const TrainProgress&)>& on_progress) {
  Logger("master")->info("job '{}' runs on {} device(s)", job_.name(), session->devices().size());
  const std::vector<std::string> fetches = {training_.loss};
  const std::vector<std::string> targets = {training_.train_op};
  TrainingLoopHooks hooks;
  hooks.step = [&, out = std::vector<Tensor>()](const data::Batch& batch) mutable -> absl::StatusOr<float> {
    RETURN_IF_ERROR(
        session->Run({{training_.features, batch.features}, {training_.labels, batch.labels}}, fetches, targets, &out));
    return out[0].data<float>()[0];
  };
  std::vector<std::string> eval_fetches = {training_.correct};
  if (!training_.eval_loss.empty()) eval_fetches.push_back(training_.eval_loss);
  if (d.can_evaluate) {
    hooks.eval_batch = [&, out = std::vector<Tensor>()](
                           const data::Batch& batch) mutable -> absl::StatusOr<std::pair<double, double>> {
      if (cancelled_.load()) return absl::CancelledError("job cancelled during evaluation");
      RETURN_IF_ERROR(session->Run({{training_.features, batch.features}, {training_.labels, batch.labels}},
                                   eval_fetches, {}, &out));
      return std::make_pair(static_cast<double>(out[0].data<float>()[0]),
                            out.size() > 1 ? static_cast<double>(out[1].data<float>()[0]) : 0.0);
    };
  }
  hooks.on_progress = on_progress;
  hooks.cancelled = &cancelled_;
  return RunTrainingLoop(job_, d.train, d.test, hooks, d.created);
}

// What one attempt of a distributed job leaves behind for the recovery that
// may follow it.
struct JobRunner::Attempt {
  absl::Mutex mu;
  std::map<std::string, uint64_t> incarnations ABSL_GUARDED_BY(mu);  // of its session's tasks
  std::optional<TaskFailure> heartbeat_failure ABSL_GUARDED_BY(mu);
  std::string draining ABSL_GUARDED_BY(mu);       // a task the heartbeat saw draining
  std::string drained ABSL_GUARDED_BY(mu);        // the one this attempt stopped for
  std::vector<std::string> replica_tasks;         // set before any replica runs
  std::set<std::string> ps_tasks;                 // tasks holding no replica
  MasterSession* session = nullptr;
  Heartbeat* heartbeat = nullptr;
  std::atomic<int64_t> reached_step{0};
  int64_t saved_step = -1;  // the last checkpoint of this attempt
  bool preempted = false;
};

namespace {

constexpr int kDefaultTaskWaitSeconds = 120;
constexpr int kDefaultMaxRestarts = 20;
constexpr int kDefaultHeartbeatMs = 1000;
constexpr int kDefaultHeartbeatTimeoutMs = 5000;

int64_t NowUnixMillis() { return absl::ToUnixMillis(absl::Now()); }

}  // namespace

StepCounts CountSteps(const JobSpec& job, int64_t train_examples, int num_replicas, int64_t replica_batch, bool sync,
                      int replicas_to_aggregate) {
  const int64_t k = replicas_to_aggregate;
  StepCounts c;
  c.step_examples = k > 0 ? k * replica_batch : sync ? job.batch_size() : replica_batch;
  // Every replica reads as many batches as the smallest shard holds.
  const int64_t replica_steps = (train_examples / num_replicas) / replica_batch * num_replicas;
  c.batches_per_epoch = k > 0 ? replica_steps / k : sync ? replica_steps / num_replicas : replica_steps;
  c.total_steps = job.steps() > 0 ? job.steps() : c.batches_per_epoch * job.epochs();
  return c;
}

RecoverySettings RecoverySettingsOf(const RecoveryPolicy& policy) {
  RecoverySettings r;
  r.heartbeat_interval = absl::Milliseconds(policy.heartbeat_ms() > 0 ? policy.heartbeat_ms() : kDefaultHeartbeatMs);
  r.heartbeat_timeout = absl::Milliseconds(policy.heartbeat_timeout_ms() > 0 ? policy.heartbeat_timeout_ms()
                                                                             : kDefaultHeartbeatTimeoutMs);
  r.task_wait = absl::Seconds(policy.task_wait_seconds() > 0 ? policy.task_wait_seconds() : kDefaultTaskWaitSeconds);
  // -1: no recovery at all, the first failure ends the job.
  r.max_restarts = policy.max_restarts() == 0 ? kDefaultMaxRestarts : std::max(0, policy.max_restarts());
  return r;
}

absl::StatusOr<std::optional<ps::CheckpointEntry>> ChooseResumePoint(const JobSpec& job,
                                                                     absl::StatusOr<ps::CheckpointEntry> found,
                                                                     bool at_start) {
  if (found.ok()) return std::optional<ps::CheckpointEntry>(*std::move(found));
  if (!absl::IsNotFound(found.status())) return found.status();
  if (at_start && !job.checkpoint().resume_from().empty()) {
    return absl::FailedPreconditionError(absl::StrCat("job '", job.name(), "': resume_from ",
                                                      job.checkpoint().resume_from(),
                                                      " holds no valid checkpoint: ", found.status().message()));
  }
  return std::optional<ps::CheckpointEntry>();
}

std::optional<TaskFailure> BlameTask(const std::string& drained, const std::map<std::string, uint64_t>& incarnations,
                                     const std::vector<TaskHealth>& probe,
                                     const std::optional<TaskFailure>& heartbeat_failure) {
  if (!drained.empty()) return TaskFailure{drained, "is stopping after SIGTERM (checkpointed first)"};
  std::vector<TaskFailure> failed = FailedTasks(probe, incarnations);
  if (incarnations.empty()) {  // the attempt did not get as far as a session
    for (const TaskHealth& h : probe) {
      if (!h.answered) failed.push_back({h.task, absl::StrCat("unreachable: ", h.error.message())});
    }
  }
  if (!failed.empty()) return failed[0];
  return heartbeat_failure;
}

absl::Status CheckRestartBudget(const TaskFailure& failure, int restarts, int max_restarts,
                                const absl::Status& error) {
  if (restarts < max_restarts) return absl::OkStatus();
  return absl::UnavailableError(absl::StrCat("task ", failure.task, " ", failure.reason, "; the job gave up after ",
                                             restarts, " recoveries (recovery.max_restarts): ", error.message()));
}

ReplicaFailure ClassifyReplicaFailure(const absl::Status& error, const std::string& task,
                                      const std::vector<TaskFailure>& failed, const std::set<std::string>& ps_tasks,
                                      const std::optional<TaskFailure>& heartbeat_failure) {
  if (failed.empty()) {
    // The heartbeat aborted the step for a worker that is back already, or
    // the error is the job's own.
    const bool aborted_for_a_worker = heartbeat_failure.has_value() && ps_tasks.count(heartbeat_failure->task) == 0 &&
                                      absl::IsUnavailable(error);
    return aborted_for_a_worker ? ReplicaFailure::kGoOn : ReplicaFailure::kEndJob;
  }
  bool mine = false;
  for (const TaskFailure& f : failed) {
    if (ps_tasks.count(f.task) > 0) return ReplicaFailure::kEndJob;  // the variables' owner: a full recovery
    mine = mine || f.task == task;
  }
  return mine ? ReplicaFailure::kAwaitOwnWorker : ReplicaFailure::kGoOn;
}

TrainResult JobRunner::Preempted(int64_t step) const {
  TrainResult r;
  r.state = "PREEMPTED";
  r.job = job_.name();
  r.steps = step;
  return r;
}

void JobRunner::Preempt() {
  preempted_.store(true);
  // A job without a strategy has no checkpoints: it stops like a cancel.
  if (job_.strategy().kind() == StrategySpec::NONE) Cancel();
}

// A job with a strategy: the replicated graph, each replica reading its
// shard on its task; sync steps run every replica at once, async replicas
// each run their own steps on a thread, as fast as they go, and so do k-of-N
// sync replicas, whose job steps are the ps's global steps. Attempts follow
// one another until one ends the job; between them the job recovers.
absl::StatusOr<TrainResult> JobRunner::RunDistributed(const std::function<void(const TrainProgress&)>& on_progress) {
  const Clock::time_point created = Clock::now();
  auto log = Logger("master");
  Env* env = options_.env != nullptr ? options_.env : Env::Default();
  CheckpointerOptions checkpointer_options;
  checkpointer_options.root = options_.checkpoint_root;
  checkpointer_options.owner = options_.owner;
  ASSIGN_OR_RETURN(std::unique_ptr<Checkpointer> checkpointer,
                   Checkpointer::Create(env, workers_, job_.name(), job_.checkpoint(), std::move(checkpointer_options)));
  const RecoverySettings recovery = RecoverySettingsOf(job_.recovery());

  // The master reads the training split only to count it (the epoch's steps).
  const std::vector<int64_t> shape(training_.example_shape.dims().begin(), training_.example_shape.dims().end());
  const int64_t num_classes = job_.has_model() ? job_.model().num_classes() : 0;
  int64_t train_examples = 0;
  {
    ASSIGN_OR_RETURN(data::InMemoryDataset train,
                     data::LoadDataset(job_.dataset(), /*train=*/true, shape, num_classes));
    train_examples = train.size();
  }

  // Where training starts: the newest valid checkpoint, if any.
  std::optional<ps::CheckpointEntry> resume;
  if (checkpointer->enabled()) {
    ASSIGN_OR_RETURN(resume, ChooseResumePoint(job_, checkpointer->FindResumePoint(), /*at_start=*/true));
  }
  if (resume.has_value()) {
    UpdateStatus([&](JobStatus* s) {
      s->set_checkpoint_step(resume->step);
      s->set_checkpoint_path(resume->path);
    });
  }
  auto stop_waiting = [this] { return cancelled_.load() || preempted_.load(); };
  if (options_.resumed) {
    // The tasks may have lost their state with the old master, or be
    // restarting themselves.
    absl::StatusOr<std::map<std::string, uint64_t>> back = WaitForTasks(workers_, recovery.task_wait, stop_waiting);
    if (!back.ok() && !stop_waiting()) return back.status();
  }

  if (options_.resumed) {
    // The steps the previous master had reached (as last stored) and that
    // are trained again from the checkpoint.
    const int64_t lost = std::max<int64_t>(0, options_.reached_step - (resume.has_value() ? resume->step : 0));
    UpdateStatus([&](JobStatus* s) { s->set_steps_lost(s->steps_lost() + lost); });
  }
  int restarts = 0;
  for (int attempt = 0;; ++attempt) {
    if (preempted_.load() && !cancelled_.load()) return Preempted(resume.has_value() ? resume->step : 0);
    if (cancelled_.load()) {
      TrainResult r;
      r.state = "CANCELLED";
      r.job = job_.name();
      r.wall_seconds = Seconds(created);
      return r;
    }
    Attempt a;
    absl::StatusOr<TrainResult> result =
        RunAttempt(attempt, resume, checkpointer.get(), train_examples, on_progress, &a);
    if (result.ok()) {
      result->wall_seconds = Seconds(created);
      return result;
    }
    if (cancelled_.load()) return result;

    // A task failure, or an error of the job itself?
    std::optional<TaskFailure> blamed;
    {
      absl::MutexLock lock(&a.mu);
      std::vector<TaskHealth> probe;
      if (a.drained.empty()) probe = ProbeTasks(workers_, recovery.heartbeat_timeout);
      blamed = BlameTask(a.drained, a.incarnations, probe, a.heartbeat_failure);
    }
    if (!blamed.has_value()) return result.status();
    const TaskFailure failure = *std::move(blamed);
    RETURN_IF_ERROR(CheckRestartBudget(failure, restarts, recovery.max_restarts, result.status()));
    ++restarts;
    const absl::Time failed_at = absl::Now();
    log->warn("job '{}': task {} {}; recovering (restart {}): {}", job_.name(), failure.task, failure.reason, restarts,
              result.status().ToString());
    UpdateStatus([&](JobStatus* s) {
      s->set_state(RECOVERING);
      s->set_restarts(s->restarts() + 1);
      s->set_failed_task(failure.task);
      s->set_failure(absl::StrCat(failure.reason, " (", result.status().ToString(), ")"));
      s->set_failure_time_unix_ms(absl::ToUnixMillis(failed_at));
    });
    absl::StatusOr<std::map<std::string, uint64_t>> back = WaitForTasks(workers_, recovery.task_wait, stop_waiting);
    if (!back.ok()) {
      if (cancelled_.load()) continue;  // ends CANCELLED above
      if (preempted_.load()) return Preempted(a.reached_step.load());
      return absl::UnavailableError(absl::StrCat("task ", failure.task, " ", failure.reason,
                                                 " and did not come back (recovery.task_wait_seconds): ",
                                                 back.status().message()));
    }
    resume.reset();
    if (checkpointer->enabled()) {
      ASSIGN_OR_RETURN(resume, ChooseResumePoint(job_, checkpointer->FindResumePoint(), /*at_start=*/false));
    }
    const int64_t from = resume.has_value() ? resume->step : 0;
    const int64_t lost = std::max<int64_t>(0, a.reached_step.load() - from);
    log->info("job '{}': every task answers again after {:.1f} s; resuming at step {} ({} step(s) to train again)",
              job_.name(), absl::ToDoubleSeconds(absl::Now() - failed_at), from, lost);
    UpdateStatus([&](JobStatus* s) {
      s->set_steps_lost(s->steps_lost() + lost);  // the total may predate this master
      s->set_recovery_seconds(absl::ToDoubleSeconds(absl::Now() - failed_at));
    });
  }
}

absl::StatusOr<TrainResult> JobRunner::RunAttempt(int attempt, const std::optional<ps::CheckpointEntry>& resume,
                                                  Checkpointer* checkpointer, int64_t train_examples,
                                                  const std::function<void(const TrainProgress&)>& on_progress,
                                                  Attempt* a) {
  auto log = Logger("master");
  const Clock::time_point started = Clock::now();
  const int64_t start_step = resume.has_value() ? resume->step : 0;
  ASSIGN_OR_RETURN(std::vector<DeviceAttributes> attrs, ListClusterDevices(workers_));
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
  const std::string handle = attempt == 0 ? session_handle_ : absl::StrCat(session_handle_, "/attempt-", attempt);
  ASSIGN_OR_RETURN(std::unique_ptr<MasterSession> owned, MasterSession::Create(handle, plan.graph, workers_));
  MasterSession* session = owned.get();
  {
    absl::MutexLock lock(&mu_);
    session_ = std::move(owned);
  }
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
  // From here on a failed or restarted task aborts the running steps, so
  // that none waits for a peer that is gone.
  const RecoverySettings recovery = RecoverySettingsOf(job_.recovery());
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

  const int k = plan.replicas_to_aggregate;
  const ReplicatedGraph& rg = plan.replicated;
  // The training signatures, registered before a restore so that every task
  // holding variables knows the session.
  std::vector<std::pair<std::vector<std::string>, std::vector<std::string>>> signatures;
  std::vector<std::string> losses;
  for (const ReplicaNames& r : rg.replicas) losses.push_back(r.loss);
  if (k > 0) {
    for (const ReplicaNames& r : rg.replicas) {
      std::vector<std::string> fetches = {r.loss};
      fetches.insert(fetches.end(), r.push_outcomes.begin(), r.push_outcomes.end());
      signatures.push_back({fetches, {r.train_op}});
    }
  } else if (plan.sync) {
    signatures.push_back({losses, rg.train_targets});
  } else {
    for (const ReplicaNames& r : rg.replicas) signatures.push_back({{r.loss}, {r.train_op}});
  }
  absl::Status ready;
  if (resume.has_value()) {
    for (const auto& [fetches, targets] : signatures) {
      if (ready.ok()) ready = session->Prepare(fetches, targets);
    }
    if (ready.ok()) ready = checkpointer->Restore(handle, *resume);
  }
  if (ready.ok() && (attempt > 0 || options_.resumed)) {
    UpdateStatus([&](JobStatus* s) {
      s->set_state(RUNNING);
      s->set_step(start_step);  // where training resumes
      if (s->failure_time_unix_ms() > 0) {
        s->set_recovery_seconds(static_cast<double>(NowUnixMillis() - s->failure_time_unix_ms()) / 1000.0);
      }
    });
  }
  log->info("job '{}': {} with {} replica(s) of batch {}{}", job_.name(),
            StrategySpec::Kind_Name(job_.strategy().kind()), plan.num_replicas, plan.replica_batch,
            attempt > 0 ? absl::StrCat(" (attempt ", attempt + 1, ")") : "");

  StepSource source;
  source.examples = train_examples;
  source.start_step = start_step;
  // Async replicas take turns in the count: an epoch is the steps that
  // together see each example once. A global step of k-of-N replicas trains
  // on k replicas' batches.
  const StepCounts counts =
      CountSteps(job_, train_examples, plan.num_replicas, plan.replica_batch, plan.sync, k);
  const int64_t step_examples = counts.step_examples;
  source.batches_per_epoch = counts.batches_per_epoch;
  const int64_t total = counts.total_steps;
  std::unique_ptr<AsyncReplicas> async;
  std::unique_ptr<AccumulatingReplicas> accumulating;
  if (!ready.ok()) {
    // Fall through to the cleanup below with the error.
  } else if (k > 0) {
    log->info("job '{}': the ps applies the first {} of {} replicas' gradients per global step", job_.name(), k,
              plan.num_replicas);
    accumulating =
        std::make_unique<AccumulatingReplicas>(session, rg, total - start_step, step_examples, &cancelled_);
    source.step = [&](int64_t) { return accumulating->Next(); };
  } else if (plan.sync) {
    // Each replica's loss from its own task, averaged here, and the step's
    // targets on the tasks that run them: no extra tensor crosses tasks.
    // With steps_per_execution n, one RunGraph runs up to n steps on every
    // task (each reads its next batch itself) and the master's round trip
    // is paid once per n steps.
    const int64_t n = std::max(1, job_.strategy().steps_per_execution());
    source.step = [&, n, out = std::vector<Tensor>()](int64_t max_steps) mutable -> absl::StatusOr<StepResult> {
      const int64_t m = std::min(n, max_steps);
      RETURN_IF_ERROR(session->Run({}, losses, rg.train_targets, &out, static_cast<int>(m)));
      double sum = 0;
      for (const Tensor& t : out) sum += t.data<float>()[0];
      return StepResult{static_cast<float>(sum / static_cast<double>(out.size())), m * step_examples, m};
    };
  } else {
    std::function<bool(const absl::Status&, const std::string&)> recover;
    if (job_.strategy().kind() == StrategySpec::PARAMETER_SERVER && job_.recovery().max_restarts() >= 0) {
      recover = [this, a](const absl::Status& error, const std::string& task) {
        return RecoverReplica(error, task, a);
      };
    }
    async = std::make_unique<AsyncReplicas>(session, rg, plan.replica_tasks, total - start_step, step_examples,
                                            std::max(1, job_.strategy().steps_per_execution()), &cancelled_,
                                            std::move(recover));
    source.step = [&](int64_t max_steps) { return async->Next(max_steps); };
  }
  // Checkpoints between steps: every_steps/every_seconds, when a task
  // drains after SIGTERM, and when the master is preempted.
  auto save = [&](int64_t step) -> absl::Status {
    auto save_at = [&](int64_t at) -> absl::Status {
      // PARAMETER_SERVER keeps every variable on the ps tasks.
      std::vector<std::string> holders;
      if (job_.strategy().kind() == StrategySpec::PARAMETER_SERVER) {
        holders.assign(a->ps_tasks.begin(), a->ps_tasks.end());
      }
      ASSIGN_OR_RETURN(ps::CheckpointEntry saved, checkpointer->Save(handle, at, holders));
      a->saved_step = at;
      UpdateStatus([&](JobStatus* s) {
        s->set_checkpoint_step(saved.step);
        s->set_checkpoint_path(saved.path);
      });
      return absl::OkStatus();
    };
    if (async != nullptr) return async->Quiesce([&](int64_t completed) { return save_at(start_step + completed); });
    if (accumulating != nullptr) {
      return accumulating->Quiesce([&](int64_t completed) { return save_at(start_step + completed); });
    }
    return save_at(step);
  };
  source.after_steps = [&](int64_t step) -> absl::Status {
    a->reached_step.store(step);
    std::string draining;
    {
      absl::MutexLock lock(&a->mu);
      draining = a->draining;
    }
    const bool preempted = preempted_.load();
    if (checkpointer->enabled() && (preempted || !draining.empty() || checkpointer->Due(step))) {
      if (absl::Status saved = save(step); !saved.ok()) {
        // A preemption needs its checkpoint. A periodic one that fails (a
        // task lost meanwhile, a full disk) leaves no manifest, so nothing
        // is damaged: training goes on, and a lost task is recovered from
        // the previous checkpoint by the step that meets it.
        if (preempted || !draining.empty()) return saved;
        log->warn("job '{}': the checkpoint of step {} failed; training goes on: {}", job_.name(), step,
                  saved.ToString());
      }
    }
    if (!draining.empty()) {
      absl::MutexLock lock(&a->mu);
      a->drained = draining;
      return absl::UnavailableError(absl::StrCat("task ", draining, " is stopping (SIGTERM)"));
    }
    if (preempted) {
      a->preempted = true;
      return absl::CancelledError("the master is stopping (SIGTERM)");
    }
    return absl::OkStatus();
  };
  if (!plan.eval_correct.empty()) {
    source.evaluate = [&, out = std::vector<Tensor>()]() mutable -> absl::StatusOr<EvalResult> {
      std::vector<std::string> fetches = {plan.eval_labels, plan.eval_correct};
      if (!plan.eval_loss.empty()) fetches.push_back(plan.eval_loss);
      double correct = 0, loss = 0;
      EvalResult e;
      for (;;) {
        if (cancelled_.load()) return absl::CancelledError("job cancelled during evaluation");
        RETURN_IF_ERROR(Annotate(session->Run({}, fetches, {}, &out), "evaluation"));
        const int64_t n = out[0].NumElements();
        if (n == 0) break;  // the end of the test pass
        correct += out[1].data<float>()[0];
        if (out.size() > 2) loss += out[2].data<float>()[0];
        e.examples += n;
      }
      if (e.examples > 0) {
        e.accuracy = correct / static_cast<double>(e.examples);
        e.loss = loss / static_cast<double>(e.examples);
      }
      return e;
    };
  }
  absl::StatusOr<TrainResult> result =
      ready.ok() ? RunTrainingLoop(job_, source, on_progress, &cancelled_, started) : ready;
  if (!result.ok() && a->preempted) result = Preempted(a->reached_step.load());
  // The last state of a finished job, for a later job to start from.
  if (result.ok() && result->state == "SUCCEEDED" && checkpointer->enabled() && a->saved_step != result->steps) {
    absl::Status s = save(result->steps);
    if (!s.ok()) result = Annotate(s, "the final checkpoint");
  }
  async.reset();  // joins the replicas' threads
  if (accumulating != nullptr) {
    const int64_t refused = accumulating->refused(), refused_steps = accumulating->refused_steps();
    accumulating.reset();
    log->info(
        "job '{}': the ps refused {} stale gradient(s) of {} replica step(s) (pushed after their global step was "
        "applied)",
        job_.name(), refused, refused_steps);
  }
  if (!result.ok()) session->AbortRunningSteps(result.status());
  a->heartbeat = nullptr;
  heartbeat.reset();
  {
    absl::MutexLock lock(&mu_);
    owned = std::move(session_);
  }
  a->session = nullptr;
  absl::Status closed = owned->Close();
  if (!closed.ok()) log->warn("job '{}': closing its session: {}", job_.name(), closed.ToString());
  return result;
}

bool JobRunner::RecoverReplica(const absl::Status& error, const std::string& task, Attempt* a) {
  if (cancelled_.load() || preempted_.load()) return false;
  std::map<std::string, uint64_t> known;
  {
    absl::MutexLock lock(&a->mu);
    known = a->incarnations;
  }
  const RecoverySettings recovery = RecoverySettingsOf(job_.recovery());
  std::vector<TaskFailure> failed = FailedTasks(ProbeTasks(workers_, recovery.heartbeat_timeout), known);
  std::optional<TaskFailure> heartbeat_failure;
  {
    absl::MutexLock lock(&a->mu);
    heartbeat_failure = a->heartbeat_failure;
  }
  switch (ClassifyReplicaFailure(error, task, failed, a->ps_tasks, heartbeat_failure)) {
    case ReplicaFailure::kEndJob:
      return false;
    case ReplicaFailure::kGoOn:
      return true;
    case ReplicaFailure::kAwaitOwnWorker:
      break;
  }
  auto log = Logger("master");
  const absl::Time failed_at = absl::Now();
  std::string reason = "failed";
  for (const TaskFailure& f : failed) {
    if (f.task == task) reason = f.reason;
  }
  log->warn("job '{}': worker {} {}; the other replicas train on while it comes back", job_.name(), task, reason);
  UpdateStatus([&](JobStatus* s) {
    s->set_restarts(s->restarts() + 1);
    s->set_failed_task(task);
    s->set_failure(absl::StrCat(reason, " (", error.ToString(), "); no step lost: the other replicas trained on"));
    s->set_failure_time_unix_ms(absl::ToUnixMillis(failed_at));
  });
  absl::StatusOr<uint64_t> back = WaitForRestart(workers_, task, known[task], recovery.task_wait,
                                                 [this] { return cancelled_.load() || preempted_.load(); });
  if (!back.ok()) return false;
  {
    absl::MutexLock lock(&a->mu);
    a->incarnations[task] = *back;
    if (a->heartbeat_failure.has_value() && a->heartbeat_failure->task == task) a->heartbeat_failure.reset();
  }
  if (a->heartbeat != nullptr) a->heartbeat->Update(task, *back);
  a->session->ForgetTask(task);
  log->info("job '{}': worker {} is back after {:.1f} s; its replica trains again", job_.name(), task,
            absl::ToDoubleSeconds(absl::Now() - failed_at));
  UpdateStatus([&](JobStatus* s) { s->set_recovery_seconds(absl::ToDoubleSeconds(absl::Now() - failed_at)); });
  return true;
}

}  // namespace master
}  // namespace weft
