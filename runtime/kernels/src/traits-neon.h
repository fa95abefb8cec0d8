// NEON traits (4 floats / 4 int32 per register). Activation bytes are signed
// (q ^ 0x80): NEON multiplies s8 x s8. NeonQ8 needs no dot-product extension;
// the dot-product file derives its traits from it.
#pragma once

#include <arm_neon.h>

#include <cstdint>
#include <cstring>

#include "spmm_generic.h"

namespace edgenlp::kernels::detail {
namespace {

struct NeonF32 {
  using Reg = float32x4_t;
  static constexpr int L = 4;
  static constexpr int kT = 4;
  static Reg zero() { return vdupq_n_f32(0.0f); }
  static Reg load(const float* p) { return vld1q_f32(p); }
  static Reg bcast(const float* p) { return vld1q_dup_f32(p); }
  static Reg fma(Reg acc, Reg a, Reg b) { return vfmaq_f32(acc, a, b); }
  static Reg add(Reg a, Reg b) { return vaddq_f32(a, b); }
  static void store(float* p, Reg v) { vst1q_f32(p, v); }
  static void transpose(const float* s, int lds, float* d, int ldd) {
    const float32x4x2_t p01 = vtrnq_f32(vld1q_f32(s), vld1q_f32(s + lds));
    const float32x4x2_t p23 = vtrnq_f32(vld1q_f32(s + 2 * lds), vld1q_f32(s + 3 * lds));
    vst1q_f32(d, vcombine_f32(vget_low_f32(p01.val[0]), vget_low_f32(p23.val[0])));
    vst1q_f32(d + ldd, vcombine_f32(vget_low_f32(p01.val[1]), vget_low_f32(p23.val[1])));
    vst1q_f32(d + 2 * ldd, vcombine_f32(vget_high_f32(p01.val[0]), vget_high_f32(p23.val[0])));
    vst1q_f32(d + 3 * ldd, vcombine_f32(vget_high_f32(p01.val[1]), vget_high_f32(p23.val[1])));
  }
};

struct NeonQ8 {
  using Reg = int32x4_t;
  using T = NeonF32;
  static constexpr int L = 4;
  static constexpr bool kSigned = true;
  static Reg zero() { return vdupq_n_s32(0); }
  static Reg load(const std::uint8_t* p) { return vreinterpretq_s32_u8(vld1q_u8(p)); }
  static Reg bcast4(const std::int8_t* p) {
    std::int32_t v;
    std::memcpy(&v, p, 4);
    return vdupq_n_s32(v);
  }
  // s8 x s8 products (|p| <= 128*127), pairs summed in int16 (<= 32512), then into int32 per token.
  static Reg dot4(Reg acc, Reg x, Reg w) {
    const int8x16_t xs = vreinterpretq_s8_s32(x), ws = vreinterpretq_s8_s32(w);
    const int16x8_t p0 = vmull_s8(vget_low_s8(xs), vget_low_s8(ws));
    const int16x8_t p1 = vmull_high_s8(xs, ws);
    return vpadalq_s16(acc, vpaddq_s16(p0, p1));
  }
  static Reg add(Reg a, Reg b) { return vaddq_s32(a, b); }
  static void epilogue(float* dst, Reg acc, const std::int32_t* zx, const float* sx, std::int32_t rsum, float wscale,
                       float bias) {
    const float32x4_t f = vcvtq_f32_s32(vsubq_s32(acc, vmulq_n_s32(vld1q_s32(zx), rsum)));
    const float32x4_t s = vmulq_n_f32(vld1q_f32(sx), wscale);
    vst1q_f32(dst, vaddq_f32(vmulq_f32(f, s), vdupq_n_f32(bias)));
  }
  static void minmax(const float* x, int k, float* lo, float* hi) {
    float32x4_t a = vdupq_n_f32(0.0f), b = vdupq_n_f32(0.0f);
    int i = 0;
    for (; i + 4 <= k; i += 4) {
      const float32x4_t v = vld1q_f32(x + i);
      a = vminq_f32(a, v);
      b = vmaxq_f32(b, v);
    }
    float mn, mx;
    minmax_scalar(x + i, k - i, &mn, &mx);
    *lo = std::min(mn, vminvq_f32(a));
    *hi = std::max(mx, vmaxvq_f32(b));
  }
  static void quant_row(const float* row, int k, int kg, const ActParams& p, int qmax, std::uint8_t* dst, int stride) {
    const int32x4_t z = vdupq_n_s32(p.zero), hi = vdupq_n_s32(qmax), lo = vdupq_n_s32(0);
    const uint8x8_t flip = vdup_n_u8(0x80);
    int g = 0;
    for (; (g + 1) * 4 <= k; ++g) {
      int32x4_t q = vcvtnq_s32_f32(vmulq_n_f32(vld1q_f32(row + g * 4), p.inv));
      q = vminq_s32(vmaxq_s32(vaddq_s32(q, z), lo), hi);
      const uint16x4_t h = vreinterpret_u16_s16(vmovn_s32(q));
      const uint8x8_t b = veor_u8(vmovn_u16(vcombine_u16(h, h)), flip);
      vst1_lane_u32(reinterpret_cast<std::uint32_t*>(dst + static_cast<std::size_t>(g) * stride), vreinterpret_u32_u8(b), 0);
    }
    quant_groups_scalar(row, k, g, kg, p, qmax, kSigned, dst, stride);
  }
};

}  // namespace
}  // namespace edgenlp::kernels::detail
