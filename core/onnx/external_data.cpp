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
  e.tensor = std::string(tensor);
  e.offset = offset;
  return e;
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
    return make_error(ErrorCode::overflow,
                      "external data '" + std::string(key) + "' does not fit in 64 bits: " + std::string(text));
  return make_error(ErrorCode::malformed,
                    "external data '" + std::string(key) + "' is not a decimal number: '" + std::string(text) + "'");
}

bool is_inside(const std::filesystem::path& dir, const std::filesystem::path& target) {
  auto d = dir.begin();
  auto t = target.begin();
  for (; d != dir.end(); ++d, ++t) {
    if (t == target.end() || *d != *t) return false;
  }
  return t != target.end();  // strictly below: the directory itself holds no bytes
}

}  // namespace

Status check_location_text(std::string_view location) {
  if (location.empty()) return make_error(ErrorCode::malformed, "external data without a location");
  if (location.find('\0') != std::string_view::npos)
    return make_error(ErrorCode::malformed, "external data location contains a NUL byte");
  const bool drive = location.size() >= 2 && location[1] == ':' &&
                     ((location[0] >= 'A' && location[0] <= 'Z') || (location[0] >= 'a' && location[0] <= 'z'));
  if (location.front() == '/' || location.front() == '\\' || drive)
    return make_error(ErrorCode::path_escapes,
                      "external data location '" + std::string(location) + "' is absolute; it must be relative to the model directory");
  std::size_t start = 0;
  while (start <= location.size()) {
    const std::size_t end = location.find_first_of("/\\", start);
    const std::string_view part = location.substr(start, end == std::string_view::npos ? std::string_view::npos : end - start);
    if (part == "..")
      return make_error(ErrorCode::path_escapes,
                        "external data location '" + std::string(location) + "' has a '..' component");
    if (end == std::string_view::npos) break;
    start = end + 1;
  }
  return {};
}

ExternalResolver::ExternalResolver(std::filesystem::path model_dir, std::string model_file, const LoadOptions& options,
                                   WeightStore& store)
    : model_dir_(std::move(model_dir)), model_file_(std::move(model_file)), options_(options), store_(store) {}

Result<std::filesystem::path> ExternalResolver::canonical_model_dir() {
  if (canonical_dir_) return *canonical_dir_;
  std::error_code ec;
  auto dir = std::filesystem::canonical(model_dir_.empty() ? std::filesystem::path(".") : model_dir_, ec);
  if (ec) {
    Error e = make_error(ErrorCode::not_found, "model directory cannot be resolved: " + ec.message());
    e.file = model_dir_.string();
    return e;
  }
  canonical_dir_ = dir;
  return dir;
}

const ExternalResolver::ResolvedFile* ExternalResolver::open_location(std::string_view location_text, Error& error) {
  if (last_file_ && location_text == last_file_->file->location) return last_file_;
  auto failed = [&error](Error e) -> const ResolvedFile* {
    error = std::move(e);
    return nullptr;
  };
  std::string location(location_text);
  if (auto it = cache_.find(location); it != cache_.end()) {
    last_file_ = &it->second;
    return last_file_;
  }
  if (Status s = check_location_text(location); !s.ok()) return failed(std::move(s.error()));
  auto dir = canonical_model_dir();
  if (!dir) return failed(std::move(dir.error()));
  const std::filesystem::path joined = *dir / location;

  std::error_code ec;
  std::filesystem::path target = std::filesystem::canonical(joined, ec);
  if (ec) {
    Error e = make_error(ec == std::errc::no_such_file_or_directory ? ErrorCode::not_found : ErrorCode::io,
                         "external data file '" + location + "' cannot be resolved: " + ec.message());
    e.file = joined.string();
    return failed(std::move(e));
  }
  if (!options_.allow_external_outside_model_dir && !is_inside(*dir, target)) {
    Error e = make_error(ErrorCode::path_escapes,
                         "external data location '" + location + "' resolves to " + target.string() +
                             ", outside the model directory " + dir->string() +
                             " (set LoadOptions::allow_external_outside_model_dir to allow symlinked caches)");
    e.file = joined.string();
    return failed(std::move(e));
  }
  if (Status s = store::require_regular_file(target); !s.ok()) return failed(std::move(s.error()));
  auto id = store_.map_external(target);
  if (!id) return failed(std::move(id.error()));
  auto full = store_.mmap_full_bytes(*id);
  if (!full) return failed(make_error(ErrorCode::internal, "mapping vanished right after it was made"));
  auto file = std::make_shared<const ExternalFile>(ExternalFile{location, std::move(target)});
  auto [it, inserted] = cache_.emplace(std::move(location), ResolvedFile{std::move(file), full->size()});
  last_file_ = &it->second;
  return last_file_;
}

Status ExternalResolver::resolve(std::span<const ExternalEntry> entries, std::string_view tensor, DataType dtype,
                                 std::uint64_t elements, std::uint64_t tensor_offset, std::vector<LoadNote>& notes,
                                 ExternalLocation& loc) {
  auto fail = [&](Error e, std::uint64_t at) {
    if (e.file.empty()) e.file = model_file_;
    if (e.tensor.empty()) e.tensor = std::string(tensor);
    if (!e.offset) e.offset = at;
    return e;
  };

  std::optional<std::uint64_t> given_length;
  std::optional<std::string_view> location;
  // Later entries win, as in the reference implementation.
  for (const ExternalEntry& entry : entries) {
    if (entry.key == "location") {
      location = entry.value;
    } else if (entry.key == "offset" || entry.key == "length") {
      std::uint64_t v = 0;
      if (Decimal d = parse_decimal(entry.value, v); d != Decimal::ok)
        return fail(decimal_error(d, entry.key, entry.value), entry.offset);
      if (entry.key == "offset")
        loc.offset = v;
      else
        given_length = v;
    } else if (entry.key == "checksum") {
      loc.checksum = std::string(entry.value);
    } else {
      loc.unknown_keys.emplace_back(std::string(entry.key), std::string(entry.value));
      notes.push_back({std::string(tensor), "unknown external_data key '" + std::string(entry.key) + "' = '" +
                                                std::string(entry.value) + "' kept and ignored"});
    }
  }
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
