// Fault injection with real processes: a master (keeping its jobs in a state
// directory), two workers and a parameter server run as separate `weft`
// processes on loopback; the tests SIGKILL one of them mid-job and restart
// it at the same address, as Kubernetes or `weft local` would.
//
// What must hold (master/job_runner.h): a sync job restored from its newest
// valid checkpoint ends with exactly the variables of an undisturbed run; an
// async PS job loses no steps to a dead worker; a restarted master resumes
// its unfinished job; a task that never comes back fails the job naming it;
// a damaged checkpoint is never restored.
//
// Each kill lands at a random step drawn from the run's seed (printed as
// WEFT_TEST_SEED=n; set it to replay the same steps); the target is printed
// and traced too, and each recovery prints its figures:
//   [fault] ... killed at step X ...; recovered in Y s; steps lost Z
//
// Every daemon binds a port the kernel picks and reports it; the tasks learn
// one another's from the master. A restarted daemon binds the port it had.
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <iterator>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "client/grpc_master_client.h"
#include "client/subprocess.h"
#include "common/dtype.h"
#include "common/env.h"
#include "common/status_macros.h"
#include "common/tensor.h"
#include "common/test_util.h"
#include "gtest/gtest.h"
#include "job/job_spec.h"
#include "proto/checkpoint.pb.h"
#include "ps/checkpoint_index.h"
#include "ps/manifest.h"
#include "ps/shard_file.h"
#include "runtime/data/test_files.h"
#include "tests/test_checkpoints.h"
#include "tests/test_cluster.h"
#include "tests/test_tls.h"

namespace weft {
namespace {

using data::testing::TempPath;
using testing::ExpectSameVariables;
using testing::ReadNewestCheckpoint;
using testing::SavedCheckpoint;

constexpr int kExamples = 480;
constexpr int kBatch = 16;   // the global batch: 8 per replica
constexpr int kSteps = 400;  // job steps (async PS: replica steps)
constexpr int kEvery = 50;   // checkpoint.every_steps
// No dispatch runs past a checkpoint by steps (however many steps the
// master gives it): a recovery trains again at most the steps since the
// last checkpoint, plus one.
constexpr int kMaxStepsLost = kEvery + 1;
// Bounds on waits that a healthy run ends far inside.
constexpr absl::Duration kJobDeadline = absl::Seconds(150);

const char* const kPs = "/job:ps/task:0";
const char* const kWorker0 = "/job:worker/task:0";
const char* const kWorker1 = "/job:worker/task:1";

// A synthetic 3-class problem: class c brightens the c-th third of a
// 12-pixel image.
std::string WriteData(const std::string& dir, int n) { return testing::WriteThreeClassData(dir, n); }

JobSpec FaultJob(const std::string& data, StrategySpec::Kind kind, bool sync, const std::string& checkpoint_dir,
                 int64_t steps, int task_wait_seconds) {
  auto job = ParseJob(absl::StrCat(R"(name: "fault-job"
      model { input_shape: [12] num_classes: 3
              layer { dense { units: 16 activation: RELU } } layer { dense { units: 3 } } }
      dataset { dir: ")", data, R"(" } optimizer { sgd { learning_rate: 0.1 } } seed: 2 intra_op_threads: 1
      batch_size: )", kBatch, " steps: ", steps, R"(
      checkpoint { dir: ")", checkpoint_dir, R"(" every_steps: )", kEvery, R"( }
      recovery { task_wait_seconds: )", task_wait_seconds, " }"),
                      "fault_test");
  EXPECT_TRUE(job.ok()) << job.status();
  job->mutable_strategy()->set_kind(kind);
  job->mutable_strategy()->set_sync(sync);
  return *job;
}


bool Terminal(JobState s) { return s == SUCCEEDED || s == FAILED || s == CANCELLED; }

std::string ReadText(const std::string& path) {
  std::ifstream in(path);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

// The undisturbed runs' final checkpoints, by strategy kind, computed once
// per test binary by the first test that needs one (the runs are
// deterministic, so any cluster of this shape gives the same).
std::map<int, SavedCheckpoint>& UndisturbedRuns() {
  static auto* runs = new std::map<int, SavedCheckpoint>;
  return *runs;
}

class FaultTest : public ::testing::Test {
 protected:
  void SetUp() override {
    // Unique per test and per run: the checkpoint and state directories of
    // one run never see another's.
    static int run = 0;
    tag_ = absl::StrCat(::testing::UnitTest::GetInstance()->current_test_info()->name(), "-", ::getpid(), "-", ++run);
    rng_ = testing::TestRng();
    // Every daemon runs over mTLS, as users run them.
    auto tls = testing::TestTls::Create(Path("tls"));
    ASSERT_TRUE(tls.ok()) << tls.status();
    tls_ = std::make_unique<testing::TestTls>(*std::move(tls));
    data_ = WriteData(Path("data"), kExamples);
    // The checkpoint directories (Path(...)) lie in the test's temp dir: the
    // daemons' checkpoint root.
    const std::string root = "--checkpoint_root=" + ::testing::TempDir();
    // The tasks start side by side, knowing only themselves; the master,
    // last, gets the ports they report and sends them the cluster.
    Add("ps-0", {"ps", "--task=ps:0", root});
    // Two CPU devices on worker 0: MIRRORED and CENTRAL_STORAGE replicate over them.
    Add("worker-0", {"worker", "--task=worker:0", "--cpu_devices=2", root});
    Add("worker-1", {"worker", "--task=worker:1", root});
    for (auto& [name, d] : daemons_) ASSERT_TRUE(d->Launch().ok()) << name;
    for (auto& [name, d] : daemons_) {
      absl::Status s = d->AwaitPort();
      ASSERT_TRUE(s.ok()) << s;
    }
    const std::string cluster = absl::StrCat("worker=", daemons_["worker-0"]->address(), ",",
                                             daemons_["worker-1"]->address(), ";ps=", daemons_["ps-0"]->address());
    testing::TestDaemon* master =
        Add("master", {"master", "--cluster=" + cluster, "--state_dir=" + Path("state"), root});
    absl::Status s = master->Start();
    ASSERT_TRUE(s.ok()) << s;
    master_addr_ = master->address();
    client_ = MasterClient::Create(master_addr_, tls_->ClientOptions());
    ASSERT_TRUE(testing::WaitForCluster(client_.get(), 3, All()));
  }

  void TearDown() override {
    for (auto& [name, d] : daemons_) testing::ExpectStopsOnSigterm(d.get());
  }

  // A fresh path of this test's run.
  std::string Path(const std::string& name) const { return TempPath(absl::StrCat(tag_, "-", name)); }
  std::string LogPath(const std::string& proc) const { return Path(proc + ".log"); }

  // A daemon (not yet started) with its identity's certificate, datasets
  // confined to the test's own directory.
  testing::TestDaemon* Add(const std::string& name, std::vector<std::string> args) {
    for (const std::string& flag : tls_->DaemonFlags(testing::DaemonIdentity(name))) args.push_back(flag);
    args.push_back("--data_root=" + ::testing::TempDir());
    auto& d = daemons_[name];
    d = std::make_unique<testing::TestDaemon>(name, std::move(args), LogPath(name));
    return d.get();
  }
  std::vector<testing::TestDaemon*> All() {
    std::vector<testing::TestDaemon*> all;
    for (auto& [name, d] : daemons_) all.push_back(d.get());
    return all;
  }
  Subprocess* Proc(const std::string& name) { return daemons_.at(name)->process(); }

  // A step past the first checkpoint, drawn from the test's seeded
  // generator, and early enough that the job is still running when the
  // signal lands: the fastest strategies run a step in well under a
  // millisecond, and a poll that sees the target sleeps up to 50 ms between
  // looks (the rest of the job, 250 steps or more, takes longer).
  int RandomKillStep() { return std::uniform_int_distribution<int>(kEvery + 1, kSteps * 3 / 8)(rng_); }

  // SIGKILL, and reap it.
  void Kill(const std::string& name) {
    Subprocess* p = Proc(name);
    ASSERT_TRUE(p->Running()) << name << " died before it was killed: " << DescribeExitStatus(p->exit_status());
    p->Signal(SIGKILL);
    ASSERT_TRUE(p->WaitFor(absl::Seconds(10))) << name << " outlived SIGKILL";
    EXPECT_TRUE(WIFSIGNALED(p->exit_status()) && WTERMSIG(p->exit_status()) == SIGKILL)
        << name << " " << DescribeExitStatus(p->exit_status());
  }

  // The same command line on the port it had (so at the same address, as
  // Kubernetes or `weft local` would restart it), appending to its log;
  // returns once it serves. Called on the test's thread, which outlives the
  // child (PR_SET_PDEATHSIG).
  void Restart(const std::string& name) {
    absl::Status s = daemons_.at(name)->Restart();
    ASSERT_TRUE(s.ok()) << s;
  }

  absl::StatusOr<std::string> Submit(const JobSpec& job) { return client_->SubmitJob(job); }

  // The master's restores so far, each "restored N variable(s) of step S
  // from <path>" (master/checkpointer.cc), in order.
  std::vector<std::string> Restores() const {
    std::vector<std::string> out;
    const std::string log = ReadText(LogPath("master"));
    for (absl::string_view line : absl::StrSplit(log, '\n')) {
      const size_t at = line.find("restored ");
      if (at != absl::string_view::npos && absl::StrContains(line, " from ")) out.emplace_back(line.substr(at));
    }
    return out;
  }

  // Polls the job until `until` holds for its status or it ends; returns the
  // last status. For kills that must land at a given step: the watch
  // publishes progress only about once a second. `what` says what `until`
  // waits for, for the failure message.
  JobStatus PollUntil(const std::string& id, const std::string& what,
                      const std::function<bool(const JobStatus&)>& until) {
    return testing::PollJobUntil(client_.get(), id, kJobDeadline, what, until);
  }

  // Watches the job to its end, recording every state it streams. A job
  // still running after kJobDeadline is cancelled, which ends the watch.
  JobStatus WatchToEnd(const std::string& id, std::vector<JobState>* states = nullptr) {
    return testing::WatchJobToEnd(client_.get(), id, kJobDeadline, [&](const JobStatus& st) {
      if (states != nullptr && (states->empty() || states->back() != st.state())) states->push_back(st.state());
    });
  }

  // The final checkpoint of an undisturbed run of `kind` (sync), run here
  // when no earlier test has.
  const SavedCheckpoint* Undisturbed(StrategySpec::Kind kind) {
    auto it = UndisturbedRuns().find(kind);
    if (it != UndisturbedRuns().end()) return &it->second;
    const std::string dir = Path(absl::StrCat("undisturbed-", StrategySpec::Kind_Name(kind), "-ckpt"));
    auto id = Submit(FaultJob(data_, kind, /*sync=*/true, dir, kSteps, 60));
    EXPECT_TRUE(id.ok()) << id.status();
    if (!id.ok()) return nullptr;
    JobStatus st = WatchToEnd(*id);
    EXPECT_EQ(st.state(), SUCCEEDED) << st.DebugString();
    EXPECT_EQ(st.step(), kSteps);
    EXPECT_EQ(st.restarts(), 0) << st.DebugString();
    absl::StatusOr<SavedCheckpoint> saved = ReadNewestCheckpoint(dir);
    EXPECT_TRUE(saved.ok()) << saved.status();
    if (!saved.ok() || st.state() != SUCCEEDED) return nullptr;
    std::printf("[fault] undisturbed %s: test accuracy %.4f, train loss %.6f, %.1f s\n",
                StrategySpec::Kind_Name(kind).c_str(), st.test_accuracy(), st.train_loss(), st.wall_seconds());
    return &UndisturbedRuns().emplace(kind, *std::move(saved)).first->second;
  }

  std::string tag_, master_addr_, data_;
  std::mt19937_64 rng_;
  std::unique_ptr<testing::TestTls> tls_;
  std::map<std::string, std::unique_ptr<testing::TestDaemon>> daemons_;
  std::unique_ptr<MasterClient> client_;
};

// Sync PS losing its ps, and multi-worker mirrored losing a worker: the job
// recovers once from its newest checkpoint and ends with the undisturbed
// run's variables, bit for bit.
TEST_F(FaultTest, SyncJobsKilledMidJobEndWithTheUndisturbedVariables) {
  struct Case {
    StrategySpec::Kind kind;
    std::string victim;  // process
    std::string task;    // its task name
  };
  for (const Case& c : {Case{StrategySpec::PARAMETER_SERVER, "ps-0", kPs},
                        Case{StrategySpec::PARAMETER_SERVER, "worker-0", kWorker0},
                        Case{StrategySpec::MULTI_WORKER_MIRRORED, "worker-1", kWorker1},
                        Case{StrategySpec::MIRRORED, "worker-0", kWorker0},
                        Case{StrategySpec::CENTRAL_STORAGE, "worker-0", kWorker0}}) {
    const std::string kind = StrategySpec::Kind_Name(c.kind);
    const SavedCheckpoint* undisturbed = Undisturbed(c.kind);
    ASSERT_NE(undisturbed, nullptr) << kind;
    const int target = RandomKillStep();
    SCOPED_TRACE(absl::StrCat(kind, ": kill ", c.victim, " at step >= ", target));
    std::printf("[fault] %s: killing %s at step >= %d\n", kind.c_str(), c.victim.c_str(), target);

    const size_t restores_before = Restores().size();
    const std::string dir = Path(absl::StrCat(kind, "-", c.victim, "-ckpt"));
    auto id = Submit(FaultJob(data_, c.kind, /*sync=*/true, dir, kSteps, 60));
    ASSERT_TRUE(id.ok()) << id.status();
    JobStatus before =
        PollUntil(*id, absl::StrCat("step ", target), [&](const JobStatus& s) { return s.step() >= target; });
    ASSERT_EQ(before.state(), RUNNING) << before.DebugString();
    Kill(c.victim);
    Restart(c.victim);
    JobStatus st = WatchToEnd(*id);

    EXPECT_EQ(st.state(), SUCCEEDED) << st.DebugString();
    EXPECT_EQ(st.step(), kSteps);
    EXPECT_EQ(st.restarts(), 1) << st.DebugString();
    EXPECT_EQ(st.failed_task(), c.task) << st.DebugString();
    EXPECT_GE(st.steps_lost(), 0);
    EXPECT_LE(st.steps_lost(), kMaxStepsLost) << st.DebugString();
    EXPECT_GT(st.recovery_seconds(), 0) << st.DebugString();
    absl::StatusOr<SavedCheckpoint> final_checkpoint = ReadNewestCheckpoint(dir);
    ASSERT_TRUE(final_checkpoint.ok()) << final_checkpoint.status();
    ExpectSameVariables(*final_checkpoint, *undisturbed);
    const std::vector<std::string> restores = Restores();
    EXPECT_EQ(restores.size(), restores_before + 1);
    for (size_t i = restores_before; i < restores.size(); ++i) std::printf("[fault] %s\n", restores[i].c_str());
    std::printf("[fault] %s: %s killed at step %lld; recovered in %.2f s; steps lost %lld; test accuracy %.4f; "
                "%zu variable(s) of step %lld compared\n",
                kind.c_str(), c.task.c_str(), static_cast<long long>(before.step()), st.recovery_seconds(),
                static_cast<long long>(st.steps_lost()), st.test_accuracy(), final_checkpoint->variables.size(),
                static_cast<long long>(final_checkpoint->step));
  }
}

// A preemption: SIGTERM to the ps makes it drain; the master checkpoints
// after the running step and releases it, it exits on its own, and once it
// is back the job resumes from that checkpoint without training a step twice.
TEST_F(FaultTest, APreemptedPsIsCheckpointedBeforeItStopsAndNoStepIsLost) {
  const SavedCheckpoint* undisturbed = Undisturbed(StrategySpec::PARAMETER_SERVER);
  ASSERT_NE(undisturbed, nullptr);
  // Early enough that the job is still running when the heartbeat sees it.
  const int target = std::min(RandomKillStep(), kSteps / 2);
  SCOPED_TRACE(absl::StrCat("SIGTERM to ps-0 at step >= ", target));
  JobSpec job = FaultJob(data_, StrategySpec::PARAMETER_SERVER, /*sync=*/true, Path("ckpt"), kSteps, 60);
  job.mutable_recovery()->set_heartbeat_ms(20);
  auto id = Submit(job);
  ASSERT_TRUE(id.ok()) << id.status();
  JobStatus before =
      PollUntil(*id, absl::StrCat("step ", target), [&](const JobStatus& s) { return s.step() >= target; });
  ASSERT_EQ(before.state(), RUNNING) << before.DebugString();
  Subprocess* ps = Proc("ps-0");
  ps->Signal(SIGTERM);
  // It stops once the master has released it (well before its drain limit).
  ASSERT_TRUE(ps->WaitFor(absl::Seconds(60))) << "the ps did not stop after SIGTERM";
  EXPECT_TRUE(WIFEXITED(ps->exit_status()) && WEXITSTATUS(ps->exit_status()) == 0)
      << DescribeExitStatus(ps->exit_status());
  Restart("ps-0");
  JobStatus st = WatchToEnd(*id);
  EXPECT_EQ(st.state(), SUCCEEDED) << st.DebugString();
  EXPECT_EQ(st.step(), kSteps);
  EXPECT_EQ(st.restarts(), 1) << st.DebugString();
  EXPECT_EQ(st.failed_task(), kPs) << st.DebugString();
  EXPECT_TRUE(absl::StrContains(st.failure(), "SIGTERM")) << st.failure();
  EXPECT_EQ(st.steps_lost(), 0) << st.DebugString();
  absl::StatusOr<SavedCheckpoint> final_checkpoint = ReadNewestCheckpoint(Path("ckpt"));
  ASSERT_TRUE(final_checkpoint.ok()) << final_checkpoint.status();
  ExpectSameVariables(*final_checkpoint, *undisturbed);
  std::printf("[fault] ps preempted (SIGTERM) at step %lld; recovered in %.2f s; steps lost %lld\n",
              static_cast<long long>(before.step()), st.recovery_seconds(), static_cast<long long>(st.steps_lost()));
}

// Sync PS aggregating the first k of N gradients: checkpoints hold the
// replicas back between global steps (their parked pushes aborted), and a
// lost ps costs at most the steps since the last one.
TEST_F(FaultTest, KOfNParameterServerRecoversFromItsCheckpoint) {
  const int target = RandomKillStep();
  SCOPED_TRACE(absl::StrCat("k of N: kill ps-0 at step >= ", target));
  JobSpec job = FaultJob(data_, StrategySpec::PARAMETER_SERVER, /*sync=*/true, Path("ckpt"), kSteps, 60);
  job.mutable_strategy()->set_replicas_to_aggregate(2);
  auto id = Submit(job);
  ASSERT_TRUE(id.ok()) << id.status();
  JobStatus before =
      PollUntil(*id, absl::StrCat("step ", target), [&](const JobStatus& s) { return s.step() >= target; });
  ASSERT_EQ(before.state(), RUNNING) << before.DebugString();
  Kill("ps-0");
  Restart("ps-0");
  JobStatus st = WatchToEnd(*id);
  EXPECT_EQ(st.state(), SUCCEEDED) << st.DebugString();
  EXPECT_EQ(st.step(), kSteps);
  EXPECT_EQ(st.restarts(), 1) << st.DebugString();
  EXPECT_EQ(st.failed_task(), kPs) << st.DebugString();
  EXPECT_GT(st.checkpoint_step(), 0) << st.DebugString();
  EXPECT_LE(st.steps_lost(), kMaxStepsLost) << st.DebugString();
  EXPECT_GT(st.test_accuracy(), 0.9) << st.DebugString();
  std::printf("[fault] k-of-N PARAMETER_SERVER (k=2 of 2): ps killed at step %lld; recovered in %.2f s; steps lost "
              "%lld; test accuracy %.4f\n",
              static_cast<long long>(before.step()), st.recovery_seconds(), static_cast<long long>(st.steps_lost()),
              st.test_accuracy());
}

// Async PS: the killed worker's replica waits for it while the other trains
// on; no step is trained twice and the job learns.
TEST_F(FaultTest, AsyncParameterServerLosesNoStepsToAKilledWorker) {
  const int target = RandomKillStep();
  SCOPED_TRACE(absl::StrCat("kill worker-1 at step >= ", target));
  std::printf("[fault] async PARAMETER_SERVER: killing worker-1 at step >= %d\n", target);
  // Long enough, one step per dispatch, that the job still runs when the
  // poll sees the target: with pulls through shared memory both ways 400
  // sized steps took under half a second, and once the job had ended first.
  const int steps = 4 * kSteps;
  JobSpec job = FaultJob(data_, StrategySpec::PARAMETER_SERVER, /*sync=*/false, Path("ckpt"), steps, 60);
  job.mutable_strategy()->set_steps_per_execution(1);
  auto id = Submit(job);
  ASSERT_TRUE(id.ok()) << id.status();
  JobStatus before =
      PollUntil(*id, absl::StrCat("step ", target), [&](const JobStatus& s) { return s.step() >= target; });
  ASSERT_EQ(before.state(), RUNNING) << before.DebugString();
  Kill("worker-1");
  Restart("worker-1");
  JobStatus st = WatchToEnd(*id);

  EXPECT_EQ(st.state(), SUCCEEDED) << st.DebugString();
  EXPECT_EQ(st.step(), steps);  // every replica step, none lost
  EXPECT_EQ(st.steps_lost(), 0) << st.DebugString();
  EXPECT_GE(st.restarts(), 1) << st.DebugString();
  EXPECT_EQ(st.failed_task(), kWorker1) << st.DebugString();
  // An undisturbed run reaches 1.0 on this data; chance is 1/3.
  EXPECT_GT(st.test_accuracy(), 0.9) << st.DebugString();
  std::printf("[fault] async PARAMETER_SERVER: %s killed at step %lld; recovered in %.2f s; steps lost %lld; "
              "test accuracy %.4f\n",
              kWorker1, static_cast<long long>(before.step()), st.recovery_seconds(),
              static_cast<long long>(st.steps_lost()), st.test_accuracy());
}

// The master dies mid-job; restarted over the same state directory it
// resumes the job under its id from its newest checkpoint, to the same end.
TEST_F(FaultTest, RestartedMasterResumesTheJobToTheUndisturbedVariables) {
  const SavedCheckpoint* undisturbed = Undisturbed(StrategySpec::PARAMETER_SERVER);
  ASSERT_NE(undisturbed, nullptr);
  // SIGKILL: the successor resumes from the newest checkpoint. SIGTERM (a
  // preemption, with --state_dir): the master checkpoints the job after its
  // running step first, so the successor trains no step twice.
  for (int sig : {SIGKILL, SIGTERM}) {
    const int target = RandomKillStep();
    SCOPED_TRACE(absl::StrCat("signal ", sig, " to the master at step >= ", target));
    std::printf("[fault] sync PARAMETER_SERVER: signal %d to the master at step >= %d\n", sig, target);
    const std::string dir = Path(absl::StrCat("ckpt-", sig));
    auto id = Submit(FaultJob(data_, StrategySpec::PARAMETER_SERVER, /*sync=*/true, dir, kSteps, 60));
    ASSERT_TRUE(id.ok()) << id.status();
    JobStatus before =
        PollUntil(*id, absl::StrCat("step ", target), [&](const JobStatus& s) { return s.step() >= target; });
    ASSERT_EQ(before.state(), RUNNING) << before.DebugString();
    if (sig == SIGKILL) {
      Kill("master");
    } else {
      Subprocess* m = Proc("master");
      m->Signal(SIGTERM);
      ASSERT_TRUE(m->WaitFor(absl::Seconds(60))) << "the master did not stop after SIGTERM";
      EXPECT_TRUE(WIFEXITED(m->exit_status()) && WEXITSTATUS(m->exit_status()) == 0)
          << DescribeExitStatus(m->exit_status());
    }
    const size_t restores_before = Restores().size();
    Restart("master");

    // The old stream died with the master: a new client polls.
    client_ = MasterClient::Create(master_addr_, tls_->ClientOptions());
    ASSERT_TRUE(client_->WaitForConnection(absl::Seconds(60)).ok());
    JobStatus st;
    bool seen = false;
    std::vector<JobState> states;
    EXPECT_TRUE(testing::WaitUntil(kJobDeadline, absl::StrCat("the restarted master to finish job ", *id),
                                   [&]() -> absl::StatusOr<bool> {
                                     absl::StatusOr<JobStatus> got = client_->GetJob(*id);
                                     // The master may not serve its restored jobs at once; nothing else.
                                     if (absl::IsUnavailable(got.status()) || absl::IsDeadlineExceeded(got.status())) {
                                       return false;
                                     }
                                     if (!got.ok()) return got.status();
                                     st = *got;
                                     seen = true;
                                     if (states.empty() || states.back() != st.state()) states.push_back(st.state());
                                     return Terminal(st.state());
                                   }))
        << st.DebugString();
    ASSERT_TRUE(seen) << "the restarted master never reported job " << *id;
    EXPECT_EQ(st.job_id(), *id);
    EXPECT_EQ(st.state(), SUCCEEDED) << st.DebugString();
    EXPECT_EQ(st.step(), kSteps);
    EXPECT_GE(st.restarts(), 1) << st.DebugString();
    EXPECT_EQ(st.failed_task(), "master") << st.DebugString();
    absl::StatusOr<SavedCheckpoint> final_checkpoint = ReadNewestCheckpoint(dir);
    ASSERT_TRUE(final_checkpoint.ok()) << final_checkpoint.status();
    ExpectSameVariables(*final_checkpoint, *undisturbed);
    const std::vector<std::string> restores = Restores();
    ASSERT_GT(restores.size(), restores_before);
    for (size_t i = restores_before; i < restores.size(); ++i) std::printf("[fault] %s\n", restores[i].c_str());
    if (sig == SIGTERM) {
      // Restored from the checkpoint the stopping master took at the step it
      // had reached, not from an every_steps one before the signal.
      const std::string& line = restores[restores_before];
      const size_t at = line.find("of step ");
      ASSERT_NE(at, std::string::npos) << line;
      int64_t restored = -1;
      ASSERT_TRUE(absl::SimpleAtoi(line.substr(at + 8, line.find(' ', at + 8) - (at + 8)), &restored)) << line;
      EXPECT_GE(restored, before.step()) << line;
      EXPECT_EQ(st.steps_lost(), 0) << st.DebugString();
    }
    std::string seen_states;
    for (JobState s : states) absl::StrAppend(&seen_states, seen_states.empty() ? "" : " -> ", JobState_Name(s));
    std::printf("[fault] sync PARAMETER_SERVER: master stopped by signal %d at step %lld (checkpoint step %lld then); "
                "recovered in %.2f s; steps lost %lld; states after the restart: %s\n",
                sig, static_cast<long long>(before.step()), static_cast<long long>(before.checkpoint_step()),
                st.recovery_seconds(), static_cast<long long>(st.steps_lost()), seen_states.c_str());
  }
}

// A worker that is killed and not restarted: the job waits
// recovery.task_wait_seconds in RECOVERING, then fails naming it; the master
// keeps serving.
TEST_F(FaultTest, ATaskThatNeverComesBackFailsTheJobNamingIt) {
  auto id = Submit(FaultJob(data_, StrategySpec::PARAMETER_SERVER, /*sync=*/true, Path("ckpt"), 100000, 2));
  ASSERT_TRUE(id.ok()) << id.status();
  JobStatus before = PollUntil(*id, "its first step", [](const JobStatus& s) { return s.step() > 0; });
  ASSERT_EQ(before.state(), RUNNING) << before.DebugString();
  Kill("worker-1");
  std::vector<JobState> states;
  JobStatus st = WatchToEnd(*id, &states);

  EXPECT_EQ(st.state(), FAILED) << st.DebugString();
  EXPECT_TRUE(absl::StrContains(st.error(), kWorker1)) << st.error();
  EXPECT_TRUE(absl::StrContains(st.error(), "did not come back")) << st.error();
  EXPECT_EQ(st.error_code(), static_cast<int>(absl::StatusCode::kUnavailable)) << st.error();
  EXPECT_NE(std::find(states.begin(), states.end(), RECOVERING), states.end()) << "never RECOVERING";
  EXPECT_EQ(st.failed_task(), kWorker1) << st.DebugString();
  auto jobs = client_->ListJobs();
  ASSERT_TRUE(jobs.ok()) << jobs.status();
  EXPECT_EQ(jobs->size(), 1u);
  std::printf("[fault] worker 1 killed at step %lld and not restarted: %s\n", static_cast<long long>(before.step()),
              st.error().c_str());
}

// A checkpoint damaged after it was written (one flipped byte in a shard)
// is passed over: the job restores an older (or newer) valid one and still
// ends with the undisturbed run's variables.
TEST_F(FaultTest, ADamagedCheckpointIsNeverRestored) {
  const SavedCheckpoint* undisturbed = Undisturbed(StrategySpec::PARAMETER_SERVER);
  ASSERT_NE(undisturbed, nullptr);
  const std::string dir = Path("ckpt");
  auto id = Submit(FaultJob(data_, StrategySpec::PARAMETER_SERVER, /*sync=*/true, dir, kSteps, 60));
  ASSERT_TRUE(id.ok()) << id.status();
  JobStatus before = PollUntil(*id, absl::StrCat("a checkpoint of step ", 2 * kEvery),
                                [](const JobStatus& s) { return s.checkpoint_step() >= 2 * kEvery; });
  ASSERT_EQ(before.state(), RUNNING) << before.DebugString();

  const std::string damaged = JoinPath(dir, ps::CheckpointDirName(2 * kEvery));
  Env* env = Env::Default();
  absl::StatusOr<CheckpointManifest> manifest = ps::ReadManifest(env, damaged);
  ASSERT_TRUE(manifest.ok()) << manifest.status();
  ASSERT_GT(manifest->shard_size(), 0);
  const std::string shard_path = JoinPath(damaged, manifest->shard(0).file());
  {
    std::fstream f(shard_path, std::ios::in | std::ios::out | std::ios::binary);
    ASSERT_TRUE(f.good()) << shard_path;
    const std::streamoff middle = static_cast<std::streamoff>(manifest->shard(0).size() / 2);
    char byte = 0;
    f.seekg(middle);
    ASSERT_TRUE(f.read(&byte, 1).good()) << shard_path;
    byte = static_cast<char>(byte ^ 0x5a);
    f.seekp(middle);
    ASSERT_TRUE(f.write(&byte, 1).good()) << shard_path;
  }
  EXPECT_FALSE(ps::VerifyCheckpoint(env, damaged, *manifest).ok()) << "the flip went unnoticed: " << shard_path;
  Kill("ps-0");
  Restart("ps-0");
  JobStatus st = WatchToEnd(*id);

  EXPECT_EQ(st.state(), SUCCEEDED) << st.DebugString();
  EXPECT_EQ(st.step(), kSteps);
  EXPECT_EQ(st.restarts(), 1) << st.DebugString();
  EXPECT_EQ(st.failed_task(), kPs) << st.DebugString();
  absl::StatusOr<SavedCheckpoint> final_checkpoint = ReadNewestCheckpoint(dir);
  ASSERT_TRUE(final_checkpoint.ok()) << final_checkpoint.status();
  ExpectSameVariables(*final_checkpoint, *undisturbed);

  // The recovery restored a checkpoint, never the damaged one.
  const std::vector<std::string> restores = Restores();
  ASSERT_FALSE(restores.empty()) << ReadText(LogPath("master"));
  for (const std::string& line : restores) {
    EXPECT_FALSE(absl::EndsWith(line, absl::StrCat(" from ", damaged))) << line;
    std::printf("[fault] %s\n", line.c_str());
  }
  std::printf("[fault] damaged %s (byte %llu of %s); ps killed at step %lld; recovered in %.2f s; steps lost %lld\n",
              ps::CheckpointDirName(2 * kEvery).c_str(),
              static_cast<unsigned long long>(manifest->shard(0).size() / 2), manifest->shard(0).file().c_str(),
              static_cast<long long>(before.step()), st.recovery_seconds(), static_cast<long long>(st.steps_lost()));
}

}  // namespace
}  // namespace weft
