// Real daemons over mTLS, attacked as a hostile client would: no
// certificate, a certificate from another CA, a user's certificate against
// the data plane, a task's certificate doing the master's work, tokens
// against other users' jobs. Each attack is refused with the code and
// message that say what was wrong, the daemons keep serving, and a job
// running beside the attacks finishes as it would alone.
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "client/grpc_client_auth.h"
#include "client/grpc_master_client.h"
#include "client/subprocess.h"
#include "common/grpc_security.h"
#include "common/grpc_util.h"
#include "common/tls_socket.h"
#include "gtest/gtest.h"
#include "job/job_spec.h"
#include "proto/collective_service.grpc.pb.h"
#include "proto/master_service.grpc.pb.h"
#include "proto/ps_service.grpc.pb.h"
#include "proto/worker_service.grpc.pb.h"
#include "runtime/data/test_files.h"
#include "tests/test_cluster.h"
#include "tests/test_tls.h"

namespace weft {
namespace {

using data::testing::TempPath;
using data::testing::WriteFile;

// Far beyond what a job here takes on a healthy run: a bound on a hang.
constexpr absl::Duration kJobDeadline = absl::Seconds(120);

constexpr char kAliceToken[] = "alice-0123456789abcdef0123456789";
constexpr char kBobToken[] = "bob-0123456789abcdef0123456789ab";

using testing::WeftBinary;

// Three separable classes of 12-pixel images (as in cluster_test).
std::string WriteData(const std::string& name, int n) { return testing::WriteThreeClassData(TempPath(name), n); }

JobSpec Job(const std::string& data, int epochs) {
  auto job = ParseJob(absl::StrCat(R"(name: "secure-job"
      model { input_shape: [12] num_classes: 3 layer { dense { units: 16 activation: RELU } } layer { dense { units: 3 } } }
      dataset { dir: ")", data, R"(" } optimizer { sgd { learning_rate: 0.1 } } batch_size: 8 seed: 2 epochs: )", epochs,
                                   R"( strategy { kind: PARAMETER_SERVER sync: true })"),
                      "test");
  EXPECT_TRUE(job.ok()) << job.status();
  return *job;
}

class SecurityTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    daemons_ = new std::vector<std::unique_ptr<testing::TestDaemon>>();
    auto tls = testing::TestTls::Create(TempPath("tls"));
    ASSERT_TRUE(tls.ok()) << tls.status();
    tls_ = new testing::TestTls(*std::move(tls));
    auto other = testing::TestTls::Create(TempPath("other-ca"));
    ASSERT_TRUE(other.ok()) << other.status();
    other_ca_ = new testing::TestTls(*std::move(other));
    tokens_ = TempPath("tokens");
    WriteFile(tokens_, absl::StrCat(kAliceToken, " alice user\n", kBobToken, " bob user\n"));
    ::chmod(tokens_.c_str(), 0600);

    testing::TestDaemon* ps = Add("ps-0", {"ps", "--task=ps:0"});
    testing::TestDaemon* w0 = Add("worker-0", {"worker", "--task=worker:0"});
    testing::TestDaemon* w1 = Add("worker-1", {"worker", "--task=worker:1"});
    for (auto& d : *daemons_) ASSERT_TRUE(d->Launch().ok());
    for (auto& d : *daemons_) {
      absl::Status s = d->AwaitPort();
      ASSERT_TRUE(s.ok()) << s;
    }
    const std::string cluster = absl::StrCat("worker=", w0->address(), ",", w1->address(), ";ps=", ps->address());
    worker0_ = w0->address();
    ps0_ = ps->address();
    testing::TestDaemon* master = Add("master", {"master", "--cluster=" + cluster, "--auth_tokens_file=" + tokens_});
    absl::Status s = master->Start();
    ASSERT_TRUE(s.ok()) << s;
    master_ = master->address();
    auto admin = MasterClient::Create(master_, tls_->ClientOptions("root", Role::kAdmin));
    std::vector<testing::TestDaemon*> all;
    for (auto& d : *daemons_) all.push_back(d.get());
    ASSERT_TRUE(testing::WaitForCluster(admin.get(), 3, all));
  }

  static void TearDownTestSuite() {
    for (auto& d : *daemons_) testing::ExpectStopsOnSigterm(d.get());
    delete daemons_;
    delete tls_;
    delete other_ca_;
  }

  // A daemon (not yet started) with its identity's certificate, datasets
  // and checkpoints confined to the test's own directory.
  static testing::TestDaemon* Add(const std::string& name, std::vector<std::string> args) {
    for (const std::string& flag : tls_->DaemonFlags(testing::DaemonIdentity(name))) args.push_back(flag);
    args.push_back("--data_root=" + ::testing::TempDir());
    args.push_back("--checkpoint_root=" + ::testing::TempDir());
    daemons_->push_back(std::make_unique<testing::TestDaemon>(name, std::move(args), TempPath(name + ".log")));
    return daemons_->back().get();
  }

  // Channel credentials of a daemon identity (a task's or the master's)
  // issued by `ca`, verifying the real servers against the cluster CA.
  // Plain gRPC SSL credentials: weft's own client would refuse to present a
  // certificate of another CA.
  static std::shared_ptr<grpc::ChannelCredentials> AsDaemon(testing::TestTls* ca, const std::string& identity) {
    return ca->DaemonCredentials(identity, tls_->ca());
  }
  static std::shared_ptr<grpc::ChannelCredentials> AsUser(const std::string& user) {
    auto files = tls_->User(user);
    EXPECT_TRUE(files.ok()) << files.status();
    ClientCredentialFiles c;
    c.ca = tls_->ca();
    c.cert = files->first;
    c.key = files->second;
    return *ClientChannelCredentials(c);
  }
  static std::shared_ptr<grpc::ChannelCredentials> WithToken(const std::string& token) {
    const std::string path = TempPath(absl::StrCat("token-", token.substr(0, 3)));
    WriteFile(path, token);
    ::chmod(path.c_str(), 0600);
    ClientCredentialFiles c;
    c.ca = tls_->ca();
    c.token_file = path;
    auto creds = ClientChannelCredentials(c);
    EXPECT_TRUE(creds.ok()) << creds.status();
    return *creds;
  }
  static std::shared_ptr<grpc::ChannelCredentials> CaOnly() {
    TlsFiles files;
    files.ca = tls_->ca();
    return (*TransportSecurity::ForClient(files))->ChannelCredentials();
  }

  static grpc::Status GetStatus(const std::string& address, std::shared_ptr<grpc::ChannelCredentials> creds) {
    auto stub = WorkerService::NewStub(NewChannel(address, std::move(creds)));
    grpc::ClientContext ctx;
    SetDeadline(&ctx, absl::Seconds(10));
    GetStatusRequest req;
    GetStatusResponse resp;
    return stub->GetStatus(&ctx, req, &resp);
  }

  static std::unique_ptr<MasterClient> Master(std::shared_ptr<grpc::ChannelCredentials> creds) {
    MasterClientOptions o;
    o.credentials = std::move(creds);
    return MasterClient::Create(master_, o);
  }

  static void ExpectRefused(const grpc::Status& s, grpc::StatusCode code, const std::string& says) {
    EXPECT_EQ(s.error_code(), code) << s.error_message();
    EXPECT_TRUE(absl::StrContains(s.error_message(), says)) << s.error_message();
  }
  static void ExpectRefused(const absl::Status& s, absl::StatusCode code, const std::string& says) {
    EXPECT_EQ(s.code(), code) << s;
    EXPECT_TRUE(absl::StrContains(s.message(), says)) << s;
  }

  static testing::TestTls* tls_;
  static testing::TestTls* other_ca_;
  static std::string tokens_, worker0_, ps0_, master_;
  static std::vector<std::unique_ptr<testing::TestDaemon>>* daemons_;
};

testing::TestTls* SecurityTest::tls_ = nullptr;
testing::TestTls* SecurityTest::other_ca_ = nullptr;
std::string SecurityTest::tokens_, SecurityTest::worker0_, SecurityTest::ps0_, SecurityTest::master_;
std::vector<std::unique_ptr<testing::TestDaemon>>* SecurityTest::daemons_ = nullptr;

TEST_F(SecurityTest, TheDataPlaneAdmitsOnlyCertificatesOfTheCluster) {
  // Plaintext, TLS without a client certificate, and a certificate from
  // another CA never get past the handshake.
  EXPECT_EQ(GetStatus(worker0_, grpc::InsecureChannelCredentials()).error_code(), grpc::StatusCode::UNAVAILABLE);
  EXPECT_EQ(GetStatus(worker0_, CaOnly()).error_code(), grpc::StatusCode::UNAVAILABLE);
  EXPECT_EQ(GetStatus(worker0_, AsDaemon(other_ca_, "master")).error_code(), grpc::StatusCode::UNAVAILABLE);
  // A user's certificate is valid, but the data plane is not for users.
  ExpectRefused(GetStatus(worker0_, AsUser("alice")), grpc::StatusCode::PERMISSION_DENIED,
                "serves only the cluster's master and tasks");
  // A peer task may ask a task's status; the master's certificate too.
  EXPECT_TRUE(GetStatus(worker0_, AsDaemon(tls_, "/job:worker/task:1")).ok());
  EXPECT_TRUE(GetStatus(ps0_, AsDaemon(tls_, "master")).ok());
}

TEST_F(SecurityTest, OnlyTheMasterRegistersRunsAbortsAndCheckpoints) {
  auto peer = AsDaemon(tls_, "/job:worker/task:1");
  auto worker = WorkerService::NewStub(NewChannel(ps0_, peer));
  {
    // The incarnation takeover: a graph under a new master incarnation,
    // with a cluster that would send the ps's pulls to the attacker.
    grpc::ClientContext ctx;
    SetDeadline(&ctx, absl::Seconds(10));
    RegisterGraphRequest req;
    req.set_session_handle("job/attack");
    req.set_master_incarnation(42);
    JobDef* job = req.mutable_cluster()->add_job();
    job->set_name("ps");
    (*job->mutable_tasks())[0] = ps0_;
    job = req.mutable_cluster()->add_job();
    job->set_name("worker");
    (*job->mutable_tasks())[0] = "127.0.0.1:1";
    RegisterGraphResponse resp;
    ExpectRefused(worker->RegisterGraph(&ctx, req, &resp), grpc::StatusCode::PERMISSION_DENIED,
                  "may be called only by the master");
  }
  {
    grpc::ClientContext ctx;
    SetDeadline(&ctx, absl::Seconds(10));
    AbortStepRequest req;
    req.set_step_id(1);
    AbortStepResponse resp;
    ExpectRefused(worker->AbortStep(&ctx, req, &resp), grpc::StatusCode::PERMISSION_DENIED,
                  "task /job:worker/task:1 (certificate) may not");
  }
  auto ps = ParameterServer::NewStub(NewChannel(ps0_, peer));
  {
    grpc::ClientContext ctx;
    SetDeadline(&ctx, absl::Seconds(10));
    SaveShardRequest req;
    req.set_session_handle("job/attack");
    req.set_path(TempPath("stolen/shard"));
    SaveShardResponse resp;
    ExpectRefused(ps->SaveShard(&ctx, req, &resp), grpc::StatusCode::PERMISSION_DENIED, "ParameterServer.SaveShard");
    struct stat st;
    EXPECT_NE(stat(TempPath("stolen").c_str(), &st), 0) << "SaveShard created a directory for a refused caller";
  }
  {
    grpc::ClientContext ctx;
    SetDeadline(&ctx, absl::Seconds(10));
    ListShardsRequest req;
    ListShardsResponse resp;
    ExpectRefused(ps->ListShards(&ctx, req, &resp), grpc::StatusCode::PERMISSION_DENIED, "ParameterServer.ListShards");
  }
}

// What a task's steps wait on names its peers and ops: the master's alone
// to ask.
TEST_F(SecurityTest, OnlyTheMasterAsksWhatATasksStepsWaitOn) {
  auto ask = [](std::shared_ptr<grpc::ChannelCredentials> creds) {
    auto stub = WorkerService::NewStub(NewChannel(worker0_, std::move(creds)));
    grpc::ClientContext ctx;
    SetDeadline(&ctx, absl::Seconds(10));
    GetStepStateRequest req;
    GetStepStateResponse resp;
    return stub->GetStepState(&ctx, req, &resp);
  };
  ExpectRefused(ask(AsDaemon(tls_, "/job:worker/task:1")), grpc::StatusCode::PERMISSION_DENIED,
                "WorkerService.GetStepState");
  ExpectRefused(ask(AsUser("alice")), grpc::StatusCode::PERMISSION_DENIED, "WorkerService.GetStepState");
  EXPECT_TRUE(ask(AsDaemon(tls_, "master")).ok());
}

// Clearing a task's variable containers is the master's order alone; a user
// reaches it through MasterService.Reset, scoped to their own containers.
TEST_F(SecurityTest, OnlyTheMasterClearsATasksContainers) {
  auto reset = [](const std::string& task, std::shared_ptr<grpc::ChannelCredentials> creds, bool all) {
    auto stub = WorkerService::NewStub(NewChannel(task, std::move(creds)));
    grpc::ClientContext ctx;
    SetDeadline(&ctx, absl::Seconds(10));
    ResetContainersRequest req;
    if (all) {
      req.set_all(true);
    } else {
      req.add_container("alice/c");
    }
    ResetContainersResponse resp;
    return stub->ResetContainers(&ctx, req, &resp);
  };
  ExpectRefused(reset(ps0_, AsDaemon(tls_, "/job:worker/task:1"), true), grpc::StatusCode::PERMISSION_DENIED,
                "WorkerService.ResetContainers may be called only by the master");
  ExpectRefused(reset(worker0_, AsUser("alice"), false), grpc::StatusCode::PERMISSION_DENIED,
                "WorkerService.ResetContainers");
  EXPECT_TRUE(reset(worker0_, AsDaemon(tls_, "master"), false).ok());
}

TEST_F(SecurityTest, UsersResetOnlyTheirOwnContainersAndOnlyAdminsEverything) {
  auto bob = Master(WithToken(kBobToken));
  ExpectRefused(bob->Reset(), absl::StatusCode::kPermissionDenied, "MasterService.Reset needs the admin role");
  EXPECT_TRUE(bob->Reset({"bobs-variables"}).ok());
  ExpectRefused(bob->Reset({"alice/c"}), absl::StatusCode::kInvalidArgument, "[A-Za-z0-9_.-]");
  auto task = Master(AsDaemon(tls_, "/job:worker/task:0"));
  ExpectRefused(task->Reset({"c"}), absl::StatusCode::kPermissionDenied, "is not one");
}

TEST_F(SecurityTest, EvenTheMasterWritesShardsOnlyUnderTheCheckpointRoot) {
  auto ps = ParameterServer::NewStub(NewChannel(ps0_, AsDaemon(tls_, "master")));
  for (const std::string& path : {TempPath("../escaped.shard"), std::string("/etc/weft.shard"),
                                  std::string("ckpt/../../escaped.shard")}) {
    grpc::ClientContext ctx;
    SetDeadline(&ctx, absl::Seconds(10));
    SaveShardRequest req;
    req.set_session_handle("job/none");
    req.set_path(path);
    SaveShardResponse resp;
    ExpectRefused(ps->SaveShard(&ctx, req, &resp), grpc::StatusCode::INVALID_ARGUMENT, path);
  }
  struct stat st;
  EXPECT_NE(stat("/etc/weft.shard", &st), 0);
  EXPECT_NE(stat(TempPath("../escaped.shard").c_str(), &st), 0);
}

TEST_F(SecurityTest, AJobReadsDataOnlyUnderTheDataRoot) {
  auto alice = Master(WithToken(kAliceToken));
  JobSpec job = Job("/etc", 1);
  auto id = alice->SubmitJob(job);
  if (!id.ok()) {
    ExpectRefused(id.status(), absl::StatusCode::kPermissionDenied, "outside the data root");
    return;
  }
  JobStatus last = testing::WatchJobToEnd(alice.get(), *id, kJobDeadline);
  EXPECT_EQ(last.state(), FAILED) << last.DebugString();
  EXPECT_TRUE(absl::StrContains(last.error(), "outside the data root")) << last.error();
}

TEST_F(SecurityTest, CollectiveStreamsAdmitOnlyClusterTasks) {
  auto stub = CollectiveService::NewStub(NewChannel(worker0_, AsUser("alice")));
  grpc::ClientContext ctx;
  SetDeadline(&ctx, absl::Seconds(10));
  auto stream = stub->Exchange(&ctx);
  ChunkHeader forged;
  forged.set_group_key(1);
  stream->Write(forged);  // may fail once the server has refused
  stream->WritesDone();
  ExchangeResponse ignored;
  while (stream->Read(&ignored)) {
  }
  ExpectRefused(stream->Finish(), grpc::StatusCode::PERMISSION_DENIED, "CollectiveService.Exchange");
}

// A shared-memory ring is offered only by a cluster task, and only from
// this host.
TEST_F(SecurityTest, ShmOffersAdmitOnlyClusterTasksOfThisHost) {
  AttachShmRequest offer;
  offer.set_host_id("another-boot/net:1/pid:1");
  offer.set_pid(1);
  offer.set_memfd(3);
  offer.set_capacity(1 << 20);
  offer.set_nonce(std::string(16, 'x'));
  auto offer_as = [&](std::shared_ptr<grpc::ChannelCredentials> creds) {
    auto stub = CollectiveService::NewStub(NewChannel(worker0_, std::move(creds)));
    grpc::ClientContext ctx;
    SetDeadline(&ctx, absl::Seconds(10));
    AttachShmResponse resp;
    return stub->AttachShm(&ctx, offer, &resp);
  };
  ExpectRefused(offer_as(AsUser("alice")), grpc::StatusCode::PERMISSION_DENIED, "CollectiveService.AttachShm");
  ExpectRefused(offer_as(AsDaemon(tls_, "/job:worker/task:1")), grpc::StatusCode::FAILED_PRECONDITION,
                "another host");
}

// The collective socket: its port only for tasks, and its handshake only
// for cluster members; a task reaching it sees the worker's own name.
TEST_F(SecurityTest, CollectiveSocketsAdmitOnlyClusterTasks) {
  auto endpoint_as = [&](std::shared_ptr<grpc::ChannelCredentials> creds, SocketEndpointResponse* resp) {
    auto stub = CollectiveService::NewStub(NewChannel(worker0_, std::move(creds)));
    grpc::ClientContext ctx;
    SetDeadline(&ctx, absl::Seconds(10));
    return stub->SocketEndpoint(&ctx, SocketEndpointRequest(), resp);
  };
  SocketEndpointResponse resp;
  ExpectRefused(endpoint_as(AsUser("alice"), &resp), grpc::StatusCode::PERMISSION_DENIED,
                "CollectiveService.SocketEndpoint");
  grpc::Status s = endpoint_as(AsDaemon(tls_, "/job:worker/task:1"), &resp);
  ASSERT_TRUE(s.ok()) << s.error_message();
  ASSERT_GT(resp.port(), 0);
  auto context_for = [&](const std::string& name, Role role) -> std::shared_ptr<const TlsSocketContext> {
    auto files = tls_->Issue(name, role);
    EXPECT_TRUE(files.ok()) << files.status();
    TlsFiles f;
    f.ca = tls_->ca();
    f.cert = files->first;
    f.key = files->second;
    auto ctx = TlsSocketContext::FromFiles(f);
    EXPECT_TRUE(ctx.ok()) << ctx.status();
    return ctx.ok() ? *ctx : nullptr;
  };
  // A task that expects another task there refuses to go on.
  auto wrong = TlsSocket::Connect(context_for("/job:worker/task:1", Role::kCluster).get(), "127.0.0.1", resp.port(),
                                  "/job:ps/task:0", absl::Seconds(10));
  ExpectRefused(wrong.status(), absl::StatusCode::kUnauthenticated, "/job:worker/task:0");
  // A user's certificate is refused by the worker: the connection ends.
  auto user = TlsSocket::Connect(context_for("alice", Role::kUser).get(), "127.0.0.1", resp.port(),
                                 "/job:worker/task:0", absl::Seconds(10));
  if (user.ok()) {
    char byte;
    EXPECT_FALSE((*user)->ReadFull(&byte, 1).ok()) << "the worker kept a user's connection";
  }
  // Plaintext gets nowhere either.
  auto plain = TlsSocket::Connect(nullptr, "127.0.0.1", resp.port(), "", absl::Seconds(10));
  if (plain.ok()) {
    const char junk[64] = {};
    (void)(*plain)->WriteAll({absl::string_view(junk, sizeof junk)});
    char byte;
    EXPECT_FALSE((*plain)->ReadFull(&byte, 1).ok()) << "the worker kept a plaintext connection";
  }
  // A task's own certificate gets through.
  auto task = TlsSocket::Connect(context_for("/job:worker/task:1", Role::kCluster).get(), "127.0.0.1", resp.port(),
                                 "/job:worker/task:0", absl::Seconds(10));
  ASSERT_TRUE(task.ok()) << task.status();
  EXPECT_EQ((*task)->peer(), "/job:worker/task:0");
}

// RegisterWorker: only a worker task's certificate, for itself, at an
// address where the master finds that task; the cluster is unchanged by
// every refusal, and the master keeps serving.
TEST_F(SecurityTest, OnlyAWorkerRegistersAndOnlyItselfAtItsOwnAddress) {
  auto join = [](std::shared_ptr<grpc::ChannelCredentials> creds, const std::string& task,
                 const std::string& address) {
    auto stub = MasterService::NewStub(NewChannel(master_, std::move(creds)));
    grpc::ClientContext ctx;
    SetDeadline(&ctx, absl::Seconds(30));
    RegisterWorkerRequest req;
    req.set_task(task);
    req.set_address(address);
    RegisterWorkerResponse resp;
    return stub->RegisterWorker(&ctx, req, &resp);
  };
  const std::string w5 = "/job:worker/task:5";
  ExpectRefused(join(AsUser("carol"), w5, worker0_), grpc::StatusCode::PERMISSION_DENIED,
                "serves only the cluster's master and tasks");
  ExpectRefused(join(WithToken(kBobToken), w5, worker0_), grpc::StatusCode::PERMISSION_DENIED,
                "user bob (token) may not call it");
  ExpectRefused(join(CaOnly(), w5, worker0_), grpc::StatusCode::UNAUTHENTICATED, "");
  // A task registers itself, never another.
  ExpectRefused(join(AsDaemon(tls_, w5), "/job:worker/task:6", worker0_), grpc::StatusCode::PERMISSION_DENIED,
                "task /job:worker/task:5 (certificate) may not register '/job:worker/task:6'");
  // Only workers join; the master never does.
  ExpectRefused(join(AsDaemon(tls_, "/job:ps/task:3"), "/job:ps/task:3", ps0_), grpc::StatusCode::INVALID_ARGUMENT,
                "only workers join a running cluster");
  ExpectRefused(join(AsDaemon(tls_, "master"), "master", worker0_), grpc::StatusCode::INVALID_ARGUMENT,
                "only workers join");
  // Addresses are checked before anything is dialled.
  for (const std::string& bad : {std::string("127.0.0.1"), std::string("127.0.0.1:0"), std::string("h:70000"),
                                 std::string(":80"), std::string("evil host:80"), std::string("a/b:80"),
                                 std::string(5000, 'a') + ":80", std::string("[zz]:80")}) {
    ExpectRefused(join(AsDaemon(tls_, w5), w5, bad), grpc::StatusCode::INVALID_ARGUMENT, "is not host:port");
  }
  // The address must answer as the task: here worker 0 does.
  ExpectRefused(join(AsDaemon(tls_, w5), w5, worker0_), grpc::StatusCode::FAILED_PRECONDITION,
                "the task there is '/job:worker/task:0'");
  // Nothing listens there.
  ExpectRefused(join(AsDaemon(tls_, w5), w5, "127.0.0.1:1"), grpc::StatusCode::UNAVAILABLE,
                "the master cannot reach it at 127.0.0.1:1");
  // A task of the master's --cluster says again where it is: nothing changes.
  EXPECT_TRUE(join(AsDaemon(tls_, "/job:worker/task:0"), "/job:worker/task:0", worker0_).ok());

  auto admin = MasterClient::Create(master_, tls_->ClientOptions("root", Role::kAdmin));
  auto devices = admin->ListDevices();
  ASSERT_TRUE(devices.ok()) << devices.status();
  for (const DeviceAttributes& d : *devices) EXPECT_FALSE(absl::StrContains(d.name(), "task:5")) << d.name();
}

TEST_F(SecurityTest, UsersSeeAndControlOnlyTheirOwnJobs) {
  auto nobody = Master(CaOnly());
  ExpectRefused(nobody->ListJobs().status(), absl::StatusCode::kUnauthenticated, "needs credentials");
  auto forger = Master(WithToken("forged-0123456789abcdef0123456789"));
  ExpectRefused(forger->ListJobs().status(), absl::StatusCode::kUnauthenticated, "not in the master's token file");

  auto alice = Master(WithToken(kAliceToken));
  auto bob = Master(WithToken(kBobToken));
  auto root = MasterClient::Create(master_, tls_->ClientOptions("root", Role::kAdmin));
  // Alice's job runs while Bob attacks it.
  auto id = alice->SubmitJob(Job(WriteData("data", 480), 3));
  ASSERT_TRUE(id.ok()) << id.status();
  EXPECT_TRUE(absl::StartsWith(*id, "job-")) << *id;
  EXPECT_GE(id->size(), 20u) << "a job id must not be guessable: " << *id;

  ExpectRefused(bob->GetJob(*id).status(), absl::StatusCode::kPermissionDenied, "belongs to user alice");
  ExpectRefused(bob->CancelJob(*id), absl::StatusCode::kPermissionDenied, "user bob (token) may not touch it");
  ExpectRefused(bob->ScaleJob(*id, 2), absl::StatusCode::kPermissionDenied, "user bob (token) may not touch it");
  // Its owner may ask, but only an elastic job (still running) changes size.
  ExpectRefused(alice->ScaleJob(*id, 2), absl::StatusCode::kFailedPrecondition, "");
  ExpectRefused(bob->WatchJob(*id, [](const JobStatus&) {}), absl::StatusCode::kPermissionDenied,
                "belongs to user alice");
  ExpectRefused(bob->Reset(), absl::StatusCode::kPermissionDenied, "needs the admin role");
  // A trace shows the job's graph and timing: its owner's (or an admin's).
  ExpectRefused(bob->TraceJob(*id, 2).status(), absl::StatusCode::kPermissionDenied, "belongs to user alice");
  ExpectRefused(alice->TraceJob(*id, 0).status(), absl::StatusCode::kInvalidArgument, "steps must be 1..100");
  ExpectRefused(alice->TraceJob(*id, 1000000).status(), absl::StatusCode::kInvalidArgument, "steps must be 1..100");
  ExpectRefused(alice->TraceJob("job-0-0000000000000000", 1).status(), absl::StatusCode::kNotFound, "");
  auto bobs = bob->ListJobs();
  ASSERT_TRUE(bobs.ok()) << bobs.status();
  EXPECT_TRUE(bobs->empty()) << "bob sees another user's job";
  // A user certificate is as good as a token; its name is its CN.
  auto carol = Master(AsUser("carol"));
  ExpectRefused(carol->CancelJob(*id), absl::StatusCode::kPermissionDenied, "user carol (certificate)");
  // A task's certificate is not a user.
  auto task = Master(AsDaemon(tls_, "/job:worker/task:0"));
  ExpectRefused(task->ListJobs().status(), absl::StatusCode::kPermissionDenied, "is not one");
  ExpectRefused(task->ScaleJob(*id, 2), absl::StatusCode::kPermissionDenied, "is not one");

  // The owner and an admin see it; it finishes as it would undisturbed.
  auto seen = root->GetJob(*id);
  ASSERT_TRUE(seen.ok()) << seen.status();
  EXPECT_EQ(seen->owner(), "alice");
  JobStatus last = testing::WatchJobToEnd(alice.get(), *id, kJobDeadline);
  EXPECT_EQ(last.state(), SUCCEEDED) << last.DebugString();
  EXPECT_GT(last.test_accuracy(), 0.9) << last.DebugString();  // chance is 1/3
  auto alices = alice->ListJobs();
  ASSERT_TRUE(alices.ok());
  bool listed = false;
  for (const JobStatus& j : *alices) {
    EXPECT_EQ(j.owner(), "alice") << j.DebugString();
    listed = listed || j.job_id() == *id;
  }
  EXPECT_TRUE(listed) << "alice's ListJobs lacks her job " << *id;
  // An admin sees every user's jobs.
  auto all = root->ListJobs();
  ASSERT_TRUE(all.ok());
  EXPECT_GE(all->size(), alices->size());
}

TEST_F(SecurityTest, DaemonsRefuseToStartWithoutCertificates) {
  // No certificate and no --insecure: the daemon says what to do and exits 1.
  Subprocess p;
  const std::string log = TempPath("no-certs.log");
  ASSERT_TRUE(p.Start({WeftBinary(), "worker", "--task=worker:0", "--cluster=worker=127.0.0.1:1"}, log).ok());
  ASSERT_TRUE(p.WaitFor(absl::Seconds(30))) << "a worker without certificates still ran after 30 s";
  EXPECT_TRUE(WIFEXITED(p.exit_status()) && WEXITSTATUS(p.exit_status()) == 1) << p.exit_status();
  std::ifstream in(log);
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_TRUE(absl::StrContains(text, "pass --ca, --cert and --key")) << text;
  // A certificate of another identity is refused too.
  Subprocess q;
  std::vector<std::string> args = {WeftBinary(), "worker", "--task=worker:0", "--cluster=worker=127.0.0.1:1"};
  for (const std::string& f : tls_->DaemonFlags("/job:worker/task:1")) args.push_back(f);
  ASSERT_TRUE(q.Start(args, TempPath("wrong-identity.log")).ok());
  ASSERT_TRUE(q.WaitFor(absl::Seconds(30))) << "a worker with another task's certificate still ran after 30 s";
  EXPECT_TRUE(WIFEXITED(q.exit_status()) && WEXITSTATUS(q.exit_status()) == 1) << q.exit_status();
}

}  // namespace
}  // namespace weft
