// Reading and verifying an edgenlp bundle directory (manifest.json).
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "wordpiece.h"

namespace edgenlp {

struct MethodInfo {
  std::string name;
  std::size_t seq_len = 0;
  bool dynamic = false;  // accepts any length 1..seq_len
};

struct BundleInfo {
  std::string dir;
  std::vector<std::string> labels;
  WordPieceConfig tokenizer;
  std::string vocab_path;
  std::size_t max_seq_len = 0;
  std::string pte_path;              // empty when the bundle has no ExecuTorch program
  std::vector<MethodInfo> methods;   // sorted by seq_len
};

enum class BundleStatus { kOk, kIo, kInvalid, kChecksum };

// Parse dir/manifest.json, check it against the bundle contract and verify the
// sha256 of every file it lists. *error names the file or field that is wrong.
BundleStatus load_bundle(const std::string& dir, BundleInfo* out, std::string* error);

// Read a whole file; false when it cannot be opened or read.
bool read_file(const std::string& path, std::string* out);

}  // namespace edgenlp
