#include "support/hash.hpp"

#include <openssl/evp.h>

#include <algorithm>
#include <memory>

namespace ballast::cli {

std::string hex_digest(Digest digest, Bytes bytes, const std::function<void(std::uint64_t)>& on_chunk) {
  // Chunks keep the progress bar moving; the mapping is read in place.
  constexpr std::size_t kChunk = std::size_t{8} << 20;
  std::unique_ptr<EVP_MD_CTX, decltype(&EVP_MD_CTX_free)> ctx(EVP_MD_CTX_new(), &EVP_MD_CTX_free);
  if (!ctx) return {};
  const EVP_MD* md = digest == Digest::sha1 ? EVP_sha1() : EVP_sha256();
  if (EVP_DigestInit_ex(ctx.get(), md, nullptr) != 1) return {};
  for (std::size_t at = 0; at < bytes.size();) {
    const std::size_t n = std::min(kChunk, bytes.size() - at);
    if (EVP_DigestUpdate(ctx.get(), bytes.data() + at, n) != 1) return {};
    at += n;
    if (on_chunk) on_chunk(n);
  }
  unsigned char out[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  if (EVP_DigestFinal_ex(ctx.get(), out, &len) != 1) return {};
  static constexpr char kHex[] = "0123456789abcdef";
  std::string hex;
  hex.reserve(2 * len);
  for (unsigned int i = 0; i < len; ++i) {
    hex += kHex[out[i] >> 4];
    hex += kHex[out[i] & 0xf];
  }
  return hex;
}

}  // namespace ballast::cli
