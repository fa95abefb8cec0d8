// qd8 x qc8w block-sparse, AVX-512 VNNI: vpdpbusd (u8 x s8, full 8-bit
// activations) on 64-token tiles (4 zmm x 2 sets; 4x4 tiles: 4 rows x 4 zmm).
#include "traits-avx2.h"
#ifdef ENK_SIMDE_AVX512  // test build only (see CMakeLists.txt)
#include "simde-avx512-aliases.h"
#endif
#include "ukernels.h"

namespace edgenlp::kernels::detail {
namespace {

struct Avx512VnniQ8 {
  using Reg = __m512i;
  using T = Avx2F32;
  static constexpr int L = 16;
  static constexpr bool kSigned = false;
  static Reg zero() { return _mm512_setzero_si512(); }
  static Reg load(const std::uint8_t* p) { return _mm512_loadu_si512(p); }
  static Reg bcast4(const std::int8_t* p) {
    std::int32_t v;
    std::memcpy(&v, p, 4);
    return _mm512_set1_epi32(v);
  }
  static Reg dot4(Reg acc, Reg x, Reg w) { return _mm512_dpbusd_epi32(acc, x, w); }
  static Reg add(Reg a, Reg b) { return _mm512_add_epi32(a, b); }
  static void epilogue(float* dst, Reg acc, const std::int32_t* zx, const float* sx, std::int32_t rsum, float wscale,
                       float bias) {
    const __m512i zr = _mm512_mullo_epi32(_mm512_loadu_si512(zx), _mm512_set1_epi32(rsum));
    const __m512 f = _mm512_cvtepi32_ps(_mm512_sub_epi32(acc, zr));
    const __m512 s = _mm512_mul_ps(_mm512_loadu_ps(sx), _mm512_set1_ps(wscale));
    _mm512_storeu_ps(dst, _mm512_add_ps(_mm512_mul_ps(f, s), _mm512_set1_ps(bias)));
  }
  static void minmax(const float* x, int k, float* lo, float* hi) { minmax_avx2(x, k, lo, hi); }
  static void quant_row(const float* row, int k, int kg, const ActParams& p, int qmax, std::uint8_t* dst, int stride) {
    quant_row_avx2(row, k, kg, p, qmax, dst, stride);
  }
};

}  // namespace

void qd8_spmm_avx512vnni(const SparseQC8WView& w, const float* x, int m, float* y, Workspace& ws) {
  if (w.tile_rows == 4) return qd8_run<Avx512VnniQ8, 4, 1, 4, 1>(w, x, m, y, ws, 255);
  if (w.tile_groups == 2) return qd8_run<Avx512VnniQ8, 1, 2, 4, 2>(w, x, m, y, ws, 255);
  qd8_run<Avx512VnniQ8, 1, 1, 4, 2>(w, x, m, y, ws, 255);
}
int qd8_tile_tokens_avx512vnni(BlockShape) { return 64; }

}  // namespace edgenlp::kernels::detail
