#include "runtime/executor.h"

#include <algorithm>
#include <atomic>
#include <optional>
#include <string>

#include "absl/container/inlined_vector.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "common/logging.h"
#include "common/status_macros.h"
#include "runtime/executor_impl.h"
#include "runtime/executor_plan.h"
#include "runtime/kernel_call.h"
#include "runtime/op_kernel.h"
#include "runtime/rendezvous.h"
#include "runtime/step_recording.h"
#include "runtime/trace_recorder.h"

namespace weft {

std::unique_ptr<RunState> Executor::Impl::AcquireState(int64_t step_id) {
  {
    absl::MutexLock lock(&pool_mu);
    if (!free_states.empty()) {
      auto s = std::move(free_states.back());
      free_states.pop_back();
      s->step_id = step_id;
      active.push_back(s.get());
      return s;
    }
  }
  auto s = std::make_unique<RunState>();
  s->step_id = step_id;
  s->started_ns.reset(new std::atomic<int64_t>[items.size()]());
  s->trace_start_us.reset(new int64_t[items.size()]());
  s->slots.resize(num_slots);
  s->pending.reset(new std::atomic<int>[items.size()]);
  s->async_calls.resize(num_async);
  s->async_finished.reset(new std::atomic<bool>[num_async]);
  s->slot_refs.reset(new std::atomic<int>[num_slots]);
  s->stack.reserve(items.size());
  absl::MutexLock lock(&pool_mu);
  active.push_back(s.get());
  return s;
}

void Executor::Impl::ReleaseState(std::unique_ptr<RunState> state) {
  for (Tensor& t : state->slots) t = Tensor();
  state->rendezvous = nullptr;
  state->aborted = false;
  state->device_locked = false;
  {
    absl::MutexLock lock(&state->mu);
    state->status = absl::OkStatus();
  }
  absl::MutexLock lock(&pool_mu);
  active.erase(std::find(active.begin(), active.end(), state.get()));
  free_states.push_back(std::move(state));
}

void Executor::Impl::Abort(RunState* s, const absl::Status& status) {
  {
    absl::MutexLock lock(&s->mu);
    if (s->status.ok()) s->status = status;
    s->aborted = true;
  }
  // Outside the lock: the rendezvous runs the waiters' callbacks.
  if (s->rendezvous != nullptr) s->rendezvous->StartAbort(status);
}

bool Executor::Impl::Process(RunState* s, int i, absl::InlinedVector<int, 8>* ready) {
  NodeItem& item = items[i];
  // After an abort only commit nodes run (kCommitAttr); the flag is read
  // only then, so a step that does not abort pays nothing for it.
  if (s->aborted.load(std::memory_order_relaxed) && !item.commit) return true;
  OpKernelContext::Params p;
  p.node = item.node;
  p.device = device;
  p.step_id = s->step_id;
  p.rendezvous = s->rendezvous;
  p.resources = options.resources;
  p.collectives = options.collectives;
  if (step_on_device.IsInitialized()) p.device_step_id = step_on_device.data<int64_t>();
  p.outputs = absl::MakeSpan(s->slots.data() + item.first_slot, item.num_outputs);
  s->started_ns[i].store(CoarseMonotonicNanos(), std::memory_order_relaxed);
  if (s->trace != nullptr) s->trace_start_us[i] = TraceRecorder::NowMicros();
  if (AsyncOpKernel* async = item.kernel->AsAsync()) {
    AsyncCall& call = s->async_calls[item.async_index];
    call.inputs.clear();
    for (const InputSource& src : item.inputs) {
      call.inputs.push_back(src.fed ? &s->feeds[src.index] : &s->slots[src.index]);
    }
    p.inputs = absl::MakeConstSpan(call.inputs);
    call.ctx.emplace(p);
    std::atomic<bool>& finished = s->async_finished[item.async_index];
    finished.store(false, std::memory_order_relaxed);
    absl::Status thrown = CallKernel(*item.node, [&] {
      async->ComputeAsync(&*call.ctx, [this, s, i, &finished] {
        if (!finished.exchange(true, std::memory_order_acq_rel)) OnAsyncDone(s, i);
      });
    });
    // A kernel that threw may or may not have called `done`; `finished`
    // decides which of the two ends the call.
    if (!thrown.ok() && !finished.exchange(true, std::memory_order_acq_rel)) {
      call.ctx->SetStatus(thrown);
      OnAsyncDone(s, i);
    }
    return false;
  }
  absl::InlinedVector<const Tensor*, 8> inputs;
  for (const InputSource& src : item.inputs) inputs.push_back(src.fed ? &s->feeds[src.index] : &s->slots[src.index]);
  p.inputs = absl::MakeConstSpan(inputs);
  OpKernelContext ctx(p);
  if (absl::Mutex* mu = s->device_locked ? nullptr : device->compute_mutex()) {
    // A GPU: one stream and one set of library handles, so one kernel at a time.
    absl::MutexLock lock(mu);
    device->BindThread();
    ctx.SetStatus(CallKernel(*item.node, [&] { item.kernel->Compute(&ctx); }));
  } else {
    ctx.SetStatus(CallKernel(*item.node, [&] { item.kernel->Compute(&ctx); }));
  }
  Finish(s, i, ctx.status(), ready);
  return true;
}

void Executor::Impl::Finish(RunState* s, int i, const absl::Status& kernel_status,
                            absl::InlinedVector<int, 8>* ready) {
  NodeItem& item = items[i];
  s->started_ns[i].store(0, std::memory_order_relaxed);
  if (s->trace != nullptr) {
    s->trace->Record(item.node->name(), item.node->op(), device->name(), s->trace_start_us[i],
                     TraceRecorder::NowMicros(), s->step_id);
  }
  absl::Status status = kernel_status;
  if (status.ok()) {
    for (int k = 0; k < item.num_outputs; ++k) {
      const Tensor& out = s->slots[item.first_slot + k];
      if (!out.IsInitialized() || out.dtype() != item.node->output_type(k)) {
        status = absl::InternalError(absl::StrCat("kernel produced ", out.IsInitialized() ? "a " : "no ",
                                                  out.IsInitialized() ? DTypeName(out.dtype()) : "", " output ", k,
                                                  " where the graph declares ", DTypeName(item.node->output_type(k))));
        break;
      }
    }
  }
  if (!status.ok()) Abort(s, NodeError(*item.node, status));
  // Release inputs whose last consumer this was.
  for (const InputSource& src : item.inputs) {
    if (!src.fed && s->slot_refs[src.index].fetch_sub(1, std::memory_order_acq_rel) == 1) {
      s->slots[src.index] = Tensor();
    }
  }
  if (s->aborted.load(std::memory_order_relaxed)) {
    // Commit successors are counted down whether or not this node saw the
    // abort, so one becomes ready exactly when all of its inputs succeeded;
    // the others are never started after the abort. A failed node's
    // outputs are missing: it readies nothing.
    if (!status.ok()) return;
    for (int succ : item.successors) {
      if (items[succ].commit && s->pending[succ].fetch_sub(1, std::memory_order_acq_rel) == 1) ready->push_back(succ);
    }
    return;
  }
  for (int succ : item.successors) {
    if (s->pending[succ].fetch_sub(1, std::memory_order_acq_rel) == 1) ready->push_back(succ);
  }
}

void Executor::Impl::OnAsyncDone(RunState* s, int i) {
  AsyncCall& call = s->async_calls[items[i].async_index];
  absl::InlinedVector<int, 8> ready;
  Finish(s, i, call.ctx->status(), &ready);
  call.ctx.reset();
  if (options.inter_op_pool != nullptr) {
    // Continue on the pool: the completing thread may be an RPC thread.
    s->outstanding.fetch_add(static_cast<int>(ready.size()), std::memory_order_relaxed);
    for (int next : ready) options.inter_op_pool->Schedule([this, s, next] { ProcessAsync(s, next); });
    if (s->outstanding.fetch_sub(1, std::memory_order_acq_rel) == 1) s->done->Notify();
    return;
  }
  // Inline mode: hand the ready nodes back to the thread running the step.
  absl::MutexLock lock(&s->mu);
  s->handed_back.insert(s->handed_back.end(), ready.begin(), ready.end());
  s->outstanding.fetch_add(static_cast<int>(ready.size()) - 1, std::memory_order_acq_rel);
}

void Executor::Impl::RunInlineWithAsync(RunState* s) {
  // `outstanding` counts nodes started and not finished. Synchronous nodes
  // run here; an async node's completion hands its ready successors back
  // through `handed_back`, and this thread waits only when it has nothing
  // else to run.
  s->stack.assign(roots.rbegin(), roots.rend());
  s->outstanding.store(static_cast<int>(roots.size()), std::memory_order_relaxed);
  absl::InlinedVector<int, 8> ready;
  for (;;) {
    while (!s->stack.empty()) {
      const int i = s->stack.back();
      s->stack.pop_back();
      ready.clear();
      if (!Process(s, i, &ready)) continue;  // async: its completion counts it done
      s->outstanding.fetch_add(static_cast<int>(ready.size()) - 1, std::memory_order_acq_rel);
      for (auto it = ready.rbegin(); it != ready.rend(); ++it) s->stack.push_back(*it);
    }
    absl::MutexLock lock(&s->mu);
    s->mu.Await(absl::Condition(
        +[](RunState* st) ABSL_EXCLUSIVE_LOCKS_REQUIRED(st->mu) {
          return !st->handed_back.empty() || st->outstanding.load(std::memory_order_acquire) == 0;
        },
        s));
    if (s->handed_back.empty()) return;  // nothing outstanding
    s->stack.assign(s->handed_back.rbegin(), s->handed_back.rend());
    s->handed_back.clear();
  }
}

void Executor::Impl::ProcessAsync(RunState* s, int i) {
  // Runs `i`, then keeps one newly ready node for this thread and hands the
  // rest to the pool, so a chain runs without a queue hop per node.
  for (;;) {
    absl::InlinedVector<int, 8> ready;
    if (!Process(s, i, &ready)) return;  // async: its completion continues
    if (ready.empty()) break;
    s->outstanding.fetch_add(static_cast<int>(ready.size()) - 1, std::memory_order_relaxed);
    for (size_t k = 1; k < ready.size(); ++k) {
      const int next = ready[k];
      options.inter_op_pool->Schedule([this, s, next] { ProcessAsync(s, next); });
    }
    i = ready[0];
  }
  if (s->outstanding.fetch_sub(1, std::memory_order_acq_rel) == 1) s->done->Notify();
}

Executor::Executor(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Executor::~Executor() = default;

int Executor::num_nodes() const { return static_cast<int>(impl_->items.size()); }

bool Executor::MayWait() const { return impl_->num_async > 0 || !impl_->device->host_memory(); }

void Executor::SetNextFeeds(std::vector<Tensor> next) {
  if (impl_->recording != nullptr) impl_->recording->SetNextFeeds(std::move(next));
}

int64_t Executor::replayed_steps_copied_ahead() const {
  return impl_->recording != nullptr ? impl_->recording->staged_replays() : 0;
}

int64_t Executor::replayed_steps() const {
  return impl_->recording != nullptr ? impl_->recording->replays() : 0;
}

void Executor::RunningKernels(std::vector<RunningKernel>* out) const {
  Impl& m = *impl_;
  const int64_t now = CoarseMonotonicNanos();
  // pool_mu keeps every active state (and its step id) in place; the stamps
  // themselves are read without a lock.
  absl::MutexLock lock(&m.pool_mu);
  for (const RunState* s : m.active) {
    for (size_t i = 0; i < m.items.size(); ++i) {
      const int64_t started = s->started_ns[i].load(std::memory_order_relaxed);
      if (started == 0) continue;
      out->push_back(
          RunningKernel{s->step_id, m.items[i].node, absl::Nanoseconds(std::max<int64_t>(0, now - started))});
    }
  }
}

absl::StatusOr<std::unique_ptr<Executor>> Executor::Create(const Graph* graph, Device* device,
                                                           ExecutorOptions options) {
  auto impl = std::make_unique<Impl>();
  impl->graph = graph;
  impl->device = device;
  RETURN_IF_ERROR(BuildExecutorPlan(*graph, device, options, impl.get()));
  if (options.inter_op_pool != nullptr && options.inter_op_pool->num_threads() == 0) {
    options.inter_op_pool = nullptr;
  }
  if (options.record_device_steps) {
    const absl::Status why = RecordableWhyNot(*impl, options, device);
    if (why.ok()) {
      ResourceMgr* resources = options.resources != nullptr ? options.resources : device->resources();
      impl->recording = std::make_unique<StepRecording>(device, resources);
      bool step_id_on_device = false;
      for (const NodeItem& item : impl->items) step_id_on_device = step_id_on_device || item.kernel->UsesDeviceStepId();
      if (step_id_on_device) {
        ASSIGN_OR_RETURN(impl->step_on_device, Tensor::Allocate(DType::kInt64, TensorShape{}, device->allocator()));
      }
    } else {
      Logger("executor")->info("steps on {} run kernel by kernel: {}", device->name(), std::string(why.message()));
    }
  }
  impl->options = std::move(options);
  return std::unique_ptr<Executor>(new Executor(std::move(impl)));
}

absl::Status Executor::Run(absl::Span<const Tensor> feeds, std::vector<Tensor>* fetches, int64_t step_id) {
  return Run(feeds, fetches, step_id, nullptr);
}

absl::Status Executor::Impl::CheckFeeds(absl::Span<const Tensor> feeds) const {
  if (feeds.size() != feed_endpoints.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("expected ", feed_endpoints.size(), " feed(s), got ", feeds.size()));
  }
  for (size_t f = 0; f < feeds.size(); ++f) {
    const Endpoint& e = feed_endpoints[f];
    const DType want = e.node->output_type(e.index);
    const TensorShape& shape = e.node->output_shape(e.index);
    if (!feeds[f].IsInitialized() || feeds[f].dtype() != want || !shape.IsCompatibleWith(feeds[f].shape())) {
      return absl::InvalidArgumentError(absl::StrCat(
          "feed '", options.feeds[f], "' must be ", DTypeName(want), shape.DebugString(), ", got ",
          feeds[f].IsInitialized() ? absl::StrCat(DTypeName(feeds[f].dtype()), feeds[f].shape().DebugString())
                                   : std::string("an uninitialized tensor")));
    }
  }
  return absl::OkStatus();
}

void Executor::Impl::Drive(RunState* s) {
  if (options.inter_op_pool == nullptr && num_async > 0) {
    RunInlineWithAsync(s);
  } else if (options.inter_op_pool == nullptr) {
    // The fast path: no kernel finishes later, so a plain stack suffices.
    s->stack.assign(roots.rbegin(), roots.rend());
    absl::InlinedVector<int, 8> ready;
    while (!s->stack.empty()) {
      const int i = s->stack.back();
      s->stack.pop_back();
      ready.clear();
      Process(s, i, &ready);
      for (auto it = ready.rbegin(); it != ready.rend(); ++it) s->stack.push_back(*it);
    }
  } else if (!roots.empty()) {
    absl::Notification done;
    s->done = &done;
    s->outstanding.store(static_cast<int>(roots.size()), std::memory_order_relaxed);
    for (size_t r = 1; r < roots.size(); ++r) {
      const int root = roots[r];
      options.inter_op_pool->Schedule([this, s, root] { ProcessAsync(s, root); });
    }
    ProcessAsync(s, roots[0]);
    done.WaitForNotification();
  }
}

absl::Status Executor::Impl::EndStep(RunState* s, std::vector<Tensor>* fetches) {
  absl::Status status;
  {
    absl::MutexLock lock(&s->mu);
    status = s->status;
  }
  bool synced = device->host_memory();
  if (status.ok() && fetches != nullptr) {
    fetches->resize(fetch_sources.size());
    for (size_t f = 0; f < fetch_sources.size() && status.ok(); ++f) {
      const InputSource& src = fetch_sources[f];
      const Tensor& value = src.fed ? s->feeds[src.index] : s->slots[src.index];
      if (value.on_host()) {
        (*fetches)[f] = value;
        continue;
      }
      // Waits for every kernel of the step, enqueued before the copy.
      absl::StatusOr<Tensor> host = device->CopyToHost(value);
      if (!host.ok()) {
        status = Annotate(host.status(), absl::StrCat("fetch '", options.fetches[f], "'"));
        break;
      }
      (*fetches)[f] = *std::move(host);
      synced = true;
    }
  }
  // A step is done when its device work is: a kernel's asynchronous failure
  // is this step's error, and the caller may read what the step wrote.
  if (!synced) {
    absl::Status sync = device->Synchronize();
    if (status.ok() && !sync.ok()) status = Annotate(sync, absl::StrCat("step on ", device->name()));
  }
  return status;
}

absl::Status Executor::Run(absl::Span<const Tensor> feeds, std::vector<Tensor>* fetches, int64_t step_id,
                           Rendezvous* rendezvous) {
  return Run(feeds, fetches, step_id, rendezvous, nullptr);
}

std::unique_ptr<RunState> Executor::Impl::StartState(absl::Span<const Tensor> feeds, int64_t step_id) {
  std::unique_ptr<RunState> s = AcquireState(step_id);
  s->feeds = feeds;
  for (size_t i = 0; i < items.size(); ++i) s->pending[i].store(items[i].initial_pending, std::memory_order_relaxed);
  for (int k = 0; k < num_slots; ++k) s->slot_refs[k].store(initial_slot_refs[k], std::memory_order_relaxed);
  return s;
}

absl::Status Executor::Run(absl::Span<const Tensor> feeds, std::vector<Tensor>* fetches, int64_t step_id,
                           Rendezvous* rendezvous, TraceRecorder* trace) {
  Impl& m = *impl_;
  RETURN_IF_ERROR(m.CheckFeeds(feeds));
  if (m.step_on_device.IsInitialized()) {
    // Before the step's kernels, recorded or not (a recording reads it).
    absl::MutexLock lock(m.device->compute_mutex());
    RETURN_IF_ERROR(m.WriteStepId(step_id));
  }
  // A traced step runs kernel by kernel, so that each kernel has its span.
  if (m.recording != nullptr && trace == nullptr) {
    switch (m.recording->Next(feeds)) {
      case StepRecording::Action::kReplay:
        return m.ReplayStep(feeds, fetches);
      case StepRecording::Action::kRecord:
        if (std::optional<absl::Status> recorded = m.RecordStep(feeds, fetches, step_id)) return *recorded;
        break;
      case StepRecording::Action::kRun:
        break;
    }
  }
  // A device with its own memory (a GPU) gets its feeds copied in.
  std::vector<Tensor> device_feeds;
  if (!m.device->host_memory()) {
    device_feeds.reserve(feeds.size());
    for (size_t f = 0; f < feeds.size(); ++f) {
      absl::StatusOr<Tensor> t = m.device->CopyFromHost(feeds[f]);
      if (!t.ok()) return Annotate(t.status(), absl::StrCat("feed '", m.options.feeds[f], "'"));
      device_feeds.push_back(*std::move(t));
    }
    feeds = device_feeds;
  }

  std::unique_ptr<RunState> state = m.StartState(feeds, step_id);
  RunState* s = state.get();
  s->rendezvous = rendezvous;
  s->trace = trace;
  m.Drive(s);
  absl::Status status = m.EndStep(s, fetches);
  m.ReleaseState(std::move(state));
  if (m.recording != nullptr && status.ok()) m.recording->Ran();
  return status;
}

}  // namespace weft
