// libFuzzer target: WordPiece encode over arbitrary bytes (valid or not UTF-8).
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "wordpiece.h"

namespace {
const edgenlp::WordPiece& tokenizer() {
  static edgenlp::WordPiece* wp = [] {
    auto* w = new edgenlp::WordPiece();
    std::string err;
    const std::string vocab =
        "[PAD]\n[UNK]\n[CLS]\n[SEP]\na\nb\n##a\n##b\nab\n\xc3\xa9\n##\xc3\xa9\n\xe4\xb8\xad\n!\n,\nthe\n##s\n";
    if (!w->load_from_string(vocab, edgenlp::WordPieceConfig{}, &err)) __builtin_trap();
    return w;
  }();
  return *wp;
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::vector<std::int64_t> ids;
  std::string err;
  const std::size_t max_len = 2 + (size % 64);
  auto r = tokenizer().encode(std::string_view(reinterpret_cast<const char*>(data), size), max_len, &ids, &err);
  if (r == edgenlp::TokenizeResult::kOk && (ids.size() < 2 || ids.size() > max_len)) __builtin_trap();
  return 0;
}
