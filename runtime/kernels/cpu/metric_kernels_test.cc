// InTopK (graph/ops/metric_ops.cc): counts with ties, k at or past the
// number of classes, bad labels refused by the kernel, and bad operands
// refused by shape inference naming the node.
#include <cmath>
#include <limits>
#include <string>

#include "graph/builder.h"
#include "gtest/gtest.h"
#include "runtime/device.h"
#include "runtime/executor.h"
#include "runtime/testing/test_util.h"

namespace weft {
namespace {

using testing::FloatTensor;
using testing::IntTensor;

// InTopK(logits, labels) with attr k over placeholders of unknown rows.
absl::StatusOr<float> InTopK(const Tensor& logits, const Tensor& labels, int64_t k) {
  Graph g;
  GraphBuilder b(&g);
  Output out = b.Op("InTopK",
                    {b.Placeholder(DType::kFloat32, {-1, logits.shape().dim(1)}, "logits"),
                     b.Placeholder(DType::kInt32, {-1}, "labels")},
                    {Attr("k", k)}, "top_k");
  if (!b.status().ok()) return b.status();
  CpuDevice device("/device:CPU:0", 1);
  auto r = RunGraphOnce(g, &device, {{"logits", logits}, {"labels", labels}}, {out.name()});
  if (!r.ok()) return r.status();
  EXPECT_EQ((*r)[0].shape(), TensorShape{});
  return (*r)[0].data<float>()[0];
}

TEST(InTopKTest, CountsRowsWhoseLabelIsAmongTheKLargest) {
  const Tensor logits = FloatTensor({3, 4}, {0.1f, 0.9f, 0.5f, 0.3f,  //
                                             4.0f, 3.0f, 2.0f, 1.0f,  //
                                             0.0f, 0.0f, 1.0f, 0.0f});
  const Tensor labels = IntTensor({3}, {2, 3, 1});
  // Row 0: label logit 0.5 is 2nd; row 1: 1.0 is 4th; row 2: 0.0 has one greater.
  EXPECT_EQ(*InTopK(logits, labels, 1), 0.0f);
  EXPECT_EQ(*InTopK(logits, labels, 2), 2.0f);
  EXPECT_EQ(*InTopK(logits, labels, 3), 2.0f);
  EXPECT_EQ(*InTopK(logits, labels, 4), 3.0f);
}

TEST(InTopKTest, TiesCountInTheLabelsFavour) {
  // Every logit equal: none is strictly greater, so even k = 1 counts.
  const Tensor flat = FloatTensor({2, 3}, {1.0f, 1.0f, 1.0f, 2.0f, 2.0f, 2.0f});
  EXPECT_EQ(*InTopK(flat, IntTensor({2}, {0, 2}), 1), 2.0f);
  // Two logits tie above the label's: out for k = 2, in for k = 3.
  const Tensor tied = FloatTensor({1, 4}, {5.0f, 5.0f, 1.0f, 1.0f});
  EXPECT_EQ(*InTopK(tied, IntTensor({1}, {3}), 2), 0.0f);
  EXPECT_EQ(*InTopK(tied, IntTensor({1}, {3}), 3), 1.0f);
  EXPECT_EQ(*InTopK(tied, IntTensor({1}, {1}), 1), 1.0f);
}

TEST(InTopKTest, KAtOrPastTheClassesCountsEveryFiniteRow) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const Tensor logits = FloatTensor({3, 2}, {0.0f, 1.0f, 3.0f, -3.0f, nan, 1.0f});
  EXPECT_EQ(*InTopK(logits, IntTensor({3}, {0, 1, 1}), 2), 3.0f);
  EXPECT_EQ(*InTopK(logits, IntTensor({3}, {0, 1, 1}), 100), 3.0f);
  // A non-finite label logit never counts.
  EXPECT_EQ(*InTopK(logits, IntTensor({3}, {0, 1, 0}), 100), 2.0f);
  // No rows: no hits.
  EXPECT_EQ(*InTopK(Tensor(DType::kFloat32, {0, 2}), Tensor(DType::kInt32, {0}), 1), 0.0f);
}

TEST(InTopKTest, RefusesLabelsOutsideTheClasses) {
  const Tensor logits = FloatTensor({2, 3}, {0, 1, 2, 3, 4, 5});
  for (int32_t bad : {3, -1}) {
    auto r = InTopK(logits, IntTensor({2}, {0, bad}), 1);
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(r.status().message().find("label " + std::to_string(bad) + " in row 1"), std::string::npos)
        << r.status();
  }
}

TEST(InTopKTest, ShapeInferenceRefusesBadOperandsNamingTheNode) {
  struct Case {
    TensorShape logits;
    DType logits_type;
    TensorShape labels;
    DType labels_type;
    int64_t k;
    std::string want;
  };
  const Case cases[] = {
      {{-1, 10, 2}, DType::kFloat32, {-1}, DType::kInt32, 1, "logits must have rank 2"},
      {{-1, 10}, DType::kFloat32, {-1, 1}, DType::kInt32, 1, "labels must have rank 1"},
      {{-1, 10}, DType::kInt32, {-1}, DType::kInt32, 1, "logits must be float32"},
      {{-1, 10}, DType::kFloat32, {-1}, DType::kFloat32, 1, "labels must be int32"},
      {{4, 10}, DType::kFloat32, {5}, DType::kInt32, 1, "need one entry per row"},
      {{-1, 10}, DType::kFloat32, {-1}, DType::kInt32, 0, "k must be at least 1"},
  };
  for (const Case& c : cases) {
    Graph g;
    GraphBuilder b(&g);
    b.Op("InTopK", {b.Placeholder(c.logits_type, c.logits, "z"), b.Placeholder(c.labels_type, c.labels, "y")},
         {Attr("k", c.k)}, "my_top_k");
    ASSERT_FALSE(b.status().ok()) << c.want;
    EXPECT_EQ(b.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(b.status().message().find("my_top_k"), std::string::npos) << b.status();
    EXPECT_NE(b.status().message().find(c.want), std::string::npos) << b.status();
  }
}

}  // namespace
}  // namespace weft
