// A CollectiveAllReduce on GPU tensors runs through NCCL; runs on a GPU and
// skips without one.
#include <vector>

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
