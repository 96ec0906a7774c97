// StepRing: a task's record of its last RunGraph calls, each with its step
// id, start, duration and how it ended (the abort or failure that cut it
// short), kept in a ring of kCapacity entries: a small flight recorder.
// GetStepState returns it, and the worker logs it when a step fails, so the
// steps before a hang or an abort can be read afterwards.
//
// Begin and End take one mutex briefly and allocate nothing (End copies a
// failed step's status, a reference count). With more than kCapacity calls
// under way, the oldest entries are overwritten and their End is dropped.
//
// Thread-safety: thread-safe.
#ifndef WEFT_WORKER_STEP_RING_H_
#define WEFT_WORKER_STEP_RING_H_

#include <array>
#include <cstdint>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "google/protobuf/repeated_ptr_field.h"
#include "proto/worker_service.pb.h"

namespace weft {
namespace worker {

class StepRing {
 public:
  static constexpr int kCapacity = 8;

  // A RunGraph of `step_id` (`iterations` steps) starts at `now`; returns
  // the token its End passes.
  uint64_t Begin(int64_t step_id, int iterations, absl::Time now = absl::Now());
  void End(uint64_t token, const absl::Status& status, absl::Time now = absl::Now());

  // The entries, oldest first (a running one's seconds so far as of `now`).
  void Fill(google::protobuf::RepeatedPtrField<StepRecord>* out, absl::Time now = absl::Now()) const;
  // The same on one line, for the log: "step 5 0.012 s ok; step 6 running
  // 41.0 s; step 7 1.2 s ABORTED: ...".
  std::string Dump(absl::Time now = absl::Now()) const;

 private:
  struct Entry {
    uint64_t token = 0;  // 0: unused
    int64_t step_id = 0;
    int iterations = 1;
    absl::Time start;
    absl::Duration took;
    bool running = false;
    absl::Status status;
  };

  mutable absl::Mutex mu_;
  std::array<Entry, kCapacity> ring_ ABSL_GUARDED_BY(mu_);
  uint64_t next_token_ ABSL_GUARDED_BY(mu_) = 1;
};

}  // namespace worker
}  // namespace weft

#endif  // WEFT_WORKER_STEP_RING_H_
