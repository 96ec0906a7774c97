#include "master/worker_cache.h"

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/cluster_spec.h"
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

// A worker that registers joins in index order among the workers, reaches
// the ClusterDef the tasks get, and may move only if it was not in Create's
// cluster; clients handed out before a move stay valid.
TEST(WorkerCacheTest, WorkersJoinInOrderAndOnlyRegisteredOnesMove) {
  std::vector<std::pair<std::string, std::string>> made;
  auto cache = WorkerCache::Create(Cluster(), [&](const std::string& task, const std::string& address) {
    made.emplace_back(task, address);
    return std::make_unique<FakeWorker>(task);
  });
  ASSERT_TRUE(cache.ok()) << cache.status();
  WorkerCache& c = **cache;
  ASSERT_TRUE(c.AddTask("/job:worker/task:5", "h5:2").value());
  ASSERT_TRUE(c.AddTask("/job:worker/task:3", "h3:2").value());
  EXPECT_EQ(c.ListTasks(), (std::vector<std::string>{"/job:worker/task:0", "/job:worker/task:1", "/job:worker/task:3",
                                                     "/job:worker/task:5", "/job:ps/task:0"}));
  EXPECT_EQ(c.cluster().job(0).tasks().at(3), "h3:2");
  EXPECT_FALSE(c.AddTask("/job:worker/task:3", "h3:2").value()) << "known there: nothing added";
  EXPECT_TRUE(c.Knows("/job:worker/task:3", "h3:2"));
  EXPECT_FALSE(c.Knows("/job:worker/task:3", "h3b:2"));

  WorkerInterface* before = c.GetOrCreateWorker("/job:worker/task:3");
  ASSERT_NE(before, nullptr);
  ASSERT_TRUE(c.AddTask("/job:worker/task:3", "h3b:2").value());
  EXPECT_EQ(before->task(), "/job:worker/task:3") << "a moved task's old client stays valid";
  WorkerInterface* after = c.GetOrCreateWorker("/job:worker/task:3");
  EXPECT_NE(after, before);
  EXPECT_EQ(made.back(), (std::pair<std::string, std::string>{"/job:worker/task:3", "h3b:2"}));
  EXPECT_EQ(c.ListTasks().size(), 5u);

  absl::StatusOr<bool> s = c.AddTask("/job:worker/task:0", "elsewhere:2");
  EXPECT_EQ(s.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(absl::StrContains(s.status().message(), "is in the master's --cluster at h0:2")) << s.status();
  s = c.AddTask("/job:worker/task:7", "h1:2");
  EXPECT_EQ(s.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(absl::StrContains(s.status().message(), "task /job:worker/task:1 is there")) << s.status();
  for (const char* task : {"/job:ps/task:1", "/job:master/task:0", "/job:worker/task:1/device:CPU:0",
                           "/job:worker/task:-1", "worker:3", ""}) {
    EXPECT_EQ(c.AddTask(task, "h9:2").status().code(), absl::StatusCode::kInvalidArgument) << task;
  }
  EXPECT_EQ(c.ListTasks().size(), 5u) << "every refusal leaves the cluster as it was";
}

TEST(WorkerCacheTest, AtMostMaxTasksJoin) {
  auto cache = WorkerCache::Create(Cluster(), [](const std::string& task, const std::string&) {
    return std::make_unique<FakeWorker>(task);
  });
  ASSERT_TRUE(cache.ok()) << cache.status();
  for (int i = 2; i < WorkerCache::kMaxTasks - 1; ++i) {
    ASSERT_TRUE((*cache)->AddTask(absl::StrCat("/job:worker/task:", i), absl::StrCat("h", i, ":2")).ok()) << i;
  }
  ASSERT_EQ((*cache)->ListTasks().size(), static_cast<size_t>(WorkerCache::kMaxTasks));
  absl::StatusOr<bool> s = (*cache)->AddTask("/job:worker/task:99999", "last:2");
  EXPECT_EQ(s.status().code(), absl::StatusCode::kResourceExhausted) << s.status();
}

TEST(WorkerCacheTest, AddressesAreHostAndPort) {
  for (const char* good : {"h:1", "10.0.0.7:65535", "worker-3.weft-workers.default.svc:7000", "[::1]:80"}) {
    EXPECT_TRUE(CheckHostPort(good, "test").ok()) << good;
  }
  for (const char* bad : {"", "h", "h:", ":80", "h:0", "h:65536", "h:80x", "h:+80", "-h:80", "a b:80", "a/b:80",
                          "[]:80", "[::1:80", "h\n:80"}) {
    EXPECT_EQ(CheckHostPort(bad, "test").code(), absl::StatusCode::kInvalidArgument) << bad;
  }
}

// A job that is not elastic keeps the tasks it started with.
TEST(TaskSnapshotTest, FreezesTheTasksOfTheClusterAtItsStart) {
  auto cache = WorkerCache::Create(Cluster(), [](const std::string& task, const std::string&) {
    return std::make_unique<FakeWorker>(task);
  });
  ASSERT_TRUE(cache.ok()) << cache.status();
  TaskSnapshot snapshot(cache->get());
  ASSERT_TRUE((*cache)->AddTask("/job:worker/task:2", "h2:2").ok());
  EXPECT_EQ(snapshot.ListTasks().size(), 4u) << "before Freeze: as the cluster is";
  snapshot.Freeze();
  ASSERT_TRUE((*cache)->AddTask("/job:worker/task:3", "h3:2").ok());
  EXPECT_EQ(snapshot.ListTasks(), (std::vector<std::string>{"/job:worker/task:0", "/job:worker/task:1",
                                                            "/job:worker/task:2", "/job:ps/task:0"}));
  EXPECT_EQ(snapshot.GetOrCreateWorker("/job:worker/task:3"), nullptr);
  EXPECT_NE(snapshot.GetOrCreateWorker("/job:worker/task:2"), nullptr);
  EXPECT_EQ(snapshot.cluster().job(0).tasks().size(), 4u) << "the addresses are the cluster's";
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
