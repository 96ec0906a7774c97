// Step recording: a GPU step's kernels enqueued once into a CUDA graph and
// launched again as one graph on later steps (ExecutorOptions::
// record_device_steps).
//
// A step launches one kernel after another from the host: at the examples'
// sizes the GPU waits on those launches more than it computes. Recorded, a
// step costs the host a copy per feed, one graph launch and a copy per
// fetch. What may be recorded is narrow on purpose:
//  * every node's op is one whose GPU kernel does all of its per-step work on
//    the device, from its inputs, attributes, shapes and the step id the
//    executor writes to the device before each step (RecordableOp: Dropout
//    makes its mask's key from that id; not _Send/_Recv or
//    CollectiveAllReduce, which wait for other partitions or tasks);
//  * no kernel is asynchronous, variables live in the executor's resources
//    (no containers), and the device can record (a GPU).
// An executor that cannot record says why once (RecordableWhyNot) and runs
// every step as before.
//
// When: a step whose feeds have the shapes of the step before, which
// changed no variable's buffer (ResourceMgr::variables_generation), is
// recorded — the third of a steady run: the first creates the variables and
// tunes cuDNN, the second shows the shapes hold. The recording keeps the
// device buffers of the feeds and fetches and owns, through the allocator,
// every block its kernels use. Later steps whose feeds have the recorded
// shapes replay it: feeds copied into the kept buffers (on the copy
// stream, ordered after the previous launch's reads), one launch, fetches
// copied out, then each kernel's CheckRecordedLaunches (a bad label is the
// step's error, naming its node, as without recording). A step with other
// shapes (an epoch's short last batch) runs kernel by kernel beside it. When
// a variable's buffer changes (a restore), the recording is dropped and a
// new one made once the steps are steady again. A recording that CUDA
// refuses (a kernel that waited for the device while captured) ends
// recording for the executor, logged with CUDA's reason; the step then runs
// kernel by kernel.
//
// Internal to the executor (executor.cc).
//
// Thread-safety: thread-safe; recording and replaying steps run one at a
// time.
#ifndef WEFT_RUNTIME_STEP_RECORDING_H_
#define WEFT_RUNTIME_STEP_RECORDING_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/types/span.h"
#include "common/tensor.h"
#include "runtime/device.h"
#include "runtime/executor_plan.h"
#include "runtime/resource_mgr.h"

namespace weft {

// True when `op`'s GPU kernel may be recorded (see above).
bool RecordableOp(absl::string_view op);
// Why `op`'s GPU kernel may not be recorded; "" for a recordable op or one
// with no GPU kernel.
std::string WhyNotRecordableOp(absl::string_view op);

// OK when a step of `plan` on `device` may be recorded; otherwise
// FAILED_PRECONDITION naming the first node (and op) or option at fault.
absl::Status RecordableWhyNot(const ExecutorPlan& plan, const ExecutorOptions& options, Device* device);

class StepRecording {
 public:
  enum class Action { kRun, kRecord, kReplay };

  // `device` and `resources` (the variables the plan's kernels use) outlive
  // this.
  StepRecording(Device* device, ResourceMgr* resources) : device_(device), resources_(resources) {}

  // What the step with `feeds` does. kRecord and kReplay hold the recording
  // for the step: the caller then calls Recorded (or Abandoned) or Replay.
  Action Next(absl::Span<const Tensor> feeds) ABSL_NO_THREAD_SAFETY_ANALYSIS;
  // A step run kernel by kernel ended: notes the variables' generation, so
  // that the next step with the same shapes may be recorded.
  void Ran();

  // After kRecord: `graph` holds the step's work (not yet launched); `feeds`
  // are the device buffers it reads and `fetch_values` the device tensors it
  // writes, kept while the recording lives.
  void Recorded(std::unique_ptr<DeviceStepGraph> graph, std::vector<Tensor> feeds, std::vector<Tensor> fetch_values)
      ABSL_NO_THREAD_SAFETY_ANALYSIS;
  // After kRecord: no recording came of it. `why` OK: the step failed (and
  // will run kernel by kernel to say how); otherwise recording ends for good,
  // logged with `why` under `what` (the executor's description).
  void Abandoned(const absl::Status& why, absl::string_view what) ABSL_NO_THREAD_SAFETY_ANALYSIS;

  // The host feeds of the step after the next replay, when the caller knows
  // them: that replay copies them to the device while it computes (into
  // buffers of the recording's own, then on the device into the kept ones
  // before the next launch), and the next replay whose feeds are these very
  // tensors copies nothing from the host. Held until the next replay.
  void SetNextFeeds(std::vector<Tensor> next);

  // After kReplay: copies `feeds` in, launches the recording and copies the
  // fetches out, named `fetch_names` in errors.
  absl::Status Replay(absl::Span<const Tensor> feeds, absl::Span<const std::string> feed_names,
                      std::vector<Tensor>* fetches, absl::Span<const std::string> fetch_names)
      ABSL_NO_THREAD_SAFETY_ANALYSIS;

  // Steps replayed and recordings made so far (tests, logs).
  int64_t replays() const;
  int64_t recordings() const;
  // Replays whose feeds had been copied ahead.
  int64_t staged_replays() const;

 private:
  Action Decide(absl::Span<const Tensor> feeds) ABSL_EXCLUSIVE_LOCKS_REQUIRED(step_mu_);
  // True when the last replay copied `feeds` ahead.
  bool StagedFor(absl::Span<const Tensor> feeds) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  Device* const device_;
  ResourceMgr* const resources_;
  // Held from Next (kRecord, kReplay) to Recorded/Abandoned/Replay's end.
  absl::Mutex step_mu_;
  mutable absl::Mutex mu_;
  bool disabled_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<TensorShape> last_shapes_ ABSL_GUARDED_BY(mu_);
  uint64_t last_generation_ ABSL_GUARDED_BY(mu_) = ~uint64_t{0};
  int steady_ ABSL_GUARDED_BY(mu_) = 0;  // steps in a row with last_shapes_, no variable changed
  std::unique_ptr<DeviceStepGraph> graph_ ABSL_GUARDED_BY(mu_);
  std::vector<Tensor> feeds_ ABSL_GUARDED_BY(mu_);
  std::vector<Tensor> fetch_values_ ABSL_GUARDED_BY(mu_);
  uint64_t generation_ ABSL_GUARDED_BY(mu_) = 0;  // the variables' when recorded
  // Copying ahead: the next step's host feeds (SetNextFeeds), the device
  // buffers they go to, and which host tensors those buffers now hold.
  std::vector<Tensor> next_ ABSL_GUARDED_BY(mu_);
  std::vector<Tensor> staged_ ABSL_GUARDED_BY(mu_);
  std::vector<Tensor> staged_from_ ABSL_GUARDED_BY(mu_);
  int64_t replays_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t staged_replays_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t recordings_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace weft

#endif  // WEFT_RUNTIME_STEP_RECORDING_H_
