// Reading and verifying an edgenlp bundle directory (manifest.json).
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "dynamic.h"
#include "wordpiece.h"

namespace edgenlp {

struct MethodInfo {
  std::string name;
  std::size_t seq_len = 0;
  bool dynamic = false;  // accepts any length 1..seq_len
};

// The bytes of a whole file, read-only: memory-mapped where possible (clean,
// page-cache backed pages the kernel can drop and fault back), else read
// into memory. What was verified is exactly what is used afterwards: the
// runtime loads model.pte from this mapping, not by opening the path again.
class FileBytes {
 public:
  // nullptr when the file cannot be opened or read (*error says why).
  static std::shared_ptr<const FileBytes> open(const std::string& path, std::string* error);
  ~FileBytes();
  FileBytes(const FileBytes&) = delete;
  FileBytes& operator=(const FileBytes&) = delete;
  const std::uint8_t* data() const { return data_; }
  std::size_t size() const { return size_; }
  std::string_view view() const { return {reinterpret_cast<const char*>(data_), size_}; }
  // Hint that the whole file is about to be read.
  void will_read_sequentially() const;
  // Drop the resident pages wholly inside [p, p + n) from this process (a
  // mapping faults them back from the file on the next access; the bytes do
  // not change). No-op for a file read into memory.
  void release(const void* p, std::size_t n) const;

 private:
  FileBytes() = default;
  const std::uint8_t* data_ = nullptr;
  std::size_t size_ = 0;
  void* map_ = nullptr;            // munmap on destruction when set
  std::vector<std::uint8_t> heap_;  // fallback when mmap is unavailable
};

struct BundleInfo {
  std::string dir;
  std::vector<std::string> labels;
  WordPieceConfig tokenizer;
  std::string vocab_path;
  std::string vocab_text;            // its contents (verified unless verification was skipped)
  std::string vocab_map_path;        // trimmed vocabulary: tokenizer.vocab_map (empty when absent)
  std::vector<std::int64_t> vocab_kept;  // its "kept" list: original id of each new id
  std::size_t max_seq_len = 0;
  std::string pte_path;              // empty when the bundle has no ExecuTorch program
  std::shared_ptr<const FileBytes> pte;  // its bytes (verified unless verification was skipped)
  std::vector<MethodInfo> methods;   // sorted by seq_len
  DynamicInfo dynamic;               // the "dynamic" section (dynamic.present = false when absent)
};

// kFormat: the manifest's format_version is newer than this library reads.
enum class BundleStatus { kOk, kIo, kInvalid, kChecksum, kFormat };

struct BundleOptions {
  bool verify = true;  // check the sha256 of every file read against the manifest
};

// Parse dir/manifest.json and check it against the bundle contract. Every
// file the runtime reads (vocabulary, labels.json, model.pte) is read once,
// verified against its sha256 in "files" and then used from those same
// bytes; other listed files (model.onnx) must exist but are not read.
// *error names the file or field that is wrong.
BundleStatus load_bundle(const std::string& dir, BundleInfo* out, std::string* error,
                         const BundleOptions& options = BundleOptions());

// Read a whole file; false when it cannot be opened or read.
bool read_file(const std::string& path, std::string* out);

}  // namespace edgenlp
