#include "worker/collective/fusion.h"

#include <memory>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/thread_pool.h"
#include "gtest/gtest.h"
#include "worker/collective/collective_test_util.h"
#include "worker/collective/in_process_transport.h"

namespace weft {
namespace collective {
namespace {

using testing::MakeGroup;
using testing::RunOnAllRanks;

TEST(FusionTest, PlansBucketsInOrderByDtypeAndSize) {
  std::vector<Tensor> t = {
      Tensor(DType::kFloat32, TensorShape{10}),   // 40 B
      Tensor(DType::kFloat32, TensorShape{10}),   // 40 B
      Tensor(DType::kFloat32, TensorShape{10}),   // 40 B: would pass 100
      Tensor(DType::kInt64, TensorShape{2}),      // other dtype
      Tensor(DType::kFloat32, TensorShape{100}),  // 400 B: alone
      Tensor(DType::kFloat32, TensorShape{0}),
      Tensor(DType::kFloat32, TensorShape{5}),
  };
  std::vector<Tensor*> ptrs;
  for (Tensor& x : t) ptrs.push_back(&x);
  std::vector<FusionBucket> b = PlanFusionBuckets(ptrs, 100);
  ASSERT_EQ(b.size(), 5u);
  EXPECT_EQ(b[0].tensors, (std::vector<int>{0, 1}));
  EXPECT_EQ(b[0].bytes, 80u);
  EXPECT_EQ(b[1].tensors, (std::vector<int>{2}));
  EXPECT_EQ(b[2].tensors, (std::vector<int>{3}));
  EXPECT_EQ(b[2].dtype, DType::kInt64);
  EXPECT_EQ(b[3].tensors, (std::vector<int>{4}));
  EXPECT_EQ(b[4].tensors, (std::vector<int>{5, 6}));
}

TEST(FusionTest, FusedAllReduceRoundTripsEveryTensor) {
  const int n = 3;
  InProcessCollectiveNetwork network(n);
  ThreadPool pool("reduce", 1);
  std::vector<std::unique_ptr<CollectiveExecutor>> executors;
  for (int r = 0; r < n; ++r) {
    executors.push_back(
        std::make_unique<CollectiveExecutor>(network.transport(r), network.mailbox(r), CollectiveExecutor::Options{&pool}));
  }
  // Per rank: gradients of assorted shapes and dtypes; value = rank + index.
  const std::vector<std::pair<DType, TensorShape>> specs = {
      {DType::kFloat32, TensorShape{3, 4}}, {DType::kFloat32, TensorShape{7}},   {DType::kInt32, TensorShape{5}},
      {DType::kFloat32, TensorShape{1000}}, {DType::kFloat32, TensorShape{}},    {DType::kFloat32, TensorShape{0}},
      {DType::kInt64, TensorShape{2, 2}},   {DType::kFloat32, TensorShape{33}},
  };
  std::vector<std::vector<Tensor>> grads(n);
  for (int r = 0; r < n; ++r) {
    for (const auto& [dtype, shape] : specs) {
      Tensor t(dtype, shape);
      for (int64_t i = 0; i < t.NumElements(); ++i) {
        if (dtype == DType::kFloat32) t.flat<float>()[i] = static_cast<float>(r + i);
        if (dtype == DType::kInt32) t.flat<int32_t>()[i] = static_cast<int32_t>(r + i);
        if (dtype == DType::kInt64) t.flat<int64_t>()[i] = r + i;
      }
      grads[r].push_back(t);
    }
  }
  auto statuses = RunOnAllRanks(n, [&](int r, StatusCallback done) {
    CollectiveParams p;
    p.group = MakeGroup(n, r);
    p.instance_key = 100;
    p.step_id = 1;
    std::vector<Tensor*> ptrs;
    for (Tensor& t : grads[r]) ptrs.push_back(&t);
    FusedAllReduceAsync(executors[r].get(), p, ptrs, /*bucket_bytes=*/256, std::move(done));
  });
  for (const auto& s : statuses) ASSERT_TRUE(s.ok()) << s;
  for (int r = 0; r < n; ++r) {
    for (size_t k = 0; k < specs.size(); ++k) {
      const Tensor& t = grads[r][k];
      EXPECT_EQ(t.shape(), specs[k].second);
      for (int64_t i = 0; i < t.NumElements(); ++i) {
        const double want = 3.0 * i + 3;  // sum over ranks 0..2 of (r + i)
        double got = 0;
        if (t.dtype() == DType::kFloat32) got = t.flat<float>()[i];
        if (t.dtype() == DType::kInt32) got = t.flat<int32_t>()[i];
        if (t.dtype() == DType::kInt64) got = static_cast<double>(t.flat<int64_t>()[i]);
        ASSERT_EQ(got, want) << "rank " << r << " tensor " << k << " element " << i;
      }
    }
  }
  for (int r = 0; r < n; ++r) EXPECT_EQ(network.mailbox(r)->NumEntries(), 0u);
}

}  // namespace
}  // namespace collective
}  // namespace weft
