// StepTimes: each task's recent time per training step, as the master
// measures it (a RunGraph's duration over its iterations), and the rule
// that flags a straggler.
//
// A task keeps its last kWindow RunGraph times; p50 and p99 are the nearest
// ranks of that window. Straggler: a task among the peers (the tasks that
// hold replicas: parameter servers wait on every worker, so they are
// measured but never compared) with at least kMinSteps times whose p50
// exceeds kStragglerRatio times the median p50 of the other peers, and by
// at least kMinGapSeconds (so that sub-millisecond jitter flags no one).
// The time is the RunGraph's as the master sees it: under a lockstep
// all-reduce every task waits for the slowest, so a slow replica shows in
// everyone's time and the hang diagnosis (master/hang_diagnosis.h) is what
// names it; under parameter servers and with uneven input it shows here.
//
// Thread-safety: not thread-safe (StepWatch guards it).
#ifndef WEFT_MASTER_STEP_TIMES_H_
#define WEFT_MASTER_STEP_TIMES_H_

#include <array>
#include <set>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "proto/master_service.pb.h"

namespace weft {
namespace master {

inline constexpr int kStepTimeWindow = 128;
inline constexpr int kStragglerMinSteps = 5;
inline constexpr double kStragglerRatio = 1.5;
inline constexpr double kStragglerMinGapSeconds = 0.001;

class StepTimes {
 public:
  // `task` took `seconds` per step. Allocates only for a task's first time.
  void Add(const std::string& task, double seconds);
  // Every task's p50, p99 and count, sorted by task, with stragglers among
  // `peers` flagged (MarkStragglers); an empty `peers` compares every task.
  std::vector<TaskStepTime> Summaries(const std::set<std::string>& peers) const;
  bool empty() const { return tasks_.empty(); }

 private:
  struct Window {
    std::array<double, kStepTimeWindow> seconds{};
    int size = 0;
    int next = 0;
  };
  absl::flat_hash_map<std::string, Window> tasks_;
};

// The nearest-rank percentile `q` (0 < q <= 1) of `values`; 0 when empty.
double Percentile(std::vector<double> values, double q);

// The median of `values` (the mean of the middle two for an even count); 0
// when empty.
double Median(std::vector<double> values);

// Sets `straggler` on the entries of `times` that straggle among the peers
// (see above); entries whose task is not in `peers` (unless it is empty)
// are left false.
void MarkStragglers(const std::set<std::string>& peers, std::vector<TaskStepTime>* times);

}  // namespace master
}  // namespace weft

#endif  // WEFT_MASTER_STEP_TIMES_H_
