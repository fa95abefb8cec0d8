// f32 block-sparse x dense, AVX2 + FMA: 1xC blocks on 32-token tiles (4 ymm x 2
// accumulator sets), 4x1 on 16-token tiles (4 rows x 2 ymm).
#include "traits-avx2.h"
#include "ukernels.h"

namespace edgenlp::kernels::detail {

void f32_spmm_avx2(const SparseF32View& w, const float* x, int m, float* y, Workspace& ws) {
  if (w.block == kBlock1x8) return f32_run<Avx2F32, 1, 8, 4, 2>(w, x, m, y, ws);
  if (w.block == kBlock4x1) return f32_run<Avx2F32, 4, 1, 2, 1>(w, x, m, y, ws);
  f32_run<Avx2F32, 1, 4, 4, 2>(w, x, m, y, ws);
}
int f32_tile_tokens_avx2(BlockShape b) { return b.rows == 4 ? 16 : 32; }

}  // namespace edgenlp::kernels::detail
