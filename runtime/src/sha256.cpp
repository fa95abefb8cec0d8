#include "sha256.h"

#include "sha256_constants.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <vector>

#if defined(__x86_64__)
#include <cpuid.h>
#endif
#if defined(__aarch64__) && defined(__linux__)
#include <sys/auxv.h>
#ifndef HWCAP_SHA2
#define HWCAP_SHA2 (1 << 6)
#endif
#endif

namespace edgenlp {
namespace {


inline std::uint32_t rotr(std::uint32_t x, int n) { return (x >> n) | (x << (32 - n)); }

bool cpu_has_shani() {
#if defined(__x86_64__)
  unsigned a = 0, b = 0, c = 0, d = 0;
  if (__get_cpuid_max(0, nullptr) < 7) return false;
  __cpuid(1, a, b, c, d);
  const bool ssse3 = (c >> 9) & 1, sse41 = (c >> 19) & 1;
  __cpuid_count(7, 0, a, b, c, d);
  const bool sha = (b >> 29) & 1;
  return ssse3 && sse41 && sha;
#else
  return false;
#endif
}

bool cpu_has_armv8_sha2() {
#if defined(__aarch64__) && defined(__linux__)
  return (getauxval(AT_HWCAP) & HWCAP_SHA2) != 0;
#else
  return false;
#endif
}

}  // namespace

void sha256_compress_scalar(std::uint32_t state[8], const std::uint8_t* p, std::size_t n) {
  for (; n > 0; --n, p += 64) {
    std::uint32_t w[64];
    for (int i = 0; i < 16; ++i) {
      w[i] = (std::uint32_t(p[4 * i]) << 24) | (std::uint32_t(p[4 * i + 1]) << 16) |
             (std::uint32_t(p[4 * i + 2]) << 8) | std::uint32_t(p[4 * i + 3]);
    }
    for (int i = 16; i < 64; ++i) {
      const std::uint32_t s0 = rotr(w[i - 15], 7) ^ rotr(w[i - 15], 18) ^ (w[i - 15] >> 3);
      const std::uint32_t s1 = rotr(w[i - 2], 17) ^ rotr(w[i - 2], 19) ^ (w[i - 2] >> 10);
      w[i] = w[i - 16] + s0 + w[i - 7] + s1;
    }
    std::uint32_t a = state[0], b = state[1], c = state[2], d = state[3];
    std::uint32_t e = state[4], f = state[5], g = state[6], h = state[7];
    for (int i = 0; i < 64; ++i) {
      const std::uint32_t s1 = rotr(e, 6) ^ rotr(e, 11) ^ rotr(e, 25);
      const std::uint32_t ch = (e & f) ^ (~e & g);
      const std::uint32_t t1 = h + s1 + ch + kSha256K[i] + w[i];
      const std::uint32_t s0 = rotr(a, 2) ^ rotr(a, 13) ^ rotr(a, 22);
      const std::uint32_t maj = (a & b) ^ (a & c) ^ (b & c);
      const std::uint32_t t2 = s0 + maj;
      h = g;
      g = f;
      f = e;
      e = d + t1;
      d = c;
      c = b;
      b = a;
      a = t1 + t2;
    }
    state[0] += a, state[1] += b, state[2] += c, state[3] += d;
    state[4] += e, state[5] += f, state[6] += g, state[7] += h;
  }
}

std::vector<Sha256Impl> sha256_impls() {
  std::vector<Sha256Impl> out = {{"scalar", &sha256_compress_scalar}};
#if defined(__x86_64__)
  if (cpu_has_shani()) out.push_back({"sha-ni", &sha256_compress_shani});
#endif
#if defined(__aarch64__)
  if (cpu_has_armv8_sha2()) out.push_back({"armv8-sha2", &sha256_compress_armv8});
#endif
  return out;
}

const Sha256Impl& sha256_default_impl() {
  static const Sha256Impl impl = [] {
    const std::vector<Sha256Impl> all = sha256_impls();
    const char* env = std::getenv("EDGENLP_SHA256");
    if (env != nullptr && std::strcmp(env, "scalar") == 0) return all.front();
    return all.back();
  }();
  return impl;
}

Sha256::Sha256() : Sha256(sha256_default_impl().compress) {}

Sha256::Sha256(Sha256Compress compress)
    : compress_(compress),
      h_{0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a, 0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19} {}

void Sha256::update(const void* data, std::size_t len) {
  const auto* p = static_cast<const std::uint8_t*>(data);
  total_ += len;
  if (buf_len_ > 0) {
    const std::size_t take = std::min(len, 64 - buf_len_);
    std::memcpy(buf_ + buf_len_, p, take);
    buf_len_ += take;
    p += take;
    len -= take;
    if (buf_len_ < 64) return;
    compress_(h_, buf_, 1);
    buf_len_ = 0;
  }
  if (len >= 64) {
    compress_(h_, p, len / 64);
    p += len & ~std::size_t{63};
    len &= 63;
  }
  if (len > 0) {
    std::memcpy(buf_, p, len);
    buf_len_ = len;
  }
}

std::string Sha256::hex_digest() {
  const std::uint64_t bits = total_ * 8;
  std::uint8_t pad[72] = {0x80};
  const std::size_t zeros = (buf_len_ < 56 ? 56 : 120) - buf_len_;
  for (int i = 0; i < 8; ++i) pad[zeros + static_cast<std::size_t>(i)] = static_cast<std::uint8_t>(bits >> (56 - 8 * i));
  update(pad, zeros + 8);
  static const char* hexd = "0123456789abcdef";
  std::string out(64, '0');
  for (int i = 0; i < 8; ++i) {
    for (int j = 0; j < 4; ++j) {
      const std::uint8_t byte = static_cast<std::uint8_t>(h_[i] >> (24 - 8 * j));
      out[static_cast<std::size_t>(8 * i + 2 * j)] = hexd[byte >> 4];
      out[static_cast<std::size_t>(8 * i + 2 * j + 1)] = hexd[byte & 15];
    }
  }
  return out;
}

std::string sha256_hex(const void* data, std::size_t len) {
  Sha256 sha;
  sha.update(data, len);
  return sha.hex_digest();
}

bool sha256_file(const std::string& path, std::string* hex) {
  std::unique_ptr<std::FILE, int (*)(std::FILE*)> f(std::fopen(path.c_str(), "rb"), &std::fclose);
  if (!f) return false;
  Sha256 sha;
  std::vector<std::uint8_t> buf(1 << 20);
  while (true) {
    const std::size_t n = std::fread(buf.data(), 1, buf.size(), f.get());
    if (n > 0) sha.update(buf.data(), n);
    if (n < buf.size()) {
      if (std::ferror(f.get())) return false;
      break;
    }
  }
  *hex = sha.hex_digest();
  return true;
}

}  // namespace edgenlp
