// Resolving a tensor's external_data entries to a validated range of a
// mapped file. External data is a classic attack surface: every location
// is checked as text, then opened beneath the model directory's handle
// (store/safe_open.hpp), and the descriptor that was checked is the one
// mapped. docs/security.md has the rules.
#pragma once

#include <ballast/dtype.hpp>
#include <ballast/onnx_loader.hpp>

#include "onnx/wire_reader.hpp"
#include "store/safe_open.hpp"

#include <span>
#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace ballast::onnx {

struct ExternalEntry {
  std::string_view key;
  std::string_view value;
  std::uint64_t offset = 0;  // of the entry in the .onnx, for errors
};

// Lexical checks on a location as written: not empty, relative, no `..`
// component (either separator), no NUL. path_escapes / malformed otherwise.
Status check_location_text(std::string_view location);

// `text` quoted for an error message, cut to `limit` bytes (with the full
// length said) so that a hostile name cannot make messages unbounded.
std::string shown(std::string_view text, std::size_t limit = 160);

// What a path_escapes refusal of a file beneath the model's directory
// adds: with LoadOptions::allow_model_real_dir set, that the file is outside
// the second root too; without, the option's name, since a Hugging Face
// cache snapshot (files symlinked into ../../blobs/) is where a reader
// meets this refusal and needs the option. `model` names the file whose
// directory is the root ("the model file", "'model.safetensors.index.json'").
std::string real_dir_hint(bool allow_model_real_dir, std::string_view model);
// The refusal of a data file with `links` hard links (LoadOptions::allow_hard_links).
std::string hard_link_refusal(std::uint64_t links);
class ExternalResolver {
 public:
  // `model_dir` is where relative locations start; `model_file` names the
  // .onnx in errors. Maps files into `store`, once per file.
  // `real_model_dir` is the directory holding the model file's real path
  // (the second root, used only with LoadOptions::allow_model_real_dir).
  ExternalResolver(std::filesystem::path model_dir, std::string model_file, const LoadOptions& options,
                   WeightStore& store, std::optional<store::Root> real_model_dir = std::nullopt);

  // Builds the ExternalLocation of tensor `tensor` (dtype x elements give
  // the expected length). Unknown keys are kept and reported in `notes`.
  Status resolve(std::span<const ExternalEntry> entries, std::string_view tensor, DataType dtype,
                 std::uint64_t elements, std::uint64_t tensor_offset, std::vector<LoadNote>& notes,
                 ExternalLocation& loc);

 private:
  struct ResolvedFile {
    std::shared_ptr<const ExternalFile> file;  // shared by every weight in it
    std::uint64_t size = 0;
  };
  // Points into cache_ (stable: unordered_map nodes do not move).
  // nullptr (and `error` set) when the location is refused.
  const ResolvedFile* open_location(std::string_view location, Error& error);
  Status open_model_dir();

  std::filesystem::path model_dir_;
  std::optional<store::Root> model_root_;  // opened once, on the first external location
  std::optional<store::Root> real_model_root_;
  std::string model_file_;
  const LoadOptions& options_;
  WeightStore& store_;
  // Many tensors share one file: resolve and open each location once
  // (LoadOptions::max_external_locations bounds how many there are).
  std::unordered_map<std::string, ResolvedFile> cache_;
  // Consecutive tensors nearly always name the same file: skip the hash then.
  const ResolvedFile* last_file_ = nullptr;
};

}  // namespace ballast::onnx
