// What inspect and verify share: loading a model with a one-line error, and
// the per-file accounting of mapped, referenced and dead external bytes.
#pragma once

#include <ballast/model.hpp>

#include <filesystem>
#include <string_view>
#include <vector>

namespace ballast::cli {

// Prints "ballast <command>: <Error::to_string()>" as one line on stderr.
void report_error(std::string_view command, const Error& error);

struct FileAccounting {
  MappingId mapping = 0;
  std::filesystem::path path;
  std::uint64_t mapped_bytes = 0;
  std::uint64_t referenced_bytes = 0;
  std::uint64_t unreferenced_bytes = 0;  // mapped - referenced - header
  std::uint64_t header_bytes = 0;        // the format's own header (safetensors' JSON)
  std::vector<ByteRange> referenced_ranges;  // merged, sorted
  std::vector<ByteRange> dead_ranges;        // mapped bytes nothing references
};

// One entry per mapped external file, in mapping-id order.
std::vector<FileAccounting> account_external_files(const WeightStore& store);

// The weights in file order, paired with their names.
struct NamedWeight {
  std::string_view name;
  const WeightRef* ref = nullptr;
};
std::vector<NamedWeight> weights_in_order(const Model& model);

}  // namespace ballast::cli
