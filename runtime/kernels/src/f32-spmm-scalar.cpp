// f32 block-sparse x dense (tokens), portable C++: the family's reference and fallback.
#include "traits-scalar.h"
#include "ukernels.h"

namespace edgenlp::kernels::detail {

void f32_spmm_scalar(const SparseF32View& w, const float* x, int m, float* y, Workspace& ws) {
  if (w.block == kBlock1x8) return f32_run<ScalarF32, 1, 8, 4, 1>(w, x, m, y, ws);
  if (w.block == kBlock4x1) return f32_run<ScalarF32, 4, 1, 4, 1>(w, x, m, y, ws);
  f32_run<ScalarF32, 1, 4, 4, 1>(w, x, m, y, ws);
}
int f32_tile_tokens_scalar(BlockShape) { return 4; }

}  // namespace edgenlp::kernels::detail
