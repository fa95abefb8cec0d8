// f32 block-sparse x dense, AVX-512F: 64-token tiles (4 zmm x 2 sets; 4x1: 4 rows x 4 zmm).
#include "traits-avx2.h"
#ifdef ENK_SIMDE_AVX512  // test build only (see CMakeLists.txt)
#include "simde-avx512-aliases.h"
#endif
#include "ukernels.h"

namespace edgenlp::kernels::detail {
namespace {

struct Avx512F32 {
  using Reg = __m512;
  static constexpr int L = 16;
  static constexpr int kT = Avx2F32::kT;
  static Reg zero() { return _mm512_setzero_ps(); }
  static Reg load(const float* p) { return _mm512_loadu_ps(p); }
  static Reg bcast(const float* p) { return _mm512_set1_ps(*p); }
  static Reg fma(Reg acc, Reg a, Reg b) { return _mm512_fmadd_ps(a, b, acc); }
  static Reg add(Reg a, Reg b) { return _mm512_add_ps(a, b); }
  static void store(float* p, Reg v) { _mm512_storeu_ps(p, v); }
  static void transpose(const float* s, int lds, float* d, int ldd) { Avx2F32::transpose(s, lds, d, ldd); }
};

}  // namespace

void f32_spmm_avx512(const SparseF32View& w, const float* x, int m, float* y, Workspace& ws) {
  if (w.block == kBlock1x8) return f32_run<Avx512F32, 1, 8, 4, 2>(w, x, m, y, ws);
  if (w.block == kBlock4x1) return f32_run<Avx512F32, 4, 1, 4, 1>(w, x, m, y, ws);
  f32_run<Avx512F32, 1, 4, 4, 2>(w, x, m, y, ws);
}
int f32_tile_tokens_avx512(BlockShape) { return 64; }

}  // namespace edgenlp::kernels::detail
