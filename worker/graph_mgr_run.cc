// GraphMgr's step path: Run, the checks of a RunGraph request before its
// step starts, and the iterations around the executor. Registration and
// sessions are in graph_mgr.cc.
#include "worker/graph_mgr.h"

#include <algorithm>
#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "common/status_macros.h"
#include "common/tensor_proto_coding.h"
#include "graph/attr.h"
#include "graph/device_name.h"
#include "runtime/trace_recorder.h"

namespace weft {
namespace worker {

namespace {

// The fed values, in the registered feeds' order `names`; each exactly once.
absl::Status GatherFeeds(const std::vector<std::string>& names, const RunGraphRequest& request,
                         std::vector<Tensor>* feeds) {
  feeds->resize(names.size());
  std::vector<bool> given(names.size(), false);
  for (const NamedTensorProto& send : request.send()) {
    auto it = std::find(names.begin(), names.end(), send.name());
    if (it == names.end()) {
      return absl::InvalidArgumentError(absl::StrCat("'", send.name(), "' is not a feed of graph ",
                                                     request.graph_handle(), " (feeds: ", absl::StrJoin(names, ", "),
                                                     ")"));
    }
    const size_t f = it - names.begin();
    if (given[f]) return absl::InvalidArgumentError(absl::StrCat("feed '", send.name(), "' is given twice"));
    given[f] = true;
    auto t = TensorFromProto(send.tensor());
    if (!t.ok()) return Annotate(t.status(), absl::StrCat("feed '", send.name(), "'"));
    (*feeds)[f] = *std::move(t);
  }
  for (size_t f = 0; f < given.size(); ++f) {
    if (!given[f]) return absl::InvalidArgumentError(absl::StrCat("feed '", names[f], "' has no value"));
  }
  return absl::OkStatus();
}

// Indices into the registered fetches `names` of those the request asks
// for (all of them when it names none).
absl::Status SelectFetches(const std::vector<std::string>& names, const RunGraphRequest& request,
                           std::vector<int>* wanted) {
  if (request.recv_key().empty()) {
    for (size_t i = 0; i < names.size(); ++i) wanted->push_back(static_cast<int>(i));
    return absl::OkStatus();
  }
  for (const std::string& key : request.recv_key()) {
    auto it = std::find(names.begin(), names.end(), key);
    if (it == names.end()) {
      return absl::InvalidArgumentError(absl::StrCat("'", key, "' is not a fetch of graph ", request.graph_handle(),
                                                     " (fetches: ", absl::StrJoin(names, ", "), ")"));
    }
    wanted->push_back(static_cast<int>(it - names.begin()));
  }
  return absl::OkStatus();
}

bool IsFloatScalar(const Tensor& t) { return t.dtype() == DType::kFloat32 && t.shape().dims().empty(); }

}  // namespace

absl::StatusOr<int> GraphMgr::CheckIterations(const RunGraphRequest& request) const {
  const int iterations = request.iterations() == 0 ? 1 : request.iterations();
  if (iterations < 0) {
    return absl::InvalidArgumentError(absl::StrCat("iterations must be positive, got ", request.iterations()));
  }
  if (iterations > limits_.max_iterations) {
    return absl::ResourceExhaustedError(absl::StrCat("RunGraph asks for ", iterations, " iterations, more than task ",
                                                     task_, "'s quota (--max_iterations=", limits_.max_iterations,
                                                     ")"));
  }
  int64_t last_step = 0;
  if (__builtin_add_overflow(request.step_id(), static_cast<int64_t>(iterations - 1), &last_step)) {
    return absl::InvalidArgumentError(
        absl::StrCat("step ids ", request.step_id(), " + ", iterations, " iterations overflow"));
  }
  return iterations;
}

absl::Status GraphMgr::RunIterations(Item& item, const std::vector<Tensor>& feeds, int64_t first_step,
                                     int iterations, Rendezvous* rendezvous, std::vector<Tensor>* fetched,
                                     TraceRecorder* trace) {
  absl::Status status;
  // A float32 scalar fetch (a loss) is the mean over the iterations, summed
  // in double; others are the last iteration's.
  std::vector<double> sums;
  for (int i = 0; i < iterations && status.ok(); ++i) {
    // Shutdown stops a long RunGraph between iterations, not after all of
    // them (one atomic load per iteration).
    if (cancelled_.load(std::memory_order_acquire)) {
      absl::MutexLock lock(&mu_);
      status = cancel_status_;
      break;
    }
    // A traced call records its first iteration's kernels: one step.
    status = item.executor->Run(feeds, fetched, first_step + i, rendezvous, i == 0 ? trace : nullptr);
    if (!status.ok() && iterations > 1) {
      status = Annotate(status, absl::StrCat("iteration ", i, " (step ", first_step + i, ")"));
    }
    if (!status.ok() || iterations == 1) continue;
    sums.resize(fetched->size(), 0.0);
    for (size_t f = 0; f < fetched->size(); ++f) {
      if (IsFloatScalar((*fetched)[f])) sums[f] += (*fetched)[f].data<float>()[0];
    }
  }
  if (status.ok() && iterations > 1) {
    for (size_t f = 0; f < fetched->size(); ++f) {
      if (IsFloatScalar((*fetched)[f])) {
        (*fetched)[f] = Tensor::Scalar<float>(static_cast<float>(sums[f] / iterations));
      }
    }
  }
  return status;
}

absl::Status GraphMgr::Run(const RunGraphRequest& request, Rendezvous* rendezvous, RunGraphResponse* response) {
  ASSIGN_OR_RETURN(std::shared_ptr<Item> item, Find(request.session_handle(), request.graph_handle()));
  ASSIGN_OR_RETURN(const int iterations, CheckIterations(request));
  // What RunsInline weighs: the whole call, feeds decoded and fetches encoded
  // included, since an inline run holds its RPC thread for all of it.
  const bool timed = iterations == 1 && !item->executor->MayWait();
  const int64_t started_ns = timed ? absl::GetCurrentTimeNanos() : 0;
  std::vector<Tensor> feeds;
  RETURN_IF_ERROR(GatherFeeds(item->feeds, request, &feeds));
  std::vector<int> wanted;
  RETURN_IF_ERROR(SelectFetches(item->fetches, request, &wanted));

  // Known as running, so that a new master can abort it (AdoptMaster).
  {
    absl::MutexLock lock(&mu_);
    running_.emplace(request.step_id(), item->handle);
  }
  struct Unmark {
    GraphMgr* self;
    int64_t step;
    const std::string* handle;
    ~Unmark() {
      absl::MutexLock lock(&self->mu_);
      auto range = self->running_.equal_range(step);
      for (auto it = range.first; it != range.second; ++it) {
        if (it->second == *handle) {
          self->running_.erase(it);
          break;
        }
      }
    }
  } unmark{this, request.step_id(), &item->handle};
  std::vector<Tensor> fetched;
  // `weft trace`: every kernel's span, and the call's own, on this task's
  // clock, with when the call arrived and answered for the master's
  // alignment (master/trace_merge.h).
  std::optional<TraceRecorder> trace;
  const int64_t arrived_us = request.trace() ? TraceRecorder::NowMicros() : 0;
  if (request.trace()) trace.emplace(response->mutable_trace());
  absl::Status ran = RunIterations(*item, feeds, request.step_id(), iterations, rendezvous, &fetched,
                                   trace.has_value() ? &*trace : nullptr);
  if (trace.has_value()) {
    const int64_t now = TraceRecorder::NowMicros();
    trace->Record("RunGraph " + item->handle, "RunGraph", task_, arrived_us, now, request.step_id());
    response->mutable_trace()->set_received_us(arrived_us);
    response->mutable_trace()->set_replied_us(now);
  }
  RETURN_IF_ERROR(ran);
  for (int i : wanted) {
    NamedTensorProto* out = response->add_recv();
    out->set_name(item->fetches[i]);
    TensorToProto(fetched[i], out->mutable_tensor());
  }
  if (timed) item->last_run_nanos.store(absl::GetCurrentTimeNanos() - started_ns, std::memory_order_relaxed);
  return absl::OkStatus();
}

bool GraphMgr::RunsInline(const RunGraphRequest& request) const {
  if (request.iterations() > 1 || request.trace()) return false;
  absl::StatusOr<std::shared_ptr<Item>> item = Find(request.session_handle(), request.graph_handle());
  if (!item.ok() || (*item)->executor->MayWait()) return false;
  const int64_t last = (*item)->last_run_nanos.load(std::memory_order_relaxed);
  return last >= 0 && last < limits_.inline_run_budget_nanos;
}

void GraphMgr::RunningOps(google::protobuf::RepeatedPtrField<RunningOp>* out) const {
  // The running steps' graphs, held so that their nodes outlive the reading.
  std::vector<std::shared_ptr<Item>> items;
  {
    absl::MutexLock lock(&mu_);
    for (const auto& [step, handle] : running_) {
      auto it = graphs_.find(handle);
      if (it != graphs_.end() && std::find(items.begin(), items.end(), it->second) == items.end()) {
        items.push_back(it->second);
      }
    }
  }
  std::vector<RunningKernel> kernels;
  for (const auto& item : items) {
    kernels.clear();
    item->executor->RunningKernels(&kernels);
    for (const RunningKernel& k : kernels) {
      RunningOp* op = out->Add();
      op->set_step_id(k.step_id);
      op->set_node(k.node->name());
      op->set_op(k.node->op());
      op->set_device(k.node->assigned_device().empty() ? k.node->requested_device() : k.node->assigned_device());
      op->set_elapsed_seconds(absl::ToDoubleSeconds(k.elapsed));
      if (k.node->op() != "_Recv") continue;
      absl::StatusOr<std::string> from = GetStringAttr(k.node->def(), "send_device");
      absl::StatusOr<DeviceName> device = from.ok() ? DeviceName::Parse(*from) : from.status();
      if (device.ok() && !device->job.empty()) op->set_peer_task(TaskName(device->job, device->task));
      op->set_tensor_name(GetStringAttrOr(k.node->def(), "tensor_name", "").value_or(""));
    }
  }
}

std::vector<int64_t> GraphMgr::RunningSteps() const {
  std::vector<int64_t> steps;
  absl::MutexLock lock(&mu_);
  for (const auto& [step, handle] : running_) {
    if (steps.empty() || steps.back() != step) steps.push_back(step);
  }
  for (const Queued& q : queued_) steps.push_back(q.run.request->step_id());
  std::sort(steps.begin(), steps.end());
  steps.erase(std::unique(steps.begin(), steps.end()), steps.end());
  return steps;
}

}  // namespace worker
}  // namespace weft
