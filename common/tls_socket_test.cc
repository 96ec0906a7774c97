// TlsSocket and TlsListener over real sockets on 127.0.0.1, with
// certificates from a throwaway cluster CA: bytes arrive intact, each side
// refuses the peers it must, and Shutdown and Close wake blocked threads.
#include "common/tls_socket.h"

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <memory>
#include <string>
#include <thread>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "common/certs.h"
#include "common/grpc_security.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace weft {
namespace {

using ::testing::HasSubstr;

constexpr absl::Duration kTimeout = absl::Seconds(20);
constexpr char kTask0[] = "/job:worker/task:0";
constexpr char kTask1[] = "/job:worker/task:1";

std::string Dir(const std::string& name) { return std::string(std::getenv("TEST_TMPDIR")) + "/" + name; }

TlsFiles Issue(const std::string& dir, const std::string& name, Role role) {
  IssueOptions o;
  o.name = name;
  o.role = role;
  o.overwrite = true;
  absl::StatusOr<std::string> cert = IssueCertificate(dir, o);
  EXPECT_TRUE(cert.ok()) << cert.status();
  TlsFiles f;
  f.ca = dir + "/ca.crt";
  f.cert = cert.value_or("");
  f.key = dir + "/" + CertFileBase(name).value_or("") + ".key";
  return f;
}

std::shared_ptr<const TlsSocketContext> Context(const TlsFiles& files) {
  auto context = TlsSocketContext::FromFiles(files);
  EXPECT_TRUE(context.ok()) << context.status();
  return context.value_or(nullptr);
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

// Contexts for the cluster's tasks, a user, and a task of another cluster.
struct Certs {
  std::shared_ptr<const TlsSocketContext> task0, task1, alice, stranger;
};

const Certs& TheCerts() {
  static const Certs* certs = [] {
    auto* c = new Certs;
    const std::string dir = Dir("cluster"), other = Dir("other");
    EXPECT_TRUE(CreateCa(dir, 2, true, "weft test CA").ok());
    EXPECT_TRUE(CreateCa(other, 2, true, "another cluster's CA").ok());
    c->task0 = Context(Issue(dir, kTask0, Role::kCluster));
    c->task1 = Context(Issue(dir, kTask1, Role::kCluster));
    c->alice = Context(Issue(dir, "alice", Role::kUser));
    // Another cluster's task that also trusts this cluster's CA, so that
    // only the server's check of the client's certificate can refuse it.
    TlsFiles stranger = Issue(other, kTask1, Role::kCluster);
    stranger.ca = Dir("both-cas.crt");
    std::ofstream(stranger.ca) << ReadFile(other + "/ca.crt") << ReadFile(dir + "/ca.crt");
    c->stranger = Context(stranger);
    return c;
  }();
  return *certs;
}

// Runs `fn` on a thread. Join waits a bounded time, so that a hang fails
// with a message rather than at Bazel's timeout.
class Thread {
 public:
  explicit Thread(std::function<void()> fn)
      : thread_([this, fn = std::move(fn)] {
          fn();
          done_.Notify();
        }) {}
  ~Thread() { Join(); }
  void Join() {
    if (!thread_.joinable()) return;
    if (!done_.WaitForNotificationWithTimeout(kTimeout)) {
      std::fprintf(stderr, "a test thread did not finish within %s\n", absl::FormatDuration(kTimeout).c_str());
      std::abort();
    }
    thread_.join();
  }

 private:
  absl::Notification done_;
  std::thread thread_;
};

std::unique_ptr<TlsListener> Listen() {
  auto listener = TlsListener::Listen("127.0.0.1", 0);
  EXPECT_TRUE(listener.ok()) << listener.status();
  return listener.ok() ? std::move(*listener) : nullptr;
}

// Accepts one connection on `listener` with `context`.
absl::StatusOr<std::unique_ptr<TlsSocket>> AcceptOne(TlsListener* listener, const TlsSocketContext* context,
                                                     absl::Duration timeout = kTimeout) {
  absl::StatusOr<int> fd = listener->AcceptFd();
  if (!fd.ok()) return fd.status();
  return TlsSocket::Accept(context, *fd, timeout);
}

std::string Pattern(size_t n) {
  std::string s(n, '\0');
  uint32_t x = 12345;
  for (char& c : s) {
    x = x * 1103515245 + 12345;
    c = static_cast<char>(x >> 24);
  }
  return s;
}

// The client writes three pieces (one of 5 MiB) and closes; the server
// reads them back and then sees the end of the stream.
void RoundTrip(const TlsSocketContext* client_context, const TlsSocketContext* server_context,
               const std::string& want_client_peer) {
  std::unique_ptr<TlsListener> listener = Listen();
  ASSERT_NE(listener, nullptr);
  const std::string head = "head", body = Pattern(5 << 20), tail = "tail!";
  std::string received, server_peer;
  absl::Status accepted, end;
  Thread server([&] {
    auto socket = AcceptOne(listener.get(), server_context);
    accepted = socket.status();
    if (!socket.ok()) return;
    server_peer = (*socket)->peer();
    received.resize(head.size() + body.size() + tail.size());
    accepted = (*socket)->ReadFull(&received[0], head.size());
    if (accepted.ok()) accepted = (*socket)->ReadFull(&received[head.size()], received.size() - head.size());
    char byte;
    end = (*socket)->ReadFull(&byte, 1);
  });
  auto client = TlsSocket::Connect(client_context, "127.0.0.1", listener->port(), kTask1, kTimeout);
  ASSERT_TRUE(client.ok()) << client.status();
  EXPECT_EQ((*client)->peer(), client_context != nullptr ? kTask1 : "");
  EXPECT_EQ((*client)->remote(), absl::StrCat("127.0.0.1:", listener->port()));
  absl::string_view pieces[] = {head, body, tail};
  EXPECT_TRUE((*client)->WriteAll(pieces).ok());
  client->reset();  // a clean close
  server.Join();
  ASSERT_TRUE(accepted.ok()) << accepted;
  EXPECT_EQ(server_peer, want_client_peer);
  EXPECT_TRUE(received == head + body + tail) << "the bytes read differ from those written";
  EXPECT_TRUE(absl::IsOutOfRange(end)) << end;
}

TEST(TlsSocketTest, TlsRoundTrip) { RoundTrip(TheCerts().task0.get(), TheCerts().task1.get(), kTask0); }

TEST(TlsSocketTest, PlaintextRoundTrip) { RoundTrip(nullptr, nullptr, ""); }

TEST(TlsSocketTest, ClientRefusesServerWithAnotherName) {
  std::unique_ptr<TlsListener> listener = Listen();
  ASSERT_NE(listener, nullptr);
  absl::Status server_status;
  Thread server([&] { server_status = AcceptOne(listener.get(), TheCerts().task0.get()).status(); });
  auto client = TlsSocket::Connect(TheCerts().task1.get(), "127.0.0.1", listener->port(), kTask1, kTimeout);
  EXPECT_TRUE(absl::IsUnauthenticated(client.status())) << client.status();
  EXPECT_THAT(std::string(client.status().message()),
              HasSubstr(absl::StrCat("127.0.0.1:", listener->port(), ": the server's certificate names ", kTask0,
                                     ", not ", kTask1)));
  server.Join();
  EXPECT_TRUE(absl::IsUnauthenticated(server_status)) << server_status;
  EXPECT_THAT(std::string(server_status.message()), HasSubstr("refused this server's certificate"));
}

TEST(TlsSocketTest, ServerRefusesUserCertificate) {
  std::unique_ptr<TlsListener> listener = Listen();
  ASSERT_NE(listener, nullptr);
  absl::Status server_status;
  Thread server([&] { server_status = AcceptOne(listener.get(), TheCerts().task0.get()).status(); });
  auto client = TlsSocket::Connect(TheCerts().alice.get(), "127.0.0.1", listener->port(), kTask0, kTimeout);
  server.Join();
  EXPECT_TRUE(absl::IsUnauthenticated(server_status)) << server_status;
  EXPECT_THAT(std::string(server_status.message()), HasSubstr("socket from 127.0.0.1:"));
  EXPECT_THAT(std::string(server_status.message()), HasSubstr("names alice, a user certificate"));
  EXPECT_TRUE(absl::IsUnauthenticated(client.status())) << client.status();
  EXPECT_THAT(std::string(client.status().message()), HasSubstr("refused this process's certificate (alice"));
}

TEST(TlsSocketTest, ServerRefusesAnotherClustersCertificate) {
  std::unique_ptr<TlsListener> listener = Listen();
  ASSERT_NE(listener, nullptr);
  absl::Status server_status;
  Thread server([&] { server_status = AcceptOne(listener.get(), TheCerts().task0.get()).status(); });
  auto client = TlsSocket::Connect(TheCerts().stranger.get(), "127.0.0.1", listener->port(), kTask0, kTimeout);
  server.Join();
  EXPECT_TRUE(absl::IsUnauthenticated(server_status)) << server_status;
  EXPECT_THAT(std::string(server_status.message()), HasSubstr("certificate"));
  EXPECT_FALSE(client.ok());
  EXPECT_TRUE(absl::IsUnauthenticated(client.status())) << client.status();
}

TEST(TlsSocketTest, ClientDistrustsAnotherClustersServer) {
  std::unique_ptr<TlsListener> listener = Listen();
  ASSERT_NE(listener, nullptr);
  absl::Status server_status;
  // The stranger's certificate is from the other CA; task1 trusts only its own.
  Thread server([&] { server_status = AcceptOne(listener.get(), TheCerts().stranger.get()).status(); });
  auto client = TlsSocket::Connect(TheCerts().task0.get(), "127.0.0.1", listener->port(), kTask1, kTimeout);
  server.Join();
  EXPECT_TRUE(absl::IsUnauthenticated(client.status())) << client.status();
  EXPECT_THAT(std::string(client.status().message()), HasSubstr("certificate verify failed"));
  EXPECT_TRUE(absl::IsUnauthenticated(server_status)) << server_status;
}

TEST(TlsSocketTest, SilentPeerTimesOutAccept) {
  std::unique_ptr<TlsListener> listener = Listen();
  ASSERT_NE(listener, nullptr);
  // A plaintext connection that never sends a ClientHello.
  auto silent = TlsSocket::Connect(nullptr, "127.0.0.1", listener->port(), "", kTimeout);
  ASSERT_TRUE(silent.ok()) << silent.status();
  absl::Status server_status;
  Thread server([&] {
    server_status = AcceptOne(listener.get(), TheCerts().task0.get(), absl::Milliseconds(200)).status();
  });
  server.Join();
  EXPECT_TRUE(absl::IsDeadlineExceeded(server_status) || absl::IsUnavailable(server_status)) << server_status;
  EXPECT_THAT(std::string(server_status.message()), HasSubstr("socket from 127.0.0.1:"));
}

TEST(TlsSocketTest, ShutdownWakesBlockedRead) {
  for (const TlsSocketContext* context : {TheCerts().task0.get(), static_cast<const TlsSocketContext*>(nullptr)}) {
    SCOPED_TRACE(context != nullptr ? "TLS" : "plaintext");
    std::unique_ptr<TlsListener> listener = Listen();
    ASSERT_NE(listener, nullptr);
    std::unique_ptr<TlsSocket> reader;
    absl::Notification accepted;
    absl::Status read_status;
    Thread server([&] {
      auto socket = AcceptOne(listener.get(), context);
      read_status = socket.status();
      if (socket.ok()) reader = std::move(*socket);
      accepted.Notify();
      if (reader == nullptr) return;
      char buf[16];
      read_status = reader->ReadFull(buf, sizeof(buf));
    });
    // The writer stays open and silent: only Shutdown can end the read.
    auto writer = TlsSocket::Connect(context, "127.0.0.1", listener->port(), kTask0, kTimeout);
    ASSERT_TRUE(writer.ok()) << writer.status();
    ASSERT_TRUE(accepted.WaitForNotificationWithTimeout(kTimeout));
    ASSERT_NE(reader, nullptr) << read_status;
    reader->Shutdown();
    server.Join();
    EXPECT_TRUE(absl::IsUnavailable(read_status)) << read_status;
    EXPECT_THAT(std::string(read_status.message()), HasSubstr("shut down"));
  }
}

TEST(TlsSocketTest, WriteAfterPeerLeftFailsWithoutSigpipe) {
  std::unique_ptr<TlsListener> listener = Listen();
  ASSERT_NE(listener, nullptr);
  absl::Status server_status;
  Thread server([&] { server_status = AcceptOne(listener.get(), TheCerts().task1.get()).status(); });
  auto writer = TlsSocket::Connect(TheCerts().task0.get(), "127.0.0.1", listener->port(), kTask1, kTimeout);
  ASSERT_TRUE(writer.ok()) << writer.status();
  server.Join();  // the accepted socket is destroyed: the peer is gone
  ASSERT_TRUE(server_status.ok()) << server_status;
  const std::string chunk(1 << 20, 'x');
  absl::Status s;
  for (int i = 0; i < 64 && s.ok(); ++i) s = (*writer)->WriteAll({chunk});
  EXPECT_TRUE(absl::IsUnavailable(s)) << s;  // and the process is still alive
}

TEST(TlsSocketTest, CloseWakesBlockedAccept) {
  std::unique_ptr<TlsListener> listener = Listen();
  ASSERT_NE(listener, nullptr);
  absl::Notification started;
  absl::Status accept_status;
  Thread server([&] {
    started.Notify();
    accept_status = listener->AcceptFd().status();
  });
  ASSERT_TRUE(started.WaitForNotificationWithTimeout(kTimeout));
  listener->Close();
  server.Join();
  EXPECT_TRUE(absl::IsCancelled(accept_status)) << accept_status;
}

TEST(TlsSocketTest, ConnectToClosedPortIsUnavailable) {
  int port = 0;
  {
    std::unique_ptr<TlsListener> listener = Listen();
    ASSERT_NE(listener, nullptr);
    port = listener->port();
  }
  auto client = TlsSocket::Connect(TheCerts().task0.get(), "127.0.0.1", port, kTask1, kTimeout);
  EXPECT_TRUE(absl::IsUnavailable(client.status())) << client.status();
  EXPECT_THAT(std::string(client.status().message()), HasSubstr(absl::StrCat("127.0.0.1:", port)));
  EXPECT_THAT(std::string(client.status().message()), HasSubstr(kTask1));
}

TEST(TlsSocketTest, BadFilesAndHostsAreRefused) {
  TlsFiles files;
  files.ca = Dir("cluster/ca.crt");
  files.cert = Dir("cluster/missing.crt");
  files.key = Dir("cluster/missing.key");
  TheCerts();  // the CA exists
  auto context = TlsSocketContext::FromFiles(files);
  EXPECT_TRUE(absl::IsNotFound(context.status())) << context.status();
  EXPECT_THAT(std::string(context.status().message()), HasSubstr("missing.crt"));
  auto listener = TlsListener::Listen("not-an-address", 0);
  EXPECT_TRUE(absl::IsInvalidArgument(listener.status())) << listener.status();
}

}  // namespace
}  // namespace weft
