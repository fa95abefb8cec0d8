// SHA-256 compression with the ARMv8 cryptography extension (SHA2
// instructions). Compiled with -march=armv8-a+crypto; sha256.cpp only calls
// it when getauxval(AT_HWCAP) reports HWCAP_SHA2. Keep this file free of
// other code: everything here may use those instructions.
// Only <cstdint>/<cstddef> and intrinsics here: an inline function from a
// standard header compiled with these flags could be the copy the linker keeps.
#include <cstddef>
#include <cstdint>

#if defined(__aarch64__)
#include <arm_neon.h>

namespace edgenlp {
namespace {

alignas(16) constexpr std::uint32_t kK[64] = {
    0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5,
    0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174,
    0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
    0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967,
    0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
    0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
    0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
    0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2};

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
      const uint32x4_t wk = vaddq_u32(m[g & 3], vld1q_u32(&kK[4 * g]));
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
