// JobTelemetry: what the master records of its jobs for the monitoring
// port: the Prometheus series of each job (docs/observability.md) and a
// bounded history of (step, loss, accuracy) that the dashboard draws.
//
// OnProgress runs on a job's runner thread after every step: it takes one
// mutex and looks the job up, with no allocation but the history's
// amortised growth. The history keeps one point per `stride` steps and
// every evaluation, at most kMaxHistory points: when full, every other
// point is dropped (evaluations stay) and the stride doubles, so a long
// job's curve still spans all of it, evenly.
//
// Thread-safety: thread-safe.
#ifndef WEFT_MASTER_JOB_TELEMETRY_H_
#define WEFT_MASTER_JOB_TELEMETRY_H_

#include <chrono>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "common/metrics.h"
#include "proto/master_service.pb.h"
#include "runtime/training_loop.h"

namespace weft {
namespace master {

struct HistoryPoint {
  int64_t step = 0;
  double loss = 0;
  double accuracy = -1;  // -1: no evaluation at this point
  int64_t time_unix_ms = 0;
};

class JobTelemetry {
 public:
  static constexpr size_t kMaxHistory = 512;

  // Series go to `registry` (the process's by default).
  explicit JobTelemetry(metrics::Registry* registry = &metrics::Registry::Default());

  // After a step of job `job_id` (TrainProgress of runtime/training_loop.h).
  void OnProgress(const std::string& job_id, const TrainProgress& p);
  // After a published change of a job's status: recoveries, the end.
  void OnStatus(const JobStatus& s);
  // The job's curve points, oldest first; empty for an unknown job.
  std::vector<HistoryPoint> History(const std::string& job_id) const;

 private:
  struct PerJob {
    metrics::Counter* steps = nullptr;
    metrics::Histogram* step_seconds = nullptr;
    metrics::Gauge* loss = nullptr;
    metrics::Gauge* samples_per_second = nullptr;
    metrics::Gauge* accuracy = nullptr;
    metrics::Counter* recoveries = nullptr;
    metrics::Counter* membership_changes = nullptr;
    metrics::Gauge* workers = nullptr;
    int membership_changes_seen = 0;
    int64_t last_step = -1;
    std::chrono::steady_clock::time_point last_time;
    int restarts = 0;
    int64_t stride = 1;        // history keeps one point per `stride` steps
    int64_t last_bucket = -1;  // step / stride of the newest point
    double last_accuracy = -1;
    std::vector<HistoryPoint> history;
  };
  PerJob* FindOrAddLocked(const std::string& job_id) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void AppendLocked(PerJob* j, const HistoryPoint& point) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  metrics::Family<metrics::Counter>* const steps_;
  metrics::Family<metrics::Histogram>* const step_seconds_;
  metrics::Family<metrics::Gauge>* const loss_;
  metrics::Family<metrics::Gauge>* const samples_per_second_;
  metrics::Family<metrics::Gauge>* const accuracy_;
  metrics::Family<metrics::Counter>* const recoveries_;
  metrics::Family<metrics::Counter>* const membership_changes_;
  metrics::Family<metrics::Gauge>* const workers_;
  mutable absl::Mutex mu_;
  std::map<std::string, PerJob> jobs_ ABSL_GUARDED_BY(mu_);
};

}  // namespace master
}  // namespace weft

#endif  // WEFT_MASTER_JOB_TELEMETRY_H_
