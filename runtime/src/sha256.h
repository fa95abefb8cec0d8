// SHA-256 (FIPS 180-4) with hardware compression where the CPU has it.
//
// The compression function is picked once per process: SHA-NI on x86-64
// (cpuid), the ARMv8 SHA2 instructions on aarch64 (getauxval(AT_HWCAP)),
// the portable scalar code otherwise. EDGENLP_SHA256=scalar in the
// environment forces the scalar code (for comparisons).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace edgenlp {

// Process n 64-byte blocks into state (a..h, host order).
using Sha256Compress = void (*)(std::uint32_t state[8], const std::uint8_t* data, std::size_t n);

struct Sha256Impl {
  const char* name;  // "scalar", "sha-ni", "armv8-sha2"
  Sha256Compress compress;
};

// Every implementation this CPU can run; scalar (the reference) first.
std::vector<Sha256Impl> sha256_impls();
// The implementation Sha256 uses by default.
const Sha256Impl& sha256_default_impl();

class Sha256 {
 public:
  Sha256();
  explicit Sha256(Sha256Compress compress);
  void update(const void* data, std::size_t len);
  // Finish and return the lowercase hex digest. The object is spent afterwards.
  std::string hex_digest();

 private:
  Sha256Compress compress_;
  std::uint32_t h_[8];
  std::uint8_t buf_[64];
  std::size_t buf_len_ = 0;
  std::uint64_t total_ = 0;
};

// Hex digest of a buffer.
std::string sha256_hex(const void* data, std::size_t len);

// Hex digest of a whole file. Returns false when it cannot be read.
bool sha256_file(const std::string& path, std::string* hex);

// Implementations in their own translation units (compiled with the ISA flags
// they need; only called after the runtime check).
void sha256_compress_scalar(std::uint32_t state[8], const std::uint8_t* data, std::size_t n);
#if defined(__x86_64__) || defined(_M_X64)
void sha256_compress_shani(std::uint32_t state[8], const std::uint8_t* data, std::size_t n);
#endif
#if defined(__aarch64__)
void sha256_compress_armv8(std::uint32_t state[8], const std::uint8_t* data, std::size_t n);
#endif

}  // namespace edgenlp
