// f32 block-sparse x dense, NEON: 16-token tiles (4 q x 2 sets; 4x1: 4 rows x 4 q).
#include "traits-neon.h"
#include "ukernels.h"

namespace edgenlp::kernels::detail {

void f32_spmm_neon(const SparseF32View& w, const float* x, int m, float* y, Workspace& ws) {
  if (w.block == kBlock1x8) return f32_run<NeonF32, 1, 8, 4, 2>(w, x, m, y, ws);
  if (w.block == kBlock4x1) return f32_run<NeonF32, 4, 1, 4, 1>(w, x, m, y, ws);
  f32_run<NeonF32, 1, 4, 4, 2>(w, x, m, y, ws);
}
int f32_tile_tokens_neon(BlockShape) { return 16; }

}  // namespace edgenlp::kernels::detail
