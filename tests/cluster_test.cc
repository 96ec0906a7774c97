// A master, two workers and a parameter server as separate `weft`
// processes on loopback, driven through the client library as a user's
// program would. Each binds a port the kernel picks and reports it; the
// tasks learn one another's from the master.
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include <fstream>
#include <functional>
#include <iterator>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "client/grpc_master_client.h"
#include "client/subprocess.h"
#include "common/tensor.h"
#include "graph/builder.h"
#include "gtest/gtest.h"
#include "job/job_spec.h"
#include "runtime/data/test_files.h"
#include "runtime/device.h"
#include "runtime/executor.h"
#include "tests/test_cluster.h"
#include "tests/test_tls.h"

namespace weft {
namespace {

using data::testing::TempPath;

// Far beyond what any job here takes on a healthy run: a bound on a hang.
constexpr absl::Duration kJobDeadline = absl::Seconds(120);

// A synthetic 3-class problem: class c brightens the c-th third of a
// 12-pixel image.
std::string WriteData(const std::string& name, int n) { return testing::WriteThreeClassData(TempPath(name), n); }

JobSpec Job(const std::string& dir, int epochs) {
  auto job = ParseJob(absl::StrCat(R"(name: "cluster-job"
      model { input_shape: [12] num_classes: 3 layer { dense { units: 16 activation: RELU } } layer { dense { units: 3 } } }
      dataset { dir: ")", dir, R"(" } optimizer { sgd { learning_rate: 0.1 } } batch_size: 8 seed: 2 epochs: )", epochs),
                      "test");
  EXPECT_TRUE(job.ok()) << job.status();
  return *job;
}

class ClusterTest : public ::testing::Test {
 protected:
  void SetUp() override {
    // Every daemon runs over mTLS, as users run them.
    auto tls = testing::TestTls::Create(TempPath("tls"));
    ASSERT_TRUE(tls.ok()) << tls.status();
    tls_ = std::make_unique<testing::TestTls>(*std::move(tls));
    // The tasks start side by side on port 0, knowing only themselves; the
    // master, last, gets the ports they report and sends them the cluster.
    testing::TestDaemon* ps = Add("ps-0", {"ps", "--task=ps:0"});
    testing::TestDaemon* w0 = Add("worker-0", {"worker", "--task=worker:0"});
    testing::TestDaemon* w1 = Add("worker-1", {"worker", "--task=worker:1"});
    for (auto& d : daemons_) ASSERT_TRUE(d->Launch().ok());
    for (auto& d : daemons_) {
      absl::Status s = d->AwaitPort();
      ASSERT_TRUE(s.ok()) << s;
    }
    cluster_ = absl::StrCat("worker=", w0->address(), ",", w1->address(), ";ps=", ps->address());
    testing::TestDaemon* master = Add("master", {"master", "--cluster=" + cluster_});
    absl::Status s = master->Start();
    ASSERT_TRUE(s.ok()) << s;
    master_addr_ = master->address();
    client_ = MasterClient::Create(master_addr_, tls_->ClientOptions());
    std::vector<testing::TestDaemon*> all;
    for (auto& d : daemons_) all.push_back(d.get());
    ASSERT_TRUE(testing::WaitForCluster(client_.get(), 3, all));
  }

  void TearDown() override {
    for (auto& d : daemons_) testing::ExpectStopsOnSigterm(d.get());
  }

  // A daemon (not yet started) with its identity's certificate, datasets
  // and checkpoints confined to the test's own directory.
  testing::TestDaemon* Add(const std::string& name, std::vector<std::string> args) {
    for (const std::string& flag : tls_->DaemonFlags(testing::DaemonIdentity(name))) args.push_back(flag);
    args.push_back("--data_root=" + ::testing::TempDir());
    args.push_back("--checkpoint_root=" + ::testing::TempDir());
    daemons_.push_back(std::make_unique<testing::TestDaemon>(name, std::move(args), TempPath(name + ".log")));
    return daemons_.back().get();
  }
  Subprocess* Proc(const std::string& name) {
    for (auto& d : daemons_) {
      if (d->name() == name) return d->process();
    }
    ADD_FAILURE() << "no daemon " << name;
    return nullptr;
  }

  // Watches until the job ends (cancelling it after kJobDeadline);
  // `on_running` is called once, at the first status with a step done.
  JobStatus WatchToEnd(const std::string& id, const std::function<void()>& on_running = nullptr) {
    bool fired = false;
    return testing::WatchJobToEnd(client_.get(), id, kJobDeadline, [&](const JobStatus& st) {
      if (!fired && on_running && st.state() == RUNNING && st.step() > 0) {
        fired = true;
        on_running();
      }
    });
  }

  std::unique_ptr<testing::TestTls> tls_;
  std::string cluster_, master_addr_;
  std::vector<std::unique_ptr<testing::TestDaemon>> daemons_;
  std::unique_ptr<MasterClient> client_;
};

TEST_F(ClusterTest, SubmittedJobCompletes) {
  auto id = client_->SubmitJob(Job(WriteData("data_ok", 480), 3));
  ASSERT_TRUE(id.ok()) << id.status();
  JobStatus st = WatchToEnd(*id);
  EXPECT_EQ(st.state(), SUCCEEDED) << st.error();
  EXPECT_EQ(st.step(), 3 * 480 / 8);
  EXPECT_GT(st.test_accuracy(), 0.9) << st.DebugString();  // chance is 1/3
  auto listed = client_->ListJobs();
  ASSERT_TRUE(listed.ok());
  EXPECT_EQ(listed->size(), 1u);
}

TEST_F(ClusterTest, SessionGraphAcrossPsAndTwoWorkersMatchesOneProcess) {
  Graph g;
  GraphBuilder b(&g);
  b.set_device("/job:worker/task:0");
  Output x = b.Placeholder(DType::kFloat32, {4, 3}, "x");
  b.set_device("/job:ps/task:0");
  Output w = b.Variable("w", DType::kFloat32, {3, 5}, "glorot_uniform", 7);
  b.set_device("/job:worker/task:0");
  Output y = b.Op("MatMul", {x, w}, {}, "y");
  b.set_device("/job:worker/task:1");
  b.Op("Relu", {y}, {}, "z");
  ASSERT_TRUE(b.status().ok()) << b.status();
  Tensor feed(DType::kFloat32, {4, 3});
  for (int i = 0; i < 12; ++i) feed.data<float>()[i] = 0.25f * (i - 5);

  auto session = RemoteSession::Create(client_.get(), g.ToGraphDef());
  ASSERT_TRUE(session.ok()) << session.status();
  auto remote = (*session)->Run({{"x", feed}}, {"z", "y"});
  ASSERT_TRUE(remote.ok()) << remote.status();
  CpuDevice device("/device:CPU:0", 1);
  auto local = RunGraphOnce(g, &device, {{"x", feed}}, {"z", "y"});
  ASSERT_TRUE(local.ok()) << local.status();
  for (int k = 0; k < 2; ++k) {
    ASSERT_EQ((*remote)[k].shape(), (*local)[k].shape());
    for (int i = 0; i < (*local)[k].NumElements(); ++i) {
      EXPECT_NEAR((*remote)[k].data<float>()[i], (*local)[k].data<float>()[i], 1e-6) << k << "," << i;
    }
  }
  EXPECT_TRUE((*session)->Close().ok());
}

// Every strategy that runs on this cluster (two workers, one ps), as real
// processes: each replica reads its shard on its worker and the job learns.
TEST_F(ClusterTest, JobsWithEachStrategyComplete) {
  const std::string data = WriteData("data_strategies", 480);
  struct Case {
    StrategySpec::Kind kind;
    bool sync;
    int steps_per_execution;
  };
  for (const Case& c : {Case{StrategySpec::PARAMETER_SERVER, true, 1}, Case{StrategySpec::PARAMETER_SERVER, false, 1},
                        Case{StrategySpec::MULTI_WORKER_MIRRORED, true, 1},
                        Case{StrategySpec::MULTI_WORKER_MIRRORED, true, 4},
                        Case{StrategySpec::PARAMETER_SERVER, false, 4},
                        // 0: each dispatch sized as the job runs.
                        Case{StrategySpec::PARAMETER_SERVER, true, 0}}) {
    SCOPED_TRACE(absl::StrCat(StrategySpec::Kind_Name(c.kind), c.sync ? " sync" : " async",
                              " steps_per_execution ", c.steps_per_execution));
    JobSpec job = Job(data, 3);
    job.set_batch_size(16);  // 8 per replica
    job.mutable_strategy()->set_kind(c.kind);
    job.mutable_strategy()->set_sync(c.sync);
    // Sync, 30 steps an epoch: seven runs of 4 steps and one of 2 per epoch;
    // async, 60 replica steps an epoch, dispatched 4 at a time per replica.
    job.mutable_strategy()->set_steps_per_execution(c.steps_per_execution);
    auto id = client_->SubmitJob(job);
    ASSERT_TRUE(id.ok()) << id.status();
    JobStatus st = WatchToEnd(*id);
    EXPECT_EQ(st.state(), SUCCEEDED) << st.error();
    // Sync: 3 epochs of 480 / 16 steps; async: each replica step sees 8.
    EXPECT_EQ(st.step(), c.sync ? 3 * 480 / 16 : 3 * 480 / 8);
    EXPECT_GT(st.test_accuracy(), 0.9) << st.DebugString();  // chance is 1/3
  }
  // A strategy the cluster cannot host fails with a clear error.
  JobSpec mirrored = Job(data, 1);
  mirrored.mutable_strategy()->set_kind(StrategySpec::MIRRORED);
  mirrored.mutable_strategy()->set_num_devices(4);
  auto id = client_->SubmitJob(mirrored);
  ASSERT_TRUE(id.ok()) << id.status();
  JobStatus st = WatchToEnd(*id);
  EXPECT_EQ(st.state(), FAILED);
  EXPECT_TRUE(absl::StrContains(st.error(), "--cpu_devices=4")) << st.error();
}

// Sync PS whose ps applies the first k of the two replicas' gradients per
// global step: the replicas run free, the job counts global steps (k
// replicas' batches each) and learns; the master logs the stale gradients
// the ps refused.
TEST_F(ClusterTest, SyncParameterServerAggregatingTheFirstKReplicasLearns) {
  const std::string data = WriteData("data_k_of_n", 480);
  for (int k : {1, 2}) {
    SCOPED_TRACE(absl::StrCat("replicas_to_aggregate ", k));
    JobSpec job = Job(data, 3);
    job.set_batch_size(16);  // 8 per replica
    job.mutable_strategy()->set_kind(StrategySpec::PARAMETER_SERVER);
    job.mutable_strategy()->set_sync(true);
    job.mutable_strategy()->set_replicas_to_aggregate(k);
    auto id = client_->SubmitJob(job);
    ASSERT_TRUE(id.ok()) << id.status();
    JobStatus st = WatchToEnd(*id);
    EXPECT_EQ(st.state(), SUCCEEDED) << st.error();
    EXPECT_EQ(st.step(), 3 * 480 / (8 * k));  // a global step trains on k * 8 examples
    EXPECT_GT(st.test_accuracy(), 0.9) << st.DebugString();  // chance is 1/3
  }
  std::ifstream log(TempPath("master.log"));
  const std::string text((std::istreambuf_iterator<char>(log)), std::istreambuf_iterator<char>());
  EXPECT_TRUE(absl::StrContains(text, "stale gradient(s)")) << text;
}

TEST_F(ClusterTest, CancelStopsTheJobAndTheClusterKeepsServing) {
  const std::string data = WriteData("data_cancel", 480);
  auto id = client_->SubmitJob(Job(data, 1000));
  ASSERT_TRUE(id.ok()) << id.status();
  JobStatus st = WatchToEnd(*id, [&] { EXPECT_TRUE(client_->CancelJob(*id).ok()); });
  EXPECT_EQ(st.state(), CANCELLED);
  EXPECT_LT(st.step(), st.total_steps());
  // Every task still serves: a fresh job completes.
  auto again = client_->SubmitJob(Job(data, 1));
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(WatchToEnd(*again).state(), SUCCEEDED);
}

TEST_F(ClusterTest, KillingAWorkerFailsTheStepNamingTheTask) {
  // Put the job's compute on worker 0, then kill it mid-job.
  auto id = client_->SubmitJob(Job(WriteData("data_kill", 480), 1000));
  ASSERT_TRUE(id.ok()) << id.status();
  JobStatus st = WatchToEnd(*id, [&] { Proc("worker-0")->Signal(SIGKILL); });
  EXPECT_EQ(st.state(), FAILED);
  EXPECT_TRUE(absl::StrContains(st.error(), "/job:worker/task:0")) << st.error();
  EXPECT_EQ(st.error_code(), static_cast<int>(absl::StatusCode::kUnavailable)) << st.error();
  EXPECT_TRUE(absl::StartsWith(st.error(), "UNAVAILABLE: ")) << st.error();
  // The master keeps serving.
  auto jobs = client_->ListJobs();
  ASSERT_TRUE(jobs.ok()) << jobs.status();
  EXPECT_TRUE(Proc("worker-0")->WaitFor(absl::Seconds(10))) << "worker-0 outlived SIGKILL";
}

// A worker dies mid all-reduce: its peer's collective is aborted with the
// step (or fails on its broken stream), never waits out its deadline, and
// the job fails naming the dead task.
TEST_F(ClusterTest, KillingAWorkerUnderMultiWorkerMirroredFailsNamingTheTask) {
  JobSpec job = Job(WriteData("data_kill_mwm", 480), 1000);
  job.set_batch_size(16);
  job.mutable_strategy()->set_kind(StrategySpec::MULTI_WORKER_MIRRORED);
  job.mutable_recovery()->set_max_restarts(-1);  // no recovery: the first failure ends the job
  auto id = client_->SubmitJob(job);
  ASSERT_TRUE(id.ok()) << id.status();
  const absl::Time start = absl::Now();
  JobStatus st = WatchToEnd(*id, [&] { Proc("worker-1")->Signal(SIGKILL); });
  EXPECT_EQ(st.state(), FAILED);
  EXPECT_TRUE(absl::StrContains(st.error(), "/job:worker/task:1")) << st.error();
  EXPECT_EQ(st.error_code(), static_cast<int>(absl::StatusCode::kUnavailable)) << st.error();
  // Well inside the collectives' 60 s deadline: the abort, not the deadline,
  // ended the wait. (A bound on a hang, not a timing measurement.)
  EXPECT_LT(absl::Now() - start, absl::Seconds(50));
  auto jobs = client_->ListJobs();
  ASSERT_TRUE(jobs.ok()) << jobs.status();
  EXPECT_TRUE(Proc("worker-1")->WaitFor(absl::Seconds(10))) << "worker-1 outlived SIGKILL";
}

TEST_F(ClusterTest, BadRequestsGetTheirCodes) {
  EXPECT_EQ(client_->GetJob("job-404").status().code(), absl::StatusCode::kNotFound);
  JobSpec bad = Job(WriteData("data_bad", 48), 1);
  bad.set_batch_size(0);
  EXPECT_EQ(client_->SubmitJob(bad).status().code(), absl::StatusCode::kInvalidArgument);
  GraphDef cyclic;
  auto* a = cyclic.add_node();
  a->set_name("a");
  a->set_op("Identity");
  a->add_input("b");
  auto* bnode = cyclic.add_node();
  bnode->set_name("b");
  bnode->set_op("Identity");
  bnode->add_input("a");
  auto session = RemoteSession::Create(client_.get(), cyclic);
  ASSERT_FALSE(session.ok());
  EXPECT_EQ(session.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(session.status().message(), "cycle")) << session.status();
}

}  // namespace
}  // namespace weft
