#include "worker/grpc_tensor_coding.h"

#include <numeric>
#include <vector>

#include "common/tensor_proto_coding.h"
#include "gtest/gtest.h"
#include "proto/worker_service.pb.h"

namespace weft {
namespace worker {
namespace {

Tensor Iota(const TensorShape& shape) {
  Tensor t(DType::kFloat32, shape);
  std::iota(t.data<float>(), t.data<float>() + t.NumElements(), 0.5f);
  return t;
}

std::string Flatten(const grpc::ByteBuffer& b) {
  std::vector<grpc::Slice> slices;
  EXPECT_TRUE(b.Dump(&slices).ok());
  std::string out;
  for (const auto& s : slices) out.append(reinterpret_cast<const char*>(s.begin()), s.size());
  return out;
}

void ExpectSameTensor(const Tensor& a, const Tensor& b) {
  ASSERT_EQ(a.dtype(), b.dtype());
  ASSERT_EQ(a.shape(), b.shape());
  EXPECT_EQ(std::memcmp(a.raw_data(), b.raw_data(), a.TotalBytes()), 0);
}

TEST(TensorCodingTest, PayloadSlicePointsAtTheTensorBufferAndPinsIt) {
  Tensor t = Iota({3, 5});
  {
    grpc::ByteBuffer b = EncodeRecvTensorResponse(t, false);
    std::vector<grpc::Slice> slices;
    ASSERT_TRUE(b.Dump(&slices).ok());
    ASSERT_EQ(slices.size(), 2u);
    EXPECT_EQ(static_cast<const void*>(slices[1].begin()), t.raw_data());  // no copy
    EXPECT_EQ(slices[1].size(), t.TotalBytes());
    EXPECT_FALSE(t.RefCountIsOne());  // the buffer is pinned by the slice

    auto got = DecodeRecvTensorResponse(b);
    ASSERT_TRUE(got.ok()) << got.status();
    EXPECT_FALSE(got->is_dead);
    ExpectSameTensor(got->value, t);
    EXPECT_FALSE(got->value.SharesBufferWith(t));
  }
  EXPECT_TRUE(t.RefCountIsOne());  // released with the last slice
}

TEST(TensorCodingTest, DecodesAPayloadSplitAcrossManySlices) {
  Tensor t = Iota({1000});
  const std::string wire = Flatten(EncodeRecvTensorResponse(t, false));
  // Cut everywhere, header included: one-byte pieces first, then uneven ones.
  for (size_t step : {size_t{1}, size_t{7}, size_t{333}, size_t{4096}}) {
    std::vector<absl::string_view> pieces;
    for (size_t at = 0; at < wire.size(); at += step) pieces.push_back(absl::string_view(wire).substr(at, step));
    pieces.insert(pieces.begin() + 1, absl::string_view());  // empty pieces are harmless
    auto got = DecodeRecvTensorResponse(pieces);
    ASSERT_TRUE(got.ok()) << "step " << step << ": " << got.status();
    ExpectSameTensor(got->value, t);
  }
  // The same through a ByteBuffer of several slices.
  std::vector<grpc::Slice> slices;
  for (size_t at = 0; at < wire.size(); at += 1000) slices.emplace_back(wire.substr(at, 1000));
  grpc::ByteBuffer b(slices.data(), slices.size());
  auto got = DecodeRecvTensorResponse(b);
  ASSERT_TRUE(got.ok()) << got.status();
  ExpectSameTensor(got->value, t);
}

TEST(TensorCodingTest, ScalarsEmptyTensorsOtherDtypesAndDeadTensors) {
  for (const Tensor& t : {Tensor::Scalar<int64_t>(-3), Tensor(DType::kFloat32, {0, 4}), Tensor::Scalar<bool>(true),
                          Tensor::Scalar<int32_t>(7)}) {
    auto got = DecodeRecvTensorResponse(EncodeRecvTensorResponse(t, false));
    ASSERT_TRUE(got.ok()) << got.status();
    ExpectSameTensor(got->value, t);
  }
  auto dead = DecodeRecvTensorResponse(EncodeRecvTensorResponse(Tensor(), true));
  ASSERT_TRUE(dead.ok()) << dead.status();
  EXPECT_TRUE(dead->is_dead);
  EXPECT_FALSE(dead->value.IsInitialized());
}

TEST(TensorCodingTest, BoolPayloadIsNormalised) {
  std::string wire = EncodeRecvTensorHeader(Tensor(DType::kBool, {2}), false) + std::string("\x00\x05", 2);
  auto got = DecodeRecvTensorResponse({absl::string_view(wire)});
  ASSERT_TRUE(got.ok()) << got.status();
  const uint8_t* bytes = static_cast<const uint8_t*>(got->value.raw_data());
  EXPECT_EQ(bytes[0], 0);
  EXPECT_EQ(bytes[1], 1);
}

absl::Status DecodeString(const std::string& wire) {
  return DecodeRecvTensorResponse({absl::string_view(wire)}).status();
}

TEST(TensorCodingTest, CorruptOrShortInputIsDataLoss) {
  Tensor t = Iota({4});
  const std::string wire = Flatten(EncodeRecvTensorResponse(t, false));
  const std::string header = EncodeRecvTensorHeader(t, false);

  EXPECT_EQ(DecodeString("").code(), absl::StatusCode::kDataLoss);
  EXPECT_EQ(DecodeString("\x80").code(), absl::StatusCode::kDataLoss);                  // varint cut short
  EXPECT_EQ(DecodeString("\xff\xff\xff\xff\xff\x01").code(), absl::StatusCode::kDataLoss);  // overlong varint
  EXPECT_EQ(DecodeString(header.substr(0, header.size() - 1)).code(), absl::StatusCode::kDataLoss);  // short header
  EXPECT_EQ(DecodeString(std::string("\x03\xff\xff\xff", 4)).code(), absl::StatusCode::kDataLoss);  // garbage header
  absl::Status huge = DecodeString("\xff\xff\xff\x7f");
  EXPECT_EQ(huge.code(), absl::StatusCode::kDataLoss);
  EXPECT_NE(huge.message().find("exceeds"), absl::string_view::npos) << huge;

  absl::Status short_payload = DecodeString(wire.substr(0, wire.size() - 1));
  EXPECT_EQ(short_payload.code(), absl::StatusCode::kDataLoss);
  EXPECT_NE(short_payload.message().find("needs 16 payload bytes, got 15"), absl::string_view::npos)
      << short_payload;
  EXPECT_EQ(DecodeString(wire + "x").code(), absl::StatusCode::kDataLoss);

  // A well-formed header with nonsense in it.
  RecvTensorResponse bad;
  bad.mutable_tensor()->set_dtype(static_cast<DataType>(99));
  std::string body = bad.SerializeAsString();
  EXPECT_EQ(DecodeString(std::string(1, static_cast<char>(body.size())) + body).code(),
            absl::StatusCode::kDataLoss);
  bad.mutable_tensor()->set_dtype(DT_FLOAT);
  bad.mutable_tensor()->mutable_shape()->add_dim(-1);
  body = bad.SerializeAsString();
  EXPECT_EQ(DecodeString(std::string(1, static_cast<char>(body.size())) + body).code(),
            absl::StatusCode::kDataLoss);
}

// A reply whose tensor went through shared memory carries nothing else; the
// ring's message (header and payload as pieces) decodes like a gRPC reply.
TEST(TensorCodingTest, InShmRepliesAndRingMessages) {
  auto in_shm = DecodeRecvTensorResponse(EncodeInShmRecvTensorResponse());
  ASSERT_TRUE(in_shm.ok()) << in_shm.status();
  EXPECT_TRUE(in_shm->in_shm);
  EXPECT_FALSE(in_shm->value.IsInitialized());

  Tensor t(DType::kFloat32, TensorShape{3});
  t.flat<float>()[0] = 1.5f;
  t.flat<float>()[1] = -2.f;
  t.flat<float>()[2] = 4.f;
  const std::string header = EncodeRecvTensorHeader(t, false);
  const std::vector<absl::string_view> pieces = {header, absl::string_view(static_cast<const char*>(t.raw_data()), 7),
                                                 absl::string_view(static_cast<const char*>(t.raw_data()) + 7, 5)};
  auto got = DecodeRecvTensorResponse(pieces);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_FALSE(got->in_shm);
  EXPECT_EQ(got->value.flat<float>()[1], -2.f);

  // "In shared memory" with a tensor beside it is a corrupt reply.
  RecvTensorResponse both;
  both.set_in_shm(true);
  both.mutable_tensor()->set_dtype(DTypeToProto(DType::kFloat32));
  std::string body = both.SerializeAsString();
  std::string framed(1, static_cast<char>(body.size()));
  framed += body;
  auto corrupt = DecodeRecvTensorResponse(std::vector<absl::string_view>{framed});
  EXPECT_EQ(corrupt.status().code(), absl::StatusCode::kDataLoss);
}

// A request that came through a ring is answered there, its errors too: the
// error comes back as itself; an error reply with anything else in it, or
// a code that is no status code, is corrupt.
TEST(TensorCodingTest, ErrorRepliesCarryTheCalleesStatus) {
  const absl::Status refused = absl::PermissionDeniedError("task t asked for 'a:0', which is sent to u");
  EXPECT_EQ(DecodeString(EncodeRecvTensorError(refused)), refused);
  const absl::Status long_error = absl::AbortedError(std::string(100000, 'x'));
  absl::Status cut = DecodeString(EncodeRecvTensorError(long_error));
  EXPECT_EQ(cut.code(), absl::StatusCode::kAborted);
  EXPECT_EQ(cut.message().size(), kMaxRecvTensorErrorBytes);

  auto frame = [](const RecvTensorResponse& header) {
    const std::string body = header.SerializeAsString();
    return std::string(1, static_cast<char>(body.size())) + body;
  };
  RecvTensorResponse bad;
  bad.set_error_code(99);
  EXPECT_EQ(DecodeString(frame(bad)).code(), absl::StatusCode::kDataLoss);
  bad.set_error_code(-3);
  EXPECT_EQ(DecodeString(frame(bad)).code(), absl::StatusCode::kDataLoss);
  bad.set_error_code(0);
  bad.set_error_message("a message without a code");
  EXPECT_EQ(DecodeString(frame(bad)).code(), absl::StatusCode::kDataLoss);
  bad.set_error_code(static_cast<int32_t>(absl::StatusCode::kInternal));
  bad.set_is_dead(true);
  EXPECT_EQ(DecodeString(frame(bad)).code(), absl::StatusCode::kDataLoss);
  bad.set_is_dead(false);
  EXPECT_EQ(DecodeString(frame(bad) + "payload").code(), absl::StatusCode::kDataLoss);
  EXPECT_EQ(DecodeString(frame(bad)).code(), absl::StatusCode::kInternal);
}

// A reply in parts, as a large one comes through shared memory: the header
// and the payload's start, then the rest in order.
TEST(TensorCodingTest, AssemblesAReplyFromParts) {
  const Tensor t = Iota(TensorShape{1000});
  const std::string header = EncodeRecvTensorHeader(t, false);
  const char* payload = static_cast<const char*>(t.raw_data());
  RecvTensorAssembler a;
  ASSERT_TRUE(a.Begin({header, absl::string_view(payload, 100)}, /*more_parts=*/true).ok());
  EXPECT_FALSE(a.complete());
  EXPECT_EQ(a.filled(), 100u);
  ASSERT_TRUE(a.Add({absl::string_view(payload + 100, 1900)}).ok());
  EXPECT_FALSE(a.complete());
  ASSERT_TRUE(a.Add({absl::string_view(payload + 2000, 1000), absl::string_view(payload + 3000, 1000)}).ok());
  ASSERT_TRUE(a.complete());
  ReceivedTensor got = a.Take();
  ExpectSameTensor(got.value, t);

  // A part past the tensor's end is refused, naming what was expected.
  RecvTensorAssembler over;
  ASSERT_TRUE(over.Begin({header, absl::string_view(payload, 3999)}, true).ok());
  absl::Status s = over.Add({absl::string_view(payload, 2)});
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss);
  EXPECT_NE(s.message().find("needs 4000 payload bytes, got 4001"), absl::string_view::npos) << s;

  // A header claiming more than this process may hold is refused before
  // anything is allocated, even though parts are still to come.
  RecvTensorResponse huge;
  huge.mutable_tensor()->set_dtype(DTypeToProto(DType::kFloat32));
  TensorShape shape{int64_t{1} << 20, 1 << 19};  // 2 TiB of floats
  ShapeToProto(shape, huge.mutable_tensor()->mutable_shape());
  const std::string body = huge.SerializeAsString();
  std::string framed(1, static_cast<char>(body.size()));
  framed += body;
  RecvTensorAssembler big;
  s = big.Begin({framed}, true);
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted) << s;
  // And a whole reply (no parts to come) that is short is DATA_LOSS.
  RecvTensorAssembler whole;
  EXPECT_EQ(whole.Begin({header, absl::string_view(payload, 100)}, false).code(), absl::StatusCode::kDataLoss);
}

}  // namespace
}  // namespace worker
}  // namespace weft
