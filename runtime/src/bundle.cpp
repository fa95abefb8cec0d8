#include "bundle.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <memory>

#include "edgenlp.h"
#include "json.h"
#include "sha256.h"

namespace edgenlp {
namespace {

constexpr std::size_t kMaxManifestBytes = 16u << 20;
constexpr int kBundleFormatVersion = EDGENLP_BUNDLE_FORMAT_VERSION;
#define EDGENLP_STR2(x) #x
#define EDGENLP_STR(x) EDGENLP_STR2(x)
constexpr const char* kLibraryVersion =
    EDGENLP_STR(EDGENLP_VERSION_MAJOR) "." EDGENLP_STR(EDGENLP_VERSION_MINOR) "." EDGENLP_STR(EDGENLP_VERSION_PATCH);
#undef EDGENLP_STR
#undef EDGENLP_STR2

bool safe_relative(const std::string& name) {
  if (name.empty() || name[0] == '/' || name.find('\\') != std::string::npos) return false;
  if (name.find('\0') != std::string::npos) return false;
  std::size_t pos = 0;
  while (pos <= name.size()) {
    std::size_t slash = name.find('/', pos);
    if (slash == std::string::npos) slash = name.size();
    const std::string part = name.substr(pos, slash - pos);
    if (part.empty() || part == "..") return false;
    pos = slash + 1;
  }
  return true;
}

bool is_hex64(const std::string& s) {
  if (s.size() != 64) return false;
  return std::all_of(s.begin(), s.end(), [](char c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'); });
}

bool get_count(const json::Value* v, std::size_t* out) {
  if (v == nullptr || !v->is_number()) return false;
  const double d = v->as_number();
  if (!(d >= 1 && d <= 1e7) || std::floor(d) != d) return false;
  *out = static_cast<std::size_t>(d);
  return true;
}

}  // namespace

std::shared_ptr<const FileBytes> FileBytes::open(const std::string& path, std::string* error) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    *error = std::strerror(errno);
    return nullptr;
  }
  struct Closer {
    int fd;
    ~Closer() { ::close(fd); }
  } closer{fd};
  struct stat st;
  if (::fstat(fd, &st) != 0) {
    *error = std::strerror(errno);
    return nullptr;
  }
  if (!S_ISREG(st.st_mode)) {
    *error = "not a regular file";
    return nullptr;
  }
  std::shared_ptr<FileBytes> f(new FileBytes());
  const auto size = static_cast<std::size_t>(st.st_size);
  if (size == 0) return f;
  void* p = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
  if (p != MAP_FAILED) {
    f->map_ = p;
    f->data_ = static_cast<const std::uint8_t*>(p);
    f->size_ = size;
    return f;
  }
  // No mmap (some file systems): read it.
  f->heap_.resize(size);
  std::size_t done = 0;
  while (done < size) {
    const ssize_t n = ::read(fd, f->heap_.data() + done, size - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      *error = n < 0 ? std::strerror(errno) : "file shrank while being read";
      return nullptr;
    }
    done += static_cast<std::size_t>(n);
  }
  f->data_ = f->heap_.data();
  f->size_ = size;
  return f;
}

FileBytes::~FileBytes() {
  if (map_ != nullptr) ::munmap(map_, size_);
}

void FileBytes::will_read_sequentially() const {
  // Start reading it all in now. (Not MADV_SEQUENTIAL: the hint would stay
  // on the mapping while ExecuTorch reads it in its own order.)
  if (map_ != nullptr) (void)::madvise(map_, size_, MADV_WILLNEED);
}

void FileBytes::release(const void* p, std::size_t n) const {
  if (map_ == nullptr || n == 0) return;
  static const auto page = static_cast<std::uintptr_t>(::sysconf(_SC_PAGESIZE));
  const auto lo = std::max(reinterpret_cast<std::uintptr_t>(p), reinterpret_cast<std::uintptr_t>(data_));
  const auto hi = std::min(reinterpret_cast<std::uintptr_t>(p) + n, reinterpret_cast<std::uintptr_t>(data_) + size_);
  const std::uintptr_t first = (lo + page - 1) / page * page;
  // the last partial page of the file counts as whole: nothing else lives there
  const std::uintptr_t end = hi == reinterpret_cast<std::uintptr_t>(data_) + size_ ? (hi + page - 1) / page * page
                                                                                     : hi / page * page;
  if (end > first) (void)::madvise(reinterpret_cast<void*>(first), end - first, MADV_DONTNEED);
}

bool read_file(const std::string& path, std::string* out) {
  std::unique_ptr<std::FILE, int (*)(std::FILE*)> f(std::fopen(path.c_str(), "rb"), &std::fclose);
  if (!f) return false;
  out->clear();
  char buf[1 << 16];
  while (true) {
    const std::size_t n = std::fread(buf, 1, sizeof buf, f.get());
    out->append(buf, n);
    if (out->size() > kMaxManifestBytes * 64) return false;
    if (n < sizeof buf) return !std::ferror(f.get());
  }
}

BundleStatus load_bundle(const std::string& dir_in, BundleInfo* out, std::string* error,
                         const BundleOptions& options) {
  *out = BundleInfo();
  std::string dir = dir_in;
  while (dir.size() > 1 && dir.back() == '/') dir.pop_back();
  out->dir = dir;
  const std::string manifest_path = dir + "/manifest.json";
  std::string text;
  if (!read_file(manifest_path, &text)) {
    *error = "cannot read " + manifest_path + " (is " + dir + " a bundle directory?)";
    return BundleStatus::kIo;
  }
  if (text.size() > kMaxManifestBytes) {
    *error = manifest_path + ": larger than 16 MiB";
    return BundleStatus::kInvalid;
  }
  json::Value m;
  std::string jerr;
  if (!json::parse(text, &m, &jerr)) {
    *error = manifest_path + ": invalid JSON at " + jerr;
    return BundleStatus::kInvalid;
  }
  auto invalid = [&](const std::string& what) {
    *error = manifest_path + ": " + what;
    return BundleStatus::kInvalid;
  };
  if (!m.is_object()) return invalid("top level must be an object");
  const json::Value* fmt = m.get("format");
  if (fmt == nullptr || !fmt->is_string() || fmt->as_string() != "edgenlp-bundle")
    return invalid("\"format\" must be \"edgenlp-bundle\"");
  const json::Value* ver = m.get("format_version");
  if (ver == nullptr || !ver->is_number() || !(ver->as_number() >= 1 && ver->as_number() <= 1e6) ||
      std::floor(ver->as_number()) != ver->as_number())
    return invalid("\"format_version\" must be a positive integer");
  if (ver->as_number() > kBundleFormatVersion) {
    *error = manifest_path + ": bundle format_version " + std::to_string(static_cast<long>(ver->as_number())) +
             " is newer than this libedgenlp (" + kLibraryVersion + ") reads (format_version " +
             std::to_string(kBundleFormatVersion) + "): update libedgenlp, or export the bundle with edgenlp " +
             kLibraryVersion;
    return BundleStatus::kFormat;
  }

  // "files": names and digests first. Nothing is read before it is verified.
  const json::Value* files = m.get("files");
  if (files == nullptr || !files->is_object()) return invalid("\"files\" must map file names to sha256 hex");
  for (const auto& [name, digest] : files->as_object()) {
    if (!safe_relative(name)) return invalid("\"files\" entry '" + name + "' is not a relative path inside the bundle");
    if (!digest.is_string() || !is_hex64(digest.as_string()))
      return invalid("\"files\"[\"" + name + "\"] must be a 64-digit lowercase sha256 hex");
  }
  // Files are verified when first read (read_verified) and used from the
  // verified bytes. A listed file this runtime never reads only has to exist.
  std::map<std::string, std::shared_ptr<const FileBytes>> verified;
  BundleStatus read_status = BundleStatus::kOk;
  auto read_verified = [&](const std::string& name) -> std::shared_ptr<const FileBytes> {
    if (auto it = verified.find(name); it != verified.end()) return it->second;
    const std::string path = dir + "/" + name;
    std::string why;
    std::shared_ptr<const FileBytes> bytes = FileBytes::open(path, &why);
    if (!bytes) {
      *error = "bundle file " + path + " is missing or unreadable (" + why + ")";
      read_status = BundleStatus::kIo;
      return nullptr;
    }
    if (options.verify) {
      const std::string& want = files->get(name)->as_string();
      bytes->will_read_sequentially();
      const std::string actual = sha256_hex(bytes->data(), bytes->size());
      if (actual != want) {
        *error = "sha256 of " + path + " is " + actual + ", manifest says " + want + " (file corrupted or modified)";
        read_status = BundleStatus::kChecksum;
        return nullptr;
      }
      // Hashing touched every page; give them back until they are used.
      bytes->release(bytes->data(), bytes->size());
    }
    verified.emplace(name, bytes);
    return bytes;
  };
  auto listed = [&](const std::string& name) { return files->get(name) != nullptr; };

  // labels
  const json::Value* labels = m.get("labels");
  if (labels == nullptr || !labels->is_array() || labels->as_array().empty())
    return invalid("\"labels\" must be a non-empty list of strings");
  for (const auto& l : labels->as_array()) {
    if (!l.is_string()) return invalid("\"labels\" must be a non-empty list of strings");
    out->labels.push_back(l.as_string());
  }
  if (listed("labels.json")) {
    const auto lbytes = read_verified("labels.json");
    if (!lbytes) return read_status;
    json::Value lv;
    if (lbytes->size() > kMaxManifestBytes || !json::parse(std::string(lbytes->view()), &lv, &jerr) || !lv.is_array())
      return invalid("labels.json is not a JSON list");
    std::vector<std::string> from_file;
    for (const auto& l : lv.as_array()) from_file.push_back(l.is_string() ? l.as_string() : std::string());
    if (from_file != out->labels) return invalid("labels.json differs from \"labels\"");
  }

  // tokenizer
  const json::Value* tok = m.get("tokenizer");
  if (tok == nullptr || !tok->is_object()) return invalid("\"tokenizer\" must be an object");
  const json::Value* ttype = tok->get("type");
  if (ttype == nullptr || !ttype->is_string() || ttype->as_string() != "wordpiece")
    return invalid("\"tokenizer.type\" must be \"wordpiece\" (the only tokenizer this runtime has)");
  const json::Value* vocab = tok->get("vocab");
  if (vocab == nullptr || !vocab->is_string() || !safe_relative(vocab->as_string()))
    return invalid("\"tokenizer.vocab\" must name the vocabulary file");
  if (!listed(vocab->as_string())) return invalid("\"tokenizer.vocab\" file is not listed in \"files\"");
  out->vocab_path = dir + "/" + vocab->as_string();
  {
    const auto vbytes = read_verified(vocab->as_string());
    if (!vbytes) return read_status;
    out->vocab_text.assign(vbytes->view());
  }
  // Trimmed vocabulary (optional): {"kept": [original id of new id 0, 1, ...]}
  if (const json::Value* vm = tok->get("vocab_map"); vm != nullptr && !vm->is_null()) {
    if (!vm->is_string() || !safe_relative(vm->as_string()))
      return invalid("\"tokenizer.vocab_map\" must name the vocabulary map file");
    if (!listed(vm->as_string())) return invalid("\"tokenizer.vocab_map\" file is not listed in \"files\"");
    out->vocab_map_path = dir + "/" + vm->as_string();
    const auto mbytes = read_verified(vm->as_string());
    if (!mbytes) return read_status;
    json::Value mv;
    if (mbytes->size() > kMaxManifestBytes || !json::parse(mbytes->view(), &mv, &jerr) || !mv.is_object())
      return invalid(vm->as_string() + " is not a JSON object");
    const json::Value* kept = mv.get("kept");
    if (kept == nullptr || !kept->is_array() || kept->as_array().empty())
      return invalid(vm->as_string() + ": \"kept\" must be a non-empty list of token ids");
    out->vocab_kept.reserve(kept->as_array().size());
    for (const auto& k : kept->as_array()) {
      const double d = k.is_number() ? k.as_number() : -1.0;
      if (!(d >= 0 && d < 9007199254740992.0) || d != static_cast<double>(static_cast<std::int64_t>(d)))
        return invalid(vm->as_string() + ": \"kept\" must hold non-negative integer token ids");
      out->vocab_kept.push_back(static_cast<std::int64_t>(d));
    }
  }
  WordPieceConfig& tc = out->tokenizer;
  auto get_bool = [&](const char* key, bool* dst) -> bool {
    const json::Value* v = tok->get(key);
    if (v == nullptr || v->is_null()) return true;
    if (!v->is_bool()) return false;
    *dst = v->as_bool();
    return true;
  };
  if (!get_bool("do_lower_case", &tc.lowercase)) return invalid("\"tokenizer.do_lower_case\" must be true or false");
  tc.strip_accents = tc.lowercase;
  if (!get_bool("strip_accents", &tc.strip_accents))
    return invalid("\"tokenizer.strip_accents\" must be true, false or null");
  if (!get_bool("tokenize_chinese_chars", &tc.tokenize_chinese_chars))
    return invalid("\"tokenizer.tokenize_chinese_chars\" must be true or false");
  for (auto [key, dst] : {std::pair<const char*, std::string*>{"cls_token", &tc.cls_token},
                          {"sep_token", &tc.sep_token}, {"pad_token", &tc.pad_token}, {"unk_token", &tc.unk_token}}) {
    const json::Value* v = tok->get(key);
    if (v == nullptr || v->is_null()) continue;
    if (!v->is_string()) return invalid(std::string("\"tokenizer.") + key + "\" must be a string");
    *dst = v->as_string();
  }
  if (const json::Value* v = tok->get("max_input_chars_per_word"); v != nullptr && !v->is_null()) {
    if (!get_count(v, &tc.max_input_chars_per_word))
      return invalid("\"tokenizer.max_input_chars_per_word\" must be a positive integer");
  }

  if (!get_count(m.get("max_seq_len"), &out->max_seq_len) || out->max_seq_len < 2)
    return invalid("\"max_seq_len\" must be an integer >= 2");

  // inputs / outputs: this runtime feeds int64 ids + mask, reads float32 logits
  if (const json::Value* inputs = m.get("inputs"); inputs != nullptr) {
    if (!inputs->is_array()) return invalid("\"inputs\" must be a list");
    for (const auto& in : inputs->as_array()) {
      const json::Value* dt = in.get("dtype");
      if (dt == nullptr || !dt->is_string() || dt->as_string() != "int64")
        return invalid("\"inputs\" dtype must be \"int64\" (input_ids, attention_mask)");
    }
  }

  // ExecuTorch program (optional)
  const json::Value* artifacts = m.get("artifacts");
  const json::Value* pte = artifacts != nullptr ? artifacts->get("pte") : nullptr;
  if (pte != nullptr && !pte->is_null()) {
    const json::Value* file = pte->get("file");
    if (file == nullptr || !file->is_string() || !safe_relative(file->as_string()))
      return invalid("\"artifacts.pte.file\" must name the .pte file");
    if (!listed(file->as_string())) return invalid("\"artifacts.pte.file\" is not listed in \"files\"");
    out->pte_path = dir + "/" + file->as_string();
    out->pte = read_verified(file->as_string());
    if (!out->pte) return read_status;
    const json::Value* methods = pte->get("methods");
    if (methods == nullptr || !methods->is_array() || methods->as_array().empty())
      return invalid("\"artifacts.pte.methods\" must list {name, seq_len} entries");
    for (const auto& me : methods->as_array()) {
      MethodInfo info;
      const json::Value* name = me.get("name");
      if (name == nullptr || !name->is_string() || name->as_string().empty())
        return invalid("\"artifacts.pte.methods\" entry without a \"name\"");
      info.name = name->as_string();
      if (!get_count(me.get("seq_len"), &info.seq_len))
        return invalid("\"artifacts.pte.methods\" entry '" + info.name + "' needs an integer \"seq_len\" >= 1");
      if (const json::Value* dyn = me.get("dynamic"); dyn != nullptr && dyn->is_bool()) info.dynamic = dyn->as_bool();
      out->methods.push_back(info);
    }
    std::sort(out->methods.begin(), out->methods.end(),
              [](const MethodInfo& a, const MethodInfo& b) { return a.seq_len < b.seq_len; });
    if (out->methods.back().seq_len < 2) return invalid("\"artifacts.pte.methods\" seq_len must be >= 2");
  }
  // Dynamic bundles (optional): segments, exits and token pruning.
  if (m.get("dynamic") != nullptr) {
    std::string why;
    if (!parse_dynamic(m, out->labels.size(), &out->dynamic, &why)) return invalid(why);
  }
  for (const auto& [name, digest] : files->as_object()) {
    if (verified.count(name) != 0) continue;
    struct stat st;
    const std::string path = dir + "/" + name;
    if (::stat(path.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) {
      *error = "bundle file " + path + " is missing or unreadable";
      return BundleStatus::kIo;
    }
  }
  return BundleStatus::kOk;
}

}  // namespace edgenlp
