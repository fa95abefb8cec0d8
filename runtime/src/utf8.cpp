#include "utf8.h"

namespace edgenlp::utf8 {

bool decode(const char* data, std::size_t len, std::vector<char32_t>* out, std::size_t* bad_offset) {
  const auto* s = reinterpret_cast<const unsigned char*>(data);
  out->clear();
  out->reserve(len);
  std::size_t i = 0;
  while (i < len) {
    const unsigned char c = s[i];
    if (c < 0x80) {
      out->push_back(c);
      ++i;
      continue;
    }
    std::size_t n;
    char32_t cp;
    char32_t min;
    if ((c & 0xE0) == 0xC0) {
      n = 2, cp = c & 0x1F, min = 0x80;
    } else if ((c & 0xF0) == 0xE0) {
      n = 3, cp = c & 0x0F, min = 0x800;
    } else if ((c & 0xF8) == 0xF0) {
      n = 4, cp = c & 0x07, min = 0x10000;
    } else {
      *bad_offset = i;
      return false;
    }
    if (len - i < n) {
      *bad_offset = i;
      return false;
    }
    for (std::size_t k = 1; k < n; ++k) {
      const unsigned char cc = s[i + k];
      if ((cc & 0xC0) != 0x80) {
        *bad_offset = i;
        return false;
      }
      cp = (cp << 6) | (cc & 0x3F);
    }
    if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) {
      *bad_offset = i;
      return false;
    }
    out->push_back(cp);
    i += n;
  }
  return true;
}

}  // namespace edgenlp::utf8
