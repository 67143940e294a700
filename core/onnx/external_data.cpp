#include "onnx/external_data.hpp"

#include "store/byte_ranges.hpp"
#include "store/mapped_file.hpp"

#include <algorithm>
#include <system_error>

namespace ballast::onnx {

namespace {

Error located(ErrorCode code, std::string message, std::string file, std::string_view tensor,
              std::optional<std::uint64_t> offset) {
  Error e = make_error(code, std::move(message));
  e.file = std::move(file);
  e.tensor = tensor.size() <= 256 ? std::string(tensor) : shown(tensor, 256);
  e.offset = offset;
  return e;
}

// A path for Error::file: whole when short, else cut (a location may be
// kilobytes long).
std::string capped_path(const std::filesystem::path& p) {
  const std::string& s = p.native();
  return s.size() <= 512 ? s : s.substr(0, 512) + "... (" + std::to_string(s.size()) + " bytes)";
}

// Strict decimal: digits only, no sign, no blanks. Runs for two keys of
// every external tensor, so the happy path builds no Result.
enum class Decimal { ok, not_a_number, too_big };
Decimal parse_decimal(std::string_view text, std::uint64_t& value) {
  if (text.empty()) return Decimal::not_a_number;
  if (text.size() <= 19) {  // at most 19 digits cannot overflow 64 bits: no check per digit
    std::uint64_t v = 0;
    for (char c : text) {
      const auto digit = static_cast<unsigned char>(c - '0');
      if (digit > 9) return Decimal::not_a_number;
      v = v * 10 + digit;
    }
    value = v;
    return Decimal::ok;
  }
  std::uint64_t v = 0;
  for (char c : text) {
    if (c < '0' || c > '9') return Decimal::not_a_number;
    const auto digit = static_cast<std::uint64_t>(c - '0');
    if (v > UINT64_MAX / 10 || (v == UINT64_MAX / 10 && digit > UINT64_MAX % 10)) return Decimal::too_big;
    v = v * 10 + digit;
  }
  value = v;
  return Decimal::ok;
}

Error decimal_error(Decimal d, std::string_view key, std::string_view text) {
  if (d == Decimal::too_big)
    return make_error(ErrorCode::overflow, "external data " + shown(key) + " does not fit in 64 bits: " + shown(text));
  return make_error(ErrorCode::malformed, "external data " + shown(key) + " is not a decimal number: " + shown(text));
}

}  // namespace

std::string shown(std::string_view text, std::size_t limit) {
  if (text.size() <= limit) return "'" + std::string(text) + "'";
  return "'" + std::string(text.substr(0, limit)) + "...' (" + std::to_string(text.size()) + " bytes)";
}

std::string real_dir_hint(bool allow_model_real_dir, std::string_view model) {
  if (allow_model_real_dir) return " (and outside the directory of " + std::string(model) + "'s real path)";
  return " (LoadOptions::allow_model_real_dir, --allow-model-real-dir on the command line, also admits the "
         "directory of " +
         std::string(model) + "'s real path, for symlinked caches)";
}

std::string hard_link_refusal(std::uint64_t links) {
  return std::to_string(links) +
         " hard links; refused, since a hard link can bring in a file from outside the model directory "
         "(LoadOptions::allow_hard_links allows it)";
}

Status check_location_text(std::string_view location) {
  if (location.empty()) return make_error(ErrorCode::malformed, "external data without a location");
  if (location.find('\0') != std::string_view::npos)
    return make_error(ErrorCode::malformed, "external data location contains a NUL byte");
  const bool drive = location.size() >= 2 && location[1] == ':' &&
                     ((location[0] >= 'A' && location[0] <= 'Z') || (location[0] >= 'a' && location[0] <= 'z'));
  if (location.front() == '/' || location.front() == '\\' || drive)
    return make_error(ErrorCode::path_escapes,
                      "external data location " + shown(location) + " is absolute; it must be relative to the model directory");
  std::size_t start = 0;
  while (start <= location.size()) {
    const std::size_t end = location.find_first_of("/\\", start);
    const std::string_view part = location.substr(start, end == std::string_view::npos ? std::string_view::npos : end - start);
    if (part == "..")
      return make_error(ErrorCode::path_escapes,
                        "external data location " + shown(location) + " has a '..' component");
    if (end == std::string_view::npos) break;
    start = end + 1;
  }
  return {};
}

ExternalResolver::ExternalResolver(std::filesystem::path model_dir, std::string model_file, const LoadOptions& options,
                                   WeightStore& store, std::optional<store::Root> real_model_dir)
    : model_dir_(std::move(model_dir)),
      real_model_root_(std::move(real_model_dir)),
      model_file_(std::move(model_file)),
      options_(options),
      store_(store) {}

Status ExternalResolver::open_model_dir() {
  if (model_root_) return {};
  auto root = store::open_root(model_dir_);
  if (!root) {
    Error e = std::move(root.error());
    e.file = model_dir_.string();
    return e;
  }
  model_root_ = std::move(*root);
  if (real_model_root_ && real_model_root_->id == model_root_->id) real_model_root_.reset();  // one root
  return {};
}

const ExternalResolver::ResolvedFile* ExternalResolver::open_location(std::string_view location_text, Error& error) {
  if (last_file_ && location_text == last_file_->file->location) return last_file_;
  auto failed = [&error](Error e) -> const ResolvedFile* {
    error = std::move(e);
    return nullptr;
  };
  if (auto it = cache_.find(std::string(location_text)); it != cache_.end()) {
    last_file_ = &it->second;
    return last_file_;
  }
  if (location_text.size() > options_.max_location_bytes)
    return failed(make_error(ErrorCode::overflow, "external data location of " + std::to_string(location_text.size()) +
                                                      " bytes exceeds LoadOptions::max_location_bytes (" +
                                                      std::to_string(options_.max_location_bytes) + ")"));
  if (cache_.size() >= options_.max_external_locations)
    return failed(make_error(ErrorCode::overflow, "more than " + std::to_string(options_.max_external_locations) +
                                                      " distinct external data locations (LoadOptions::max_external_locations)"));
  if (Status s = check_location_text(location_text); !s.ok()) return failed(std::move(s.error()));
  if (Status s = open_model_dir(); !s.ok()) return failed(std::move(s.error()));

  std::string location(location_text);
  // Shown in errors and as the resolved path when the kernel cannot say
  // better; the location is at most max_location_bytes long.
  const std::filesystem::path joined = (model_dir_ / location).lexically_normal();
  const store::Root* roots[2] = {&*model_root_, nullptr};
  std::size_t root_count = 1;
  if (options_.allow_model_real_dir && real_model_root_) roots[root_count++] = &*real_model_root_;
  auto opened = store::open_beneath(std::span<const store::Root* const>(roots, root_count), location);
  if (!opened) {
    Error e = std::move(opened.error());
    std::string why = e.message;
    e.message = "external data location " + shown(location) + ": " + why;
    if (e.code == ErrorCode::path_escapes) e.message += real_dir_hint(options_.allow_model_real_dir, "the model file");
    e.file = capped_path(joined);
    return failed(std::move(e));
  }
  if (!options_.allow_hard_links && opened->st.st_nlink > 1) {
    Error e = make_error(ErrorCode::path_escapes,
                         "external data file " + shown(location) + " has " + hard_link_refusal(opened->st.st_nlink));
    e.file = capped_path(joined);
    return failed(std::move(e));
  }
  std::filesystem::path target = store::path_of(opened->fd.get(), joined);
  auto id = store_.map_external_fd(opened->fd.get(), target);
  if (!id) return failed(std::move(id.error()));
  auto full = store_.mmap_full_bytes(*id);
  if (!full) return failed(make_error(ErrorCode::internal, "mapping vanished right after it was made"));
  const store::FileIdentity identity = store::identity_of(opened->st);
  auto file = std::make_shared<const ExternalFile>(ExternalFile{location, std::move(target), identity.device, identity.inode});
  auto [it, inserted] = cache_.emplace(std::move(location), ResolvedFile{std::move(file), full->size()});
  last_file_ = &it->second;
  return last_file_;
}

Status ExternalResolver::resolve(std::span<const ExternalEntry> entries, std::string_view tensor, DataType dtype,
                                 std::uint64_t elements, std::uint64_t tensor_offset, std::vector<LoadNote>& notes,
                                 ExternalLocation& loc) {
  auto fail = [&](Error e, std::uint64_t at) {
    if (e.file.empty()) e.file = model_file_;
    if (e.tensor.empty()) e.tensor = tensor.size() <= 256 ? std::string(tensor) : shown(tensor, 256);
    if (!e.offset) e.offset = at;
    return e;
  };

  std::optional<std::uint64_t> given_length;
  std::optional<std::string_view> location;
  std::uint64_t unknown = 0;
  std::string_view first_unknown;
  // A key ballast reads may be given once. Readers disagree on which of two
  // counts (the reference's ExternalDataInfo keeps the last, a search for
  // the key finds the first), so a duplicate could show a reviewing tool
  // one range and the engine another.
  unsigned seen = 0;
  auto once = [&](const ExternalEntry& entry, unsigned bit) -> std::optional<Error> {
    if ((seen & bit) == 0) {
      seen |= bit;
      return std::nullopt;
    }
    return fail(make_error(ErrorCode::malformed, "external_data key " + shown(entry.key) +
                                                     " is given more than once (tools disagree on which one counts)"),
                entry.offset);
  };
  for (const ExternalEntry& entry : entries) {
    if (entry.key == "location") {
      if (auto dup = once(entry, 1u)) return std::move(*dup);
      location = entry.value;
    } else if (entry.key == "offset" || entry.key == "length") {
      if (auto dup = once(entry, entry.key == "offset" ? 2u : 4u)) return std::move(*dup);
      std::uint64_t v = 0;
      if (Decimal d = parse_decimal(entry.value, v); d != Decimal::ok)
        return fail(decimal_error(d, entry.key, entry.value), entry.offset);
      if (entry.key == "offset")
        loc.offset = v;
      else
        given_length = v;
    } else if (entry.key == "checksum") {
      if (auto dup = once(entry, 8u)) return std::move(*dup);
      // A SHA-1 digest in hex (ONNX), checked now: verify would otherwise
      // report a broken entry as a mismatch of the bytes.
      const bool hex = entry.value.size() == 40 &&
                       std::all_of(entry.value.begin(), entry.value.end(), [](char c) {
                         return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
                       });
      if (!hex)
        return fail(make_error(ErrorCode::malformed, "external_data checksum " + shown(entry.value, 64) +
                                                         " is not a SHA-1 digest (40 hex digits)"),
                    entry.offset);
      loc.checksum = std::string(entry.value);
    } else {
      // Kept (the entry count is capped by LoadOptions::max_external_entries)
      // and reported in one note per tensor, whatever their number.
      loc.unknown_keys.emplace_back(std::string(entry.key), std::string(entry.value));
      if (unknown++ == 0) first_unknown = entry.key;
    }
  }
  if (unknown == 1)
    notes.push_back({std::string(tensor), "unknown external_data key " + shown(first_unknown, 64) + " kept and ignored"});
  else if (unknown > 1)
    notes.push_back({std::string(tensor), std::to_string(unknown) + " unknown external_data keys (the first " +
                                              shown(first_unknown, 64) + ") kept and ignored"});
  if (!location) return fail(make_error(ErrorCode::malformed, "external data without a location"), tensor_offset);

  const auto needed = dtype_storage_bytes(dtype, elements);
  if (!needed)
    return fail(make_error(ErrorCode::overflow, "byte size of " + std::to_string(elements) + " elements of " +
                                                    std::string(dtype_name(dtype)) + " overflows"),
                tensor_offset);
  if (given_length && *given_length != *needed)
    return fail(make_error(ErrorCode::size_mismatch, "external data length " + std::to_string(*given_length) +
                                                         " but dtype x dims need " + std::to_string(*needed) + " bytes"),
                tensor_offset);
  loc.length = *needed;
  loc.length_was_given = given_length.has_value();

  Error open_error;
  const ResolvedFile* file = open_location(*location, open_error);
  if (!file) return fail(std::move(open_error), tensor_offset);
  const ResolvedFile& resolved = *file;
  loc.file = resolved.file;

  if (loc.length > UINT64_MAX - loc.offset)
    return located(ErrorCode::out_of_bounds,
                   "external data offset " + std::to_string(loc.offset) + " + length " + std::to_string(loc.length) +
                       " overflows",
                   loc.resolved().string(), tensor, loc.offset);
  if (!store::range_inside(loc.offset, loc.length, resolved.size))
    return located(ErrorCode::out_of_bounds,
                   "external data range [" + std::to_string(loc.offset) + ", " + std::to_string(loc.offset + loc.length) +
                       ") lies past the end of the " + std::to_string(resolved.size) + "-byte file",
                   loc.resolved().string(), tensor, loc.offset);
  return {};
}

}  // namespace ballast::onnx
