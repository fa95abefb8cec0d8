// Tester for the block-sparse kernels: every compiled ISA the CPU supports, fp32
// and int8, blocks 1x4 / 1x8 / 4x1, odd M, N, K, sparsities 0..99 %, against a
// plain loop in double. fp32 tolerance: (terms + 4) * 2^-24 * (Σ|x·w| + |b|),
// the rounding bound of a sum of that many terms in any order. int8: the
// quantized activations are recomputed here from the documented rule, the
// integer sum is exact, so the tolerance covers only the float epilogue; the
// result must also be within the activation-rounding bound of the fp32 result.
//
//   sparse_linear_tester [--isa NAME|all] [--quick] [--seed N]
// Prints one line per ISA ("isa avx2: 1230 cases, 0 failures" or "isa avx512:
// skipped (...)") and exits 1 on any failure, printing the kernel, tile, shape
// and first bad element.
#include <cmath>
#include <cstdarg>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "edgenlp_kernels/sparse_linear.h"

namespace ek = edgenlp::kernels;

namespace {

struct Shape {
  int m, n, k;
};

constexpr float kGuard = 1234.5f;  // canary after y
int g_printed = 0;

void report(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
void report(const char* fmt, ...) {
  if (++g_printed > 40) return;
  va_list ap;
  va_start(ap, fmt);
  std::vfprintf(stdout, fmt, ap);
  va_end(ap);
}

// Block mask over the block grid, kept with probability 1 - sparsity.
std::vector<char> block_mask(int n, int k, ek::BlockShape b, double sparsity, std::mt19937& rng) {
  const int nrb = (n + b.rows - 1) / b.rows, ncb = (k + b.cols - 1) / b.cols;
  std::vector<char> mask(static_cast<std::size_t>(n) * k, 0);
  std::uniform_real_distribution<double> u(0.0, 1.0);
  for (int i = 0; i < nrb; ++i)
    for (int j = 0; j < ncb; ++j) {
      if (u(rng) < sparsity) continue;
      for (int r = 0; r < b.rows; ++r)
        for (int c = 0; c < b.cols; ++c) {
          const int nn = i * b.rows + r, kk = j * b.cols + c;
          if (nn < n && kk < k) mask[static_cast<std::size_t>(nn) * k + kk] = 1;
        }
    }
  return mask;
}

// Activations with the awkward rows: all zero, all positive, all negative, one spike.
std::vector<float> activations(int m, int k, std::mt19937& rng) {
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<float> x(static_cast<std::size_t>(m) * k);
  for (int i = 0; i < m; ++i) {
    float* row = x.data() + static_cast<std::size_t>(i) * k;
    for (int j = 0; j < k; ++j) row[j] = nd(rng);
    switch (i % 7) {
      case 3: std::fill(row, row + k, 0.0f); break;
      case 4: for (int j = 0; j < k; ++j) row[j] = std::fabs(row[j]) + 0.5f; break;
      case 5: for (int j = 0; j < k; ++j) row[j] = -std::fabs(row[j]) * 3.0f; break;
      case 6: row[k / 2] = 40.0f; break;
      default: break;
    }
  }
  return x;
}

struct Checker {
  std::string isa;
  int cases = 0, failures = 0;

  void fail_case(const std::string& what, const Shape& s, double sp, int mi, int ni, double got, double want,
                 double tol) {
    ++failures;
    report("FAIL %s isa=%s M=%d N=%d K=%d sparsity=%.2f at [m=%d][n=%d]: got %.9g want %.9g (|diff| %.3g > tol %.3g)\n",
           what.c_str(), isa.c_str(), s.m, s.n, s.k, sp, mi, ni, got, want, std::fabs(got - want), tol);
  }

  // y has m*n values then 16 canaries.
  bool guards_ok(const std::vector<float>& y, const Shape& s, const std::string& what, double sp) {
    for (std::size_t i = static_cast<std::size_t>(s.m) * s.n; i < y.size(); ++i)
      if (y[i] != kGuard) {
        ++failures;
        report("FAIL %s isa=%s M=%d N=%d K=%d sparsity=%.2f: wrote past the end of y\n", what.c_str(), isa.c_str(), s.m,
               s.n, s.k, sp);
        return false;
      }
    return true;
  }

  void run_f32(ek::Isa isa, const Shape& s, ek::BlockShape b, double sp, std::mt19937& rng, ek::Workspace& ws) {
    ++cases;
    const std::string what = "f32 " + ek::block_name(b) + " kernel=" + ek::kernel_name(false, b, isa);
    const auto mask = block_mask(s.n, s.k, b, sp, rng);
    std::uniform_real_distribution<float> u(-1.0f, 1.0f);
    std::vector<float> w(mask.size()), bias(s.n);
    for (std::size_t i = 0; i < w.size(); ++i) w[i] = mask[i] ? u(rng) : 0.0f;
    for (auto& v : bias) v = u(rng);
    const bool with_bias = (cases % 3) != 0;
    const auto x = activations(s.m, s.k, rng);
    const ek::SparseF32 packed = ek::pack_f32(w.data(), s.n, s.k, b, with_bias ? bias.data() : nullptr);
    std::vector<float> y(static_cast<std::size_t>(s.m) * s.n + 16, kGuard);
    std::fill(y.begin(), y.begin() + static_cast<std::ptrdiff_t>(s.m) * s.n, std::nanf(""));
    ek::sparse_linear_f32(packed, x.data(), s.m, y.data(), ws, isa);
    if (!guards_ok(y, s, what, sp)) return;
    for (int i = 0; i < s.m; ++i)
      for (int j = 0; j < s.n; ++j) {
        double ref = with_bias ? bias[j] : 0.0, mag = std::fabs(ref);
        for (int kk = 0; kk < s.k; ++kk) {
          const double p = static_cast<double>(x[static_cast<std::size_t>(i) * s.k + kk]) * w[static_cast<std::size_t>(j) * s.k + kk];
          ref += p;
          mag += std::fabs(p);
        }
        const double tol = (s.k + 4) * std::ldexp(1.0, -24) * mag + 1e-30;
        const double got = y[static_cast<std::size_t>(i) * s.n + j];
        if (!(std::fabs(got - ref) <= tol)) {
          fail_case(what, s, sp, i, j, got, ref, tol);
          return;
        }
      }
  }

  void run_qd8(ek::Isa isa, const Shape& s, ek::BlockShape b, double sp, std::mt19937& rng, ek::Workspace& ws) {
    ++cases;
    const std::string what = "qd8 " + ek::block_name(b) + " kernel=" + ek::kernel_name(true, b, isa);
    const auto mask = block_mask(s.n, s.k, b, sp, rng);
    std::uniform_int_distribution<int> qd(-127, 127);
    std::uniform_real_distribution<float> u(-1.0f, 1.0f), us(0.001f, 0.05f);
    std::vector<std::int8_t> q(mask.size());
    for (std::size_t i = 0; i < q.size(); ++i) {
      int v = qd(rng);
      if (i % 11 == 0) v = (i % 2) ? 127 : -127;  // extremes: overflow paths
      q[i] = mask[i] ? static_cast<std::int8_t>(v) : 0;
    }
    std::vector<float> scale(s.n), bias(s.n);
    for (auto& v : scale) v = us(rng);
    for (auto& v : bias) v = u(rng);
    const bool with_bias = (cases % 3) != 0;
    const auto x = activations(s.m, s.k, rng);
    const ek::SparseQC8W packed = ek::pack_qc8w(q.data(), scale.data(), s.n, s.k, b, with_bias ? bias.data() : nullptr);
    std::vector<float> y(static_cast<std::size_t>(s.m) * s.n + 16, kGuard);
    std::fill(y.begin(), y.begin() + static_cast<std::ptrdiff_t>(s.m) * s.n, std::nanf(""));
    ek::sparse_linear_qd8(packed, x.data(), s.m, y.data(), ws, isa);
    if (!guards_ok(y, s, what, sp)) return;
    const int qmax = ek::act_qmax(isa);
    std::vector<int> qx(s.k);
    for (int i = 0; i < s.m; ++i) {
      // The documented rule, written out again.
      const float* row = x.data() + static_cast<std::size_t>(i) * s.k;
      float lo = 0.0f, hi = 0.0f;
      for (int kk = 0; kk < s.k; ++kk) {
        lo = std::fmin(lo, row[kk]);
        hi = std::fmax(hi, row[kk]);
      }
      float sx = (hi - lo) / static_cast<float>(qmax);
      if (!(sx > 0.0f)) sx = 1.0f;
      const float inv = 1.0f / sx;
      const int z = static_cast<int>(std::fmin(std::fmax(std::nearbyint(-lo / sx), 0.0f), static_cast<float>(qmax)));
      for (int kk = 0; kk < s.k; ++kk) {
        const float v = std::nearbyint(row[kk] * inv) + static_cast<float>(z);
        qx[kk] = static_cast<int>(std::fmin(std::fmax(v, 0.0f), static_cast<float>(qmax)));
      }
      for (int j = 0; j < s.n; ++j) {
        std::int64_t acc = 0;
        double fref = with_bias ? bias[j] : 0.0, wabs = 0.0;
        for (int kk = 0; kk < s.k; ++kk) {
          const int wq = q[static_cast<std::size_t>(j) * s.k + kk];
          acc += static_cast<std::int64_t>(qx[kk] - z) * wq;
          fref += static_cast<double>(row[kk]) * wq * scale[j];
          wabs += std::fabs(static_cast<double>(wq) * scale[j]);
        }
        const double b0 = with_bias ? bias[j] : 0.0;
        const double ref = static_cast<double>(acc) * (static_cast<double>(sx) * scale[j]) + b0;
        const double tol = 8 * std::ldexp(1.0, -24) * (std::fabs(ref - b0) + std::fabs(b0)) + 1e-30;
        const double got = y[static_cast<std::size_t>(i) * s.n + j];
        if (!(std::fabs(got - ref) <= tol)) {
          fail_case(what, s, sp, i, j, got, ref, tol);
          return;
        }
        // Each activation is off by at most one step sx (rounding, and the zero point's rounding).
        const double qtol = wabs * sx * 1.0001 + 1e-6 * (std::fabs(fref) + 1.0);
        if (!(std::fabs(got - fref) <= qtol)) {
          fail_case(what + " (vs fp32, quantization bound)", s, sp, i, j, got, fref, qtol);
          return;
        }
      }
    }
  }
};

std::vector<Shape> shapes(bool quick) {
  const int ms[] = {1, 3, 8, 15, 17, 33, 64, 67, 130};
  const Shape nk[] = {{0, 1, 1},   {0, 3, 5},    {0, 4, 4},     {0, 5, 9},   {0, 8, 17},
                      {0, 13, 31}, {0, 16, 64},  {0, 33, 100},  {0, 64, 257}, {0, 7, 384}};
  std::vector<Shape> out;
  int i = 0;
  for (const Shape& s : nk) {
    const int per = quick ? 2 : 4;
    for (int j = 0; j < per; ++j) out.push_back({ms[(i++ * 5 + j) % 9], s.n, s.k});
  }
  out.push_back({35, 384, quick ? 384 : 1536});  // a MiniLM-sized layer
  return out;
}

bool api_errors() {
  bool ok = true;
  const float w[4] = {1, 0, 0, 0};
  try {
    ek::pack_f32(w, 1, 4, ek::BlockShape{2, 2}, nullptr);
    std::printf("FAIL pack_f32 accepted a 2x2 block\n");
    ok = false;
  } catch (const std::invalid_argument&) {
  }
  const std::int8_t q[4] = {-128, 0, 0, 0};
  const float s = 1.0f;
  try {
    ek::pack_qc8w(q, &s, 1, 4, ek::kBlock1x4, nullptr);
    std::printf("FAIL pack_qc8w accepted -128\n");
    ok = false;
  } catch (const std::invalid_argument&) {
  }
  for (ek::Isa isa : ek::kAllIsas) {
    if (ek::isa_supported(isa)) continue;
    const ek::SparseF32 p = ek::pack_f32(w, 1, 4, ek::kBlock1x4, nullptr);
    ek::Workspace ws;
    float x[4] = {1, 2, 3, 4}, y[1];
    try {
      ek::sparse_linear_f32(p, x, 1, y, ws, isa);
      std::printf("FAIL sparse_linear_f32 ran unsupported ISA %s\n", ek::isa_name(isa));
      ok = false;
    } catch (const std::invalid_argument&) {
    }
  }
  return ok;
}

}  // namespace

int main(int argc, char** argv) {
  std::string only = "all";
  bool quick = false;
  unsigned seed = 20240523u;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--isa" && i + 1 < argc) {
      only = argv[++i];
    } else if (a == "--quick") {
      quick = true;
    } else if (a == "--seed" && i + 1 < argc) {
      seed = static_cast<unsigned>(std::strtoul(argv[++i], nullptr, 10));
    } else {
      std::fprintf(stderr, "usage: %s [--isa NAME|all] [--quick] [--seed N]\n", argv[0]);
      return 2;
    }
  }
  ek::Isa chosen{};
  if (only != "all" && !ek::parse_isa(only, &chosen)) {
    std::fprintf(stderr, "error: unknown ISA '%s'\n", only.c_str());
    return 2;
  }
  std::printf("best: f32=%s int8=%s\n", ek::isa_name(ek::best_isa_f32()), ek::isa_name(ek::best_isa_qd8()));
  int failures = api_errors() ? 0 : 1;
  const double sparsities[] = {0.0, 0.5, 0.7, 0.9, 0.99};
  const ek::BlockShape blocks[] = {ek::kBlock1x4, ek::kBlock1x8, ek::kBlock4x1};
  for (ek::Isa isa : ek::kAllIsas) {
    if (only != "all" && isa != chosen) continue;
    if (!ek::isa_compiled(isa)) continue;  // other architecture
    if (!ek::isa_supported(isa)) {
      std::printf("isa %s: skipped (not supported by this CPU)\n", ek::isa_name(isa));
      continue;
    }
    Checker c;
    c.isa = ek::isa_name(isa);
    std::mt19937 rng(seed);
    ek::Workspace ws;
    for (const Shape& s : shapes(quick))
      for (double sp : sparsities)
        for (ek::BlockShape b : blocks) {
          c.run_f32(isa, s, b, sp, rng, ws);
          c.run_qd8(isa, s, b, sp, rng, ws);
        }
    std::printf("isa %s: %d cases, %d failures (kernels %s, %s, %s / %s, %s, %s)\n", c.isa.c_str(), c.cases, c.failures,
                ek::kernel_name(false, ek::kBlock1x4, isa).c_str(), ek::kernel_name(false, ek::kBlock1x8, isa).c_str(),
                ek::kernel_name(false, ek::kBlock4x1, isa).c_str(), ek::kernel_name(true, ek::kBlock1x4, isa).c_str(),
                ek::kernel_name(true, ek::kBlock1x8, isa).c_str(), ek::kernel_name(true, ek::kBlock4x1, isa).c_str());
    failures += c.failures;
  }
  std::printf("%s\n", failures == 0 ? "all passed" : "FAILED");
  return failures == 0 ? 0 : 1;
}
