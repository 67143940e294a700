#include "support/hash.hpp"

#include <openssl/evp.h>

#include <algorithm>
#include <memory>

namespace ballast::cli {

struct Digester::Impl {
  std::unique_ptr<EVP_MD_CTX, decltype(&EVP_MD_CTX_free)> ctx{EVP_MD_CTX_new(), &EVP_MD_CTX_free};
  bool ok = false;
};

Digester::Digester(Digest digest) : impl_(std::make_unique<Impl>()) {
  const EVP_MD* md = digest == Digest::sha1 ? EVP_sha1() : EVP_sha256();
  impl_->ok = impl_->ctx && EVP_DigestInit_ex(impl_->ctx.get(), md, nullptr) == 1;
}

Digester::~Digester() = default;

bool Digester::update(Bytes bytes) {
  if (impl_->ok && !bytes.empty()) impl_->ok = EVP_DigestUpdate(impl_->ctx.get(), bytes.data(), bytes.size()) == 1;
  return impl_->ok;
}

std::string Digester::hex_final() {
  if (!impl_->ok) return {};
  unsigned char out[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  impl_->ok = EVP_DigestFinal_ex(impl_->ctx.get(), out, &len) == 1;
  if (!impl_->ok) return {};
  static constexpr char kHex[] = "0123456789abcdef";
  std::string hex;
  hex.reserve(2 * len);
  for (unsigned int i = 0; i < len; ++i) {
    hex += kHex[out[i] >> 4];
    hex += kHex[out[i] & 0xf];
  }
  return hex;
}

std::string hex_digest(Digest digest, Bytes bytes, const std::function<void(std::uint64_t)>& on_chunk) {
  // Chunks keep the progress bar moving; the mapping is read in place.
  constexpr std::size_t kChunk = std::size_t{8} << 20;
  Digester d(digest);
  for (std::size_t at = 0; at < bytes.size();) {
    const std::size_t n = std::min(kChunk, bytes.size() - at);
    if (!d.update(bytes.subspan(at, n))) return {};
    at += n;
    if (on_chunk) on_chunk(n);
  }
  return d.hex_final();
}

}  // namespace ballast::cli
