// The replica drivers over a MasterSession whose tasks are scripted: each
// replica's step is one RunGraph on its own task, answered with a scripted
// loss and push outcomes, failed, or held until AbortStep (a push parked on
// the ps).
#include "master/replica_drivers.h"

#include <atomic>
#include <deque>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "common/tensor_proto_coding.h"
#include "graph/builder.h"
#include "gtest/gtest.h"
#include "master/fake_worker.h"
#include "master/worker_cache.h"

namespace weft {
namespace master {
namespace {

constexpr absl::Duration kWait = absl::Seconds(30);  // for things that happen at once

std::string Task(int r) { return absl::StrCat("/job:worker/task:", r); }

// How one RunGraph of a replica's step ends.
struct StepScript {
  float loss = 1.0f;
  std::vector<int64_t> outcomes;  // per update; missing ones are 1 (applied)
  absl::Status error;             // not OK: the step fails with it
};

// A replica's task. Its steps answer from the queued scripts, one per call,
// then like the standing one; while `hold` is set a step waits until
// AbortStep names it (completing it ABORTED) or Release.
class ReplicaTask final : public FakeWorker {
 public:
  explicit ReplicaTask(std::string task) : FakeWorker(std::move(task)) {}

  void Queue(StepScript s) {
    absl::MutexLock lock(&mu_);
    queued_.push_back(std::move(s));
  }
  void SetStanding(StepScript s) {
    absl::MutexLock lock(&mu_);
    standing_ = std::move(s);
  }
  void SetHold(bool hold) {
    absl::MutexLock lock(&mu_);
    hold_ = hold;
  }
  // Completes every held step as scripted.
  void Release() {
    std::vector<Held> held;
    {
      absl::MutexLock lock(&mu_);
      for (auto& [id, h] : held_) held.push_back(std::move(h));
      held_.clear();
    }
    for (Held& h : held) Finish(h, absl::OkStatus());
  }
  bool AwaitHeld(int n, absl::Duration timeout) {
    absl::MutexLock lock(&mu_);
    auto enough = [this, n]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return static_cast<int>(held_.size()) >= n; };
    return mu_.AwaitWithTimeout(absl::Condition(&enough), timeout);
  }

  // RunGraph calls so far; those in progress (held) now; the iterations of
  // the steps that succeeded.
  int runs() {
    absl::MutexLock lock(&mu_);
    return runs_;
  }
  int running() {
    absl::MutexLock lock(&mu_);
    return running_;
  }
  int64_t iterations_done() {
    absl::MutexLock lock(&mu_);
    return iterations_done_;
  }
  std::vector<int> iterations_asked() {
    absl::MutexLock lock(&mu_);
    return iterations_asked_;
  }
  std::vector<AbortStepRequest> aborts() {
    absl::MutexLock lock(&mu_);
    return aborts_;
  }

  void GetStatusAsync(const GetStatusRequest*, GetStatusResponse* response, StatusCallback done) override {
    response->set_task(task());
    DeviceAttributes* d = response->add_device();
    d->set_name(task() + "/device:CPU:0");
    d->set_device_type("CPU");
    done(absl::OkStatus());
  }
  void RegisterGraphAsync(const RegisterGraphRequest*, RegisterGraphResponse* response,
                          StatusCallback done) override {
    response->set_graph_handle("g");
    done(absl::OkStatus());
  }
  void DeregisterGraphAsync(const DeregisterGraphRequest*, DeregisterGraphResponse*, StatusCallback done) override {
    done(absl::OkStatus());
  }
  void CleanupStepAsync(const CleanupStepRequest*, CleanupStepResponse*, StatusCallback done) override {
    done(absl::OkStatus());
  }
  void RunGraphAsync(const RunGraphRequest* request, RunGraphResponse* response, absl::Duration,
                     StatusCallback done) override {
    Held h;
    h.request = request;
    h.response = response;
    h.done = std::move(done);
    {
      absl::MutexLock lock(&mu_);
      ++runs_;
      ++running_;
      iterations_asked_.push_back(request->iterations());
      if (!queued_.empty()) {
        h.script = std::move(queued_.front());
        queued_.pop_front();
      } else {
        h.script = standing_;
      }
      if (hold_) {
        held_.emplace(request->step_id(), std::move(h));
        return;
      }
    }
    Finish(h, absl::OkStatus());
  }
  void AbortStepAsync(const AbortStepRequest* request, AbortStepResponse*, StatusCallback done) override {
    Held h;
    bool found = false;
    {
      absl::MutexLock lock(&mu_);
      aborts_.push_back(*request);
      auto it = held_.find(request->step_id());
      if (it != held_.end()) {
        h = std::move(it->second);
        held_.erase(it);
        found = true;
      }
    }
    if (found) Finish(h, absl::AbortedError(absl::StrCat("step aborted: ", request->message())));
    done(absl::OkStatus());
  }

 private:
  struct Held {
    const RunGraphRequest* request = nullptr;
    RunGraphResponse* response = nullptr;
    StatusCallback done;
    StepScript script;
  };

  void Finish(Held& h, const absl::Status& aborted) {
    absl::Status s = aborted.ok() ? h.script.error : aborted;
    if (s.ok()) {
      for (const std::string& key : h.request->recv_key()) {
        NamedTensorProto* t = h.response->add_recv();
        t->set_name(key);
        const size_t push = key.find("/push");
        if (push == std::string::npos) {
          TensorToProto(Tensor::Scalar<float>(h.script.loss), t->mutable_tensor());
          continue;
        }
        size_t u = 0;
        EXPECT_TRUE(absl::SimpleAtoi(key.substr(push + 5), &u)) << key;
        const int64_t outcome = u < h.script.outcomes.size() ? h.script.outcomes[u] : 1;
        TensorToProto(Tensor::Scalar<int64_t>(outcome), t->mutable_tensor());
      }
    }
    {
      absl::MutexLock lock(&mu_);
      --running_;
      if (s.ok()) iterations_done_ += h.request->iterations();
    }
    h.done(s);
  }

  absl::Mutex mu_;
  std::deque<StepScript> queued_ ABSL_GUARDED_BY(mu_);
  StepScript standing_ ABSL_GUARDED_BY(mu_);
  bool hold_ ABSL_GUARDED_BY(mu_) = false;
  std::map<int64_t, Held> held_ ABSL_GUARDED_BY(mu_);
  int runs_ ABSL_GUARDED_BY(mu_) = 0;
  int running_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t iterations_done_ ABSL_GUARDED_BY(mu_) = 0;
  std::vector<int> iterations_asked_ ABSL_GUARDED_BY(mu_);
  std::vector<AbortStepRequest> aborts_ ABSL_GUARDED_BY(mu_);
};

// `n` replicas, replica r on task r: its loss, train op and (with
// `updates` > 0) one push outcome per update, and a session over them.
class Replicas {
 public:
  explicit Replicas(int n, int updates = 0) {
    std::vector<std::string> tasks;
    for (int r = 0; r < n; ++r) tasks.push_back(Task(r));
    cache_ = *WorkerCache::CreateLocal(tasks, [this](const std::string& task, const std::string&) {
      auto t = std::make_unique<ReplicaTask>(task);
      tasks_[task] = t.get();
      return t;
    });
    for (const std::string& t : tasks) cache_->GetOrCreateWorker(t);
    Graph g;
    GraphBuilder b(&g);
    for (int r = 0; r < n; ++r) {
      ReplicaNames names;
      const std::string p = absl::StrCat("r", r);
      b.set_device(Task(r));
      names.loss = p + "/loss";
      b.Const(Tensor::Scalar<float>(0), names.loss);
      names.train_op = p + "/train";
      b.Op("NoOp", {}, {}, names.train_op);
      for (int u = 0; u < updates; ++u) {
        names.push_outcomes.push_back(absl::StrCat(p, "/push", u));
        b.Const(Tensor::Scalar<int64_t>(0), names.push_outcomes.back());
      }
      rg_.replicas.push_back(names);
      task_names_.push_back(Task(r));
    }
    EXPECT_TRUE(b.status().ok()) << b.status();
    auto s = MasterSession::Create("replicas", g.ToGraphDef(), cache_.get());
    EXPECT_TRUE(s.ok()) << s.status();
    session_ = *std::move(s);
  }

  ReplicaTask& operator[](int r) { return *tasks_.at(Task(r)); }
  MasterSession* session() { return session_.get(); }
  const ReplicatedGraph& rg() const { return rg_; }
  const std::vector<std::string>& tasks() const { return task_names_; }

 private:
  std::map<std::string, ReplicaTask*> tasks_;  // owned by cache_
  std::unique_ptr<WorkerCache> cache_;
  std::unique_ptr<MasterSession> session_;
  ReplicatedGraph rg_;
  std::vector<std::string> task_names_;
};

// ---- AsyncReplicas ----

TEST(AsyncReplicasTest, RunsExactlyTheJobsStepsInDispatchesOfAtMostStepsPerCall) {
  Replicas c(2);
  c[0].SetStanding({0.5f});
  c[1].SetStanding({1.5f});
  std::atomic<bool> cancelled{false};
  AsyncReplicas async(c.session(), c.rg(), c.tasks(), /*total_steps=*/10, /*step_examples=*/8,
                      /*steps_per_call=*/3, &cancelled, nullptr);
  int64_t steps = 0;
  while (steps < 10) {
    absl::StatusOr<StepResult> r = async.Next(100);
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_GE(r->steps, 1);
    EXPECT_LE(r->steps, 3);
    EXPECT_EQ(r->examples, r->steps * 8);
    EXPECT_TRUE(r->loss == 0.5f || r->loss == 1.5f) << r->loss;
    steps += r->steps;
  }
  EXPECT_EQ(steps, 10);
  // Every ticket was run once; none was run twice or beyond the total.
  EXPECT_EQ(c[0].iterations_done() + c[1].iterations_done(), 10);
  for (int r = 0; r < 2; ++r) {
    for (int n : c[r].iterations_asked()) EXPECT_TRUE(n >= 1 && n <= 3) << n;
  }
  absl::StatusOr<StepResult> after = async.Next(100);
  EXPECT_EQ(after.status().code(), absl::StatusCode::kInternal) << after.status();
}

TEST(AsyncReplicasTest, NextHandsOutADispatchInPartsThatFit) {
  Replicas c(1);
  c[0].SetStanding({2.0f});
  std::atomic<bool> cancelled{false};
  AsyncReplicas async(c.session(), c.rg(), c.tasks(), 4, 8, 4, &cancelled, nullptr);
  absl::StatusOr<StepResult> r = async.Next(3);  // the epoch ends after 3
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->steps, 3);
  EXPECT_EQ(r->examples, 24);
  EXPECT_EQ(r->loss, 2.0f);
  r = async.Next(10);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->steps, 1);
  EXPECT_EQ(r->examples, 8);
  EXPECT_EQ(c[0].iterations_asked(), std::vector<int>{4});  // one dispatch of all 4
}

TEST(AsyncReplicasTest, TheFirstFailureEndsTheJobNamingTheTask) {
  Replicas c(2);
  c[1].Queue({});
  c[1].Queue({1.0f, {}, absl::InvalidArgumentError("node 'x' (MatMul): shapes [2,3] and [4,4]")});
  std::atomic<bool> cancelled{false};
  auto async = std::make_unique<AsyncReplicas>(c.session(), c.rg(), c.tasks(), 1000000, 8, 1, &cancelled, nullptr);
  absl::Status error;
  int64_t steps = 0;
  while (error.ok()) {
    absl::StatusOr<StepResult> r = async->Next(1);
    if (r.ok()) {
      steps += r->steps;
    } else {
      error = r.status();
    }
  }
  EXPECT_EQ(error.code(), absl::StatusCode::kInvalidArgument) << error;
  EXPECT_EQ(error.message(), "task /job:worker/task:1: node 'x' (MatMul): shapes [2,3] and [4,4]");
  EXPECT_LT(steps, 1000000);
  async.reset();  // the replicas stop: no step is handed out after the failure
  EXPECT_EQ(c[1].runs(), 2);
}

TEST(AsyncReplicasTest, ARecoveredReplicaGivesItsStepsBackToThePool) {
  Replicas c(1);
  c[0].Queue({});
  c[0].Queue({1.0f, {}, absl::UnavailableError("connection reset")});
  std::atomic<bool> cancelled{false};
  absl::Mutex mu;
  std::vector<std::pair<absl::Status, std::string>> recovered;
  AsyncReplicas async(c.session(), c.rg(), c.tasks(), 6, 8, 1, &cancelled,
                      [&](const absl::Status& s, const std::string& task) {
                        absl::MutexLock lock(&mu);
                        recovered.emplace_back(s, task);
                        return true;
                      });
  int64_t steps = 0;
  while (steps < 6) {
    absl::StatusOr<StepResult> r = async.Next(100);
    ASSERT_TRUE(r.ok()) << r.status();  // the failure is not the job's
    steps += r->steps;
  }
  EXPECT_EQ(steps, 6);
  // The failed step's ticket was run again: 7 runs, 6 steps.
  EXPECT_EQ(c[0].iterations_done(), 6);
  EXPECT_EQ(c[0].runs(), 7);
  absl::MutexLock lock(&mu);
  ASSERT_EQ(recovered.size(), 1u);
  EXPECT_EQ(recovered[0].first.code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(recovered[0].first.message(), "task /job:worker/task:0: connection reset");
  EXPECT_EQ(recovered[0].second, Task(0));
}

TEST(AsyncReplicasTest, ARecoveryThatGivesUpEndsTheJob) {
  Replicas c(1);
  c[0].Queue({1.0f, {}, absl::UnavailableError("connection reset")});
  std::atomic<bool> cancelled{false};
  AsyncReplicas async(c.session(), c.rg(), c.tasks(), 6, 8, 1, &cancelled,
                      [](const absl::Status&, const std::string&) { return false; });
  absl::StatusOr<StepResult> r = async.Next(100);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kUnavailable) << r.status();
  EXPECT_EQ(r.status().message(), "task /job:worker/task:0: connection reset");
}

TEST(AsyncReplicasTest, QuiesceWaitsForTheRunningStepsAndHoldsBackNewOnes) {
  Replicas c(2);
  c[0].SetHold(true);
  c[1].SetHold(true);
  std::atomic<bool> cancelled{false};
  AsyncReplicas async(c.session(), c.rg(), c.tasks(), 1000, 8, 1, &cancelled, nullptr);
  ASSERT_TRUE(c[0].AwaitHeld(1, kWait) && c[1].AwaitHeld(1, kWait)) << "the replicas' first steps never started";

  int running_at_fn = -1, runs_at_fn = -1;
  int64_t completed_at_fn = -1;
  absl::Status quiesced;
  std::thread checkpoint([&] {
    quiesced = async.Quiesce([&](int64_t completed) {
      running_at_fn = c[0].running() + c[1].running();
      runs_at_fn = c[0].runs() + c[1].runs();
      completed_at_fn = completed;
      return absl::OkStatus();
    });
  });
  // Let the held steps finish only once new ones are held back: then no
  // replica can start another before fn.
  const absl::Time deadline = absl::Now() + kWait;
  while (!async.holding() && absl::Now() < deadline) std::this_thread::yield();
  EXPECT_TRUE(async.holding()) << "Quiesce never held new steps back";
  c[0].SetHold(false);
  c[1].SetHold(false);
  c[0].Release();
  c[1].Release();
  checkpoint.join();
  ASSERT_TRUE(quiesced.ok()) << quiesced;
  // fn ran with no step in flight, after the two held ones finished, none
  // started since, and was told of both.
  EXPECT_EQ(running_at_fn, 0);
  EXPECT_EQ(runs_at_fn, 2);
  EXPECT_EQ(completed_at_fn, 2);
  // Then the replicas go on.
  int64_t steps = 0;
  while (steps < 4) {
    absl::StatusOr<StepResult> r = async.Next(100);
    ASSERT_TRUE(r.ok()) << r.status();
    steps += r->steps;
  }
  EXPECT_GT(c[0].runs() + c[1].runs(), 2);
}

TEST(AsyncReplicasTest, ACancelEndsNext) {
  Replicas c(1);
  c[0].SetHold(true);
  std::atomic<bool> cancelled{false};
  auto async = std::make_unique<AsyncReplicas>(c.session(), c.rg(), c.tasks(), 1000, 8, 1, &cancelled, nullptr);
  ASSERT_TRUE(c[0].AwaitHeld(1, kWait)) << "the replica's first step never started";
  cancelled.store(true);
  absl::StatusOr<StepResult> r = async->Next(100);  // wakes up to look
  EXPECT_EQ(r.status().code(), absl::StatusCode::kCancelled) << r.status();
  c[0].SetHold(false);
  c[0].Release();
  async.reset();
  EXPECT_EQ(c[0].runs(), 1);  // no step starts once cancelled
}

// ---- AccumulatingReplicas ----

TEST(AccumulatingReplicasTest, AGlobalStepIsDoneWhenEveryUpdateHasAppliedIt) {
  Replicas c(1, /*updates=*/2);
  c[0].Queue({1.0f, {1, -1}});   // update 0 applied, update 1 refused as stale
  c[0].Queue({3.0f, {0, 1}});    // update 1 applied: global step 1
  c[0].Queue({5.0f, {-1, -1}});  // all stale: its loss does not count
  c[0].Queue({7.0f, {1, 1}});    // global step 2
  std::atomic<bool> cancelled{false};
  AccumulatingReplicas acc(c.session(), c.rg(), /*total_steps=*/2, /*step_examples=*/16, &cancelled);
  absl::StatusOr<StepResult> r = acc.Next();
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->loss, 2.0f);  // the mean of the accepted steps' losses
  EXPECT_EQ(r->examples, 16);
  EXPECT_EQ(r->steps, 1);
  r = acc.Next();
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->loss, 7.0f);
  // The last global step stops the replica: no fifth step.
  EXPECT_EQ(c[0].runs(), 4);
  EXPECT_EQ(acc.refused(), 3);
  EXPECT_EQ(acc.refused_steps(), 2);
  r = acc.Next();
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInternal) << r.status();
}

TEST(AccumulatingReplicasTest, AFailedStepEndsTheJob) {
  Replicas c(2, 1);
  c[1].Queue({1.0f, {}, absl::InternalError("node 'acc' (AccumulateApplyGradientDescent): bad step")});
  c[0].SetHold(true);  // parked until the failure's abort
  std::atomic<bool> cancelled{false};
  auto acc = std::make_unique<AccumulatingReplicas>(c.session(), c.rg(), 100, 16, &cancelled);
  absl::StatusOr<StepResult> r = acc->Next();
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInternal) << r.status();
  EXPECT_EQ(r.status().message(), "task /job:worker/task:1: node 'acc' (AccumulateApplyGradientDescent): bad step");
  acc.reset();  // aborts the parked push of replica 0 and joins
  EXPECT_EQ(c[0].running(), 0);
}

TEST(AccumulatingReplicasTest, QuiesceAbortsParkedPushesWithoutFailingTheJob) {
  Replicas c(2, 1);
  c[0].SetHold(true);
  c[1].SetHold(true);
  std::atomic<bool> cancelled{false};
  AccumulatingReplicas acc(c.session(), c.rg(), 3, 16, &cancelled);
  ASSERT_TRUE(c[0].AwaitHeld(1, kWait) && c[1].AwaitHeld(1, kWait)) << "the replicas' pushes never parked";

  int running_at_fn = -1;
  int64_t completed_at_fn = -1;
  absl::Status s = acc.Quiesce([&](int64_t completed) {
    running_at_fn = c[0].running() + c[1].running();
    completed_at_fn = completed;
    // Steps after the checkpoint apply at once.
    c[0].SetHold(false);
    c[1].SetHold(false);
    return absl::OkStatus();
  });
  ASSERT_TRUE(s.ok()) << s;
  EXPECT_EQ(running_at_fn, 0);
  EXPECT_EQ(completed_at_fn, 0);
  for (int r = 0; r < 2; ++r) {
    std::vector<AbortStepRequest> aborts = c[r].aborts();
    ASSERT_FALSE(aborts.empty()) << Task(r);
    EXPECT_EQ(aborts[0].code(), static_cast<int>(absl::StatusCode::kAborted));
    EXPECT_EQ(aborts[0].message(), "held for a checkpoint");
  }
  // The aborted pushes were not the job's failure: its 3 global steps come.
  for (int i = 0; i < 3; ++i) {
    absl::StatusOr<StepResult> r = acc.Next();
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_EQ(r->steps, 1);
  }
}

TEST(AccumulatingReplicasTest, DestroyingThemAbortsTheParkedPushes) {
  Replicas c(2, 1);
  c[0].SetHold(true);
  c[1].SetHold(true);
  std::atomic<bool> cancelled{false};
  auto acc = std::make_unique<AccumulatingReplicas>(c.session(), c.rg(), 100, 16, &cancelled);
  ASSERT_TRUE(c[0].AwaitHeld(1, kWait) && c[1].AwaitHeld(1, kWait)) << "the replicas' pushes never parked";
  absl::Notification destroyed;
  std::thread stop([&] {
    acc.reset();
    destroyed.Notify();
  });
  const bool stopped = destroyed.WaitForNotificationWithTimeout(kWait);
  EXPECT_TRUE(stopped) << "destroying the replicas did not free their parked pushes";
  if (!stopped) {
    c[0].Release();
    c[1].Release();
  }
  stop.join();
  for (int r = 0; r < 2; ++r) {
    std::vector<AbortStepRequest> aborts = c[r].aborts();
    ASSERT_FALSE(aborts.empty()) << Task(r);
    EXPECT_EQ(aborts[0].code(), static_cast<int>(absl::StatusCode::kCancelled));
    EXPECT_EQ(aborts[0].message(), "the job's last global step is done");
    EXPECT_EQ(c[r].running(), 0);
  }
}

TEST(AccumulatingReplicasTest, ACancelEndsNextAndAJobOfNoStepsRunsNone) {
  Replicas c(1, 1);
  c[0].SetHold(true);
  std::atomic<bool> cancelled{false};
  {
    AccumulatingReplicas acc(c.session(), c.rg(), 100, 16, &cancelled);
    ASSERT_TRUE(c[0].AwaitHeld(1, kWait)) << "the replica's push never parked";
    cancelled.store(true);
    absl::StatusOr<StepResult> r = acc.Next();
    EXPECT_EQ(r.status().code(), absl::StatusCode::kCancelled) << r.status();
  }  // aborts the parked push
  EXPECT_EQ(c[0].runs(), 1);

  cancelled.store(false);
  AccumulatingReplicas none(c.session(), c.rg(), 0, 16, &cancelled);
  absl::StatusOr<StepResult> r = none.Next();
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInternal) << r.status();
  EXPECT_EQ(c[0].runs(), 1);
}

}  // namespace
}  // namespace master
}  // namespace weft
