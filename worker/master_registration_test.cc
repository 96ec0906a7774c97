// MasterRegistration against a fake master served by a real gRPC server on
// loopback, called through the real stub.
#include "worker/master_registration.h"

#include <algorithm>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "common/logging.h"
#include "common/test_util.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "proto/master_service.grpc.pb.h"
#include "spdlog/sinks/ostream_sink.h"

namespace weft {
namespace worker {
namespace {

using ::weft::testing::kWaitTimeout;
using ::weft::testing::WaitUntil;

constexpr char kTask[] = "/job:worker/task:3";
constexpr char kAddress[] = "worker-3.example:2222";

// Serves RegisterWorker only: records every request and answers `answer`
// (OK unless told otherwise). Hold() makes calls wait until Release().
class FakeMaster final : public MasterService::Service {
 public:
  grpc::Status RegisterWorker(grpc::ServerContext*, const RegisterWorkerRequest* request,
                              RegisterWorkerResponse* response) override {
    absl::MutexLock lock(&mu_);
    requests_.push_back(*request);
    mu_.Await(absl::Condition(+[](bool* held) { return !*held; }, &held_));
    if (!answer_.ok()) return answer_;
    response->set_added(requests_.size() == 1);
    response->set_tasks(4);
    return grpc::Status::OK;
  }

  void Answer(grpc::Status s) {
    absl::MutexLock lock(&mu_);
    answer_ = std::move(s);
  }
  void Hold() {
    absl::MutexLock lock(&mu_);
    held_ = true;
  }
  void Release() {
    absl::MutexLock lock(&mu_);
    held_ = false;
  }
  std::vector<RegisterWorkerRequest> requests() const {
    absl::MutexLock lock(&mu_);
    return requests_;
  }
  size_t calls() const {
    absl::MutexLock lock(&mu_);
    return requests_.size();
  }

 private:
  mutable absl::Mutex mu_;
  std::vector<RegisterWorkerRequest> requests_ ABSL_GUARDED_BY(mu_);
  grpc::Status answer_ ABSL_GUARDED_BY(mu_);
  bool held_ ABSL_GUARDED_BY(mu_) = false;
};

// A FakeMaster served in plaintext on 127.0.0.1.
class FakeMasterServer {
 public:
  // `port` 0: any free port. Null when the port cannot be bound.
  static std::unique_ptr<FakeMasterServer> Start(int port = 0) {
    auto s = std::make_unique<FakeMasterServer>();
    grpc::ServerBuilder builder;
    builder.AddListeningPort(absl::StrCat("127.0.0.1:", port), grpc::InsecureServerCredentials(), &s->port_);
    builder.RegisterService(&s->master_);
    s->server_ = builder.BuildAndStart();
    if (s->server_ == nullptr || s->port_ == 0) return nullptr;
    return s;
  }
  ~FakeMasterServer() {
    master_.Release();  // a held call must end for Shutdown to return
    server_->Shutdown();
  }

  FakeMaster& master() { return master_; }
  int port() const { return port_; }
  std::string address() const { return absl::StrCat("127.0.0.1:", port_); }

 private:
  FakeMaster master_;
  std::unique_ptr<grpc::Server> server_;
  int port_ = 0;
};

MasterRegistrationOptions Options(const std::string& master, absl::Duration every) {
  MasterRegistrationOptions o;
  o.master = master;
  o.task = kTask;
  o.address = kAddress;
  o.every = every;
  o.timeout = absl::Seconds(10);
  return o;
}

TEST(MasterRegistrationTest, FirstCallCarriesTheTaskAndItsAddress) {
  auto server = FakeMasterServer::Start();
  ASSERT_NE(server, nullptr);
  // An hour: only the call made at once can arrive within the test.
  auto reg = MasterRegistration::Start(Options(server->address(), absl::Hours(1)));
  ASSERT_TRUE(WaitUntil(kWaitTimeout, "the first registration to succeed", [&] { return reg->successes() >= 1; }));
  const std::vector<RegisterWorkerRequest> requests = server->master().requests();
  ASSERT_EQ(requests.size(), 1u);
  EXPECT_EQ(requests[0].task(), kTask);
  EXPECT_EQ(requests[0].address(), kAddress);
  EXPECT_TRUE(reg->last_status().ok()) << reg->last_status();
  EXPECT_EQ(reg->attempts(), 1);
}

TEST(MasterRegistrationTest, RegistersAgainEveryPeriod) {
  auto server = FakeMasterServer::Start();
  ASSERT_NE(server, nullptr);
  auto reg = MasterRegistration::Start(Options(server->address(), absl::Milliseconds(50)));
  ASSERT_TRUE(WaitUntil(kWaitTimeout, "three registrations", [&] { return reg->successes() >= 3; }));
  for (const RegisterWorkerRequest& r : server->master().requests()) {
    EXPECT_EQ(r.task(), kTask);
    EXPECT_EQ(r.address(), kAddress);
  }
  EXPECT_GE(server->master().calls(), 3u);
}

TEST(MasterRegistrationTest, KeepsTryingThroughTheMastersErrorsThenSucceeds) {
  auto server = FakeMasterServer::Start();
  ASSERT_NE(server, nullptr);
  server->master().Answer(grpc::Status(grpc::StatusCode::PERMISSION_DENIED, "only worker tasks register"));
  auto reg = MasterRegistration::Start(Options(server->address(), absl::Milliseconds(50)));
  ASSERT_TRUE(WaitUntil(kWaitTimeout, "three refused registrations", [&] { return reg->attempts() >= 3; }));
  const absl::Status refused = reg->last_status();
  EXPECT_EQ(refused.code(), absl::StatusCode::kPermissionDenied) << refused;
  EXPECT_TRUE(absl::StrContains(refused.message(), "only worker tasks register")) << refused;
  EXPECT_TRUE(absl::StrContains(refused.message(), server->address())) << refused;  // names the master
  EXPECT_EQ(reg->successes(), 0);

  server->master().Answer(grpc::Status::OK);
  ASSERT_TRUE(WaitUntil(kWaitTimeout, "a registration once the master accepts", [&] { return reg->successes() >= 1; }));
  ASSERT_TRUE(WaitUntil(kWaitTimeout, "last_status to turn OK", [&] { return reg->last_status().ok(); }));
}

TEST(MasterRegistrationTest, RetriesUntilAMasterListens) {
  // A port that was free a moment ago and has no listener now.
  int port = 0;
  {
    auto reserved = FakeMasterServer::Start();
    ASSERT_NE(reserved, nullptr);
    port = reserved->port();
  }
  const std::string address = absl::StrCat("127.0.0.1:", port);
  auto reg = MasterRegistration::Start(Options(address, absl::Milliseconds(50)));
  ASSERT_TRUE(WaitUntil(kWaitTimeout, "two failed registrations", [&] { return reg->attempts() >= 2; }));
  EXPECT_EQ(reg->last_status().code(), absl::StatusCode::kUnavailable) << reg->last_status();
  EXPECT_EQ(reg->successes(), 0);

  auto server = FakeMasterServer::Start(port);
  ASSERT_NE(server, nullptr) << "port " << port << " was taken meanwhile";
  ASSERT_TRUE(WaitUntil(kWaitTimeout, "a registration once the master listens",
                        [&] { return reg->successes() >= 1; }));
  EXPECT_GE(server->master().calls(), 1u);
}

// Destroys `reg` on a thread of its own; true when that returns within
// `timeout`. On false the thread is left running (it owns what it uses).
bool DestroyWithin(std::unique_ptr<MasterRegistration> reg, absl::Duration timeout) {
  auto destroyed = std::make_shared<absl::Notification>();
  std::thread destroyer([reg = std::move(reg), destroyed]() mutable {
    reg.reset();
    destroyed->Notify();
  });
  if (!destroyed->WaitForNotificationWithTimeout(timeout)) {
    destroyer.detach();
    return false;
  }
  destroyer.join();
  return true;
}

// Well below the hour the thread would otherwise wait, well above a loaded
// machine's scheduling delay.
constexpr absl::Duration kPrompt = absl::Seconds(30);

TEST(MasterRegistrationTest, DestructionDoesNotWaitOutThePeriod) {
  auto server = FakeMasterServer::Start();
  ASSERT_NE(server, nullptr);
  auto reg = MasterRegistration::Start(Options(server->address(), absl::Hours(1)));
  ASSERT_TRUE(WaitUntil(kWaitTimeout, "the first registration", [&] { return reg->successes() >= 1; }));
  EXPECT_TRUE(DestroyWithin(std::move(reg), kPrompt)) << "the destructor waited for the next period";
}

TEST(MasterRegistrationTest, DestructionCancelsTheCallInFlight) {
  auto server = FakeMasterServer::Start();
  ASSERT_NE(server, nullptr);
  server->master().Hold();  // the master takes the call and never answers
  MasterRegistrationOptions o = Options(server->address(), absl::Hours(1));
  o.timeout = absl::Hours(1);
  auto reg = MasterRegistration::Start(o);
  ASSERT_TRUE(WaitUntil(kWaitTimeout, "the call to reach the master", [&] { return server->master().calls() >= 1; }));
  EXPECT_TRUE(DestroyWithin(std::move(reg), kPrompt)) << "the destructor waited for the call's deadline";
}

// Captures what the "worker" logger writes while it lives.
class LogCapture {
 public:
  LogCapture() : sink_(std::make_shared<spdlog::sinks::ostream_sink_mt>(out_)) {
    sink_->set_pattern("%l %v");
    Logger("worker")->sinks().push_back(sink_);
  }
  ~LogCapture() {
    auto& sinks = Logger("worker")->sinks();
    sinks.erase(std::remove(sinks.begin(), sinks.end(), sink_), sinks.end());
  }
  // Lines that contain `what`.
  int Count(absl::string_view what) {
    int n = 0;
    std::istringstream in(out_.str());
    for (std::string line; std::getline(in, line);) n += absl::StrContains(line, what) ? 1 : 0;
    return n;
  }

 private:
  std::ostringstream out_;
  std::shared_ptr<spdlog::sinks::ostream_sink_mt> sink_;
};

TEST(MasterRegistrationTest, LogsEachDistinctFailureOnceAndTheFirstSuccess) {
  auto server = FakeMasterServer::Start();
  ASSERT_NE(server, nullptr);
  LogCapture log;  // added before, removed after the registration's thread
  {
    server->master().Answer(grpc::Status(grpc::StatusCode::PERMISSION_DENIED, "refusal one"));
    auto reg = MasterRegistration::Start(Options(server->address(), absl::Milliseconds(20)));
    ASSERT_TRUE(WaitUntil(kWaitTimeout, "three refusals", [&] { return reg->attempts() >= 3; }));
    server->master().Answer(grpc::Status(grpc::StatusCode::FAILED_PRECONDITION, "refusal two"));
    const int64_t before = reg->attempts();
    ASSERT_TRUE(WaitUntil(kWaitTimeout, "three more refusals", [&] { return reg->attempts() >= before + 3; }));
    server->master().Answer(grpc::Status::OK);
    ASSERT_TRUE(WaitUntil(kWaitTimeout, "three registrations", [&] { return reg->successes() >= 3; }));
  }
  EXPECT_EQ(log.Count("refusal one"), 1);
  EXPECT_EQ(log.Count("refusal two"), 1);
  EXPECT_EQ(log.Count("cannot register"), 2);
  EXPECT_EQ(log.Count("registered with the master"), 1);
}

}  // namespace
}  // namespace worker
}  // namespace weft
