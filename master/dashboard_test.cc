// The master's monitoring pages over an in-process cluster: /api/overview
// is valid JSON naming every task and job, the cluster gauges reach
// /metrics, and strings from jobs cannot break out of the JSON or a page.
#include "master/dashboard.h"

#include "absl/strings/match.h"
#include "common/json_text.h"
#include "common/metrics.h"
#include "google/protobuf/struct.pb.h"
#include "google/protobuf/util/json_util.h"
#include "gtest/gtest.h"
#include "master/in_process_cluster.h"

namespace weft {
namespace master {
namespace {

google::protobuf::Struct Parse(const std::string& json) {
  google::protobuf::Struct s;
  auto status = google::protobuf::util::JsonStringToMessage(json, &s);
  EXPECT_TRUE(status.ok()) << status.ToString() << "\n" << json;
  return s;
}

TEST(Dashboard, OverviewListsEveryTaskUpWithItsDevices) {
  auto cluster = InProcessCluster::Create({"/job:worker/task:0", "/job:worker/task:1"});
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  MasterOptions o;
  o.workers = (*cluster)->workers();
  Master m(o);
  MonitoringPages pages(&m, "127.0.0.1:5000");
  google::protobuf::Struct s = Parse(pages.OverviewJson());
  EXPECT_EQ(s.fields().at("master").struct_value().fields().at("address").string_value(), "127.0.0.1:5000");
  const auto& tasks = s.fields().at("tasks").list_value().values();
  ASSERT_EQ(tasks.size(), 2);
  for (int i = 0; i < 2; ++i) {
    const auto& t = tasks[i].struct_value().fields();
    EXPECT_EQ(t.at("task").string_value(), i == 0 ? "/job:worker/task:0" : "/job:worker/task:1");
    EXPECT_TRUE(t.at("up").bool_value());
    EXPECT_GE(t.at("devices").list_value().values_size(), 1);
  }
  EXPECT_EQ(s.fields().at("jobs").list_value().values_size(), 0);
  EXPECT_GT(s.fields().at("time_unix_ms").number_value(), 0);

  const std::string text = metrics::Registry::Default().Render();
  EXPECT_TRUE(absl::StrContains(text, "weft_task_up{task=\"/job:worker/task:1\"} 1\n")) << text;
  std::map<std::string, HttpHandler> routes = pages.Pages();
  for (const char* path : {"/", "/dashboard.js", "/dashboard.css", "/api/overview"}) {
    ASSERT_EQ(routes.count(path), 1u) << path;
    EXPECT_EQ(routes[path](HttpRequest()).status, 200) << path;
  }
  EXPECT_TRUE(absl::StartsWith(routes["/"](HttpRequest()).content_type, "text/html"));
}

TEST(Dashboard, GaugesLeaveWithThePages) {
  auto cluster = InProcessCluster::Create({"/job:worker/task:0"});
  ASSERT_TRUE(cluster.ok());
  MasterOptions o;
  o.workers = (*cluster)->workers();
  Master m(o);
  { MonitoringPages pages(&m, "x"); }
  EXPECT_FALSE(absl::StrContains(metrics::Registry::Default().Render(), "weft_task_up"));
}

TEST(Dashboard, JsonStringsCannotBreakOut) {
  const std::string hostile = "a\"b\\c\n</script><img src=x>\x01";
  const std::string json = absl::StrCat("{\"k\":", JsonString(hostile), "}");
  EXPECT_FALSE(absl::StrContains(json, "</script>"));
  EXPECT_EQ(Parse(json).fields().at("k").string_value(), hostile);
  EXPECT_EQ(JsonNumber(0.5), "0.5");
  EXPECT_EQ(JsonNumber(std::nan("")), "null");
}

}  // namespace
}  // namespace master
}  // namespace weft
