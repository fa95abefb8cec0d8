// qd8 x qc8w block-sparse, NEON without dot product (Cortex-A53 class):
// smull/smull2 + addp + sadalp; 16-token tiles.
#include "traits-neon.h"
#include "ukernels.h"

namespace edgenlp::kernels::detail {

void qd8_spmm_neon(const SparseQC8WView& w, const float* x, int m, float* y, Workspace& ws) {
  if (w.tile_rows == 4) return qd8_run<NeonQ8, 4, 1, 4, 1>(w, x, m, y, ws, 255);
  if (w.tile_groups == 2) return qd8_run<NeonQ8, 1, 2, 4, 2>(w, x, m, y, ws, 255);
  qd8_run<NeonQ8, 1, 1, 4, 2>(w, x, m, y, ws, 255);
}
int qd8_tile_tokens_neon(BlockShape) { return 16; }

}  // namespace edgenlp::kernels::detail
