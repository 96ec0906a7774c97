// A ps task (WorkerServer as job "ps" with the ParameterServer service) on
// loopback, driven through real stubs: variables are created by registering
// and running graphs through the WorkerService, then listed, saved and
// restored through the ParameterServer service.
#include "ps/ps_service.h"

#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdint>
#include <memory>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/confined_root.h"
#include "common/crc32c.h"
#include "common/env.h"
#include "common/grpc_util.h"
#include "common/tensor_proto_coding.h"
#include "graph/builder.h"
#include "gtest/gtest.h"
#include "proto/ps_service.grpc.pb.h"
#include "ps/shard_file.h"
#include "runtime/testing/test_util.h"
#include "worker/grpc_remote_worker.h"
#include "worker/worker_server.h"
#include "worker/worker_test_util.h"

namespace weft {
namespace ps {
namespace {

using worker::testing::MakeRegisterRequest;
using worker::testing::WaitFor;

constexpr char kPsTask[] = "/job:ps/task:0";
constexpr char kPsCpu[] = "/job:ps/task:0/device:CPU:0";

// w: float32 [rows,3] "ones", c: int32 [3] zeros; "apply" does w -= 1 * g
// with g = 0.5 everywhere. The read graph fetches w and c, the update graph
// fetches apply.
GraphDef UpdateGraph(int64_t rows) {
  Graph g;
  GraphBuilder b(&g);
  Output w = b.Variable("w", DType::kFloat32, {rows, 3}, "ones");
  b.Variable("c", DType::kInt32, {3}, "zeros");
  b.Op("ApplyGradientDescent",
       {w, b.Const(weft::testing::FloatTensor({rows, 3}, std::vector<float>(rows * 3, 0.5f)), "g")},
       {Attr("learning_rate", 1.0f)}, "apply");
  EXPECT_TRUE(b.status().ok()) << b.status();
  return g.ToGraphDef();
}

GraphDef ReadGraph(int64_t rows) {
  Graph g;
  GraphBuilder b(&g);
  b.Variable("w", DType::kFloat32, {rows, 3}, "ones");
  b.Variable("c", DType::kInt32, {3}, "zeros");
  EXPECT_TRUE(b.status().ok()) << b.status();
  return g.ToGraphDef();
}

class PsServiceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const char* tmp = std::getenv("TEST_TMPDIR");
    std::string templ = JoinPath(tmp != nullptr ? tmp : "/tmp", "ps_service_test.XXXXXX");
    ASSERT_NE(::mkdtemp(templ.data()), nullptr);
    dir_ = templ;

    worker::WorkerServerOptions o;
    o.job = "ps";
    o.listen_address = "127.0.0.1:0";
    o.shutdown_grace = absl::Seconds(2);
    o.extra_services.push_back(PsServiceFactory(HandlerOptions()));
    auto s = worker::StartWorkerServer(o);
    ASSERT_TRUE(s.ok()) << s.status();
    server_ = *std::move(s);
    ASSERT_EQ(server_->task(), kPsTask);
    channel_ = NewChannel(server_->address());
    worker_ = std::make_unique<worker::GrpcRemoteWorker>(kPsTask, channel_);
    stub_ = ::weft::ParameterServer::NewStub(channel_);
  }

  void TearDown() override {
    if (server_ != nullptr) server_->Shutdown();
  }

  // No checkpoint root: absolute paths, as in-process tests use them.
  virtual PsHandlerOptions HandlerOptions() { return PsHandlerOptions(); }

  std::string Register(const std::string& session, const GraphDef& def, std::vector<std::string> fetches) {
    RegisterGraphRequest req = MakeRegisterRequest(def, {}, std::move(fetches));
    req.set_session_handle(session);
    RegisterGraphResponse resp;
    absl::Status s = WaitFor([&](StatusCallback d) { worker_->RegisterGraphAsync(&req, &resp, d); });
    EXPECT_TRUE(s.ok()) << s;
    return resp.graph_handle();
  }

  // Runs a registered graph once and returns its fetch `name`.
  Tensor Run(const std::string& session, const std::string& handle, const std::string& name) {
    RunGraphRequest req;
    req.set_session_handle(session);
    req.set_graph_handle(handle);
    req.set_step_id(++step_);
    RunGraphResponse resp;
    absl::Status s = WaitFor([&](StatusCallback d) { worker_->RunGraphAsync(&req, &resp, absl::Seconds(30), d); });
    EXPECT_TRUE(s.ok()) << s;
    CleanupStepRequest c;
    c.set_step_id(step_);
    CleanupStepResponse cr;
    EXPECT_TRUE(WaitFor([&](StatusCallback d) { worker_->CleanupStepAsync(&c, &cr, d); }).ok());
    for (const NamedTensorProto& t : resp.recv()) {
      if (t.name() == name) return TensorFromProto(t.tensor()).value();
    }
    ADD_FAILURE() << "no fetch " << name;
    return Tensor();
  }

  absl::Status List(const ListShardsRequest& req, ListShardsResponse* resp) {
    grpc::ClientContext ctx;
    SetDeadline(&ctx, absl::Seconds(30));
    return FromGrpcStatus(stub_->ListShards(&ctx, req, resp));
  }

  absl::Status Save(const std::string& session, const std::string& path, int64_t step, SaveShardResponse* resp,
                    std::vector<std::string> vars = {}) {
    SaveShardRequest req;
    req.set_session_handle(session);
    req.set_path(path);
    req.set_global_step(step);
    for (auto& v : vars) req.add_variable(v);
    grpc::ClientContext ctx;
    SetDeadline(&ctx, absl::Seconds(30));
    return FromGrpcStatus(stub_->SaveShard(&ctx, req, resp));
  }

  absl::Status Restore(const std::string& session, const std::string& path, RestoreShardResponse* resp,
                       int64_t expect_step = 0) {
    RestoreShardRequest req;
    req.set_session_handle(session);
    req.set_path(path);
    req.set_expect_global_step(expect_step);
    grpc::ClientContext ctx;
    SetDeadline(&ctx, absl::Seconds(30));
    return FromGrpcStatus(stub_->RestoreShard(&ctx, req, resp));
  }

  std::string dir_;
  int64_t step_ = 0;
  std::unique_ptr<worker::WorkerServer> server_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<worker::GrpcRemoteWorker> worker_;
  std::unique_ptr<::weft::ParameterServer::Stub> stub_;
};

TEST_F(PsServiceTest, ListSaveUpdateRestoreRoundTrip) {
  const std::string update = Register("s1", UpdateGraph(2), {"apply"});
  const std::string read = Register("s1", ReadGraph(2), {"w", "c"});
  Tensor after1 = Run("s1", update, "apply");  // 1 - 0.5
  EXPECT_EQ(weft::testing::MaxAbsDiff(after1, weft::testing::FloatTensor({2, 3}, std::vector<float>(6, 0.5f))), 0);
  Run("s1", read, "c");  // creates c

  ListShardsResponse list;
  ASSERT_TRUE(List(ListShardsRequest(), &list).ok());
  EXPECT_EQ(list.task(), kPsTask);
  ASSERT_EQ(list.session_size(), 1);
  EXPECT_EQ(list.session(0).session_handle(), "s1");
  ASSERT_EQ(list.session(0).variable_size(), 2);
  const VariableInfo& c = list.session(0).variable(0);
  const VariableInfo& w = list.session(0).variable(1);
  EXPECT_EQ(c.name(), "c");
  EXPECT_EQ(c.dtype(), DT_INT32);
  EXPECT_EQ(c.bytes(), 12);
  EXPECT_EQ(w.name(), "w");
  EXPECT_EQ(w.dtype(), DT_FLOAT);
  EXPECT_EQ(w.bytes(), 24);
  ASSERT_EQ(w.shape().dim_size(), 2);
  EXPECT_EQ(w.shape().dim(0), 2);
  EXPECT_EQ(w.shape().dim(1), 3);
  EXPECT_EQ(w.device(), kPsCpu);

  // Saving creates the step directory; size and crc describe the file.
  const std::string path = JoinPath(dir_, "ckpt/step-1/ps-0.shard");
  SaveShardResponse saved;
  absl::Status s = Save("s1", path, 1, &saved);
  ASSERT_TRUE(s.ok()) << s;
  EXPECT_EQ(saved.path(), path);
  EXPECT_EQ(saved.num_variables(), 2);
  EXPECT_EQ(saved.owner_task(), kPsTask);
  const std::string bytes = ReadFileToString(Env::Default(), path).value();
  EXPECT_EQ(saved.size(), bytes.size());
  EXPECT_EQ(saved.crc32c(), Crc32c(bytes.data(), bytes.size()));
  auto shard = ReadShard(Env::Default(), path);
  ASSERT_TRUE(shard.ok()) << shard.status();
  EXPECT_EQ(shard->global_step, 1);
  EXPECT_EQ(shard->owner_task, kPsTask);

  // Train on; then restore brings the saved value back.
  Tensor after2 = Run("s1", update, "apply");
  EXPECT_EQ(after2.data<float>()[0], 0.0f);
  RestoreShardResponse restored;
  s = Restore("s1", path, &restored, /*expect_step=*/1);
  ASSERT_TRUE(s.ok()) << s;
  EXPECT_EQ(restored.global_step(), 1);
  EXPECT_EQ(restored.num_variables(), 2);
  EXPECT_EQ(restored.owner_task(), kPsTask);
  EXPECT_EQ(weft::testing::MaxAbsDiff(Run("s1", read, "w"), after1), 0);
  // And training continues from it.
  EXPECT_EQ(weft::testing::MaxAbsDiff(Run("s1", update, "apply"), after2), 0);
}

TEST_F(PsServiceTest, RestoreIntoAFreshSessionSkipsTheInitializers) {
  // A shard as another run saved it.
  Shard shard;
  shard.owner_task = kPsTask;
  shard.global_step = 42;
  shard.tensors.push_back({"w", weft::testing::FloatTensor({2, 3}, {1, 2, 3, 4, 5, 6}), kPsCpu});
  shard.tensors.push_back({"c", weft::testing::IntTensor({3}, {7, 8, 9}), kPsCpu});
  const std::string path = JoinPath(dir_, "given.shard");
  ASSERT_TRUE(WriteShard(Env::Default(), path, shard).ok());

  const std::string read = Register("fresh", ReadGraph(2), {"w", "c"});
  RestoreShardResponse restored;
  absl::Status s = Restore("fresh", path, &restored);
  ASSERT_TRUE(s.ok()) << s;
  EXPECT_EQ(restored.global_step(), 42);
  // The first step finds the restored variables instead of initialising.
  EXPECT_EQ(weft::testing::MaxAbsDiff(Run("fresh", read, "w"), shard.tensors[0].value), 0);
  Tensor c = Run("fresh", read, "c");
  ASSERT_EQ(c.dtype(), DType::kInt32);
  EXPECT_EQ(c.data<int32_t>()[2], 9);
}

TEST_F(PsServiceTest, SaveASubset) {
  const std::string read = Register("s", ReadGraph(2), {"w", "c"});
  Run("s", read, "w");
  SaveShardResponse saved;
  ASSERT_TRUE(Save("s", JoinPath(dir_, "w.shard"), 3, &saved, {"w"}).ok());
  EXPECT_EQ(saved.num_variables(), 1);
  auto shard = ReadShard(Env::Default(), JoinPath(dir_, "w.shard"));
  ASSERT_TRUE(shard.ok()) << shard.status();
  ASSERT_EQ(shard->tensors.size(), 1u);
  EXPECT_EQ(shard->tensors[0].name, "w");

  absl::Status s = Save("s", JoinPath(dir_, "x.shard"), 3, &saved, {"w", "nope"});
  EXPECT_EQ(s.code(), absl::StatusCode::kNotFound) << s;
  EXPECT_TRUE(absl::StrContains(s.message(), "'nope'")) << s;
  EXPECT_FALSE(Env::Default()->FileExists(JoinPath(dir_, "x.shard")));
}

TEST_F(PsServiceTest, ErrorsNameWhatIsWrong) {
  const std::string update = Register("s1", UpdateGraph(2), {"apply"});
  const std::string read = Register("s1", ReadGraph(2), {"w", "c"});
  Run("s1", read, "w");
  const std::string good = JoinPath(dir_, "good.shard");
  SaveShardResponse saved;
  ASSERT_TRUE(Save("s1", good, 1, &saved).ok());
  RestoreShardResponse restored;
  ListShardsResponse list;

  // Unknown session.
  ListShardsRequest only;
  only.add_session_handle("ghost");
  absl::Status s = List(only, &list);
  EXPECT_EQ(s.code(), absl::StatusCode::kNotFound) << s;
  EXPECT_TRUE(absl::StrContains(s.message(), "'ghost'")) << s;
  s = Save("ghost", good, 1, &saved);
  EXPECT_EQ(s.code(), absl::StatusCode::kNotFound) << s;
  EXPECT_TRUE(absl::StrContains(s.message(), "'ghost'")) << s;
  s = Restore("ghost", good, &restored);
  EXPECT_EQ(s.code(), absl::StatusCode::kNotFound) << s;
  EXPECT_TRUE(absl::StrContains(s.message(), "'ghost'")) << s;

  // Bad paths.
  for (const std::string& bad : {std::string(""), std::string("relative/x.shard"), dir_ + "/"}) {
    s = Save("s1", bad, 1, &saved);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << bad << ": " << s;
    s = Restore("s1", bad, &restored);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << bad << ": " << s;
  }
  s = Restore("s1", JoinPath(dir_, "missing.shard"), &restored);
  EXPECT_EQ(s.code(), absl::StatusCode::kNotFound) << s;
  EXPECT_TRUE(absl::StrContains(s.message(), "missing.shard")) << s;
  // A directory where the file should be, and a file where a directory
  // should be.
  EXPECT_FALSE(Restore("s1", dir_, &restored).ok());
  s = Save("s1", JoinPath(good, "below.shard"), 1, &saved);
  EXPECT_FALSE(s.ok());
  EXPECT_TRUE(absl::StrContains(s.message(), good)) << s;

  // Wrong step.
  s = Restore("s1", good, &restored, /*expect_step=*/7);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
  EXPECT_TRUE(absl::StrContains(s.message(), "step 1")) << s;

  // A corrupt file: DATA_LOSS naming the variable; nothing changes.
  std::string bytes = ReadFileToString(Env::Default(), good).value();
  bytes.back() ^= 0x40;  // the last payload: w
  const std::string corrupt = JoinPath(dir_, "corrupt.shard");
  const absl::string_view piece = bytes;
  ASSERT_TRUE(WriteFileAtomically(Env::Default(), corrupt, {&piece, 1}).ok());
  Run("s1", update, "apply");
  const Tensor before = Run("s1", read, "w");
  s = Restore("s1", corrupt, &restored);
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss) << s;
  EXPECT_TRUE(absl::StrContains(s.message(), "'w'")) << s;
  EXPECT_EQ(weft::testing::MaxAbsDiff(Run("s1", read, "w"), before), 0);
}

// Steps and variable lists from a request are checked before anything is
// collected or written: INVALID_ARGUMENT naming the field (and the variable).
TEST_F(PsServiceTest, BadStepsAndVariableListsAreInvalidArgumentNamingTheField) {
  const std::string read = Register("s1", ReadGraph(2), {"w", "c"});
  Run("s1", read, "w");
  const std::string path = JoinPath(dir_, "checked.shard");
  SaveShardResponse saved;
  RestoreShardResponse restored;

  absl::Status s = Save("s1", path, -1, &saved);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_TRUE(absl::StrContains(s.message(), "global_step -1 is negative")) << s;
  s = Save("s1", path, INT64_MIN, &saved);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_TRUE(absl::StrContains(s.message(), "global_step")) << s;

  s = Save("s1", path, 1, &saved, {"w", "c", "w"});
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_TRUE(absl::StrContains(s.message(), "variable[2] 'w' repeats variable[0]")) << s;
  s = Save("s1", path, 1, &saved, {"c", ""});
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_TRUE(absl::StrContains(s.message(), "variable[1] is empty")) << s;
  // None of those wrote a file.
  EXPECT_FALSE(ReadFileToString(Env::Default(), path).ok());

  ASSERT_TRUE(Save("s1", path, 3, &saved, {"w", "c"}).ok());
  EXPECT_EQ(saved.num_variables(), 2);
  s = Restore("s1", path, &restored, /*expect_step=*/-3);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_TRUE(absl::StrContains(s.message(), "expect_global_step -3 is negative")) << s;
  ASSERT_TRUE(Restore("s1", path, &restored, /*expect_step=*/3).ok());
  EXPECT_EQ(restored.num_variables(), 2);
  EXPECT_EQ(restored.global_step(), 3);
}

TEST_F(PsServiceTest, MismatchIsFailedPreconditionAndChangesNothing) {
  // The shard holds c (fits) and w [2,3]; the session declares w as [4,3].
  Shard shard;
  shard.owner_task = kPsTask;
  shard.tensors.push_back({"c", weft::testing::IntTensor({3}, {7, 8, 9}), kPsCpu});
  shard.tensors.push_back({"w", weft::testing::FloatTensor({2, 3}, {1, 2, 3, 4, 5, 6}), kPsCpu});
  const std::string path = JoinPath(dir_, "small.shard");
  ASSERT_TRUE(WriteShard(Env::Default(), path, shard).ok());

  const std::string read = Register("big", ReadGraph(4), {"w", "c"});
  Run("big", read, "w");
  RestoreShardResponse restored;
  absl::Status s = Restore("big", path, &restored);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
  EXPECT_TRUE(absl::StrContains(s.message(), "variable 'w'")) << s;
  EXPECT_TRUE(absl::StrContains(s.message(), "[4,3]")) << s;
  // All or nothing: c, which would have fitted, was not touched.
  Tensor c = Run("big", read, "c");
  EXPECT_EQ(c.data<int32_t>()[0], 0);
}

TEST_F(PsServiceTest, ListsEverySessionOrTheOnesAskedFor) {
  const std::string a = Register("a", ReadGraph(2), {"w", "c"});
  const std::string b = Register("b", ReadGraph(5), {"w", "c"});
  Run("a", a, "w");
  Run("b", b, "w");
  ListShardsResponse list;
  ASSERT_TRUE(List(ListShardsRequest(), &list).ok());
  ASSERT_EQ(list.session_size(), 2);
  EXPECT_EQ(list.session(0).session_handle(), "a");
  EXPECT_EQ(list.session(1).session_handle(), "b");
  EXPECT_EQ(list.session(1).variable(1).bytes(), 5 * 3 * 4);

  ListShardsRequest only;
  only.add_session_handle("b");
  list.Clear();
  ASSERT_TRUE(List(only, &list).ok());
  ASSERT_EQ(list.session_size(), 1);
  EXPECT_EQ(list.session(0).session_handle(), "b");
}

// After the server stops, a handler call fails with UNAVAILABLE, not a hang.
TEST_F(PsServiceTest, ShutdownStopsCleanly) {
  const std::string read = Register("s", ReadGraph(2), {"w", "c"});
  Run("s", read, "w");
  SaveShardResponse saved;
  ASSERT_TRUE(Save("s", JoinPath(dir_, "a.shard"), 1, &saved).ok());
  server_->Shutdown();
  absl::Status s = Save("s", JoinPath(dir_, "b.shard"), 1, &saved);
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable) << s;
  EXPECT_FALSE(Env::Default()->FileExists(JoinPath(dir_, "b.shard")));
}

// The daemons' configuration: every path is relative to a checkpoint root
// and confined to it.
class ConfinedPsServiceTest : public PsServiceTest {
 protected:
  PsHandlerOptions HandlerOptions() override {
    root_ = JoinPath(dir_, "root");  // created by the handler
    PsHandlerOptions o;
    o.checkpoint_root = root_;
    return o;
  }

  // Saves the session "s" (w and c) to `path`.
  absl::Status SaveS(const std::string& path) {
    SaveShardResponse saved;
    return Save("s", path, 1, &saved);
  }

  // A valid shard of "s" outside the root, for restores that must not reach it.
  std::string ShardOutside() {
    Shard shard;
    shard.owner_task = kPsTask;
    shard.global_step = 9;
    shard.tensors.push_back({"w", weft::testing::FloatTensor({2, 3}, {9, 9, 9, 9, 9, 9}), kPsCpu});
    const std::string path = JoinPath(outside_, "theirs.shard");
    EXPECT_TRUE(WriteShard(Env::Default(), path, shard).ok());
    return path;
  }

  void SetUp() override {
    PsServiceTest::SetUp();
    outside_ = JoinPath(dir_, "outside");
    ASSERT_EQ(::mkdir(outside_.c_str(), 0700), 0);
    read_ = Register("s", ReadGraph(2), {"w", "c"});
    Run("s", read_, "c");
  }

  // What is in `dir_/outside`: nothing may appear there.
  std::vector<std::string> Outside() const { return Env::Default()->ListDirectory(outside_).value(); }

  std::string root_;
  std::string outside_;
  std::string read_;
};

int Mode(const std::string& path) {
  struct stat st;
  EXPECT_EQ(::lstat(path.c_str(), &st), 0) << path;
  return static_cast<int>(st.st_mode & 07777);
}

TEST_F(ConfinedPsServiceTest, RelativePathsRoundTripWithPrivateModes) {
  EXPECT_EQ(Mode(root_), 0700);  // created by the handler
  const std::string update = Register("s", UpdateGraph(2), {"apply"});
  const Tensor after1 = Run("s", update, "apply");
  SaveShardResponse saved;
  absl::Status s = Save("s", "job/step-1/ps-0.shard", 1, &saved);
  ASSERT_TRUE(s.ok()) << s;
  EXPECT_EQ(saved.path(), "job/step-1/ps-0.shard");  // as named, relative
  const std::string file = JoinPath(root_, "job/step-1/ps-0.shard");
  const std::string bytes = ReadFileToString(Env::Default(), file).value();
  EXPECT_EQ(saved.size(), bytes.size());
  EXPECT_EQ(saved.crc32c(), Crc32c(bytes.data(), bytes.size()));
  EXPECT_EQ(Mode(file), 0600);
  EXPECT_EQ(Mode(JoinPath(root_, "job")), 0700);
  EXPECT_EQ(Mode(JoinPath(root_, "job/step-1")), 0700);
  // Nothing but the shard is left beside it (no temp file).
  EXPECT_EQ(Env::Default()->ListDirectory(JoinPath(root_, "job/step-1")).value(),
            std::vector<std::string>{"ps-0.shard"});

  Run("s", update, "apply");
  RestoreShardResponse restored;
  s = Restore("s", "job/step-1/ps-0.shard", &restored, /*expect_step=*/1);
  ASSERT_TRUE(s.ok()) << s;
  EXPECT_EQ(restored.global_step(), 1);
  EXPECT_EQ(weft::testing::MaxAbsDiff(Run("s", read_, "w"), after1), 0);
}

TEST_F(ConfinedPsServiceTest, AbsolutePathsAreRefusedNamingThePathAndTheRoot) {
  const std::string canonical_root = ConfinedRoot::Open(root_, /*create=*/false).value().path();
  // Outside the root, and inside it: a task takes no absolute path.
  for (const std::string& path : {JoinPath(outside_, "x.shard"), JoinPath(root_, "job/x.shard")}) {
    absl::Status s = SaveS(path);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << path << ": " << s;
    EXPECT_TRUE(absl::StrContains(s.message(), path)) << s;
    EXPECT_TRUE(absl::StrContains(s.message(), canonical_root)) << s;
  }
  EXPECT_TRUE(Outside().empty());
  EXPECT_FALSE(Env::Default()->FileExists(JoinPath(root_, "job")));
  RestoreShardResponse restored;
  const std::string theirs = ShardOutside();
  absl::Status s = Restore("s", theirs, &restored);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_TRUE(absl::StrContains(s.message(), theirs)) << s;
  EXPECT_EQ(Run("s", read_, "w").data<float>()[0], 1.0f);  // not restored
}

TEST_F(ConfinedPsServiceTest, DotDotIsRefused) {
  for (const std::string& path : {std::string("../outside/x.shard"), std::string("job/../../outside/x.shard"),
                                  std::string("job/../x.shard"), std::string("./x.shard"), std::string("job/"),
                                  std::string("")}) {
    absl::Status s = SaveS(path);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << "'" << path << "': " << s;
    RestoreShardResponse restored;
    s = Restore("s", path, &restored);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << "'" << path << "': " << s;
  }
  EXPECT_TRUE(Outside().empty());
  EXPECT_FALSE(Env::Default()->FileExists(JoinPath(root_, "job")));
  EXPECT_FALSE(Env::Default()->FileExists(JoinPath(dir_, "x.shard")));
  ShardOutside();
  RestoreShardResponse restored;
  absl::Status s = Restore("s", "../outside/theirs.shard", &restored);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_TRUE(absl::StrContains(s.message(), "../outside/theirs.shard")) << s;
}

TEST_F(ConfinedPsServiceTest, SymbolicLinksInsideTheRootAreNotFollowed) {
  // A directory link and a file link inside the root, both pointing out.
  ASSERT_EQ(::symlink(outside_.c_str(), JoinPath(root_, "link").c_str()), 0);
  ASSERT_EQ(::symlink(JoinPath(outside_, "target.shard").c_str(), JoinPath(root_, "file.shard").c_str()), 0);
  for (const std::string& path : {std::string("link/x.shard"), std::string("link/deeper/x.shard"),
                                  std::string("file.shard")}) {
    absl::Status s = SaveS(path);
    EXPECT_EQ(s.code(), absl::StatusCode::kPermissionDenied) << path << ": " << s;
    EXPECT_TRUE(absl::StrContains(s.message(), "symbolic link")) << s;
  }
  EXPECT_TRUE(Outside().empty()) << "a save went through a link";

  // Nor is a shard read through one.
  ShardOutside();
  ASSERT_EQ(::symlink(JoinPath(outside_, "theirs.shard").c_str(), JoinPath(root_, "theirs.shard").c_str()), 0);
  for (const std::string& path : {std::string("link/theirs.shard"), std::string("theirs.shard")}) {
    RestoreShardResponse restored;
    absl::Status s = Restore("s", path, &restored);
    EXPECT_EQ(s.code(), absl::StatusCode::kPermissionDenied) << path << ": " << s;
  }
  EXPECT_EQ(Run("s", read_, "w").data<float>()[0], 1.0f);  // not restored
}

// The handler on its own: calls after Shutdown are UNAVAILABLE.
TEST(PsHandlerTest, RejectsCallsAfterShutdown) {
  worker::WorkerOptions wo;
  wo.job = "ps";
  worker::Worker w(wo);
  PsHandler handler(&w, PsHandlerOptions());
  handler.Shutdown();
  SaveShardRequest req;
  req.set_session_handle("s");
  req.set_path("/tmp/never.shard");
  SaveShardResponse resp;
  absl::Status s = WaitFor([&](StatusCallback d) { handler.SaveShardAsync(&req, &resp, d); });
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable) << s;
}

}  // namespace
}  // namespace ps
}  // namespace weft
