#include "runtime/trainer.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <map>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/blocking_counter.h"
#include "common/logging.h"
#include "common/status_macros.h"
#include "common/thread_pool.h"
#include "graph/lowering.h"
#include "graph/partition.h"
#include "graph/placer.h"
#include "graph/prune.h"
#include "runtime/data/dataset.h"
#include "runtime/device.h"
#include "runtime/executor.h"
#include "runtime/gpu/gpu_devices.h"
#include "runtime/rendezvous.h"

namespace weft {
namespace {

using Clock = std::chrono::steady_clock;

// One kind of step (feeds, fetches, targets) run as one partition per
// device, the partitions meeting in a fresh LocalRendezvous each step: the
// pruning, placement and partitioning a MasterSession does, in one process.
class PartitionedStep {
 public:
  // `devices` (borrowed) outlive the step; the first is the default device,
  // where fed placeholders and ops without a GPU kernel go.
  static absl::StatusOr<std::unique_ptr<PartitionedStep>> Create(const Graph& graph,
                                                                 const std::vector<Device*>& devices,
                                                                 const std::vector<std::string>& feeds,
                                                                 const std::vector<std::string>& fetches,
                                                                 const std::vector<std::string>& targets,
                                                                 ThreadPool* cpu_pool, bool record) {
    std::unique_ptr<Graph> pruned;
    RETURN_IF_ERROR(PruneGraph(graph, feeds, fetches, targets, &pruned));
    std::vector<std::string> names;
    std::map<std::string, Device*> by_name;
    for (Device* d : devices) {
      names.push_back(d->name());
      by_name[d->name()] = d;
    }
    RETURN_IF_ERROR(PlaceGraph(pruned.get(), names, names.front()));
    std::vector<std::string> placeholders;
    for (const std::string& f : feeds) placeholders.push_back(FeedNodeName(f));
    PlaceFeedsWithConsumers(pruned.get(), placeholders);
    ASSIGN_OR_RETURN(auto partitions, PartitionGraph(*pruned));

    auto step = std::unique_ptr<PartitionedStep>(new PartitionedStep());
    for (auto& [device_name, def] : partitions) {
      Part part;
      part.device = by_name.at(device_name);
      ASSIGN_OR_RETURN(part.graph, Graph::FromGraphDef(def));
      ExecutorOptions opts;
      for (size_t f = 0; f < feeds.size(); ++f) {
        const std::string placeholder = FeedNodeName(feeds[f]);
        if (part.graph->FindNode(placeholder) == nullptr) continue;
        opts.feeds.push_back(placeholder);
        part.feed_index.push_back(static_cast<int>(f));
      }
      for (const std::string& f : fetches) {
        if (part.graph->FindNode(f.substr(0, f.find(':'))) != nullptr) opts.fetches.push_back(f);
      }
      for (const std::string& t : targets) {
        if (part.graph->FindNode(t) != nullptr) opts.targets.push_back(t);
      }
      for (int i = 0; i < part.graph->num_nodes(); ++i) {
        const Node* n = part.graph->node(i);
        if (n->op() == "_Send") opts.targets.push_back(n->name());
        if (n->op() == "_Recv") part.receives = true;
      }
      if (opts.fetches.empty() && opts.targets.empty()) continue;
      part.fetch_names = opts.fetches;
      // A GPU's kernels only enqueue work: they run inline, in order.
      if (part.device->host_memory()) opts.inter_op_pool = cpu_pool;
      opts.record_device_steps = record && !part.device->host_memory();
      ASSIGN_OR_RETURN(part.executor, Executor::Create(part.graph.get(), part.device, std::move(opts)));
      step->parts_.push_back(std::move(part));
    }
    // Partitions that receive nothing never wait: they run first, in order,
    // on the caller's thread. The others run concurrently.
    std::stable_partition(step->parts_.begin(), step->parts_.end(), [](const Part& p) { return !p.receives; });
    for (const std::string& f : fetches) {
      std::pair<int, int> at{-1, -1};
      for (size_t p = 0; p < step->parts_.size() && at.first < 0; ++p) {
        const std::vector<std::string>& names = step->parts_[p].fetch_names;
        auto it = std::find(names.begin(), names.end(), f);
        if (it != names.end()) at = {static_cast<int>(p), static_cast<int>(it - names.begin())};
      }
      if (at.first < 0) return absl::InternalError(absl::StrCat("fetch '", f, "' is in no partition"));
      step->fetch_at_.push_back(at);
    }
    int concurrent = 0;
    for (const Part& p : step->parts_) concurrent += p.receives ? 1 : 0;
    if (concurrent > 1) step->pool_ = std::make_unique<ThreadPool>("partitions", concurrent - 1);
    return step;
  }

  // Not thread-safe: one step at a time.
  absl::Status Run(absl::Span<const Tensor> feeds, std::vector<Tensor>* fetches, int64_t step_id) {
    LocalRendezvous rendezvous;
    const int n = static_cast<int>(parts_.size());
    std::vector<absl::Status> status(n);
    int p = 0;
    for (; p < n && !parts_[p].receives; ++p) status[p] = RunPart(p, feeds, step_id, &rendezvous);
    if (p < n) {
      absl::BlockingCounter pending(n - p - 1);
      for (int q = p + 1; q < n; ++q) {
        pool_->Schedule([&, q] {
          status[q] = RunPart(q, feeds, step_id, &rendezvous);
          pending.DecrementCount();
        });
      }
      status[p] = RunPart(p, feeds, step_id, &rendezvous);
      pending.Wait();
    }
    for (const absl::Status& s : status) {
      if (!s.ok()) return s;
    }
    fetches->resize(fetch_at_.size());
    for (size_t f = 0; f < fetch_at_.size(); ++f) {
      (*fetches)[f] = parts_[fetch_at_[f].first].fetches[fetch_at_[f].second];
    }
    return absl::OkStatus();
  }

  // The feeds of the step after the next: each partition's share.
  void SetNextFeeds(absl::Span<const Tensor> next) {
    for (Part& part : parts_) {
      std::vector<Tensor> mine;
      for (int f : part.feed_index) mine.push_back(next[f]);
      part.executor->SetNextFeeds(std::move(mine));
    }
  }
  // Steps the partitions replayed from recordings (those with their feeds
  // copied ahead), summed.
  int64_t ReplayedSteps(bool ahead) const {
    int64_t n = 0;
    for (const Part& p : parts_) n += ahead ? p.executor->replayed_steps_copied_ahead() : p.executor->replayed_steps();
    return n;
  }

  std::vector<std::string> DeviceNames() const {
    std::vector<std::string> out;
    for (const Part& p : parts_) out.push_back(p.device->name());
    return out;
  }

 private:
  struct Part {
    Device* device = nullptr;
    std::unique_ptr<Graph> graph;
    std::unique_ptr<Executor> executor;
    std::vector<int> feed_index;  // which of the step's feeds, in the executor's order
    std::vector<std::string> fetch_names;
    bool receives = false;        // has a _Recv, so it may wait for another partition
    std::vector<Tensor> feeds;    // per-step scratch
    std::vector<Tensor> fetches;
  };

  absl::Status RunPart(int p, absl::Span<const Tensor> feeds, int64_t step_id, Rendezvous* rendezvous) {
    Part& part = parts_[p];
    part.feeds.clear();
    for (int f : part.feed_index) part.feeds.push_back(feeds[f]);
    absl::Status s = part.executor->Run(part.feeds, &part.fetches, step_id, rendezvous);
    if (!s.ok()) rendezvous->StartAbort(s);
    return s;
  }

  std::vector<Part> parts_;
  std::vector<std::pair<int, int>> fetch_at_;  // (partition, index in its fetches)
  std::unique_ptr<ThreadPool> pool_;
};

// How a step runs: one executor on the CPU, or partitions across devices.
class Step {
 public:
  explicit Step(std::unique_ptr<Executor> e) : executor_(std::move(e)) {}
  explicit Step(std::unique_ptr<PartitionedStep> p) : partitioned_(std::move(p)) {}
  absl::Status Run(absl::Span<const Tensor> feeds, std::vector<Tensor>* fetches, int64_t step_id) {
    return executor_ != nullptr ? executor_->Run(feeds, fetches, step_id)
                                : partitioned_->Run(feeds, fetches, step_id);
  }
  // Only a partitioned step has a GPU, hence recordings.
  void SetNextFeeds(absl::Span<const Tensor> next) {
    if (partitioned_ != nullptr) partitioned_->SetNextFeeds(next);
  }
  int64_t ReplayedSteps(bool ahead) const { return partitioned_ != nullptr ? partitioned_->ReplayedSteps(ahead) : 0; }

 private:
  std::unique_ptr<Executor> executor_;
  std::unique_ptr<PartitionedStep> partitioned_;
};

}  // namespace

struct LocalTrainer::State {
  JobSpec job;
  TrainingGraph tg;
  data::InMemoryDataset train_data;
  data::InMemoryDataset test_data;
  std::unique_ptr<ThreadPool> inter_op_pool;
  std::unique_ptr<CpuDevice> device;
  std::vector<std::unique_ptr<Device>> gpus;  // at most one used
  std::vector<Device*> devices;               // CPU first
  std::unique_ptr<Step> train_step;
  std::unique_ptr<Step> eval_step;  // null when the graph has neither `correct` nor `eval_loss`
  Clock::time_point created;

  ~State() {
    // Steps (and their kernels' tensors) go before the devices they run on.
    train_step.reset();
    eval_step.reset();
  }
};

LocalTrainer::LocalTrainer(std::unique_ptr<State> state) : s_(std::move(state)) {}
LocalTrainer::~LocalTrainer() = default;

absl::StatusOr<std::unique_ptr<LocalTrainer>> LocalTrainer::Create(const JobSpec& job,
                                                                   const LocalTrainerOptions& options) {
  auto s = std::make_unique<State>();
  s->created = Clock::now();
  s->job = job;
  ASSIGN_OR_RETURN(s->tg, LowerJob(job));
  const int64_t num_classes = job.has_model() ? job.model().num_classes() : 0;
  const std::vector<int64_t> shape(s->tg.example_shape.dims().begin(), s->tg.example_shape.dims().end());
  ASSIGN_OR_RETURN(s->train_data, data::LoadDataset(job.dataset(), /*train=*/true, shape, num_classes));
  const bool evaluates = !s->tg.correct.empty() || !s->tg.eval_loss.empty();
  if (!job.eval().skip() && evaluates) {
    ASSIGN_OR_RETURN(s->test_data, data::LoadDataset(job.dataset(), /*train=*/false, shape, num_classes));
  }
  const int threads = job.intra_op_threads() == 0 ? NumCores() : job.intra_op_threads();
  s->device = std::make_unique<CpuDevice>("/job:localhost/task:0/device:CPU:0", threads);
  if (threads > 1) s->inter_op_pool = std::make_unique<ThreadPool>("inter_op", threads);
  s->devices.push_back(s->device.get());

  if (job.device() != JobSpec::CPU && options.max_gpus != 0) {
    absl::StatusOr<std::vector<std::unique_ptr<Device>>> gpus = gpu::CreateGpuDevices("/job:localhost/task:0", 1);
    if (gpus.ok()) {
      s->gpus = *std::move(gpus);
    } else if (job.device() == JobSpec::GPU) {
      return gpus.status();
    } else {
      // device AUTO on a machine whose GPU cannot be used: say why, train on the CPU.
      Logger("train")->warn("training on the CPU: the GPU cannot be used: {}", gpus.status().ToString());
    }
  }
  if (job.device() == JobSpec::GPU && s->gpus.empty()) {
    return absl::FailedPreconditionError(
        gpu::BuiltWithGpu() ? "the job asks for a GPU (device: GPU) but none is visible or allowed (--gpus)"
                            : "the job asks for a GPU (device: GPU) but this weft was built without CUDA");
  }
  for (auto& g : s->gpus) s->devices.push_back(g.get());

  const std::vector<std::string> feeds = {s->tg.features, s->tg.labels};
  // correct, eval_loss and correct_top_k where the graph has them.
  std::vector<std::string> eval_fetches;
  if (!s->tg.correct.empty()) eval_fetches.push_back(s->tg.correct);
  if (!s->tg.eval_loss.empty()) eval_fetches.push_back(s->tg.eval_loss);
  if (!s->tg.correct_top_k.empty()) eval_fetches.push_back(s->tg.correct_top_k);
  if (s->gpus.empty()) {
    ExecutorOptions train_opts;
    train_opts.feeds = feeds;
    train_opts.fetches = {s->tg.loss};
    train_opts.targets = {s->tg.train_op};
    train_opts.inter_op_pool = s->inter_op_pool.get();
    ASSIGN_OR_RETURN(auto train, Executor::Create(s->tg.graph.get(), s->device.get(), train_opts));
    s->train_step = std::make_unique<Step>(std::move(train));
    if (evaluates) {
      ExecutorOptions eval_opts;
      eval_opts.feeds = feeds;
      eval_opts.fetches = eval_fetches;
      eval_opts.inter_op_pool = s->inter_op_pool.get();
      ASSIGN_OR_RETURN(auto eval, Executor::Create(s->tg.graph.get(), s->device.get(), eval_opts));
      s->eval_step = std::make_unique<Step>(std::move(eval));
    }
  } else {
    ASSIGN_OR_RETURN(auto train, PartitionedStep::Create(*s->tg.graph, s->devices, feeds, {s->tg.loss},
                                                         {s->tg.train_op}, s->inter_op_pool.get(),
                                                         options.cuda_graphs));
    Logger("train")->info("training step on {}", absl::StrJoin(train->DeviceNames(), ", "));
    s->train_step = std::make_unique<Step>(std::move(train));
    if (evaluates) {
      ASSIGN_OR_RETURN(auto eval, PartitionedStep::Create(*s->tg.graph, s->devices, feeds, eval_fetches, {},
                                                          s->inter_op_pool.get(), options.cuda_graphs));
      s->eval_step = std::make_unique<Step>(std::move(eval));
    }
  }
  return std::unique_ptr<LocalTrainer>(new LocalTrainer(std::move(s)));
}

std::string LocalTrainer::DeviceSummary() const {
  std::vector<std::string> out;
  for (Device* d : s_->devices) out.push_back(d->name().substr(d->name().rfind("device:") + 7));
  return absl::StrJoin(out, ",");
}

TrainingLoopHooks LocalTrainer::Hooks(const std::function<void(const TrainProgress&)>& on_progress) {
  TrainingLoopHooks hooks;
  hooks.step = [this, out = std::vector<Tensor>(), step_id = int64_t{0}](
                   const data::Batch& batch) mutable -> absl::StatusOr<float> {
    const Tensor feeds[] = {batch.features, batch.labels};
    RETURN_IF_ERROR(s_->train_step->Run(feeds, &out, step_id++));
    return out[0].data<float>()[0];
  };
  // WEFT_COPY_AHEAD=0: each replayed step copies its own batch in (to
  // measure what copying ahead gains).
  static const bool copy_ahead = [] {
    const char* env = std::getenv("WEFT_COPY_AHEAD");
    return env == nullptr || std::string(env) != "0";
  }();
  if (copy_ahead && !s_->gpus.empty()) {
    hooks.next_batch = [this](const data::Batch& next) {
      const Tensor feeds[] = {next.features, next.labels};
      s_->train_step->SetNextFeeds(feeds);
    };
  }
  if (s_->eval_step != nullptr) {
    hooks.eval_batch = [this, out = std::vector<Tensor>()](
                           const data::Batch& batch) mutable -> absl::StatusOr<EvalCounts> {
      const Tensor feeds[] = {batch.features, batch.labels};
      RETURN_IF_ERROR(s_->eval_step->Run(feeds, &out, 0));
      EvalCounts c;
      size_t next = 0;
      c.correct = s_->tg.correct.empty() ? -1 : out[next++].data<float>()[0];
      if (!s_->tg.eval_loss.empty()) c.loss = out[next++].data<float>()[0];
      if (!s_->tg.correct_top_k.empty()) c.correct_top_k = out[next].data<float>()[0];
      return c;
    };
  }
  hooks.on_progress = on_progress;
  hooks.cancelled = &cancelled_;
  return hooks;
}

absl::StatusOr<EvalResult> LocalTrainer::Evaluate() {
  if (s_->eval_step == nullptr) return absl::FailedPreconditionError("the model has no output to evaluate");
  return EvaluateDataset(s_->job, s_->test_data, Hooks(nullptr));
}

absl::StatusOr<TrainResult> LocalTrainer::Train(const std::function<void(const TrainProgress&)>& on_progress) {
  absl::StatusOr<TrainResult> result =
      RunTrainingLoop(s_->job, s_->train_data, s_->test_data, Hooks(on_progress), s_->created);
  if (const int64_t replayed = ReplayedTrainingSteps(); replayed > 0) {
    Logger("train")->info("{} training steps replayed from a CUDA graph, {} of them with their batch copied in "
                          "during the step before",
                          replayed, TrainingStepsCopiedAhead());
  }
  return result;
}

int64_t LocalTrainer::ReplayedTrainingSteps() const { return s_->train_step->ReplayedSteps(/*ahead=*/false); }

int64_t LocalTrainer::TrainingStepsCopiedAhead() const { return s_->train_step->ReplayedSteps(/*ahead=*/true); }

}  // namespace weft
