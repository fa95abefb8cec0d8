// qd8 x qc8w block-sparse, portable C++: the family's reference and fallback.
#include "traits-scalar.h"
#include "ukernels.h"

namespace edgenlp::kernels::detail {

void qd8_spmm_scalar(const SparseQC8WView& w, const float* x, int m, float* y, Workspace& ws) {
  if (w.tile_rows == 4) return qd8_run<ScalarQ8, 4, 1, 4, 1>(w, x, m, y, ws, 255);
  if (w.tile_groups == 2) return qd8_run<ScalarQ8, 1, 2, 4, 1>(w, x, m, y, ws, 255);
  qd8_run<ScalarQ8, 1, 1, 4, 1>(w, x, m, y, ws, 255);
}
int qd8_tile_tokens_scalar(BlockShape) { return 4; }

}  // namespace edgenlp::kernels::detail
