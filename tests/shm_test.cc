// Collectives between tasks of one host through shared memory, with real
// daemons: two workers and a master as `weft` processes on loopback over
// mTLS, as users run them.
//
// What must hold (worker/collective/shm_collective_transport.h): a job run
// with shared memory (the default) ends with exactly the variables of the
// same job run with --shared_memory=false; each run took the path it says;
// a worker killed mid-all-reduce fails the step promptly with UNAVAILABLE
// naming it (not the collective's deadline), the survivor keeps serving, and
// nothing is left in /dev/shm.
#include <dirent.h>
#include <signal.h>
#include <sys/wait.h>

#include <fstream>
#include <iterator>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "client/grpc_master_client.h"
#include "client/subprocess.h"
#include "gtest/gtest.h"
#include "job/job_spec.h"
#include "runtime/data/test_files.h"
#include "tests/test_checkpoints.h"
#include "tests/test_cluster.h"
#include "tests/test_tls.h"

namespace weft {
namespace {

using data::testing::TempPath;

// Bounds on a hang, far beyond what a healthy run takes.
constexpr absl::Duration kJobDeadline = absl::Seconds(120);

JobSpec Job(const std::string& data, const std::string& checkpoint_dir, int64_t steps,
            StrategySpec::Kind kind = StrategySpec::MULTI_WORKER_MIRRORED) {
  auto job = ParseJob(absl::StrCat(R"(name: "shm-job"
      model { input_shape: [12] num_classes: 3
              layer { dense { units: 64 activation: RELU } } layer { dense { units: 3 } } }
      dataset { dir: ")", data, R"(" } optimizer { sgd { learning_rate: 0.1 } } seed: 3 intra_op_threads: 1
      batch_size: 16 steps: )", steps, R"(
      checkpoint { dir: ")", checkpoint_dir, R"(" every_steps: )", steps, " }"),
                      "shm_test");
  EXPECT_TRUE(job.ok()) << job.status();
  job->mutable_strategy()->set_kind(kind);
  job->mutable_strategy()->set_sync(true);
  return *job;
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

// What /dev/shm holds (names), to compare before and after.
std::set<std::string> DevShm() {
  std::set<std::string> names;
  DIR* d = opendir("/dev/shm");
  if (d == nullptr) return names;
  while (dirent* e = readdir(d)) names.insert(e->d_name);
  closedir(d);
  return names;
}

// Two workers, a ps and a master; `task_flags` added to each task's.
class ShmCluster {
 public:
  ShmCluster(const std::string& tag, const std::vector<std::string>& task_flags) : tag_(tag) {
    auto tls = testing::TestTls::Create(TempPath(tag + "-tls"));
    EXPECT_TRUE(tls.ok()) << tls.status();
    tls_ = std::make_unique<testing::TestTls>(*std::move(tls));
    for (std::vector<std::string> args : {std::vector<std::string>{"worker", "--task=worker:0"},
                                          std::vector<std::string>{"worker", "--task=worker:1"},
                                          std::vector<std::string>{"ps", "--task=ps:0"}}) {
      args.insert(args.end(), task_flags.begin(), task_flags.end());
      const std::string name = args[0] == "ps" ? "ps-0" : absl::StrCat("worker-", std::string(1, args[1].back()));
      Add(name, args);
    }
  }

  ::testing::AssertionResult Start() {
    for (auto& d : daemons_) {
      if (absl::Status s = d->Launch(); !s.ok()) return ::testing::AssertionFailure() << s;
    }
    for (auto& d : daemons_) {
      if (absl::Status s = d->AwaitPort(); !s.ok()) return ::testing::AssertionFailure() << s;
    }
    const std::string cluster = absl::StrCat("worker=", daemons_[0]->address(), ",", daemons_[1]->address(),
                                             ";ps=", daemons_[2]->address());
    testing::TestDaemon* master = Add("master", {"master", "--cluster=" + cluster});
    if (absl::Status s = master->Start(); !s.ok()) return ::testing::AssertionFailure() << s;
    client_ = MasterClient::Create(master->address(), tls_->ClientOptions());
    std::vector<testing::TestDaemon*> all;
    for (auto& d : daemons_) all.push_back(d.get());
    return testing::WaitForCluster(client_.get(), 3, all);
  }

  // SIGTERM to whatever still runs; each must exit cleanly.
  void Stop() {
    for (auto& d : daemons_) testing::ExpectStopsOnSigterm(d.get());
  }

  MasterClient* client() { return client_.get(); }
  testing::TestDaemon* daemon(int i) { return daemons_[i].get(); }
  std::string Log(int i) { return ReadFile(daemons_[i]->log()); }

 private:
  testing::TestDaemon* Add(const std::string& name, std::vector<std::string> args) {
    for (const std::string& flag : tls_->DaemonFlags(testing::DaemonIdentity(name))) args.push_back(flag);
    args.push_back("--data_root=" + ::testing::TempDir());
    args.push_back("--checkpoint_root=" + ::testing::TempDir());
    daemons_.push_back(
        std::make_unique<testing::TestDaemon>(name, std::move(args), TempPath(absl::StrCat(tag_, "-", name, ".log"))));
    return daemons_.back().get();
  }

  const std::string tag_;
  std::unique_ptr<testing::TestTls> tls_;
  std::vector<std::unique_ptr<testing::TestDaemon>> daemons_;
  std::unique_ptr<MasterClient> client_;
};

// Runs the job to its end; returns its final checkpoint.
testing::SavedCheckpoint RunToEnd(ShmCluster& cluster, const std::string& data, const std::string& dir,
                                  StrategySpec::Kind kind) {
  auto id = cluster.client()->SubmitJob(Job(data, dir, 120, kind));
  EXPECT_TRUE(id.ok()) << id.status();
  if (!id.ok()) return {};
  JobStatus st = testing::WatchJobToEnd(cluster.client(), *id, kJobDeadline);
  EXPECT_EQ(st.state(), SUCCEEDED) << st.DebugString();
  absl::StatusOr<testing::SavedCheckpoint> saved = testing::ReadNewestCheckpoint(dir);
  EXPECT_TRUE(saved.ok()) << saved.status();
  return saved.ok() ? *saved : testing::SavedCheckpoint();
}

// All-reduces (MULTI_WORKER_MIRRORED) and RecvTensor pulls and pushes
// (synchronous PARAMETER_SERVER) through the rings, then over the network.
TEST(ShmTest, SharedMemoryAndTheNetworkTrainTheSameVariables) {
  const std::string data = testing::WriteThreeClassData(TempPath("data"), 480);
  const std::vector<StrategySpec::Kind> kinds = {StrategySpec::MULTI_WORKER_MIRRORED, StrategySpec::PARAMETER_SERVER};
  std::vector<testing::SavedCheckpoint> through_shm, through_network;
  {
    ShmCluster cluster("shm", {});
    ASSERT_TRUE(cluster.Start());
    for (StrategySpec::Kind kind : kinds) {
      through_shm.push_back(RunToEnd(cluster, data, TempPath(absl::StrCat("ckpt-shm-", kind)), kind));
    }
    cluster.Stop();
    // Every task sent something to another through a ring: the workers
    // their chunks and pushes, the ps its variables.
    for (int t : {0, 1, 2}) {
      EXPECT_TRUE(absl::StrContains(cluster.Log(t), "go through shared memory"))
          << cluster.daemon(t)->name() << " sent over the network:\n" << testing::LogTail(cluster.daemon(t)->log());
    }
    // Once the rings were up, pulls skipped gRPC both ways: the workers'
    // of variables from the ps, the ps's of gradients from each worker.
    for (int t : {0, 1}) {
      EXPECT_TRUE(absl::StrContains(cluster.Log(t), "pulls from task /job:ps/task:0 go through shared memory both"))
          << testing::LogTail(cluster.daemon(t)->log());
      EXPECT_TRUE(absl::StrContains(cluster.Log(2), absl::StrCat("pulls from task /job:worker/task:", t,
                                                                 " go through shared memory both")))
          << testing::LogTail(cluster.daemon(2)->log());
    }
  }
  {
    ShmCluster cluster("net", {"--shared_memory=false"});
    ASSERT_TRUE(cluster.Start());
    for (StrategySpec::Kind kind : kinds) {
      through_network.push_back(RunToEnd(cluster, data, TempPath(absl::StrCat("ckpt-net-", kind)), kind));
    }
    cluster.Stop();
    for (int t : {0, 1, 2}) {
      EXPECT_FALSE(absl::StrContains(cluster.Log(t), "go through shared memory"))
          << cluster.daemon(t)->name() << " used shared memory with --shared_memory=false";
    }
  }
  for (size_t k = 0; k < kinds.size(); ++k) {
    SCOPED_TRACE(StrategySpec::Kind_Name(kinds[k]));
    EXPECT_EQ(through_shm[k].step, 120);
    testing::ExpectSameVariables(through_shm[k], through_network[k]);
  }
}

// Kills daemon `victim` (task `task`) of a running `kind` job for good once
// it is past step 50: the step must fail promptly with UNAVAILABLE naming
// the task (not at a collective's or a pull's deadline), the daemons left
// keep serving and stop cleanly, nothing stays in /dev/shm, and daemon 0's
// log must show `shm_line` (what went through shared memory before).
void KillMidJob(const std::string& tag, StrategySpec::Kind kind, int victim, const std::string& task,
                const std::string& shm_line) {
  const std::set<std::string> before = DevShm();
  const std::string data = testing::WriteThreeClassData(TempPath("data-" + tag), 480);
  ShmCluster cluster(tag, {});
  ASSERT_TRUE(cluster.Start());
  JobSpec job = Job(data, TempPath("ckpt-" + tag), 1000000, kind);
  job.mutable_recovery()->set_max_restarts(-1);  // the first failure ends the job
  auto id = cluster.client()->SubmitJob(job);
  ASSERT_TRUE(id.ok()) << id.status();
  bool killed = false;
  JobStatus st = testing::WatchJobToEnd(cluster.client(), *id, kJobDeadline, [&](const JobStatus& s) {
    if (!killed && s.state() == RUNNING && s.step() > 50) {
      killed = true;
      cluster.daemon(victim)->process()->Signal(SIGKILL);
    }
  });
  ASSERT_TRUE(killed) << st.DebugString();
  EXPECT_EQ(st.state(), FAILED);
  EXPECT_EQ(st.error_code(), static_cast<int>(absl::StatusCode::kUnavailable))
      << "a deadline, not the dead peer, ended the step: " << st.error();
  EXPECT_TRUE(absl::StrContains(st.error(), task)) << st.error();
  ASSERT_TRUE(cluster.daemon(victim)->process()->WaitFor(absl::Seconds(10)));
  EXPECT_TRUE(absl::StrContains(cluster.Log(0), shm_line)) << testing::LogTail(cluster.daemon(0)->log());
  for (int t : {0, 1, 2}) {
    if (t != victim) {
      EXPECT_TRUE(cluster.daemon(t)->CheckRunning().ok()) << cluster.daemon(t)->name();
    }
  }
  cluster.Stop();  // checks that each survivor exits cleanly
  EXPECT_EQ(DevShm(), before) << "segments left in /dev/shm";
}

// Synchronous PARAMETER_SERVER pulls through the rings both ways: the ps
// killed while the workers wait for its variables (its ring closing fails
// the pulls).
TEST(ShmTest, APsKilledMidPullFailsTheStepAndLeavesNothingInDevShm) {
  KillMidJob("kill-ps", StrategySpec::PARAMETER_SERVER, 2, "/job:ps/task:0",
             "pulls from task /job:ps/task:0 go through shared memory both");
}

// Steps are almost all all-reduce: the kill lands in one, or between two.
TEST(ShmTest, AWorkerKilledMidAllReduceFailsTheStepAndLeavesNothingInDevShm) {
  KillMidJob("kill", StrategySpec::MULTI_WORKER_MIRRORED, 1, "/job:worker/task:1", "go through shared memory");
}

}  // namespace
}  // namespace weft
