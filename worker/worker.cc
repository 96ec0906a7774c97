#include "worker/worker.h"

#include <utility>

#include "absl/random/random.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/cluster_spec.h"
#include "common/logging.h"
#include "common/status_macros.h"
#include "google/protobuf/util/message_differencer.h"
#include "graph/device_name.h"
#include "runtime/gpu/gpu_devices.h"

namespace weft {
namespace worker {
namespace {

uint64_t NewIncarnation() {
  absl::BitGen gen;
  uint64_t id = 0;
  while (id == 0) id = absl::Uniform<uint64_t>(gen);
  return id;
}

}  // namespace

Worker::Worker(const WorkerOptions& options)
    : job_(options.job),
      task_index_(options.task_index),
      task_(TaskName(options.job, options.task_index)),
      incarnation_(NewIncarnation()),
      collectives_(options.collectives),
      max_iterations_(options.limits.max_iterations),
      datasets_(options.datasets),
      set_cluster_(options.set_cluster),
      rendezvous_mgr_([this, puller = options.puller](int64_t step_id) -> std::shared_ptr<Rendezvous> {
        return RemoteRendezvous::Create(task_, step_id, puller);
      }, options.rendezvous_limits) {
  for (int i = 0; i < std::max(options.num_cpu_devices, 1); ++i) {
    devices_.push_back(
        std::make_unique<CpuDevice>(absl::StrCat(task_, "/device:CPU:", i), options.intra_op_threads));
    device_ptrs_.push_back(devices_.back().get());
  }
  if (options.max_gpus != 0) {
    absl::StatusOr<std::vector<std::unique_ptr<Device>>> gpus = gpu::CreateGpuDevices(task_, options.max_gpus);
    if (!gpus.ok()) {
      // A GPU the driver lists but cannot open: serve on the CPU rather than not at all.
      Logger("worker")->error("task {} runs without its GPUs: {}", task_, gpus.status().ToString());
    } else {
      for (auto& d : *gpus) {
        Logger("worker")->info("task {} has {}", task_, d->name());
        device_ptrs_.push_back(d.get());
        devices_.push_back(std::move(d));
      }
    }
  }
  if (options.inter_op_threads > 0) {
    inter_op_pool_ = std::make_unique<ThreadPool>(task_ + "/inter_op", options.inter_op_threads);
  }
  graph_mgr_ =
      std::make_unique<GraphMgr>(task_, device_ptrs_, inter_op_pool_.get(), options.collectives, options.limits);
  compute_pool_ = std::make_unique<ThreadPool>(task_ + "/compute", std::max(options.compute_threads, 1));
}

Worker::~Worker() { Shutdown(); }

absl::Status Worker::ShuttingDown() const {
  return absl::UnavailableError(absl::StrCat("task ", task_, " is shutting down"));
}

void Worker::Schedule(std::function<void()> fn, const StatusCallback& done) {
  {
    absl::MutexLock lock(&mu_);
    if (!shutting_down_) {
      compute_pool_->Schedule(std::move(fn));
      return;
    }
  }
  done(ShuttingDown());
}

void Worker::Shutdown() {
  absl::MutexLock shutdown_lock(&shutdown_mu_);
  if (compute_pool_ == nullptr) return;
  {
    absl::MutexLock lock(&mu_);
    shutting_down_ = true;
  }
  // No Schedule reaches the pool from here on. Running steps must return
  // before the pool can be joined: aborting wakes every blocked _Recv, the
  // running steps' collectives are failed, and long RunGraphs stop before
  // their next iteration.
  graph_mgr_->CancelAll(ShuttingDown());
  rendezvous_mgr_.AbortAll(ShuttingDown());
  if (collectives_ != nullptr) {
    for (int64_t step : graph_mgr_->RunningSteps()) AbortCollectives(step, ShuttingDown());
  }
  // Steps queued behind others would wait for ever (Admit refuses new ones
  // once CancelAll ran).
  for (QueuedRun& run : graph_mgr_->TakeQueued([](const RunGraphRequest&) { return true; })) {
    FailRuns(std::move(run), ShuttingDown());
  }
  {
    absl::MutexLock lock(&mu_);
    mu_.Await(absl::Condition(
        +[](int* n) { return *n == 0; }, &inline_runs_));
  }
  compute_pool_.reset();
}

void Worker::GetStatusAsync(const GetStatusRequest*, GetStatusResponse* response, StatusCallback done) {
  last_status_call_ns_.store(absl::GetCurrentTimeNanos(), std::memory_order_relaxed);
  response->set_task(task_);
  response->set_incarnation(incarnation_);
  for (Device* d : device_ptrs_) {
    DeviceAttributes* a = response->add_device();
    a->set_name(d->name());
    a->set_device_type(d->device_type());
    a->set_physical_device_desc(d->physical_device_desc());
    a->set_memory_limit(0);
    a->set_incarnation(incarnation_);
  }
  response->set_draining(draining_.load());
  response->set_num_graphs(graph_mgr_->NumGraphs());
  done(absl::OkStatus());
}

void Worker::RegisterGraphAsync(const RegisterGraphRequest* request, RegisterGraphResponse* response,
                                StatusCallback done) {
  Schedule(
      [this, request, response, done] {
        // Before anything else: a graph must not be registered, nor a dead
        // master's steps aborted, on the word of a malformed request.
        if (request->cluster().job_size() > 0) {
          if (absl::Status s = ApplyCluster(request->cluster()); !s.ok()) return done(s);
        }
        // Steps of graphs a dead master registered would wait for peers or
        // pushes that never come: abort them.
        for (int64_t step : graph_mgr_->AdoptMaster(request->master_incarnation())) {
          const absl::Status gone = absl::AbortedError(absl::StrCat(
              "step ", step, " belongs to a master that has been replaced (master incarnation ",
              absl::Hex(request->master_incarnation()), " registered a graph)"));
          AbortStepHere(step, gone);
        }
        auto handle = graph_mgr_->Register(*request);
        if (!handle.ok()) return done(handle.status());
        response->set_graph_handle(*handle);
        Logger("worker")->debug("registered {} ({} nodes)", *handle, request->graph_def().node_size());
        done(absl::OkStatus());
      },
      done);
}

absl::Status Worker::ApplyCluster(const ClusterDef& cluster) {
  RETURN_IF_ERROR(CheckClusterDef(cluster, "the cluster sent with RegisterGraph"));
  if (!TaskAddress(cluster, TaskSpec{job_, task_index_}).ok()) {
    return absl::InvalidArgumentError(absl::StrCat("the cluster sent with RegisterGraph has no address for this task, ",
                                                   task_, ": ", ClusterToFlag(cluster)));
  }
  absl::MutexLock lock(&cluster_mu_);
  if (google::protobuf::util::MessageDifferencer::Equals(cluster, cluster_)) return absl::OkStatus();
  if (set_cluster_) set_cluster_(cluster);
  cluster_ = cluster;
  Logger("worker")->info("task {}: cluster from the master: {}", task_, ClusterToFlag(cluster));
  return absl::OkStatus();
}

void Worker::DeregisterGraphAsync(const DeregisterGraphRequest* request, DeregisterGraphResponse*,
                                  StatusCallback done) {
  Schedule(
      [this, request, done] {
        absl::Status s = graph_mgr_->Deregister(request->session_handle(), request->graph_handle());
        if (s.ok()) {
          // Steps queued on the graph would wait for a step that cannot run.
          const absl::Status gone = absl::FailedPreconditionError(
              absl::StrCat("graph ", request->graph_handle(), " was deregistered while the step waited to run"));
          for (QueuedRun& run : graph_mgr_->TakeQueued([&](const RunGraphRequest& r) {
                 return r.graph_handle() == request->graph_handle() && r.session_handle() == request->session_handle();
               })) {
            FailRuns(std::move(run), gone);
          }
        }
        done(s);
      },
      done);
}

void Worker::RunGraphAsync(const RunGraphRequest* request, RunGraphResponse* response, StatusCallback done) {
  for (int64_t id : request->cleanup_step_id()) CleanupStepState(id);
  QueuedRun run{request, response, std::move(done), nullptr, 0};
  if (request->after_step_id() != 0) {
    // Claimed now: peers may send this step's values while it waits.
    run.rendezvous = rendezvous_mgr_.Find(request->step_id());
    run.arrived_ns = absl::GetCurrentTimeNanos();
    absl::StatusOr<bool> now = graph_mgr_->Admit(run);
    if (!now.ok()) return FailRuns(std::move(run), now.status());
    if (!*now) return;  // queued behind the step before it
  }
  Dispatch(std::move(run));
}

void Worker::Dispatch(QueuedRun run) {
  if (graph_mgr_->RunsInline(*run.request)) {
    // A short step that cannot wait runs here, on the RPC's thread: a hop
    // to the compute pool would cost it more than it computes.
    {
      absl::MutexLock lock(&mu_);
      if (shutting_down_) return FailRuns(std::move(run), ShuttingDown());
      ++inline_runs_;
    }
    RunGraphs(std::move(run), false);
    absl::MutexLock lock(&mu_);
    --inline_runs_;
    return;
  }
  StatusCallback done = run.done;
  Schedule([this, run = std::move(run)]() mutable { RunGraphs(std::move(run), true); }, done);
}

void Worker::RunGraphs(QueuedRun run, bool on_compute_thread) {
  // A loop, not a recursion: a pipelined job keeps releasing the next step.
  for (;;) {
    const RunGraphRequest& request = *run.request;
    const int64_t step_id = request.step_id();
    if (run.arrived_ns != 0) run.response->set_queued_us((absl::GetCurrentTimeNanos() - run.arrived_ns) / 1000);
    if (run.rendezvous == nullptr) run.rendezvous = rendezvous_mgr_.Find(step_id);
    const uint64_t record = step_ring_.Begin(step_id, request.iterations());
    // Only a count the graph manager will accept (its quota bounds the
    // collectives an abort then walks).
    const bool several = request.iterations() > 1 && request.iterations() <= max_iterations_;
    if (several) {
      absl::MutexLock lock(&iterations_mu_);
      iterations_[step_id] = request.iterations();
    }
    absl::Status s = graph_mgr_->Run(request, run.rendezvous.get(), run.response);
    step_ring_.End(record, s);
    if (!s.ok()) {
      // Peers pulling this step's values, and its other partitions here, must
      // not wait for values that will never come.
      AbortStepHere(step_id, s);
      Logger("worker")->info("step {} failed: {}; the last steps here: {}", step_id, s.ToString(), step_ring_.Dump());
    }
    if (several) {
      absl::MutexLock lock(&iterations_mu_);
      iterations_.erase(step_id);
    }
    // Before `done`, which may free the request.
    auto next = graph_mgr_->Ended(request, s);
    run.done(s);
    if (!next.has_value()) return;
    if (!next->second.ok()) return FailRuns(std::move(next->first), next->second);
    // The next step continues on a compute thread; on an RPC thread only
    // when it may run inline.
    if (!on_compute_thread && !graph_mgr_->RunsInline(*next->first.request)) {
      return Dispatch(std::move(next->first));
    }
    run = std::move(next->first);
  }
}

void Worker::FailRuns(QueuedRun run, absl::Status status) {
  for (;;) {
    const int64_t step_id = run.request->step_id();
    step_ring_.End(step_ring_.Begin(step_id, run.request->iterations()), status);
    rendezvous_mgr_.AbortStep(step_id, status);
    if (collectives_ != nullptr) collectives_->AbortStep(step_id, status);
    auto next = graph_mgr_->Ended(*run.request, status);
    run.done(status);
    if (!next.has_value()) return;
    run = std::move(next->first);
    status = std::move(next->second);
  }
}

void Worker::AbortCollectives(int64_t step_id, const absl::Status& status) {
  if (collectives_ == nullptr) return;
  int iterations = 1;
  {
    absl::MutexLock lock(&iterations_mu_);
    auto it = iterations_.find(step_id);
    if (it != iterations_.end()) {
      iterations = it->second;
      aborted_iterations_[step_id] = iterations;  // their marks go at the step's cleanup
    }
  }
  // Each iteration's collectives are keyed by its own step id.
  for (int i = 0; i < iterations; ++i) collectives_->AbortStep(step_id + i, status);
}

void Worker::AbortStepHere(int64_t step_id, const absl::Status& status) {
  rendezvous_mgr_.AbortStep(step_id, status);
  AbortCollectives(step_id, status);
  for (QueuedRun& run : graph_mgr_->TakeQueued([&](const RunGraphRequest& r) { return r.step_id() == step_id; })) {
    FailRuns(std::move(run), status);
  }
}

void Worker::AbortStepAsync(const AbortStepRequest* request, AbortStepResponse*, StatusCallback done) {
  absl::StatusCode code = static_cast<absl::StatusCode>(request->code());
  if (code == absl::StatusCode::kOk) code = absl::StatusCode::kAborted;
  const std::string message =
      request->message().empty() ? absl::StrCat("step ", request->step_id(), " aborted") : request->message();
  AbortStepHere(request->step_id(), absl::Status(code, message));
  done(absl::OkStatus());
}

void Worker::CleanupStepState(int64_t step_id) {
  rendezvous_mgr_.Cleanup(step_id);
  if (collectives_ == nullptr) return;
  int iterations = 1;
  {
    absl::MutexLock lock(&iterations_mu_);
    auto it = aborted_iterations_.find(step_id);
    if (it != aborted_iterations_.end()) {
      iterations = it->second;
      aborted_iterations_.erase(it);
    }
  }
  for (int i = 0; i < iterations; ++i) collectives_->CleanupStep(step_id + i);
}

void Worker::CleanupStepAsync(const CleanupStepRequest* request, CleanupStepResponse*, StatusCallback done) {
  CleanupStepState(request->step_id());
  for (int64_t id : request->more_step_id()) CleanupStepState(id);
  done(absl::OkStatus());
}

void Worker::GetStepStateAsync(const GetStepStateRequest*, GetStepStateResponse* response, StatusCallback done) {
  response->set_task(task_);
  graph_mgr_->RunningOps(response->mutable_running_op());
  if (collectives_ != nullptr) {
    for (const CollectiveWait& w : collectives_->Pending()) {
      PendingCollective* c = response->add_collective();
      c->set_step_id(w.step_id);
      c->set_description(w.description);
      c->set_recv_from_task(w.recv_from);
      c->set_chunks_missing(w.chunks_missing);
      c->set_chunks_total(w.chunks_total);
      c->set_send_to_task(w.send_to);
      c->set_sends_pending(w.sends_pending);
      c->set_elapsed_seconds(w.elapsed_seconds);
    }
  }
  step_ring_.Fill(response->mutable_recent_step());
  done(absl::OkStatus());
}

void Worker::ResetContainersAsync(const ResetContainersRequest* request, ResetContainersResponse* response,
                                  StatusCallback done) {
  // Bounded: the names come over the wire.
  if (request->all() == (request->container_size() > 0)) {
    return done(absl::InvalidArgumentError(absl::StrCat(
        "ResetContainers on task ", task_, " needs either container names or all, ",
        request->all() ? "not both" : "and got neither")));
  }
  if (request->container_size() > kMaxResetContainers) {
    return done(absl::InvalidArgumentError(absl::StrCat("ResetContainers on task ", task_, " names ",
                                                        request->container_size(), " containers, more than ",
                                                        kMaxResetContainers)));
  }
  for (const std::string& c : request->container()) {
    if (c.empty() || c.size() > kMaxContainerNameBytes) {
      return done(absl::InvalidArgumentError(absl::StrCat("ResetContainers on task ", task_, ": a container name of ",
                                                          c.size(), " bytes (1..", kMaxContainerNameBytes, ")")));
    }
  }
  // Brief locks only: it completes on the caller's thread.
  const std::vector<std::string> names(request->container().begin(), request->container().end());
  const int cleared = graph_mgr_->containers().Reset(names, request->all());
  response->set_stores_cleared(cleared);
  Logger("worker")->info("task {}: cleared {} container stores ({})", task_, cleared,
                         request->all() ? std::string("all") : absl::StrCat(names.size(), " names"));
  done(absl::OkStatus());
}

void Worker::PutDatasetAsync(const PutDatasetRequest* request, PutDatasetResponse* response, StatusCallback done) {
  if (datasets_ == nullptr) {
    return done(absl::FailedPreconditionError(
        absl::StrCat("task ", task_, " keeps no uploaded datasets (start it with --dataset_cache=DIR)")));
  }
  // Disk writes: off the caller's (gRPC's) thread.
  Schedule([this, request, response, done] { done(datasets_->Put(*request, response)); }, done);
}

void Worker::RecvTensorAsync(const RecvTensorRequest* request, const std::string& caller,
                             Rendezvous::DoneCallback done) {
  auto key = ParseRendezvousKey(request->rendezvous_key());
  if (!key.ok()) return done(key.status(), Tensor(), false);
  auto device = DeviceName::Parse(key->send_device);
  if (!device.ok()) return done(device.status(), Tensor(), false);
  if (TaskName(device->job, device->task) != task_) {
    return done(absl::InvalidArgumentError(absl::StrCat("RecvTensor for '", key->tensor_name, "' sent on ",
                                                        key->send_device, " reached task ", task_)),
                Tensor(), false);
  }
  if (!caller.empty()) {
    auto to = DeviceName::Parse(key->recv_device);
    if (!to.ok()) return done(to.status(), Tensor(), false);
    if (TaskName(to->job, to->task) != caller) {
      return done(absl::PermissionDeniedError(absl::StrCat("task ", caller, " asked for '", key->tensor_name,
                                                           "', which is sent to ", key->recv_device)),
                  Tensor(), false);
    }
  }
  if (key->incarnation != 0 && key->incarnation != incarnation_) {
    return done(absl::AbortedError(absl::StrCat("task ", task_, " restarted: '", key->tensor_name,
                                                "' was sent by incarnation ", absl::Hex(key->incarnation),
                                                ", this is ", absl::Hex(incarnation_))),
                Tensor(), false);
  }
  // A peer may ask before this task's RunGraph of the step arrives; what it
  // creates stays unclaimed (bounded, expiring) until that RunGraph.
  rendezvous_mgr_.FindForPeer(request->step_id())->RecvLocalAsync(request->rendezvous_key(), std::move(done));
}

}  // namespace worker
}  // namespace weft
