// CRC-32C (Castagnoli, reflected polynomial 0x82F63B78), the checksum of
// TFRecord files, plus the "masked" form TFRecord stores.
//
// On x86-64 builds with SSE4.2 (weft builds for x86-64-v3) the CRC32
// instruction does the work eight bytes at a time; elsewhere a slicing-by-8
// table does. Both give identical results.
//
// Masking exists because a CRC computed over data that itself contains CRCs
// is weak; TFRecord stores Mask(crc) = ((crc >> 15) | (crc << 17)) + 0xa282ead8.
//
// Thread-safety: every function here is pure and thread-safe.
#ifndef WEFT_COMMON_CRC32C_H_
#define WEFT_COMMON_CRC32C_H_

#include <cstddef>
#include <cstdint>

namespace weft {

// The CRC-32C of `n` bytes at `data`. Crc32c("123456789") == 0xE3069283.
uint32_t Crc32c(const void* data, size_t n);

// The CRC-32C of A+B, given `crc` = Crc32c(A) and B = (data, n). Lets a
// caller checksum a stream piece by piece; Crc32cExtend(0, d, n) == Crc32c(d, n).
uint32_t Crc32cExtend(uint32_t crc, const void* data, size_t n);

// TFRecord's masking of a stored CRC, and its inverse.
inline uint32_t MaskCrc32c(uint32_t crc) { return ((crc >> 15) | (crc << 17)) + 0xa282ead8u; }
inline uint32_t UnmaskCrc32c(uint32_t masked) {
  const uint32_t rot = masked - 0xa282ead8u;
  return (rot >> 17) | (rot << 15);
}

namespace crc32c_internal {
// The table-driven implementation, exposed so tests can check that the
// hardware path agrees with it.
uint32_t ExtendPortable(uint32_t crc, const void* data, size_t n);
// True when Crc32cExtend uses the CRC32 instruction.
bool UsesHardware();
}  // namespace crc32c_internal

}  // namespace weft

#endif  // WEFT_COMMON_CRC32C_H_
