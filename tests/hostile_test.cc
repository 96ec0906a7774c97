// Real daemons fed what a compromised or buggy peer could send once it is
// authenticated: graphs whose attributes overflow, variables larger than any
// machine, shapes that divide by zero, feeds whose headers lie about their
// size, step counts without end, floods of step ids. Each request gets an
// error that names the node, attribute or field; the daemon keeps serving,
// its memory returns near where it started, a job run beside the attacks
// finishes normally, and SIGTERM still stops every daemon afterwards.
#include <signal.h>
#include <sys/wait.h>

#include <cstdint>
#include <fstream>
#include <iostream>
#include <limits>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "client/grpc_master_client.h"
#include "client/subprocess.h"
#include "common/grpc_util.h"
#include "google/protobuf/text_format.h"
#include "gtest/gtest.h"
#include "job/job_spec.h"
#include "proto/worker_service.grpc.pb.h"
#include "runtime/data/test_files.h"
#include "tests/test_cluster.h"
#include "tests/test_tls.h"

namespace weft {
namespace {

using data::testing::TempPath;

constexpr absl::Duration kJobDeadline = absl::Seconds(180);
constexpr absl::Duration kRpcDeadline = absl::Seconds(30);
// How far a daemon's resident memory may stay above its level before the
// attacks once they are over: room for the allocator's caches and gRPC's
// buffers, far below any one of the attacks' sizes (a terabyte variable, a
// 2^62-element feed).
constexpr int64_t kRssSlackBytes = int64_t{256} << 20;

constexpr char kCpu[] = "/job:worker/task:0/device:CPU:0";

// Resident set size of `pid` from /proc, in bytes; -1 when unreadable.
int64_t ResidentBytes(pid_t pid) {
  std::ifstream in(absl::StrCat("/proc/", pid, "/status"));
  std::string line;
  while (std::getline(in, line)) {
    if (!absl::StartsWith(line, "VmRSS:")) continue;
    std::vector<std::string> parts = absl::StrSplit(line, ' ', absl::SkipEmpty());
    int64_t kb;
    if (parts.size() >= 2 && absl::SimpleAtoi(parts[1], &kb)) return kb * 1024;
  }
  return -1;
}

// One hostile graph: registered, then (if the task accepts it) run. The
// error, from whichever of the two refuses it, must carry `code` and name
// `names` (a node, an attribute).
struct GraphCase {
  std::string name;
  std::string graph;  // GraphDef in text format; "$D" is the task's CPU
  std::vector<std::string> fetch;
  std::vector<std::string> target;
  grpc::StatusCode code;
  std::vector<std::string> names;
};

std::string Expand(const std::string& text) {
  std::string out = text;
  for (size_t at; (at = out.find("$D")) != std::string::npos;) out.replace(at, 2, kCpu);
  return out;
}

std::vector<GraphCase> GraphCases() {
  const std::string c4 =
      R"(node { name: "c" op: "Const" device: "$D" attr { key: "value" value { tensor {
           dtype: DT_FLOAT shape { dim: 4 } content: "\000\000\200?\000\000\200?\000\000\200?\000\000\200?" } } } })";
  return {
      {"slice rows past INT64_MAX",
       c4 + R"(node { name: "slice" op: "SliceRows" input: "c" device: "$D"
                  attr { key: "begin" value { i: 9223372036854775806 } } attr { key: "size" value { i: 4 } } })",
       {"slice:0"}, {}, grpc::StatusCode::INVALID_ARGUMENT, {"slice"}},
      {"a terabyte variable",
       R"(node { name: "huge" op: "Variable" device: "$D" attr { key: "dtype" value { type: DT_FLOAT } }
                 attr { key: "shape" value { shape { dim: 1099511627776 dim: 1 } } } })",
       {"huge:0"}, {}, grpc::StatusCode::RESOURCE_EXHAUSTED, {"huge"}},
      {"a small shard of a terabyte initial value",
       R"(node { name: "shard" op: "Variable" device: "$D" attr { key: "dtype" value { type: DT_FLOAT } }
                 attr { key: "shape" value { shape { dim: 1 dim: 1 } } }
                 attr { key: "initializer" value { s: "glorot_uniform" } }
                 attr { key: "init_shape" value { shape { dim: 1099511627776 dim: 1 } } } })",
       {"shard:0"}, {}, grpc::StatusCode::RESOURCE_EXHAUSTED, {"shard"}},
      {"an empty variable against a wider initial value",
       R"(node { name: "empty" op: "Variable" device: "$D" attr { key: "dtype" value { type: DT_FLOAT } }
                 attr { key: "shape" value { shape { dim: 0 dim: 1 } } }
                 attr { key: "initializer" value { s: "glorot_uniform" } }
                 attr { key: "init_shape" value { shape { dim: 0 dim: 2 } } } })",
       {"empty:0"}, {}, grpc::StatusCode::INVALID_ARGUMENT, {"empty", "init_shape"}},
      {"a reshape whose element count wraps",
       c4 + R"(node { name: "reshape" op: "Reshape" input: "c" device: "$D"
                  attr { key: "shape" value { list { i: 4611686018427387905 i: 4 } } } })",
       {"reshape:0"}, {}, grpc::StatusCode::INVALID_ARGUMENT, {"reshape"}},
      {"a constant whose shape claims 2^40 elements",
       R"(node { name: "liar" op: "Const" device: "$D" attr { key: "value" value { tensor {
             dtype: DT_FLOAT shape { dim: 1099511627776 } content: "\000\000\200?" } } } })",
       {"liar:0"}, {}, grpc::StatusCode::INVALID_ARGUMENT, {"liar"}},
      {"a constant whose dimensions overflow",
       R"(node { name: "wrap" op: "Const" device: "$D" attr { key: "value" value { tensor {
             dtype: DT_FLOAT shape { dim: 4611686018427387904 dim: 4 } content: "" } } } })",
       {"wrap:0"}, {}, grpc::StatusCode::INVALID_ARGUMENT, {"wrap"}},
  };
}

class HostileInputTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    daemons_ = new std::vector<std::unique_ptr<testing::TestDaemon>>();
    auto tls = testing::TestTls::Create(TempPath("tls"));
    ASSERT_TRUE(tls.ok()) << tls.status();
    tls_ = new testing::TestTls(*std::move(tls));
    testing::TestDaemon* w0 = Add("worker-0", {"worker", "--task=worker:0"});
    testing::TestDaemon* w1 = Add("worker-1", {"worker", "--task=worker:1"});
    for (auto& d : *daemons_) ASSERT_TRUE(d->Launch().ok());
    for (auto& d : *daemons_) {
      absl::Status s = d->AwaitPort();
      ASSERT_TRUE(s.ok()) << s;
    }
    worker0_ = w0->address();
    testing::TestDaemon* master =
        Add("master", {"master", "--cluster=" + absl::StrCat("worker=", w0->address(), ",", w1->address())});
    absl::Status s = master->Start();
    ASSERT_TRUE(s.ok()) << s;
    admin_ = MasterClient::Create(master->address(), tls_->ClientOptions("root", Role::kAdmin)).release();
    std::vector<testing::TestDaemon*> all;
    for (auto& d : *daemons_) all.push_back(d.get());
    ASSERT_TRUE(testing::WaitForCluster(admin_, 2, all));
  }

  static void TearDownTestSuite() {
    delete admin_;
    // After every attack, SIGTERM still stops each daemon promptly and
    // cleanly. The bound is a hang detector, not a timing.
    for (auto& d : *daemons_) {
      Subprocess* p = d->process();
      if (!p->Running()) continue;
      p->Signal(SIGTERM);
      EXPECT_TRUE(p->WaitFor(absl::Seconds(20))) << d->name() << " did not stop on SIGTERM after the attacks";
      EXPECT_TRUE(WIFEXITED(p->exit_status()) && WEXITSTATUS(p->exit_status()) == 0)
          << d->name() << " " << DescribeExitStatus(p->exit_status()) << "\n" << testing::LogTail(d->log());
    }
    delete daemons_;
    delete tls_;
  }

  static testing::TestDaemon* Add(const std::string& name, std::vector<std::string> args) {
    for (const std::string& flag : tls_->DaemonFlags(testing::DaemonIdentity(name))) args.push_back(flag);
    args.push_back("--data_root=" + ::testing::TempDir());
    args.push_back("--checkpoint_root=" + ::testing::TempDir());
    daemons_->push_back(std::make_unique<testing::TestDaemon>(name, std::move(args), TempPath(name + ".log")));
    return daemons_->back().get();
  }

  // A stub that presents the master's certificate: what a compromised
  // master (or one with a bug) could send.
  static std::unique_ptr<WorkerService::Stub> AsMaster() {
    return WorkerService::NewStub(NewChannel(worker0_, tls_->DaemonCredentials("master")));
  }

  static testing::TestDaemon* Worker0() { return (*daemons_)[0].get(); }

  // The worker answers GetStatus and its process runs.
  static ::testing::AssertionResult Serving(WorkerService::Stub* stub) {
    absl::Status running = Worker0()->CheckRunning();
    if (!running.ok()) return ::testing::AssertionFailure() << running;
    grpc::ClientContext ctx;
    SetDeadline(&ctx, kRpcDeadline);
    GetStatusRequest req;
    GetStatusResponse resp;
    grpc::Status s = stub->GetStatus(&ctx, req, &resp);
    if (!s.ok()) return ::testing::AssertionFailure() << "GetStatus: " << s.error_message();
    return ::testing::AssertionSuccess();
  }

  // Registers `c`'s graph and runs it once if that succeeds; the first
  // error.
  static grpc::Status Attack(WorkerService::Stub* stub, const GraphCase& c, const std::string& session) {
    RegisterGraphRequest reg;
    reg.set_session_handle(session);
    if (!google::protobuf::TextFormat::ParseFromString(Expand(c.graph), reg.mutable_graph_def())) {
      return grpc::Status(grpc::StatusCode::INTERNAL, "the test's graph text does not parse: " + c.name);
    }
    for (const auto& f : c.fetch) reg.add_fetch(f);
    for (const auto& t : c.target) reg.add_target(t);
    RegisterGraphResponse reg_resp;
    {
      grpc::ClientContext ctx;
      SetDeadline(&ctx, kRpcDeadline);
      grpc::Status s = stub->RegisterGraph(&ctx, reg, &reg_resp);
      if (!s.ok()) return s;
    }
    RunGraphRequest run;
    run.set_session_handle(session);
    run.set_graph_handle(reg_resp.graph_handle());
    run.set_step_id(1);
    RunGraphResponse run_resp;
    grpc::ClientContext ctx;
    SetDeadline(&ctx, kRpcDeadline);
    return stub->RunGraph(&ctx, run, &run_resp);
  }

  static testing::TestTls* tls_;
  static MasterClient* admin_;
  static std::string worker0_;
  static std::vector<std::unique_ptr<testing::TestDaemon>>* daemons_;
};

testing::TestTls* HostileInputTest::tls_ = nullptr;
MasterClient* HostileInputTest::admin_ = nullptr;
std::string HostileInputTest::worker0_;
std::vector<std::unique_ptr<testing::TestDaemon>>* HostileInputTest::daemons_ = nullptr;

TEST_F(HostileInputTest, CraftedGraphsAreRefusedByNameAndTheWorkerKeepsServing) {
  auto stub = AsMaster();
  ASSERT_TRUE(Serving(stub.get()));
  const int64_t baseline = ResidentBytes(Worker0()->process()->pid());
  ASSERT_GT(baseline, 0);

  // A legitimate job runs on the same workers while the attacks go on.
  const std::string data = testing::WriteThreeClassData(TempPath("data"), 300);
  auto job = ParseJob(absl::StrCat(R"(name: "beside-the-attacks"
      model { input_shape: [12] num_classes: 3 layer { dense { units: 16 activation: RELU } } layer { dense { units: 3 } } }
      dataset { dir: ")", data, R"(" } optimizer { sgd { learning_rate: 0.1 } } batch_size: 8 seed: 3 epochs: 3
      strategy { kind: MULTI_WORKER_MIRRORED })"),
                      "test");
  ASSERT_TRUE(job.ok()) << job.status();
  auto id = admin_->SubmitJob(*job);
  ASSERT_TRUE(id.ok()) << id.status();

  int n = 0;
  for (const GraphCase& c : GraphCases()) {
    SCOPED_TRACE(c.name);
    grpc::Status s = Attack(stub.get(), c, absl::StrCat("attack/", n++));
    std::cout << c.name << ": " << s.error_message() << "\n";
    EXPECT_EQ(s.error_code(), c.code) << s.error_message();
    for (const std::string& name : c.names) {
      EXPECT_TRUE(absl::StrContains(s.error_message(), name)) << "error does not name '" << name << "': "
                                                              << s.error_message();
    }
    ASSERT_TRUE(Serving(stub.get())) << testing::LogTail(Worker0()->log());
  }

  JobStatus last = testing::WatchJobToEnd(admin_, *id, kJobDeadline);
  EXPECT_EQ(last.state(), SUCCEEDED) << last.DebugString();
  EXPECT_GT(last.test_accuracy(), 0.9) << last.DebugString();

  const int64_t after = ResidentBytes(Worker0()->process()->pid());
  EXPECT_LT(after, baseline + kRssSlackBytes) << "resident memory went from " << baseline << " to " << after;
}

// The IDX reader's fuzzer finding (tests/fuzz/regressions/idx_reader_fuzzer/
// zero_count_huge_example_shape: an ubyte header of 13 dimensions, the first
// 0, the rest large enough that the example size overflowed) as a job's
// training images. The master and the workers read it; the job fails naming
// the file, and every daemon keeps serving.
TEST_F(HostileInputTest, ADatasetFileFoundByTheFuzzerFailsTheJobNotTheDaemons) {
  static constexpr unsigned char kFinding[] = {
      0x00, 0x00, 0x08, 0x0d, 0x00, 0x00, 0x00, 0x00, 0x08, 0x01, 0x00, 0x25, 0x00, 0x00, 0xff, 0xff,
      0xff, 0xff, 0xff, 0xff, 0xff, 0xe0, 0x01, 0x08, 0x00, 0x60, 0x9f, 0x00, 0xff, 0xff, 0xff, 0xff,
      0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x00, 0x00, 0x08, 0x01, 0x00, 0x25, 0x01,
      0x08, 0x00, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff};
  const std::string data = testing::WriteThreeClassData(TempPath("fuzzed-data"), 30);
  data::testing::WriteFile(
      data + "/train-images-idx3-ubyte.gz",
      data::testing::Gzip(std::string(reinterpret_cast<const char*>(kFinding), sizeof(kFinding))));
  auto job = ParseJob(absl::StrCat(R"(name: "fuzzed-data"
      model { input_shape: [12] num_classes: 3 layer { dense { units: 3 } } }
      dataset { dir: ")", data, R"(" } optimizer { sgd { learning_rate: 0.1 } } batch_size: 8 seed: 3 epochs: 1
      strategy { kind: MULTI_WORKER_MIRRORED })"),
                      "test");
  ASSERT_TRUE(job.ok()) << job.status();
  auto id = admin_->SubmitJob(*job);
  if (id.ok()) {
    JobStatus last = testing::WatchJobToEnd(admin_, *id, kJobDeadline);
    EXPECT_EQ(last.state(), FAILED) << last.DebugString();
    EXPECT_TRUE(absl::StrContains(last.error(), "train-images-idx3-ubyte.gz")) << last.error();
  } else {
    EXPECT_TRUE(absl::StrContains(id.status().message(), "train-images-idx3-ubyte.gz")) << id.status();
  }
  auto stub = AsMaster();
  EXPECT_TRUE(Serving(stub.get())) << testing::LogTail(Worker0()->log());
  for (auto& d : *daemons_) EXPECT_TRUE(d->CheckRunning().ok()) << d->name();
  EXPECT_TRUE(admin_->ListJobs().ok());
}

TEST_F(HostileInputTest, RunGraphRefusesEndlessIterationsAndLyingFeeds) {
  auto stub = AsMaster();
  // A graph that is harmless in itself: y = Identity(x) over a feed.
  RegisterGraphRequest reg;
  reg.set_session_handle("attack/run");
  ASSERT_TRUE(google::protobuf::TextFormat::ParseFromString(
      Expand(R"(node { name: "x" op: "Placeholder" device: "$D" attr { key: "dtype" value { type: DT_FLOAT } }
                       attr { key: "shape" value { shape { dim: -1 } } } }
                node { name: "y" op: "Identity" input: "x" device: "$D" })"),
      reg.mutable_graph_def()));
  reg.add_feed("x");
  reg.add_fetch("y:0");
  RegisterGraphResponse reg_resp;
  {
    grpc::ClientContext ctx;
    SetDeadline(&ctx, kRpcDeadline);
    grpc::Status s = stub->RegisterGraph(&ctx, reg, &reg_resp);
    ASSERT_TRUE(s.ok()) << s.error_message();
  }
  auto run = [&](int32_t iterations, const std::string& feed_text) {
    RunGraphRequest req;
    req.set_session_handle("attack/run");
    req.set_graph_handle(reg_resp.graph_handle());
    req.set_step_id(100);
    req.set_iterations(iterations);
    NamedTensorProto* send = req.add_send();
    send->set_name("x");
    EXPECT_TRUE(google::protobuf::TextFormat::ParseFromString(feed_text, send->mutable_tensor()));
    RunGraphResponse resp;
    grpc::ClientContext ctx;
    SetDeadline(&ctx, kRpcDeadline);
    grpc::Status s = stub->RunGraph(&ctx, req, &resp);
    std::cout << "RunGraph(iterations " << iterations << "): " << s.error_message() << "\n";
    return s;
  };
  const std::string one = R"(dtype: DT_FLOAT shape { dim: 1 } content: "\000\000\200?")";
  // The same graph runs normally, so the refusals below are the inputs'.
  grpc::Status ok = run(1, one);
  ASSERT_TRUE(ok.ok()) << ok.error_message();

  grpc::Status endless = run(std::numeric_limits<int32_t>::max(), one);
  EXPECT_EQ(endless.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED) << endless.error_message();
  EXPECT_TRUE(absl::StrContains(endless.error_message(), "--max_iterations")) << endless.error_message();

  grpc::Status liar = run(1, R"(dtype: DT_FLOAT shape { dim: 4611686018427387904 } content: "\000\000\200?")");
  EXPECT_EQ(liar.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << liar.error_message();
  EXPECT_TRUE(absl::StrContains(liar.error_message(), "x")) << liar.error_message();

  grpc::Status wrap = run(1, R"(dtype: DT_FLOAT shape { dim: 4611686018427387905 dim: 4 } content: "\000\000\200?")");
  EXPECT_EQ(wrap.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << wrap.error_message();
  EXPECT_TRUE(Serving(stub.get()));
}

TEST_F(HostileInputTest, AFloodOfUnknownStepsIsAnsweredAndTheWorkerKeepsServing) {
  auto stub = AsMaster();
  // Each AbortStep of an unknown step leaves a marker behind so that a late
  // RunGraph of it fails; a flood of them is answered (or refused by the
  // quota, saying so) and disturbs nothing. The bound itself is
  // runtime/rendezvous_test's.
  for (int64_t step = 1; step <= 2000; ++step) {
    grpc::ClientContext ctx;
    SetDeadline(&ctx, kRpcDeadline);
    AbortStepRequest req;
    req.set_step_id(int64_t{1} << 40 | step);
    AbortStepResponse resp;
    grpc::Status s = stub->AbortStep(&ctx, req, &resp);
    if (!s.ok()) {
      ASSERT_EQ(s.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED) << s.error_message();
    }
  }
  EXPECT_TRUE(Serving(stub.get()));
}

}  // namespace
}  // namespace weft
