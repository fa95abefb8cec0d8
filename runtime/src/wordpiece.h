// Native WordPiece tokenizer with BERT normalization, matching the Hugging Face
// BertTokenizerFast (BertNormalizer + BertPreTokenizer + WordPiece + BERT
// post-processing with truncation).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace edgenlp {

struct WordPieceConfig {
  bool lowercase = true;
  bool strip_accents = true;  // the manifest's null means "same as lowercase"
  bool tokenize_chinese_chars = true;
  bool clean_text = true;
  std::size_t max_input_chars_per_word = 100;
  std::string cls_token = "[CLS]";
  std::string sep_token = "[SEP]";
  std::string pad_token = "[PAD]";
  std::string unk_token = "[UNK]";
  std::string continuing_prefix = "##";
};

enum class TokenizeResult { kOk, kInvalidUtf8 };

class WordPiece {
 public:
  WordPiece() = default;
  WordPiece(const WordPiece&) = delete;
  WordPiece& operator=(const WordPiece&) = delete;
  WordPiece(WordPiece&&) = default;
  WordPiece& operator=(WordPiece&&) = default;

  // Load vocab.txt (one token per line, id = line number). Returns false and
  // sets *error when the file is unreadable or a special token is missing.
  bool load(const std::string& vocab_path, const WordPieceConfig& config, std::string* error);
  // Same, from the file contents already in memory.
  bool load_from_string(std::string_view vocab_text, const WordPieceConfig& config, std::string* error);

  // [CLS] pieces [SEP], truncated to max_len tokens (max_len >= 2).
  TokenizeResult encode(std::string_view text, std::size_t max_len, std::vector<std::int64_t>* ids,
                        std::string* error) const;

  // Trimmed vocabulary: kept[new_id] is the original id (line of vocab.txt)
  // the model's embedding row new_id stands for. Afterwards encode() returns
  // new ids and every piece whose original id is not kept becomes [UNK]
  // (its new id). The special tokens must be kept and ids must be distinct
  // and in range; false and *error otherwise (the tokenizer is unchanged).
  bool set_id_map(const std::vector<std::int64_t>& kept, std::string* error);

  std::int64_t pad_id() const { return pad_id_; }
  std::size_t vocab_size() const { return vocab_size_; }

 private:
  // Append the pieces of one word (UTF-8) to ids; stops at `limit` ids.
  void encode_word(const std::string& word, std::size_t n_chars, std::vector<std::int64_t>* ids) const;

  WordPieceConfig config_;
  std::unordered_map<std::string, std::int64_t> vocab_;
  std::size_t vocab_size_ = 0;
  std::int64_t cls_id_ = 0, sep_id_ = 0, pad_id_ = 0, unk_id_ = 0;
};

}  // namespace edgenlp
