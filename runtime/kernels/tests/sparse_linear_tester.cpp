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

// One generated case and its reference, run against every ISA.
struct Case {
  Shape s;
  ek::BlockShape b;
  double sparsity;
  bool with_bias;
  std::vector<float> x, bias;
};

std::string where(const Case& c, const char* prec, ek::Isa isa) {
  char buf[256];
  std::snprintf(buf, sizeof buf, "%s %s isa=%s kernel=%s M=%d N=%d K=%d sparsity=%.2f", prec,
                ek::block_name(c.b).c_str(), ek::isa_name(isa), ek::kernel_name(prec[0] == 'q', c.b, isa).c_str(), c.s.m,
                c.s.n, c.s.k, c.sparsity);
  return buf;
}

// y has m*n values then 16 canaries; returns the number of failures (0 or 1).
int check(const Case& c, const char* prec, ek::Isa isa, const std::vector<float>& y, const std::vector<double>& ref,
          const std::vector<double>& tol, const std::vector<double>* fref = nullptr,
          const std::vector<double>* qtol = nullptr) {
  const std::size_t mn = static_cast<std::size_t>(c.s.m) * c.s.n;
  for (std::size_t i = mn; i < y.size(); ++i)
    if (y[i] != kGuard) {
      report("FAIL %s: wrote past the end of y\n", where(c, prec, isa).c_str());
      return 1;
    }
  for (std::size_t i = 0; i < mn; ++i) {
    const double got = y[i];
    if (!(std::fabs(got - ref[i]) <= tol[i])) {
      report("FAIL %s at [m=%d][n=%d]: got %.9g want %.9g (|diff| %.3g > tol %.3g)\n", where(c, prec, isa).c_str(),
             static_cast<int>(i / c.s.n), static_cast<int>(i % c.s.n), got, ref[i], std::fabs(got - ref[i]), tol[i]);
      return 1;
    }
    if (fref != nullptr && !(std::fabs(got - (*fref)[i]) <= (*qtol)[i])) {
      report("FAIL %s at [m=%d][n=%d]: got %.9g, fp32 result %.9g, beyond the quantization bound %.3g\n",
             where(c, prec, isa).c_str(), static_cast<int>(i / c.s.n), static_cast<int>(i % c.s.n), got, (*fref)[i],
             (*qtol)[i]);
      return 1;
    }
  }
  return 0;
}

struct Tally {
  int cases = 0, failures = 0;
};

void run_f32(const Case& c, std::mt19937& rng, const std::vector<ek::Isa>& isas, std::vector<ek::Workspace>& ws,
             std::vector<Tally>& tally) {
  const Shape& s = c.s;
  const auto mask = block_mask(s.n, s.k, c.b, c.sparsity, rng);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::vector<float> w(mask.size());
  for (std::size_t i = 0; i < w.size(); ++i) w[i] = mask[i] ? u(rng) : 0.0f;
  const ek::SparseF32 packed = ek::pack_f32(w.data(), s.n, s.k, c.b, c.with_bias ? c.bias.data() : nullptr);
  const std::size_t mn = static_cast<std::size_t>(s.m) * s.n;
  std::vector<double> ref(mn), tol(mn);
  for (int i = 0; i < s.m; ++i)
    for (int j = 0; j < s.n; ++j) {
      double r = c.with_bias ? c.bias[j] : 0.0, mag = std::fabs(r);
      const float* xr = c.x.data() + static_cast<std::size_t>(i) * s.k;
      const float* wr = w.data() + static_cast<std::size_t>(j) * s.k;
      for (int kk = 0; kk < s.k; ++kk) {
        const double p = static_cast<double>(xr[kk]) * wr[kk];
        r += p;
        mag += std::fabs(p);
      }
      ref[i * s.n + j] = r;
      tol[i * s.n + j] = (s.k + 4) * std::ldexp(1.0, -24) * mag + 1e-30;
    }
  for (std::size_t t = 0; t < isas.size(); ++t) {
    std::vector<float> y(mn + 16, kGuard);
    std::fill(y.begin(), y.begin() + static_cast<std::ptrdiff_t>(mn), std::nanf(""));
    ek::sparse_linear_f32(packed, c.x.data(), s.m, y.data(), ws[t], isas[t]);
    ++tally[t].cases;
    tally[t].failures += check(c, "f32", isas[t], y, ref, tol);
  }
}

void run_qd8(const Case& c, std::mt19937& rng, const std::vector<ek::Isa>& isas, std::vector<ek::Workspace>& ws,
             std::vector<Tally>& tally) {
  const Shape& s = c.s;
  const auto mask = block_mask(s.n, s.k, c.b, c.sparsity, rng);
  std::uniform_int_distribution<int> qd(-127, 127);
  std::uniform_real_distribution<float> us(0.001f, 0.05f);
  std::vector<std::int8_t> q(mask.size());
  for (std::size_t i = 0; i < q.size(); ++i) {
    int v = qd(rng);
    if (i % 11 == 0) v = (i % 2) ? 127 : -127;  // extremes: the overflow paths
    q[i] = mask[i] ? static_cast<std::int8_t>(v) : 0;
  }
  std::vector<float> scale(s.n);
  for (auto& v : scale) v = us(rng);
  const ek::SparseQC8W packed = ek::pack_qc8w(q.data(), scale.data(), s.n, s.k, c.b, c.with_bias ? c.bias.data() : nullptr);
  const std::size_t mn = static_cast<std::size_t>(s.m) * s.n;
  // The fp32 result with the dequantized weights, and how far activation rounding may move it.
  std::vector<double> fref(mn), qtol(mn);
  std::vector<double> wabs(s.n, 0.0);
  for (int j = 0; j < s.n; ++j)
    for (int kk = 0; kk < s.k; ++kk) wabs[j] += std::fabs(static_cast<double>(q[static_cast<std::size_t>(j) * s.k + kk]) * scale[j]);
  for (int i = 0; i < s.m; ++i)
    for (int j = 0; j < s.n; ++j) {
      double r = c.with_bias ? c.bias[j] : 0.0;
      for (int kk = 0; kk < s.k; ++kk)
        r += static_cast<double>(c.x[static_cast<std::size_t>(i) * s.k + kk]) * q[static_cast<std::size_t>(j) * s.k + kk] * scale[j];
      fref[i * s.n + j] = r;
    }
  int ref_qmax = 0;
  std::vector<double> ref(mn), tol(mn);
  std::vector<int> qx(s.k);
  for (std::size_t t = 0; t < isas.size(); ++t) {
    const int qmax = ek::act_qmax(isas[t]);
    if (qmax != ref_qmax) {
      ref_qmax = qmax;
      for (int i = 0; i < s.m; ++i) {
        // The documented quantization rule, written out again.
        const float* row = c.x.data() + static_cast<std::size_t>(i) * s.k;
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
          const std::int8_t* wr = q.data() + static_cast<std::size_t>(j) * s.k;
          for (int kk = 0; kk < s.k; ++kk) acc += static_cast<std::int64_t>(qx[kk] - z) * wr[kk];
          const double b0 = c.with_bias ? c.bias[j] : 0.0;
          const double part = static_cast<double>(acc) * (static_cast<double>(sx) * scale[j]);
          ref[i * s.n + j] = part + b0;
          // float(acc), s[m]*scale[n], the product and the bias: four roundings, twice over.
          tol[i * s.n + j] = 8 * std::ldexp(1.0, -24) * (std::fabs(part) + std::fabs(b0)) + 1e-30;
          // Each activation moves by at most one step sx (its rounding and the zero point's).
          qtol[i * s.n + j] = wabs[j] * sx * 1.0001 + 1e-6 * (std::fabs(fref[i * s.n + j]) + 1.0);
        }
      }
    }
    std::vector<float> y(mn + 16, kGuard);
    std::fill(y.begin(), y.begin() + static_cast<std::ptrdiff_t>(mn), std::nanf(""));
    ek::sparse_linear_qd8(packed, c.x.data(), s.m, y.data(), ws[t], isas[t]);
    ++tally[t].cases;
    tally[t].failures += check(c, "qd8", isas[t], y, ref, tol, &fref, &qtol);
  }
}

std::vector<Shape> shapes(bool quick) {
  const int ms[] = {1, 3, 8, 15, 17, 33, 64, 67, 130};
  const Shape nk[] = {{0, 1, 1},   {0, 3, 5},    {0, 4, 4},     {0, 5, 9},   {0, 8, 17},
                      {0, 13, 31}, {0, 16, 64},  {0, 33, 100},  {0, 64, 257}, {0, 7, 384}, {0, 12, 1100}};
  std::vector<Shape> out;
  int i = 0;
  for (const Shape& s : nk) {
    const int per = quick ? 2 : 4;
    for (int j = 0; j < per; ++j) out.push_back({ms[(i++ * 5 + j) % 9], s.n, s.k});
  }
  if (!quick) out.push_back({35, 384, 1536});  // a MiniLM-sized layer
  return out;
}

// check() accepts what pack_* writes and names each broken header field (the arrays a
// bundle hands the kernels: a corrupted one must be refused before any kernel reads it).
// n x k: a small matrix, and one with hundreds of blocks (the column scan's vector loop, not only its tail).
bool view_checks(int n, int k) {
  bool ok = true;
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::vector<float> w(n * k);
  std::vector<std::int8_t> q(n * k);
  std::vector<float> scale(n, 0.01f);
  for (int i = 0; i < n * k; ++i) {
    w[i] = (i % 3 == 0) ? 0.0f : u(rng);
    q[i] = static_cast<std::int8_t>(w[i] * 100.0f);
  }
  auto expect = [&](const std::string& got, bool good, const char* what) {
    if (got.empty() != good) {
      std::printf("FAIL check(%s): %s\n", what, got.empty() ? "accepted" : got.c_str());
      ok = false;
    }
  };
  for (ek::BlockShape b : {ek::kBlock1x4, ek::kBlock1x8, ek::kBlock4x1}) {
    const ek::SparseF32 f = ek::pack_f32(w.data(), n, k, b, nullptr);
    const ek::SparseQC8W i8 = ek::pack_qc8w(q.data(), scale.data(), n, k, b, nullptr);
    expect(ek::check(ek::view(f)), true, "packed f32");
    expect(ek::check(ek::view(i8)), true, "packed int8");
    std::vector<std::int32_t> rs(f.row_start);
    std::vector<std::uint16_t> col(f.col);
    ek::SparseF32View v = ek::view(f);
    v.row_start = rs.data();
    v.col = col.data();
    rs[0] = 1;
    expect(ek::check(v), false, "row_start[0] != 0");
    rs = f.row_start;
    rs[1] = rs.back() + 1;
    expect(ek::check(v), false, "row_start decreasing");
    rs = f.row_start;
    rs.back() += 1;
    expect(ek::check(v), false, "row_start past the blocks");
    rs = f.row_start;
    // a bad column first, in the middle and last (the scan is vectorized: its tail counts too)
    for (const std::size_t at : {std::size_t{0}, col.size() / 2, col.size() - 1}) {
      col[at] = static_cast<std::uint16_t>(k + 8);
      expect(ek::check(v), false, "column outside k");
      col = f.col;
      if (b.cols > 1) {
        col[at] = static_cast<std::uint16_t>(col[at] + 1);
        expect(ek::check(v), false, "unaligned column");
        col = f.col;
      }
    }
    v.row_blocks += 1;
    expect(ek::check(v), false, "row blocks");
    v = ek::view(f);
    v.block = ek::BlockShape{2, 2};
    expect(ek::check(v), false, "block 2x2");
    ek::SparseQC8WView qv = ek::view(i8);
    qv.tile_groups = 3;
    expect(ek::check(qv), false, "int8 tile");
    qv = ek::view(i8);
    qv.scale = nullptr;
    expect(ek::check(qv), false, "int8 scale missing");
  }
  return ok;
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
  ok = view_checks(9, 13) && ok;
  ok = view_checks(37, 203) && ok;
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
  std::vector<ek::Isa> isas;
  for (ek::Isa isa : ek::kAllIsas) {
    if (only != "all" && isa != chosen) continue;
    if (!ek::isa_compiled(isa)) continue;  // other architecture
    if (!ek::isa_supported(isa)) {
      std::printf("isa %s: skipped (not supported by this CPU)\n", ek::isa_name(isa));
      continue;
    }
    isas.push_back(isa);
  }
  std::vector<ek::Workspace> ws(isas.size());
  std::vector<Tally> tally(isas.size());
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  int n_case = 0;
  for (const Shape& s : shapes(quick))
    for (double sp : sparsities)
      for (ek::BlockShape b : blocks) {
        Case c{s, b, sp, (n_case++ % 3) != 0, activations(s.m, s.k, rng), std::vector<float>(s.n)};
        for (auto& v : c.bias) v = u(rng);
        run_f32(c, rng, isas, ws, tally);
        run_qd8(c, rng, isas, ws, tally);
      }
  for (std::size_t t = 0; t < isas.size(); ++t) {
    const ek::Isa isa = isas[t];
    std::printf("isa %s: %d cases, %d failures (kernels %s, %s, %s / %s, %s, %s)\n", ek::isa_name(isa), tally[t].cases,
                tally[t].failures, ek::kernel_name(false, ek::kBlock1x4, isa).c_str(),
                ek::kernel_name(false, ek::kBlock1x8, isa).c_str(), ek::kernel_name(false, ek::kBlock4x1, isa).c_str(),
                ek::kernel_name(true, ek::kBlock1x4, isa).c_str(), ek::kernel_name(true, ek::kBlock1x8, isa).c_str(),
                ek::kernel_name(true, ek::kBlock4x1, isa).c_str());
    failures += tally[t].failures;
  }
  std::printf("%s\n", failures == 0 ? "all passed" : "FAILED");
  return failures == 0 ? 0 : 1;
}
