// The files a model names besides its own (a sharded checkpoint's shards,
// a GGUF split set's parts): opened beneath the first file's directory with
// the rules of ONNX external data (external_data.hpp), each mapped once,
// and read the way a header should be read at open. Shared by every format
// whose model spans files, so the path rules stay one.
#pragma once

#include <ballast/model.hpp>
#include <ballast/weight_store.hpp>

#include "store/safe_open.hpp"

#include <sys/stat.h>

#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>

namespace ballast::onnx {

// `path` made absolute (unchanged when that fails: the open names the error).
std::filesystem::path absolute_of(const std::filesystem::path& path);

// Sets e.file when the error names no file yet.
Error in_file(Error e, const std::string& file);

std::shared_ptr<const ExternalFile> external_file(std::string location, std::filesystem::path resolved,
                                                  const struct stat& st);

// madvise(MADV_RANDOM) over a mapping for as long as it lives; MADV_NORMAL
// (every mapping's default: ballast sets no other) after. Opening reads a
// header and nothing else: without it, the faults on the header's pages
// would have the kernel read ahead into the tensors (128 KiB and more per
// fault), which an engine that pages weights in later, or never, does not
// want read at open. Advice only: a kernel that refuses it changes nothing
// but the readahead.
class NoReadahead {
 public:
  explicit NoReadahead(Bytes mapping);
  ~NoReadahead();
  NoReadahead(const NoReadahead&) = delete;
  NoReadahead& operator=(const NoReadahead&) = delete;

 private:
  Bytes mapping_;
};

// Runs `parse` over mapping `id`'s bytes while the mapping is armed (a page
// a truncation took reads as zeros instead of killing the process) and
// without readahead, then checks the file is unchanged: a file that changed
// meanwhile is the error, not whatever its zeros parsed as.
template <class Parse>
auto read_mapped_header(WeightStore& store, MappingId id, const std::string& display, const char* context,
                        Parse&& parse)
    -> decltype(parse(Bytes{}));

// One sibling file, opened and mapped.
struct Sibling {
  MappingId id = 0;
  std::shared_ptr<const ExternalFile> file;
  std::filesystem::path target;  // the file's real path, for messages
};

class SiblingOpener {
 public:
  // `first` is the file that names the others; `what` says what they are
  // ("shard", "split part") and `namer` what names them ("the index").
  SiblingOpener(const std::filesystem::path& first, const LoadOptions& options, WeightStore& store, std::string what,
                std::string namer);

  Status open_roots(int first_fd, const struct stat& first_st);

  // Opens and maps `location` (relative to the first file's directory).
  // Two names for one file are refused: the store would map it once, and
  // its header would be read twice as two parts.
  Result<Sibling> open(const std::string& location);

  // Records that mapping `id` is already open under `location` (the first
  // file itself, when it is one of the parts).
  void note_open(MappingId id, const std::string& location) { names_.try_emplace(id, location); }

 private:
  std::filesystem::path dir_;
  std::string first_;
  const LoadOptions& options_;
  WeightStore& store_;
  std::string what_;
  std::string namer_;
  std::optional<store::Root> root_;
  std::optional<store::Root> real_root_;
  std::unordered_map<MappingId, std::string> names_;
};

}  // namespace ballast::onnx

#include "onnx/sibling_files_inl.hpp"
