// The C API (include/edgenlp.h) on top of the ExecuTorch Module facade.
#include "edgenlp.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <memory>
#include <mutex>
#include <new>
#include <set>
#include <string>
#include <vector>

#include <executorch/devtools/etdump/etdump_flatcc.h>
#include <executorch/extension/module/module.h>
#include <executorch/runtime/backend/backend_options_map.h>
#include <executorch/runtime/backend/options.h>
#include <executorch/runtime/core/exec_aten/exec_aten.h>
#include <executorch/runtime/executor/program.h>
#include <executorch/runtime/platform/runtime.h>

#include "bundle.h"
#include "dynamic.h"
#include "wordpiece.h"

// The wheel ships libexecutorch_threadpool.so but not its header; these two
// declarations match the exported symbols.
namespace executorch::extension::threadpool {
class ThreadPool {
 public:
  std::size_t get_thread_count() const;
  bool _unsafe_reset_threadpool(std::uint32_t num_threads);
};
ThreadPool* get_threadpool();
}  // namespace executorch::extension::threadpool

namespace {

using executorch::aten::ScalarType;
using executorch::aten::Tensor;
using executorch::aten::TensorImpl;
using executorch::extension::module::Module;
using executorch::runtime::DataLoader;
using executorch::runtime::Error;
using executorch::runtime::EValue;
using executorch::runtime::FreeableBuffer;
using executorch::runtime::Result;

std::once_flag g_init_once;
// Guards the process-wide thread pool and the set of live handles.
std::mutex g_mu;
std::set<edgenlp_handle*> g_handles;

// Last error message ExecuTorch logged on this thread; folded into the
// handle's error text instead of being printed.
thread_local std::string t_et_message;

std::string et_error(Error e) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "%x", static_cast<unsigned>(e));
  std::string out = "ExecuTorch error 0x" + std::string(buf);
  if (!t_et_message.empty()) {
    out += ": " + t_et_message;
    t_et_message.clear();
  }
  return out;
}

// ExecuTorch logs to stderr. Keep its info/debug chatter (cpuinfo probing)
// out of applications and turn errors into the handle's message, unless
// EDGENLP_LOG=debug asks for everything on stderr.
void emit_log(et_timestamp_t, et_pal_log_level_t level, const char* filename, const char*, size_t line,
              const char* message, size_t length) {
  static const bool verbose = [] {
    const char* v = std::getenv("EDGENLP_LOG");
    return v != nullptr && std::strcmp(v, "debug") == 0;
  }();
  if (verbose) {
    std::fprintf(stderr, "executorch %c %s:%zu] %.*s\n", static_cast<char>(level), filename, line,
                 static_cast<int>(length), message);
    return;
  }
  if (level == kError || level == kFatal) {
    try {
      std::string m(message, length);
      while (!m.empty() && (m.back() == '\n' || m.back() == ' ')) m.pop_back();
      t_et_message = m;
    } catch (...) {
    }
  }
}

// Serves the program from the bytes load_bundle verified (no second open of
// the path). A freed segment, e.g. weights once XNNPACK has packed them,
// gives its pages back like ExecuTorch's MmapDataLoader does.
class VerifiedBytesLoader final : public DataLoader {
 public:
  explicit VerifiedBytesLoader(std::shared_ptr<const edgenlp::FileBytes> bytes) : bytes_(std::move(bytes)) {}

  Result<FreeableBuffer> load(std::size_t offset, std::size_t size, const SegmentInfo&) const override {
    if (offset > bytes_->size() || size > bytes_->size() - offset) return Error::InvalidArgument;
    return FreeableBuffer(bytes_->data() + offset, size, &release, const_cast<edgenlp::FileBytes*>(bytes_.get()));
  }

  Error load_into(std::size_t offset, std::size_t size, const SegmentInfo&, void* buffer) const override {
    if (buffer == nullptr || offset > bytes_->size() || size > bytes_->size() - offset) return Error::InvalidArgument;
    std::memcpy(buffer, bytes_->data() + offset, size);
    return Error::Ok;
  }

  Result<std::size_t> size() const override { return bytes_->size(); }

 private:
  static void release(void* context, void* data, std::size_t size) {
    static_cast<const edgenlp::FileBytes*>(context)->release(data, size);
  }
  std::shared_ptr<const edgenlp::FileBytes> bytes_;
};

// A float or int64 tensor [1, seq] (hidden == 0) or [1, seq, hidden] over a
// buffer the caller owns; sizes and strides live with it.
class BufferTensor {
 public:
  BufferTensor(ScalarType type, std::size_t seq, std::size_t hidden, void* data)
      : sizes_{1, static_cast<TensorImpl::SizesType>(seq), static_cast<TensorImpl::SizesType>(hidden)},
        strides_{static_cast<TensorImpl::StridesType>(hidden == 0 ? seq : seq * hidden),
                 static_cast<TensorImpl::StridesType>(hidden == 0 ? 1 : hidden), 1},
        impl_(type, hidden == 0 ? 2 : 3, sizes_, data, dim_order_, strides_) {}
  BufferTensor(const BufferTensor&) = delete;
  BufferTensor& operator=(const BufferTensor&) = delete;
  Tensor tensor() { return Tensor(&impl_); }

 private:
  TensorImpl::SizesType sizes_[3];
  TensorImpl::DimOrderType dim_order_[3] = {0, 1, 2};
  TensorImpl::StridesType strides_[3];
  TensorImpl impl_;
};

// The dims of a tensor's meta data as a list of sizes.
template <typename Meta>
std::vector<std::int64_t> dims_of(const Meta& meta) {
  std::vector<std::int64_t> out;
  for (auto s : meta.sizes()) out.push_back(static_cast<std::int64_t>(s));
  return out;
}

std::string shape_string(const std::vector<std::int64_t>& dims) {
  std::string out = "[";
  for (std::size_t i = 0; i < dims.size(); ++i) out += (i ? ", " : "") + std::to_string(dims[i]);
  return out + "]";
}

// How one text runs through a dynamic bundle: the bundle's settings with the
// handle's and the call's overrides applied.
struct DynamicSettings {
  bool is_static = false;
  double threshold = 0.0;
  edgenlp::TokenMode tokens = edgenlp::TokenMode::kNone;
  double keep_ratio = 1.0;
};

bool is_default(double v) { return v == static_cast<double>(EDGENLP_DEFAULT); }

void ensure_runtime_init() {
  std::call_once(g_init_once, [] {
    // Leave a PAL that the host process registered (e.g. the ExecuTorch
    // Python bindings loaded beside this library) in place.
    const executorch::runtime::PalImpl* current = executorch::runtime::get_pal_impl();
    if (current == nullptr || current->emit_log_message == nullptr ||
        current->emit_log_message == &et_pal_emit_log_message)
      executorch::runtime::register_pal(executorch::runtime::PalImpl::create(&emit_log, __FILE__));
    executorch::runtime::runtime_init();
  });
}

}  // namespace

struct edgenlp_handle {
  std::string error;
  edgenlp::BundleInfo info;
  edgenlp::WordPiece tokenizer;
  bool tokenizer_ready = false;
  std::unique_ptr<Module> module;
  std::uint32_t flags = EDGENLP_OPEN_DEFAULT;
  bool etdump = false;
  std::size_t classify_limit = 0;  // max tokens fed to the model
  std::vector<std::int64_t> ids;
  std::vector<std::int64_t> input_ids;
  std::vector<std::int64_t> input_mask;
  // dynamic bundles: the handle's settings and the buffers of the segment loop
  DynamicSettings dynamic;
  std::vector<float> hidden;
  std::vector<float> bias;
  std::vector<std::size_t> keep;
  std::vector<std::int32_t> tokens;

  edgenlp_status fail(edgenlp_status status, std::string message) {
    error = std::move(message);
    return status;
  }
  edgenlp_status ok() {
    error.clear();
    return EDGENLP_OK;
  }

  // (Re)create the Module and check every method's signature against the
  // bundle contract. Methods are loaded (XNNPACK packs their weights) on first
  // use, or all here with EDGENLP_OPEN_LOAD_ALL_METHODS. Caller holds g_mu.
  edgenlp_status load_module() {
    module.reset();
    std::unique_ptr<executorch::runtime::EventTracer> tracer;
    if (etdump) tracer = std::make_unique<executorch::etdump::ETDumpGen>();
    module = std::make_unique<Module>(std::make_unique<VerifiedBytesLoader>(info.pte), nullptr, nullptr,
                                      std::move(tracer));
    // XNNPACK's weights cache: the delegates of all bucket methods look their
    // weights up by name in the program's named data and share one packed
    // copy (the Module deep-copies the options).
    executorch::runtime::BackendOptions<1> xnn;
    executorch::runtime::LoadBackendOptionsMap backend_options;
    const bool weight_cache = (flags & EDGENLP_OPEN_NO_WEIGHT_CACHE) == 0;
    if (xnn.set_option("weight_cache_enabled", weight_cache) != Error::Ok ||
        backend_options.set_options("XnnpackBackend", xnn.view()) != Error::Ok) {
      module.reset();
      return fail(EDGENLP_ERR_INTERNAL, "cannot set the XNNPACK backend options");
    }
    const Error le = module->load(backend_options, executorch::runtime::Program::Verification::InternalConsistency);
    if (le != Error::Ok) {
      module.reset();
      return fail(EDGENLP_ERR_MODEL, info.pte_path + ": not a valid ExecuTorch program (" + et_error(le) + ")");
    }
    const std::size_t num_labels = info.labels.size();
    for (const auto& m : info.methods) {
      auto meta = module->method_meta(m.name);
      if (!meta.ok()) {
        module.reset();
        return fail(EDGENLP_ERR_BUNDLE, info.pte_path + ": has no method '" + m.name + "' named in the manifest");
      }
      if (meta->num_inputs() != 2 || meta->num_outputs() < 1) {
        module.reset();
        return fail(EDGENLP_ERR_BUNDLE, info.pte_path + ": method '" + m.name +
                                            "' must take (input_ids, attention_mask) and return logits");
      }
      for (std::size_t i = 0; i < 2; ++i) {
        auto ti = meta->input_tensor_meta(i);
        if (!ti.ok() || ti->scalar_type() != ScalarType::Long || ti->sizes().size() != 2 || ti->sizes()[0] != 1 ||
            (!m.dynamic && static_cast<std::size_t>(ti->sizes()[1]) != m.seq_len)) {
          module.reset();
          return fail(EDGENLP_ERR_BUNDLE, info.pte_path + ": method '" + m.name + "' input " + std::to_string(i) +
                                              " is not int64 [1, " + std::to_string(m.seq_len) + "]");
        }
      }
      auto to = meta->output_tensor_meta(0);
      if (!to.ok() || to->scalar_type() != ScalarType::Float) {
        module.reset();
        return fail(EDGENLP_ERR_BUNDLE, info.pte_path + ": method '" + m.name + "' output is not float32 logits");
      }
      std::size_t numel = 1;
      for (auto s : to->sizes()) numel *= static_cast<std::size_t>(s);
      if (numel != num_labels) {
        module.reset();
        return fail(EDGENLP_ERR_BUNDLE, info.pte_path + ": method '" + m.name + "' returns " +
                                            std::to_string(numel) + " logits, manifest has " +
                                            std::to_string(num_labels) + " labels");
      }
    }
    if (info.dynamic.present) {
      const edgenlp_status st = check_dynamic_methods();
      if (st != EDGENLP_OK) {
        module.reset();
        return st;
      }
    }
    if (flags & EDGENLP_OPEN_LOAD_ALL_METHODS) {
      std::vector<std::string> names;
      for (const auto& m : info.methods) names.push_back(m.name);
      for (const auto& name : info.dynamic.embed_methods) names.push_back(name);
      for (const auto& seg : info.dynamic.segments) names.insert(names.end(), seg.methods.begin(), seg.methods.end());
      for (const auto& name : names) {
        const edgenlp_status st = load_method(name);
        if (st != EDGENLP_OK) {
          module.reset();
          return st;
        }
      }
    }
    return ok();
  }

  // The embedding and segment methods the manifest's "dynamic" section names
  // exist with its inputs and outputs: embed_S int64 [1, S] -> float [1, S, H];
  // seg<k>_S (float [1, S, H], float [1, S]) -> hidden [1, S, H][, logits (C)][, importance [1, S]].
  edgenlp_status check_dynamic_methods() {
    const edgenlp::DynamicInfo& d = info.dynamic;
    const auto H = static_cast<std::int64_t>(d.hidden);
    auto disagree = [&](const std::string& name, const std::string& what) {
      return fail(EDGENLP_ERR_BUNDLE, info.pte_path + ": method '" + name + "' " + what +
                                          " (the manifest's dynamic section and the program disagree)");
    };
    auto check = [&](const std::string& name, std::size_t seq, std::size_t n_in, const edgenlp::SegmentInfo* seg) {
      auto meta = module->method_meta(name);
      if (!meta.ok())
        return fail(EDGENLP_ERR_BUNDLE, info.pte_path + ": the manifest's dynamic section names method '" + name +
                                            "', which the program does not have (manifest and program disagree)");
      const std::size_t n_out = seg == nullptr ? 1 : seg->num_outputs();
      if (meta->num_inputs() != n_in || meta->num_outputs() != n_out)
        return disagree(name, "takes " + std::to_string(meta->num_inputs()) + " input(s) and returns " +
                                  std::to_string(meta->num_outputs()) + " output(s); the manifest says " +
                                  std::to_string(n_in) + " and " + std::to_string(n_out));
      const auto S = static_cast<std::int64_t>(seq);
      const std::vector<std::int64_t> states = {1, S, H}, row = {1, S};
      auto expect_in = [&](std::size_t i, ScalarType type, const std::vector<std::int64_t>& dims,
                           const std::string& what) {
        auto t = meta->input_tensor_meta(i);
        if (!t.ok() || t->scalar_type() != type || dims_of(*t) != dims)
          return disagree(name, "input " + std::to_string(i) + " is not " + what + " " + shape_string(dims));
        return EDGENLP_OK;
      };
      // dims, or (dims empty) any shape of numel elements
      auto expect_out = [&](std::size_t i, const std::vector<std::int64_t>& dims, std::size_t numel,
                            const std::string& what) {
        auto t = meta->output_tensor_meta(i);
        bool ok = t.ok() && t->scalar_type() == ScalarType::Float;
        if (ok && !dims.empty()) ok = dims_of(*t) == dims;
        if (ok && dims.empty()) {
          std::size_t n = 1;
          for (auto v : t->sizes()) n *= static_cast<std::size_t>(v);
          ok = n == numel;
        }
        if (!ok) return disagree(name, "output " + std::to_string(i) + " is not float32 " + what);
        return EDGENLP_OK;
      };
      if (seg == nullptr) {
        if (expect_in(0, ScalarType::Long, row, "int64 input_ids") != EDGENLP_OK) return EDGENLP_ERR_BUNDLE;
        return expect_out(0, states, 0, "hidden states " + shape_string(states));
      }
      if (expect_in(0, ScalarType::Float, states, "float32 hidden states") != EDGENLP_OK ||
          expect_in(1, ScalarType::Float, row, "a float32 attention bias") != EDGENLP_OK ||
          expect_out(0, states, 0, "hidden states " + shape_string(states)) != EDGENLP_OK)
        return EDGENLP_ERR_BUNDLE;
      if (seg->exit && expect_out(1, {}, d.num_labels, "logits of " + std::to_string(d.num_labels) + " labels") !=
                           EDGENLP_OK)
        return EDGENLP_ERR_BUNDLE;
      if (seg->tokens && expect_out(n_out - 1, row, 0, "importance " + shape_string(row)) != EDGENLP_OK)
        return EDGENLP_ERR_BUNDLE;
      return EDGENLP_OK;
    };
    for (std::size_t b = 0; b < d.buckets.size(); ++b) {
      if (check(d.embed_methods[b], d.buckets[b], 1, nullptr) != EDGENLP_OK) return EDGENLP_ERR_BUNDLE;
      for (const auto& seg : d.segments)
        if (check(seg.methods[b], d.buckets[b], 2, &seg) != EDGENLP_OK) return EDGENLP_ERR_BUNDLE;
    }
    return EDGENLP_OK;
  }

  // Caller holds g_mu (method loading uses the process-wide thread pool).
  edgenlp_status load_method(const std::string& name) {
    if (module->is_method_loaded(name)) return EDGENLP_OK;
    const Error me = module->load_method(name);
    if (me != Error::Ok)
      return fail(EDGENLP_ERR_MODEL, info.pte_path + ": cannot load method '" + name + "' (" + et_error(me) + ")");
    return EDGENLP_OK;
  }

  edgenlp_status ensure_loaded(const std::string& name) {
    if (module->is_method_loaded(name)) return EDGENLP_OK;
    std::lock_guard<std::mutex> lock(g_mu);
    return load_method(name);
  }

  edgenlp_status open(const char* dir) {
    std::string err;
    edgenlp::BundleOptions options;
    options.verify = (flags & EDGENLP_OPEN_SKIP_VERIFY) == 0;
    switch (edgenlp::load_bundle(dir, &info, &err, options)) {
      case edgenlp::BundleStatus::kOk:
        break;
      case edgenlp::BundleStatus::kIo:
        return fail(EDGENLP_ERR_IO, err);
      case edgenlp::BundleStatus::kInvalid:
        return fail(EDGENLP_ERR_BUNDLE, err);
      case edgenlp::BundleStatus::kChecksum:
        return fail(EDGENLP_ERR_CHECKSUM, err);
      case edgenlp::BundleStatus::kFormat:
        return fail(EDGENLP_ERR_BUNDLE_FORMAT, err);
    }
    if (!tokenizer.load_from_string(info.vocab_text, info.tokenizer, &err))
      return fail(EDGENLP_ERR_BUNDLE, info.vocab_path + ": " + err);
    if (!info.vocab_map_path.empty() && !tokenizer.set_id_map(info.vocab_kept, &err))
      return fail(EDGENLP_ERR_BUNDLE, info.vocab_map_path + ": " + err);
    std::vector<std::int64_t>().swap(info.vocab_kept);
    std::string().swap(info.vocab_text);
    tokenizer_ready = true;
    classify_limit = info.max_seq_len;
    if (!info.methods.empty()) classify_limit = std::min(classify_limit, info.methods.back().seq_len);
    if (info.dynamic.present) dynamic = bundle_settings();
    if (info.pte_path.empty()) return ok();
    std::lock_guard<std::mutex> lock(g_mu);
    return load_module();
  }

  edgenlp_status check_text(const char* text, std::size_t len) {
    if (text == nullptr && len != 0) return fail(EDGENLP_ERR_INVALID_ARGUMENT, "text is NULL");
    return EDGENLP_OK;
  }

  edgenlp_status check_model() {
    if (module) return EDGENLP_OK;
    if (info.pte_path.empty())
      return fail(EDGENLP_ERR_NO_MODEL, info.dir + ": bundle has no model.pte; it can only tokenize");
    return fail(EDGENLP_ERR_MODEL, "the program failed to load: reopen the bundle");
  }

  // Tokenize text into ids, at most `limit` tokens.
  edgenlp_status encode(const char* text, std::size_t len, std::size_t limit) {
    if (check_text(text, len) != EDGENLP_OK) return EDGENLP_ERR_INVALID_ARGUMENT;
    std::string err;
    if (tokenizer.encode(std::string_view(text == nullptr ? "" : text, len), limit, &ids, &err) !=
        edgenlp::TokenizeResult::kOk)
      return fail(EDGENLP_ERR_INVALID_UTF8, err);
    return EDGENLP_OK;
  }

  // Tokenize and run one text; logits receives num_labels floats.
  edgenlp_status run_one(const char* text, std::size_t len, float* logits) {
    if (const edgenlp_status st = check_model(); st != EDGENLP_OK) return st;
    if (const edgenlp_status st = encode(text, len, classify_limit); st != EDGENLP_OK) return st;
    return run_static(logits);
  }

  // Run ids through the static method of the smallest bucket that holds them.
  edgenlp_status run_static(float* logits) {
    const std::size_t n = ids.size();
    const edgenlp::MethodInfo* method = nullptr;
    for (const auto& m : info.methods) {
      if (m.seq_len >= n) {
        method = &m;
        break;
      }
    }
    if (method == nullptr) return fail(EDGENLP_ERR_INTERNAL, "no method fits " + std::to_string(n) + " tokens");
    if (!module->is_method_loaded(method->name)) {
      std::lock_guard<std::mutex> lock(g_mu);
      if (load_method(method->name) != EDGENLP_OK) return EDGENLP_ERR_MODEL;
    }
    const std::size_t L = method->dynamic ? n : method->seq_len;
    input_ids.assign(L, tokenizer.pad_id());
    input_mask.assign(L, 0);
    std::copy(ids.begin(), ids.end(), input_ids.begin());
    std::fill(input_mask.begin(), input_mask.begin() + static_cast<std::ptrdiff_t>(n), 1);
    TensorImpl::SizesType sizes[2] = {1, static_cast<TensorImpl::SizesType>(L)};
    TensorImpl::DimOrderType dim_order[2] = {0, 1};
    TensorImpl::StridesType strides[2] = {static_cast<TensorImpl::StridesType>(L), 1};
    TensorImpl ids_impl(ScalarType::Long, 2, sizes, input_ids.data(), dim_order, strides);
    TensorImpl mask_impl(ScalarType::Long, 2, sizes, input_mask.data(), dim_order, strides);
    std::vector<EValue> inputs;
    inputs.emplace_back(Tensor(&ids_impl));
    inputs.emplace_back(Tensor(&mask_impl));
    auto result = module->execute(method->name, inputs);
    if (!result.ok())
      return fail(EDGENLP_ERR_MODEL, "method '" + method->name + "' failed (" + et_error(result.error()) + ")");
    if (result->empty() || !(*result)[0].isTensor())
      return fail(EDGENLP_ERR_MODEL, "method '" + method->name + "' returned no tensor");
    const Tensor out = (*result)[0].toTensor();
    const std::size_t num_labels = info.labels.size();
    if (out.scalar_type() != ScalarType::Float || static_cast<std::size_t>(out.numel()) != num_labels)
      return fail(EDGENLP_ERR_MODEL, "method '" + method->name + "' returned an unexpected output");
    const float* data = out.const_data_ptr<float>();
    std::copy(data, data + num_labels, logits);
    return EDGENLP_OK;
  }

  // ------------------------------------------------------------ dynamic bundles

  DynamicSettings bundle_settings() const {
    DynamicSettings s;
    s.threshold = info.dynamic.threshold;
    s.tokens = info.dynamic.tokens;
    s.keep_ratio = info.dynamic.keep_ratio;
    return s;
  }

  edgenlp_status need_dynamic(const char* option) {
    if (info.dynamic.present) return EDGENLP_OK;
    return fail(EDGENLP_ERR_NOT_DYNAMIC, info.dir + ": " + option +
                                             " needs a dynamic bundle, and this one has no segments (make the model "
                                             "with edgenlp dynamic, then export it)");
  }

  // Set s's exit threshold to `value` (checked against the bundle's rule).
  edgenlp_status set_threshold(double value, DynamicSettings* s) {
    if (const edgenlp_status st = need_dynamic("exit threshold"); st != EDGENLP_OK) return st;
    const edgenlp::DynamicInfo& d = info.dynamic;
    if (d.exits.size() < 2)
      return fail(EDGENLP_ERR_NOT_DYNAMIC, "exit threshold: this dynamic bundle has no early exits (exported with "
                                           "--exits none)");
    const std::string why = edgenlp::check_threshold(d.rule, value, d.exits.size());
    if (!why.empty()) return fail(EDGENLP_ERR_INVALID_ARGUMENT, why);
    s->threshold = value;
    return EDGENLP_OK;
  }

  // Switch s's token pruning to keep ratio `value`.
  edgenlp_status set_keep(double value, DynamicSettings* s) {
    if (const edgenlp_status st = need_dynamic("keep ratio"); st != EDGENLP_OK) return st;
    const std::string why = edgenlp::check_keep_ratio(value);
    if (!why.empty()) return fail(EDGENLP_ERR_INVALID_ARGUMENT, why);
    if (info.dynamic.token_layers.empty())
      return fail(EDGENLP_ERR_NOT_DYNAMIC, "keep ratio: this dynamic bundle has no token layers (made with "
                                           "--tokens none)");
    s->tokens = edgenlp::TokenMode::kKeep;
    s->keep_ratio = value;
    return EDGENLP_OK;
  }

  edgenlp_status set_static_mode(std::int32_t value, DynamicSettings* s) {
    if (const edgenlp_status st = need_dynamic("static mode"); st != EDGENLP_OK) return st;
    if (value != 0 && value != 1)
      return fail(EDGENLP_ERR_INVALID_ARGUMENT, "static mode must be 1 (static), 0 (segments) or EDGENLP_DEFAULT, got " +
                                                    std::to_string(value));
    s->is_static = value == 1;
    return EDGENLP_OK;
  }

  // The handle's settings with one call's overrides (EDGENLP_DEFAULT: keep the handle's).
  edgenlp_status call_settings(double threshold, double keep_ratio, std::int32_t static_mode, DynamicSettings* s) {
    *s = dynamic;
    edgenlp_status st = EDGENLP_OK;
    if (!is_default(threshold)) st = set_threshold(threshold, s);
    if (st == EDGENLP_OK && !is_default(keep_ratio)) st = set_keep(keep_ratio, s);
    if (st == EDGENLP_OK && static_mode != EDGENLP_DEFAULT) st = set_static_mode(static_mode, s);
    return st;
  }

  // Run one method; outs receives its outputs.
  edgenlp_status execute(const std::string& name, std::vector<EValue>& inputs, std::vector<EValue>* outs) {
    if (ensure_loaded(name) != EDGENLP_OK) return EDGENLP_ERR_MODEL;
    auto result = module->execute(name, inputs);
    if (!result.ok())
      return fail(EDGENLP_ERR_MODEL, "method '" + name + "' failed (" + et_error(result.error()) + ")");
    *outs = std::move(*result);
    return EDGENLP_OK;
  }

  // Output i of a method as float32 data of `numel` elements, or nullptr (error set).
  const float* float_output(const std::vector<EValue>& outs, std::size_t i, std::size_t numel, const std::string& name) {
    if (i >= outs.size() || !outs[i].isTensor() || outs[i].toTensor().scalar_type() != ScalarType::Float ||
        static_cast<std::size_t>(outs[i].toTensor().numel()) != numel) {
      fail(EDGENLP_ERR_MODEL, "method '" + name + "' returned an unexpected output " + std::to_string(i));
      return nullptr;
    }
    return outs[i].toTensor().const_data_ptr<float>();
  }

  // One text through the segments (edgenlp.run.dynamic.run_sentence): logits
  // of the answering exit, its layer and the tokens each layer processed
  // (tokens[l - 1], 0 after the exit).
  edgenlp_status run_dynamic(const char* text, std::size_t len, const DynamicSettings& s, float* logits,
                             std::int32_t* exit_layer) {
    if (const edgenlp_status st = check_model(); st != EDGENLP_OK) return st;
    const edgenlp::DynamicInfo& d = info.dynamic;
    const std::size_t L = d.num_layers, H = d.hidden, C = d.num_labels;
    tokens.assign(L, 0);
    if (s.is_static) {
      if (const edgenlp_status st = encode(text, len, classify_limit); st != EDGENLP_OK) return st;
      if (const edgenlp_status st = run_static(logits); st != EDGENLP_OK) return st;
      std::fill(tokens.begin(), tokens.end(), static_cast<std::int32_t>(ids.size()));
      *exit_layer = static_cast<std::int32_t>(L);
      return EDGENLP_OK;
    }
    const std::size_t limit = std::min(info.max_seq_len, d.buckets.back());
    if (const edgenlp_status st = encode(text, len, limit); st != EDGENLP_OK) return st;
    std::size_t count = ids.size();
    std::size_t b = edgenlp::smallest_bucket(d.buckets, count);
    if (b == d.buckets.size()) return fail(EDGENLP_ERR_INTERNAL, "no bucket fits " + std::to_string(count) + " tokens");
    std::size_t S = d.buckets[b];
    std::vector<EValue> inputs, outs;
    // The hidden states the next segment reads: the previous method's output where it left it (a method's planned
    // memory stays as it is until that method runs again, and set_input copies it into the next method's own input),
    // or `hidden` after tokens were dropped. No copy between segments.
    const float* cur = nullptr;
    {
      input_ids.assign(S, tokenizer.pad_id());
      std::copy(ids.begin(), ids.end(), input_ids.begin());
      BufferTensor x(ScalarType::Long, S, 0, input_ids.data());
      inputs.emplace_back(x.tensor());
      const std::string& name = d.embed_methods[b];
      if (const edgenlp_status st = execute(name, inputs, &outs); st != EDGENLP_OK) return st;
      cur = float_output(outs, 0, S * H, name);
      if (cur == nullptr) return EDGENLP_ERR_MODEL;
      inputs.clear();  // x ends here
    }
    edgenlp::ExitState state(d.rule, s.threshold);
    const bool prune = s.tokens != edgenlp::TokenMode::kNone;
    const auto mask_bias = static_cast<float>(d.mask_bias);
    for (std::size_t k = 0; k < d.segments.size(); ++k) {
      const edgenlp::SegmentInfo& seg = d.segments[k];
      const std::string& name = seg.methods[b];
      bias.assign(S, 0.0f);
      std::fill(bias.begin() + static_cast<std::ptrdiff_t>(count), bias.end(), mask_bias);
      BufferTensor x(ScalarType::Float, S, H, const_cast<float*>(cur));  // only read (copied by set_input)
      BufferTensor m(ScalarType::Float, S, 0, bias.data());
      inputs.clear();
      inputs.emplace_back(x.tensor());
      inputs.emplace_back(m.tensor());
      if (const edgenlp_status st = execute(name, inputs, &outs); st != EDGENLP_OK) return st;
      if (outs.size() != seg.num_outputs())
        return fail(EDGENLP_ERR_MODEL, "method '" + name + "' returned " + std::to_string(outs.size()) +
                                           " outputs, expected " + std::to_string(seg.num_outputs()));
      for (std::size_t l = seg.first; l <= seg.last; ++l) tokens[l - 1] = static_cast<std::int32_t>(count);
      const float* h = float_output(outs, 0, S * H, name);
      if (h == nullptr) return EDGENLP_ERR_MODEL;
      if (seg.exit) {
        const float* z = float_output(outs, 1, C, name);
        if (z == nullptr) return EDGENLP_ERR_MODEL;
        // the last segment always answers; the rule is not asked there
        if (k + 1 == d.segments.size() || state.fires(z, C)) {
          std::copy(z, z + C, logits);
          *exit_layer = static_cast<std::int32_t>(seg.last);
          return EDGENLP_OK;
        }
      }
      if (seg.tokens && prune) {
        const float* importance = float_output(outs, outs.size() - 1, S, name);
        if (importance == nullptr) return EDGENLP_ERR_MODEL;
        const double th = s.tokens == edgenlp::TokenMode::kLtp ? d.token_thresholds[seg.last - 1] : 0.0;
        edgenlp::keep_tokens(importance, count, s.tokens, th, s.keep_ratio, &keep);
        if (keep.size() < count) {
          // the kept rows, in order, re-padded with zeros to the smallest bucket that holds them
          count = keep.size();
          b = edgenlp::smallest_bucket(d.buckets, count);
          S = d.buckets[b];
          std::vector<float> next(S * H, 0.0f);
          for (std::size_t i = 0; i < count; ++i)
            std::copy(h + keep[i] * H, h + (keep[i] + 1) * H, next.begin() + static_cast<std::ptrdiff_t>(i * H));
          hidden.swap(next);
          cur = hidden.data();
          continue;
        }
      }
      cur = h;
    }
    return fail(EDGENLP_ERR_INTERNAL, "the last segment did not answer");
  }
};

namespace {

void softmax(const float* logits, float* probs, std::size_t n) {
  float mx = -std::numeric_limits<float>::infinity();
  for (std::size_t i = 0; i < n; ++i) mx = std::max(mx, logits[i]);
  double sum = 0;
  for (std::size_t i = 0; i < n; ++i) sum += std::exp(static_cast<double>(logits[i] - mx));
  for (std::size_t i = 0; i < n; ++i) probs[i] = static_cast<float>(std::exp(static_cast<double>(logits[i] - mx)) / sum);
}

std::int32_t argmax(const float* v, std::size_t n) {
  std::size_t best = 0;
  for (std::size_t i = 1; i < n; ++i)
    if (v[i] > v[best]) best = i;
  return static_cast<std::int32_t>(best);
}

// Run f and turn any escaping C++ exception into a status.
template <typename F>
edgenlp_status guarded(edgenlp_handle* h, F&& f) noexcept {
  try {
    return f();
  } catch (const std::bad_alloc&) {
    if (h != nullptr) h->error = "out of memory";
    return EDGENLP_ERR_OUT_OF_MEMORY;
  } catch (const std::exception& e) {
    if (h != nullptr) {
      try {
        h->error = std::string("internal error: ") + e.what();
      } catch (...) {
      }
    }
    return EDGENLP_ERR_INTERNAL;
  } catch (...) {
    if (h != nullptr) h->error.clear();
    return EDGENLP_ERR_INTERNAL;
  }
}

edgenlp_status batch(edgenlp_handle* h, const char* const* texts, const size_t* lens, size_t n, float* out,
                     size_t capacity, int32_t* labels, bool probabilities) {
  if (texts == nullptr && n != 0) return h->fail(EDGENLP_ERR_INVALID_ARGUMENT, "texts is NULL");
  if (lens == nullptr && n != 0) return h->fail(EDGENLP_ERR_INVALID_ARGUMENT, "text_lens is NULL");
  const std::size_t k = h->info.labels.size();
  if (out == nullptr && n != 0) return h->fail(EDGENLP_ERR_INVALID_ARGUMENT, "output array is NULL");
  if (k != 0 && n > capacity / k)
    return h->fail(EDGENLP_ERR_BUFFER_TOO_SMALL, "output needs " + std::to_string(n) + " x " + std::to_string(k) +
                                                     " floats, capacity is " + std::to_string(capacity));
  std::vector<float> logits(k);
  for (std::size_t i = 0; i < n; ++i) {
    const edgenlp_status st = h->run_one(texts[i], lens[i], logits.data());
    if (st != EDGENLP_OK) {
      h->error = "text " + std::to_string(i) + ": " + h->error;
      return st;
    }
    float* row = out + i * k;
    if (probabilities) {
      softmax(logits.data(), row, k);
    } else {
      std::copy(logits.begin(), logits.end(), row);
    }
    if (labels != nullptr) labels[i] = argmax(logits.data(), k);
  }
  return h->ok();
}

// edgenlp_classify_dynamic / edgenlp_logits_dynamic.
edgenlp_status dynamic_one(edgenlp_handle* h, const char* text, size_t text_len, double exit_threshold, double keep,
                           int32_t static_mode, float* out, size_t capacity, int32_t* label, int32_t* exit_layer,
                           int32_t* tokens_kept, size_t tokens_capacity, bool probabilities) {
  const std::size_t k = h->info.labels.size();
  if (out == nullptr) return h->fail(EDGENLP_ERR_INVALID_ARGUMENT, "output array is NULL");
  if (capacity < k)
    return h->fail(EDGENLP_ERR_BUFFER_TOO_SMALL,
                   "output needs " + std::to_string(k) + " floats, capacity is " + std::to_string(capacity));
  std::vector<float> logits(k);
  std::int32_t layer = 0;
  if (!h->info.dynamic.present) {
    if (!is_default(exit_threshold)) return h->need_dynamic("exit threshold");
    if (!is_default(keep)) return h->need_dynamic("keep ratio");
    if (static_mode != EDGENLP_DEFAULT) return h->need_dynamic("static mode");
    if (const edgenlp_status st = h->run_one(text, text_len, logits.data()); st != EDGENLP_OK) return st;
  } else {
    DynamicSettings settings;
    if (const edgenlp_status st = h->call_settings(exit_threshold, keep, static_mode, &settings); st != EDGENLP_OK)
      return st;
    const std::size_t L = h->info.dynamic.num_layers;
    if (tokens_kept != nullptr && tokens_capacity < L)
      return h->fail(EDGENLP_ERR_BUFFER_TOO_SMALL, "tokens_kept needs " + std::to_string(L) +
                                                       " entries (one per layer), capacity is " +
                                                       std::to_string(tokens_capacity));
    if (const edgenlp_status st = h->run_dynamic(text, text_len, settings, logits.data(), &layer); st != EDGENLP_OK)
      return st;
    if (tokens_kept != nullptr) std::copy(h->tokens.begin(), h->tokens.end(), tokens_kept);
  }
  if (probabilities) {
    softmax(logits.data(), out, k);
  } else {
    std::copy(logits.begin(), logits.end(), out);
  }
  if (label != nullptr) *label = argmax(logits.data(), k);
  if (exit_layer != nullptr) *exit_layer = layer;
  return h->ok();
}

}  // namespace

extern "C" {

EDGENLP_API int edgenlp_version(void) { return EDGENLP_VERSION; }

EDGENLP_API int edgenlp_abi_version(void) { return EDGENLP_ABI_VERSION; }

EDGENLP_API int edgenlp_bundle_format_version(void) { return EDGENLP_BUNDLE_FORMAT_VERSION; }

EDGENLP_API const char* edgenlp_status_string(edgenlp_status status) {
  switch (status) {
    case EDGENLP_OK: return "ok";
    case EDGENLP_ERR_INVALID_ARGUMENT: return "invalid argument";
    case EDGENLP_ERR_IO: return "i/o error";
    case EDGENLP_ERR_BUNDLE: return "invalid bundle";
    case EDGENLP_ERR_CHECKSUM: return "checksum mismatch";
    case EDGENLP_ERR_INVALID_UTF8: return "invalid utf-8";
    case EDGENLP_ERR_MODEL: return "model error";
    case EDGENLP_ERR_BUFFER_TOO_SMALL: return "buffer too small";
    case EDGENLP_ERR_NO_MODEL: return "bundle has no model";
    case EDGENLP_ERR_OUT_OF_MEMORY: return "out of memory";
    case EDGENLP_ERR_INTERNAL: return "internal error";
    case EDGENLP_ERR_BUNDLE_FORMAT: return "bundle format too new";
    case EDGENLP_ERR_NOT_DYNAMIC: return "not a dynamic bundle";
  }
  return "unknown status";
}

EDGENLP_API edgenlp_status edgenlp_open(const char* bundle_dir, edgenlp_handle** out) {
  return edgenlp_open_ex(bundle_dir, EDGENLP_OPEN_DEFAULT, out);
}

EDGENLP_API edgenlp_status edgenlp_open_ex(const char* bundle_dir, uint32_t flags, edgenlp_handle** out) {
  if (out == nullptr) return EDGENLP_ERR_INVALID_ARGUMENT;
  *out = nullptr;
  edgenlp_handle* h = new (std::nothrow) edgenlp_handle();
  if (h == nullptr) return EDGENLP_ERR_OUT_OF_MEMORY;
  *out = h;
  return guarded(h, [&]() -> edgenlp_status {
    {
      std::lock_guard<std::mutex> lock(g_mu);
      g_handles.insert(h);
    }
    if (bundle_dir == nullptr) return h->fail(EDGENLP_ERR_INVALID_ARGUMENT, "bundle_dir is NULL");
    constexpr std::uint32_t known =
        EDGENLP_OPEN_SKIP_VERIFY | EDGENLP_OPEN_LOAD_ALL_METHODS | EDGENLP_OPEN_NO_WEIGHT_CACHE;
    if ((flags & ~known) != 0)
      return h->fail(EDGENLP_ERR_INVALID_ARGUMENT, "unknown edgenlp_open_ex flags 0x" + [&] {
        char buf[16];
        std::snprintf(buf, sizeof buf, "%x", static_cast<unsigned>(flags & ~known));
        return std::string(buf);
      }());
    h->flags = flags;
    ensure_runtime_init();
    return h->open(bundle_dir);
  });
}

EDGENLP_API void edgenlp_close(edgenlp_handle* handle) {
  if (handle == nullptr) return;
  try {
    std::lock_guard<std::mutex> lock(g_mu);
    g_handles.erase(handle);
    handle->module.reset();
  } catch (...) {
  }
  delete handle;
}

EDGENLP_API const char* edgenlp_last_error(const edgenlp_handle* handle) {
  if (handle == nullptr) return "handle is NULL (edgenlp_open ran out of memory or was given out=NULL)";
  return handle->error.c_str();
}

EDGENLP_API edgenlp_status edgenlp_set_threads(edgenlp_handle* handle, int32_t threads) {
  if (handle == nullptr) return EDGENLP_ERR_INVALID_ARGUMENT;
  return guarded(handle, [&]() -> edgenlp_status {
    if (threads < 1 || threads > 1024)
      return handle->fail(EDGENLP_ERR_INVALID_ARGUMENT, "threads must be in 1..1024, got " + std::to_string(threads));
    std::lock_guard<std::mutex> lock(g_mu);
    auto* pool = executorch::extension::threadpool::get_threadpool();
    if (pool == nullptr) return handle->fail(EDGENLP_ERR_INTERNAL, "ExecuTorch thread pool unavailable");
    if (pool->get_thread_count() == static_cast<std::size_t>(threads)) return handle->ok();
    // Delegates keep a pointer to the pool: unload every program before the
    // reset and load them again afterwards.
    std::vector<edgenlp_handle*> reload;
    for (edgenlp_handle* h : g_handles) {
      if (h->module) {
        h->module.reset();
        reload.push_back(h);
      }
    }
    const bool reset_ok = pool->_unsafe_reset_threadpool(static_cast<std::uint32_t>(threads));
    edgenlp_status mine = EDGENLP_OK;
    for (edgenlp_handle* h : reload) {
      const edgenlp_status st = h->load_module();
      if (h == handle) mine = st;
    }
    if (!reset_ok) return handle->fail(EDGENLP_ERR_INTERNAL, "ExecuTorch refused to resize its thread pool");
    return mine == EDGENLP_OK ? handle->ok() : mine;
  });
}

EDGENLP_API edgenlp_status edgenlp_num_labels(const edgenlp_handle* handle, size_t* out) {
  if (handle == nullptr || out == nullptr) return EDGENLP_ERR_INVALID_ARGUMENT;
  *out = handle->info.labels.size();
  return EDGENLP_OK;
}

EDGENLP_API const char* edgenlp_label_name(const edgenlp_handle* handle, size_t index) {
  if (handle == nullptr || index >= handle->info.labels.size()) return nullptr;
  return handle->info.labels[index].c_str();
}

EDGENLP_API edgenlp_status edgenlp_max_seq_len(const edgenlp_handle* handle, size_t* out) {
  if (handle == nullptr || out == nullptr) return EDGENLP_ERR_INVALID_ARGUMENT;
  *out = handle->info.max_seq_len;
  return EDGENLP_OK;
}

EDGENLP_API edgenlp_status edgenlp_tokenize(edgenlp_handle* handle, const char* text, size_t text_len, int64_t* ids,
                                            int64_t* mask, size_t capacity, size_t* n_tokens) {
  if (handle == nullptr) return EDGENLP_ERR_INVALID_ARGUMENT;
  return guarded(handle, [&]() -> edgenlp_status {
    if (!handle->tokenizer_ready) return handle->fail(EDGENLP_ERR_BUNDLE, "bundle is not open: " + handle->error);
    if (n_tokens == nullptr) return handle->fail(EDGENLP_ERR_INVALID_ARGUMENT, "n_tokens is NULL");
    if (handle->check_text(text, text_len) != EDGENLP_OK) return EDGENLP_ERR_INVALID_ARGUMENT;
    std::string err;
    if (handle->tokenizer.encode(std::string_view(text == nullptr ? "" : text, text_len), handle->info.max_seq_len,
                                 &handle->ids, &err) != edgenlp::TokenizeResult::kOk)
      return handle->fail(EDGENLP_ERR_INVALID_UTF8, err);
    *n_tokens = handle->ids.size();
    if (capacity < handle->ids.size())
      return handle->fail(EDGENLP_ERR_BUFFER_TOO_SMALL, "need room for " + std::to_string(handle->ids.size()) +
                                                            " tokens, capacity is " + std::to_string(capacity));
    if (ids == nullptr) return handle->fail(EDGENLP_ERR_INVALID_ARGUMENT, "ids is NULL");
    std::copy(handle->ids.begin(), handle->ids.end(), ids);
    if (mask != nullptr) std::fill(mask, mask + handle->ids.size(), 1);
    return handle->ok();
  });
}

EDGENLP_API edgenlp_status edgenlp_classify(edgenlp_handle* handle, const char* text, size_t text_len, float* probs,
                                            size_t capacity, int32_t* label) {
  if (handle == nullptr) return EDGENLP_ERR_INVALID_ARGUMENT;
  return guarded(handle, [&]() -> edgenlp_status {
    const char* texts[1] = {text};
    const size_t lens[1] = {text_len};
    edgenlp_status st = batch(handle, texts, lens, 1, probs, capacity, label, true);
    if (st != EDGENLP_OK && handle->error.rfind("text 0: ", 0) == 0) handle->error.erase(0, 8);
    return st;
  });
}

EDGENLP_API edgenlp_status edgenlp_classify_batch(edgenlp_handle* handle, const char* const* texts,
                                                  const size_t* text_lens, size_t n, float* probs, size_t capacity,
                                                  int32_t* labels) {
  if (handle == nullptr) return EDGENLP_ERR_INVALID_ARGUMENT;
  return guarded(handle, [&]() { return batch(handle, texts, text_lens, n, probs, capacity, labels, true); });
}

EDGENLP_API edgenlp_status edgenlp_logits_batch(edgenlp_handle* handle, const char* const* texts,
                                                const size_t* text_lens, size_t n, float* logits, size_t capacity) {
  if (handle == nullptr) return EDGENLP_ERR_INVALID_ARGUMENT;
  return guarded(handle, [&]() { return batch(handle, texts, text_lens, n, logits, capacity, nullptr, false); });
}

EDGENLP_API edgenlp_status edgenlp_dynamic_layers(const edgenlp_handle* handle, size_t* num_layers) {
  if (handle == nullptr || num_layers == nullptr) return EDGENLP_ERR_INVALID_ARGUMENT;
  *num_layers = handle->info.dynamic.present ? handle->info.dynamic.num_layers : 0;
  return EDGENLP_OK;
}

EDGENLP_API edgenlp_status edgenlp_set_exit_threshold(edgenlp_handle* handle, double threshold) {
  if (handle == nullptr) return EDGENLP_ERR_INVALID_ARGUMENT;
  return guarded(handle, [&]() -> edgenlp_status {
    if (is_default(threshold)) {
      if (const edgenlp_status st = handle->need_dynamic("exit threshold"); st != EDGENLP_OK) return st;
      handle->dynamic.threshold = handle->info.dynamic.threshold;
      return handle->ok();
    }
    const edgenlp_status st = handle->set_threshold(threshold, &handle->dynamic);
    return st == EDGENLP_OK ? handle->ok() : st;
  });
}

EDGENLP_API edgenlp_status edgenlp_set_keep_ratio(edgenlp_handle* handle, double keep) {
  if (handle == nullptr) return EDGENLP_ERR_INVALID_ARGUMENT;
  return guarded(handle, [&]() -> edgenlp_status {
    if (is_default(keep)) {
      if (const edgenlp_status st = handle->need_dynamic("keep ratio"); st != EDGENLP_OK) return st;
      handle->dynamic.tokens = handle->info.dynamic.tokens;
      handle->dynamic.keep_ratio = handle->info.dynamic.keep_ratio;
      return handle->ok();
    }
    const edgenlp_status st = handle->set_keep(keep, &handle->dynamic);
    return st == EDGENLP_OK ? handle->ok() : st;
  });
}

EDGENLP_API edgenlp_status edgenlp_set_static(edgenlp_handle* handle, int32_t on) {
  if (handle == nullptr) return EDGENLP_ERR_INVALID_ARGUMENT;
  return guarded(handle, [&]() -> edgenlp_status {
    const edgenlp_status st = handle->set_static_mode(on == EDGENLP_DEFAULT ? 0 : on, &handle->dynamic);
    return st == EDGENLP_OK ? handle->ok() : st;
  });
}

EDGENLP_API edgenlp_status edgenlp_classify_dynamic(edgenlp_handle* handle, const char* text, size_t text_len,
                                                    double exit_threshold, double keep, int32_t static_mode,
                                                    float* probs, size_t capacity, int32_t* label,
                                                    int32_t* exit_layer, int32_t* tokens_kept,
                                                    size_t tokens_capacity) {
  if (handle == nullptr) return EDGENLP_ERR_INVALID_ARGUMENT;
  return guarded(handle, [&]() {
    return dynamic_one(handle, text, text_len, exit_threshold, keep, static_mode, probs, capacity, label, exit_layer,
                       tokens_kept, tokens_capacity, true);
  });
}

EDGENLP_API edgenlp_status edgenlp_logits_dynamic(edgenlp_handle* handle, const char* text, size_t text_len,
                                                  double exit_threshold, double keep, int32_t static_mode,
                                                  float* logits, size_t capacity, int32_t* exit_layer,
                                                  int32_t* tokens_kept, size_t tokens_capacity) {
  if (handle == nullptr) return EDGENLP_ERR_INVALID_ARGUMENT;
  return guarded(handle, [&]() {
    return dynamic_one(handle, text, text_len, exit_threshold, keep, static_mode, logits, capacity, nullptr,
                       exit_layer, tokens_kept, tokens_capacity, false);
  });
}

EDGENLP_API edgenlp_status edgenlp_enable_etdump(edgenlp_handle* handle) {
  if (handle == nullptr) return EDGENLP_ERR_INVALID_ARGUMENT;
  return guarded(handle, [&]() -> edgenlp_status {
    if (handle->info.pte_path.empty())
      return handle->fail(EDGENLP_ERR_NO_MODEL, handle->info.dir + ": bundle has no model.pte to profile");
    if (handle->etdump && handle->module) return handle->ok();
    handle->etdump = true;
    std::lock_guard<std::mutex> lock(g_mu);
    return handle->load_module();
  });
}

EDGENLP_API edgenlp_status edgenlp_write_etdump(edgenlp_handle* handle, const char* path) {
  if (handle == nullptr) return EDGENLP_ERR_INVALID_ARGUMENT;
  return guarded(handle, [&]() -> edgenlp_status {
    if (path == nullptr) return handle->fail(EDGENLP_ERR_INVALID_ARGUMENT, "path is NULL");
    if (!handle->etdump || !handle->module)
      return handle->fail(EDGENLP_ERR_INVALID_ARGUMENT, "call edgenlp_enable_etdump() before classifying");
    auto* gen = static_cast<executorch::etdump::ETDumpGen*>(handle->module->event_tracer());
    if (gen == nullptr) return handle->fail(EDGENLP_ERR_INTERNAL, "no event tracer attached");
    executorch::etdump::ETDumpResult r = gen->get_etdump_data();
    if (r.buf == nullptr || r.size == 0) return handle->fail(EDGENLP_ERR_INVALID_ARGUMENT, "nothing recorded yet");
    std::unique_ptr<void, void (*)(void*)> owned(r.buf, &std::free);
    std::unique_ptr<std::FILE, int (*)(std::FILE*)> f(std::fopen(path, "wb"), &std::fclose);
    if (!f) return handle->fail(EDGENLP_ERR_IO, std::string("cannot write ") + path);
    if (std::fwrite(r.buf, 1, r.size, f.get()) != r.size) return handle->fail(EDGENLP_ERR_IO, std::string("short write to ") + path);
    return handle->ok();
  });
}

}  // extern "C"
