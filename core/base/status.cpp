#include <ballast/status.hpp>

namespace ballast {

const char* error_code_name(ErrorCode code) noexcept {
  switch (code) {
    case ErrorCode::ok: return "ok";
    case ErrorCode::invalid_argument: return "invalid_argument";
    case ErrorCode::not_found: return "not_found";
    case ErrorCode::path_escapes: return "path_escapes";
    case ErrorCode::out_of_bounds: return "out_of_bounds";
    case ErrorCode::size_mismatch: return "size_mismatch";
    case ErrorCode::overflow: return "overflow";
    case ErrorCode::malformed: return "malformed";
    case ErrorCode::unsupported: return "unsupported";
    case ErrorCode::io: return "io";
    case ErrorCode::unavailable: return "unavailable";
    case ErrorCode::out_of_memory: return "out_of_memory";
    case ErrorCode::device_error: return "device_error";
    case ErrorCode::abi_mismatch: return "abi_mismatch";
    case ErrorCode::wrong_kind: return "wrong_kind";
    case ErrorCode::checksum_mismatch: return "checksum_mismatch";
    case ErrorCode::internal: return "internal";
  }
  return "unknown";
}

Error& Error::with_context(std::string what) & {
  if (what.empty()) return *this;
  context = context.empty() ? std::move(what) : what + ": " + context;
  return *this;
}

Error&& Error::with_context(std::string what) && {
  with_context(std::move(what));
  return std::move(*this);
}

std::string echo_limited(std::string_view value) {
  if (value.size() <= kEchoLimit) return std::string(value);
  return std::string(value.substr(0, kEchoLimit)) + "... (" + std::to_string(value.size()) + " bytes)";
}

std::string Error::to_string() const {
  std::string out = error_code_name(code);
  out += ": ";
  if (!context.empty()) {
    out += context;
    out += ": ";
  }
  out += message;
  std::string where;
  auto add = [&where](const char* key, const std::string& value) {
    if (value.empty()) return;
    where += where.empty() ? " [" : ", ";
    where += key;
    where += '=';
    where += echo_limited(value);
  };
  add("file", file);
  add("tensor", tensor);
  if (offset) add("offset", std::to_string(*offset));
  add("native", native);
  if (!where.empty()) out += where + "]";
  return out;
}

}  // namespace ballast
