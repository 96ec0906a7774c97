// The cluster the elastic-job tests (elastic_test.cc, elastic_ps_test.cc)
// run on: a master and three workers (and a ps when asked) as separate
// `weft` processes on loopback, over mTLS, reading a slice of
// Fashion-MNIST, with what those tests share to watch a job and read its
// logs and checkpoints.
//
// Thread-safety: a fixture is used by its test's thread only.
#ifndef WEFT_TESTS_ELASTIC_FIXTURE_H_
#define WEFT_TESTS_ELASTIC_FIXTURE_H_

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "client/grpc_master_client.h"
#include "gtest/gtest.h"
#include "job/job_spec.h"
#include "tests/test_checkpoints.h"
#include "tests/test_cluster.h"
#include "tests/test_tls.h"

namespace weft {
namespace testing {

inline constexpr char kFashionMnist[] = "/usr/share/datasets/fashion-mnist";
inline constexpr absl::Duration kElasticJobDeadline = absl::Seconds(240);

std::string ReadText(const std::string& path);

// The elastic tests' job `name`: a small MLP on the Fashion-MNIST slice
// (6000 examples), batch 96 (32 per replica of 3, 48 of 2), `steps` steps,
// with `strategy` (the fields of its strategy { ... }), checkpoints into
// `checkpoint_dir`, heartbeats (and the membership watch) every 200 ms, and
// elastic { min_workers: 2 max_workers: 3 wait_seconds: 1 }.
JobSpec ElasticJobSpec(const std::string& name, const std::string& strategy, int steps,
                       const std::string& checkpoint_dir);

// The step counter each task saved: "elastic/step" of its shard, by task.
std::map<std::string, int64_t> StepCounters(const SavedCheckpoint& c);

class ElasticFixture : public ::testing::Test {
 protected:
  // `with_ps`: the cluster has a ps task ("ps-0") too.
  explicit ElasticFixture(bool with_ps = false) : with_ps_(with_ps) {}

  // Skips when Fashion-MNIST is not installed; else starts the cluster.
  void SetUp() override;
  // Every daemon still running must stop on SIGTERM.
  void TearDown() override;

  std::string Path(const std::string& name) const;
  std::string LogPath(const std::string& proc) const { return Path(proc + ".log"); }
  // A daemon named `name` running `args` with its certificate's flags and
  // the data root, not started.
  TestDaemon* Add(const std::string& name, std::vector<std::string> args);
  // The master's log lines that contain `what`.
  std::vector<std::string> MasterLogLines(const std::string& what) const;
  // Polls the job until `until` holds or it ends; `what` names the wait.
  JobStatus PollUntil(const std::string& id, const std::string& what,
                      const std::function<bool(const JobStatus&)>& until);
  JobStatus WatchToEnd(const std::string& id);

  std::string tag_;
  std::mt19937_64 rng_;
  std::unique_ptr<TestTls> tls_;
  std::map<std::string, std::unique_ptr<TestDaemon>> daemons_;
  std::unique_ptr<MasterClient> client_;

 private:
  const bool with_ps_;
};

}  // namespace testing
}  // namespace weft

#endif  // WEFT_TESTS_ELASTIC_FIXTURE_H_
