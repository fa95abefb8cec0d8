// Packing, CPU feature detection and dispatch for the block-sparse kernels.
#include "edgenlp_kernels/sparse_linear.h"

#include <cstdlib>
#include <cstring>
#include <new>
#include <stdexcept>

#include "ukernels.h"

#if defined(__aarch64__) && defined(__linux__)
#include <asm/hwcap.h>
#include <sys/auxv.h>
#endif

namespace edgenlp::kernels {
namespace {

bool valid_block(BlockShape b) { return b == kBlock1x4 || b == kBlock1x8 || b == kBlock4x1; }

void check_sizes(int n, int k, BlockShape block, const char* what) {
  if (!valid_block(block))
    throw std::invalid_argument(std::string(what) + ": block must be 1x4, 1x8 or 4x1, got " + block_name(block));
  if (n < 1 || n > 65535 || k < 1 || k > 65535)
    throw std::invalid_argument(std::string(what) + ": n and k must be in 1..65535, got n=" + std::to_string(n) +
                                " k=" + std::to_string(k));
}

[[noreturn]] void unsupported(Isa isa, const char* what) {
  throw std::invalid_argument(std::string(what) + ": ISA " + isa_name(isa) +
                              (isa_compiled(isa) ? " is not supported by this CPU" : " is not built into this library"));
}

}  // namespace

bool parse_block(const std::string& text, BlockShape* out) {
  for (BlockShape b : {kBlock1x4, kBlock1x8, kBlock4x1}) {
    if (text == block_name(b)) {
      *out = b;
      return true;
    }
  }
  return false;
}

std::string block_name(BlockShape b) { return std::to_string(b.rows) + "x" + std::to_string(b.cols); }

const char* isa_name(Isa isa) {
  switch (isa) {
    case Isa::kScalar: return "scalar";
    case Isa::kAvx2: return "avx2";
    case Isa::kAvx512: return "avx512";
    case Isa::kAvx512Vnni: return "avx512vnni";
    case Isa::kNeon: return "neon";
    case Isa::kNeonDot: return "neondot";
  }
  return "?";
}

bool parse_isa(const std::string& text, Isa* out) {
  for (Isa isa : kAllIsas) {
    if (text == isa_name(isa)) {
      *out = isa;
      return true;
    }
  }
  return false;
}

bool isa_compiled(Isa isa) {
  switch (isa) {
    case Isa::kScalar: return true;
#ifdef ENK_X86
    case Isa::kAvx2:
    case Isa::kAvx512:
    case Isa::kAvx512Vnni: return true;
#endif
#ifdef ENK_ARM64
    case Isa::kNeon:
    case Isa::kNeonDot: return true;
#endif
    default: return false;
  }
}

bool isa_supported(Isa isa) {
  if (!isa_compiled(isa)) return false;
  switch (isa) {
    case Isa::kScalar: return true;
#ifdef ENK_X86
    // libgcc / compiler-rt also check that the OS saves the AVX / AVX-512 state (xgetbv).
    case Isa::kAvx2: return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
#ifdef ENK_SIMDE_AVX512  // test build: AVX-512 emulated on AVX2 (SIMDe)
    case Isa::kAvx512:
    case Isa::kAvx512Vnni: return isa_supported(Isa::kAvx2);
#else
    case Isa::kAvx512: return isa_supported(Isa::kAvx2) && __builtin_cpu_supports("avx512f");
    case Isa::kAvx512Vnni:
      return isa_supported(Isa::kAvx512) && __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl") &&
             __builtin_cpu_supports("avx512vnni");
#endif
#endif
#ifdef ENK_ARM64
    case Isa::kNeon: return true;
#if defined(__linux__)
    case Isa::kNeonDot: return (getauxval(AT_HWCAP) & HWCAP_ASIMDDP) != 0;
#endif
#endif
    default: return false;
  }
}

Isa best_isa_f32() {
  for (Isa isa : {Isa::kAvx512, Isa::kAvx2, Isa::kNeon})
    if (isa_supported(isa)) return isa;
  return Isa::kScalar;
}

Isa best_isa_qd8() {
  // AVX-512 without VNNI keeps the AVX2 int8 kernel (ggml-style fallback).
  for (Isa isa : {Isa::kAvx512Vnni, Isa::kAvx2, Isa::kNeonDot, Isa::kNeon})
    if (isa_supported(isa)) return isa;
  return Isa::kScalar;
}

namespace {

// The fp32 kernel an ISA runs (the fp32 family has no VNNI / dot-product kernels).
Isa f32_kernel_isa(Isa isa) {
  if (isa == Isa::kAvx512Vnni) return Isa::kAvx512;
  if (isa == Isa::kNeonDot) return Isa::kNeon;
  return isa;
}
// The int8 kernel an ISA runs (AVX-512F without VNNI: the AVX2 one).
Isa qd8_kernel_isa(Isa isa) { return isa == Isa::kAvx512 ? Isa::kAvx2 : isa; }

}  // namespace

int act_qmax(Isa isa) { return qd8_kernel_isa(isa) == Isa::kAvx2 ? 127 : 255; }

namespace {

detail::F32Fn f32_fn(Isa isa, int* tokens, BlockShape b) {
  switch (f32_kernel_isa(isa)) {
    case Isa::kScalar: *tokens = detail::f32_tile_tokens_scalar(b); return detail::f32_spmm_scalar;
#ifdef ENK_X86
    case Isa::kAvx2: *tokens = detail::f32_tile_tokens_avx2(b); return detail::f32_spmm_avx2;
    case Isa::kAvx512: *tokens = detail::f32_tile_tokens_avx512(b); return detail::f32_spmm_avx512;
#endif
#ifdef ENK_ARM64
    case Isa::kNeon: *tokens = detail::f32_tile_tokens_neon(b); return detail::f32_spmm_neon;
#endif
    default: return nullptr;
  }
}

detail::Qd8Fn qd8_fn(Isa isa, int* tokens, BlockShape b) {
  switch (qd8_kernel_isa(isa)) {
    case Isa::kScalar: *tokens = detail::qd8_tile_tokens_scalar(b); return detail::qd8_spmm_scalar;
#ifdef ENK_X86
    case Isa::kAvx2: *tokens = detail::qd8_tile_tokens_avx2(b); return detail::qd8_spmm_avx2;
    case Isa::kAvx512Vnni: *tokens = detail::qd8_tile_tokens_avx512vnni(b); return detail::qd8_spmm_avx512vnni;
#endif
#ifdef ENK_ARM64
    case Isa::kNeon: *tokens = detail::qd8_tile_tokens_neon(b); return detail::qd8_spmm_neon;
    case Isa::kNeonDot: *tokens = detail::qd8_tile_tokens_neondot(b); return detail::qd8_spmm_neondot;
#endif
    default: return nullptr;
  }
}

}  // namespace

std::string kernel_name(bool int8, BlockShape block, Isa isa) {
  int tokens = 0;
  if (int8) {
    if (qd8_fn(isa, &tokens, block) == nullptr) return "";
    const int tr = block.rows, tc = block.cols < 4 ? 4 : block.cols;
    const std::string tile = std::to_string(tr) + "x" + std::to_string(tc);
    return "qd8-f32-qc8w-spmm-" + std::to_string(tokens) + "tok-" + block_name(block) +
           (tile == block_name(block) ? "" : "as" + tile) + "-" + isa_name(qd8_kernel_isa(isa));
  }
  if (f32_fn(isa, &tokens, block) == nullptr) return "";
  return "f32-spmm-" + std::to_string(tokens) + "tok-" + block_name(block) + "-" + isa_name(f32_kernel_isa(isa));
}

std::size_t SparseF32::bytes() const {
  return row_start.size() * sizeof(std::int32_t) + col.size() * sizeof(std::uint16_t) + values.size() * sizeof(float) +
         bias.size() * sizeof(float);
}

std::size_t SparseQC8W::bytes() const {
  return row_start.size() * sizeof(std::int32_t) + col.size() * sizeof(std::uint16_t) + values.size() +
         (scale.size() + bias.size()) * sizeof(float) + row_sum.size() * sizeof(std::int32_t);
}

SparseF32 pack_f32(const float* w, int n, int k, BlockShape block, const float* bias) {
  check_sizes(n, k, block, "pack_f32");
  SparseF32 out;
  out.n = n;
  out.k = k;
  out.block = block;
  const int R = block.rows, C = block.cols;
  const int nrb = (n + R - 1) / R;
  out.row_start.reserve(nrb + 1);
  out.row_start.push_back(0);
  out.bias.assign(static_cast<std::size_t>(nrb) * R, 0.0f);
  if (bias != nullptr) std::memcpy(out.bias.data(), bias, static_cast<std::size_t>(n) * sizeof(float));
  for (int rb = 0; rb < nrb; ++rb) {
    for (int k0 = 0; k0 < k; k0 += C) {
      float v[8 * 4];
      bool any = false;
      for (int r = 0; r < R; ++r)
        for (int c = 0; c < C; ++c) {
          const int nn = rb * R + r, kk = k0 + c;
          v[r * C + c] = (nn < n && kk < k) ? w[static_cast<std::size_t>(nn) * k + kk] : 0.0f;
          any |= v[r * C + c] != 0.0f;
        }
      if (!any) continue;
      out.col.push_back(static_cast<std::uint16_t>(k0));
      out.values.insert(out.values.end(), v, v + R * C);
    }
    out.row_start.push_back(static_cast<std::int32_t>(out.col.size()));
  }
  return out;
}

SparseQC8W pack_qc8w(const std::int8_t* q, const float* scale, int n, int k, BlockShape block, const float* bias) {
  check_sizes(n, k, block, "pack_qc8w");
  SparseQC8W out;
  out.n = n;
  out.k = k;
  out.block = block;
  qc8w_tile(block, &out.tile_rows, &out.tile_groups);
  const int TC = 4 * out.tile_groups;
  const int R = out.tile_rows;
  const int nrb = (n + R - 1) / R;
  const std::size_t np = static_cast<std::size_t>(nrb) * R;
  out.scale.assign(np, 0.0f);
  out.row_sum.assign(np, 0);
  out.bias.assign(np, 0.0f);
  for (int i = 0; i < n; ++i) {
    out.scale[i] = scale[i];
    if (bias != nullptr) out.bias[i] = bias[i];
    std::int32_t s = 0;
    for (int j = 0; j < k; ++j) {
      const std::int8_t v = q[static_cast<std::size_t>(i) * k + j];
      if (v == -128)
        throw std::invalid_argument("pack_qc8w: weight [" + std::to_string(i) + "][" + std::to_string(j) +
                                    "] is -128; symmetric weights are in [-127, 127]");
      s += v;
    }
    out.row_sum[i] = s;
  }
  out.row_start.push_back(0);
  for (int rb = 0; rb < nrb; ++rb) {
    for (int k0 = 0; k0 < k; k0 += TC) {
      std::int8_t v[4 * 8];
      bool any = false;
      for (int r = 0; r < R; ++r)
        for (int c = 0; c < TC; ++c) {
          const int nn = rb * R + r, kk = k0 + c;
          v[r * TC + c] = (nn < n && kk < k) ? q[static_cast<std::size_t>(nn) * k + kk] : 0;
          any |= v[r * TC + c] != 0;
        }
      if (!any) continue;
      // Pattern blocks inside the tile (4 for a 4x4 tile of 4x1 blocks).
      if (block == kBlock4x1) {
        for (int c = 0; c < TC; ++c)
          for (int r = 0; r < R; ++r)
            if (v[r * TC + c] != 0) {
              ++out.blocks;
              break;
            }
      } else {
        ++out.blocks;
      }
      out.col.push_back(static_cast<std::uint16_t>(k0));
      // Stored [rows][groups][4]: with TC = 4 * groups that is the same row-major order.
      out.values.insert(out.values.end(), v, v + R * TC);
    }
    out.row_start.push_back(static_cast<std::int32_t>(out.col.size()));
  }
  return out;
}

Workspace::~Workspace() { std::free(ptr_); }

void* Workspace::get(std::size_t bytes) {
  if (bytes > size_) {
    std::free(ptr_);
    ptr_ = nullptr;
    size_ = 0;
    const std::size_t rounded = (bytes + 63) / 64 * 64;
    ptr_ = std::aligned_alloc(64, rounded);
    if (ptr_ == nullptr) throw std::bad_alloc();
    size_ = rounded;
  }
  return ptr_;
}

SparseF32View view(const SparseF32& w) {
  SparseF32View v;
  v.n = w.n;
  v.k = w.k;
  v.block = w.block;
  v.row_blocks = static_cast<int>(w.row_start.size()) - 1;
  v.row_start = w.row_start.data();
  v.col = w.col.data();
  v.values = w.values.data();
  v.bias = w.bias.data();
  v.blocks = w.col.size();
  return v;
}

SparseQC8WView view(const SparseQC8W& w) {
  SparseQC8WView v;
  v.n = w.n;
  v.k = w.k;
  v.block = w.block;
  v.tile_rows = w.tile_rows;
  v.tile_groups = w.tile_groups;
  v.row_blocks = static_cast<int>(w.row_start.size()) - 1;
  v.row_start = w.row_start.data();
  v.col = w.col.data();
  v.values = w.values.data();
  v.scale = w.scale.data();
  v.row_sum = w.row_sum.data();
  v.bias = w.bias.data();
  v.tiles = w.col.size();
  return v;
}

void qc8w_tile(BlockShape block, int* tile_rows, int* tile_groups) {
  *tile_rows = block.rows;
  *tile_groups = (block.cols < 4 ? 4 : block.cols) / 4;
}

namespace {

// The checks both views share; `align` is the column step, `width` the stored width of a block.
std::string check_pattern(int n, int k, BlockShape block, int rows, int row_blocks, const std::int32_t* row_start,
                          const std::uint16_t* col, std::size_t blocks, int align, int width) {
  if (!valid_block(block)) return "block " + block_name(block) + " is not 1x4, 1x8 or 4x1";
  if (n < 1 || k < 1 || n > 65535 || k > 65535)
    return "size " + std::to_string(n) + "x" + std::to_string(k) + " is outside 1..65535";
  if (row_blocks != (n + rows - 1) / rows)
    return std::to_string(row_blocks) + " row blocks for " + std::to_string(n) + " rows of " + std::to_string(rows);
  if (row_start == nullptr || (blocks > 0 && col == nullptr)) return "missing arrays";
  if (row_start[0] != 0) return "row_start[0] is " + std::to_string(row_start[0]) + ", not 0";
  for (int rb = 0; rb < row_blocks; ++rb)
    if (row_start[rb + 1] < row_start[rb])
      return "row_start decreases at row block " + std::to_string(rb);
  if (static_cast<std::size_t>(row_start[row_blocks]) != blocks)
    return "row_start ends at " + std::to_string(row_start[row_blocks]) + " for " + std::to_string(blocks) + " blocks";
  const int kp = (k + 7) / 8 * 8;
  // Every call of an op checks its weights (a bundle's constants), so this scan must cost little beside the kernel:
  // an OR and a max over the columns, which the compiler vectorizes (align is a power of two). A modulo per block
  // here took ~2 ns a block, ~0.25 ms per MiniLM layer at 70% sparsity: more than the int8 kernel itself at 16
  // tokens. The loop that names the first bad block runs only when the scan finds one.
  if (align < 1 || (align & (align - 1)) != 0) return "alignment " + std::to_string(align) + " is not a power of two";
  const auto mask = static_cast<std::uint16_t>(align - 1);
  std::uint16_t misaligned = 0, last = 0;
  for (std::size_t b = 0; b < blocks; ++b) {
    misaligned |= static_cast<std::uint16_t>(col[b] & mask);
    last = col[b] > last ? col[b] : last;
  }
  if (misaligned == 0 && (blocks == 0 || last + width <= kp)) return "";
  for (std::size_t b = 0; b < blocks; ++b)
    if ((col[b] & mask) != 0 || col[b] + width > kp)
      return "block " + std::to_string(b) + " starts at column " + std::to_string(col[b]) + " (k " + std::to_string(k) +
             ", aligned to " + std::to_string(align) + ")";
  return "";
}

}  // namespace

std::string check(const SparseF32View& w) {
  std::string e = check_pattern(w.n, w.k, w.block, w.block.rows, w.row_blocks, w.row_start, w.col, w.blocks,
                                w.block.cols, w.block.cols);
  if (e.empty() && ((w.blocks > 0 && w.values == nullptr) || w.bias == nullptr)) e = "missing arrays";
  return e;
}

std::string check(const SparseQC8WView& w) {
  int tr = 0, tg = 0;
  if (valid_block(w.block)) qc8w_tile(w.block, &tr, &tg);
  if (valid_block(w.block) && (w.tile_rows != tr || w.tile_groups != tg))
    return "tile " + std::to_string(w.tile_rows) + "x" + std::to_string(4 * w.tile_groups) + " for block " +
           block_name(w.block);
  std::string e = check_pattern(w.n, w.k, w.block, w.tile_rows, w.row_blocks, w.row_start, w.col, w.tiles, 4,
                                4 * w.tile_groups);
  if (e.empty() && ((w.tiles > 0 && w.values == nullptr) || w.scale == nullptr || w.row_sum == nullptr ||
                    w.bias == nullptr))
    e = "missing arrays";
  return e;
}

void sparse_linear_f32(const SparseF32View& w, const float* x, int m, float* y, Workspace& ws, Isa isa) {
  if (m < 1) throw std::invalid_argument("sparse_linear_f32: m must be >= 1, got " + std::to_string(m));
  if (!isa_supported(isa)) unsupported(isa, "sparse_linear_f32");
  int tokens = 0;
  f32_fn(isa, &tokens, w.block)(w, x, m, y, ws);
}

void sparse_linear_qd8(const SparseQC8WView& w, const float* x, int m, float* y, Workspace& ws, Isa isa) {
  if (m < 1) throw std::invalid_argument("sparse_linear_qd8: m must be >= 1, got " + std::to_string(m));
  if (!isa_supported(isa)) unsupported(isa, "sparse_linear_qd8");
  int tokens = 0;
  qd8_fn(isa, &tokens, w.block)(w, x, m, y, ws);
}

void sparse_linear_f32(const SparseF32& w, const float* x, int m, float* y, Workspace& ws, Isa isa) {
  sparse_linear_f32(view(w), x, m, y, ws, isa);
}

void sparse_linear_qd8(const SparseQC8W& w, const float* x, int m, float* y, Workspace& ws, Isa isa) {
  sparse_linear_qd8(view(w), x, m, y, ws, isa);
}

}  // namespace edgenlp::kernels
