#include "worker/collective/grpc_chunk_coding.h"

#include <cstring>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace weft {
namespace collective {
namespace {

TEST(ChunkCodingTest, PayloadIsNotCopiedOnSendAndRoundTrips) {
  Tensor t(DType::kFloat32, TensorShape{100});
  for (int i = 0; i < 100; ++i) t.flat<float>()[i] = i;
  const ChunkKey key{1, 2, 3, 4, 5, 6};
  grpc::ByteBuffer buffer = EncodeChunk(key, SendChunk{t, static_cast<const char*>(t.raw_data()) + 40, 200});
  std::vector<grpc::Slice> slices;
  ASSERT_TRUE(buffer.Dump(&slices).ok());
  ASSERT_EQ(slices.size(), 2u);
  EXPECT_EQ(static_cast<const void*>(slices[1].begin()), static_cast<const char*>(t.raw_data()) + 40);
  EXPECT_FALSE(t.RefCountIsOne());  // the slice pins the buffer
  slices.clear();

  auto decoded = DecodeChunk(&buffer);
  ASSERT_TRUE(decoded.ok()) << decoded.status();
  EXPECT_EQ(decoded->first, key);
  ASSERT_EQ(decoded->second.size(), 200u);
  std::string bytes;
  for (absl::string_view p : decoded->second.pieces) bytes.append(p.data(), p.size());
  EXPECT_EQ(std::memcmp(bytes.data(), t.flat<float>().data() + 10, 200), 0);
  decoded = absl::InternalError("drop");
  EXPECT_TRUE(t.RefCountIsOne());
}

TEST(ChunkCodingTest, HeaderSplitAcrossSlicesDecodes) {
  Tensor t(DType::kInt32, TensorShape{3});
  grpc::ByteBuffer buffer = EncodeChunk(ChunkKey{9, 8, 7, 1, 0, 2}, SendChunk{t, static_cast<const char*>(t.raw_data()), 12});
  grpc::Slice whole;
  ASSERT_TRUE(buffer.DumpToSingleSlice(&whole).ok());
  // Re-split into one-byte slices.
  std::vector<grpc::Slice> bytes;
  for (size_t i = 0; i < whole.size(); ++i) bytes.emplace_back(whole.begin() + i, 1);
  grpc::ByteBuffer split(bytes.data(), bytes.size());
  auto decoded = DecodeChunk(&split);
  ASSERT_TRUE(decoded.ok()) << decoded.status();
  EXPECT_EQ(decoded->first.group_key, 9);
  EXPECT_EQ(decoded->second.size(), 12u);
}

TEST(ChunkCodingTest, CorruptInputIsDataLoss) {
  grpc::Slice junk(std::string("\x05\x01\x02"));
  grpc::ByteBuffer buffer(&junk, 1);
  auto decoded = DecodeChunk(&buffer);
  EXPECT_EQ(decoded.status().code(), absl::StatusCode::kDataLoss);

  Tensor t(DType::kInt32, TensorShape{3});
  grpc::ByteBuffer good = EncodeChunk(ChunkKey{}, SendChunk{t, static_cast<const char*>(t.raw_data()), 12});
  grpc::Slice whole;
  ASSERT_TRUE(good.DumpToSingleSlice(&whole).ok());
  grpc::Slice truncated(whole.begin(), whole.size() - 1);
  grpc::ByteBuffer short_buffer(&truncated, 1);
  decoded = DecodeChunk(&short_buffer);
  EXPECT_EQ(decoded.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_NE(decoded.status().message().find("payload"), absl::string_view::npos) << decoded.status();
}

}  // namespace
}  // namespace collective
}  // namespace weft
