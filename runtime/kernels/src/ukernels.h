// Entry points of the per-ISA kernel files (internal to the library).
#pragma once

#include "edgenlp_kernels/sparse_linear.h"

namespace edgenlp::kernels::detail {

using F32Fn = void (*)(const SparseF32View&, const float*, int, float*, Workspace&);
using Qd8Fn = void (*)(const SparseQC8WView&, const float*, int, float*, Workspace&);

// Each file exports its kernels and the tokens per tile for a block shape.
#define ENK_DECLARE(isa)                                                              \
  void f32_spmm_##isa(const SparseF32View&, const float*, int, float*, Workspace&);      \
  int f32_tile_tokens_##isa(BlockShape);                                               \
  void qd8_spmm_##isa(const SparseQC8WView&, const float*, int, float*, Workspace&);     \
  int qd8_tile_tokens_##isa(BlockShape);

ENK_DECLARE(scalar)
#if defined(__x86_64__) || defined(_M_X64)
#define ENK_X86 1
ENK_DECLARE(avx2)
void f32_spmm_avx512(const SparseF32View&, const float*, int, float*, Workspace&);
int f32_tile_tokens_avx512(BlockShape);
void qd8_spmm_avx512vnni(const SparseQC8WView&, const float*, int, float*, Workspace&);
int qd8_tile_tokens_avx512vnni(BlockShape);
#endif
#if defined(__aarch64__)
#define ENK_ARM64 1
ENK_DECLARE(neon)
void qd8_spmm_neondot(const SparseQC8WView&, const float*, int, float*, Workspace&);
int qd8_tile_tokens_neondot(BlockShape);
#endif
#undef ENK_DECLARE

}  // namespace edgenlp::kernels::detail
