// SHA-256 compression with the ARMv8 cryptography extension (SHA2
// instructions). Compiled with -march=armv8-a+crypto; sha256.cpp only calls
// it when getauxval(AT_HWCAP) reports HWCAP_SHA2. Keep this file free of
// other code: everything here may use those instructions.
// Only <cstdint>/<cstddef> and intrinsics here: an inline function from a
// standard header compiled with these flags could be the copy the linker keeps.
#include <cstddef>
#include <cstdint>

#include "sha256_constants.h"

#if defined(__aarch64__)
#include <arm_neon.h>

namespace edgenlp {
namespace {


inline uint32x4_t load_be(const std::uint8_t* p) { return vreinterpretq_u32_u8(vrev32q_u8(vld1q_u8(p))); }

}  // namespace

void sha256_compress_armv8(std::uint32_t state[8], const std::uint8_t* data, std::size_t n);

void sha256_compress_armv8(std::uint32_t state[8], const std::uint8_t* data, std::size_t n) {
  uint32x4_t abcd = vld1q_u32(&state[0]);
  uint32x4_t efgh = vld1q_u32(&state[4]);
  for (; n > 0; --n, data += 64) {
    const uint32x4_t abcd0 = abcd, efgh0 = efgh;
    uint32x4_t m[4] = {load_be(data), load_be(data + 16), load_be(data + 32), load_be(data + 48)};
    // Four rounds per step; steps 0..11 also extend the schedule by four words.
#pragma GCC unroll 16
    for (int g = 0; g < 16; ++g) {
      const uint32x4_t wk = vaddq_u32(m[g & 3], vld1q_u32(&kSha256K[4 * g]));
      if (g < 12)
        m[g & 3] = vsha256su1q_u32(vsha256su0q_u32(m[g & 3], m[(g + 1) & 3]), m[(g + 2) & 3], m[(g + 3) & 3]);
      const uint32x4_t prev = abcd;
      abcd = vsha256hq_u32(abcd, efgh, wk);
      efgh = vsha256h2q_u32(efgh, prev, wk);
    }
    abcd = vaddq_u32(abcd, abcd0);
    efgh = vaddq_u32(efgh, efgh0);
  }
  vst1q_u32(&state[0], abcd);
  vst1q_u32(&state[4], efgh);
}

}  // namespace edgenlp
#endif
