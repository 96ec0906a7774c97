#include "master/worker_cache.h"

#include "absl/strings/match.h"
#include "gtest/gtest.h"
#include "master/fake_worker.h"

namespace weft {
namespace master {
namespace {

ClusterDef Cluster() {
  ClusterDef c;
  JobDef* w = c.add_job();
  w->set_name("worker");
  (*w->mutable_tasks())[1] = "h1:2";
  (*w->mutable_tasks())[0] = "h0:2";
  JobDef* m = c.add_job();
  m->set_name("master");
  (*m->mutable_tasks())[0] = "hm:1";
  JobDef* ps = c.add_job();
  ps->set_name("ps");
  (*ps->mutable_tasks())[0] = "hp:3";
  return c;
}

TEST(WorkerCacheTest, ListsTasksInOrderAndMakesEachWorkerOnce) {
  std::vector<std::pair<std::string, std::string>> made;
  auto cache = WorkerCache::Create(Cluster(), [&](const std::string& task, const std::string& address) {
    made.emplace_back(task, address);
    return std::make_unique<FakeWorker>(task);
  });
  ASSERT_TRUE(cache.ok()) << cache.status();
  EXPECT_EQ((*cache)->ListTasks(),
            (std::vector<std::string>{"/job:worker/task:0", "/job:worker/task:1", "/job:ps/task:0"}));
  WorkerInterface* w = (*cache)->GetOrCreateWorker("/job:ps/task:0");
  ASSERT_NE(w, nullptr);
  EXPECT_EQ(w->task(), "/job:ps/task:0");
  EXPECT_EQ((*cache)->GetOrCreateWorker("/job:ps/task:0"), w);
  EXPECT_EQ((*cache)->GetOrCreateWorker("/job:master/task:0"), nullptr);
  EXPECT_EQ((*cache)->GetOrCreateWorker("/job:ps/task:9"), nullptr);
  EXPECT_EQ(made, (std::vector<std::pair<std::string, std::string>>{{"/job:ps/task:0", "hp:3"}}));
}

TEST(WorkerCacheTest, RejectsBadClusters) {
  auto factory = [](const std::string& task, const std::string&) { return std::make_unique<FakeWorker>(task); };
  ClusterDef twice = Cluster();
  twice.add_job()->set_name("ps");
  auto s = WorkerCache::Create(twice, factory);
  EXPECT_EQ(s.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(s.status().message(), "'ps'")) << s.status();
  ClusterDef no_address = Cluster();
  (*no_address.mutable_job(0)->mutable_tasks())[2] = "";
  s = WorkerCache::Create(no_address, factory);
  EXPECT_TRUE(absl::StrContains(s.status().message(), "/job:worker/task:2")) << s.status();
  EXPECT_FALSE(WorkerCache::CreateLocal({"/job:worker/task:0/device:CPU:0"}, factory).ok());
}

TEST(WithTaskTest, PrefixesOnce) {
  EXPECT_EQ(WithTask(absl::InternalError("x"), "/job:ps/task:0").message(), "task /job:ps/task:0: x");
  EXPECT_EQ(WithTask(absl::InternalError("task /job:ps/task:0: x"), "/job:ps/task:0").message(),
            "task /job:ps/task:0: x");
  EXPECT_TRUE(WithTask(absl::OkStatus(), "/job:ps/task:0").ok());
}

}  // namespace
}  // namespace master
}  // namespace weft
