// Strict UTF-8 decoding and encoding.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace edgenlp::utf8 {

// Decode `len` bytes into code points. Rejects overlong forms, surrogates,
// values above U+10FFFF and truncated sequences. On failure returns false and
// sets *bad_offset to the byte offset of the first invalid sequence.
bool decode(const char* data, std::size_t len, std::vector<char32_t>* out, std::size_t* bad_offset);

// Append the UTF-8 encoding of cp (assumed valid) to out.
inline void append(char32_t cp, std::string* out) {
  if (cp < 0x80) {
    out->push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out->push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out->push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out->push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

}  // namespace edgenlp::utf8
