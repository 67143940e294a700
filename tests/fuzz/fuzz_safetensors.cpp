// The safetensors header parser (issue 26) over any bytes: an error, or a
// header whose every promise holds: tensors in buffer order, each inside
// the buffer, none overlapping the next, each as long as its dtype and
// shape say, holes only when allowed. The first input byte picks the
// limits, so the caps and allow_holes are fuzzed too.
#include "safetensors/header.hpp"

#include <ballast/dtype.hpp>

#include <cstdlib>
#include <unordered_set>

namespace {
void require(bool ok) {
  if (!ok) std::abort();
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  ballast::safetensors::HeaderLimits limits;
  limits.allow_holes = (data[0] & 1) != 0;
  if ((data[0] & 2) != 0) limits.max_tensors = 4;
  if ((data[0] & 4) != 0) limits.max_header_bytes = 64;
  if ((data[0] & 8) != 0) limits.max_tensor_elements = 1000;
  const auto file = std::as_bytes(std::span(data + 1, size - 1));
  auto header = ballast::safetensors::parse_header(file, limits);
  if (!header.ok()) {
    require(!header.error().message.empty());
    return 0;
  }
  const auto& h = *header;
  require(h.buffer_start == 8 + h.json_bytes && h.buffer_start <= file.size());
  require(h.json_bytes <= limits.max_header_bytes);
  require(h.tensors.size() <= limits.max_tensors);
  const std::uint64_t buffer = file.size() - h.buffer_start;
  std::uint64_t covered = 0;
  std::uint64_t hole_bytes = 0;
  std::unordered_set<std::string> names;
  for (const auto& t : h.tensors) {
    require(names.insert(t.name).second);
    require(t.dtype != nullptr && t.begin <= t.end && t.end <= buffer && t.begin >= covered);
    hole_bytes += t.begin - covered;
    const auto elements = ballast::element_count(t.shape);
    require(elements && *elements <= limits.max_tensor_elements);
    for (std::int64_t d : t.shape)
      require(*elements != 0 || static_cast<std::uint64_t>(d) <= limits.max_tensor_elements);
    require(ballast::dtype_storage_bytes(t.dtype->type, *elements) == t.end - t.begin);
    covered = t.end;
  }
  hole_bytes += buffer - covered;
  std::uint64_t reported = 0;
  for (const auto& r : h.holes) reported += r.length;
  require(reported == hole_bytes);
  require(limits.allow_holes || hole_bytes == 0);
  return 0;
}
