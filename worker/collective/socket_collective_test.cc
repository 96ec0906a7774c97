// Collectives over the transport's own sockets: every rank in this process,
// each with its listener and a gRPC server on 127.0.0.1 that answers
// SocketEndpoint (and takes the fallback's Exchange streams). The TLS cases
// use certificates of a test CA; their ranks find each other's ports from a
// table instead of gRPC, which the plaintext cases cover.
#include <sys/socket.h>

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/certs.h"
#include "common/grpc_security.h"
#include "common/grpc_util.h"
#include "common/test_util.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "worker/collective/collective_executor.h"
#include "worker/collective/collective_test_util.h"
#include "worker/collective/grpc_collective_service.h"
#include "worker/collective/grpc_collective_transport.h"
#include "worker/collective/grpc_shm_offerer.h"
#include "worker/collective/socket_collective_transport.h"

namespace weft {
namespace collective {
namespace {

using testing::ExpectAllReducesThroughExecutors;
using testing::MakeGroup;
using weft::testing::WaitUntil;

// Socket ports by address, for ranks without gRPC.
class PortTable final : public SocketEndpointsInterface {
 public:
  absl::StatusOr<int> SocketPort(const std::string& address, absl::Duration) override {
    absl::MutexLock lock(&mu_);
    auto it = ports_.find(address);
    if (it == ports_.end()) return absl::FailedPreconditionError(absl::StrCat("no socket at ", address));
    return it->second;
  }
  void Set(const std::string& address, int port) {
    absl::MutexLock lock(&mu_);
    ports_[address] = port;
  }

 private:
  absl::Mutex mu_;
  std::map<std::string, int> ports_ ABSL_GUARDED_BY(mu_);
};

struct RankOptions {
  bool sockets = true;                        // answer SocketEndpoint
  std::shared_ptr<const TlsSocketContext> tls;  // null: plaintext
  SocketEndpointsInterface* endpoints = nullptr;  // null: gRPC
  size_t max_frame_bytes = size_t{64} << 20;
  int max_connections = 256;
};

// One rank. Destruction order: executor, socket transport, gRPC
// transport, server, mailbox.
struct SocketRank {
  CollectiveMailbox mailbox;
  GrpcCollectiveService service{&mailbox};
  std::unique_ptr<grpc::Server> server;
  std::string address;
  GrpcShmOfferer offerer;
  std::unique_ptr<GrpcCollectiveTransport> network;
  std::unique_ptr<SocketCollectiveTransport> socket;
  std::unique_ptr<CollectiveExecutor> executor;

  explicit SocketRank(const RankOptions& o) {
    network = std::make_unique<GrpcCollectiveTransport>();
    SocketCollectiveTransport::Options so;
    so.tls = o.tls;
    so.listen_host = "127.0.0.1";
    so.endpoints = o.endpoints != nullptr ? o.endpoints : &offerer;
    so.connect_timeout = absl::Seconds(5);
    so.max_frame_bytes = o.max_frame_bytes;
    so.max_connections = o.max_connections;
    auto made = SocketCollectiveTransport::Create(network.get(), &mailbox, so);
    EXPECT_TRUE(made.ok()) << made.status();
    socket = *std::move(made);
    if (o.sockets) service.SetSocketPort(socket->port());
    grpc::ServerBuilder builder;
    ConfigureServer(&builder);
    ConfigureCollectiveServer(&builder);
    int port = 0;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
    builder.RegisterService(&service);
    server = builder.BuildAndStart();
    address = absl::StrCat("127.0.0.1:", port);
    executor = std::make_unique<CollectiveExecutor>(socket.get(), &mailbox, CollectiveExecutor::Options{});
  }
  void StopSending() {
    executor.reset();
    socket.reset();
    network.reset();
  }
  ~SocketRank() {
    StopSending();
    if (server != nullptr) server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(2));
  }
};

class Ranks {
 public:
  Ranks(int n, const std::vector<RankOptions>& options) {
    for (int r = 0; r < n; ++r) {
      ranks_.push_back(std::make_unique<SocketRank>(options[r % options.size()]));
      addresses_.push_back(ranks_.back()->address);
    }
  }
  ~Ranks() {
    for (auto& r : ranks_) r->StopSending();
  }
  SocketRank& operator[](int r) { return *ranks_[r]; }
  const std::vector<std::string>& addresses() const { return addresses_; }

  // All-reduces tensors of awkward sizes on every rank; checks each sum.
  void CheckAllReduces(size_t chunk_bytes, int64_t first_instance = 1) {
    const int64_t n = static_cast<int64_t>(ranks_.size());
    ExpectAllReducesThroughExecutors(addresses_, chunk_bytes, {1, n + 1, 1009, 3 << 20},
                                     [&](int r) { return ranks_[r]->executor.get(); }, first_instance);
  }

 private:
  std::vector<std::unique_ptr<SocketRank>> ranks_;
  std::vector<std::string> addresses_;
};

class SocketAllReduceTest : public ::testing::TestWithParam<int> {};

TEST_P(SocketAllReduceTest, MatchesReferenceSumOverSockets) {
  const int n = GetParam();
  Ranks ranks(n, {RankOptions{}});
  ranks.CheckAllReduces(256 << 10);
  for (int r = 0; r < n; ++r) {
    EXPECT_EQ(ranks[r].socket->NumSocketPeers(), 1) << "rank " << r << " sends to its next rank over a socket";
    EXPECT_EQ(ranks[r].socket->NumIncomingConnections(), 1) << "rank " << r << " reads its previous rank's socket";
    EXPECT_EQ(ranks[r].mailbox.NumEntries(), 0u) << r;
  }
}

TEST_P(SocketAllReduceTest, PeersWithoutSocketsGetEverythingOverGrpc) {
  const int n = GetParam();
  RankOptions no_sockets;
  no_sockets.sockets = false;
  // Every other rank has no listener to offer: the ring mixes transports.
  Ranks ranks(n, {no_sockets, RankOptions{}});
  ranks.CheckAllReduces(256 << 10);
  for (int r = 0; r < n; ++r) {
    const bool next_takes_sockets = ((r + 1) % n) % 2 == 1;
    EXPECT_EQ(ranks[r].socket->NumSocketPeers(), next_takes_sockets ? 1 : 0) << "rank " << r;
  }
}

INSTANTIATE_TEST_SUITE_P(Ranks, SocketAllReduceTest, ::testing::Values(2, 3, 4));

// Writes `bytes` to rank's listener as a raw plaintext peer would.
std::unique_ptr<TlsSocket> RawConnection(SocketRank& rank) {
  auto s = TlsSocket::Connect(nullptr, "127.0.0.1", rank.socket->port(), "", absl::Seconds(5));
  EXPECT_TRUE(s.ok()) << s.status();
  return s.ok() ? *std::move(s) : nullptr;
}

// A frame with a bad header, or one longer than allowed, closes that
// connection before anything is allocated; the rank goes on serving.
TEST(SocketTransportTest, BadFramesCloseTheConnectionAndTheRankGoesOn) {
  RankOptions o;
  o.max_frame_bytes = 1 << 20;
  Ranks ranks(2, {o});
  struct Case {
    const char* what;
    uint32_t magic;
    uint64_t bytes;
  };
  for (const Case& c : {Case{"wrong magic", 0x12345678u, 16}, Case{"a frame over the limit", 0x31736677u, 1ull << 40}}) {
    std::unique_ptr<TlsSocket> raw = RawConnection(ranks[1]);
    ASSERT_NE(raw, nullptr);
    char header[64] = {};
    std::memcpy(header, &c.magic, 4);
    std::memcpy(header + 8, &c.bytes, 8);
    ASSERT_TRUE(raw->WriteAll({absl::string_view(header, sizeof header)}).ok());
    char byte;
    absl::Status end = raw->ReadFull(&byte, 1);  // the rank hangs up
    EXPECT_FALSE(end.ok()) << c.what;
    EXPECT_TRUE(WaitUntil(absl::Seconds(10), "the reader to end",
                          [&] { return ranks[1].socket->NumIncomingConnections() == 0; }))
        << c.what;
  }
  EXPECT_EQ(ranks[1].mailbox.NumEntries(), 0u);
  ranks.CheckAllReduces(256 << 10);
}

// Connections beyond the limit are closed at once; those within it stay.
TEST(SocketTransportTest, ConnectionsBeyondTheLimitAreClosed) {
  RankOptions o;
  o.max_connections = 2;
  Ranks ranks(1, {o});
  std::vector<std::unique_ptr<TlsSocket>> kept;
  for (int i = 0; i < 2; ++i) {
    kept.push_back(RawConnection(ranks[0]));
    ASSERT_NE(kept.back(), nullptr);
  }
  ASSERT_TRUE(WaitUntil(absl::Seconds(10), "two readers", [&] { return ranks[0].socket->NumIncomingConnections() == 2; }));
  std::unique_ptr<TlsSocket> extra = RawConnection(ranks[0]);
  ASSERT_NE(extra, nullptr);
  char byte;
  EXPECT_FALSE(extra->ReadFull(&byte, 1).ok()) << "a third connection was kept";
  EXPECT_EQ(ranks[0].socket->NumIncomingConnections(), 2);
}

// A peer that goes away fails the sends to it with UNAVAILABLE naming it,
// and a new peer at the same address is connected to by the next send.
TEST(SocketTransportTest, ALostPeerFailsSendsWithUnavailableNamingIt) {
  Ranks ranks(2, {RankOptions{}});
  ranks.CheckAllReduces(256 << 10);
  ranks[1].StopSending();  // rank 1's listener and its connections go
  const CollectiveGroup g = MakeGroup(2, 0, ranks.addresses());
  Tensor t = testing::RandomFloats(1 << 20, 3, 0);
  absl::Status last;
  // The first sends may still be written into the kernel's buffer of the
  // closed connection; within a few the writer sees it broken.
  for (int i = 0; i < 200 && last.ok(); ++i) {
    absl::Notification done;
    SendChunk chunk;
    chunk.pin = t;
    chunk.data = static_cast<const char*>(t.raw_data());
    chunk.size = t.TotalBytes();
    ranks[0].socket->SendAsync(g, 1, ChunkKey{7, 100 + i, 1, 0, 0, 0}, std::move(chunk), [&](const absl::Status& s) {
      last = s;
      done.Notify();
    });
    ASSERT_TRUE(done.WaitForNotificationWithTimeout(absl::Seconds(30)));
  }
  EXPECT_EQ(last.code(), absl::StatusCode::kUnavailable) << last;
  EXPECT_NE(last.message().find("/job:worker/task:1"), absl::string_view::npos) << last;
}

// TLS: each rank presents its task's certificate; a sender checks that the
// listener it reaches is the task the group names.
class SocketTlsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = ::testing::TempDir() + "/socket_tls";
    ASSERT_TRUE(CreateCa(dir_, /*days=*/2, /*overwrite=*/true, "weft test CA").ok());
  }
  std::shared_ptr<const TlsSocketContext> ContextFor(const std::string& name, Role role = Role::kCluster) {
    IssueOptions o;
    o.name = name;
    o.role = role;
    o.days = 2;
    o.overwrite = true;
    absl::StatusOr<std::string> cert = IssueCertificate(dir_, o);
    EXPECT_TRUE(cert.ok()) << cert.status();
    if (!cert.ok()) return nullptr;
    TlsFiles f;
    f.ca = dir_ + "/ca.crt";
    f.cert = *cert;
    f.key = cert->substr(0, cert->size() - 4) + ".key";
    auto ctx = TlsSocketContext::FromFiles(f);
    EXPECT_TRUE(ctx.ok()) << ctx.status();
    return ctx.ok() ? *ctx : nullptr;
  }

  std::string dir_;
  PortTable ports_;
};

TEST_F(SocketTlsTest, AllReducesBetweenTasksWithTheirCertificates) {
  std::vector<RankOptions> options(3);
  for (int r = 0; r < 3; ++r) {
    options[r].tls = ContextFor(absl::StrCat("/job:worker/task:", r));
    options[r].endpoints = &ports_;
  }
  Ranks ranks(3, options);
  for (int r = 0; r < 3; ++r) ports_.Set(ranks.addresses()[r], ranks[r].socket->port());
  ranks.CheckAllReduces(256 << 10);
  for (int r = 0; r < 3; ++r) EXPECT_EQ(ranks[r].socket->NumSocketPeers(), 1) << r;
}

TEST_F(SocketTlsTest, ASenderRefusesAListenerWithAnotherTasksCertificate) {
  RankOptions a, b;
  a.tls = ContextFor("/job:worker/task:0");
  b.tls = ContextFor("/job:worker/task:7");  // not the task:1 the group names
  a.endpoints = b.endpoints = &ports_;
  Ranks ranks(2, {a, b});
  for (int r = 0; r < 2; ++r) ports_.Set(ranks.addresses()[r], ranks[r].socket->port());
  absl::Notification done;
  absl::Status status;
  Tensor t = testing::RandomFloats(16, 1, 0);
  SendChunk chunk;
  chunk.pin = t;
  chunk.data = static_cast<const char*>(t.raw_data());
  chunk.size = t.TotalBytes();
  ranks[0].socket->SendAsync(MakeGroup(2, 0, ranks.addresses()), 1, ChunkKey{7, 1, 1, 0, 0, 0}, std::move(chunk),
                             [&](const absl::Status& s) {
                               status = s;
                               done.Notify();
                             });
  ASSERT_TRUE(done.WaitForNotificationWithTimeout(absl::Seconds(30)));
  EXPECT_EQ(status.code(), absl::StatusCode::kUnavailable) << status;
  EXPECT_NE(status.message().find("/job:worker/task:7"), absl::string_view::npos) << status;
  EXPECT_NE(status.message().find("/job:worker/task:1"), absl::string_view::npos) << status;
  EXPECT_EQ(ranks[1].mailbox.NumEntries(), 0u);
}

TEST_F(SocketTlsTest, AListenerRefusesAUserCertificateAndPlaintext) {
  RankOptions o;
  o.tls = ContextFor("/job:worker/task:1");
  o.endpoints = &ports_;
  Ranks ranks(1, {o});
  const int port = ranks[0].socket->port();
  // A user's certificate: the handshake or the first read fails.
  auto user = TlsSocket::Connect(ContextFor("alice", Role::kUser).get(), "127.0.0.1", port, "/job:worker/task:1",
                                 absl::Seconds(5));
  if (user.ok()) {
    char byte;
    EXPECT_FALSE((*user)->ReadFull(&byte, 1).ok()) << "a user's connection was kept open";
  }
  // Plaintext to a TLS listener: refused likewise.
  auto plain = TlsSocket::Connect(nullptr, "127.0.0.1", port, "", absl::Seconds(5));
  if (plain.ok()) {
    const char frame[64] = {};
    (void)(*plain)->WriteAll({absl::string_view(frame, sizeof frame)});
    char byte;
    EXPECT_FALSE((*plain)->ReadFull(&byte, 1).ok()) << "a plaintext connection was kept open";
  }
  EXPECT_TRUE(WaitUntil(absl::Seconds(10), "the refused readers to end",
                        [&] { return ranks[0].socket->NumIncomingConnections() == 0; }));
  EXPECT_EQ(ranks[0].mailbox.NumEntries(), 0u);
}

}  // namespace
}  // namespace collective
}  // namespace weft
