#include "support/verify.hpp"

#include "support/hash.hpp"
#include "support/model.hpp"

#include <ballast/printable.hpp>

#include <algorithm>
#include <cctype>
#include <memory>
#include <new>
#include <set>
#include <string>

namespace ballast::cli {
namespace {

std::string lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return s;
}

// Names and paths escaped (ballast/printable.hpp): one FAIL line each, that
// no name can rewrite or hide.
std::string where(std::string_view name, const WeightRef& w) {
  return "tensor=" + printable(name) + " file=" + printable(w.external->resolved().string()) +
         " offset=" + std::to_string(w.external->offset) + " length=" + std::to_string(w.external->length);
}

constexpr std::size_t kChunk = std::size_t{8} << 20;

}  // namespace

std::uint64_t checksummed_bytes(const Model& model) {
  std::uint64_t total = 0;
  for (const auto& w : weights_in_order(model))
    if (w.ref->is_external() && w.ref->external->checksum) total += w.ref->external->length;
  return total;
}

VerifyCounts verify_weights(const Model& model, std::ostream& out, const std::function<void(std::uint64_t)>& on_hashed) {
  const WeightStore& store = model.store();
  VerifyCounts n;
  std::unique_ptr<std::byte[]> buffer;
  std::set<std::string> changed;  // files already reported as changed: one line each
  for (const auto& [name, ref] : weights_in_order(model)) {
    if (!ref->is_external()) continue;
    ++n.ranges;
    const std::optional<Bytes> bytes = store.bytes(*ref);
    if (!bytes || bytes->size() != ref->external->length) {
      ++n.ranges_bad;
      out << "FAIL out_of_bounds: range outside its file: " << where(name, *ref) << '\n';
      continue;
    }
    if (!ref->external->checksum) continue;
    ++n.checksums;
    const std::string file = ref->external->resolved().string();
    if (changed.count(file) != 0) {  // reported once already; these bytes cannot be verified
      ++n.checksums_bad;
      continue;
    }
    const std::string expected = lower(*ref->external->checksum);
    if (!buffer) buffer.reset(new (std::nothrow) std::byte[kChunk]);
    Digester digest(Digest::sha1);
    Status read;
    const std::uint64_t length = ref->external->length;
    for (std::uint64_t at = 0; buffer && at < length && read.ok();) {
      const std::span<std::byte> part(buffer.get(), static_cast<std::size_t>(std::min<std::uint64_t>(kChunk, length - at)));
      read = store.copy_bytes(*ref, at, part);
      if (!read.ok()) break;
      digest.update(part);
      at += part.size();
      if (on_hashed) on_hashed(part.size());
    }
    if (!read.ok()) {
      ++n.checksums_bad;
      ++n.files_changed;
      changed.insert(file);
      Error e = read.error();
      e.tensor = std::string(name);
      out << "FAIL " << printable(e.to_string()) << '\n';
      continue;
    }
    const std::string actual = buffer ? digest.hex_final() : std::string();
    if (actual != expected) {
      ++n.checksums_bad;
      out << "FAIL checksum_mismatch: " << where(name, *ref) << " expected sha1 " << expected << ", got "
          << (actual.empty() ? "(digest failed)" : actual) << '\n';
    }
  }
  // Then the files themselves: still the ones opened, still at their paths.
  for (MappingId id = 1; id <= store.mapping_count(); ++id) {
    const std::string file = store.mapping_path(id).value_or("").string();
    if (changed.count(file) != 0) continue;
    Status s = store.check_unchanged(id);
    if (s.ok()) s = store.check_path(id);
    if (!s.ok()) {
      ++n.files_changed;
      out << "FAIL " << printable(s.to_string()) << '\n';
    }
  }
  return n;
}

}  // namespace ballast::cli
