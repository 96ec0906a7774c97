// JobRunner's elastic membership (master/job_runner.h, ElasticPolicy in
// proto/job.proto, docs/fault_tolerance.md "Elastic jobs"): which workers an
// elastic job trains on, how it goes on without a worker that failed, and
// how the next attempt takes the variables from the members' memory.
#include <algorithm>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "common/logging.h"
#include "common/status_macros.h"
#include "job/defaults.h"
#include "master/job_runner.h"
#include "master/task_monitor.h"

namespace weft {
namespace master {
namespace {

std::string Listed(const std::vector<std::string>& tasks) {
  return tasks.empty() ? "none" : absl::StrJoin(tasks, ", ");
}

// The tasks of `a` that are not in `b`.
std::vector<std::string> Minus(const std::vector<std::string>& a, const std::vector<std::string>& b) {
  std::vector<std::string> out;
  for (const std::string& t : a) {
    if (std::find(b.begin(), b.end(), t) == b.end()) out.push_back(t);
  }
  return out;
}

}  // namespace

// The cluster's workers that answer and do not drain, in the cluster's order.
std::vector<std::string> JobRunner::AnsweringWorkers(std::map<std::string, uint64_t>* incarnations) const {
  std::vector<std::string> out;
  for (const TaskHealth& h : ProbeTasks(members_->cluster_cache(), EffectiveRecovery(job_).heartbeat_timeout)) {
    if (!IsWorkerTask(h.task) || !h.answered || h.draining) continue;
    out.push_back(h.task);
    if (incarnations != nullptr) (*incarnations)[h.task] = h.incarnation;
  }
  return out;
}

bool JobRunner::SharesVariables() const { return job_.strategy().kind() == StrategySpec::PARAMETER_SERVER; }

std::string JobRunner::PsThatLostTheVariables(const std::map<std::string, uint64_t>& known) const {
  for (const TaskHealth& h : ProbeTasks(members_.get(), EffectiveRecovery(job_).heartbeat_timeout)) {
    if (IsWorkerTask(h.task)) continue;
    auto it = known.find(h.task);
    if (!h.answered) return absl::StrCat(h.task, ", which does not answer");
    if (it == known.end() || it->second != h.incarnation) return absl::StrCat(h.task, ", which restarted");
  }
  return "";
}

int JobRunner::ElasticCount(int available) const {
  const int target = target_workers_.load();
  return ElasticReplicaCount(job_, target > 0 ? std::min(available, target) : available);
}

absl::Status JobRunner::ChooseFirstMembers() {
  // The workers that answer now; all of them when none does (the attempt
  // then fails naming one, and recovers as any would).
  std::vector<std::string> ready = AnsweringWorkers(nullptr);
  if (static_cast<int>(ready.size()) < EffectiveMinWorkers(job_.elastic())) ready = members_->ClusterWorkers();
  const int n = ElasticCount(static_cast<int>(ready.size()));
  if (n == 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "job '", job_.name(), "': no count of the cluster's ", ready.size(), " worker(s) from elastic.min_workers ",
        EffectiveMinWorkers(job_.elastic()), " up divides batch_size ", job_.batch_size()));
  }
  RETURN_IF_ERROR(members_->SetWorkers(std::set<std::string>(ready.begin(), ready.begin() + n)));
  const std::vector<std::string> all = members_->ClusterWorkers();
  if (n < static_cast<int>(all.size())) {
    Logger("master")->info("job '{}': trains on {} of the cluster's {} workers; {} stand(s) by", job_.name(), n,
                           all.size(), Listed(Minus(all, members_->Workers())));
  }
  PublishWorkers();
  return absl::OkStatus();
}

void JobRunner::PublishWorkers() {
  const std::vector<std::string> workers = members_->Workers();
  UpdateStatus([&](JobStatus* s) {
    s->clear_workers();
    for (const std::string& w : workers) s->add_workers(w);
  });
}

std::unique_ptr<MembershipWatch> JobRunner::WatchMembership(AttemptState* a) {
  if (members_ == nullptr) return nullptr;
  const RecoverySettings recovery = EffectiveRecovery(job_);
  return std::make_unique<MembershipWatch>(
      job_, members_.get(), [this] { return target_workers_.load(); }, recovery.heartbeat_interval,
      recovery.heartbeat_timeout, [a](const std::string& why) {
        absl::MutexLock lock(&a->mu);
        if (a->regroup.empty()) a->regroup = why;
      });
}

absl::Status JobRunner::Scale(int workers) {
  if (members_ == nullptr) {
    return absl::FailedPreconditionError(absl::StrCat(
        "job '", job_.name(), "' is not elastic: it trains on the cluster's workers (set elastic { ... } to scale)"));
  }
  const ElasticPolicy& e = job_.elastic();
  const int min = EffectiveMinWorkers(e);
  if (workers < min || (e.max_workers() > 0 && workers > e.max_workers())) {
    return absl::InvalidArgumentError(absl::StrCat("job '", job_.name(), "': ", workers,
                                                   " workers is outside elastic.min_workers ", min,
                                                   " to max_workers ",
                                                   e.max_workers() > 0 ? absl::StrCat(e.max_workers()) : "(any)"));
  }
  if (ElasticReplicaCount(job_, workers) == 0) {
    return absl::InvalidArgumentError(absl::StrCat("job '", job_.name(), "': no count of ", workers,
                                                   " worker(s) or fewer, from elastic.min_workers ", min,
                                                   ", divides batch_size ", job_.batch_size()));
  }
  target_workers_.store(workers);
  Logger("master")->info("job '{}': asked to train on {} worker(s) (weft scale)", job_.name(), workers);
  return absl::OkStatus();
}

absl::StatusOr<bool> JobRunner::RecoverMembers(const std::string& reason, absl::Time failed_at, bool wait,
                                               AttemptState* a) {
  auto log = Logger("master");
  std::map<std::string, uint64_t> known;
  {
    absl::MutexLock lock(&a->mu);
    known = a->incarnations;
  }
  auto stop_waiting = [this] { return cancelled_.load() || preempted_.load(); };
  const absl::Duration wait_for = ElasticWait(job_);
  if (wait && wait_for > absl::ZeroDuration()) {
    log->info("job '{}': waiting up to {:.0f} s for its workers (elastic.wait_seconds) before going on without "
              "those that do not answer",
              job_.name(), absl::ToDoubleSeconds(wait_for));
    // Whether all came back or not, the probe below says who answers now.
    (void)WaitForTasks(workers_, wait_for, stop_waiting);
  }
  if (stop_waiting()) return false;  // the checkpoint way ends it as cancelled or preempted
  // Who trains on: the cluster's workers that answer and do not drain.
  // Members with the incarnation the attempt started with kept their
  // variables; the others (restarted, or never members) take them from a
  // peer.
  std::map<std::string, uint64_t> now;
  const std::vector<std::string> answering = AnsweringWorkers(&now);
  std::vector<std::string> kept, fresh;
  const bool shared = SharesVariables();
  for (const std::string& t : answering) {
    auto it = known.find(t);
    // Shared variables live on the ps: any worker that answers will do.
    (shared || (it != known.end() && it->second == now[t]) ? kept : fresh).push_back(t);
  }
  const std::vector<std::string> before = members_->Workers();
  const std::string lost = shared ? PsThatLostTheVariables(known) : kept.empty() ? "every worker" : "";
  if (!lost.empty()) {
    RETURN_IF_ERROR(GoToCheckpoint(answering, before, reason, lost, failed_at));
    return false;
  }
  std::vector<std::string> next = kept;
  next.insert(next.end(), fresh.begin(), fresh.end());
  const int n = ElasticCount(static_cast<int>(next.size()));
  if (n == 0) {
    CloseRetiredSession();
    return absl::UnavailableError(absl::StrCat(
        "job '", job_.name(), "': ", reason, "; ", next.size(), " worker(s) answer (", Listed(next),
        ") and no count of them from elastic.min_workers ", EffectiveMinWorkers(job_.elastic()),
        " up divides batch_size ", job_.batch_size()));
  }
  next.resize(n);  // those that kept their variables first
  const std::vector<std::string> order = members_->ClusterWorkers();
  std::sort(next.begin(), next.end(), [&](const std::string& x, const std::string& y) {
    return std::find(order.begin(), order.end(), x) < std::find(order.begin(), order.end(), y);
  });
  RETURN_IF_ERROR(members_->SetWorkers(std::set<std::string>(next.begin(), next.end())));
  change_left_ = Minus(before, next);
  change_joined_ = Minus(next, before);
  change_reason_ = reason;
  change_failed_at_ = failed_at;
  from_memory_ = true;
  memory_step_ = a->reached_step.load();
  log->warn("job '{}': goes on with {} worker(s) from {}, no checkpoint restored: {}; left: {}; "
            "joining or restarted{}: {}",
            job_.name(), n, shared ? "the variables on the ps" : "their memory", Listed(next),
            Listed(change_left_), shared ? "" : ", taking the variables from a peer",
            Listed(shared ? change_joined_ : Minus(next, kept)));
  return true;
}

absl::Status JobRunner::GoToCheckpoint(const std::vector<std::string>& answering,
                                      const std::vector<std::string>& before, const std::string& reason,
                                      const std::string& lost, absl::Time failed_at) {
  // Nothing in memory to go on from: the newest checkpoint, once every
  // member answers, as for any job.
  Logger("master")->warn("job '{}': the job's variables are gone with {} ({} answer(s)); restoring its newest "
                         "checkpoint",
                         job_.name(), lost, Listed(answering));
  CloseRetiredSession();
  from_memory_ = false;
  // Onto the workers that answer, as many as split the batch, rather than
  // waiting for one that is gone for good.
  const int n = ElasticCount(static_cast<int>(answering.size()));
  if (n == 0 || n < EffectiveMinWorkers(job_.elastic())) return absl::OkStatus();
  RETURN_IF_ERROR(members_->SetWorkers(std::set<std::string>(answering.begin(), answering.begin() + n)));
  PublishWorkers();
  const std::vector<std::string> after = members_->Workers();
  change_left_ = Minus(before, after);
  change_joined_ = Minus(after, before);
  change_reason_ = absl::StrCat(reason, "; the variables were gone with ", lost);
  change_failed_at_ = failed_at;
  change_restores_ = !change_left_.empty() || !change_joined_.empty();
  return absl::OkStatus();
}

absl::Status JobRunner::ResumeFromMembers(const std::string& handle, const ClusterProbe& probe,
                                          DistributedPlan* plan, MasterSession** session, int64_t* start_step) {
  auto log = Logger("master");
  std::vector<Tensor> counters;
  RETURN_IF_ERROR((*session)->Run({}, plan->elastic.step_reads, {}, &counters));
  int source = 0;
  std::vector<int64_t> applied;
  for (size_t r = 0; r < counters.size(); ++r) {
    ASSIGN_OR_RETURN(const int64_t n,
                     AppliedSteps(counters[r], plan->elastic.shared ? "the ps" : plan->replica_tasks[r]));
    applied.push_back(n);
    if (applied[r] > applied[source]) source = static_cast<int>(r);
  }
  const int64_t furthest = applied[source];
  // Whose counter and variables the job goes on from.
  const std::string from = plan->elastic.shared ? "the ps" : plan->replica_tasks[source];
  // Every replica had finished the steps the master saw end.
  if (furthest < memory_step_) {
    return absl::DataLossError(absl::StrCat("job '", job_.name(), "': the furthest replica (", from,
                                            ") has applied ", furthest,
                                            " steps, but all had finished ", memory_step_,
                                            ": its variables are gone"));
  }
  if (furthest != *start_step) {
    // Only the counters' graphs go: the failed attempt's session, still
    // open, keeps the variables alive.
    CloseSession();
    *start_step = furthest;
    ASSIGN_OR_RETURN(*plan, PlanAttempt(furthest, probe));
    ASSIGN_OR_RETURN(*session, OpenSession(handle, plan->graph, &probe));
  }
  if (!plan->elastic.shared && plan->num_replicas > 1) {
    // Copied even when the counters agree: equal counts need not mean
    // equal values for a member that came back empty or that kept a step's
    // updates but lost its count. One pass over the model is cheap next to
    // a restore.
    std::vector<Tensor> none;
    RETURN_IF_ERROR((*session)->Run({}, {}, plan->elastic.sync_from[source], &none));
  }
  // The training graphs hold the variables in this session on every task
  // before the failed attempt's graphs go; else a task whose variables no
  // Run above touched (the ps, or a lone replica) would drop them with the
  // last of those.
  for (const auto& [fetches, targets] : TrainingSignatures(*plan)) {
    RETURN_IF_ERROR((*session)->Prepare(fetches, targets));
  }
  from_memory_ = false;
  CloseRetiredSession();
  RecordMembershipChange(furthest, plan->replica_tasks,
                         absl::StrCat("variables from ", from, " (", absl::StrJoin(applied, "/"), ")"));
  return absl::OkStatus();
}

void JobRunner::RecordMembershipChange(int64_t step, const std::vector<std::string>& replica_tasks,
                                       const std::string& how) {
  const absl::Time now = absl::Now();
  const double seconds = absl::ToDoubleSeconds(now - change_failed_at_);
  Logger("master")->warn("job '{}': membership changed in {:.2f} s: {} worker(s) from step {}, {}; left: {}; "
                         "joined: {}",
                         job_.name(), seconds, replica_tasks.size(), step, how, Listed(change_left_),
                         Listed(change_joined_));
  MembershipChange change;
  change.set_step(step);
  change.set_time_unix_ms(absl::ToUnixMillis(now));
  for (const std::string& t : change_left_) change.add_left(t);
  for (const std::string& t : change_joined_) change.add_joined(t);
  change.set_workers(static_cast<int>(replica_tasks.size()));
  change.set_seconds(seconds);
  change.set_reason(change_reason_);
  UpdateStatus([&](JobStatus* s) {
    s->clear_workers();
    for (const std::string& t : replica_tasks) s->add_workers(t);
    *s->add_membership_change() = change;
  });
}

void JobRunner::RetireSession() {
  std::unique_ptr<MasterSession> extra;
  {
    absl::MutexLock lock(&mu_);
    // The oldest retired session is the one whose graphs surely hold the
    // variables on every member that kept them: keep it, close this one.
    if (retired_ == nullptr) {
      retired_ = std::move(session_);
    } else {
      extra = std::move(session_);
    }
  }
  CloseOwned(std::move(extra));
}

void JobRunner::CloseRetiredSession() {
  std::unique_ptr<MasterSession> owned;
  {
    absl::MutexLock lock(&mu_);
    owned = std::move(retired_);
  }
  // Its lost task's graphs cannot be deregistered: Close says so, and the
  // task has dropped them with its process.
  CloseOwned(std::move(owned));
}

}  // namespace master
}  // namespace weft
