// Streaming digests over weight bytes (OpenSSL EVP): SHA-256 for
// `inspect --hash`, SHA-1 for ONNX external-data `checksum` entries.
#pragma once

#include <ballast/weight_store.hpp>

#include <functional>
#include <string>

namespace ballast::cli {

enum class Digest { sha1, sha256 };

// Lower-case hex digest of `bytes`, fed in chunks so a progress callback can
// follow multi-GiB mapped ranges. Empty string if OpenSSL fails.
std::string hex_digest(Digest digest, Bytes bytes, const std::function<void(std::uint64_t)>& on_chunk = {});

}  // namespace ballast::cli
