// Whole training steps on the GPU against the CPU: the Fashion-MNIST MLP and
// CNN of examples/ are lowered to their training graphs and run by the
// executor on each device, from the same initial variable values and on the
// same batches. The losses of the first steps must agree; a timed run then
// prints the GPU's steps per second at batch 64 (fetching the loss each
// step, as the trainer does).
//
// Without a GPU every test skips.
#include <cmath>
#include <cstdio>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "google/protobuf/text_format.h"
#include "graph/lowering.h"
#include "gtest/gtest.h"
#include "proto/job.pb.h"
#include "runtime/device.h"
#include "runtime/executor.h"
#include "runtime/gpu/gpu_device.h"
#include "runtime/gpu/gpu_test_util.h"
#include "runtime/resource_mgr.h"

namespace weft {
namespace gpu_kernels {
namespace {

constexpr char kMlp[] = R"pb(
  name: "fmnist-mlp"
  model {
    input_shape: [784]
    num_classes: 10
    layer { dense { units: 256 activation: RELU } }
    layer { dense { units: 128 activation: RELU } }
    layer { dense { units: 10 } }
  }
  optimizer { adam { learning_rate: 0.0005 } }
  batch_size: 64
  seed: 1
)pb";

constexpr char kCnn[] = R"pb(
  name: "fmnist-cnn"
  model {
    input_shape: [28, 28, 1]
    num_classes: 10
    layer { conv2d { filters: 16 kernel_size: 3 activation: RELU } }
    layer { max_pool { pool_size: 2 } }
    layer { conv2d { filters: 32 kernel_size: 3 activation: RELU } }
    layer { max_pool { pool_size: 2 } }
    layer { flatten {} }
    layer { dense { units: 128 activation: RELU } }
    layer { dense { units: 10 } }
  }
  optimizer { adam { learning_rate: 0.001 } }
  batch_size: 64
  seed: 1
)pb";

struct Batch {
  Tensor features;
  Tensor labels;
};

Batch RandomBatch(const TensorShape& example, int64_t batch, uint64_t seed) {
  TensorShape shape{batch};
  for (int64_t d : example.dims()) shape.AddDim(d);
  Batch b{Tensor(DType::kFloat32, shape), Tensor(DType::kInt32, TensorShape{batch})};
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> pixel(0.0f, 1.0f);
  for (float& v : b.features.flat<float>()) v = pixel(rng);
  for (int32_t& v : b.labels.flat<int32_t>()) v = static_cast<int32_t>(rng() % 10);
  return b;
}

float LossOf(gpu::GpuDevice* gpu, const Tensor& t) {
  if (t.on_host()) return *t.data<float>();
  auto host = gpu::ToHost(gpu, t);
  EXPECT_TRUE(host.ok()) << host.status();
  return host.ok() ? *host->data<float>() : NAN;
}

void CompareAndTime(const char* job_text, const char* label, int timed_steps) {
  gpu::GpuDevice* gpu = gpu::TestGpu();
  if (gpu == nullptr) GTEST_SKIP() << "no GPU";
  JobSpec job;
  ASSERT_TRUE(google::protobuf::TextFormat::ParseFromString(job_text, &job));
  auto tg = LowerJob(job);
  ASSERT_TRUE(tg.ok()) << tg.status();
  CpuDevice cpu("/device:CPU:0", 1);
  ResourceMgr cpu_vars, gpu_vars;
  ExecutorOptions opts;
  opts.feeds = {tg->features, tg->labels};
  opts.fetches = {tg->loss};
  opts.targets = {tg->train_op};
  ExecutorOptions cpu_opts = opts, gpu_opts = opts;
  cpu_opts.resources = &cpu_vars;
  gpu_opts.resources = &gpu_vars;
  auto cpu_exec = Executor::Create(tg->graph.get(), &cpu, cpu_opts);
  ASSERT_TRUE(cpu_exec.ok()) << cpu_exec.status();
  auto gpu_exec = Executor::Create(tg->graph.get(), gpu, gpu_opts);
  ASSERT_TRUE(gpu_exec.ok()) << gpu_exec.status();

  // The same steps on both devices: Adam moves every weight, so the losses
  // agree only if forward, backward and update all do.
  const int64_t batch = job.batch_size();
  for (int step = 1; step <= 5; ++step) {
    Batch b = RandomBatch(tg->example_shape, batch, step);
    std::vector<Tensor> cpu_out, gpu_out;
    ASSERT_TRUE((*cpu_exec)->Run({b.features, b.labels}, &cpu_out, step).ok());
    absl::Status s = (*gpu_exec)->Run({b.features, b.labels}, &gpu_out, step);
    ASSERT_TRUE(s.ok()) << s;
    const float lc = *cpu_out[0].data<float>();
    const float lg = LossOf(gpu, gpu_out[0]);
    std::printf("%s step %d: loss cpu %.6f gpu %.6f\n", label, step, lc, lg);
    EXPECT_NEAR(lg, lc, 1e-3 * (1 + std::fabs(lc))) << label << " step " << step;
  }

  // Throughput: a few batches cycled, after a warm-up.
  std::vector<Batch> batches;
  for (int i = 0; i < 8; ++i) batches.push_back(RandomBatch(tg->example_shape, batch, 100 + i));
  std::vector<Tensor> out;
  for (int step = 0; step < 20; ++step) {
    const Batch& b = batches[step % batches.size()];
    ASSERT_TRUE((*gpu_exec)->Run({b.features, b.labels}, &out, 10 + step).ok());
  }
  const float first = LossOf(gpu, out[0]);
  const absl::Time start = absl::Now();
  for (int step = 0; step < timed_steps; ++step) {
    const Batch& b = batches[step % batches.size()];
    absl::Status s = (*gpu_exec)->Run({b.features, b.labels}, &out, 100 + step);
    ASSERT_TRUE(s.ok()) << s;
  }
  const double seconds = absl::ToDoubleSeconds(absl::Now() - start);
  const float last = LossOf(gpu, out[0]);
  std::printf("%s on %s: %.1f us/step, %.0f samples/s at batch %lld (loss %.4f -> %.4f over %d steps)\n", label,
              gpu->name().c_str(), 1e6 * seconds / timed_steps, timed_steps * batch / seconds,
              static_cast<long long>(batch), first, last, timed_steps);
  EXPECT_LT(last, first) << "training on 8 fixed batches should lower the loss";
}

TEST(GpuTrainStepTest, MlpMatchesCpuAndReportsThroughput) { CompareAndTime(kMlp, "fmnist-mlp", 2000); }

TEST(GpuTrainStepTest, CnnMatchesCpuAndReportsThroughput) { CompareAndTime(kCnn, "fmnist-cnn", 500); }

}  // namespace
}  // namespace gpu_kernels
}  // namespace weft
