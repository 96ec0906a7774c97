#include "common/tensor_proto_coding.h"

#include "gtest/gtest.h"

namespace weft {
namespace {

TEST(TensorProtoCodingTest, RoundTripsEveryDtype) {
  Tensor f = Tensor::FromVector<float>({2, 2}, std::vector<float>{1.5f, -2, 3, 4}).value();
  Tensor i = Tensor::FromVector<int64_t>({3}, std::vector<int64_t>{1, -5, 1LL << 40}).value();
  for (const Tensor& t : {f, i, Tensor::Scalar<int32_t>(7), Tensor::Scalar<bool>(true)}) {
    TensorProto p;
    TensorToProto(t, &p);
    auto back = TensorFromProto(p);
    ASSERT_TRUE(back.ok()) << back.status();
    EXPECT_EQ(back->dtype(), t.dtype());
    EXPECT_EQ(back->shape(), t.shape());
    EXPECT_EQ(back->DebugString(), t.DebugString());
  }
}

TEST(TensorProtoCodingTest, RejectsContentOfWrongSize) {
  TensorProto p;
  p.set_dtype(DT_FLOAT);
  p.mutable_shape()->add_dim(4);
  p.set_content(std::string(12, '\0'));
  auto t = TensorFromProto(p);
  ASSERT_FALSE(t.ok());
  EXPECT_NE(std::string(t.status().message()).find("needs 16 bytes"), std::string::npos) << t.status();
}

TEST(TensorProtoCodingTest, RejectsBadDtypeAndShape) {
  TensorProto p;
  p.set_dtype(static_cast<DataType>(42));
  EXPECT_FALSE(TensorFromProto(p).ok());
  p.set_dtype(DT_FLOAT);
  p.mutable_shape()->add_dim(-3);
  EXPECT_FALSE(TensorFromProto(p).ok());
  p.mutable_shape()->set_dim(0, -1);
  EXPECT_FALSE(TensorFromProto(p).ok());  // unknown dims are not a concrete tensor
  p.mutable_shape()->set_dim(0, int64_t{1} << 40);
  p.mutable_shape()->add_dim(int64_t{1} << 40);
  EXPECT_FALSE(TensorFromProto(p).ok());
}

}  // namespace
}  // namespace weft
