// The block-sparse kernel bodies, written once over a small "vector traits" type
// and instantiated per ISA in the f32-spmm-*.cpp / qd8-f32-qc8w-spmm-*.cpp files
// (each compiled with its own ISA flags).
//
// fp32 traits V:  type Reg; L (floats per Reg); zero, load, bcast (from memory),
//                 fma(acc, a, b) = acc + a*b, add, store; kT and transpose(src,
//                 lds, dst, ldd) for a kT x kT block (packing and the output).
// int8 traits Q:  type Reg (int32 lanes, one per token); L; kSigned (activation
//                 bytes stored as q ^ 0x80); zero, load (L tokens x 4 bytes),
//                 bcast4 (4 weight bytes to every lane), dot4(acc, x, w) adding
//                 Σ_j x[t][j]·w[j] to lane t, add, epilogue (dequantize L tokens
//                 into floats), minmax and quant_row (activation quantization);
//                 type T: the fp32 traits used for the output transposes.
//
// Activation tiles: tokens padded to a multiple of L and cut into tiles of
// NV*L tokens (the last one narrower); a tile of width wt holds, for fp32,
// row k at tile + k*wt (kp rows, zero padded) and, for int8, group g of four
// input channels at tile + g*wt*4, 4 bytes per token.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "edgenlp_kernels/sparse_linear.h"

#if defined(__GNUC__)
#define ENK_NOINLINE __attribute__((noinline))
#else
#define ENK_NOINLINE
#endif

namespace edgenlp::kernels::detail {
// Everything here has internal linkage: each ISA file compiles its own copy
// with its own flags, and the linker must never swap one for another.
namespace {

constexpr int kChunkRows = 8;  // output channels staged before the transposed store into y

inline int round_up(int v, int m) { return (v + m - 1) / m * m; }
inline int padded_k(int k) { return round_up(k, 8); }  // covers every block width

// Per-token activation quantization parameters (the contract in sparse_linear.h).
struct ActParams {
  float scale, inv;
  int zero;
};
inline ActParams act_params(float lo, float hi, int qmax) {
  lo = std::min(lo, 0.0f);
  hi = std::max(hi, 0.0f);
  float s = (hi - lo) / static_cast<float>(qmax);
  if (!(s > 0.0f) || !std::isfinite(s)) s = 1.0f;
  float z = std::nearbyint(-lo / s);
  z = std::min(std::max(z, 0.0f), static_cast<float>(qmax));
  return ActParams{s, 1.0f / s, static_cast<int>(z)};
}
inline int quantize_one(float x, const ActParams& p, int qmax) {
  float v = std::nearbyint(x * p.inv) + static_cast<float>(p.zero);
  v = std::min(std::max(v, 0.0f), static_cast<float>(qmax));
  return static_cast<int>(v);
}

// Calls f(std::integral_constant<int, nv>) for the runtime nv in 1..N.
template <int N, class F>
inline void with_nv(int nv, F&& f) {
  if constexpr (N >= 1) {
    if (nv == N) {
      f(std::integral_constant<int, N>{});
    } else {
      with_nv<N - 1>(nv, f);
    }
  }
}

// ---------------------------------------------------------------- layout moves

// x [m][k] -> tiles of [kp][wt] (tokens >= m and channels >= k read as 0).
template <class V>
void pack_f32(const float* x, int m, int k, int mp, int kp, int tile, float* xt) {
  constexpr int T = V::kT;
  for (int m0 = 0; m0 < mp; m0 += tile) {
    const int wt = std::min(tile, mp - m0);
    float* dst = xt + static_cast<std::size_t>(m0) * kp;
    for (int t0 = 0; t0 < wt; t0 += T) {
      for (int k0 = 0; k0 < kp; k0 += T) {
        if (m0 + t0 + T <= m && k0 + T <= k) {
          V::transpose(x + static_cast<std::size_t>(m0 + t0) * k + k0, k, dst + static_cast<std::size_t>(k0) * wt + t0, wt);
          continue;
        }
        for (int kk = k0; kk < k0 + T; ++kk)
          for (int t = t0; t < t0 + T; ++t)
            dst[static_cast<std::size_t>(kk) * wt + t] =
                (m0 + t < m && kk < k) ? x[static_cast<std::size_t>(m0 + t) * k + kk] : 0.0f;
      }
    }
  }
}

// stage [rows][w] -> y[t][r] (ldy apart) for t < tokens, r < rows.
template <class V>
inline void store_transposed(const float* stage, int w, int rows, int tokens, float* y, int ldy) {
  constexpr int T = V::kT;
  for (int r0 = 0; r0 < rows; r0 += T) {
    for (int t0 = 0; t0 < tokens; t0 += T) {
      if (r0 + T <= rows && t0 + T <= tokens) {
        V::transpose(stage + r0 * w + t0, w, y + static_cast<std::size_t>(t0) * ldy + r0, ldy);
        continue;
      }
      for (int t = t0; t < std::min(tokens, t0 + T); ++t)
        for (int r = r0; r < std::min(rows, r0 + T); ++r) y[static_cast<std::size_t>(t) * ldy + r] = stage[r * w + t];
    }
  }
}

// ---------------------------------------------------------------- fp32

// acc[R*NV] += the block at xp (activation tile rows) times its weights wp.
// Plain loops over compile-time bounds, fully unrolled, so that GCC keeps acc in registers.
template <class V, int R, int C, int NV>
inline __attribute__((always_inline)) void f32_block(typename V::Reg* acc, const float* xp, const float* wp) {
  constexpr int W = NV * V::L;
#pragma GCC unroll 8
  for (int c = 0; c < C; ++c) {
    typename V::Reg xv[NV];
#pragma GCC unroll 8
    for (int v = 0; v < NV; ++v) xv[v] = V::load(xp + c * W + v * V::L);
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) {
      const typename V::Reg wb = V::bcast(wp + r * C + c);
#pragma GCC unroll 8
      for (int v = 0; v < NV; ++v) acc[r * NV + v] = V::fma(acc[r * NV + v], wb, xv[v]);
    }
  }
}

// One tile of NV*L tokens against every row of w; S accumulator sets take
// alternate blocks (independent FMA chains).
template <class V, int R, int C, int NV, int S>
ENK_NOINLINE void f32_tile(const SparseF32View& w, const float* xt, int tokens, float* y, float* stage) {
  constexpr int W = NV * V::L;
  const int nrb = w.row_blocks;
  const std::int32_t* rs = w.row_start;
  const std::uint16_t* col = w.col;
  const float* val = w.values;
  const float* bias = w.bias;
  for (int rb0 = 0; rb0 < nrb; rb0 += kChunkRows / R) {
    const int rb1 = std::min(nrb, rb0 + kChunkRows / R);
    for (int rb = rb0; rb < rb1; ++rb) {
      typename V::Reg acc[S * R * NV];
#pragma GCC unroll 32
      for (int i = 0; i < S * R * NV; ++i) acc[i] = V::zero();
      int b = rs[rb];
      const int e = rs[rb + 1];
      for (; b + S <= e; b += S) {
#pragma GCC unroll 4
        for (int s = 0; s < S; ++s)
          f32_block<V, R, C, NV>(acc + s * R * NV, xt + col[b + s] * W, val + (b + s) * (R * C));
      }
      for (; b < e; ++b) f32_block<V, R, C, NV>(acc, xt + col[b] * W, val + b * (R * C));
      float* st = stage + (rb - rb0) * R * W;
#pragma GCC unroll 4
      for (int r = 0; r < R; ++r) {
        const typename V::Reg bv = V::bcast(bias + rb * R + r);
#pragma GCC unroll 8
        for (int v = 0; v < NV; ++v) {
          typename V::Reg a = acc[r * NV + v];
#pragma GCC unroll 4
          for (int s = 1; s < S; ++s) a = V::add(a, acc[(s * R + r) * NV + v]);
          V::store(st + r * W + v * V::L, V::add(a, bv));
        }
      }
    }
    const int n0 = rb0 * R;
    store_transposed<V>(stage, W, std::min(w.n, rb1 * R) - n0, tokens, y + n0, w.n);
  }
}

template <class V, int R, int C, int NV, int S>
void f32_run(const SparseF32View& w, const float* x, int m, float* y, Workspace& ws) {
  constexpr int L = V::L, W = NV * L;
  const int mp = round_up(m, L), kp = padded_k(w.k);
  auto* base = static_cast<float*>(ws.get((static_cast<std::size_t>(mp) * kp + kChunkRows * W) * sizeof(float)));
  float* xt = base;
  float* stage = base + static_cast<std::size_t>(mp) * kp;
  pack_f32<V>(x, m, w.k, mp, kp, W, xt);
  for (int m0 = 0; m0 < mp; m0 += W) {
    const int nv = std::min(W, mp - m0) / L;
    const float* tile = xt + static_cast<std::size_t>(m0) * kp;
    float* yt = y + static_cast<std::size_t>(m0) * w.n;
    const int tokens = std::min(W, m - m0);
    with_nv<NV>(nv, [&](auto n) { f32_tile<V, R, C, decltype(n)::value, S>(w, tile, tokens, yt, stage); });
  }
}

// ---------------------------------------------------------------- int8 (QD8 x QC8W)

template <class Q, int R, int G, int NV>
inline __attribute__((always_inline)) void qd8_block(typename Q::Reg* acc, const std::uint8_t* xp, const std::int8_t* wp) {
  constexpr int W = NV * Q::L;
#pragma GCC unroll 2
  for (int g = 0; g < G; ++g) {
    typename Q::Reg xv[NV];
#pragma GCC unroll 8
    for (int v = 0; v < NV; ++v) xv[v] = Q::load(xp + g * W * 4 + v * Q::L * 4);
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) {
      const typename Q::Reg wb = Q::bcast4(wp + (r * G + g) * 4);
#pragma GCC unroll 8
      for (int v = 0; v < NV; ++v) acc[r * NV + v] = Q::dot4(acc[r * NV + v], xv[v], wb);
    }
  }
}

template <class Q, int R, int G, int NV, int S>
ENK_NOINLINE void qd8_tile(const SparseQC8WView& w, const std::uint8_t* xq, const std::int32_t* zx, const float* sx,
                           int tokens, float* y, float* stage) {
  constexpr int W = NV * Q::L;
  const int nrb = w.row_blocks;
  const std::int32_t* rs = w.row_start;
  const std::uint16_t* col = w.col;
  const std::int8_t* val = w.values;
  for (int rb0 = 0; rb0 < nrb; rb0 += kChunkRows / R) {
    const int rb1 = std::min(nrb, rb0 + kChunkRows / R);
    for (int rb = rb0; rb < rb1; ++rb) {
      typename Q::Reg acc[S * R * NV];
#pragma GCC unroll 32
      for (int i = 0; i < S * R * NV; ++i) acc[i] = Q::zero();
      int b = rs[rb];
      const int e = rs[rb + 1];
      for (; b + S <= e; b += S) {
#pragma GCC unroll 4
        for (int s = 0; s < S; ++s)
          qd8_block<Q, R, G, NV>(acc + s * R * NV, xq + col[b + s] * W, val + (b + s) * (R * G * 4));
      }
      for (; b < e; ++b) qd8_block<Q, R, G, NV>(acc, xq + col[b] * W, val + b * (R * G * 4));
      float* st = stage + (rb - rb0) * R * W;
#pragma GCC unroll 4
      for (int r = 0; r < R; ++r) {
        const int n = rb * R + r;
#pragma GCC unroll 8
        for (int v = 0; v < NV; ++v) {
          typename Q::Reg a = acc[r * NV + v];
#pragma GCC unroll 4
          for (int s = 1; s < S; ++s) a = Q::add(a, acc[(s * R + r) * NV + v]);
          Q::epilogue(st + r * W + v * Q::L, a, zx + v * Q::L, sx + v * Q::L, w.row_sum[n], w.scale[n], w.bias[n]);
        }
      }
    }
    const int n0 = rb0 * R;
    store_transposed<typename Q::T>(stage, W, std::min(w.n, rb1 * R) - n0, tokens, y + n0, w.n);
  }
}

// Quantize x [m][k] per token into tiles (see the file comment).
template <class Q>
void quantize_pack(const float* x, int m, int k, int mp, int kg, int tile, int qmax, std::uint8_t* xq,
                   std::int32_t* zx, float* sx) {
  for (int m0 = 0; m0 < mp; m0 += tile) {
    const int wt = std::min(tile, mp - m0);
    std::uint8_t* dst = xq + static_cast<std::size_t>(m0) * kg * 4;
    for (int t = 0; t < wt; ++t) {
      const int mm = m0 + t;
      if (mm >= m) {
        for (int g = 0; g < kg; ++g) std::memset(dst + (static_cast<std::size_t>(g) * wt + t) * 4, 0, 4);
        zx[mm] = 0;
        sx[mm] = 0.0f;
        continue;
      }
      const float* row = x + static_cast<std::size_t>(mm) * k;
      float lo, hi;
      Q::minmax(row, k, &lo, &hi);
      const ActParams p = act_params(lo, hi, qmax);
      Q::quant_row(row, k, kg, p, qmax, dst + t * 4, wt * 4);
      zx[mm] = Q::kSigned ? p.zero - 128 : p.zero;
      sx[mm] = p.scale;
    }
  }
}

// Portable pieces of the int8 traits (tails and the scalar ISA).
inline void minmax_scalar(const float* x, int k, float* lo, float* hi) {
  float a = 0.0f, b = 0.0f;
  for (int i = 0; i < k; ++i) {
    a = std::min(a, x[i]);
    b = std::max(b, x[i]);
  }
  *lo = a;
  *hi = b;
}
// Groups g0..kg-1 of row (channels >= k quantize 0.0f, i.e. the zero point).
inline void quant_groups_scalar(const float* row, int k, int g0, int kg, const ActParams& p, int qmax, bool sign,
                                std::uint8_t* dst, int stride) {
  for (int g = g0; g < kg; ++g)
    for (int j = 0; j < 4; ++j) {
      const int kk = g * 4 + j;
      const int q = quantize_one(kk < k ? row[kk] : 0.0f, p, qmax);
      dst[static_cast<std::size_t>(g) * stride + j] = static_cast<std::uint8_t>(sign ? (q ^ 0x80) : q);
    }
}

template <class Q, int R, int G, int NV, int S>
void qd8_run(const SparseQC8WView& w, const float* x, int m, float* y, Workspace& ws, int qmax) {
  constexpr int L = Q::L, W = NV * L;
  const int mp = round_up(m, L), kg = padded_k(w.k) / 4;
  const std::size_t xq_bytes = static_cast<std::size_t>(mp) * kg * 4;
  const std::size_t off_zx = (xq_bytes + 63) / 64 * 64;
  const std::size_t off_sx = off_zx + (static_cast<std::size_t>(mp) * 4 + 63) / 64 * 64;
  const std::size_t off_stage = off_sx + (static_cast<std::size_t>(mp) * 4 + 63) / 64 * 64;
  auto* base = static_cast<std::uint8_t*>(ws.get(off_stage + kChunkRows * W * sizeof(float)));
  auto* zx = reinterpret_cast<std::int32_t*>(base + off_zx);
  auto* sx = reinterpret_cast<float*>(base + off_sx);
  auto* stage = reinterpret_cast<float*>(base + off_stage);
  quantize_pack<Q>(x, m, w.k, mp, kg, W, qmax, base, zx, sx);
  for (int m0 = 0; m0 < mp; m0 += W) {
    const int nv = std::min(W, mp - m0) / L;
    const std::uint8_t* tile = base + static_cast<std::size_t>(m0) * kg * 4;
    float* yt = y + static_cast<std::size_t>(m0) * w.n;
    const int tokens = std::min(W, m - m0);
    with_nv<NV>(nv, [&](auto n) {
      qd8_tile<Q, R, G, decltype(n)::value, S>(w, tile, zx + m0, sx + m0, tokens, yt, stage);
    });
  }
}

}  // namespace
}  // namespace edgenlp::kernels::detail
