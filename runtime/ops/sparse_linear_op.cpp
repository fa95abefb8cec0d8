// ExecuTorch kernels for edgenlp's block-sparse linear ops (runtime/kernels).
//
//   edgenlp::sparse_linear.out(Tensor input, Tensor row_start, Tensor col, Tensor values, Tensor bias,
//                              int n, int block_rows, int block_cols, *, Tensor(a!) out) -> Tensor(a!)
//   edgenlp::sparse_linear_qd8.out(Tensor input, Tensor row_start, Tensor col, Tensor values, Tensor scale,
//                                  Tensor row_sum, Tensor bias, int n, int block_rows, int block_cols,
//                                  *, Tensor(a!) out) -> Tensor(a!)
//
// The weights are the kernel library's packed arrays (SparseF32 / SparseQC8W),
// stored as the program's constant tensors and read in place: row_start int32
// [row blocks + 1], col int16 (first input channel of each block or tile, read
// as uint16), values float32 [blocks][rows][cols] or int8 [tiles][tile rows][4 x
// tile groups], scale float32 / row_sum int32 / bias float32 [row blocks x rows].
// edgenlp/export/sparse.py writes them; the Python reference of both ops is there.
//
// Every call checks the header against the tensors' sizes (kernels::check) before
// a kernel reads them: a corrupted bundle fails the call with InvalidArgument and
// a logged reason, never an out-of-bounds read. input [..., k] float32 -> out
// [..., n] float32; the leading dimensions are the tokens. One thread per call.
//
// Built as libedgenlp_ops.so: libedgenlp links it, and the Python ExecuTorch runner
// loads it (edgenlp.run.executorch) before a program that uses the ops.
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <string>

#include <executorch/extension/kernel_util/make_boxed_from_unboxed_functor.h>
#include <executorch/runtime/kernel/kernel_includes.h>

#include "edgenlp_kernels/sparse_linear.h"

namespace {

namespace ek = edgenlp::kernels;
using executorch::aten::ScalarType;
using executorch::aten::SizesType;
using executorch::aten::Tensor;
using executorch::runtime::Error;
using executorch::runtime::KernelRuntimeContext;

// EDGENLP_SPARSE_ISA=scalar|avx2|... pins the kernels (tests compare ISAs through a bundle).
ek::Isa pick(ek::Isa best) {
  const char* env = std::getenv("EDGENLP_SPARSE_ISA");
  ek::Isa isa{};
  if (env != nullptr && *env != '\0' && ek::parse_isa(env, &isa) && ek::isa_supported(isa)) return isa;
  return best;
}
ek::Isa f32_isa() {
  static const ek::Isa isa = pick(ek::best_isa_f32());
  return isa;
}
ek::Isa qd8_isa() {
  static const ek::Isa isa = pick(ek::best_isa_qd8());
  return isa;
}

ek::Workspace& workspace() {
  thread_local ek::Workspace ws;
  return ws;
}

// Shapes and dtypes every op shares; "" when they hold. Sets *tokens and *k.
std::string check_io(const Tensor& input, const Tensor& row_start, const Tensor& col, int64_t n, const Tensor& out,
                     int* tokens, int* k) {
  if (input.scalar_type() != ScalarType::Float || out.scalar_type() != ScalarType::Float)
    return "input and out must be float32";
  if (input.dim() < 1 || input.dim() > 4) return "input must have 1 to 4 dimensions";
  if (row_start.scalar_type() != ScalarType::Int || row_start.dim() != 1) return "row_start must be int32 [row blocks + 1]";
  if (col.scalar_type() != ScalarType::Short || col.dim() != 1) return "col must be int16 [blocks]";
  if (n < 1 || n > 65535) return "n " + std::to_string(n) + " is outside 1..65535";
  const int64_t kk = input.size(input.dim() - 1);
  if (kk < 1 || kk > 65535) return "input's last dimension " + std::to_string(kk) + " is outside 1..65535";
  const int64_t m = input.numel() / kk;
  if (m < 1 || m > (int64_t{1} << 30)) return "no tokens";
  *tokens = static_cast<int>(m);
  *k = static_cast<int>(kk);
  return "";
}

bool resize_like_input(const Tensor& input, int64_t n, Tensor& out) {
  SizesType sizes[4];
  for (int d = 0; d < input.dim(); ++d) sizes[d] = static_cast<SizesType>(input.size(d));
  sizes[input.dim() - 1] = static_cast<SizesType>(n);
  return executorch::runtime::resize_tensor(out, {sizes, static_cast<size_t>(input.dim())}) == Error::Ok;
}

bool fail(KernelRuntimeContext& ctx, const char* op, const std::string& why) {
  ET_LOG(Error, "%s: %s", op, why.c_str());
  ctx.fail(Error::InvalidArgument);
  return false;
}

void run_kernel(const ek::SparseF32View& w, const float* x, int m, float* y, ek::Isa isa) {
  ek::sparse_linear_f32(w, x, m, y, workspace(), isa);
}
void run_kernel(const ek::SparseQC8WView& w, const float* x, int m, float* y, ek::Isa isa) {
  ek::sparse_linear_qd8(w, x, m, y, workspace(), isa);
}

// What both ops do once their header is read: refuse the call with the reason (`why` not empty), or size `out`
// and run the kernel, turning the kernel library's exceptions into a failed call.
template <class View>
Tensor& run_checked(KernelRuntimeContext& ctx, const char* op, std::string why, const View& w, const Tensor& input,
                    int64_t n, int m, Tensor& out, ek::Isa isa) {
  if (why.empty() && !resize_like_input(input, n, out)) why = "cannot resize out";
  if (!why.empty()) {
    fail(ctx, op, why);
    return out;
  }
  try {
    run_kernel(w, input.const_data_ptr<float>(), m, out.mutable_data_ptr<float>(), isa);
  } catch (const std::exception& e) {
    fail(ctx, op, e.what());
  }
  return out;
}

Tensor& sparse_linear_out(KernelRuntimeContext& ctx, const Tensor& input, const Tensor& row_start, const Tensor& col,
                          const Tensor& values, const Tensor& bias, int64_t n, int64_t block_rows, int64_t block_cols,
                          Tensor& out) {
  constexpr const char* kOp = "edgenlp::sparse_linear";
  int m = 0, k = 0;
  std::string why = check_io(input, row_start, col, n, out, &m, &k);
  if (why.empty() && (values.scalar_type() != ScalarType::Float || bias.scalar_type() != ScalarType::Float))
    why = "values and bias must be float32";
  ek::SparseF32View w;
  if (why.empty()) {
    w.n = static_cast<int>(n);
    w.k = k;
    w.block = ek::BlockShape{static_cast<int>(block_rows), static_cast<int>(block_cols)};
    w.row_blocks = static_cast<int>(row_start.numel()) - 1;
    w.row_start = row_start.const_data_ptr<int32_t>();
    w.col = reinterpret_cast<const uint16_t*>(col.const_data_ptr<int16_t>());
    w.values = values.const_data_ptr<float>();
    w.bias = bias.const_data_ptr<float>();
    w.blocks = static_cast<size_t>(col.numel());
    why = ek::check(w);
  }
  if (why.empty() && static_cast<size_t>(values.numel()) != w.blocks * block_rows * block_cols)
    why = "values hold " + std::to_string(values.numel()) + " weights for " + std::to_string(w.blocks) + " blocks";
  if (why.empty() && bias.numel() != static_cast<int64_t>(w.row_blocks) * block_rows)
    why = "bias holds " + std::to_string(bias.numel()) + " values for " + std::to_string(w.row_blocks) + " row blocks";
  return run_checked(ctx, kOp, why, w, input, n, m, out, f32_isa());
}

Tensor& sparse_linear_qd8_out(KernelRuntimeContext& ctx, const Tensor& input, const Tensor& row_start,
                              const Tensor& col, const Tensor& values, const Tensor& scale, const Tensor& row_sum,
                              const Tensor& bias, int64_t n, int64_t block_rows, int64_t block_cols, Tensor& out) {
  constexpr const char* kOp = "edgenlp::sparse_linear_qd8";
  int m = 0, k = 0;
  std::string why = check_io(input, row_start, col, n, out, &m, &k);
  if (why.empty() && (values.scalar_type() != ScalarType::Char || scale.scalar_type() != ScalarType::Float ||
                      row_sum.scalar_type() != ScalarType::Int || bias.scalar_type() != ScalarType::Float))
    why = "values int8, scale float32, row_sum int32 and bias float32 expected";
  ek::SparseQC8WView w;
  if (why.empty()) {
    w.n = static_cast<int>(n);
    w.k = k;
    w.block = ek::BlockShape{static_cast<int>(block_rows), static_cast<int>(block_cols)};
    ek::qc8w_tile(w.block, &w.tile_rows, &w.tile_groups);
    w.row_blocks = static_cast<int>(row_start.numel()) - 1;
    w.row_start = row_start.const_data_ptr<int32_t>();
    w.col = reinterpret_cast<const uint16_t*>(col.const_data_ptr<int16_t>());
    w.values = values.const_data_ptr<int8_t>();
    w.scale = scale.const_data_ptr<float>();
    w.row_sum = row_sum.const_data_ptr<int32_t>();
    w.bias = bias.const_data_ptr<float>();
    w.tiles = static_cast<size_t>(col.numel());
    why = ek::check(w);
  }
  if (why.empty() && static_cast<size_t>(values.numel()) != w.tiles * w.tile_rows * 4 * w.tile_groups)
    why = "values hold " + std::to_string(values.numel()) + " weights for " + std::to_string(w.tiles) + " tiles";
  const int64_t padded = static_cast<int64_t>(w.row_blocks) * w.tile_rows;
  if (why.empty() && (scale.numel() != padded || row_sum.numel() != padded || bias.numel() != padded))
    why = "scale, row_sum and bias must hold " + std::to_string(padded) + " values";
  return run_checked(ctx, kOp, why, w, input, n, m, out, qd8_isa());
}

}  // namespace

EXECUTORCH_LIBRARY(edgenlp, "sparse_linear.out", sparse_linear_out);
EXECUTORCH_LIBRARY(edgenlp, "sparse_linear_qd8.out", sparse_linear_qd8_out);

// The activation range of the int8 kernel that runs here: 255, or 127 for AVX2's 7-bit activations.
extern "C" __attribute__((visibility("default"))) int edgenlp_ops_act_qmax() { return ek::act_qmax(qd8_isa()); }
