// Block-sparse linear layers: y = x · Wᵀ + b with W sparse in blocks along K.
//
// A kernel family in the XNNPACK / ggml layout: a portable scalar version, AVX2,
// AVX-512 (VNNI for int8), NEON and NEON dot-product versions, chosen at run time
// from the CPU's features (best_isa) or named explicitly (tests, benchmarks).
//
//   x  [m][k] fp32, row-major (tokens x input channels)
//   W  [n][k]       (output x input channels, torch.nn.Linear layout)
//   y  [m][n] fp32, row-major
//
// Blocks are `rows x cols` (output channels x consecutive input channels):
// 1x4 (default), 1x8 and 4x1. A block is kept when any of its weights is
// non-zero; the others cost nothing. Blocks that stick out of W (k or n not a
// multiple of the block) are padded with zeros.
//
// fp32: the kernels vectorize along tokens. Each call transposes x into tiles of
// tokens (the "packed activations"), runs every non-zero block as broadcast(w) x
// tile-row FMAs, and transposes the result back into y.
//
// int8 (QD8 activations x QC8W weights, as XNNPACK's qd8-f32-qc8w GEMMs):
//   * weights: symmetric int8 per output channel, w ≈ scale[n] · q[n][k], q in [-127, 127];
//   * activations: quantized per token at every call (asymmetric):
//       lo = min(0, min_k x), hi = max(0, max_k x), qmax = act_qmax(isa) (255, or 127)
//       s  = (hi - lo) / qmax (1 when hi == lo),  z = clamp(nearbyint(-lo / s), 0, qmax)
//       q  = clamp(nearbyint(x · (1 / s)) + z, 0, qmax)
//     AVX2 uses qmax = 127 (7-bit activations): its u8 x s8 multiply (vpmaddubsw)
//     saturates int16 pair sums otherwise, as FBGEMM's reduce_range. Every other
//     ISA uses 255.
//   * y[m][n] = float(Σ_k q[m][k]·w[n][k] - z[m]·Σ_k w[n][k]) · (s[m]·scale[n]) + b[n];
//     the integer sum is exact, so every ISA agrees with the scalar version up to
//     the rounding of that last line.
//   int8 tiles are whole groups of 4 input channels (the width of the dot-product
//   instructions): a 1x4 block is one tile, 1x8 is two, and 4x1 blocks sharing a
//   4-aligned group of k are merged into one 4x4 tile (zeros filled in).
//
// Not thread-safe per workspace; the weights are read-only once packed. One thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace edgenlp::kernels {

struct BlockShape {
  int rows;  // output channels per block
  int cols;  // consecutive input channels per block
  bool operator==(const BlockShape& o) const { return rows == o.rows && cols == o.cols; }
};
inline constexpr BlockShape kBlock1x4{1, 4};
inline constexpr BlockShape kBlock1x8{1, 8};
inline constexpr BlockShape kBlock4x1{4, 1};

// "1x4" -> kBlock1x4; false for anything but 1x4, 1x8, 4x1.
bool parse_block(const std::string& text, BlockShape* out);
std::string block_name(BlockShape b);

enum class Isa : int { kScalar = 0, kAvx2, kAvx512, kAvx512Vnni, kNeon, kNeonDot };
inline constexpr Isa kAllIsas[] = {Isa::kScalar, Isa::kAvx2, Isa::kAvx512, Isa::kAvx512Vnni, Isa::kNeon, Isa::kNeonDot};

const char* isa_name(Isa isa);                  // "scalar", "avx2", "avx512", "avx512vnni", "neon", "neondot"
bool parse_isa(const std::string& text, Isa* out);
bool isa_compiled(Isa isa);                     // built into this library (target architecture)
bool isa_supported(Isa isa);                    // compiled and the CPU (and OS) can run it
// The ISA that runs each precision on this CPU. The fp32 family has no separate
// dot-product or VNNI kernel: kNeonDot runs the NEON fp32 kernel, kAvx512Vnni the AVX-512 one.
Isa best_isa_f32();
Isa best_isa_qd8();
int act_qmax(Isa isa);                          // 255, or 127 where the int8 kernel needs 7-bit activations

// The micro-kernel name for a precision, block and ISA, as the code calls it,
// e.g. "f32-spmm-32tok-1x4-avx2" (32 tokens per tile), "qd8-f32-qc8w-spmm-16tok-4x1as4x4-avx2".
std::string kernel_name(bool int8, BlockShape block, Isa isa);

// Block-sparse fp32 weights (BSR by row block).
struct SparseF32 {
  int n = 0, k = 0;
  BlockShape block = kBlock1x4;
  std::vector<std::int32_t> row_start;  // [row blocks + 1]: first block of each row block
  std::vector<std::uint16_t> col;       // [blocks]: first input channel of the block
  std::vector<float> values;            // [blocks][rows][cols]
  std::vector<float> bias;              // [row blocks * rows], zero padded
  std::size_t blocks() const { return col.size(); }
  std::size_t bytes() const;            // what the kernels read: indices, values, bias
};

// A borrowed SparseF32: the same arrays in memory the caller owns (an ExecuTorch
// program's constant tensors, say). row_start has row_blocks + 1 entries.
struct SparseF32View {
  int n = 0, k = 0;
  BlockShape block = kBlock1x4;
  int row_blocks = 0;
  const std::int32_t* row_start = nullptr;
  const std::uint16_t* col = nullptr;
  const float* values = nullptr;
  const float* bias = nullptr;  // [row_blocks * block.rows]
  std::size_t blocks = 0;
};
SparseF32View view(const SparseF32& w);

// Blocks of `w` [n][k] that hold a non-zero; bias may be null. Throws
// std::invalid_argument for sizes out of range (n, k in 1..65535) or a bad block.
SparseF32 pack_f32(const float* w, int n, int k, BlockShape block, const float* bias);

// Block-sparse int8 weights with per-output-channel scales.
struct SparseQC8W {
  int n = 0, k = 0;
  BlockShape block = kBlock1x4;         // the sparsity pattern
  int tile_rows = 1, tile_groups = 1;   // stored tile: tile_rows x (4 * tile_groups) int8
  std::vector<std::int32_t> row_start;  // [row blocks + 1]
  std::vector<std::uint16_t> col;       // [tiles]: first input channel (multiple of 4)
  std::vector<std::int8_t> values;      // [tiles][tile_rows][tile_groups][4]
  std::vector<float> scale;             // [row blocks * tile_rows]
  std::vector<std::int32_t> row_sum;    // [row blocks * tile_rows]: Σ_k q[n][k]
  std::vector<float> bias;              // [row blocks * tile_rows]
  std::size_t blocks = 0;               // non-zero blocks of the pattern (tiles() >= blocks / 4 for 4x1)
  std::size_t tiles() const { return col.size(); }
  std::size_t bytes() const;
};

// A borrowed SparseQC8W (see SparseF32View); arrays per row are row_blocks * tile_rows long.
struct SparseQC8WView {
  int n = 0, k = 0;
  BlockShape block = kBlock1x4;
  int tile_rows = 1, tile_groups = 1;
  int row_blocks = 0;
  const std::int32_t* row_start = nullptr;
  const std::uint16_t* col = nullptr;
  const std::int8_t* values = nullptr;
  const float* scale = nullptr;
  const std::int32_t* row_sum = nullptr;
  const float* bias = nullptr;
  std::size_t tiles = 0;
};
SparseQC8WView view(const SparseQC8W& w);

// The tile a block shape is stored in by the int8 kernels: 1x4 -> 1x4, 1x8 -> 1x8, 4x1 -> 4x4.
void qc8w_tile(BlockShape block, int* tile_rows, int* tile_groups);

// Checks a view's header against its sizes before a kernel trusts it: n, k and
// the block in range, row_blocks = ceil(n / rows), row_start from 0 to the
// block count and non-decreasing, every column aligned to the block (int8: to
// 4) and inside k. Returns "" when it holds, or what is wrong.
std::string check(const SparseF32View& w);
std::string check(const SparseQC8WView& w);

// `q` [n][k] int8 in [-127, 127] with `scale` [n]; the pattern is read from the
// zeros of q. Throws std::invalid_argument like pack_f32, or for q == -128.
SparseQC8W pack_qc8w(const std::int8_t* q, const float* scale, int n, int k, BlockShape block, const float* bias);

// Scratch memory for one call: packed activations, per-token parameters and the
// output staging tile. Grows on demand; keep one per thread and reuse it.
class Workspace {
 public:
  Workspace() = default;
  Workspace(const Workspace&) = delete;
  Workspace& operator=(const Workspace&) = delete;
  ~Workspace();
  void* get(std::size_t bytes);  // 64-byte aligned, contents unspecified
 private:
  void* ptr_ = nullptr;
  std::size_t size_ = 0;
};

// y [m][n] = x [m][k] · Wᵀ + bias, with the given ISA (must be isa_supported;
// throws std::invalid_argument otherwise or for m < 1).
void sparse_linear_f32(const SparseF32& w, const float* x, int m, float* y, Workspace& ws, Isa isa);
void sparse_linear_qd8(const SparseQC8W& w, const float* x, int m, float* y, Workspace& ws, Isa isa);
// The same on borrowed arrays; the caller has passed the view through check().
void sparse_linear_f32(const SparseF32View& w, const float* x, int m, float* y, Workspace& ws, Isa isa);
void sparse_linear_qd8(const SparseQC8WView& w, const float* x, int m, float* y, Workspace& ws, Isa isa);

}  // namespace edgenlp::kernels
