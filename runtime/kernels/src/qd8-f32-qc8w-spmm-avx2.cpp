// qd8 x qc8w block-sparse, AVX2: vpmaddubsw (u8 x s8, 7-bit activations) +
// vpmaddwd into int32; 32-token tiles (4x4 tiles of 4x1 blocks: 16 tokens).
#include "traits-avx2.h"
#include "ukernels.h"

namespace edgenlp::kernels::detail {

void qd8_spmm_avx2(const SparseQC8WView& w, const float* x, int m, float* y, Workspace& ws) {
  if (w.tile_rows == 4) return qd8_run<Avx2Q8, 4, 1, 2, 1>(w, x, m, y, ws, 127);
  if (w.tile_groups == 2) return qd8_run<Avx2Q8, 1, 2, 4, 2>(w, x, m, y, ws, 127);
  qd8_run<Avx2Q8, 1, 1, 4, 2>(w, x, m, y, ws, 127);
}
int qd8_tile_tokens_avx2(BlockShape b) { return b.rows == 4 ? 16 : 32; }

}  // namespace edgenlp::kernels::detail
