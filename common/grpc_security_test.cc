// TransportSecurity against a real in-process gRPC server: mutual TLS
// works end to end, a rotated certificate is picked up without a restart,
// and misconfigured files are refused before anything listens.
#include "common/grpc_security.h"

#include <cstdlib>
#include <string>

#include "absl/strings/match.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "common/certs.h"
#include "common/grpc_util.h"
#include "grpcpp/generic/generic_stub.h"
#include "grpcpp/health_check_service_interface.h"
#include "gtest/gtest.h"

namespace weft {
namespace {

std::string Dir(const std::string& name) { return std::string(std::getenv("TEST_TMPDIR")) + "/" + name; }

TlsFiles Issue(const std::string& dir, const std::string& name, Role role) {
  IssueOptions o;
  o.name = name;
  o.role = role;
  o.overwrite = true;
  if (role == Role::kCluster) o.hosts = {"127.0.0.1"};
  auto cert = IssueCertificate(dir, o);
  EXPECT_TRUE(cert.ok()) << cert.status();
  TlsFiles f;
  f.ca = dir + "/ca.crt";
  f.cert = *cert;
  f.key = dir + "/" + *CertFileBase(name) + ".key";
  f.refresh_seconds = 1;
  return f;
}

// Calls the health service; returns the status and the server's leaf
// certificate as the client saw it.
grpc::Status Check(const std::shared_ptr<grpc::Channel>& channel, std::string* server_pem) {
  grpc::GenericStub stub(channel);
  grpc::ClientContext ctx;
  SetDeadline(&ctx, absl::Seconds(10));
  grpc::Slice empty{std::string()};
  grpc::ByteBuffer request(&empty, 1), response;
  absl::Notification done;
  grpc::Status status;
  stub.UnaryCall(&ctx, "/grpc.health.v1.Health/Check", grpc::StubOptions(), &request, &response,
                 [&](grpc::Status s) {
                   status = s;
                   done.Notify();
                 });
  done.WaitForNotification();
  if (server_pem != nullptr && ctx.auth_context() != nullptr) {
    auto pems = ctx.auth_context()->FindPropertyValues(GRPC_X509_PEM_CERT_PROPERTY_NAME);
    if (!pems.empty()) server_pem->assign(pems[0].data(), pems[0].size());
  }
  return status;
}

struct Server {
  std::unique_ptr<grpc::Server> server;
  int port = 0;
};

Server Serve(const TransportSecurity& security) {
  grpc::EnableDefaultHealthCheckService(true);
  grpc::ServerBuilder builder;
  ConfigureServer(&builder);
  Server s;
  builder.AddListeningPort("127.0.0.1:0", security.ServerCredentials(true), &s.port);
  s.server = builder.BuildAndStart();
  return s;
}

TEST(GrpcSecurityTest, MutualTlsAndARotatedCertificateWithoutRestart) {
  const std::string dir = Dir("rotate");
  ASSERT_TRUE(CreateCa(dir, 2, true).ok());
  auto server_security = TransportSecurity::ForDaemon(Issue(dir, "/job:worker/task:0", Role::kCluster),
                                                      "/job:worker/task:0");
  ASSERT_TRUE(server_security.ok()) << server_security.status();
  EXPECT_EQ((*server_security)->identity(), "/job:worker/task:0");
  Server s = Serve(**server_security);
  ASSERT_NE(s.server, nullptr);
  auto client = TransportSecurity::ForDaemon(Issue(dir, "master", Role::kCluster), "master");
  ASSERT_TRUE(client.ok()) << client.status();
  const std::string target = "127.0.0.1:" + std::to_string(s.port);

  std::string first;
  ASSERT_TRUE(Check(NewChannel(target, (*client)->ChannelCredentials()), &first).ok());
  ASSERT_FALSE(first.empty());
  // A plaintext client does not get through.
  EXPECT_FALSE(Check(NewChannel(target), nullptr).ok());

  // Rotate: a new key and certificate for the same task, written in place.
  Issue(dir, "/job:worker/task:0", Role::kCluster);
  // The server re-reads its files (every second here): new connections
  // get the new certificate. Bounded wait.
  std::string now = first;
  const absl::Time deadline = absl::Now() + absl::Seconds(30);
  while (now == first && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(200));
    // A fresh channel each time: a new handshake.
    grpc::ChannelArguments args = ChannelArgs();
    args.SetInt("weft.test.nonce", static_cast<int>(absl::ToUnixMicros(absl::Now()) & 0x7fffffff));
    auto channel = grpc::CreateCustomChannel(target, (*client)->ChannelCredentials(), args);
    ASSERT_TRUE(Check(channel, &now).ok());
  }
  EXPECT_NE(now, first) << "the server still presents its old certificate after 30 s";
  s.server->Shutdown();
}

TEST(GrpcSecurityTest, RefusesMisconfiguredFilesNamingThem) {
  const std::string dir = Dir("misconfigured");
  ASSERT_TRUE(CreateCa(dir, 2, true).ok());
  TlsFiles worker = Issue(dir, "/job:worker/task:0", Role::kCluster);
  // The certificate of another identity than the daemon runs.
  auto other = TransportSecurity::ForDaemon(worker, "/job:worker/task:1");
  ASSERT_FALSE(other.ok());
  EXPECT_TRUE(absl::StrContains(other.status().message(), "is for /job:worker/task:0, not for /job:worker/task:1"))
      << other.status();
  // A user's certificate cannot run a daemon.
  TlsFiles user = Issue(dir, "alice", Role::kUser);
  auto as_user = TransportSecurity::ForDaemon(user, "");
  ASSERT_FALSE(as_user.ok());
  EXPECT_TRUE(absl::StrContains(as_user.status().message(), "needs one with O=weft:cluster")) << as_user.status();
  // No files at all: the message says how to make them, or --insecure.
  auto none = TransportSecurity::ForDaemon(TlsFiles(), "master");
  ASSERT_FALSE(none.ok());
  EXPECT_TRUE(absl::StrContains(none.status().message(), "weft certs init")) << none.status();
  // A client needs the CA to verify the master.
  EXPECT_FALSE(TransportSecurity::ForClient(TlsFiles()).ok());
  EXPECT_TRUE(TransportSecurity::Insecure()->insecure());
}

}  // namespace
}  // namespace weft
