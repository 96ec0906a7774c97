// A CollectiveAllReduce on GPU tensors runs through NCCL; runs on a GPU and
// skips without one (the two-GPU case without two).
#include <cmath>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "runtime/gpu/gpu_devices.h"
#include "runtime/rendezvous.h"

#include "graph/builder.h"
#include "gtest/gtest.h"
#include "runtime/executor.h"
#include "runtime/gpu/gpu_device.h"
#include "runtime/gpu/gpu_test_util.h"
#include "runtime/gpu/nccl_communicators.h"

namespace weft {
namespace gpu {
namespace {

TEST(NcclAllReduceTest, OneRankThroughTheExecutor) {
  GpuDevice* gpu = TestGpu();
  if (gpu == nullptr) GTEST_SKIP() << "no GPU visible";
  for (bool mean : {false, true}) {
    Graph g;
    GraphBuilder b(&g);
    Output x = b.Placeholder(DType::kFloat32, {3}, "x");
    Output y = b.Placeholder(DType::kFloat32, {2, 2}, "y");
    Node* ar = b.AddNode("CollectiveAllReduce", {x, y},
                         {Attr("group_size", 1), Attr("group_key", 7), Attr("instance_key", 1), Attr("mean", mean)},
                         "allreduce");
    ASSERT_TRUE(b.status().ok()) << b.status();
    ASSERT_NE(ar, nullptr);
    ExecutorOptions opts;
    opts.feeds = {"x", "y"};
    opts.fetches = {"allreduce:0", "allreduce:1"};
    auto exec = Executor::Create(&g, gpu, opts);
    ASSERT_TRUE(exec.ok()) << exec.status();
    const int before = NumNcclCommunicators();
    std::vector<Tensor> out;
    for (int step = 0; step < 3; ++step) {
      Tensor xv = *Tensor::FromVector<float>({3}, {1.5f, -2, 3.0f + step});
      Tensor yv = *Tensor::FromVector<float>({2, 2}, {4, 5, 6, 7});
      absl::Status s = (*exec)->Run({xv, yv}, &out, step);
      ASSERT_TRUE(s.ok()) << s;
      ASSERT_EQ(out.size(), 2u);
      ASSERT_TRUE(out[0].on_host());
      // One rank: the sum and the mean are the value itself.
      EXPECT_EQ(out[0].data<float>()[0], 1.5f);
      EXPECT_EQ(out[0].data<float>()[2], 3.0f + step);
      EXPECT_EQ(out[1].data<float>()[3], 7.0f);
    }
    // The communicator is made once per group and reused by later steps.
    EXPECT_LE(NumNcclCommunicators(), before + 1);
    EXPECT_GE(NumNcclCommunicators(), 1);
  }
}

// wire_dtype float16 through NCCL (one rank): each value comes back rounded
// to float16 (the bytes NCCL carried), widened to float32; the mean of one
// rank likewise. An in-process group refuses the attribute by name.
TEST(NcclAllReduceTest, Float16WireRoundsThroughNccl) {
  GpuDevice* gpu = TestGpu();
  if (gpu == nullptr) GTEST_SKIP() << "no GPU visible";
  for (bool mean : {false, true}) {
    Graph g;
    GraphBuilder b(&g);
    Output x = b.Placeholder(DType::kFloat32, {5}, "x");
    b.AddNode("CollectiveAllReduce", {x},
              {Attr("group_size", 1), Attr("group_key", 8), Attr("instance_key", 1), Attr("mean", mean),
               Attr("wire_dtype", "float16")},
              "allreduce");
    ASSERT_TRUE(b.status().ok()) << b.status();
    ExecutorOptions opts;
    opts.feeds = {"x"};
    opts.fetches = {"allreduce:0"};
    auto exec = Executor::Create(&g, gpu, opts);
    ASSERT_TRUE(exec.ok()) << exec.status();
    const std::vector<float> in = {1.0f / 3, -2.5f, 1e-9f, 70000.0f, 1234.567f};
    std::vector<Tensor> out;
    absl::Status s = (*exec)->Run({*Tensor::FromVector<float>({5}, in)}, &out, 0);
    ASSERT_TRUE(s.ok()) << s;
    for (size_t i = 0; i < in.size(); ++i) {
      const float want = static_cast<float>(Half(in[i]));
      if (std::isinf(want)) {
        EXPECT_TRUE(std::isinf(out[0].data<float>()[i])) << i;  // above 65504: overflow, as loss scaling expects
      } else {
        EXPECT_EQ(out[0].data<float>()[i], want) << i << " mean " << mean;
      }
    }
    EXPECT_NE(out[0].data<float>()[0], in[0]);  // rounded: it travelled as float16
  }
  Graph g;
  GraphBuilder b(&g);
  Output x = b.Placeholder(DType::kFloat32, {4}, "x");
  b.AddNode("CollectiveAllReduce", {x},
            {Attr("group_size", 1), Attr("group_key", 9), Attr("instance_key", 1),
             Attr("group_devices", gpu->name()), Attr("wire_dtype", "float16")},
            "allreduce");
  ASSERT_TRUE(b.status().ok()) << b.status();
  ExecutorOptions opts;
  opts.feeds = {"x"};
  opts.fetches = {"allreduce:0"};
  auto refused = Executor::Create(&g, gpu, opts);
  ASSERT_FALSE(refused.ok());
  EXPECT_TRUE(absl::StrContains(refused.status().message(), "float16 all-reduce is for groups across tasks"))
      << refused.status();
}

// x -> CollectiveAllReduce over `devices` (an in-process group), on `gpu`.
absl::StatusOr<std::unique_ptr<Executor>> InProcessAllReduce(Graph* g, GpuDevice* gpu, const std::string& devices,
                                                             int64_t size, int64_t group_key) {
  GraphBuilder b(g);
  Output x = b.Placeholder(DType::kFloat32, {4}, "x");
  b.AddNode("CollectiveAllReduce", {x},
            {Attr("group_size", size), Attr("group_key", group_key), Attr("instance_key", 1), Attr("mean", true),
             Attr("group_devices", devices)},
            "allreduce");
  if (!b.status().ok()) return b.status();
  ExecutorOptions opts;
  opts.feeds = {"x"};
  opts.fetches = {"allreduce:0"};
  return Executor::Create(g, gpu, opts);
}

TEST(NcclAllReduceTest, AnInProcessGroupOfOneGpu) {
  GpuDevice* gpu = TestGpu();
  if (gpu == nullptr) GTEST_SKIP() << "no GPU visible";
  Graph g;
  auto exec = InProcessAllReduce(&g, gpu, gpu->name(), 1, 11);
  ASSERT_TRUE(exec.ok()) << exec.status();
  for (int step = 0; step < 3; ++step) {
    std::vector<Tensor> out;
    absl::Status s = (*exec)->Run({*Tensor::FromVector<float>({4}, {1, -2, 3, 4.0f + step})}, &out, step);
    ASSERT_TRUE(s.ok()) << s;
    ASSERT_TRUE(out[0].on_host());
    EXPECT_EQ(out[0].data<float>()[1], -2.0f);
    EXPECT_EQ(out[0].data<float>()[3], 4.0f + step);
  }
}

// Two GPUs of one process, each with its own executor on its own thread
// (as MIRRORED runs them): both get the mean, step after step.
TEST(NcclAllReduceTest, TwoGpusOfOneProcessAverage) {
  if (!TestHasGpus(2)) GTEST_SKIP() << "needs two GPUs (NCCL refuses two ranks on one)";
  GpuDevice* gpu0 = TestGpu();
  auto gpu1 = GpuDevice::Create("/device:GPU:1", 1);
  ASSERT_TRUE(gpu1.ok()) << gpu1.status();
  const std::string devices = gpu0->name() + "," + (*gpu1)->name();
  Graph g0, g1;
  auto e0 = InProcessAllReduce(&g0, gpu0, devices, 2, 12);
  auto e1 = InProcessAllReduce(&g1, gpu1->get(), devices, 2, 12);
  ASSERT_TRUE(e0.ok()) << e0.status();
  ASSERT_TRUE(e1.ok()) << e1.status();
  for (int step = 0; step < 5; ++step) {
    std::vector<Tensor> out0, out1;
    absl::Status s0, s1;
    std::thread t([&] { s1 = (*e1)->Run({*Tensor::FromVector<float>({4}, {3, 5, -7, 1.0f * step})}, &out1, step); });
    s0 = (*e0)->Run({*Tensor::FromVector<float>({4}, {1, -1, 7, 3.0f * step})}, &out0, step);
    t.join();
    ASSERT_TRUE(s0.ok()) << s0;
    ASSERT_TRUE(s1.ok()) << s1;
    for (const std::vector<Tensor>* out : {&out0, &out1}) {
      const float* v = (*out)[0].data<float>();
      EXPECT_EQ(v[0], 2.0f);
      EXPECT_EQ(v[1], 2.0f);
      EXPECT_EQ(v[2], 0.0f);
      EXPECT_EQ(v[3], 2.0f * step);
    }
  }
}

// A rank whose peer never comes (its replica failed) fails with the step's
// abort instead of waiting for ever, whether the abort comes before or
// after it joins.
TEST(NcclAllReduceTest, AWaitingRankFailsWhenItsStepAborts) {
  GpuDevice* gpu = TestGpu();
  if (gpu == nullptr) GTEST_SKIP() << "no GPU visible";
  Graph g;
  auto exec = InProcessAllReduce(&g, gpu, gpu->name() + ",/job:worker/task:0/device:GPU:7", 2, 13);
  ASSERT_TRUE(exec.ok()) << exec.status();
  for (bool abort_first : {true, false}) {
    SCOPED_TRACE(abort_first ? "aborted before the run" : "aborted during the run");
    LocalRendezvous rdv;
    if (abort_first) rdv.StartAbort(absl::AbortedError("replica 1 failed"));
    std::vector<Tensor> out;
    absl::Status s;
    std::thread t([&] { s = (*exec)->Run({*Tensor::FromVector<float>({4}, {1, 2, 3, 4})}, &out, 1, &rdv); });
    if (!abort_first) rdv.StartAbort(absl::AbortedError("replica 1 failed"));
    t.join();
    EXPECT_EQ(s.code(), absl::StatusCode::kAborted) << s;
    EXPECT_TRUE(absl::StrContains(s.message(), "replica 1 failed")) << s;
  }
}

TEST(NcclAllReduceTest, UniqueIdsAreHex) {
  if (TestGpu() == nullptr) GTEST_SKIP() << "no GPU visible";
  auto id = NewNcclUniqueId();
  ASSERT_TRUE(id.ok()) << id.status();
  EXPECT_EQ(id->size(), 2u * NCCL_UNIQUE_ID_BYTES);
}

TEST(NcclAllReduceTest, AGroupAcrossTasksNeedsItsId) {
  GpuDevice* gpu = TestGpu();
  if (gpu == nullptr) GTEST_SKIP() << "no GPU visible";
  auto comm = GetNcclCommunicator(gpu, 1, 0, 2, "");
  EXPECT_EQ(comm.status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace gpu
}  // namespace weft
