// `ballast compact MODEL OUT_DIR [--align N] [--json]`: a copy of the model
// that holds only the bytes its weights reference (issue 26). ONNX: the
// .onnx re-serialized with new external_data offsets (support/onnx_rewrite)
// and each data file without its dead bytes, every referenced range once and
// aligned; safetensors: each file (or shard) with only the tensors the model
// names, its header and the index rewritten. docs/tools.md, "compact".
#include "command.hpp"
#include "command_context.hpp"
#include "command_options.hpp"
#include "support/format.hpp"
#include "support/hash.hpp"
#include "support/model.hpp"
#include "support/onnx_rewrite.hpp"
#include "support/progress.hpp"
#include "support/temp_files.hpp"
#include "support/terminal.hpp"

#include <ballast/printable.hpp>

#include <nlohmann/json.hpp>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <functional>
#include <iostream>
#include <map>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

namespace ballast::cli {
namespace {
namespace compact_cmd {

namespace fs = std::filesystem;
using json = nlohmann::ordered_json;

struct Options {
  std::string model;
  std::string out_dir;
  std::int64_t align = 64;  // signed: "--align -1" is refused as -1, not as 2^64 - 1
  bool json = false;
  LoadOptions load;
};

Error error_at(ErrorCode code, std::string message, const fs::path& file) {
  Error e = make_error(code, std::move(message));
  e.file = file.string();
  return e;
}

Error os_error(std::string what, const fs::path& file, int err) {
  return error_at(ErrorCode::io, what + ": " + std::strerror(err), file);
}

struct Identity {
  dev_t device = 0;
  ino_t inode = 0;
  friend bool operator==(const Identity&, const Identity&) = default;
};

std::optional<Identity> identity_of(const fs::path& path, bool follow = true) {
  struct stat st {};
  if ((follow ? ::stat(path.c_str(), &st) : ::lstat(path.c_str(), &st)) != 0) return std::nullopt;
  return Identity{st.st_dev, st.st_ino};
}

// ---- The files a compact writes: each to a temporary name beside its final
// one, renamed into place only when all are written. Until commit() succeeds
// the destructor removes every temporary, every file already renamed and
// every directory it made, so a failure leaves nothing behind; a signal that
// ends the process removes the temporaries (support/temp_files.hpp). Errors
// name the final path, the one the user gave: the temporary is gone by then.
class Outputs {
 public:
  explicit Outputs(fs::path dir) : dir_(std::move(dir)) {}
  Outputs(const Outputs&) = delete;
  Outputs& operator=(const Outputs&) = delete;
  ~Outputs() {
    for (File& f : files_) {
      if (f.fd >= 0) ::close(f.fd);
      if (!committed_) {
        ::unlink(f.temp.c_str());
        if (f.renamed) ::unlink(f.final_path.c_str());
      }
      f.guard.release();
    }
    if (!committed_)
      for (auto it = made_dirs_.rbegin(); it != made_dirs_.rend(); ++it) ::rmdir(it->c_str());
  }

  // Makes `dir` (and its parents) if missing, remembering what it made (only
  // what it made: a folder another process made meanwhile is not removed).
  Status make_dirs(const fs::path& dir) {
    std::vector<fs::path> missing;
    for (fs::path p = dir; !p.empty() && !identity_of(p); p = p.parent_path()) {
      missing.push_back(p);
      if (p == p.parent_path()) break;
    }
    for (auto it = missing.rbegin(); it != missing.rend(); ++it) {
      if (::mkdir(it->c_str(), 0777) == 0) {
        made_dirs_.push_back(*it);
      } else if (errno != EEXIST) {
        return os_error("cannot create the directory", *it, errno);
      }
    }
    return {};
  }

  // A new temporary for OUT_DIR/`relative`; its index in files(). The
  // temporary's name is bounded (temp_name_for), so a final name of up to
  // NAME_MAX bytes still has one.
  Result<std::size_t> create(const fs::path& relative) {
    const fs::path final_path = dir_ / relative;
    BALLAST_RETURN_IF_ERROR(make_dirs(final_path.parent_path()));
    const fs::path temp = final_path.parent_path() / temp_name_for(final_path.filename().string());
    // Guarded before it exists, and told once it does (temp_files.hpp): a
    // signal handled on another thread between the two left it behind.
    TempFileGuard guard(AT_FDCWD, temp.string());
    const int fd = ::open(temp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd < 0) return os_error("cannot create a temporary file beside it", final_path, errno);
    guard.created();
    files_.push_back({relative, final_path, temp, fd, 0, false, std::move(guard)});
    return files_.size() - 1;
  }

  // All of `data` at `offset` of file `i`.
  Status write_at(std::size_t i, std::uint64_t offset, Bytes data) {
    File& f = files_[i];
    while (!data.empty()) {
      const ssize_t n = ::pwrite(f.fd, data.data(), data.size(), static_cast<off_t>(offset));
      if (n < 0) {
        if (errno == EINTR) continue;
        return os_error("cannot write", f.final_path, errno);
      }
      data = data.subspan(static_cast<std::size_t>(n));
      offset += static_cast<std::uint64_t>(n);
    }
    return {};
  }

  // Ends file `i` at `size` bytes (gaps between ranges read as zeros).
  Status finish(std::size_t i, std::uint64_t size) {
    File& f = files_[i];
    if (::ftruncate(f.fd, static_cast<off_t>(size)) != 0) return os_error("cannot size", f.final_path, errno);
    if (::fsync(f.fd) != 0) return os_error("cannot flush", f.final_path, errno);
    if (::close(f.fd) != 0) {
      f.fd = -1;
      return os_error("cannot close", f.final_path, errno);
    }
    f.fd = -1;
    f.size = size;
    return {};
  }

  // Renames every temporary into place, never over a file that appeared
  // meanwhile (RENAME_NOREPLACE; a link where the file system lacks it),
  // then flushes the folders, so the renames are on disk when it returns.
  Status commit() {
    std::set<fs::path> folders;
    for (File& f : files_) {
      int rc = ::renameat2(AT_FDCWD, f.temp.c_str(), AT_FDCWD, f.final_path.c_str(), RENAME_NOREPLACE);
      if (rc != 0 && (errno == EINVAL || errno == ENOSYS || errno == ENOTSUP)) {
        rc = ::link(f.temp.c_str(), f.final_path.c_str());
        if (rc == 0) ::unlink(f.temp.c_str());
      }
      if (rc != 0) {
        if (errno == EEXIST)
          return error_at(ErrorCode::invalid_argument, "appeared while compacting; not replaced", f.final_path);
        return os_error("cannot rename into place", f.final_path, errno);
      }
      f.renamed = true;
      // Now the final name is this run's own (RENAME_NOREPLACE made it):
      // guarded until every output is in place, so a signal mid-commit
      // leaves no data file without its model. The model file is created
      // last, so it is renamed last.
      f.guard = TempFileGuard(AT_FDCWD, f.final_path.string());
      f.guard.created();
      folders.insert(f.final_path.parent_path());
    }
    for (const fs::path& folder : folders) {
      const int fd = ::open(folder.empty() ? "." : folder.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
      const int rc = fd < 0 ? -1 : ::fsync(fd);
      const int err = errno;
      if (fd >= 0) ::close(fd);
      if (rc != 0) return os_error("cannot flush the directory", folder, err);
    }
    for (File& f : files_) f.guard.release();
    committed_ = true;
    return {};
  }

  struct File {
    fs::path relative;
    fs::path final_path;
    fs::path temp;
    int fd = -1;
    std::uint64_t size = 0;
    bool renamed = false;
    TempFileGuard guard;  // removes `temp` if a signal ends the process before commit
  };
  const std::vector<File>& files() const { return files_; }

 private:
  fs::path dir_;
  std::vector<File> files_;
  std::vector<fs::path> made_dirs_;
  bool committed_ = false;
};

// ---- What a compact reads: the external weights grouped by the file their
// bytes live in, with the merged ranges the file keeps.

struct SourceWeight {
  std::string_view name;
  const WeightRef* ref = nullptr;
  std::uint64_t offset = 0;  // absolute, in its file
  std::uint64_t length = 0;
};

struct SourceFile {
  MappingId mapping = 0;
  fs::path path;         // resolved, for display and identity
  std::string location;  // as the model first names it
  fs::path output;       // relative to OUT_DIR
  std::uint64_t header_bytes = 0;
  std::vector<SourceWeight> weights;     // sorted by offset
  std::vector<ByteRange> ranges;         // merged referenced ranges, sorted
  std::vector<std::uint64_t> new_start;  // where each range goes
  std::uint64_t new_size = 0;
};

std::uint64_t align_up(std::uint64_t v, std::uint64_t align) { return (v + align - 1) / align * align; }

// The sources in mapping-id order; each external weight's file found by the
// store's own provenance (device + inode), never by its name.
Result<std::vector<SourceFile>> source_files(const Model& model) {
  const WeightStore& store = model.store();
  const ReferencedWeightBytes referenced = store.referenced_weight_bytes();
  std::map<MappingId, SourceFile> by_id;
  for (const auto& f : referenced.files) {
    SourceFile& s = by_id[f.mapping];
    s.mapping = f.mapping;
    s.path = f.path;
    s.header_bytes = f.header_bytes;
    s.ranges = f.ranges;
  }
  for (const NamedWeight& w : weights_in_order(model)) {
    if (!w.ref->is_external()) continue;
    const std::optional<MmapProvenance> p = store.external_mmap_provenance(*w.ref);
    if (!p) {
      Error e = error_at(ErrorCode::out_of_bounds, "the weight's bytes are not inside its mapped file",
                         w.ref->external->resolved());
      e.tensor = std::string(w.name);
      return e;
    }
    SourceFile& s = by_id[p->mapping];
    s.mapping = p->mapping;
    if (s.location.empty()) s.location = w.ref->external->location();
    s.weights.push_back({w.name, w.ref, p->offset, p->length});
  }
  std::vector<SourceFile> out;
  for (auto& [id, s] : by_id) {
    if (s.weights.empty()) continue;  // a shard the index names no tensor of: not written
    std::stable_sort(s.weights.begin(), s.weights.end(),
                     [](const SourceWeight& a, const SourceWeight& b) { return a.offset < b.offset; });
    s.output = fs::path(s.location).lexically_normal();
    out.push_back(std::move(s));
  }
  return out;
}

// The range of `file` holding [offset, offset + length); nullopt if none does.
std::optional<std::size_t> range_holding(const SourceFile& file, std::uint64_t offset, std::uint64_t length) {
  auto it = std::upper_bound(file.ranges.begin(), file.ranges.end(), offset,
                             [](std::uint64_t v, const ByteRange& r) { return v < r.offset; });
  if (it == file.ranges.begin()) return std::nullopt;
  --it;
  if (offset - it->offset > it->length || length > it->length - (offset - it->offset)) return std::nullopt;
  return static_cast<std::size_t>(it - file.ranges.begin());
}

// Copies every referenced byte of `file` once, through WeightStore::transfer
// (a file truncated meanwhile is an io error, never SIGBUS): the weights in
// offset order, each from where the one before it ended. `place(offset)` is
// where a source byte goes in the output.
Status copy_weights(const WeightStore& store, const SourceFile& file, Outputs& out, std::size_t index,
                    const std::function<std::uint64_t(std::uint64_t)>& place, ProgressBar& bar) {
  std::uint64_t covered = 0;  // source bytes before this are written
  for (const SourceWeight& w : file.weights) {
    const std::uint64_t end = w.offset + w.length;
    if (w.length == 0 || end <= covered) continue;
    const std::uint64_t from = std::max(w.offset, covered);
    Status s = store.transfer(*w.ref, from - w.offset, end - from, [&](Bytes bytes) -> Status {
      constexpr std::size_t kChunk = std::size_t{8} << 20;
      for (std::size_t at = 0; at < bytes.size(); at += kChunk) {
        const Bytes part = bytes.subspan(at, std::min(kChunk, bytes.size() - at));
        BALLAST_RETURN_IF_ERROR(out.write_at(index, place(from + at), part));
        bar.advance(part.size());
      }
      return Status();
    });
    if (!s.ok()) {
      // pwrite reads the source pages in the kernel, where a page the
      // source file lost is EFAULT rather than a fault transfer() answers:
      // the input changed, which is what to say, not the output's failure.
      if (Status changed = store.check_unchanged(*w.ref); !changed.ok()) s = std::move(changed);
      if (s.error().tensor.empty()) s.error().tensor = std::string(w.name);
      return s;
    }
    covered = end;
  }
  return {};
}

std::uint64_t bytes_to_copy(const std::vector<SourceFile>& files) {
  std::uint64_t total = 0;
  for (const SourceFile& f : files)
    for (const ByteRange& r : f.ranges) total += r.length;
  return total;
}

Result<std::string> read_whole(const fs::path& path, std::uint64_t expected_size) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return error_at(ErrorCode::io, "cannot open to read", path);
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (in.bad()) return error_at(ErrorCode::io, "cannot read", path);
  if (bytes.size() != expected_size)
    return error_at(ErrorCode::io,
                    "changed since it was opened (size " + std::to_string(expected_size) + ", now " +
                        std::to_string(bytes.size()) + ")",
                    path);
  return bytes;
}

Bytes as_bytes(std::string_view s) { return {reinterpret_cast<const std::byte*>(s.data()), s.size()}; }

std::optional<std::uint64_t> parse_u64(const std::string& text) {
  if (text.empty() || text.size() > 20) return std::nullopt;
  std::uint64_t v = 0;
  for (char c : text) {
    if (c < '0' || c > '9') return std::nullopt;
    const std::uint64_t d = static_cast<std::uint64_t>(c - '0');
    if (v > (UINT64_MAX - d) / 10) return std::nullopt;
    v = v * 10 + d;
  }
  return v;
}

// ---- ONNX: data files laid out range by range, then the .onnx rewritten.
Status compact_onnx(const Model& model, std::vector<SourceFile>& files, std::uint64_t align, Outputs& out,
                    const fs::path& onnx_output) {
  const WeightStore& store = model.store();
  // Each location string a weight names -> its file (two names of one file
  // share it); and the lengths a tensor may leave out (from dtype x dims).
  std::map<std::string, std::size_t, std::less<>> by_location;
  std::map<std::pair<std::size_t, std::uint64_t>, std::optional<std::uint64_t>> implied_length;
  std::map<std::tuple<std::size_t, std::uint64_t, std::uint64_t>, std::string> sha1;
  for (std::size_t i = 0; i < files.size(); ++i) {
    SourceFile& f = files[i];
    std::uint64_t at = 0;
    for (const ByteRange& r : f.ranges) {
      at = align_up(at, align);
      f.new_start.push_back(at);
      at += r.length;
    }
    f.new_size = at;
    for (const SourceWeight& w : f.weights) {
      by_location.emplace(w.ref->external->location(), i);
      if (!w.ref->external->length_was_given) {
        auto [it, fresh] = implied_length.try_emplace({i, w.offset}, w.length);
        if (!fresh && it->second != w.length) it->second.reset();  // two lengths at one offset: not guessed
      }
      if (w.ref->external->checksum) sha1.try_emplace({i, w.offset, w.length});
    }
  }

  ProgressBar bar("compacting", bytes_to_copy(files));
  for (std::size_t i = 0; i < files.size(); ++i) {
    const SourceFile& f = files[i];
    BALLAST_ASSIGN_OR_RETURN(const std::size_t index, out.create(f.output));
    const auto place = [&f](std::uint64_t offset) {
      const std::size_t r = *range_holding(f, offset, 0);
      return f.new_start[r] + (offset - f.ranges[r].offset);
    };
    BALLAST_RETURN_IF_ERROR(copy_weights(store, f, out, index, place, bar));
    BALLAST_RETURN_IF_ERROR(out.finish(index, f.new_size));
  }
  // The checksums of the bytes as copied (SHA-1 hex, as ONNX specifies).
  for (auto& [key, digest] : sha1) {
    const auto& [i, offset, length] = key;
    const SourceWeight* w = nullptr;
    for (const SourceWeight& c : files[i].weights)
      if (c.offset == offset && c.length == length) w = &c;
    Status s = store.transfer(*w->ref, 0, length, [&](Bytes bytes) -> Status {
      digest = hex_digest(Digest::sha1, bytes);
      return digest.empty() ? Status(make_error(ErrorCode::internal, "SHA-1 failed")) : Status();
    });
    if (!s.ok()) return s;
  }

  BALLAST_ASSIGN_OR_RETURN(const std::string onnx, read_whole(model.path(), model.file_size()));
  const auto rewrite = [&](const ExternalTensor& t) -> Result<std::vector<std::pair<std::string, std::string>>> {
    const auto refuse = [&](std::string message, ErrorCode code = ErrorCode::unsupported) {
      Error e = error_at(code, std::move(message), model.path());
      e.tensor = std::string(t.name);
      e.offset = t.at;
      return e;
    };
    std::optional<std::string> location;
    std::optional<std::uint64_t> offset, length;
    for (const auto& [key, value] : t.entries) {
      if (key == "location") location = value;
      if (key != "offset" && key != "length") continue;
      // Not a number: refused, never read as absent (offset 0), which would
      // point the rewritten entry at another tensor's bytes.
      const std::optional<std::uint64_t> v = parse_u64(value);
      if (!v)
        return refuse("external data " + key + " '" + printable(value) + "' is not a decimal number of 64 bits",
                      ErrorCode::malformed);
      (key == "offset" ? offset : length) = v;
    }
    const auto found = location ? by_location.find(*location) : by_location.end();
    if (found == by_location.end())
      return refuse("external data in " + printable(location.value_or("(no location)")) +
                    " that no weight ballast reads lives in; compact would drop its bytes");
    const std::size_t i = found->second;
    const SourceFile& f = files[i];
    const std::uint64_t old_offset = offset.value_or(0);
    if (!length) {
      const auto implied = implied_length.find({i, old_offset});
      if (implied != implied_length.end()) length = implied->second;
    }
    std::uint64_t new_offset = 0;
    if (!length)
      return refuse("external data at offset " + std::to_string(old_offset) + " of " + printable(*location) +
                    " with no length that no weight ballast reads has; compact cannot place it");
    if (*length != 0) {
      if (old_offset > UINT64_MAX - *length)
        return refuse("external data at offset " + std::to_string(old_offset) + " with length " +
                          std::to_string(*length) + " of " + printable(*location) + " runs past 2^64 bytes",
                      ErrorCode::malformed);
      const std::optional<std::size_t> r = range_holding(f, old_offset, *length);
      if (!r)
        return refuse("bytes [" + std::to_string(old_offset) + ", " + std::to_string(old_offset + *length) + ") of " +
                      printable(*location) +
                      " are no weight ballast reads (a sparse tensor's values, or a tensor in a model-local function, "
                      "whose nodes ballast does not read); compact would drop them");
      new_offset = f.new_start[*r] + (old_offset - f.ranges[*r].offset);
    }
    std::vector<std::pair<std::string, std::string>> entries;
    bool wrote_offset = false, wrote_length = false;
    for (const auto& [key, value] : t.entries) {
      if (key == "location") {
        entries.emplace_back(key, f.output.generic_string());
      } else if (key == "offset") {
        entries.emplace_back(key, std::to_string(new_offset));
        wrote_offset = true;
      } else if (key == "length") {
        entries.emplace_back(key, std::to_string(*length));
        wrote_length = true;
      } else if (key == "checksum") {
        const auto digest = sha1.find({i, old_offset, *length});
        entries.emplace_back(key, digest != sha1.end() ? digest->second : hex_digest(Digest::sha1, Bytes()));
      } else {
        entries.emplace_back(key, value);
      }
    }
    if (!wrote_offset && new_offset != 0) entries.emplace_back("offset", std::to_string(new_offset));
    if (!wrote_length) entries.emplace_back("length", std::to_string(*length));
    return entries;
  };
  BALLAST_ASSIGN_OR_RETURN(const std::string rewritten, rewrite_external_data(as_bytes(onnx), rewrite));
  // The .onnx must still be as opened (its nodes were read from the mapping).
  BALLAST_RETURN_IF_ERROR(model.check_unchanged());
  BALLAST_ASSIGN_OR_RETURN(const std::size_t index, out.create(onnx_output));
  BALLAST_RETURN_IF_ERROR(out.write_at(index, 0, as_bytes(rewritten)));
  return out.finish(index, rewritten.size());
}

// ---- safetensors

std::string_view safetensors_dtype(DataType t) {
  switch (t) {
    case DataType::bool_: return "BOOL";
    case DataType::uint8: return "U8";
    case DataType::int8: return "I8";
    case DataType::int16: return "I16";
    case DataType::uint16: return "U16";
    case DataType::float16: return "F16";
    case DataType::bfloat16: return "BF16";
    case DataType::int32: return "I32";
    case DataType::uint32: return "U32";
    case DataType::float32: return "F32";
    case DataType::float64: return "F64";
    case DataType::int64: return "I64";
    case DataType::uint64: return "U64";
    case DataType::complex64: return "C64";
    case DataType::float8e4m3fn: return "F8_E4M3";
    case DataType::float8e5m2: return "F8_E5M2";
    case DataType::float8e8m0: return "F8_E8M0";
    case DataType::float8e4m3fnuz: return "F8_E4M3FNUZ";
    case DataType::float8e5m2fnuz: return "F8_E5M2FNUZ";
    case DataType::float4e2m1: return "F4";
    case DataType::float6e2m3: return "F6_E2M3";
    case DataType::float6e3m2: return "F6_E3M2";
    default: return {};
  }
}

// One file: the 8-byte length, the JSON header (its __metadata__ kept,
// padded with spaces so the buffer starts 8-aligned, as the reference
// writer does), then the tensors back to back in their order.
Status write_safetensors(const Model& model, const SourceFile& f, Outputs& out, ProgressBar& bar) {
  json header = json::object();
  json meta = json::object();
  bool any_meta = false;
  for (const ModelMetadata& m : model.metadata())
    if (m.file == f.location) {
      meta[m.key] = m.value;
      any_meta = true;
    }
  if (any_meta) header["__metadata__"] = std::move(meta);
  std::uint64_t at = 0;
  for (const SourceWeight& w : f.weights) {
    const std::string_view dtype = safetensors_dtype(w.ref->dtype);
    if (dtype.empty()) {
      Error e = error_at(ErrorCode::internal, "no safetensors dtype for this weight", f.path);
      e.tensor = std::string(w.name);
      return e;
    }
    header[std::string(w.name)] = {
        {"dtype", std::string(dtype)}, {"shape", w.ref->dims.to_vector()}, {"data_offsets", {at, at + w.length}}};
    at += w.length;
  }
  std::string text;
  try {
    text = header.dump(-1, ' ', false, json::error_handler_t::strict);
  } catch (const json::exception& e) {
    return error_at(ErrorCode::malformed, std::string("cannot write the header: ") + e.what(), f.path);
  }
  text.append((8 - (8 + text.size()) % 8) % 8, ' ');
  std::string prefix(8, '\0');
  for (int i = 0; i < 8; ++i) prefix[static_cast<std::size_t>(i)] = static_cast<char>((text.size() >> (8 * i)) & 0xff);
  prefix += text;

  BALLAST_ASSIGN_OR_RETURN(const std::size_t index, out.create(f.output));
  BALLAST_RETURN_IF_ERROR(out.write_at(index, 0, as_bytes(prefix)));
  // Tensors are placed back to back in offset order: weight k goes where
  // the lengths before it end.
  std::vector<std::uint64_t> starts;
  std::uint64_t cursor = prefix.size();
  for (const SourceWeight& w : f.weights) {
    starts.push_back(cursor);
    cursor += w.length;
  }
  const auto place = [&f, &starts](std::uint64_t offset) {
    auto it = std::upper_bound(f.weights.begin(), f.weights.end(), offset,
                               [](std::uint64_t v, const SourceWeight& w) { return v < w.offset; });
    const std::size_t k = static_cast<std::size_t>(it - f.weights.begin()) - 1;
    return starts[k] + (offset - f.weights[k].offset);
  };
  BALLAST_RETURN_IF_ERROR(copy_weights(model.store(), f, out, index, place, bar));
  return out.finish(index, cursor);
}

// The index with the weight_map naming the shards written and
// metadata.total_size the bytes of the tensors; every other key kept.
Status write_index(const Model& model, const std::vector<SourceFile>& files, const LoadOptions& load, Outputs& out) {
  std::error_code ec;
  const std::uint64_t size = fs::file_size(model.path(), ec);
  if (ec) return error_at(ErrorCode::io, "cannot stat: " + ec.message(), model.path());
  if (size > load.max_header_bytes) return error_at(ErrorCode::overflow, "index exceeds the cap", model.path());
  BALLAST_ASSIGN_OR_RETURN(const std::string text, read_whole(model.path(), size));
  json index = json::parse(text, nullptr, false);
  if (index.is_discarded() || !index.is_object() || !index.contains("weight_map") || !index["weight_map"].is_object())
    return error_at(ErrorCode::io, "changed since it was opened (no longer an index)", model.path());
  std::map<std::string, std::string, std::less<>> shard_of;
  std::uint64_t total = 0;
  for (const SourceFile& f : files)
    for (const SourceWeight& w : f.weights) {
      shard_of[std::string(w.name)] = f.output.generic_string();
      total += w.length;
    }
  json map = json::object();
  for (const auto& [name, shard] : index["weight_map"].items()) {
    const auto it = shard_of.find(name);
    if (it == shard_of.end())
      return error_at(ErrorCode::io, "changed since it was opened (names '" + printable(name) + "', no weight)",
                      model.path());
    map[name] = it->second;
  }
  index["weight_map"] = std::move(map);
  if (!index.contains("metadata") || !index["metadata"].is_object()) index["metadata"] = json::object();
  index["metadata"]["total_size"] = total;
  std::string written;
  try {
    written = index.dump(2, ' ', false, json::error_handler_t::strict) + "\n";
  } catch (const json::exception& e) {
    return error_at(ErrorCode::malformed, std::string("cannot write the index: ") + e.what(), model.path());
  }
  BALLAST_ASSIGN_OR_RETURN(const std::size_t i, out.create(model.path().filename()));
  BALLAST_RETURN_IF_ERROR(out.write_at(i, 0, as_bytes(written)));
  return out.finish(i, written.size());
}

// ---- Refusals before anything is written.

// The files the compact writes, relative to OUT_DIR.
std::vector<fs::path> planned_outputs(const Model& model, const std::vector<SourceFile>& files) {
  std::vector<fs::path> planned;
  if (model.format() == ModelFormat::safetensors) {
    planned.push_back(model.path().filename());
    return planned;
  }
  for (const SourceFile& f : files) planned.push_back(f.output);
  planned.push_back(model.path().filename());
  return planned;
}

Status check_out_dir(const Model& model, const std::vector<SourceFile>& files, const fs::path& out_dir,
                     const std::vector<fs::path>& planned) {
  // Every input by identity: the model file and each data file.
  std::vector<std::pair<Identity, fs::path>> inputs;
  if (auto id = identity_of(model.path())) inputs.emplace_back(*id, model.path());
  for (const SourceFile& f : files)
    if (auto id = identity_of(f.path)) inputs.emplace_back(*id, f.path);

  if (auto dir = identity_of(out_dir)) {
    struct stat st {};
    if (::stat(out_dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode))
      return error_at(ErrorCode::invalid_argument, "OUT_DIR is not a directory", out_dir);
    fs::path model_dir = model.path().parent_path();
    if (model_dir.empty()) model_dir = ".";
    std::vector<fs::path> own = {model_dir};
    std::error_code ec;
    const fs::path real = fs::canonical(model.path(), ec);
    if (!ec) own.push_back(real.parent_path());
    for (const fs::path& d : own)
      if (identity_of(d) == dir)
        return error_at(ErrorCode::invalid_argument,
                        "OUT_DIR is the model's own directory; compact writes a copy elsewhere", out_dir);
  }
  std::set<fs::path> seen;
  for (const fs::path& relative : planned) {
    const fs::path path = out_dir / relative;
    if (!seen.insert(path.lexically_normal()).second)
      return error_at(ErrorCode::unsupported, "two of the model's files would be written to one name", path);
    const std::optional<Identity> id = identity_of(path, /*follow=*/false);
    if (!id) continue;
    const std::optional<Identity> target = identity_of(path);
    for (const auto& [input, name] : inputs)
      if (input == *id || (target && input == *target))
        return error_at(ErrorCode::invalid_argument, "would be written over the input itself (" + name.string() + ")",
                        path);
    return error_at(ErrorCode::invalid_argument, "OUT_DIR already holds this file, which compact would write", path);
  }
  return {};
}

// ---- The command.

struct Summary {
  std::uint64_t before = 0;
  std::uint64_t after = 0;
};

int run(const Options& opt) {
  CommandContext ctx("compact");
  if (opt.align <= 0 || (opt.align & (opt.align - 1)) != 0 || opt.align > (std::int64_t{1} << 30))
    return ctx.fail(ErrorCode::invalid_argument,
                    "--align must be a power of two from 1 to 1073741824 (got " + std::to_string(opt.align) + ")");
  if (!ctx.load_model(opt.model, opt.load)) return ctx.exit_code();
  const Model& model = ctx.model();
  if (model.format() == ModelFormat::gguf) {
    Error e = make_error(ErrorCode::unsupported,
                         "compact writes ONNX and safetensors; a GGUF model's tensors are already laid out by the "
                         "file's alignment (inspect shows any dead bytes)");
    e.file = model.path().string();
    return ctx.fail(e);
  }
  auto sources = source_files(model);
  if (!sources.ok()) return ctx.fail(sources.error());
  std::vector<SourceFile>& files = *sources;
  const fs::path out_dir(opt.out_dir);
  const std::vector<fs::path> planned = planned_outputs(model, files);
  if (Status s = check_out_dir(model, files, out_dir, planned); !s.ok()) return ctx.fail(s.error());

  Summary sum;
  sum.before = model.store().mapped_external_bytes();
  if (model.format() != ModelFormat::safetensors) sum.before += model.file_size();

  Outputs out(out_dir);
  Status done = out.make_dirs(out_dir);
  // Again, now that OUT_DIR exists: a path through a folder that was
  // missing ("model_dir/new/..") could only be resolved once it was made.
  if (done.ok()) done = check_out_dir(model, files, out_dir, planned);
  if (done.ok()) {
    if (model.format() == ModelFormat::onnx) {
      done = compact_onnx(model, files, static_cast<std::uint64_t>(opt.align), out, model.path().filename());
    } else {
      ProgressBar bar("compacting", bytes_to_copy(files));
      if (model.format() == ModelFormat::safetensors && files.empty()) {
        SourceFile empty;  // no tensors at all: a header of metadata alone
        empty.location = model.path().filename().string();
        empty.output = model.path().filename();
        files.push_back(std::move(empty));
      }
      for (const SourceFile& f : files) {
        done = write_safetensors(model, f, out, bar);
        if (!done.ok()) break;
      }
      if (done.ok() && model.format() == ModelFormat::safetensors_index)
        done = write_index(model, files, opt.load, out);
    }
  }
  if (done.ok()) done = out.commit();
  if (!done.ok()) return ctx.fail(done.error());
  for (const auto& f : out.files()) sum.after += f.size;

  const std::int64_t saved = static_cast<std::int64_t>(sum.before) - static_cast<std::int64_t>(sum.after);
  const double saved_percent = sum.before ? 100.0 * static_cast<double>(saved) / static_cast<double>(sum.before) : 0.0;
  if (opt.json) {
    json doc;
    doc["model"] = model.path().string();
    doc["format"] = std::string(model_format_name(model.format()));
    doc["out_dir"] = out_dir.string();
    doc["align"] = model.format() == ModelFormat::onnx ? json(opt.align) : json(nullptr);
    json jf = json::array();
    for (const auto& f : out.files()) jf.push_back({{"path", f.final_path.string()}, {"bytes", f.size}});
    doc["files"] = std::move(jf);
    doc["bytes_before"] = sum.before;
    doc["bytes_after"] = sum.after;
    doc["bytes_saved"] = saved;
    doc["saved_percent"] = saved_percent;
    doc["files_written"] = out.files().size();
    std::cout << json_text(doc) << '\n';
    return kExitOk;
  }
  std::cout << "compact: " << printable(model.path().string()) << " -> " << printable(out_dir.string()) << '\n';
  for (const auto& f : out.files())
    std::cout << "  wrote " << printable(f.relative.generic_string()) << " (" << human_bytes(f.size) << ")\n";
  char pct[32];
  std::snprintf(pct, sizeof pct, "%.2f%%", saved_percent);
  std::cout << "before " << human_bytes(sum.before) << ", after " << human_bytes(sum.after) << ", "
            << (saved >= 0 ? "saved " + human_bytes(static_cast<std::uint64_t>(saved))
                           : "grew by " + human_bytes(static_cast<std::uint64_t>(-saved)))
            << " (" << pct << "), " << out.files().size() << " file" << (out.files().size() == 1 ? "" : "s")
            << " written\n";
  return kExitOk;
}

}  // namespace compact_cmd

const RegisterCommand kCompact{{
    "compact",
    "Write a copy of the model holding only the bytes its weights reference",
    [](CLI::App& sub) -> std::function<int()> {
      auto opt = std::make_shared<compact_cmd::Options>();
      sub.add_option("MODEL", opt->model,
                     "the model: .onnx, .safetensors or a *.safetensors.index.json (GGUF is refused)")
          ->required();
      sub.add_option("OUT_DIR", opt->out_dir, "the directory to write the copy into (made if missing)")->required();
      sub.add_option("--align", opt->align, "align every ONNX external range to N bytes (a power of two)")
          ->type_name("N")
          ->capture_default_str();
      sub.add_flag("--json", opt->json, "print one JSON document of the figures (schema in docs/tools.md)");
      add_allow_holes_option(sub, opt->load, "the copy has none");
      add_model_real_dir_option(sub, opt->load);
      return [opt] { return compact_cmd::run(*opt); };
    },
}};

}  // namespace
}  // namespace ballast::cli
