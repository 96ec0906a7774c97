// The master over real gRPC: a MasterServer on port 0 with in-process tasks,
// driven through client/master_client.
#include <thread>

#include "absl/strings/match.h"
#include "client/master_client.h"
#include "common/grpc_util.h"
#include "google/protobuf/text_format.h"
#include "graph/builder.h"
#include "gtest/gtest.h"
#include "master/gated_workers.h"
#include "master/in_process_cluster.h"
#include "master/master_server.h"
#include "graph/lowering.h"
#include "worker/worker_server.h"
#include "runtime/data/test_files.h"
#include "runtime/device.h"
#include "runtime/executor.h"
#include "runtime/testing/test_util.h"

namespace weft {
namespace master {
namespace {

using data::testing::IdxBytes;
using data::testing::TempPath;
using data::testing::WriteFile;
using ::weft::testing::MaxAbsDiff;
using ::weft::testing::RandomTensor;

constexpr char kPs[] = "/job:ps/task:0";
constexpr char kW0[] = "/job:worker/task:0";

// Two 2x2-pixel classes: class c is bright in pixel c.
std::string DataDir() {
  static const std::string dir = [] {
    const std::string d = TempPath("");
    for (const char* split : {"train", "test"}) {
      const uint32_t n = 64;
      std::vector<uint8_t> pixels, labels;
      for (uint32_t i = 0; i < n; ++i) {
        const int c = static_cast<int>(i % 2);
        labels.push_back(static_cast<uint8_t>(c));
        for (int j = 0; j < 4; ++j) pixels.push_back(j == c ? 220 : static_cast<uint8_t>((i * 37 + j * 11) % 50));
      }
      WriteFile(absl::StrCat(d, "/", split, "-images"), IdxBytes({n, 2, 2}, pixels));
      WriteFile(absl::StrCat(d, "/", split, "-labels"), IdxBytes({n}, labels));
    }
    return d;
  }();
  return dir;
}

JobSpec TinyJob(int epochs) {
  JobSpec job;
  EXPECT_TRUE(google::protobuf::TextFormat::ParseFromString(absl::StrCat(R"(name: "grpc-tiny"
      model { input_shape: [4] num_classes: 2 layer { dense { units: 8 activation: RELU } } layer { dense { units: 2 } } }
      dataset { train_images: "train-images" train_labels: "train-labels"
                test_images: "test-images" test_labels: "test-labels" }
      optimizer { adam { learning_rate: 0.05 } }
      batch_size: 8 seed: 2 intra_op_threads: 1 epochs: )", epochs),
                                                            &job));
  job.mutable_dataset()->set_dir(DataDir());
  return job;
}

class GrpcMasterTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto c = InProcessCluster::Create({kPs, kW0});
    ASSERT_TRUE(c.ok()) << c.status();
    cluster_ = *std::move(c);
    gated_ = std::make_unique<GatedWorkers>(cluster_->workers());
    if (open_gate_) gated_->Open();
    MasterServerOptions o;
    o.address = "127.0.0.1:0";
    o.workers = gated_.get();
    o.progress_interval = absl::Milliseconds(10);
    o.shutdown_deadline = absl::Seconds(2);
    auto s = MasterServer::Start(std::move(o));
    ASSERT_TRUE(s.ok()) << s.status();
    server_ = *std::move(s);
    ASSERT_GT(server_->port(), 0);
    client_ = MasterClient::Create(server_->address());
  }
  void TearDown() override {
    client_.reset();
    if (server_ != nullptr) server_->Shutdown();
    server_.reset();
  }

  bool open_gate_ = true;  // else sessions wait in GetStatus until gated_->Open()
  std::unique_ptr<InProcessCluster> cluster_;
  std::unique_ptr<GatedWorkers> gated_;
  std::unique_ptr<MasterServer> server_;
  std::unique_ptr<MasterClient> client_;
};

// The job waits to create its session until the watch has its first status.
class GrpcMasterGatedTest : public GrpcMasterTest {
 protected:
  GrpcMasterGatedTest() { open_gate_ = false; }
};

TEST_F(GrpcMasterGatedTest, SubmitWatchListGet) {
  auto id = client_->SubmitJob(TinyJob(3));
  ASSERT_TRUE(id.ok()) << id.status();
  std::vector<JobStatus> seen;
  absl::Status watched = client_->WatchJob(*id, [&](const JobStatus& s) {
    seen.push_back(s);
    if (seen.size() == 1) gated_->Open();
  });
  ASSERT_TRUE(watched.ok()) << watched;
  ASSERT_FALSE(seen.empty());
  EXPECT_EQ(seen.back().state(), SUCCEEDED) << seen.back().error();
  EXPECT_TRUE(std::any_of(seen.begin(), seen.end(), [](const JobStatus& s) { return s.state() == RUNNING; }));
  for (size_t i = 1; i < seen.size(); ++i) {
    EXPECT_GE(seen[i].state(), seen[i - 1].state());
    EXPECT_GE(seen[i].step(), seen[i - 1].step());
  }

  auto got = client_->GetJob(*id);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(got->state(), SUCCEEDED);
  EXPECT_EQ(got->step(), 3 * (64 / 8));
  EXPECT_GT(got->test_accuracy(), 0.9);
  auto list = client_->ListJobs();
  ASSERT_TRUE(list.ok());
  ASSERT_EQ(list->size(), 1u);
  EXPECT_EQ((*list)[0].job_id(), *id);
  EXPECT_EQ((*list)[0].name(), "grpc-tiny");

  auto devices = client_->ListDevices();
  ASSERT_TRUE(devices.ok()) << devices.status();
  std::vector<std::string> names;
  for (const DeviceAttributes& d : *devices) names.push_back(d.name());
  EXPECT_EQ(names, (std::vector<std::string>{"/job:ps/task:0/device:CPU:0", "/job:worker/task:0/device:CPU:0"}));
}

TEST_F(GrpcMasterTest, ErrorsKeepTheirCodes) {
  EXPECT_EQ(client_->GetJob("job-404").status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(client_->CancelJob("job-404").code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(client_->WatchJob("job-404", nullptr).code(), absl::StatusCode::kNotFound);
  JobSpec bad = TinyJob(1);
  bad.set_batch_size(-1);
  auto s = client_->SubmitJob(bad);
  EXPECT_EQ(s.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(s.status().message(), "batch_size")) << s.status();

  RunStepRequest req;
  req.set_session_handle("session-nope");
  req.add_fetch("x");
  RunStepResponse resp;
  EXPECT_EQ(client_->RunStep(req, &resp).code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(client_->CloseSession("session-nope").code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(client_->ExtendSession("session-nope", GraphDef()).code(), absl::StatusCode::kNotFound);
}

TEST_F(GrpcMasterTest, RemoteSessionRunsAPartitionedGraph) {
  Graph g;
  GraphBuilder b(&g);
  Output x = b.Placeholder(DType::kFloat32, {-1, 3}, "x");
  b.set_device(kPs);
  Output w = b.Variable("w", DType::kFloat32, {3, 2}, "glorot_uniform", 9);
  b.set_device("");
  b.Op("MatMul", {x, w}, {}, "y");
  ASSERT_TRUE(b.status().ok());

  auto session = RemoteSession::Create(client_.get(), g.ToGraphDef());
  ASSERT_TRUE(session.ok()) << session.status();
  const Tensor xv = RandomTensor({4, 3}, 5);
  auto got = (*session)->Run({{"x", xv}}, {"y"});
  ASSERT_TRUE(got.ok()) << got.status();
  CpuDevice local("/job:localhost/task:0/device:CPU:0", 1);
  auto want = RunGraphOnce(g, &local, {{"x", xv}}, {"y"});
  ASSERT_TRUE(want.ok());
  EXPECT_LE(MaxAbsDiff((*got)[0], (*want)[0]), 1e-6);

  // Extend with a node reading the graph's, then run it.
  GraphDef more;
  NodeDef* r = more.add_node();
  r->set_name("r");
  r->set_op("Relu");
  r->add_input("y");
  ASSERT_TRUE((*session)->Extend(more).ok());
  got = (*session)->Run({{"x", xv}}, {"r", "y"});
  ASSERT_TRUE(got.ok()) << got.status();
  ASSERT_EQ(got->size(), 2u);
  EXPECT_EQ((*got)[0].shape(), TensorShape({4, 2}));

  // A bad fetch is the caller's error, and names the fetch.
  auto bad = (*session)->Run({{"x", xv}}, {"nope"});
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(bad.status().message(), "nope")) << bad.status();

  const std::string handle = (*session)->handle();
  ASSERT_TRUE((*session)->Close().ok());
  EXPECT_EQ(cluster_->worker(kPs)->NumGraphs(), 0);
  EXPECT_EQ(cluster_->worker(kW0)->NumGraphs(), 0);
  EXPECT_EQ(client_->CloseSession(handle).code(), absl::StatusCode::kNotFound);
}

// A variable larger than the machine's memory: RESOURCE_EXHAUSTED naming the
// task and the node, and every daemon keeps serving.
TEST_F(GrpcMasterTest, OversizedTensorIsResourceExhaustedNamingTaskAndNode) {
  Graph g;
  GraphBuilder b(&g);
  b.set_device(kPs);
  Output huge = b.Variable("huge", DType::kFloat32, {int64_t{1} << 19, int64_t{1} << 20}, "zeros", 1);  // 2 TiB
  b.set_device("");
  b.Op("Sum", {huge}, {}, "total");
  ASSERT_TRUE(b.status().ok()) << b.status();
  auto session = RemoteSession::Create(client_.get(), g.ToGraphDef());
  ASSERT_TRUE(session.ok()) << session.status();
  auto got = (*session)->Run({}, {"total"});
  EXPECT_EQ(got.status().code(), absl::StatusCode::kResourceExhausted) << got.status();
  EXPECT_TRUE(absl::StartsWith(got.status().message(), absl::StrCat("task ", kPs, ": "))) << got.status();
  EXPECT_TRUE(absl::StrContains(got.status().message(), "'huge'")) << got.status();
  EXPECT_TRUE(absl::StrContains(got.status().message(), "float32[524288,1048576]")) << got.status();
  ASSERT_TRUE((*session)->Close().ok());

  // The same tasks still run a step.
  Graph small;
  GraphBuilder sb(&small);
  sb.set_device(kPs);
  Output w = sb.Variable("w", DType::kFloat32, {2, 2}, "ones", 1);
  sb.set_device("");
  sb.Op("Sum", {w}, {}, "total");
  auto ok_session = RemoteSession::Create(client_.get(), small.ToGraphDef());
  ASSERT_TRUE(ok_session.ok()) << ok_session.status();
  auto total = (*ok_session)->Run({}, {"total"});
  ASSERT_TRUE(total.ok()) << total.status();
  EXPECT_EQ((*total)[0].flat<float>()[0], 4.0f);
}

TEST_F(GrpcMasterTest, ClientCancellingAWatchEndsTheStream) {
  auto id = client_->SubmitJob(TinyJob(100000));
  ASSERT_TRUE(id.ok());
  auto stub = MasterService::NewStub(NewChannel(server_->address()));
  grpc::ClientContext ctx;
  WatchJobRequest req;
  req.set_job_id(*id);
  auto reader = stub->WatchJob(&ctx, req);
  JobStatus s;
  ASSERT_TRUE(reader->Read(&s));
  ctx.TryCancel();
  while (reader->Read(&s)) {
  }
  EXPECT_EQ(reader->Finish().error_code(), grpc::StatusCode::CANCELLED);
  EXPECT_TRUE(client_->CancelJob(*id).ok());
}

TEST_F(GrpcMasterTest, ShutdownEndsRunningJobsAndTheirWatches) {
  auto id = client_->SubmitJob(TinyJob(100000));
  ASSERT_TRUE(id.ok());
  JobStatus last;
  absl::Notification first;
  absl::Status watched;
  std::thread watcher([&] {
    watched = client_->WatchJob(*id, [&](const JobStatus& s) {
      last = s;
      if (!first.HasBeenNotified()) first.Notify();
    });
  });
  ASSERT_TRUE(first.WaitForNotificationWithTimeout(absl::Seconds(30)));
  server_->Shutdown();
  watcher.join();
  EXPECT_TRUE(watched.ok()) << watched;
  EXPECT_EQ(last.state(), CANCELLED);
  // The server is gone: calls fail as unreachable, naming the master.
  auto after = client_->GetJob(*id);
  EXPECT_EQ(after.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_TRUE(absl::StrContains(after.status().message(), "master at 127.0.0.1:")) << after.status();
}

// Every hop over gRPC: the master reaches a ps and a worker daemon through
// GrpcRemoteWorker, and they exchange tensors with RecvTensor.
TEST(GrpcMasterEndToEndTest, JobWithVariablesOnPsOverGrpcWorkers) {
  std::vector<std::unique_ptr<worker::WorkerServer>> tasks;
  for (const char* job : {"ps", "worker"}) {
    worker::WorkerServerOptions o;
    o.job = job;
    o.listen_address = "127.0.0.1:0";
    auto t = worker::StartWorkerServer(o);
    ASSERT_TRUE(t.ok()) << t.status();
    tasks.push_back(*std::move(t));
  }
  ClusterDef cluster;
  for (auto& t : tasks) {
    JobDef* j = cluster.add_job();
    j->set_name(t->task() == kPs ? "ps" : "worker");
    (*j->mutable_tasks())[0] = t->address();
  }
  for (auto& t : tasks) t->SetCluster(cluster);
  MasterServerOptions o;
  o.address = "127.0.0.1:0";
  o.cluster = cluster;  // default factory: GrpcRemoteWorker
  auto server = MasterServer::Start(std::move(o));
  ASSERT_TRUE(server.ok()) << server.status();
  auto client = MasterClient::Create((*server)->address());

  JobSpec job = TinyJob(3);
  auto tg = LowerJob(job);
  ASSERT_TRUE(tg.ok()) << tg.status();
  for (const auto& n : tg->graph->nodes()) {
    if (n->op() == "Variable") n->set_requested_device(kPs);
  }
  GraphModel* gm = job.mutable_graph();
  *gm->mutable_graph() = tg->graph->ToGraphDef();
  gm->set_features(tg->features);
  gm->set_labels(tg->labels);
  gm->set_loss(tg->loss);
  gm->set_train_op(tg->train_op);
  gm->set_correct(tg->correct);
  gm->set_eval_loss(tg->eval_loss);

  auto id = client->SubmitJob(job);
  ASSERT_TRUE(id.ok()) << id.status();
  JobStatus last;
  ASSERT_TRUE(client->WatchJob(*id, [&](const JobStatus& s) { last = s; }).ok());
  EXPECT_EQ(last.state(), SUCCEEDED) << last.error();
  EXPECT_GT(last.test_accuracy(), 0.9);
  // The finished job's session released its variables on every task.
  EXPECT_TRUE(tasks[0]->worker()->VariableNames().empty());
  EXPECT_TRUE(tasks[1]->worker()->VariableNames().empty());
  EXPECT_EQ(tasks[0]->worker()->NumGraphs(), 0);  // the job's session was closed

  client.reset();
  (*server)->Shutdown();
  for (auto& t : tasks) t->Shutdown();
}

}  // namespace
}  // namespace master
}  // namespace weft
