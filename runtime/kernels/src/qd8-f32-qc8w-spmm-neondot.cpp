// qd8 x qc8w block-sparse, NEON dot product (ARMv8.2 sdot, Cortex-A55/A76 and
// later); 16-token tiles. Built with +dotprod, run only where HWCAP_ASIMDDP says so.
#include "traits-neon.h"
#include "ukernels.h"

namespace edgenlp::kernels::detail {
namespace {

struct NeonDotQ8 : NeonQ8 {
  static Reg dot4(Reg acc, Reg x, Reg w) { return vdotq_s32(acc, vreinterpretq_s8_s32(x), vreinterpretq_s8_s32(w)); }
};

}  // namespace

void qd8_spmm_neondot(const SparseQC8WView& w, const float* x, int m, float* y, Workspace& ws) {
  if (w.tile_rows == 4) return qd8_run<NeonDotQ8, 4, 1, 4, 1>(w, x, m, y, ws, 255);
  if (w.tile_groups == 2) return qd8_run<NeonDotQ8, 1, 2, 4, 2>(w, x, m, y, ws, 255);
  qd8_run<NeonDotQ8, 1, 1, 4, 2>(w, x, m, y, ws, 255);
}
int qd8_tile_tokens_neondot(BlockShape) { return 16; }

}  // namespace edgenlp::kernels::detail
