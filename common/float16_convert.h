// Bulk float32 <-> float16 conversion on the host, eight values at a time
// with F16C (the build's x86-64-v3 has it): round to nearest even one way,
// widen (times a scale) the other. What the float16 all-reduce's host paths
// use (runtime/kernels/cpu/collective_kernels.cc, and the GPU kernel's copies
// through the host).
//
// Thread-safety: pure functions.
#ifndef WEFT_COMMON_FLOAT16_CONVERT_H_
#define WEFT_COMMON_FLOAT16_CONVERT_H_

#include <immintrin.h>

#include <cstdint>

#include "common/dtype.h"

namespace weft {

// y = x rounded to nearest even in float16.
inline void FloatToHalf(const float* x, Half* y, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    _mm_storeu_si128(reinterpret_cast<__m128i*>(y + i),
                     _mm256_cvtps_ph(_mm256_loadu_ps(x + i), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
  }
  for (; i < n; ++i) y[i] = Half(x[i]);
}

// y = scale * x, widened to float32.
inline void HalfToFloat(const Half* x, float scale, float* y, int64_t n) {
  int64_t i = 0;
  const __m256 s = _mm256_set1_ps(scale);
  for (; i + 8 <= n; i += 8) {
    _mm256_storeu_ps(y + i,
                     _mm256_mul_ps(_mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(x + i))), s));
  }
  for (; i < n; ++i) y[i] = scale * static_cast<float>(x[i]);
}

}  // namespace weft

#endif  // WEFT_COMMON_FLOAT16_CONVERT_H_
