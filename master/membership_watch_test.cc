// An elastic job's membership: which workers are members (MemberWorkers)
// and when the job should change them (WhyRegroup).
#include "master/membership_watch.h"

#include <memory>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "gtest/gtest.h"
#include "master/member_workers.h"
#include "master/worker_cache.h"

namespace weft {
namespace master {
namespace {

const char* const kW0 = "/job:worker/task:0";
const char* const kW1 = "/job:worker/task:1";
const char* const kW2 = "/job:worker/task:2";
const char* const kPs = "/job:ps/task:0";

JobSpec ElasticJob(int batch, int min_workers, int max_workers) {
  JobSpec job;
  job.set_batch_size(batch);
  job.mutable_elastic()->set_min_workers(min_workers);
  job.mutable_elastic()->set_max_workers(max_workers);
  return job;
}

TEST(MemberWorkersTest, ListsTheMemberWorkersAndEveryOtherTaskInTheClustersOrder) {
  auto cache = WorkerCache::CreateLocal({kW0, kW1, kW2, kPs}, [](const std::string&, const std::string&) {
    return std::unique_ptr<WorkerInterface>();
  });
  ASSERT_TRUE(cache.ok()) << cache.status();
  MemberWorkers members(cache->get());
  EXPECT_EQ(members.ListTasks(), (std::vector<std::string>{kW0, kW1, kW2, kPs}));
  ASSERT_TRUE(members.SetWorkers({kW2, kW0}).ok());
  EXPECT_EQ(members.ListTasks(), (std::vector<std::string>{kW0, kW2, kPs}));
  EXPECT_EQ(members.Workers(), (std::vector<std::string>{kW0, kW2}));
  EXPECT_EQ(members.ClusterWorkers(), (std::vector<std::string>{kW0, kW1, kW2}));
  absl::Status s = members.SetWorkers({kW0, "/job:worker/task:7"});
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(s.message(), "task /job:worker/task:7 is not a worker of the cluster")) << s;
  EXPECT_EQ(members.Workers(), (std::vector<std::string>{kW0, kW2})) << "a refused change changed the members";
  EXPECT_FALSE(members.SetWorkers({kPs}).ok()) << "a ps is not a worker";
}

TEST(MembershipWatchTest, AJobGrowsOntoWorkersThatAnswerAndShrinksOnlyWhenAsked) {
  const JobSpec job = ElasticJob(/*batch=*/12, /*min=*/2, /*max=*/4);
  // Nobody else answers, nothing asked: no change.
  EXPECT_EQ(WhyRegroup(job, {kW0, kW1}, {}, 0), "");
  // A third answers: 3 divides 12.
  const std::string grow = WhyRegroup(job, {kW0, kW1}, {kW2}, 0);
  EXPECT_TRUE(absl::StrContains(grow, "/job:worker/task:2 answer(s) and may join: 2 -> 3 workers")) << grow;
  // Asked for 2: a standby does not make it grow.
  EXPECT_EQ(WhyRegroup(job, {kW0, kW1}, {kW2}, 2), "");
  // Asked for 2 while on 3: shrink.
  const std::string shrink = WhyRegroup(job, {kW0, kW1, kW2}, {}, 2);
  EXPECT_TRUE(absl::StrContains(shrink, "weft scale asked for 2 worker(s): 3 -> 2")) << shrink;
  // A member that stops answering is the heartbeat's: the watch does not
  // shrink for it (members are counted whether they answer or not).
  EXPECT_EQ(WhyRegroup(job, {kW0, kW1, kW2}, {}, 0), "");
  // 5 do not split 12 and max_workers is 4: five answering workers mean 4.
  const std::string capped = WhyRegroup(job, {kW0, kW1, kW2}, {"/job:worker/task:3", "/job:worker/task:4"}, 0);
  EXPECT_TRUE(absl::StrContains(capped, "3 -> 4 workers")) << capped;
  EXPECT_FALSE(absl::StrContains(capped, "task:4")) << "only the one that joins is named: " << capped;
  // Asked for 5 with batch 12: 4 is the largest count that splits it.
  const std::string asked =
      WhyRegroup(ElasticJob(12, 1, 0), {kW0}, {kW1, kW2, "/job:worker/task:3", "/job:worker/task:4"}, 5);
  EXPECT_TRUE(absl::StrContains(asked, "1 -> 4 workers")) << asked;
}

}  // namespace
}  // namespace master
}  // namespace weft
