// The GGUF header parser (issue 27) over any bytes: an error with a message,
// or a header whose every promise holds: a power-of-two alignment, the data
// section aligned and past the tensor infos, at most four dims per tensor,
// each tensor as long as its type and dims say, inside the file, aligned,
// overlapping no other, every name and key once. The first input byte picks
// the limits, so the caps are fuzzed too.
#include "gguf/header.hpp"

#include <ballast/dtype.hpp>

#include <algorithm>
#include <cstdlib>
#include <unordered_set>

namespace {
void require(bool ok) {
  if (!ok) std::abort();
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  ballast::gguf::HeaderLimits limits;
  if ((data[0] & 1) != 0) limits.max_tensors = 4;
  if ((data[0] & 2) != 0) limits.max_metadata_entries = 4;
  if ((data[0] & 4) != 0) limits.max_array_elements = 16;
  if ((data[0] & 8) != 0) limits.max_string_bytes = 64;
  if ((data[0] & 16) != 0) limits.max_tensor_elements = 1000;
  const auto file = std::as_bytes(std::span(data + 1, size - 1));
  auto header = ballast::gguf::parse_header(file, limits);
  if (!header.ok()) {
    require(!header.error().message.empty());
    require(header.error().offset.has_value());
    return 0;
  }
  const auto& h = *header;
  require(h.version == 2 || h.version == 3);
  require(h.alignment != 0 && (h.alignment & (h.alignment - 1)) == 0);
  require(h.header_bytes >= 24 && h.header_bytes <= h.data_start && h.data_start - h.header_bytes < h.alignment);
  require(h.data_start % h.alignment == 0);
  require(h.tensors.size() <= limits.max_tensors && h.metadata.size() <= limits.max_metadata_entries);
  std::unordered_set<std::string> keys;
  for (const auto& m : h.metadata) require(!m.key.empty() && keys.insert(m.key).second);
  std::unordered_set<std::string> names;
  std::vector<std::pair<std::uint64_t, std::uint64_t>> ranges;
  for (const auto& t : h.tensors) {
    require(!t.name.empty() && t.name.size() <= ballast::gguf::kMaxNameBytes && names.insert(t.name).second);
    require(t.ne.size() <= ballast::gguf::kMaxDims);
    std::uint64_t elements = 1;
    for (std::uint64_t d : t.ne) require(!__builtin_mul_overflow(elements, d, &elements));
    require(elements <= limits.max_tensor_elements);
    for (std::uint64_t d : t.ne) require(elements != 0 || d <= limits.max_tensor_elements);
    require(ballast::dtype_storage_bytes(t.dtype, elements) == t.bytes);
    require(t.offset % h.alignment == 0);
    require(h.data_start + t.offset + t.bytes <= file.size());
    if (t.bytes != 0) ranges.emplace_back(t.offset, t.offset + t.bytes);
  }
  std::sort(ranges.begin(), ranges.end());
  for (std::size_t i = 1; i < ranges.size(); ++i) require(ranges[i].first >= ranges[i - 1].second);
  return 0;
}
