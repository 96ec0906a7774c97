#include "common/crc32c.h"

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace weft {
namespace {

TEST(Crc32cTest, KnownVectors) {
  const std::string check = "123456789";
  EXPECT_EQ(Crc32c(check.data(), check.size()), 0xE3069283u);
  EXPECT_EQ(Crc32c("", 0), 0u);
  EXPECT_EQ(Crc32c("a", 1), 0xC1D04330u);
  // RFC 3720 (iSCSI) appendix B.4 test patterns.
  std::vector<uint8_t> buf(32, 0);
  EXPECT_EQ(Crc32c(buf.data(), buf.size()), 0x8A9136AAu);
  buf.assign(32, 0xFF);
  EXPECT_EQ(Crc32c(buf.data(), buf.size()), 0x62A8AB43u);
  for (int i = 0; i < 32; ++i) buf[i] = static_cast<uint8_t>(i);
  EXPECT_EQ(Crc32c(buf.data(), buf.size()), 0x46DD794Eu);
  for (int i = 0; i < 32; ++i) buf[i] = static_cast<uint8_t>(31 - i);
  EXPECT_EQ(Crc32c(buf.data(), buf.size()), 0x113FDB5Cu);
}

TEST(Crc32cTest, ExtendEqualsWhole) {
  std::mt19937 rng(7);
  std::vector<uint8_t> data(1000);
  for (auto& b : data) b = static_cast<uint8_t>(rng());
  const uint32_t whole = Crc32c(data.data(), data.size());
  for (size_t split : {0, 1, 7, 8, 9, 500, 999, 1000}) {
    uint32_t c = Crc32c(data.data(), split);
    c = Crc32cExtend(c, data.data() + split, data.size() - split);
    EXPECT_EQ(c, whole) << "split at " << split;
  }
}

TEST(Crc32cTest, HardwareMatchesPortableAtEveryAlignmentAndLength) {
  std::mt19937 rng(11);
  std::vector<uint8_t> data(300);
  for (auto& b : data) b = static_cast<uint8_t>(rng());
  for (size_t offset = 0; offset < 16; ++offset) {
    for (size_t len = 0; len + offset <= data.size(); len += 13) {
      const uint8_t* p = data.data() + offset;
      ASSERT_EQ(Crc32c(p, len), crc32c_internal::ExtendPortable(0, p, len))
          << "offset " << offset << " length " << len;
    }
  }
  // weft builds for x86-64-v3, so the fast path should be the one compiled in.
#if defined(__x86_64__)
  EXPECT_TRUE(crc32c_internal::UsesHardware());
#endif
}

TEST(Crc32cTest, MaskRoundTripsAndChangesValue) {
  for (uint32_t crc : {0u, 1u, 0xE3069283u, 0xFFFFFFFFu, 0x12345678u}) {
    EXPECT_EQ(UnmaskCrc32c(MaskCrc32c(crc)), crc);
    EXPECT_NE(MaskCrc32c(crc), crc);
  }
  EXPECT_EQ(MaskCrc32c(0u), 0xa282ead8u);
  // Mask(0xE3069283): rotate right by 15 -> 0x2507C60D, plus the delta.
  EXPECT_EQ(MaskCrc32c(0xE3069283u), 0x2507C60Du + 0xa282ead8u);
}

}  // namespace
}  // namespace weft
