// The master over real gRPC: a MasterServer on port 0 with in-process tasks,
// driven through client/master_client.
#include <chrono>
#include <optional>
#include <thread>

#include "absl/strings/match.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "client/grpc_master_client.h"
#include "common/grpc_util.h"
#include "common/tensor_proto_coding.h"
#include "google/protobuf/text_format.h"
#include "graph/builder.h"
#include "gtest/gtest.h"
#include "master/gated_workers.h"
#include "master/grpc_master_service.h"
#include "master/in_process_cluster.h"
#include "master/master.h"
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

// x (fed, float32 [?,3]) on worker 0 times w (ps): y.
GraphDef FedGraph() {
  Graph g;
  GraphBuilder b(&g);
  Output x = b.Placeholder(DType::kFloat32, {-1, 3}, "x");
  b.set_device(kPs);
  Output w = b.Variable("w", DType::kFloat32, {3, 2}, "ones", 1);
  b.set_device("");
  b.Op("MatMul", {x, w}, {}, "y");
  EXPECT_TRUE(b.status().ok()) << b.status();
  return g.ToGraphDef();
}

NamedTensorProto Feed(const std::string& name, const Tensor& value) {
  NamedTensorProto f;
  f.set_name(name);
  TensorToProto(value, f.mutable_tensor());
  return f;
}

TEST_F(GrpcMasterTest, MalformedFeedsAreTheCallersErrorNamingTheFeedAndTheMasterServesOn) {
  auto handle = client_->CreateSession(FedGraph());
  ASSERT_TRUE(handle.ok()) << handle.status();
  const Tensor good = RandomTensor({2, 3}, 1);
  auto run = [&](const std::vector<NamedTensorProto>& feeds) {
    RunStepRequest req;
    req.set_session_handle(*handle);
    for (const NamedTensorProto& f : feeds) *req.add_feed() = f;
    req.add_fetch("y");
    RunStepResponse resp;
    return client_->RunStep(req, &resp);
  };
  ASSERT_TRUE(run({Feed("x", good)}).ok());

  struct Case {
    const char* what;
    std::vector<NamedTensorProto> feeds;
    std::string message;  // the error's whole message
  };
  NamedTensorProto short_bytes = Feed("x", good);
  short_bytes.mutable_tensor()->mutable_content()->resize(5);
  NamedTensorProto long_bytes = Feed("x", good);
  long_bytes.mutable_tensor()->mutable_content()->append("tail");
  NamedTensorProto bad_dtype = Feed("x", good);
  bad_dtype.mutable_tensor()->set_dtype(static_cast<DataType>(99));
  NamedTensorProto negative_dim = Feed("x", good);
  negative_dim.mutable_tensor()->mutable_shape()->set_dim(0, -2);
  NamedTensorProto unknown_dim = Feed("x", good);
  unknown_dim.mutable_tensor()->mutable_shape()->set_dim(0, -1);
  const std::vector<Case> cases = {
      {"wrong dtype", {Feed("x", Tensor(DType::kInt32, {2, 3}))}, "feed 'x' must be float32[?,3], got int32[2,3]"},
      {"wrong shape", {Feed("x", RandomTensor({2, 4}, 2))}, "feed 'x' must be float32[?,3], got float32[2,4]"},
      {"wrong rank", {Feed("x", RandomTensor({6}, 2))}, "feed 'x' must be float32[?,3], got float32[6]"},
      {"unknown name", {Feed("nope", good)}, "feed 'nope': no node named 'nope' in the graph"},
      {"output out of range", {Feed("x:1", good)}, "feed 'x:1': 'x' (Placeholder) has 1 output(s)"},
      {"bytes short of the shape", {short_bytes}, "feed 'x': tensor float32[2,3] needs 24 bytes of content, got 5"},
      {"bytes beyond the shape", {long_bytes}, "feed 'x': tensor float32[2,3] needs 24 bytes of content, got 28"},
      {"invalid dtype", {bad_dtype}, "feed 'x': invalid dtype 99"},
      {"negative dimension", {negative_dim}, "feed 'x': shape has invalid dimension -2"},
      {"unknown dimension", {unknown_dim}, "feed 'x': tensor shape [?,3] has unknown dimensions"},
      {"fed twice", {Feed("x", good), Feed("x", good)}, "tensor 'x' is fed twice"},
  };
  for (const Case& c : cases) {
    absl::Status s = run(c.feeds);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << c.what << ": " << s;
    EXPECT_EQ(std::string(s.message()), c.message) << c.what;
  }
  // The master and the tasks serve on: the session runs, and so does a new one.
  EXPECT_TRUE(run({Feed("x", good)}).ok());
  auto other = RemoteSession::Create(client_.get(), FedGraph());
  ASSERT_TRUE(other.ok()) << other.status();
  auto got = (*other)->Run({{"x", good}}, {"y"});
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ((*got)[0].shape(), TensorShape({2, 2}));
  ASSERT_TRUE((*other)->Close().ok());
  ASSERT_TRUE(client_->CloseSession(*handle).ok());
}

TEST_F(GrpcMasterTest, ResetClosesEverySessionAndTheMasterServesOn) {
  std::vector<std::string> handles;
  for (int i = 0; i < 2; ++i) {
    auto h = client_->CreateSession(FedGraph());
    ASSERT_TRUE(h.ok()) << h.status();
    RunStepRequest req;
    req.set_session_handle(*h);
    *req.add_feed() = Feed("x", RandomTensor({2, 3}, i));
    req.add_fetch("y");
    RunStepResponse resp;
    ASSERT_TRUE(client_->RunStep(req, &resp).ok());
    handles.push_back(*h);
  }
  EXPECT_GT(cluster_->worker(kPs)->NumGraphs(), 0);
  EXPECT_GT(cluster_->worker(kW0)->NumGraphs(), 0);

  ASSERT_TRUE(client_->Reset().ok());
  // Every session is gone from the master and from the tasks.
  for (const std::string& h : handles) {
    RunStepRequest req;
    req.set_session_handle(h);
    req.add_fetch("y");
    RunStepResponse resp;
    absl::Status s = client_->RunStep(req, &resp);
    EXPECT_EQ(s.code(), absl::StatusCode::kNotFound) << s;
    EXPECT_EQ(s.message(), absl::StrCat("no session '", h, "' (closed, reset, or never created)"));
    EXPECT_EQ(client_->CloseSession(h).code(), absl::StatusCode::kNotFound);
  }
  EXPECT_EQ(cluster_->worker(kPs)->NumGraphs(), 0);
  EXPECT_EQ(cluster_->worker(kW0)->NumGraphs(), 0);

  // A reset master takes new sessions, and a reset with none is no error.
  auto again = RemoteSession::Create(client_.get(), FedGraph());
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_TRUE((*again)->Run({{"x", RandomTensor({1, 3}, 3)}}, {"y"}).ok());
  ASSERT_TRUE((*again)->Close().ok());
  EXPECT_TRUE(client_->Reset().ok());
}

// A master served by hand, to see the service's WatchJob handlers; the
// job's progress is published at every step.
class WatchJobTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto c = InProcessCluster::Create({kPs, kW0});
    ASSERT_TRUE(c.ok()) << c.status();
    cluster_ = *std::move(c);
    gated_ = std::make_unique<GatedWorkers>(cluster_->workers());
    if (open_gate_) OpenGate();
    MasterOptions mo;
    mo.workers = gated_.get();
    mo.progress_interval = absl::ZeroDuration();
    master_ = std::make_unique<Master>(std::move(mo));
    service_ = std::make_unique<GrpcMasterService>(master_.get());
    grpc::ServerBuilder builder;
    ConfigureServer(&builder);
    int port = 0;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
    builder.RegisterService(service_.get());
    server_ = builder.BuildAndStart();
    ASSERT_NE(server_, nullptr);
    ASSERT_GT(port, 0);
    address_ = absl::StrCat("127.0.0.1:", port);
    client_ = MasterClient::Create(address_);
  }
  void TearDown() override {
    OpenGate();  // a job waiting to start can end
    client_.reset();
    if (server_ == nullptr) return;
    master_->jobs()->Shutdown();
    server_->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(2));
    master_->Shutdown();
    server_->Wait();
  }

  void OpenGate() {
    if (!gate_open_) gated_->Open();
    gate_open_ = true;
  }

  // A WatchJob stream read only when the test says, over its own connection
  // whose receive window stays at HTTP/2's initial 64 KiB: the client takes
  // in no more than that unread.
  struct RawWatch {
    std::shared_ptr<grpc::Channel> channel;
    std::unique_ptr<MasterService::Stub> stub;
    grpc::ClientContext ctx;
    std::unique_ptr<grpc::ClientReader<JobStatus>> reader;
  };
  std::unique_ptr<RawWatch> OpenWatch(const std::string& job_id) {
    auto w = std::make_unique<RawWatch>();
    grpc::ChannelArguments args = ChannelArgs();
    args.SetInt(GRPC_ARG_HTTP2_BDP_PROBE, 0);
    args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
    w->channel = grpc::CreateCustomChannel(address_, grpc::InsecureChannelCredentials(), args);
    w->stub = MasterService::NewStub(w->channel);
    WatchJobRequest req;
    req.set_job_id(job_id);
    w->reader = w->stub->WatchJob(&w->ctx, req);
    return w;
  }

  bool open_gate_ = true;
  bool gate_open_ = false;
  std::unique_ptr<InProcessCluster> cluster_;
  std::unique_ptr<GatedWorkers> gated_;
  std::unique_ptr<Master> master_;
  std::unique_ptr<GrpcMasterService> service_;  // outlives server_
  std::unique_ptr<grpc::Server> server_;
  std::string address_;
  std::unique_ptr<MasterClient> client_;
};

// The job waits to create its session (so publishes nothing) until the gate opens.
class WatchPendingJobTest : public WatchJobTest {
 protected:
  WatchPendingJobTest() { open_gate_ = false; }
};

// A watcher that reads everything at once, on a thread: what it saw. Its
// destructor cancels a stream still open.
class Watcher {
 public:
  Watcher(const std::string& address, const std::string& job_id)
      : stub_(MasterService::NewStub(NewChannel(address))), thread_([this, job_id] {
          WatchJobRequest req;
          req.set_job_id(job_id);
          auto reader = stub_->WatchJob(&ctx_, req);
          JobStatus st;
          while (reader->Read(&st)) {
            absl::MutexLock lock(&mu_);
            seen_.push_back(st);
          }
          grpc::Status s = reader->Finish();
          absl::MutexLock lock(&mu_);
          result_ = s;
          done_ = true;
        }) {}
  ~Watcher() {
    ctx_.TryCancel();
    thread_.join();
  }

  // True once it has seen a status of step `step` or later.
  bool AwaitStep(int64_t step, absl::Duration timeout) {
    absl::MutexLock lock(&mu_);
    auto reached = [this, step]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      return !seen_.empty() && seen_.back().step() >= step;
    };
    return mu_.AwaitWithTimeout(absl::Condition(&reached), timeout);
  }
  // How the stream ended; nullopt if it has not within `timeout`.
  std::optional<grpc::Status> AwaitEnd(absl::Duration timeout) {
    absl::MutexLock lock(&mu_);
    if (!mu_.AwaitWithTimeout(absl::Condition(&done_), timeout)) return std::nullopt;
    return result_;
  }
  std::vector<JobStatus> seen() {
    absl::MutexLock lock(&mu_);
    return seen_;
  }

 private:
  std::unique_ptr<MasterService::Stub> stub_;
  grpc::ClientContext ctx_;
  absl::Mutex mu_;
  std::vector<JobStatus> seen_ ABSL_GUARDED_BY(mu_);
  grpc::Status result_ ABSL_GUARDED_BY(mu_);
  bool done_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;  // last: it uses everything above
};

// A job whose statuses are 32 KiB each (its name): two of them fill a
// stalled reader's receive window.
JobSpec BulkyJob() {
  JobSpec job = TinyJob(100000);
  job.set_name(std::string(32 << 10, 'j'));
  return job;
}

constexpr absl::Duration kWait = absl::Seconds(60);  // for what happens at once

TEST_F(WatchPendingJobTest, TheServerEndsAWatchTheClientCancels) {
  auto id = client_->SubmitJob(TinyJob(100000));
  ASSERT_TRUE(id.ok()) << id.status();
  auto w = OpenWatch(*id);
  JobStatus s;
  ASSERT_TRUE(w->reader->Read(&s));
  EXPECT_EQ(service_->active_watches(), 1);
  // The job publishes nothing while it waits to start, so only the cancel
  // can end the server's handler.
  w->ctx.TryCancel();
  while (w->reader->Read(&s)) {
  }
  EXPECT_EQ(w->reader->Finish().error_code(), grpc::StatusCode::CANCELLED);
  EXPECT_TRUE(service_->AwaitActiveWatches(0, kWait))
      << "the server's WatchJob handler is still running after the client cancelled ("
      << service_->active_watches() << " active)";
  OpenGate();
  EXPECT_TRUE(client_->CancelJob(*id).ok());
}

TEST_F(WatchJobTest, AReaderThatStopsReadingHoldsUpNeitherTheJobNorOtherWatchers) {
  auto id = client_->SubmitJob(BulkyJob());
  ASSERT_TRUE(id.ok()) << id.status();
  auto stalled = OpenWatch(*id);
  JobStatus first;
  ASSERT_TRUE(stalled->reader->Read(&first));
  // From here the stalled reader reads nothing until the job has ended.
  Watcher other(address_, *id);
  EXPECT_TRUE(other.AwaitStep(first.step() + 100, kWait))
      << "the job did not get 100 steps past " << first.step() << " while a watcher stalled";
  // The master serves other calls meanwhile.
  auto got = client_->GetJob(*id);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(got->state(), RUNNING);
  EXPECT_EQ(service_->active_watches(), 2);

  ASSERT_TRUE(client_->CancelJob(*id).ok());
  std::optional<grpc::Status> end = other.AwaitEnd(kWait);
  ASSERT_TRUE(end.has_value()) << "the other watcher's stream did not end after the cancel";
  EXPECT_TRUE(end->ok()) << end->error_message();
  const std::vector<JobStatus> seen = other.seen();
  ASSERT_FALSE(seen.empty());
  EXPECT_EQ(seen.back().state(), CANCELLED);

  // The stalled reader reads on: the statuses that had no room were replaced
  // by newer ones rather than queued, and the terminal one comes last.
  std::vector<JobStatus> rest;
  JobStatus s;
  while (stalled->reader->Read(&s)) rest.push_back(s);
  grpc::Status finished = stalled->reader->Finish();
  EXPECT_TRUE(finished.ok()) << finished.error_message();
  ASSERT_FALSE(rest.empty());
  EXPECT_EQ(rest.back().state(), CANCELLED);
  EXPECT_LT(rest.size(), seen.size()) << "the reader was never held up: this test proved nothing";
  EXPECT_TRUE(service_->AwaitActiveWatches(0, kWait)) << service_->active_watches() << " watch(es) still active";
}

TEST_F(WatchJobTest, AReaderThatGoesAwayHasItsWatchCleanedUp) {
  auto id = client_->SubmitJob(BulkyJob());
  ASSERT_TRUE(id.ok()) << id.status();
  auto gone = OpenWatch(*id);
  JobStatus first;
  ASSERT_TRUE(gone->reader->Read(&first));
  Watcher other(address_, *id);
  // By now the server's write to `gone` waits for room that never comes.
  ASSERT_TRUE(other.AwaitStep(first.step() + 50, kWait)) << "the job made no progress";
  ASSERT_EQ(service_->active_watches(), 2);

  // The client vanishes without reading or finishing its call.
  gone.reset();
  EXPECT_TRUE(service_->AwaitActiveWatches(1, kWait))
      << "the handler of a watch whose client went away is still running (" << service_->active_watches()
      << " active)";
  // The job and the other watcher go on.
  const int64_t step = other.seen().back().step();
  EXPECT_TRUE(other.AwaitStep(step + 50, kWait)) << "the job stalled after a watcher went away";
  ASSERT_TRUE(client_->CancelJob(*id).ok());
  std::optional<grpc::Status> end = other.AwaitEnd(kWait);
  ASSERT_TRUE(end.has_value()) << "the other watcher's stream did not end after the cancel";
  EXPECT_TRUE(end->ok()) << end->error_message();
  EXPECT_TRUE(service_->AwaitActiveWatches(0, kWait));
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
