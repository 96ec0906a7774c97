#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "runtime/executor_impl.h"
#include "runtime/kernel_call.h"

namespace weft {

std::optional<absl::Status> Executor::Impl::RecordStep(absl::Span<const Tensor> feeds, std::vector<Tensor>* fetches,
                                                       int64_t step_id) {
  const std::string what = absl::StrCat("executor on ", device->name());
  // The feeds' device buffers, which the recording reads on every replay.
  std::vector<Tensor> kept;
  for (size_t f = 0; f < feeds.size(); ++f) {
    absl::StatusOr<Tensor> t = device->CopyFromHost(feeds[f]);
    if (!t.ok()) {
      recording->Abandoned(absl::OkStatus(), what);
      return Annotate(t.status(), absl::StrCat("feed '", options.feeds[f], "'"));
    }
    kept.push_back(*std::move(t));
  }
  std::unique_ptr<RunState> state = StartState(kept, step_id);
  RunState* s = state.get();
  s->device_locked = true;
  absl::StatusOr<std::unique_ptr<DeviceStepGraph>> graph;
  {
    // No other step's kernel may enqueue on the stream while it is captured.
    absl::MutexLock lock(device->compute_mutex());
    device->BindThread();
    const absl::Status begin = device->BeginStepCapture();
    if (!begin.ok()) {
      graph = begin;
    } else {
      Drive(s);
      graph = device->EndStepCapture();
    }
  }
  absl::Status step;
  {
    absl::MutexLock lock(&s->mu);
    step = s->status;
  }
  absl::Status launched = graph.ok() && step.ok() ? (*graph)->Launch() : absl::OkStatus();
  if (!graph.ok() || !step.ok() || !launched.ok()) {
    // Nothing ran: the step runs kernel by kernel, which also reports its own
    // error; a recording CUDA refused ends recording.
    ReleaseState(std::move(state));
    if (graph.ok()) graph->reset();  // waits for a failed launch
    recording->Abandoned(!graph.ok() ? graph.status() : launched, what);
    return std::nullopt;
  }
  std::vector<Tensor> fetch_values;
  for (const InputSource& src : fetch_sources) {
    fetch_values.push_back(src.fed ? s->feeds[src.index] : s->slots[src.index]);
  }
  absl::Status status = EndStep(s, fetches);
  ReleaseState(std::move(state));
  recording->Recorded(*std::move(graph), std::move(kept), std::move(fetch_values));
  return status;
}

absl::Status Executor::Impl::WriteStepId(int64_t step_id) {
  if (!step_on_device.IsInitialized()) return absl::OkStatus();
  device->BindThread();
  return Annotate(device->CopyFromHostInto(Tensor::Scalar<int64_t>(step_id), &step_on_device),
                  absl::StrCat("step id ", step_id, " on ", device->name()));
}

absl::Status Executor::Impl::ReplayStep(absl::Span<const Tensor> feeds, std::vector<Tensor>* fetches) {
  RETURN_IF_ERROR(recording->Replay(feeds, options.feeds, fetches, options.fetches));
  for (NodeItem& item : items) {
    absl::Status s = item.kernel->CheckRecordedLaunches();
    if (!s.ok()) return NodeError(*item.node, s);
  }
  return absl::OkStatus();
}

}  // namespace weft
