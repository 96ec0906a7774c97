// The monitoring port over plaintext and mTLS, read with cpp-httplib's
// client: who is served, who is refused, and what /metrics holds.
#include "common/monitoring_server.h"


#include <cstdlib>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/certs.h"
#include "common/metrics.h"
#include "gtest/gtest.h"
#include "httplib.h"

namespace weft {
namespace {

struct Reply {
  int status = 0;  // 0: no HTTP answer (refused at the handshake)
  std::string body;
  std::string error;
};

// GET http(s)://127.0.0.1:port/path with cpp-httplib's client, verifying
// the server against `ca`, presenting `client` (base path of .crt/.key).
Reply Get(int port, const std::string& path, bool tls, const std::string& ca = "", const std::string& client = "") {
  Reply r;
  auto finish = [&r](httplib::Result res) {
    if (!res) {
      r.error = httplib::to_string(res.error());
      return;
    }
    r.status = res->status;
    r.body = res->body;
  };
  if (tls) {
    std::unique_ptr<httplib::SSLClient> c =
        client.empty() ? std::make_unique<httplib::SSLClient>("127.0.0.1", port)
                       : std::make_unique<httplib::SSLClient>("127.0.0.1", port, client + ".crt", client + ".key");
    c->set_ca_cert_path(ca.c_str());
    c->enable_server_certificate_verification(true);
    c->set_connection_timeout(10, 0);
    finish(c->Get(path.c_str()));
  } else {
    httplib::Client c("127.0.0.1", port);
    c.set_connection_timeout(10, 0);
    finish(c.Get(path.c_str()));
  }
  return r;
}

class MonitoringTlsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = absl::StrCat(std::getenv("TEST_TMPDIR"), "/",
                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    ASSERT_TRUE(CreateCa(dir_).ok());
    Issue("/job:worker/task:0", Role::kCluster);
    Issue("prom", Role::kAdmin);
    Issue("alice", Role::kUser);
    const std::string other = dir_ + "/other";
    ASSERT_TRUE(CreateCa(other).ok());
    IssueOptions o;
    o.name = "mallory";
    o.role = Role::kAdmin;
    ASSERT_TRUE(IssueCertificate(other, o).ok());
  }
  void Issue(const std::string& name, Role role) {
    IssueOptions o;
    o.name = name;
    o.role = role;
    ASSERT_TRUE(IssueCertificate(dir_, o).ok());
  }
  MonitoringOptions Options() const {
    MonitoringOptions o;
    o.host = "127.0.0.1";
    o.ca_file = dir_ + "/ca.crt";
    o.cert_file = dir_ + "/worker-0.crt";
    o.key_file = dir_ + "/worker-0.key";
    return o;
  }
  std::string dir_;
};

TEST_F(MonitoringTlsTest, AdminAndClusterReadUsersAndStrangersDoNot) {
  metrics::Registry::Default().AddCounter("weft_monitoring_test_total", "A test counter.")->With({})->Increment(7);
  auto server = MonitoringServer::Start(Options(), {{"/hello", [](const HttpRequest&) {
                                                       return HttpResponse{200, "text/plain", "hi"};
                                                     }}});
  ASSERT_TRUE(server.ok()) << server.status();
  EXPECT_TRUE(absl::StartsWith((*server)->url(), "https://127.0.0.1:")) << (*server)->url();
  const int port = (*server)->port();
  const std::string ca = dir_ + "/ca.crt";

  Reply admin = Get(port, "/metrics", true, ca, dir_ + "/prom");
  EXPECT_EQ(admin.status, 200) << admin.error;
  EXPECT_TRUE(absl::StrContains(admin.body, "weft_monitoring_test_total 7\n")) << admin.body;
  EXPECT_EQ(Get(port, "/hello", true, ca, dir_ + "/worker-0").body, "hi");

  Reply user = Get(port, "/metrics", true, ca, dir_ + "/alice");
  EXPECT_EQ(user.status, 403);
  EXPECT_TRUE(absl::StrContains(user.body, "user alice may not read")) << user.body;
  EXPECT_FALSE(absl::StrContains(user.body, "weft_monitoring_test_total"));
  EXPECT_EQ(Get(port, "/hello", true, ca, dir_ + "/alice").status, 403);

  // No client certificate, another CA's, or plaintext: no HTTP answer.
  EXPECT_EQ(Get(port, "/metrics", true, ca).status, 0);
  EXPECT_EQ(Get(port, "/metrics", true, ca, dir_ + "/other/mallory").status, 0);
  EXPECT_NE(Get(port, "/metrics", false).status, 200);

  // The server keeps serving after the refusals; unknown paths and methods.
  EXPECT_EQ(Get(port, "/metrics", true, ca, dir_ + "/prom").status, 200);
  EXPECT_EQ(Get(port, "/nope", true, ca, dir_ + "/prom").status, 404);
}

TEST_F(MonitoringTlsTest, PlaintextOnlyOnLoopback) {
  MonitoringOptions o = Options();
  o.plaintext = true;
  o.host = "0.0.0.0";
  auto refused = MonitoringServer::Start(o);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(refused.status().message(), "loopback")) << refused.status();

  o.host = "127.0.0.1";
  auto server = MonitoringServer::Start(o);
  ASSERT_TRUE(server.ok()) << server.status();
  EXPECT_TRUE(absl::StartsWith((*server)->url(), "http://127.0.0.1:"));
  Reply r = Get((*server)->port(), "/metrics", false);
  EXPECT_EQ(r.status, 200) << r.error;
}

TEST_F(MonitoringTlsTest, BadFilesFailTheStartNamingThem) {
  MonitoringOptions o = Options();
  o.key_file = dir_ + "/alice.key";  // not the certificate's key
  auto s = MonitoringServer::Start(o);
  ASSERT_FALSE(s.ok());
  EXPECT_TRUE(absl::StrContains(s.status().message(), "alice.key")) << s.status();
  o = Options();
  o.cert_file = dir_ + "/missing.crt";
  s = MonitoringServer::Start(o);
  ASSERT_FALSE(s.ok());
  EXPECT_TRUE(absl::StrContains(s.status().message(), "missing.crt")) << s.status();
}

TEST(MonitoringServer, InsecureDaemonServesPlaintextAndRefusesOtherMethods) {
  MonitoringOptions o;
  o.host = "127.0.0.1";
  auto server = MonitoringServer::Start(o);
  ASSERT_TRUE(server.ok()) << server.status();
  Reply r = Get((*server)->port(), "/metrics", false);
  EXPECT_EQ(r.status, 200) << r.error;
  httplib::Client c("127.0.0.1", (*server)->port());
  auto posted = c.Post("/metrics", "x", "text/plain");
  ASSERT_TRUE(posted);
  EXPECT_EQ(posted->status, 405);
  auto head = c.Head("/metrics");
  ASSERT_TRUE(head);
  EXPECT_EQ(head->status, 200);
  EXPECT_TRUE(head->body.empty());
}

TEST(MonitoringServer, BindFailureNamesTheAddress) {
  MonitoringOptions o;
  o.host = "127.0.0.1";
  auto first = MonitoringServer::Start(o);
  ASSERT_TRUE(first.ok());
  o.port = (*first)->port();
  auto second = MonitoringServer::Start(o);
  ASSERT_FALSE(second.ok());
  EXPECT_TRUE(absl::StrContains(second.status().message(), absl::StrCat("127.0.0.1:", o.port)))
      << second.status();
}

TEST(MonitoringServer, Loopback) {
  EXPECT_TRUE(IsLoopbackHost("127.0.0.1"));
  EXPECT_TRUE(IsLoopbackHost("127.8.0.2"));
  EXPECT_TRUE(IsLoopbackHost("::1"));
  EXPECT_TRUE(IsLoopbackHost("localhost"));
  EXPECT_FALSE(IsLoopbackHost("0.0.0.0"));
  EXPECT_FALSE(IsLoopbackHost("::"));
  EXPECT_FALSE(IsLoopbackHost("10.0.0.1"));
  EXPECT_FALSE(IsLoopbackHost("128.0.0.1"));
}

}  // namespace
}  // namespace weft
