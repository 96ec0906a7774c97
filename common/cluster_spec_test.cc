#include "common/cluster_spec.h"

#include <functional>
#include <string>

#include "absl/strings/match.h"
#include "gtest/gtest.h"

namespace weft {
namespace {

TEST(ClusterSpecTest, ParsesFlagAndRoundTrips) {
  auto c = ParseClusterFlag("worker=127.0.0.1:2222,127.0.0.1:2223;ps=localhost:2224");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(NumTasks(*c, "worker"), 2);
  EXPECT_EQ(NumTasks(*c, "ps"), 1);
  EXPECT_EQ(*TaskAddress(*c, {"worker", 1}), "127.0.0.1:2223");
  EXPECT_EQ(ClusterToFlag(*c), "worker=127.0.0.1:2222,127.0.0.1:2223;ps=localhost:2224");
  auto missing = TaskAddress(*c, {"worker", 2});
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
  EXPECT_TRUE(absl::StrContains(missing.status().message(), "/job:worker/task:2")) << missing.status();
}

TEST(ClusterSpecTest, RejectsMalformedFlagsNamingThePiece) {
  struct Case {
    const char* flag;
    const char* expect;
  } cases[] = {
      {"", "empty"},
      {"worker", "'worker' is not job="},
      {"worker=h", "'h' is not host:port"},
      {"worker=h:0", "'h:0'"},
      {"worker=h:70000", "'h:70000'"},
      {"Worker=h:1", "job name 'Worker'"},
      {"worker=h:1;worker=h:2", "job 'worker' repeats"},
  };
  for (const Case& c : cases) {
    auto r = ParseClusterFlag(c.flag);
    ASSERT_FALSE(r.ok()) << c.flag;
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_TRUE(absl::StrContains(r.status().message(), c.expect)) << c.flag << " -> " << r.status();
  }
}

TEST(ClusterSpecTest, AddressHostDropsThePortAndV6Brackets) {
  EXPECT_EQ(AddressHost("10.0.0.2:2222"), "10.0.0.2");
  EXPECT_EQ(AddressHost("weft-worker-0.weft-worker:2222"), "weft-worker-0.weft-worker");
  EXPECT_EQ(AddressHost("[::1]:2222"), "::1");
  EXPECT_EQ(AddressHost("localhost"), "localhost");
}

TEST(ClusterSpecTest, ParsesTaskFlagsInBothForms) {
  EXPECT_EQ(ParseTaskFlag("worker:3")->Name(), "/job:worker/task:3");
  EXPECT_EQ(ParseTaskFlag("/job:ps/task:0")->Name(), "/job:ps/task:0");
  EXPECT_FALSE(ParseTaskFlag("worker").ok());
  EXPECT_FALSE(ParseTaskFlag("worker:-1").ok());
  EXPECT_FALSE(ParseTaskFlag("worker:x").ok());
}

TEST(ClusterSpecTest, ParsesKubeflowTfConfig) {
  auto c = ParseTfConfig(R"({"cluster": {"worker": ["w0:2222", "w1:2222"], "ps": ["p0:2222"]},
                             "task": {"type": "worker", "index": 1}, "environment": "cloud"})");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->task.Name(), "/job:worker/task:1");
  EXPECT_EQ(*TaskAddress(c->cluster, c->task), "w1:2222");
  EXPECT_EQ(NumTasks(c->cluster, "ps"), 1);
}

TEST(ClusterSpecTest, RejectsBadTfConfig) {
  struct Case {
    const char* json;
    const char* expect;
  } cases[] = {
      {"{not json", "not valid JSON"},
      {R"({"task": {"type": "worker", "index": 0}})", "\"cluster\""},
      {R"({"cluster": {"worker": "w0:1"}})", "cluster.worker must be a list"},
      {R"({"cluster": {"worker": [7]}})", "cluster.worker[0] must be a string"},
      {R"({"cluster": {"worker": ["w0"]}})", "cluster.worker[0]"},
      {R"({"cluster": {"worker": ["w0:1"]}, "task": {"type": "worker", "index": 1.5}})", "task.index"},
      {R"({"cluster": {"worker": ["w0:1"]}, "task": {"type": "worker", "index": 4}})", "/job:worker/task:4"},
      {R"({"cluster": {"worker": ["w0:1"]}, "task": {"type": "chief", "index": 0}})", "no job 'chief'"},
  };
  for (const Case& c : cases) {
    auto r = ParseTfConfig(c.json);
    ASSERT_FALSE(r.ok()) << c.json;
    EXPECT_TRUE(absl::StrContains(r.status().message(), c.expect)) << c.json << " -> " << r.status();
  }
}

TEST(ClusterSpecTest, ChecksAClusterDefFromElsewhere) {
  auto good = ParseClusterFlag("worker=w0:1,w1:2;ps=p0:3");
  ASSERT_TRUE(good.ok()) << good.status();
  EXPECT_TRUE(CheckClusterDef(*good, "from the master").ok());
  EXPECT_TRUE(CheckClusterDef(ClusterDef(), "from the master").ok());

  struct Case {
    std::string name;
    std::function<void(ClusterDef*)> damage;
    std::string expect;
  } cases[] = {
      {"no port", [](ClusterDef* c) { (*c->mutable_job(0)->mutable_tasks())[1] = "w1"; },
       "from the master job 'worker' task 1: 'w1' is not host:port"},
      {"port 0", [](ClusterDef* c) { (*c->mutable_job(1)->mutable_tasks())[0] = "p0:0"; }, "'p0:0'"},
      {"empty address", [](ClusterDef* c) { (*c->mutable_job(0)->mutable_tasks())[0] = ""; }, "task 0: ''"},
      {"negative index", [](ClusterDef* c) { (*c->mutable_job(0)->mutable_tasks())[-1] = "w:1"; },
       "negative task index -1"},
      {"bad job name", [](ClusterDef* c) { c->mutable_job(1)->set_name("P S"); }, "job name 'P S'"},
      {"repeated job", [](ClusterDef* c) { c->mutable_job(1)->set_name("worker"); }, "job 'worker' repeats"},
  };
  for (const Case& c : cases) {
    ClusterDef bad = *good;
    c.damage(&bad);
    absl::Status s = CheckClusterDef(bad, "from the master");
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << c.name << ": " << s;
    EXPECT_TRUE(absl::StrContains(s.message(), c.expect)) << c.name << ": " << s;
  }
}

}  // namespace
}  // namespace weft
