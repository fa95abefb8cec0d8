// Micro-benchmark: block-sparse kernels against XNNPACK's dense fp32 and QD8
// (dynamic int8 activations x per-channel int8 weights) fully-connected
// operators, as the ExecuTorch wheel runs them (one-linear programs written by
// tools/bench/sparse_kernels.py, one method per token count, one thread).
//
//   sparse_linear_bench --pte-dir DIR --m 16,32 --kn 384x384,384x1536 --sparsity 0.5,0.9
//                       [--blocks 1x4,1x8,4x1] [--rounds 15] [--min-ms 2] [--seed 1]
//
// Every round times every candidate once, in a rotated order (interleaved);
// a sample is the mean over enough back-to-back calls to fill --min-ms.
// Prints one JSON object: per candidate its settings and the per-round samples
// (µs), wall time and the process's CPU time.
#include <time.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <memory>
#include <numeric>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include <executorch/extension/module/module.h>
#include <executorch/extension/tensor/tensor_ptr.h>
#include <executorch/extension/tensor/tensor_ptr_maker.h>
#include <executorch/runtime/platform/runtime.h>

#include "edgenlp_kernels/sparse_linear.h"

// The wheel ships libexecutorch_threadpool.so but not its header (as in src/edgenlp.cpp).
namespace executorch::extension::threadpool {
class ThreadPool {
 public:
  std::size_t get_thread_count() const;
  bool _unsafe_reset_threadpool(std::uint32_t num_threads);
};
ThreadPool* get_threadpool();
}  // namespace executorch::extension::threadpool

namespace ek = edgenlp::kernels;
using executorch::extension::Module;

namespace {

std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, sep))
    if (!item.empty()) out.push_back(item);
  return out;
}

[[noreturn]] void die(const std::string& msg) {
  std::fprintf(stderr, "error: %s\n", msg.c_str());
  std::exit(2);
}

struct Candidate {
  std::string kind;  // xnn_f32, xnn_qd8, sparse_f32, sparse_qd8, overhead
  int m = 0, k = 0, n = 0;
  double sparsity = 0.0;
  std::string block, isa, kernel;
  std::size_t blocks = 0, tiles = 0, weight_bytes = 0;
  std::function<void()> call;
  int reps = 1;
  std::vector<double> samples_us, cpu_samples_us;
};

double now_us() {
  return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// CPU time of the whole process (every thread): on a shared host it leaves out
// the time other processes hold the core, which wall time does not.
double cpu_us() {
  timespec ts;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return ts.tv_sec * 1e6 + ts.tv_nsec * 1e-3;
}

// Keep the top (1 - sparsity) of the blocks by L2 norm (exact count), zero the rest.
std::vector<float> prune_blocks(const std::vector<float>& w, int n, int k, ek::BlockShape b, double sparsity) {
  const int nrb = (n + b.rows - 1) / b.rows, ncb = (k + b.cols - 1) / b.cols;
  std::vector<std::pair<double, int>> norms;
  norms.reserve(static_cast<std::size_t>(nrb) * ncb);
  for (int i = 0; i < nrb; ++i)
    for (int j = 0; j < ncb; ++j) {
      double s = 0.0;
      for (int r = 0; r < b.rows; ++r)
        for (int c = 0; c < b.cols; ++c) {
          const int nn = i * b.rows + r, kk = j * b.cols + c;
          if (nn < n && kk < k) s += static_cast<double>(w[static_cast<std::size_t>(nn) * k + kk]) * w[static_cast<std::size_t>(nn) * k + kk];
        }
      norms.emplace_back(s, i * ncb + j);
    }
  const std::size_t keep = static_cast<std::size_t>(std::llround((1.0 - sparsity) * norms.size()));
  std::nth_element(norms.begin(), norms.begin() + static_cast<std::ptrdiff_t>(std::min(keep, norms.size())), norms.end(),
                   [](const auto& a, const auto& c) { return a.first > c.first; });
  std::vector<char> kept(norms.size(), 0);
  for (std::size_t i = 0; i < keep && i < norms.size(); ++i) kept[static_cast<std::size_t>(norms[i].second)] = 1;
  std::vector<float> out(w.size(), 0.0f);
  for (int nn = 0; nn < n; ++nn)
    for (int kk = 0; kk < k; ++kk)
      if (kept[static_cast<std::size_t>(nn / b.rows) * ncb + kk / b.cols])
        out[static_cast<std::size_t>(nn) * k + kk] = w[static_cast<std::size_t>(nn) * k + kk];
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  std::string pte_dir, ms = "16,32,64,128", kns = "384x384,384x1536,1536x384", sps = "0.5,0.7,0.8,0.9,0.95",
                       blocks_s = "1x4,1x8,4x1";
  int rounds = 15;
  double min_ms = 2.0;
  unsigned seed = 1;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) die(a + " needs a value");
      return argv[++i];
    };
    if (a == "--pte-dir") pte_dir = next();
    else if (a == "--m") ms = next();
    else if (a == "--kn") kns = next();
    else if (a == "--sparsity") sps = next();
    else if (a == "--blocks") blocks_s = next();
    else if (a == "--rounds") rounds = std::atoi(next().c_str());
    else if (a == "--min-ms") min_ms = std::atof(next().c_str());
    else if (a == "--seed") seed = static_cast<unsigned>(std::atoi(next().c_str()));
    else die("unknown argument " + a);
  }
  if (pte_dir.empty()) die("--pte-dir is required");
  executorch::runtime::runtime_init();
  if (auto* pool = executorch::extension::threadpool::get_threadpool()) pool->_unsafe_reset_threadpool(1);

  const ek::Isa isa_f32 = ek::best_isa_f32(), isa_q8 = ek::best_isa_qd8();
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<std::unique_ptr<Candidate>> cands;
  std::vector<std::unique_ptr<Module>> modules;
  std::vector<std::shared_ptr<void>> keep_alive;
  auto ws = std::make_shared<ek::Workspace>();

  auto add_xnn = [&](const std::string& kind, const std::string& path, const std::string& method, int m, int k, int n) {
    auto mod = std::make_unique<Module>(path, Module::LoadMode::File);
    if (mod->load_method(method) != executorch::runtime::Error::Ok) die("cannot load " + path + " method " + method);
    auto x = std::make_shared<std::vector<float>>(static_cast<std::size_t>(m) * k);
    for (auto& v : *x) v = nd(rng);
    auto t = executorch::extension::from_blob(x->data(), {m, k});
    if (mod->set_input(method, t, 0) != executorch::runtime::Error::Ok) die("cannot set the input of " + path);
    keep_alive.push_back(x);
    keep_alive.push_back(t);
    Module* raw = mod.get();
    modules.push_back(std::move(mod));
    auto c = std::make_unique<Candidate>();
    c->kind = kind;
    c->m = m;
    c->k = k;
    c->n = n;
    c->call = [raw, method]() {
      auto r = raw->execute(method);
      if (!r.ok()) die("execute failed: " + method);
    };
    cands.push_back(std::move(c));
  };

  add_xnn("overhead", pte_dir + "/xnn-f32-k8-n8.pte", "m1", 1, 8, 8);
  for (const auto& kn : split(kns, ',')) {
    const auto parts = split(kn, 'x');
    if (parts.size() != 2) die("--kn wants KxN items, got " + kn);
    const int k = std::atoi(parts[0].c_str()), n = std::atoi(parts[1].c_str());
    std::vector<float> w(static_cast<std::size_t>(n) * k);
    for (auto& v : w) v = nd(rng) * 0.05f;
    std::vector<float> bias(n);
    for (auto& v : bias) v = nd(rng) * 0.1f;
    for (const auto& mstr : split(ms, ',')) {
      const int m = std::atoi(mstr.c_str());
      const std::string stem = pte_dir + "/xnn-";
      const std::string suffix = "-k" + std::to_string(k) + "-n" + std::to_string(n) + ".pte";
      add_xnn("xnn_f32", stem + "f32" + suffix, "m" + mstr, m, k, n);
      add_xnn("xnn_qd8", stem + "qd8" + suffix, "m" + mstr, m, k, n);
      auto x = std::make_shared<std::vector<float>>(static_cast<std::size_t>(m) * k);
      for (auto& v : *x) v = nd(rng);
      auto y = std::make_shared<std::vector<float>>(static_cast<std::size_t>(m) * n);
      keep_alive.push_back(x);
      keep_alive.push_back(y);
      for (const auto& bs : split(blocks_s, ',')) {
        ek::BlockShape b;
        if (!ek::parse_block(bs, &b)) die("unknown block " + bs);
        for (const auto& sp : split(sps, ',')) {
          const double s = std::atof(sp.c_str());
          const auto pruned = prune_blocks(w, n, k, b, s);
          auto pf = std::make_shared<ek::SparseF32>(ek::pack_f32(pruned.data(), n, k, b, bias.data()));
          // Per-channel symmetric int8 of the same pruned weights.
          std::vector<std::int8_t> q(pruned.size());
          std::vector<float> scale(n);
          for (int i = 0; i < n; ++i) {
            float mx = 0.0f;
            for (int j = 0; j < k; ++j) mx = std::max(mx, std::fabs(pruned[static_cast<std::size_t>(i) * k + j]));
            scale[i] = mx > 0.0f ? mx / 127.0f : 1.0f;
            for (int j = 0; j < k; ++j)
              q[static_cast<std::size_t>(i) * k + j] =
                  static_cast<std::int8_t>(std::nearbyint(pruned[static_cast<std::size_t>(i) * k + j] / scale[i]));
          }
          auto pq = std::make_shared<ek::SparseQC8W>(ek::pack_qc8w(q.data(), scale.data(), n, k, b, bias.data()));
          keep_alive.push_back(pf);
          keep_alive.push_back(pq);
          auto cf = std::make_unique<Candidate>();
          cf->kind = "sparse_f32";
          cf->m = m; cf->k = k; cf->n = n; cf->sparsity = s; cf->block = bs;
          cf->isa = ek::isa_name(isa_f32);
          cf->kernel = ek::kernel_name(false, b, isa_f32);
          cf->blocks = pf->blocks();
          cf->tiles = pf->blocks();
          cf->weight_bytes = pf->bytes();
          cf->call = [pf, x, y, m, ws, isa_f32]() { ek::sparse_linear_f32(*pf, x->data(), m, y->data(), *ws, isa_f32); };
          cands.push_back(std::move(cf));
          auto cq = std::make_unique<Candidate>();
          cq->kind = "sparse_qd8";
          cq->m = m; cq->k = k; cq->n = n; cq->sparsity = s; cq->block = bs;
          cq->isa = ek::isa_name(isa_q8);
          cq->kernel = ek::kernel_name(true, b, isa_q8);
          cq->blocks = pq->blocks;
          cq->tiles = pq->tiles();
          cq->weight_bytes = pq->bytes();
          cq->call = [pq, x, y, m, ws, isa_q8]() { ek::sparse_linear_qd8(*pq, x->data(), m, y->data(), *ws, isa_q8); };
          cands.push_back(std::move(cq));
        }
      }
    }
  }

  // Calibrate: enough calls per sample to fill min_ms.
  for (auto& c : cands) {
    c->call();
    const double t0 = now_us();
    c->call();
    const double dt = std::max(1.0, now_us() - t0);
    c->reps = std::max(1, static_cast<int>(std::ceil(min_ms * 1000.0 / dt)));
  }
  const std::size_t nc = cands.size();
  for (int r = 0; r < rounds; ++r) {
    const std::size_t start = (static_cast<std::size_t>(r) * 7919u) % nc;
    for (std::size_t j = 0; j < nc; ++j) {
      Candidate& c = *cands[(start + j) % nc];
      c.call();  // warm: this candidate's weights and activations into cache
      const double c0 = cpu_us(), t0 = now_us();
      for (int i = 0; i < c.reps; ++i) c.call();
      const double t1 = now_us(), c1 = cpu_us();
      c.samples_us.push_back((t1 - t0) / c.reps);
      c.cpu_samples_us.push_back((c1 - c0) / c.reps);
    }
  }

  std::printf("{\"isa_f32\": \"%s\", \"isa_qd8\": \"%s\", \"act_qmax\": %d, \"rounds\": %d, \"min_ms\": %g,\n \"candidates\": [\n",
              ek::isa_name(isa_f32), ek::isa_name(isa_q8), ek::act_qmax(isa_q8), rounds, min_ms);
  for (std::size_t i = 0; i < nc; ++i) {
    const Candidate& c = *cands[i];
    std::printf("  {\"kind\": \"%s\", \"m\": %d, \"k\": %d, \"n\": %d, \"sparsity\": %g, \"block\": \"%s\", \"isa\": \"%s\", "
                "\"kernel\": \"%s\", \"blocks\": %zu, \"tiles\": %zu, \"weight_bytes\": %zu, \"reps\": %d, \"samples_us\": [",
                c.kind.c_str(), c.m, c.k, c.n, c.sparsity, c.block.c_str(), c.isa.c_str(), c.kernel.c_str(), c.blocks,
                c.tiles, c.weight_bytes, c.reps);
    for (std::size_t j = 0; j < c.samples_us.size(); ++j) std::printf("%s%.3f", j ? ", " : "", c.samples_us[j]);
    std::printf("], \"cpu_samples_us\": [");
    for (std::size_t j = 0; j < c.cpu_samples_us.size(); ++j) std::printf("%s%.3f", j ? ", " : "", c.cpu_samples_us[j]);
    std::printf("]}%s\n", i + 1 < nc ? "," : "");
  }
  std::printf(" ]}\n");
  return 0;
}
