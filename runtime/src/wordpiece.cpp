#include "wordpiece.h"

#include <fstream>
#include <sstream>

#include "unicode.h"
#include "utf8.h"

namespace edgenlp {

bool WordPiece::load(const std::string& vocab_path, const WordPieceConfig& config, std::string* error) {
  std::ifstream in(vocab_path, std::ios::binary);
  if (!in) {
    *error = "cannot read vocabulary " + vocab_path;
    return false;
  }
  std::ostringstream buf;
  buf << in.rdbuf();
  return load_from_string(buf.str(), config, error);
}

bool WordPiece::load_from_string(std::string_view text, const WordPieceConfig& config, std::string* error) {
  config_ = config;
  vocab_.clear();
  std::int64_t index = 0;
  std::size_t pos = 0;
  while (pos < text.size()) {
    std::size_t nl = text.find('\n', pos);
    const std::size_t end = nl == std::string_view::npos ? text.size() : nl;
    std::string_view line = text.substr(pos, end - pos);
    while (!line.empty() && (line.back() == '\r' || line.back() == '\n')) line.remove_suffix(1);
    vocab_.insert_or_assign(std::string(line), index++);
    pos = nl == std::string_view::npos ? text.size() : nl + 1;
  }
  vocab_size_ = static_cast<std::size_t>(index);
  const std::pair<const std::string*, std::int64_t*> specials[] = {
      {&config_.cls_token, &cls_id_}, {&config_.sep_token, &sep_id_},
      {&config_.pad_token, &pad_id_}, {&config_.unk_token, &unk_id_}};
  for (const auto& [name, id] : specials) {
    auto it = vocab_.find(*name);
    if (it == vocab_.end()) {
      *error = "vocabulary has no special token " + *name;
      return false;
    }
    *id = it->second;
  }
  return true;
}

bool WordPiece::set_id_map(const std::vector<std::int64_t>& kept, std::string* error) {
  constexpr std::int64_t kDropped = -1;
  std::vector<std::int64_t> to_new(vocab_size_, kDropped);
  for (std::size_t i = 0; i < kept.size(); ++i) {
    const std::int64_t orig = kept[i];
    if (orig < 0 || static_cast<std::size_t>(orig) >= vocab_size_) {
      *error = "vocabulary map entry " + std::to_string(i) + " is " + std::to_string(orig) +
               ", outside the vocabulary (" + std::to_string(vocab_size_) + " tokens)";
      return false;
    }
    if (to_new[static_cast<std::size_t>(orig)] != kDropped) {
      *error = "vocabulary map keeps id " + std::to_string(orig) + " twice";
      return false;
    }
    to_new[static_cast<std::size_t>(orig)] = static_cast<std::int64_t>(i);
  }
  const std::pair<const std::string*, std::int64_t*> specials[] = {
      {&config_.cls_token, &cls_id_}, {&config_.sep_token, &sep_id_},
      {&config_.pad_token, &pad_id_}, {&config_.unk_token, &unk_id_}};
  for (const auto& [name, id] : specials) {
    if (to_new[static_cast<std::size_t>(*id)] == kDropped) {
      *error = "vocabulary map drops the special token " + *name;
      return false;
    }
  }
  const std::int64_t unk = to_new[static_cast<std::size_t>(unk_id_)];
  for (auto& [token, id] : vocab_) {
    const std::int64_t n = to_new[static_cast<std::size_t>(id)];
    id = n == kDropped ? unk : n;
  }
  for (const auto& [name, id] : specials) *id = to_new[static_cast<std::size_t>(*id)];
  vocab_size_ = kept.size();
  return true;
}

void WordPiece::encode_word(const std::string& word, std::size_t n_chars, std::vector<std::int64_t>* ids) const {
  if (n_chars > config_.max_input_chars_per_word) {
    ids->push_back(unk_id_);
    return;
  }
  const std::size_t mark = ids->size();
  std::size_t start = 0;
  std::string candidate;
  while (start < word.size()) {
    std::size_t end = word.size();
    bool found = false;
    while (start < end) {
      candidate.clear();
      if (start > 0) candidate += config_.continuing_prefix;
      candidate.append(word, start, end - start);
      auto it = vocab_.find(candidate);
      if (it != vocab_.end()) {
        ids->push_back(it->second);
        found = true;
        break;
      }
      // step back one UTF-8 character
      do {
        --end;
      } while (end > start && (static_cast<unsigned char>(word[end]) & 0xC0) == 0x80);
    }
    if (!found) {
      ids->resize(mark);
      ids->push_back(unk_id_);
      return;
    }
    start = end;
  }
}

TokenizeResult WordPiece::encode(std::string_view text, std::size_t max_len, std::vector<std::int64_t>* ids,
                                 std::string* error) const {
  ids->clear();
  std::vector<char32_t> cps;
  std::size_t bad = 0;
  if (!utf8::decode(text.data(), text.size(), &cps, &bad)) {
    *error = "invalid UTF-8 at byte " + std::to_string(bad);
    return TokenizeResult::kInvalidUtf8;
  }
  const std::size_t budget = max_len >= 2 ? max_len - 2 : 0;
  ids->push_back(cls_id_);

  std::string word;
  std::size_t word_chars = 0;
  auto flush = [&]() {
    if (!word.empty()) {
      encode_word(word, word_chars, ids);
      word.clear();
      word_chars = 0;
    }
  };
  auto emit = [&](char32_t c) {
    // pre-tokenizer on the normalized character
    if (unicode::is_space(c)) {
      flush();
    } else if (unicode::is_punct(c)) {
      flush();
      utf8::append(c, &word);
      word_chars = 1;
      flush();
    } else {
      utf8::append(c, &word);
      ++word_chars;
    }
  };
  char32_t dec[4];
  char32_t low[3];
  for (std::size_t i = 0; i < cps.size() && ids->size() < budget + 1; ++i) {
    const char32_t cp = cps[i];
    if (config_.clean_text) {
      if (unicode::is_drop(cp)) continue;
      if (unicode::is_space(cp)) {
        flush();
        continue;
      }
    }
    const bool cjk = config_.tokenize_chinese_chars && unicode::is_cjk(cp);
    if (cjk) flush();
    std::size_t nd = 1;
    if (config_.strip_accents) {
      nd = unicode::nfd(cp, dec);
    } else {
      dec[0] = cp;
    }
    for (std::size_t k = 0; k < nd; ++k) {
      if (config_.strip_accents && unicode::is_mark(dec[k])) continue;
      if (config_.lowercase) {
        const std::size_t nl = unicode::lower(dec[k], low);
        for (std::size_t j = 0; j < nl; ++j) emit(low[j]);
      } else {
        emit(dec[k]);
      }
    }
    if (cjk) flush();
  }
  flush();
  if (ids->size() > budget + 1) ids->resize(budget + 1);
  ids->push_back(sep_id_);
  return TokenizeResult::kOk;
}

}  // namespace edgenlp
