// SHA-256 (FIPS 180-4).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace edgenlp {

class Sha256 {
 public:
  Sha256();
  void update(const void* data, std::size_t len);
  // Finish and return the lowercase hex digest. The object is spent afterwards.
  std::string hex_digest();

 private:
  void block(const std::uint8_t* p);
  std::uint32_t h_[8];
  std::uint8_t buf_[64];
  std::size_t buf_len_ = 0;
  std::uint64_t total_ = 0;
};

// Hex digest of a whole file. Returns false when it cannot be read.
bool sha256_file(const std::string& path, std::string* hex);

}  // namespace edgenlp
