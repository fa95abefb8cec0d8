// AVX2 + FMA traits (8 floats / 8 int32 per register); the AVX-512 files use
// their transposes and activation quantization too.
#pragma once

#include <immintrin.h>

#include <cstdint>
#include <cstring>

#include "spmm_generic.h"

namespace edgenlp::kernels::detail {
namespace {

struct Avx2F32 {
  using Reg = __m256;
  static constexpr int L = 8;
  static constexpr int kT = 8;
  static Reg zero() { return _mm256_setzero_ps(); }
  static Reg load(const float* p) { return _mm256_loadu_ps(p); }
  static Reg bcast(const float* p) { return _mm256_broadcast_ss(p); }
  static Reg fma(Reg acc, Reg a, Reg b) { return _mm256_fmadd_ps(a, b, acc); }
  static Reg add(Reg a, Reg b) { return _mm256_add_ps(a, b); }
  static void store(float* p, Reg v) { _mm256_storeu_ps(p, v); }
  // 8x8: d[i][j] = s[j][i]
  static void transpose(const float* s, int lds, float* d, int ldd) {
    const __m256 r0 = _mm256_loadu_ps(s), r1 = _mm256_loadu_ps(s + lds), r2 = _mm256_loadu_ps(s + 2 * lds),
                 r3 = _mm256_loadu_ps(s + 3 * lds), r4 = _mm256_loadu_ps(s + 4 * lds), r5 = _mm256_loadu_ps(s + 5 * lds),
                 r6 = _mm256_loadu_ps(s + 6 * lds), r7 = _mm256_loadu_ps(s + 7 * lds);
    const __m256 t0 = _mm256_unpacklo_ps(r0, r1), t1 = _mm256_unpackhi_ps(r0, r1), t2 = _mm256_unpacklo_ps(r2, r3),
                 t3 = _mm256_unpackhi_ps(r2, r3), t4 = _mm256_unpacklo_ps(r4, r5), t5 = _mm256_unpackhi_ps(r4, r5),
                 t6 = _mm256_unpacklo_ps(r6, r7), t7 = _mm256_unpackhi_ps(r6, r7);
    const __m256 u0 = _mm256_shuffle_ps(t0, t2, _MM_SHUFFLE(1, 0, 1, 0)),
                 u1 = _mm256_shuffle_ps(t0, t2, _MM_SHUFFLE(3, 2, 3, 2)),
                 u2 = _mm256_shuffle_ps(t1, t3, _MM_SHUFFLE(1, 0, 1, 0)),
                 u3 = _mm256_shuffle_ps(t1, t3, _MM_SHUFFLE(3, 2, 3, 2)),
                 u4 = _mm256_shuffle_ps(t4, t6, _MM_SHUFFLE(1, 0, 1, 0)),
                 u5 = _mm256_shuffle_ps(t4, t6, _MM_SHUFFLE(3, 2, 3, 2)),
                 u6 = _mm256_shuffle_ps(t5, t7, _MM_SHUFFLE(1, 0, 1, 0)),
                 u7 = _mm256_shuffle_ps(t5, t7, _MM_SHUFFLE(3, 2, 3, 2));
    _mm256_storeu_ps(d, _mm256_permute2f128_ps(u0, u4, 0x20));
    _mm256_storeu_ps(d + ldd, _mm256_permute2f128_ps(u1, u5, 0x20));
    _mm256_storeu_ps(d + 2 * ldd, _mm256_permute2f128_ps(u2, u6, 0x20));
    _mm256_storeu_ps(d + 3 * ldd, _mm256_permute2f128_ps(u3, u7, 0x20));
    _mm256_storeu_ps(d + 4 * ldd, _mm256_permute2f128_ps(u0, u4, 0x31));
    _mm256_storeu_ps(d + 5 * ldd, _mm256_permute2f128_ps(u1, u5, 0x31));
    _mm256_storeu_ps(d + 6 * ldd, _mm256_permute2f128_ps(u2, u6, 0x31));
    _mm256_storeu_ps(d + 7 * ldd, _mm256_permute2f128_ps(u3, u7, 0x31));
  }
};

inline void minmax_avx2(const float* x, int k, float* lo, float* hi) {
  __m256 a = _mm256_setzero_ps(), b = _mm256_setzero_ps();
  int i = 0;
  for (; i + 8 <= k; i += 8) {
    const __m256 v = _mm256_loadu_ps(x + i);
    a = _mm256_min_ps(a, v);
    b = _mm256_max_ps(b, v);
  }
  alignas(32) float la[8], lb[8];
  _mm256_store_ps(la, a);
  _mm256_store_ps(lb, b);
  float mn, mx;
  minmax_scalar(x + i, k - i, &mn, &mx);
  for (int j = 0; j < 8; ++j) {
    mn = std::min(mn, la[j]);
    mx = std::max(mx, lb[j]);
  }
  *lo = mn;
  *hi = mx;
}

// Two groups (8 channels) per step, unsigned bytes.
inline void quant_row_avx2(const float* row, int k, int kg, const ActParams& p, int qmax, std::uint8_t* dst,
                           int stride) {
  const __m256 inv = _mm256_set1_ps(p.inv);
  const __m256i z = _mm256_set1_epi32(p.zero), hi = _mm256_set1_epi32(qmax), lo = _mm256_setzero_si256();
  int g = 0;
  for (; (g + 2) * 4 <= k; g += 2) {
    __m256i q = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(row + g * 4), inv));
    q = _mm256_min_epi32(_mm256_max_epi32(_mm256_add_epi32(q, z), lo), hi);
    const __m256i b = _mm256_packus_epi16(_mm256_packs_epi32(q, q), _mm256_setzero_si256());
    const std::int32_t b0 = _mm256_cvtsi256_si32(b), b1 = _mm256_extract_epi32(b, 4);
    std::memcpy(dst + static_cast<std::size_t>(g) * stride, &b0, 4);
    std::memcpy(dst + static_cast<std::size_t>(g + 1) * stride, &b1, 4);
  }
  quant_groups_scalar(row, k, g, kg, p, qmax, false, dst, stride);
}

struct Avx2Q8 {
  using Reg = __m256i;
  using T = Avx2F32;
  static constexpr int L = 8;
  static constexpr bool kSigned = false;
  static Reg zero() { return _mm256_setzero_si256(); }
  static Reg load(const std::uint8_t* p) { return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)); }
  static Reg bcast4(const std::int8_t* p) {
    std::int32_t v;
    std::memcpy(&v, p, 4);
    return _mm256_set1_epi32(v);
  }
  // u8 x s8 pairs summed in int16 (exact: activations are 7-bit), then pairs to int32.
  static Reg dot4(Reg acc, Reg x, Reg w) {
    return _mm256_add_epi32(acc, _mm256_madd_epi16(_mm256_maddubs_epi16(x, w), _mm256_set1_epi16(1)));
  }
  static Reg add(Reg a, Reg b) { return _mm256_add_epi32(a, b); }
  static void epilogue(float* dst, Reg acc, const std::int32_t* zx, const float* sx, std::int32_t rsum, float wscale,
                       float bias) {
    const __m256i zr = _mm256_mullo_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(zx)), _mm256_set1_epi32(rsum));
    const __m256 f = _mm256_cvtepi32_ps(_mm256_sub_epi32(acc, zr));
    const __m256 s = _mm256_mul_ps(_mm256_loadu_ps(sx), _mm256_set1_ps(wscale));
    _mm256_storeu_ps(dst, _mm256_add_ps(_mm256_mul_ps(f, s), _mm256_set1_ps(bias)));
  }
  static void minmax(const float* x, int k, float* lo, float* hi) { minmax_avx2(x, k, lo, hi); }
  static void quant_row(const float* row, int k, int kg, const ActParams& p, int qmax, std::uint8_t* dst, int stride) {
    quant_row_avx2(row, k, kg, p, qmax, dst, stride);
  }
};

}  // namespace
}  // namespace edgenlp::kernels::detail
