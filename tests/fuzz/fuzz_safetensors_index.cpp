// The sharded-checkpoint index parser (issue 26) over any bytes: an error,
// or a weight_map with no name twice and every shard a string.
#include "safetensors/index.hpp"

#include <cstdlib>
#include <string>
#include <unordered_set>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view json(reinterpret_cast<const char*>(data), size);
  auto index = ballast::safetensors::parse_index(json, 64);
  if (!index.ok()) {
    if (index.error().message.empty()) std::abort();
    return 0;
  }
  if (index->weight_map.size() > 64) std::abort();
  std::unordered_set<std::string> names;
  for (const auto& [tensor, shard] : index->weight_map)
    if (!names.insert(tensor).second) std::abort();
  return 0;
}
