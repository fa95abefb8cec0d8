#include "unicode.h"

#include <algorithm>
#include <cstdint>

#include "unicode_tables.h"

namespace edgenlp::unicode {
namespace {

using tables::MapMulti;
using tables::MapRun;
using tables::Range;

bool in_ranges(const Range* ranges, std::size_t count, char32_t cp) {
  const Range* end = ranges + count;
  const Range* it = std::upper_bound(ranges, end, cp, [](char32_t c, const Range& r) { return c < r.first; });
  if (it == ranges) return false;
  --it;
  return cp <= it->last;
}

std::size_t map_lookup(const MapRun* runs, std::size_t run_count, const MapMulti* multi, std::size_t multi_count,
                       const char32_t* pool, char32_t cp, char32_t* out) {
  const MapMulti* mend = multi + multi_count;
  const MapMulti* m = std::lower_bound(multi, mend, cp, [](const MapMulti& e, char32_t c) { return e.cp < c; });
  if (m != mend && m->cp == cp) {
    for (std::size_t i = 0; i < m->length; ++i) out[i] = pool[m->offset + i];
    return m->length;
  }
  const MapRun* rend = runs + run_count;
  const MapRun* r = std::upper_bound(runs, rend, cp, [](char32_t c, const MapRun& e) { return c < e.first; });
  if (r != runs) {
    --r;
    const char32_t offset = cp - r->first;
    if (offset % r->stride == 0 && offset / r->stride < r->count) {
      out[0] = static_cast<char32_t>(static_cast<std::int64_t>(cp) + r->delta);
      return 1;
    }
  }
  out[0] = cp;
  return 1;
}

// Hangul syllables decompose arithmetically (Unicode 3.12).
constexpr char32_t kSBase = 0xAC00, kLBase = 0x1100, kVBase = 0x1161, kTBase = 0x11A7;
constexpr char32_t kVCount = 21, kTCount = 28, kNCount = kVCount * kTCount, kSCount = 11172;

// ASCII fast path: bit 0 drop, 1 space, 2 punct.
struct AsciiTable {
  std::uint8_t flags[128];
  constexpr AsciiTable() : flags() {
    for (int c = 0; c < 32; ++c) flags[c] = 1;
    flags[127] = 1;
    flags[9] = 2;
    flags[10] = 2;
    flags[13] = 2;
    flags[11] = 1;  // \v and \f are Cc: removed before the whitespace check
    flags[12] = 1;
    flags[32] = 2;
    for (int c = 33; c <= 47; ++c) flags[c] = 4;
    for (int c = 58; c <= 64; ++c) flags[c] = 4;
    for (int c = 91; c <= 96; ++c) flags[c] = 4;
    for (int c = 123; c <= 126; ++c) flags[c] = 4;
  }
};
constexpr AsciiTable kAscii;

}  // namespace

bool is_drop(char32_t cp) {
  if (cp < 128) return kAscii.flags[cp] & 1;
  return in_ranges(tables::kDrop, tables::kDropCount, cp);
}
bool is_space(char32_t cp) {
  if (cp < 128) return kAscii.flags[cp] & 2;
  return in_ranges(tables::kSpace, tables::kSpaceCount, cp);
}
bool is_cjk(char32_t cp) { return cp >= 0x3400 && in_ranges(tables::kCjk, tables::kCjkCount, cp); }
bool is_punct(char32_t cp) {
  if (cp < 128) return kAscii.flags[cp] & 4;
  return in_ranges(tables::kPunct, tables::kPunctCount, cp);
}
bool is_mark(char32_t cp) { return cp >= 0x300 && in_ranges(tables::kMark, tables::kMarkCount, cp); }

std::size_t nfd(char32_t cp, char32_t* out) {
  if (cp < 0xC0) {
    out[0] = cp;
    return 1;
  }
  if (cp >= kSBase && cp < kSBase + kSCount) {
    const char32_t s = cp - kSBase;
    out[0] = kLBase + s / kNCount;
    out[1] = kVBase + (s % kNCount) / kTCount;
    const char32_t t = kTBase + s % kTCount;
    if (t == kTBase) return 2;
    out[2] = t;
    return 3;
  }
  return map_lookup(tables::kNfdRuns, tables::kNfdRunCount, tables::kNfdMulti, tables::kNfdMultiCount,
                    tables::kNfdPool, cp, out);
}

std::size_t lower(char32_t cp, char32_t* out) {
  if (cp < 128) {
    out[0] = (cp >= 'A' && cp <= 'Z') ? cp + 32 : cp;
    return 1;
  }
  return map_lookup(tables::kLowerRuns, tables::kLowerRunCount, tables::kLowerMulti, tables::kLowerMultiCount,
                    tables::kLowerPool, cp, out);
}

}  // namespace edgenlp::unicode
