// Unicode lookups for the BERT normalizer (tables generated from unicodedata).
#pragma once

#include <cstddef>

namespace edgenlp::unicode {

// Properties of one code point, as the Hugging Face BertNormalizer and
// BertPreTokenizer see it.
bool is_drop(char32_t cp);   // removed by clean_text
bool is_space(char32_t cp);  // White_Space
bool is_cjk(char32_t cp);    // surrounded by spaces
bool is_punct(char32_t cp);  // split off as its own word
bool is_mark(char32_t cp);   // Mn, removed when stripping accents

// Full canonical decomposition of cp. Writes at most 4 code points to out
// (enough for every Unicode character), returns how many.
std::size_t nfd(char32_t cp, char32_t* out);
// Full lowercase mapping of cp. Writes at most 3 code points, returns how many.
std::size_t lower(char32_t cp, char32_t* out);

}  // namespace edgenlp::unicode
