#include "runtime/step_recording.h"

#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "common/logging.h"
#include "common/status_macros.h"

namespace weft {
namespace {

// Ops whose GPU kernels enqueue all of a step's work on the device's stream
// from their inputs, attributes and shapes, and keep nothing on the host
// that changes from step to step. A Variable's kernel looks its buffer up on
// the host, which a recording may skip: the buffer stays while the
// variables' generation does (StepRecording checks it).
const absl::flat_hash_set<std::string>& Recordable() {
  static const auto* ops = new absl::flat_hash_set<std::string>{
      "Add", "AddN", "ApplyAdam", "ApplyGradientDescent", "ApplyLossScale", "ApplyMomentum", "ApplyMovingAverage",
      "ArgMax", "Attention", "AttentionGrad", "AvgPool", "AvgPoolGrad", "BatchNorm", "BatchNormFromSums",
      "BatchNormFromSumsGrad", "BatchNormGrad", "BatchNormInference", "BatchNormSums", "BatchNormSumsGrad", "BiasAdd",
      "BiasAddGrad", "Cast", "Concat", "ConcatGrad", "ConcatRows", "Const", "Conv2D", "Conv2DBackpropFilter",
      "Conv2DBackpropInput", "CrossReplicaSum", "Dropout", "Embedding", "EmbeddingGrad", "Equal", "GRU", "GRUGrad",
      "GlobalAvgPool", "GlobalAvgPoolGrad", "GlobalNormScale", "Identity", "InTopK", "LSTM", "LSTMGrad", "LayerNorm",
      "LayerNormGrad", "MatMul", "MaxPool", "MaxPoolGrad", "Mean", "MeanGrad", "MicroBatch", "Mul", "Neg", "NoOp",
      "Relu", "ReluGrad", "Reshape", "ReshapeLike", "RowDot", "ScaleRows", "Sigmoid", "SigmoidGrad", "SliceRows",
      "Softmax", "SoftmaxGrad", "SparseSoftmaxCrossEntropyWithLogits", "Sub", "Sum", "SumGrad", "Tanh", "TanhGrad",
      "UnscaleGradients", "Variable"};
  return *ops;
}

// GPU kernels that may not be recorded, and why.
const absl::flat_hash_map<std::string, std::string>& NotRecordable() {
  static const auto* ops = new absl::flat_hash_map<std::string, std::string>{
      {"_Send", "it hands its value to another partition from the host"},
      {"_Recv", "it waits on the host for another partition's value"},
      {"CollectiveAllReduce", "it waits for the other replicas of its group"},
  };
  return *ops;
}

}  // namespace

bool RecordableOp(absl::string_view op) { return Recordable().contains(op); }

std::string WhyNotRecordableOp(absl::string_view op) {
  auto it = NotRecordable().find(op);
  return it == NotRecordable().end() ? "" : it->second;
}

absl::Status RecordableWhyNot(const ExecutorPlan& plan, const ExecutorOptions& options, Device* device) {
  if (device->host_memory()) return absl::FailedPreconditionError(absl::StrCat(device->name(), " cannot record"));
  if (options.inter_op_pool != nullptr) {
    return absl::FailedPreconditionError("it runs kernels on a thread pool, not one after another");
  }
  if (options.containers) {
    return absl::FailedPreconditionError("its variables live in containers, whose buffers it cannot follow");
  }
  if (plan.num_async > 0) {
    for (const NodeItem& item : plan.items) {
      if (item.kernel->AsAsync() != nullptr) {
        return absl::FailedPreconditionError(
            absl::StrCat("node '", item.node->name(), "' (", item.node->op(), ") finishes asynchronously"));
      }
    }
  }
  for (const NodeItem& item : plan.items) {
    if (RecordableOp(item.node->op())) continue;
    std::string why = WhyNotRecordableOp(item.node->op());
    return absl::FailedPreconditionError(absl::StrCat("node '", item.node->name(), "' (", item.node->op(), ") ",
                                                      why.empty() ? "is not known to be recordable" : why));
  }
  return absl::OkStatus();
}

StepRecording::Action StepRecording::Next(absl::Span<const Tensor> feeds) {
  // Decided with no recording or replay under way, which the decision may
  // drop; kept for the step when it records or replays.
  step_mu_.Lock();
  const Action action = Decide(feeds);
  if (action == Action::kRun) step_mu_.Unlock();
  return action;
}

StepRecording::Action StepRecording::Decide(absl::Span<const Tensor> feeds) {
  absl::MutexLock lock(&mu_);
  if (disabled_) return Action::kRun;
  for (const Tensor& f : feeds) {
    if (!f.on_host()) return Action::kRun;  // a caller's device tensor: no buffer of ours to copy into
  }
  bool same = feeds.size() == last_shapes_.size();
  for (size_t i = 0; same && i < feeds.size(); ++i) same = feeds[i].shape() == last_shapes_[i];
  const uint64_t generation = resources_->variables_generation();
  if (graph_ != nullptr && generation != generation_) {
    // A variable's buffer changed (a restore): the recording reads the old one.
    graph_.reset();
    feeds_.clear();
    fetch_values_.clear();
    staged_.clear();
    staged_from_.clear();
    steady_ = 0;
  }
  if (graph_ != nullptr) return same ? Action::kReplay : Action::kRun;
  if (!same) {
    last_shapes_.clear();
    for (const Tensor& f : feeds) last_shapes_.push_back(f.shape());
    steady_ = 0;
  } else if (generation != last_generation_) {
    steady_ = 0;
  }
  return steady_ < 2 ? Action::kRun : Action::kRecord;
}

void StepRecording::Ran() {
  absl::MutexLock lock(&mu_);
  last_generation_ = resources_->variables_generation();
  ++steady_;
}

void StepRecording::Recorded(std::unique_ptr<DeviceStepGraph> graph, std::vector<Tensor> feeds,
                             std::vector<Tensor> fetch_values) {
  {
    absl::MutexLock lock(&mu_);
    graph_ = std::move(graph);
    feeds_ = std::move(feeds);
    fetch_values_ = std::move(fetch_values);
    generation_ = resources_->variables_generation();
    ++recordings_;
  }
  step_mu_.Unlock();
}

void StepRecording::Abandoned(const absl::Status& why, absl::string_view what) {
  if (!why.ok()) {
    Logger("executor")->warn("{}: steps run kernel by kernel; recording one failed: {}", std::string(what),
                             why.ToString());
    absl::MutexLock lock(&mu_);
    disabled_ = true;
  }
  step_mu_.Unlock();
}

void StepRecording::SetNextFeeds(std::vector<Tensor> next) {
  absl::MutexLock lock(&mu_);
  next_ = std::move(next);
}

bool StepRecording::StagedFor(absl::Span<const Tensor> feeds) const {
  if (staged_from_.size() != feeds.size()) return false;
  for (size_t f = 0; f < feeds.size(); ++f) {
    if (staged_from_[f].raw_data() != feeds[f].raw_data() || staged_from_[f].shape() != feeds[f].shape() ||
        staged_from_[f].dtype() != feeds[f].dtype()) {
      return false;
    }
  }
  return true;
}

absl::Status StepRecording::Replay(absl::Span<const Tensor> feeds, absl::Span<const std::string> feed_names,
                                   std::vector<Tensor>* fetches, absl::Span<const std::string> fetch_names) {
  // step_mu_ keeps the recording's members as they are; mu_ guards them
  // against the readers of counts and SetNextFeeds.
  absl::MutexLock lock(&mu_);
  absl::Status status = [&]() -> absl::Status {
    const std::string where = absl::StrCat("recorded step on ", device_->name());
    std::vector<Tensor> next = std::move(next_);
    next_.clear();
    bool ahead = next.size() == feeds_.size();
    for (size_t f = 0; ahead && f < next.size(); ++f) {
      ahead = next[f].on_host() && next[f].dtype() == feeds_[f].dtype() && next[f].shape() == feeds_[f].shape();
    }
    {
      // Whatever goes on the device's stream goes there under its mutex: a
      // step being recorded elsewhere must not capture it.
      absl::MutexLock device_lock(device_->compute_mutex());
      device_->BindThread();
      if (StagedFor(feeds)) {
        // Copied during the last step: on the device into the kept buffers.
        RETURN_IF_ERROR(Annotate(device_->FinishCopyAhead(), where));
        for (size_t f = 0; f < feeds.size(); ++f) {
          absl::Status s = device_->CopyOnDevice(staged_[f], &feeds_[f]);
          if (!s.ok()) return Annotate(s, absl::StrCat("feed '", feed_names[f], "'"));
        }
        ++staged_replays_;
      } else {
        for (size_t f = 0; f < feeds.size(); ++f) {
          absl::Status s = device_->CopyFromHostInto(feeds[f], &feeds_[f]);
          if (!s.ok()) return Annotate(s, absl::StrCat("feed '", feed_names[f], "'"));
        }
      }
      staged_from_.clear();
      // The mark: the copies ahead wait for the device copies above, not for the step.
      if (ahead) RETURN_IF_ERROR(Annotate(device_->MarkCopyAhead(), where));
      RETURN_IF_ERROR(Annotate(graph_->Launch(), where));
    }
    if (ahead) {
      // The host's part (staging into pinned memory) overlaps the step.
      if (staged_.empty()) {
        for (const Tensor& kept : feeds_) {
          absl::StatusOr<Tensor> t = Tensor::Allocate(kept.dtype(), kept.shape(), device_->allocator());
          if (!t.ok()) return Annotate(t.status(), where);
          staged_.push_back(*std::move(t));
        }
      }
      for (size_t f = 0; f < next.size(); ++f) {
        absl::Status s = device_->StartCopyAhead(next[f], &staged_[f]);
        if (!s.ok()) return Annotate(s, absl::StrCat("feed '", feed_names[f], "' of the next step"));
      }
      staged_from_ = std::move(next);
    }
    if (fetches != nullptr) fetches->resize(fetch_values_.size());
    for (size_t f = 0; f < fetch_values_.size(); ++f) {
      // Waits for the launch, enqueued before the copy.
      absl::StatusOr<Tensor> host = device_->CopyToHost(fetch_values_[f]);
      if (!host.ok()) return Annotate(host.status(), absl::StrCat("fetch '", fetch_names[f], "'"));
      if (fetches != nullptr) (*fetches)[f] = *std::move(host);
    }
    if (fetch_values_.empty()) RETURN_IF_ERROR(Annotate(device_->Synchronize(), where));
    return absl::OkStatus();
  }();
  // A failed step leaves nothing staged that the next one could trust.
  if (!status.ok()) staged_from_.clear();
  ++replays_;
  step_mu_.Unlock();
  return status;
}

int64_t StepRecording::replays() const {
  absl::MutexLock lock(&mu_);
  return replays_;
}

int64_t StepRecording::staged_replays() const {
  absl::MutexLock lock(&mu_);
  return staged_replays_;
}

int64_t StepRecording::recordings() const {
  absl::MutexLock lock(&mu_);
  return recordings_;
}

}  // namespace weft
