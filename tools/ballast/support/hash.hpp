// Streaming digests over weight bytes (OpenSSL EVP): SHA-256 for
// `inspect --hash`, SHA-1 for ONNX external-data `checksum` entries.
#pragma once

#include <ballast/weight_store.hpp>

#include <functional>
#include <memory>
#include <string>

namespace ballast::cli {

enum class Digest { sha1, sha256 };

// Lower-case hex digest of `bytes`, fed in chunks so a progress callback can
// follow multi-GiB mapped ranges. Empty string if OpenSSL fails.
std::string hex_digest(Digest digest, Bytes bytes, const std::function<void(std::uint64_t)>& on_chunk = {});

// The same, fed piece by piece (for bytes copied out of a file in chunks
// rather than read in place).
class Digester {
 public:
  explicit Digester(Digest digest);
  ~Digester();
  Digester(const Digester&) = delete;
  Digester& operator=(const Digester&) = delete;

  // False once OpenSSL failed (every later call is then a no-op).
  bool update(Bytes bytes);
  // Lower-case hex; empty if OpenSSL failed at any point.
  std::string hex_final();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace ballast::cli
