// SHA-256 compression with the x86 SHA extensions (SHA-NI). Compiled with
// -msha -msse4.1; sha256.cpp only calls it after checking cpuid. Keep this
// file free of other code: everything here may use those instructions.
// Only <cstdint>/<cstddef> and intrinsics here: an inline function from a
// standard header compiled with these flags could be the copy the linker keeps.
#include <cstddef>
#include <cstdint>

#include "sha256_constants.h"

#if defined(__x86_64__)
#include <immintrin.h>

namespace edgenlp {
namespace {


}  // namespace

void sha256_compress_shani(std::uint32_t state[8], const std::uint8_t* data, std::size_t n);

void sha256_compress_shani(std::uint32_t state[8], const std::uint8_t* data, std::size_t n) {
  const __m128i bswap = _mm_set_epi64x(0x0c0d0e0f08090a0bULL, 0x0405060700010203ULL);
  // state a..h -> the (ABEF, CDGH) register layout sha256rnds2 works on
  __m128i tmp = _mm_shuffle_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(&state[0])), 0xB1);  // CDAB
  __m128i s1 = _mm_shuffle_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(&state[4])), 0x1B);   // EFGH
  __m128i s0 = _mm_alignr_epi8(tmp, s1, 8);     // ABEF
  s1 = _mm_blend_epi16(s1, tmp, 0xF0);          // CDGH

  for (; n > 0; --n, data += 64) {
    const __m128i abef = s0, cdgh = s1;
    __m128i m0 = _mm_shuffle_epi8(_mm_loadu_si128(reinterpret_cast<const __m128i*>(data + 0)), bswap);
    __m128i m1 = _mm_shuffle_epi8(_mm_loadu_si128(reinterpret_cast<const __m128i*>(data + 16)), bswap);
    __m128i m2 = _mm_shuffle_epi8(_mm_loadu_si128(reinterpret_cast<const __m128i*>(data + 32)), bswap);
    __m128i m3 = _mm_shuffle_epi8(_mm_loadu_si128(reinterpret_cast<const __m128i*>(data + 48)), bswap);

    // Four rounds on the schedule words in `cur`; meanwhile extend the
    // schedule: nxt gets its sha256msg2 step, prv its sha256msg1 step.
#define EDGENLP_QROUND(g, cur, nxt, prv)                                                   \
  do {                                                                                     \
    __m128i msg = _mm_add_epi32(cur, _mm_load_si128(reinterpret_cast<const __m128i*>(&kSha256K[4 * (g)]))); \
    s1 = _mm_sha256rnds2_epu32(s1, s0, msg);                                               \
    if ((g) >= 3 && (g) <= 14)                                                             \
      nxt = _mm_sha256msg2_epu32(_mm_add_epi32(nxt, _mm_alignr_epi8(cur, prv, 4)), cur);   \
    msg = _mm_shuffle_epi32(msg, 0x0E);                                                    \
    s0 = _mm_sha256rnds2_epu32(s0, s1, msg);                                               \
    if ((g) >= 1 && (g) <= 12) prv = _mm_sha256msg1_epu32(prv, cur);                      \
  } while (0)
    EDGENLP_QROUND(0, m0, m1, m3);
    EDGENLP_QROUND(1, m1, m2, m0);
    EDGENLP_QROUND(2, m2, m3, m1);
    EDGENLP_QROUND(3, m3, m0, m2);
    EDGENLP_QROUND(4, m0, m1, m3);
    EDGENLP_QROUND(5, m1, m2, m0);
    EDGENLP_QROUND(6, m2, m3, m1);
    EDGENLP_QROUND(7, m3, m0, m2);
    EDGENLP_QROUND(8, m0, m1, m3);
    EDGENLP_QROUND(9, m1, m2, m0);
    EDGENLP_QROUND(10, m2, m3, m1);
    EDGENLP_QROUND(11, m3, m0, m2);
    EDGENLP_QROUND(12, m0, m1, m3);
    EDGENLP_QROUND(13, m1, m2, m0);
    EDGENLP_QROUND(14, m2, m3, m1);
    EDGENLP_QROUND(15, m3, m0, m2);
#undef EDGENLP_QROUND
    s0 = _mm_add_epi32(s0, abef);
    s1 = _mm_add_epi32(s1, cdgh);
  }

  tmp = _mm_shuffle_epi32(s0, 0x1B);        // FEBA
  s1 = _mm_shuffle_epi32(s1, 0xB1);         // DCHG
  s0 = _mm_blend_epi16(tmp, s1, 0xF0);      // DCBA
  s1 = _mm_alignr_epi8(s1, tmp, 8);         // HGFE
  _mm_storeu_si128(reinterpret_cast<__m128i*>(&state[0]), s0);
  _mm_storeu_si128(reinterpret_cast<__m128i*>(&state[4]), s1);
}

}  // namespace edgenlp
#endif
