#include "tests/elastic_fixture.h"

#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <fstream>
#include <iterator>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "common/test_util.h"
#include "runtime/data/test_files.h"

namespace weft {
namespace testing {

std::string ReadText(const std::string& path) {
  std::ifstream in(path);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

JobSpec ElasticJobSpec(const std::string& name, const std::string& strategy, int steps,
                       const std::string& checkpoint_dir) {
  auto job = ParseJob(absl::StrCat("name: \"", name, R"("
      model { input_shape: [784] num_classes: 10
              layer { dense { units: 64 activation: RELU } } layer { dense { units: 10 } } }
      dataset { dir: ")", kFashionMnist, R"(" train_limit: 6000 test_limit: 2000 }
      optimizer { adam { learning_rate: 0.002 } } seed: 5 intra_op_threads: 1
      batch_size: 96 steps: )", steps, " strategy { ", strategy, R"( }
      checkpoint { dir: ")", checkpoint_dir, R"(" }
      recovery { heartbeat_ms: 200 }
      elastic { min_workers: 2 max_workers: 3 wait_seconds: 1 })"),
                      name);
  EXPECT_TRUE(job.ok()) << job.status();
  return *job;
}

std::map<std::string, int64_t> StepCounters(const SavedCheckpoint& c) {
  std::map<std::string, int64_t> out;
  for (const auto& [key, v] : c.variables) {
    const size_t bar = key.find('|');
    if (key.substr(bar + 1) != "elastic/step") continue;
    int64_t step = -1;
    if (v.bytes.size() == sizeof(step)) std::memcpy(&step, v.bytes.data(), sizeof(step));
    out[key.substr(0, bar)] = step;
  }
  return out;
}

void ElasticFixture::SetUp() {
  if (::access(kFashionMnist, R_OK) != 0) {
    GTEST_SKIP() << kFashionMnist << " is not installed (make test installs it)";
  }
  tag_ = absl::StrCat(::testing::UnitTest::GetInstance()->current_test_info()->name(), "-", ::getpid());
  // Parameterized tests' names hold a '/'.
  std::replace(tag_.begin(), tag_.end(), '/', '-');
  rng_ = TestRng();
  auto tls = TestTls::Create(Path("tls"));
  ASSERT_TRUE(tls.ok()) << tls.status();
  tls_ = std::make_unique<TestTls>(*std::move(tls));
  const std::string root = "--checkpoint_root=" + ::testing::TempDir();
  std::vector<std::string> names;
  for (int i = 0; i < 3; ++i) {
    names.push_back(absl::StrCat("worker-", i));
    Add(names.back(), {"worker", absl::StrCat("--task=worker:", i), root});
  }
  if (with_ps_) {
    names.push_back("ps-0");
    Add("ps-0", {"ps", "--task=ps:0", root});
  }
  for (const std::string& name : names) ASSERT_TRUE(daemons_.at(name)->Launch().ok()) << name;
  std::vector<std::string> workers, ps;
  for (const std::string& name : names) {
    TestDaemon* d = daemons_.at(name).get();
    absl::Status s = d->AwaitPort();
    ASSERT_TRUE(s.ok()) << s;
    (absl::StartsWith(name, "ps-") ? ps : workers).push_back(d->address());
  }
  std::string cluster = "--cluster=worker=" + absl::StrJoin(workers, ",");
  if (!ps.empty()) absl::StrAppend(&cluster, ";ps=", absl::StrJoin(ps, ","));
  TestDaemon* master = Add("master", {"master", cluster, root});
  absl::Status s = master->Start();
  ASSERT_TRUE(s.ok()) << s;
  client_ = MasterClient::Create(master->address(), tls_->ClientOptions());
  std::vector<TestDaemon*> all;
  for (auto& [name, d] : daemons_) all.push_back(d.get());
  ASSERT_TRUE(WaitForCluster(client_.get(), static_cast<int>(names.size()), all));
}

void ElasticFixture::TearDown() {
  for (auto& [name, d] : daemons_) {
    if (d->process()->Running()) ExpectStopsOnSigterm(d.get());
  }
}

std::string ElasticFixture::Path(const std::string& name) const {
  return data::testing::TempPath(absl::StrCat(tag_, "-", name));
}

TestDaemon* ElasticFixture::Add(const std::string& name, std::vector<std::string> args) {
  for (const std::string& flag : tls_->DaemonFlags(DaemonIdentity(name))) args.push_back(flag);
  args.push_back(absl::StrCat("--data_root=", kFashionMnist));
  auto& d = daemons_[name];
  d = std::make_unique<TestDaemon>(name, std::move(args), LogPath(name));
  return d.get();
}

std::vector<std::string> ElasticFixture::MasterLogLines(const std::string& what) const {
  std::vector<std::string> out;
  for (absl::string_view line : absl::StrSplit(ReadText(LogPath("master")), '\n')) {
    if (absl::StrContains(line, what)) out.emplace_back(line);
  }
  return out;
}

JobStatus ElasticFixture::PollUntil(const std::string& id, const std::string& what,
                                    const std::function<bool(const JobStatus&)>& until) {
  return PollJobUntil(client_.get(), id, kElasticJobDeadline, what, until);
}

JobStatus ElasticFixture::WatchToEnd(const std::string& id) {
  return WatchJobToEnd(client_.get(), id, kElasticJobDeadline, [](const JobStatus&) {});
}

}  // namespace testing
}  // namespace weft
