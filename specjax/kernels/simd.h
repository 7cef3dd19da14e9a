// The CPU's native float vector, for the kernels' inner loops.

#ifndef SPECJAX_KERNELS_SIMD_H_
#define SPECJAX_KERNELS_SIMD_H_

#include <cstring>

#if defined(__AVX__)
#include <immintrin.h>
#endif

namespace specjax {

// One zmm (16 floats) with AVX-512, one ymm (8 floats) otherwise. A 64-byte vector type on an
// AVX2 target is lowered by GCC through the stack (scalar broadcasts, spilled accumulators:
// 3x slower than XLA's dot, measured on an AVX2-only AMD EPYC), so the type must never be
// wider than the registers.
#if defined(__AVX512F__)
constexpr int kVecLanes = 16;
#elif defined(__AVX__)
constexpr int kVecLanes = 8;
#else
constexpr int kVecLanes = 4;
#endif
typedef float vf __attribute__((vector_size(kVecLanes * 4)));
typedef int vi __attribute__((vector_size(kVecLanes * 4)));

inline vf loadv(const float* p) {
  vf v;
  std::memcpy(&v, p, sizeof(v));
  return v;
}

inline void storev(float* p, vf v) { std::memcpy(p, &v, sizeof(v)); }

// Horizontal sum in log2(width) shuffle-adds, in registers (a sum through a stack copy of the
// vector stalls on store forwarding: measured 3x slower attention rows).
inline float hsum(vf v) {
#if defined(__AVX512F__)
  return _mm512_reduce_add_ps(v);
#elif defined(__AVX__)
  __m128 x = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  x = _mm_add_ps(x, _mm_movehl_ps(x, x));
  x = _mm_add_ss(x, _mm_movehdup_ps(x));
  return _mm_cvtss_f32(x);
#else
  float s = 0.0f;
  for (int i = 0; i < kVecLanes; ++i) s += v[i];
  return s;
#endif
}

}  // namespace specjax

#endif  // SPECJAX_KERNELS_SIMD_H_
