// The GPU in the runtime: placement, the executor's copies, tensors crossing
// between a CPU and a GPU partition, and `weft train` on a GPU. Placement
// needs no GPU (only the kernels linked in); the rest skips without one.
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <map>
#include <sstream>
#include <thread>

#include "absl/strings/str_cat.h"
#include "google/protobuf/text_format.h"
#include "graph/builder.h"
#include "graph/lowering.h"
#include "graph/ops/ops.h"
#include "graph/partition.h"
#include "graph/op_registry.h"
#include "graph/placer.h"
#include "graph/prune.h"
#include "gtest/gtest.h"
#include "runtime/executor.h"
#include "runtime/gpu/gpu_allocator.h"
#include "runtime/gpu/gpu_device.h"
#include "runtime/gpu/gpu_test_util.h"
#include "runtime/rendezvous.h"
#include "runtime/step_recording.h"
#include "runtime/trainer.h"

namespace weft {
namespace gpu {
namespace {

constexpr char kCpu[] = "/job:localhost/task:0/device:CPU:0";
constexpr char kGpu[] = "/job:localhost/task:0/device:GPU:0";

JobSpec MlpJob(const std::string& data_dir, const std::string& optimizer) {
  JobSpec job;
  const std::string text = absl::StrCat(R"(
    model {
      input_shape: [784]
      num_classes: 10
      layer { dense { units: 64 activation: RELU } }
      layer { dense { units: 10 } }
    }
    dataset { format: IDX dir: ")", data_dir, R"(" scale: 255 }
    optimizer { )", optimizer, R"( }
    batch_size: 64
    steps: 40
    seed: 3
    intra_op_threads: 1
    eval { skip: true })");
  EXPECT_TRUE(google::protobuf::TextFormat::ParseFromString(text, &job));
  return job;
}

std::map<std::string, std::string> DeviceOf(const Graph& g) {
  std::map<std::string, std::string> out;
  for (int i = 0; i < g.num_nodes(); ++i) out[g.node(i)->name()] = g.node(i)->assigned_device();
  return out;
}

TEST(GpuPlacementTest, ComputeGoesToTheGpuAndFeedsStayOnTheCpu) {
  auto tg = LowerJob(MlpJob("/nonexistent", "adam { learning_rate: 0.001 }"));
  ASSERT_TRUE(tg.ok()) << tg.status();
  Graph* g = tg->graph.get();
  ASSERT_TRUE(PlaceGraph(g, {kCpu, kGpu}, kCpu).ok());
  int on_gpu = 0;
  for (int i = 0; i < g->num_nodes(); ++i) {
    const Node* n = g->node(i);
    if (n->op() == "Placeholder") {
      EXPECT_EQ(n->assigned_device(), kCpu) << n->name();
    } else if (n->op() == "MatMul" || n->op() == "Variable" || n->op() == "ApplyAdam") {
      EXPECT_EQ(n->assigned_device(), kGpu) << n->name();
    }
    on_gpu += n->assigned_device() == kGpu ? 1 : 0;
  }
  EXPECT_GT(on_gpu, 10);
}

TEST(GpuPlacementTest, PreferGpuOffKeepsEverythingOnTheCpu) {
  auto tg = LowerJob(MlpJob("/nonexistent", "sgd { learning_rate: 0.1 }"));
  ASSERT_TRUE(tg.ok()) << tg.status();
  PlacementOptions options;
  options.prefer_gpu = false;
  ASSERT_TRUE(PlaceGraph(tg->graph.get(), {kCpu, kGpu}, kCpu, options).ok());
  for (const auto& [node, device] : DeviceOf(*tg->graph)) EXPECT_EQ(device, kCpu) << node;
}

TEST(GpuPlacementTest, NoGpuInTheClusterMeansCpu) {
  auto tg = LowerJob(MlpJob("/nonexistent", "sgd { learning_rate: 0.1 }"));
  ASSERT_TRUE(tg.ok()) << tg.status();
  ASSERT_TRUE(PlaceGraph(tg->graph.get(), {kCpu}, kCpu).ok());
  for (const auto& [node, device] : DeviceOf(*tg->graph)) EXPECT_EQ(device, kCpu) << node;
}

TEST(GpuPlacementTest, AnOpWithoutAGpuKernelAskedOntoTheGpuRunsOnItsTasksCpu) {
  Graph g;
  GraphBuilder b(&g);
  b.set_device("/job:worker/task:1/device:GPU:0");  // as a strategy asks for a replica's device
  Output x = b.Placeholder(DType::kFloat32, {2}, "x");
  b.Op("Relu", {x}, {}, "y");
  ASSERT_TRUE(b.status().ok()) << b.status();
  const std::vector<std::string> devices = {"/job:worker/task:0/device:CPU:0", "/job:worker/task:1/device:CPU:0",
                                            "/job:worker/task:1/device:GPU:0"};
  ASSERT_TRUE(PlaceGraph(&g, devices, devices[0]).ok());
  EXPECT_EQ(g.FindNode("x")->assigned_device(), "/job:worker/task:1/device:CPU:0");
  EXPECT_EQ(g.FindNode("y")->assigned_device(), "/job:worker/task:1/device:GPU:0");
}

TEST(GpuExecutorTest, FeedsGoInFetchesComeBackAndWarmStepsDoNotAllocate) {
  GpuDevice* gpu = TestGpu();
  if (gpu == nullptr) GTEST_SKIP() << "no GPU visible";
  Graph g;
  GraphBuilder b(&g);
  Output x = b.Placeholder(DType::kFloat32, {-1, 3}, "x");
  Output y = b.Op("Relu", {x}, {}, "y");
  b.Op("Neg", {y}, {}, "z");
  ASSERT_TRUE(b.status().ok()) << b.status();
  ExecutorOptions opts;
  opts.feeds = {"x"};
  opts.fetches = {"z"};
  auto exec = Executor::Create(&g, gpu, opts);
  ASSERT_TRUE(exec.ok()) << exec.status();
  Tensor feed = *Tensor::FromVector<float>({2, 3}, {1, -2, 3, -4, 5, -6});
  std::vector<Tensor> out;
  int64_t allocs_after_warmup = 0;
  for (int step = 0; step < 20; ++step) {
    ASSERT_TRUE((*exec)->Run({feed}, &out, step).ok());
    if (step == 2) allocs_after_warmup = gpu->allocator()->GetStats().system_allocs;
  }
  ASSERT_EQ(out.size(), 1u);
  ASSERT_TRUE(out[0].on_host());
  const std::vector<float> want = {-1, 0, -3, 0, -5, 0};
  for (int i = 0; i < 6; ++i) EXPECT_EQ(out[0].data<float>()[i], want[i]) << i;
  EXPECT_EQ(gpu->allocator()->GetStats().system_allocs, allocs_after_warmup);
}

TEST(GpuExecutorTest, TensorsCrossBetweenCpuAndGpuPartitions) {
  GpuDevice* gpu = TestGpu();
  if (gpu == nullptr) GTEST_SKIP() << "no GPU visible";
  CpuDevice cpu(kCpu, 1);
  // x (CPU) -> relu (GPU) -> neg (asked for the CPU) -> square (GPU): two
  // crossings each way.
  Graph g;
  GraphBuilder b(&g);
  Output x = b.Placeholder(DType::kFloat32, {4}, "x");
  Output r = b.Op("Relu", {x}, {}, "relu");
  b.set_device(kCpu);
  Output n = b.Op("Neg", {r}, {}, "neg");
  b.set_device("");
  b.Op("Mul", {n, n}, {}, "square");
  ASSERT_TRUE(b.status().ok()) << b.status();
  // The test GPU is named "/device:GPU:0"; placement and partitions only use
  // these names, the executors the Device objects.
  ASSERT_TRUE(PlaceGraph(&g, {kCpu, kGpu}, kCpu).ok());
  EXPECT_EQ(g.FindNode("relu")->assigned_device(), kGpu);
  EXPECT_EQ(g.FindNode("neg")->assigned_device(), kCpu);
  auto parts = PartitionGraph(g);
  ASSERT_TRUE(parts.ok()) << parts.status();
  ASSERT_EQ(parts->size(), 2u);
  auto cpu_graph = Graph::FromGraphDef(parts->at(kCpu));
  auto gpu_graph = Graph::FromGraphDef(parts->at(kGpu));
  ASSERT_TRUE(cpu_graph.ok() && gpu_graph.ok());
  auto targets = [](const Graph& pg) {
    std::vector<std::string> t;
    for (int i = 0; i < pg.num_nodes(); ++i) {
      if (pg.node(i)->op() == "_Send") t.push_back(pg.node(i)->name());
    }
    return t;
  };
  ExecutorOptions cpu_opts;
  cpu_opts.feeds = {"x"};
  cpu_opts.targets = targets(**cpu_graph);
  ExecutorOptions gpu_opts;
  gpu_opts.fetches = {"square"};
  gpu_opts.targets = targets(**gpu_graph);
  auto cpu_exec = Executor::Create(cpu_graph->get(), &cpu, cpu_opts);
  auto gpu_exec = Executor::Create(gpu_graph->get(), gpu, gpu_opts);
  ASSERT_TRUE(cpu_exec.ok()) << cpu_exec.status();
  ASSERT_TRUE(gpu_exec.ok()) << gpu_exec.status();
  for (int step = 0; step < 5; ++step) {
    LocalRendezvous rendezvous;
    Tensor feed = *Tensor::FromVector<float>({4}, {1.0f + step, -2, 3, -4});
    absl::Status cpu_status;
    std::thread t([&] { cpu_status = (*cpu_exec)->Run({feed}, nullptr, step, &rendezvous); });
    std::vector<Tensor> out;
    absl::Status gpu_status = (*gpu_exec)->Run({}, &out, step, &rendezvous);
    t.join();
    ASSERT_TRUE(cpu_status.ok()) << cpu_status;
    ASSERT_TRUE(gpu_status.ok()) << gpu_status;
    ASSERT_TRUE(out[0].on_host());
    const float want[] = {(1.0f + step) * (1.0f + step), 0, 9, 0};
    for (int i = 0; i < 4; ++i) EXPECT_EQ(out[0].data<float>()[i], want[i]) << "step " << step << " i " << i;
    EXPECT_EQ(rendezvous.NumPending(), 0);
  }
}

TEST(GpuRendezvousTest, RefusesDeviceTensors) {
  GpuDevice* gpu = TestGpu();
  if (gpu == nullptr) GTEST_SKIP() << "no GPU visible";
  LocalRendezvous r;
  Tensor dev(DType::kFloat32, TensorShape{2}, gpu->allocator());
  EXPECT_EQ(r.Send("k", dev, false).code(), absl::StatusCode::kInternal);
}

std::string DataDir() {
  const char* dir = std::getenv("WEFT_FMNIST_DIR");
  return dir != nullptr ? dir : "/usr/share/datasets/fashion-mnist";
}

// The same job trained on the CPU and on the GPU from the same seed ends at
// nearly the same loss: the GPU kernels compute the same model.
TEST(GpuTrainerTest, TrainsLikeTheCpu) {
  if (TestGpu() == nullptr) GTEST_SKIP() << "no GPU visible";
  for (const char* optimizer : {"sgd { learning_rate: 0.1 }", "adam { learning_rate: 0.001 }"}) {
    JobSpec job = MlpJob(DataDir(), optimizer);
    LocalTrainerOptions cpu_only;
    cpu_only.max_gpus = 0;
    auto on_cpu = LocalTrainer::Create(job, cpu_only);
    if (!on_cpu.ok() && on_cpu.status().code() == absl::StatusCode::kNotFound) {
      GTEST_SKIP() << "no Fashion-MNIST (set WEFT_FMNIST_DIR): " << on_cpu.status();
    }
    ASSERT_TRUE(on_cpu.ok()) << on_cpu.status();
    auto on_gpu = LocalTrainer::Create(job);
    ASSERT_TRUE(on_gpu.ok()) << on_gpu.status();
    EXPECT_EQ((*on_cpu)->DeviceSummary(), "CPU:0");
    EXPECT_EQ((*on_gpu)->DeviceSummary(), "CPU:0,GPU:0");
    auto cpu_result = (*on_cpu)->Train();
    auto gpu_result = (*on_gpu)->Train();
    ASSERT_TRUE(cpu_result.ok()) << cpu_result.status();
    ASSERT_TRUE(gpu_result.ok()) << gpu_result.status();
    EXPECT_EQ(gpu_result->state, SUCCEEDED);
    EXPECT_EQ(gpu_result->steps, cpu_result->steps);
    EXPECT_NEAR(gpu_result->train_loss, cpu_result->train_loss, 0.02 * std::abs(cpu_result->train_loss) + 1e-3)
        << optimizer;
  }
}

// Every op with a GPU kernel is either recorded in CUDA graphs or has its
// reason not to be: a new GPU kernel needs that decision.
TEST(GpuRecordingTest, EveryGpuKernelIsClassified) {
  int gpu_ops = 0;
  for (const std::string& op : OpRegistry::Global()->OpNames()) {
    if (!KernelRegistry::Global()->Has(op, "GPU")) continue;
    ++gpu_ops;
    EXPECT_TRUE(RecordableOp(op) || !WhyNotRecordableOp(op).empty()) << op;
  }
  EXPECT_GT(gpu_ops, 40);
}

// Each example's training step, placed for a CPU and a GPU as `weft train`
// places it, is one GPU partition (the feeds go with their consumers) whose
// every op may be recorded.
TEST(GpuRecordingTest, ExampleStepsAreOneRecordableGpuPartition) {
  for (const char* name : {"fmnist_mlp", "fmnist_cnn", "fmnist_resnet", "kjv_transformer", "fmnist_lstm"}) {
    SCOPED_TRACE(name);
    std::ifstream in(absl::StrCat("examples/", name, ".pbtxt"));
    ASSERT_TRUE(in.good());
    std::stringstream text;
    text << in.rdbuf();
    JobSpec job;
    ASSERT_TRUE(google::protobuf::TextFormat::ParseFromString(text.str(), &job));
    auto tg = LowerJob(job);
    ASSERT_TRUE(tg.ok()) << tg.status();
    const std::vector<std::string> feeds = {tg->features, tg->labels};
    std::unique_ptr<Graph> step;
    ASSERT_TRUE(PruneGraph(*tg->graph, feeds, {tg->loss}, {tg->train_op}, &step).ok());
    ASSERT_TRUE(PlaceGraph(step.get(), {kCpu, kGpu}, kCpu).ok());
    PlaceFeedsWithConsumers(step.get(), {FeedNodeName(feeds[0]), FeedNodeName(feeds[1])});
    auto partitions = PartitionGraph(*step);
    ASSERT_TRUE(partitions.ok()) << partitions.status();
    ASSERT_EQ(partitions->size(), 1u);
    EXPECT_EQ(partitions->begin()->first, kGpu);
    for (int i = 0; i < step->num_nodes(); ++i) {
      const Node* n = step->node(i);
      if (n->op() == "Placeholder") continue;  // fed: no kernel runs
      EXPECT_TRUE(RecordableOp(n->op())) << n->DebugName() << ": " << WhyNotRecordableOp(n->op());
    }
  }
}

// The executor records the third steady step and replays later ones; a bad
// label in a replayed step is that step's error, naming the node, and the
// next good step replays again.
TEST(GpuRecordingTest, ReplayedStepsComputeAndReportBadLabels) {
  GpuDevice* gpu = TestGpu();
  if (gpu == nullptr) GTEST_SKIP() << "no GPU visible";
  Graph g;
  GraphBuilder b(&g);
  Output logits = b.Placeholder(DType::kFloat32, {4, 3}, "logits");
  Output labels = b.Placeholder(DType::kInt32, {4}, "labels");
  Node* xent = b.AddNode("SparseSoftmaxCrossEntropyWithLogits", {logits, labels}, {}, "xent");
  ASSERT_TRUE(b.status().ok()) << b.status();
  ExecutorOptions opts;
  opts.feeds = {"logits", "labels"};
  opts.fetches = {absl::StrCat(xent->name(), ":0")};
  opts.record_device_steps = true;
  ResourceMgr resources;
  opts.resources = &resources;
  auto exec = Executor::Create(&g, gpu, opts);
  ASSERT_TRUE(exec.ok()) << exec.status();
  auto run = [&](float scale, int32_t label3, std::vector<Tensor>* out) {
    std::vector<float> l(12);
    for (int i = 0; i < 12; ++i) l[i] = scale * static_cast<float>(i % 5);
    const Tensor feeds[] = {*Tensor::FromVector<float>(TensorShape{4, 3}, l),
                            *Tensor::FromVector<int32_t>(TensorShape{4}, {0, 1, 2, label3})};
    return (*exec)->Run(feeds, out);
  };
  std::vector<Tensor> first, later;
  for (int step = 0; step < 5; ++step) ASSERT_TRUE(run(1.0f, 1, &first).ok()) << step;
  EXPECT_EQ((*exec)->replayed_steps(), 2);
  // New feed values reach the recording: the loss follows the logits.
  ASSERT_TRUE(run(2.0f, 1, &later).ok());
  EXPECT_EQ((*exec)->replayed_steps(), 3);
  ASSERT_EQ(later.size(), 1u);
  EXPECT_NE(later[0].data<float>()[0], first[0].data<float>()[0]);
  // The same step kernel by kernel, in a fresh executor, gives the same loss.
  opts.record_device_steps = false;
  auto plain = Executor::Create(&g, gpu, opts);
  ASSERT_TRUE(plain.ok());
  std::vector<Tensor> expected;
  {
    std::vector<float> l(12);
    for (int i = 0; i < 12; ++i) l[i] = 2.0f * static_cast<float>(i % 5);
    const Tensor feeds[] = {*Tensor::FromVector<float>(TensorShape{4, 3}, l),
                            *Tensor::FromVector<int32_t>(TensorShape{4}, {0, 1, 2, 1})};
    ASSERT_TRUE((*plain)->Run(feeds, &expected).ok());
  }
  for (int i = 0; i < 4; ++i) EXPECT_EQ(later[0].data<float>()[i], expected[0].data<float>()[i]) << i;
  absl::Status bad = run(1.0f, 7, &later);
  EXPECT_EQ((*exec)->replayed_steps(), 4);
  EXPECT_EQ(bad.code(), absl::StatusCode::kInvalidArgument) << bad;
  EXPECT_NE(bad.message().find("xent"), absl::string_view::npos) << bad;
  EXPECT_NE(bad.message().find("label 7 in row 3"), absl::string_view::npos) << bad;
  EXPECT_TRUE(run(1.0f, 2, &later).ok());
  EXPECT_EQ((*exec)->replayed_steps(), 5);
}

// Dropout recorded in a CUDA graph draws each step's own mask: the masks of
// replayed steps equal those of an executor that launches every kernel, step
// id for step id, and differ between steps.
TEST(GpuRecordingTest, DropoutInARecordedStepDrawsEachStepsMask) {
  GpuDevice* gpu = TestGpu();
  if (gpu == nullptr) GTEST_SKIP() << "no GPU visible";
  Graph g;
  GraphBuilder b(&g);
  Output x = b.Placeholder(DType::kFloat32, {16, 33}, "x");
  ops::DropoutOutputs drop = ops::Dropout(&b, x, 0.5f, 9, "drop");
  ASSERT_TRUE(b.status().ok()) << b.status();
  ExecutorOptions opts;
  opts.feeds = {"x"};
  opts.fetches = {absl::StrCat(drop.y.node->name(), ":1")};  // the mask
  ResourceMgr resources;
  opts.resources = &resources;
  opts.record_device_steps = true;
  auto recorded = Executor::Create(&g, gpu, opts);
  ASSERT_TRUE(recorded.ok()) << recorded.status();
  opts.record_device_steps = false;
  auto launched = Executor::Create(&g, gpu, opts);
  ASSERT_TRUE(launched.ok()) << launched.status();
  const Tensor feed = *Tensor::FromVector<float>(TensorShape{16, 33}, std::vector<float>(16 * 33, 1.0f));
  std::vector<float> previous;
  for (int64_t step = 10; step < 18; ++step) {
    std::vector<Tensor> a, want;
    ASSERT_TRUE((*recorded)->Run({feed}, &a, step).ok()) << step;
    ASSERT_TRUE((*launched)->Run({feed}, &want, step).ok()) << step;
    const std::vector<float> mask(a[0].data<float>(), a[0].data<float>() + a[0].NumElements());
    EXPECT_EQ(mask, std::vector<float>(want[0].data<float>(), want[0].data<float>() + want[0].NumElements()))
        << "step " << step;
    EXPECT_NE(mask, previous) << "step " << step;
    previous = mask;
  }
  EXPECT_EQ((*recorded)->replayed_steps(), 5);
}

// `weft train` on a GPU with and without CUDA graphs: the same losses, step
// for step, bit for bit (the recording launches the same kernels on the
// same buffers), with most steps replayed and their batches copied in
// during the step before. Adam keeps its step count on the
// device; float16 products add loss scaling's device-side skips.
TEST(GpuTrainerTest, RecordedStepsTrainBitForBitLikeLaunchedOnes) {
  if (TestGpu() == nullptr) GTEST_SKIP() << "no GPU visible";
  for (const char* extra : {"", "mixed_precision { compute: FLOAT16 }"}) {
    JobSpec job = MlpJob(DataDir(), "adam { learning_rate: 0.001 }");
    ASSERT_TRUE(google::protobuf::TextFormat::MergeFromString(extra, &job));
    std::vector<double> losses[2];
    int64_t replayed[2] = {0, 0}, ahead = 0;
    for (int graphs = 0; graphs < 2; ++graphs) {
      LocalTrainerOptions options;
      options.cuda_graphs = graphs == 1;
      auto trainer = LocalTrainer::Create(job, options);
      if (!trainer.ok() && trainer.status().code() == absl::StatusCode::kNotFound) {
        GTEST_SKIP() << "no Fashion-MNIST (set WEFT_FMNIST_DIR): " << trainer.status();
      }
      ASSERT_TRUE(trainer.ok()) << trainer.status();
      auto result = (*trainer)->Train([&](const TrainProgress& p) { losses[graphs].push_back(p.loss); });
      ASSERT_TRUE(result.ok()) << result.status();
      replayed[graphs] = (*trainer)->ReplayedTrainingSteps();
      if (graphs == 1) ahead = (*trainer)->TrainingStepsCopiedAhead();
    }
    EXPECT_EQ(replayed[0], 0) << extra;
    EXPECT_GE(replayed[1], 35) << extra;  // 40 steps: 2 to warm up, 1 recorded
    // Each replayed step's batch was copied in during the step before, but
    // the first replay's (announced while the step before was recorded).
    EXPECT_EQ(ahead, replayed[1] - 1) << extra;
    ASSERT_EQ(losses[0].size(), losses[1].size());
    for (size_t i = 0; i < losses[0].size(); ++i) EXPECT_EQ(losses[0][i], losses[1][i]) << extra << " step " << i;
  }
}

}  // namespace
}  // namespace gpu
}  // namespace weft
