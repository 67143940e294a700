// WeightStore: a model's weights keyed by the graph value they initialize,
// resolved zero-copy, plus the accounting of which mapped bytes the graph
// actually references (the rest is dead weight).
#pragma once

#include <ballast/export.hpp>
#include <ballast/dims.hpp>
#include <ballast/dtype.hpp>
#include <ballast/status.hpp>

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

BALLAST_API_BEGIN

namespace ballast {

namespace store {
struct BALLAST_HIDDEN StoreAccess;  // the loader's way in (core/store/store_access.hpp)
}

// A graph value interned per model. Model::value_id / Model::value_name map
// between ids and names.
struct ValueId {
  std::uint32_t index = 0;
  friend bool operator==(ValueId, ValueId) = default;
  friend auto operator<=>(ValueId, ValueId) = default;
};

}  // namespace ballast

template <>
struct std::hash<ballast::ValueId> {
  std::size_t operator()(ballast::ValueId v) const noexcept { return std::hash<std::uint32_t>{}(v.index); }
};

namespace ballast {

using Bytes = std::span<const std::byte>;

// Where in the graph the weight was found.
enum class WeightSource : std::uint8_t {
  initializer,  // main graph initializer
  constant,     // value of a Constant node (main graph or subgraph)
  subgraph,     // initializer of a nested If/Loop/Scan body
};
std::string_view weight_source_name(WeightSource s) noexcept;

// An external-data file as a model names it, and what that resolved to.
// Every weight stored in the file shares one of these: opening a model
// with ten thousand external tensors copies no paths.
// The loader records which file it opened (device + inode) and the store
// finds the mapping by that identity: nothing is looked up by path again
// after the open. A hand-built ExternalFile may leave both 0; the store
// then matches `resolved` as text against the paths it mapped.
struct ExternalFile {
  std::string location;            // as written in the model
  std::filesystem::path resolved;  // absolute, symlinks resolved (for display; never re-opened)
  std::uint64_t device = 0;        // st_dev of the opened file, 0 = not recorded
  std::uint64_t inode = 0;         // st_ino of the opened file
};

// An external_data entry as written in the model, and what it resolved to.
struct ExternalLocation {
  std::shared_ptr<const ExternalFile> file;
  std::uint64_t offset = 0;
  std::uint64_t length = 0;         // computed from dtype x dims when absent
  bool length_was_given = false;
  std::optional<std::string> checksum;  // SHA-1 hex digest as written
  std::vector<std::pair<std::string, std::string>> unknown_keys;  // kept, reported

  // Empty when no file is set (a default-built location).
  const std::string& location() const noexcept { return file ? file->location : no_file().location; }
  const std::filesystem::path& resolved() const noexcept { return file ? file->resolved : no_file().resolved; }

 private:
  static const ExternalFile& no_file() noexcept {
    static const ExternalFile empty;
    return empty;
  }
};

struct WeightRef {
  DataType dtype = DataType::undefined;
  Dims dims;
  WeightSource source = WeightSource::initializer;

  enum class Storage : std::uint8_t {
    inline_borrowed,  // bytes point into the memory-mapped .onnx file
    inline_owned,     // decoded (e.g. varint int32_data); bytes point into `owned`
    external,         // bytes live in a mapped external-data file
  };
  Storage storage = Storage::inline_borrowed;

  Bytes inline_bytes;  // valid for inline_* storage
  std::shared_ptr<const std::vector<std::byte>> owned;  // inline_owned only
  std::optional<ExternalLocation> external;             // external only

  bool is_external() const noexcept { return storage == Storage::external; }
  // Length of the raw little-endian bytes this weight denotes.
  std::uint64_t byte_length() const noexcept {
    return is_external() ? external->length : inline_bytes.size();
  }
};

using MappingId = std::uint32_t;

struct MmapProvenance {
  MappingId mapping = 0;
  std::uint64_t offset = 0;
  std::uint64_t length = 0;
};

struct ByteRange {
  std::uint64_t offset = 0;
  std::uint64_t length = 0;
  friend bool operator==(const ByteRange&, const ByteRange&) = default;
};

// Per mapped external file: the union of the ranges initializers reference.
struct ReferencedWeightBytes {
  struct File {
    MappingId mapping = 0;
    std::filesystem::path path;
    std::uint64_t mapped_bytes = 0;
    std::uint64_t referenced_bytes = 0;  // size of the union, clipped to the file
    std::uint64_t header_bytes = 0;      // the format's header at the file's start (safetensors' JSON)
    std::vector<ByteRange> ranges;       // merged, sorted, non-overlapping
  };
  std::vector<File> files;  // in mapping-id order
  std::uint64_t total = 0;
  std::uint64_t header_total = 0;  // sum of header_bytes
};

struct DeadRanges {
  MappingId mapping = 0;
  std::filesystem::path path;
  std::vector<ByteRange> ranges;  // mapped bytes no weight points at (a format's header is not dead)
  std::uint64_t total = 0;
};

class WeightStore {
 public:
  WeightStore();
  ~WeightStore();
  WeightStore(WeightStore&&) noexcept;
  WeightStore& operator=(WeightStore&&) noexcept;
  WeightStore(const WeightStore&) = delete;
  WeightStore& operator=(const WeightStore&) = delete;

  // The descriptors, keyed by the value they initialize. Read-only: every
  // reader (DeviceWeights, Residency, the plan, the reports) trusts that
  // each external weight here lies inside a file this store mapped, and
  // that an id names one weight for the store's life. The loader fills the
  // map (store::StoreAccess); anyone else goes through add(), which checks.
  const std::unordered_map<ValueId, WeightRef>& weights() const noexcept { return weights_; }

  // Adds `weight` as the weight of `id`: for engines and tests that build a
  // store by hand. Refused, and nothing added: invalid_argument when `id`
  // already has a weight, or an external weight names no file; not_found
  // when its file is not mapped here (map_external first); out_of_bounds
  // when its range does not lie inside that mapping (overflow-safe, the
  // check of external_mmap_provenance). Inline weights are taken as they
  // are: their bytes are the caller's to keep alive (keep_alive). Not safe
  // to call while other threads read weights().
  Status add(ValueId id, WeightRef weight);

  // Maps `path` read-only (symlinks followed: the caller chose the path)
  // and registers it. Idempotent by device + inode: the same file mapped
  // twice, under any name, returns the same id and one mapping. A FIFO or
  // a device is refused before it is opened.
  Result<MappingId> map_external(const std::filesystem::path& path);
  // Maps the regular file open for reading on `fd` (the loader's way: the
  // descriptor it checked is the one mapped; `display_path` is only
  // recorded, never opened). Idempotent by device + inode. `fd` stays the
  // caller's; it may be closed once this returns.
  Result<MappingId> map_external_fd(int fd, const std::filesystem::path& display_path);

  // The raw little-endian bytes of `weight`: inline bytes are borrowed,
  // external ones sliced from their mapping. nullopt when the file is not
  // mapped or the range is out of bounds (overflow-safe).
  std::optional<Bytes> bytes(const WeightRef& weight) const;

  // A stable mapping id and the validated absolute range of an external weight.
  std::optional<MmapProvenance> external_mmap_provenance(const WeightRef& weight) const;

  std::optional<Bytes> mmap_region_bytes(MappingId mapping, std::uint64_t offset, std::uint64_t length) const;
  std::optional<Bytes> mmap_full_bytes(MappingId mapping) const;
  // The mapping of the file `path` names now (stat'ed: a query by name, so
  // it follows symlinks; bytes() never does this).
  std::optional<MappingId> mapping_for(const std::filesystem::path& path) const;
  std::optional<std::filesystem::path> mapping_path(MappingId mapping) const;
  std::size_t mapping_count() const noexcept;

  // Sum of the sizes of the mapped external files (an upper bound on use).
  std::uint64_t mapped_external_bytes() const;

  // Union of referenced ranges per mapped file.
  ReferencedWeightBytes referenced_weight_bytes() const;

  // Bytes of the mapped files that are the format's own header (a
  // safetensors file's length and JSON): neither weights nor dead weight.
  // 0 for ONNX external data, which is bytes only.
  std::uint64_t format_header_bytes() const;

  // Mapped bytes that no weight references and no format header holds;
  // saturates at zero. mapped = referenced + header + unreferenced.
  std::uint64_t unreferenced_external_bytes(const ReferencedWeightBytes& referenced) const;
  std::vector<DeadRanges> dead_ranges(const ReferencedWeightBytes& referenced) const;

  // Keeps `anchor` alive as long as the store (e.g. the .onnx mapping that
  // inline weights borrow from).
  void keep_alive(std::shared_ptr<const void> anchor);

  // ---- Files that change under a live mapping (docs/reliability.md).
  // The store records the size, inode and modification time every file it
  // maps had when it was opened (the external data files, and the .onnx
  // that inline weights borrow from when the loader opened it). A file
  // truncated after that turns any read through its mapping into SIGBUS;
  // these calls let a reader find out first, and copy without dying of it.

  // ok while the file `weight`'s bytes live in is unchanged; otherwise an
  // io error worded "<file> changed since it was opened (size X, now Y)"
  // (or the modification time that changed), with Error::file set. A
  // weight whose range now lies past the end of its file is refused so. One
  // stat(2) of the path it was opened under: a path that names another
  // file now (one renamed over it) or nothing leaves the mapped file as it
  // was, so that is ok (check_path() tells). Always ok for weights that are
  // not in a mapped file.
  Status check_unchanged(const WeightRef& weight) const;
  // The same for one mapped external file.
  Status check_unchanged(MappingId mapping) const;
  // Copies bytes [offset, offset + dst.size()) of `weight`'s raw bytes into
  // `dst`. Bytes in a mapped file are checked (check_unchanged) and then
  // copied under a SIGBUS guard: a file truncated before or during the copy
  // is an io error, never a signal. out_of_bounds when the range is not
  // inside the weight, not_found when its file is not mapped.
  Status copy_bytes(const WeightRef& weight, std::uint64_t offset, std::span<std::byte> dst) const;
  // Hands `sink` bytes [offset, offset + length) of `weight`'s raw bytes
  // straight from where they live (the file mapping, or the inline bytes),
  // in one call, with no copy of its own: for device transfers that read the
  // mapping themselves. The file is checked first (check_unchanged); a file
  // truncated before or while `sink` reads turns into an io error naming the
  // file (the pages it lost read as zeros meanwhile, never SIGBUS). out_of_bounds
  // when the range is not inside the weight, not_found when its file is not
  // mapped. `sink`'s own error is returned as it is.
  // Why not a guard like copy_bytes': that one jumps out of the copy on
  // SIGBUS, which must never happen to a backend's copy_to_device (it may
  // hold locks, or read the pages in a driver thread). While `sink` runs,
  // the range is armed instead: a fault in it, from any thread, maps a zero
  // page over the lost page and the read goes on. Armed ranges take one of
  // 64 process-wide slots; when all are busy this waits for one, or, when
  // the calling thread holds one already (a transfer inside a sink), is
  // unavailable. Everything `sink` starts must have finished reading when
  // it returns. docs/reliability.md, "transfer()".
  Status transfer(const WeightRef& weight, std::uint64_t offset, std::uint64_t length,
                  const std::function<Status(Bytes)>& sink) const;
  // Whether the path a mapped file was opened under still names that file
  // (device + inode, looked up by name now). ok; io "<path> now names a
  // different file (inode X, now Y)" when it was replaced (e.g. a new file
  // renamed over it; the mapping still serves the old one's bytes); or
  // not_found "<path> no longer exists".
  Status check_path(MappingId mapping) const;

 private:
  friend struct store::StoreAccess;
  struct BALLAST_HIDDEN Impl;
  std::unordered_map<ValueId, WeightRef> weights_;
  std::unique_ptr<Impl> impl_;
};

}  // namespace ballast

BALLAST_API_END
