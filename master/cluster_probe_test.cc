// The cluster probe against scripted tasks: a task that answers, one that
// fails, one that never answers within the deadline, one the cache has no
// client for; the devices read from a probe; and the FanOut skeleton.
#include "master/cluster_probe.h"

#include <map>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/synchronization/mutex.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/test_util.h"
#include "gtest/gtest.h"
#include "master/fake_worker.h"
#include "master/worker_cache.h"

namespace weft {
namespace master {
namespace {

constexpr char kW0[] = "/job:worker/task:0";
constexpr char kW1[] = "/job:worker/task:1";
constexpr char kPs[] = "/job:ps/task:0";

// A task whose GetStatus answers with one CPU device and `incarnation`,
// fails with `error`, or (hold) keeps the call until Release.
class ScriptedTask final : public FakeWorker {
 public:
  explicit ScriptedTask(std::string task) : FakeWorker(std::move(task)) {}

  void Answer(uint64_t incarnation) {
    absl::MutexLock lock(&mu_);
    incarnation_ = incarnation;
  }
  void Fail(absl::Status error) {
    absl::MutexLock lock(&mu_);
    error_ = std::move(error);
  }
  void Hold() {
    absl::MutexLock lock(&mu_);
    hold_ = true;
  }
  // Answers the held calls; returns how many there were.
  int Release() {
    std::vector<std::pair<GetStatusResponse*, StatusCallback>> held;
    {
      absl::MutexLock lock(&mu_);
      held.swap(held_);
      hold_ = false;
    }
    for (auto& [response, done] : held) {
      response->set_incarnation(99);
      done(absl::OkStatus());
    }
    return static_cast<int>(held.size());
  }
  int calls() const {
    absl::MutexLock lock(&mu_);
    return calls_;
  }

  void GetStatusAsync(const GetStatusRequest*, GetStatusResponse* response, StatusCallback done) override {
    absl::Status error;
    uint64_t incarnation = 0;
    {
      absl::MutexLock lock(&mu_);
      ++calls_;
      if (hold_) {
        held_.emplace_back(response, std::move(done));
        return;
      }
      error = error_;
      incarnation = incarnation_;
    }
    if (!error.ok()) return done(error);
    response->set_task(task());
    response->set_incarnation(incarnation);
    DeviceAttributes* d = response->add_device();
    d->set_name(task() + "/device:CPU:0");
    d->set_device_type("CPU");
    done(absl::OkStatus());
  }

 private:
  mutable absl::Mutex mu_;
  uint64_t incarnation_ ABSL_GUARDED_BY(mu_) = 1;
  absl::Status error_ ABSL_GUARDED_BY(mu_);
  bool hold_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<std::pair<GetStatusResponse*, StatusCallback>> held_ ABSL_GUARDED_BY(mu_);
  int calls_ ABSL_GUARDED_BY(mu_) = 0;
};

struct ScriptedCluster {
  explicit ScriptedCluster(const std::vector<std::string>& names) {
    cache = *WorkerCache::CreateLocal(names, [this](const std::string& task, const std::string&) {
      auto t = std::make_unique<ScriptedTask>(task);
      tasks[task] = t.get();
      return t;
    });
    for (const std::string& n : names) cache->GetOrCreateWorker(n);
  }
  ScriptedTask& operator[](const std::string& task) { return *tasks.at(task); }

  std::map<std::string, ScriptedTask*> tasks;  // owned by the cache
  std::unique_ptr<WorkerCache> cache;
};

// Lists one task more than it has clients for.
class MissingClientCache final : public WorkerCacheInterface {
 public:
  explicit MissingClientCache(WorkerCacheInterface* base) : base_(base) {}
  std::vector<std::string> ListTasks() const override {
    std::vector<std::string> tasks = base_->ListTasks();
    tasks.push_back("/job:ps/task:9");
    return tasks;
  }
  WorkerInterface* GetOrCreateWorker(const std::string& task) override { return base_->GetOrCreateWorker(task); }

 private:
  WorkerCacheInterface* const base_;
};

TEST(ProbeClusterTest, ReportsAnsweringFailingAndSilentTasksInListOrder) {
  ScriptedCluster c({kW0, kW1, kPs});
  c[kW0].Answer(0xabc);
  c[kW1].Fail(absl::UnavailableError("connection refused"));
  c[kPs].Hold();

  const absl::Time start = absl::Now();
  ClusterProbe probe = ProbeCluster(c.cache.get(), absl::Milliseconds(20));
  // The silent task costs the deadline, not more (generous bound for slow machines).
  EXPECT_LT(absl::Now() - start, absl::Seconds(20));

  ASSERT_EQ(probe.tasks.size(), 3u);
  EXPECT_EQ(probe.tasks[0].task, kW0);
  EXPECT_TRUE(probe.tasks[0].status.ok()) << probe.tasks[0].status;
  EXPECT_EQ(probe.tasks[0].response.incarnation(), 0xabcu);
  ASSERT_EQ(probe.tasks[0].response.device_size(), 1);
  EXPECT_EQ(probe.tasks[0].response.device(0).name(), "/job:worker/task:0/device:CPU:0");

  EXPECT_EQ(probe.tasks[1].task, kW1);
  EXPECT_EQ(probe.tasks[1].status, absl::UnavailableError("connection refused"));  // as the worker said it

  EXPECT_EQ(probe.tasks[2].task, kPs);
  EXPECT_TRUE(probe.tasks[2].has_client);
  EXPECT_EQ(probe.tasks[2].status.code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_EQ(probe.tasks[2].status.message(), "task /job:ps/task:0: no answer to GetStatus within 20ms");
  EXPECT_EQ(probe.tasks[2].response.incarnation(), 0u);

  // The late answer lands in the probe's shared state, not in the result.
  EXPECT_EQ(c[kPs].Release(), 1);
  EXPECT_EQ(probe.tasks[2].response.incarnation(), 0u);
  for (const char* t : {kW0, kW1, kPs}) EXPECT_EQ(c[t].calls(), 1) << t;
}

TEST(ProbeClusterTest, WithoutDeadlineWaitsForAnswersFromOtherThreads) {
  ScriptedCluster c({kW0, kPs});
  c[kPs].Hold();
  // Released from another thread once the probe's call has arrived.
  ::testing::AssertionResult arrived = ::testing::AssertionFailure();
  std::thread releaser([&] {
    arrived = weft::testing::WaitUntil(absl::Seconds(60), "the probe's GetStatus", [&] { return c[kPs].calls() > 0; });
    c[kPs].Release();
  });
  ClusterProbe probe = ProbeCluster(c.cache.get());
  releaser.join();
  ASSERT_TRUE(arrived);
  ASSERT_EQ(probe.tasks.size(), 2u);
  EXPECT_TRUE(probe.tasks[0].status.ok());
  EXPECT_TRUE(probe.tasks[1].status.ok()) << probe.tasks[1].status;
  EXPECT_EQ(probe.tasks[1].response.incarnation(), 99u);  // what Release answered
}

TEST(ProbeClusterTest, ATaskWithoutAClientIsNotAsked) {
  ScriptedCluster c({kW0});
  MissingClientCache cache(c.cache.get());
  ClusterProbe probe = ProbeCluster(&cache, absl::Seconds(30));
  ASSERT_EQ(probe.tasks.size(), 2u);
  EXPECT_TRUE(probe.tasks[0].has_client);
  EXPECT_FALSE(probe.tasks[1].has_client);
  EXPECT_EQ(probe.tasks[1].task, "/job:ps/task:9");
  EXPECT_EQ(probe.tasks[1].status.code(), absl::StatusCode::kNotFound);

  auto devices = ClusterDevices(probe);
  EXPECT_EQ(devices.status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(devices.status().message(), "task /job:ps/task:9: task /job:ps/task:9 is not in the cluster");
}

TEST(ClusterDevicesTest, ListsEveryTasksDevicesInTaskOrder) {
  ScriptedCluster c({kPs, kW0});
  auto devices = ListClusterDevices(c.cache.get());
  ASSERT_TRUE(devices.ok()) << devices.status();
  ASSERT_EQ(devices->size(), 2u);
  EXPECT_EQ((*devices)[0].name(), "/job:ps/task:0/device:CPU:0");
  EXPECT_EQ((*devices)[1].name(), "/job:worker/task:0/device:CPU:0");
}

TEST(ClusterDevicesTest, FailsWithTheFirstFailedTaskNamed) {
  ScriptedCluster c({kW0, kW1, kPs});
  c[kW1].Fail(absl::UnavailableError("down"));
  c[kPs].Fail(absl::InternalError("broken"));
  auto devices = ListClusterDevices(c.cache.get());
  EXPECT_EQ(devices.status(), absl::UnavailableError("task /job:worker/task:1: down"));
}

// Moved from worker_cache_test.cc with ListClusterDevices.
TEST(ClusterDevicesTest, ListClusterDevicesNamesAFailingTask) {
  auto cache = *WorkerCache::CreateLocal({"/job:worker/task:0"}, [](const std::string& task, const std::string&) {
    return std::make_unique<FakeWorker>(task);
  });
  auto devices = ListClusterDevices(cache.get());
  EXPECT_EQ(devices.status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_TRUE(absl::StartsWith(devices.status().message(), "task /job:worker/task:0: ")) << devices.status();
}

TEST(FanOutTest, ReturnsEachCallsStatusByIndexWhereverDoneRuns) {
  std::vector<std::thread> threads;
  std::vector<absl::Status> statuses = FanOut(4, [&](size_t i, StatusCallback done) {
    const absl::Status s = i % 2 == 0 ? absl::OkStatus() : absl::InternalError(absl::StrCat("call ", i));
    if (i < 2) {
      done(s);  // before returning, on the caller's thread
    } else {
      threads.emplace_back([s, done = std::move(done)] { done(s); });
    }
  });
  for (std::thread& t : threads) t.join();
  ASSERT_EQ(statuses.size(), 4u);
  EXPECT_TRUE(statuses[0].ok());
  EXPECT_EQ(statuses[1], absl::InternalError("call 1"));
  EXPECT_TRUE(statuses[2].ok());
  EXPECT_EQ(statuses[3], absl::InternalError("call 3"));
  EXPECT_TRUE(FanOut(0, [](size_t, StatusCallback) { ADD_FAILURE() << "no call expected"; }).empty());
}

}  // namespace
}  // namespace master
}  // namespace weft
