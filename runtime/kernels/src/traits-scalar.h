// Portable traits: one token per "register" (the scalar ISA, and tails).
#pragma once

#include <cstdint>
#include <cstring>

#include "spmm_generic.h"

namespace edgenlp::kernels::detail {
namespace {

struct ScalarF32 {
  using Reg = float;
  static constexpr int L = 1;
  static constexpr int kT = 1;
  static Reg zero() { return 0.0f; }
  static Reg load(const float* p) { return *p; }
  static Reg bcast(const float* p) { return *p; }
  static Reg fma(Reg acc, Reg a, Reg b) { return acc + a * b; }
  static Reg add(Reg a, Reg b) { return a + b; }
  static void store(float* p, Reg v) { *p = v; }
  static void transpose(const float* s, int, float* d, int) { *d = *s; }
};

struct ScalarQ8 {
  using Reg = std::int32_t;  // an accumulator, or 4 activation / weight bytes
  using T = ScalarF32;
  static constexpr int L = 1;
  static constexpr bool kSigned = false;
  static Reg zero() { return 0; }
  static Reg load(const std::uint8_t* p) {
    Reg v;
    std::memcpy(&v, p, 4);
    return v;
  }
  static Reg bcast4(const std::int8_t* p) {
    Reg v;
    std::memcpy(&v, p, 4);
    return v;
  }
  static Reg dot4(Reg acc, Reg x, Reg w) {
    const auto ux = static_cast<std::uint32_t>(x), uw = static_cast<std::uint32_t>(w);
    for (int j = 0; j < 4; ++j)
      acc += static_cast<std::int32_t>(static_cast<std::uint8_t>(ux >> (8 * j))) *
             static_cast<std::int32_t>(static_cast<std::int8_t>(static_cast<std::uint8_t>(uw >> (8 * j))));
    return acc;
  }
  static Reg add(Reg a, Reg b) { return a + b; }
  static void epilogue(float* dst, Reg acc, const std::int32_t* zx, const float* sx, std::int32_t rsum, float wscale,
                       float bias) {
    *dst = static_cast<float>(acc - zx[0] * rsum) * (sx[0] * wscale) + bias;
  }
  static void minmax(const float* x, int k, float* lo, float* hi) { minmax_scalar(x, k, lo, hi); }
  static void quant_row(const float* row, int k, int kg, const ActParams& p, int qmax, std::uint8_t* dst, int stride) {
    quant_groups_scalar(row, k, 0, kg, p, qmax, kSigned, dst, stride);
  }
};

}  // namespace
}  // namespace edgenlp::kernels::detail
