// Errors are values in ballast: every fallible call returns Status or
// Result<T>. Nothing throws across the public API or the plugin boundary.
// Check ok() first: the value of an error Result (value(), *, ->) throws
// std::bad_variant_access, and error() of an ok Status or Result is
// undefined (a precondition, like an empty optional's value).
#pragma once

#include <ballast/export.hpp>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <variant>

BALLAST_API_BEGIN

namespace ballast {

enum class ErrorCode : std::uint8_t {
  ok = 0,
  invalid_argument,   // bad config string, bad launch parameters, usage
  not_found,          // file, weight, plugin, device
  path_escapes,       // external-data location leaves the model directory
  out_of_bounds,      // a byte range past the end of its file or buffer
  size_mismatch,      // declared length disagrees with dtype x dims
  overflow,           // arithmetic on sizes/offsets would overflow
  malformed,          // protobuf wire format or ONNX structure is wrong
  unsupported,        // valid input that ballast does not handle
  io,                 // the operating system refused a read/map/stat
  unavailable,        // backend present but no driver/device
  out_of_memory,      // host or device allocation failed
  device_error,       // a driver call failed (carries the driver's name for it)
  abi_mismatch,       // plugin built against another ballast/compiler
  wrong_kind,         // derivation value kind (single vs pair) mismatch
  checksum_mismatch,  // external-data checksum differs from the bytes
  internal,           // a broken invariant inside ballast
};

const char* error_code_name(ErrorCode code) noexcept;

// One error: a code plus everything needed to say what and where in one line.
struct Error {
  ErrorCode code = ErrorCode::internal;
  std::string message;                // what went wrong
  std::string file;                   // file involved, if any
  std::string tensor;                 // tensor/weight name, if any
  std::optional<std::uint64_t> offset;  // byte offset in `file`, if any
  std::string native;                 // the driver's own error name, e.g. CUDA_ERROR_OUT_OF_MEMORY
  std::string context;                // "while ..." chain, outermost first

  // Prefixes the context chain: errors gain context as they rise.
  Error& with_context(std::string what) &;
  Error&& with_context(std::string what) &&;

  // "<code>: <context>: <message> [file=..., tensor=..., offset=..., native=...]",
  // each of file, tensor and native through echo_limited().
  std::string to_string() const;
};

// Names and paths come from hostile files: a message echoes each at most
// kEchoLimit bytes long, then says how long it was ("... (N bytes)").
inline constexpr std::size_t kEchoLimit = 1024;
std::string echo_limited(std::string_view value);

inline Error make_error(ErrorCode code, std::string message) {
  Error e;
  e.code = code;
  e.message = std::move(message);
  return e;
}

// Ok is a null pointer: the success path, which runs once per protobuf
// field while a model is opened, builds and returns one machine word.
class [[nodiscard]] Status {
 public:
  Status() noexcept = default;
  Status(Error error) : error_(std::make_unique<Error>(std::move(error))) {}  // NOLINT: implicit by design
  Status(const Status& other) : error_(other.error_ ? std::make_unique<Error>(*other.error_) : nullptr) {}
  Status(Status&&) noexcept = default;
  Status& operator=(const Status& other) {
    if (this != &other) error_ = other.error_ ? std::make_unique<Error>(*other.error_) : nullptr;
    return *this;
  }
  Status& operator=(Status&&) noexcept = default;

  static Status ok_status() { return Status(); }
  bool ok() const noexcept { return error_ == nullptr; }
  explicit operator bool() const noexcept { return ok(); }
  ErrorCode code() const noexcept { return error_ ? error_->code : ErrorCode::ok; }
  const Error& error() const { return *error_; }
  Error& error() { return *error_; }
  std::string to_string() const { return error_ ? error_->to_string() : std::string("ok"); }
  Status&& with_context(std::string what) && {
    if (error_) error_->with_context(std::move(what));
    return std::move(*this);
  }

 private:
  std::unique_ptr<Error> error_;
};

template <class T>
class [[nodiscard]] Result {
 public:
  Result(T value) : v_(std::in_place_index<0>, std::move(value)) {}  // NOLINT
  Result(Error error) : v_(std::in_place_index<1>, std::move(error)) {}  // NOLINT
  Result(Status status) : v_(std::in_place_index<1>, status.ok() ? make_error(ErrorCode::internal, "Result built from an ok Status") : std::move(status.error())) {}  // NOLINT

  bool ok() const noexcept { return v_.index() == 0; }
  explicit operator bool() const noexcept { return ok(); }
  T& value() & { return std::get<0>(v_); }
  const T& value() const& { return std::get<0>(v_); }
  T&& value() && { return std::get<0>(std::move(v_)); }
  T* operator->() { return &std::get<0>(v_); }
  const T* operator->() const { return &std::get<0>(v_); }
  T& operator*() & { return std::get<0>(v_); }
  const T& operator*() const& { return std::get<0>(v_); }
  const Error& error() const { return std::get<1>(v_); }
  Error& error() { return std::get<1>(v_); }
  Status status() const { return ok() ? Status() : Status(error()); }
  ErrorCode code() const noexcept { return ok() ? ErrorCode::ok : std::get<1>(v_).code; }

 private:
  std::variant<T, Error> v_;
};

namespace status_detail {

// The macros' return value (a function call, so that compilers do not warn
// about std::move on a local in a return statement).
inline Status&& propagate(Status& s) noexcept { return std::move(s); }

inline Status status_of(Status&& s) noexcept { return std::move(s); }
inline Status status_of(const Status& s) { return s; }
template <class T>
Status status_of(Result<T>&& r) {
  return r.ok() ? Status() : Status(std::move(r.error()));
}
template <class T>
Status status_of(const Result<T>& r) {
  return r.status();
}

// The context pieces of the macros below, joined; built only on failure.
inline std::string context(std::string_view first) { return std::string(first); }
template <class... Rest>
std::string context(std::string_view first, const Rest&... rest) {
  std::string out(first);
  (out.append(std::string_view(rest)), ...);
  return out;
}

}  // namespace status_detail

}  // namespace ballast

// Early returns on failure, for functions returning Status or Result<U>.
//
//   BALLAST_RETURN_IF_ERROR(expr[, context...]);
//     expr is a Status or a Result<T>; on failure the function returns its
//     error.
//   BALLAST_ASSIGN_OR_RETURN(lhs, expr[, context...]);
//     expr is a Result<T>; on failure returns its error, else moves the value
//     into lhs, a declaration (`auto x`, `std::uint64_t n`) or a variable.
//
// The optional context pieces (strings, string_views, C strings) are joined
// and prefixed to the error's "while ..." chain (Error::with_context); they
// are evaluated only on failure. ASSIGN_OR_RETURN expands to several
// statements (brace it under an `if`), and a comma in lhs needs parentheses
// around the type, as in any macro argument.
#define BALLAST_RETURN_IF_ERROR(expr, ...)                                                                    \
  do {                                                                                                        \
    if (::ballast::Status ballast_status_ = ::ballast::status_detail::status_of(expr); !ballast_status_.ok()) \
        [[unlikely]]                                                                                          \
      return ::ballast::status_detail::propagate(ballast_status_)                                             \
          __VA_OPT__(.with_context(::ballast::status_detail::context(__VA_ARGS__)));                          \
  } while (false)

#define BALLAST_ASSIGN_OR_RETURN(lhs, expr, ...)                                         \
  BALLAST_ASSIGN_OR_RETURN_IMPL_(BALLAST_STATUS_CONCAT_(ballast_result_, __LINE__), lhs, \
                                 expr __VA_OPT__(, ) __VA_ARGS__)

#define BALLAST_STATUS_CONCAT_INNER_(a, b) a##b
#define BALLAST_STATUS_CONCAT_(a, b) BALLAST_STATUS_CONCAT_INNER_(a, b)
#define BALLAST_ASSIGN_OR_RETURN_IMPL_(result, lhs, expr, ...)                     \
  auto result = (expr);                                                            \
  if (!result.ok()) [[unlikely]]                                                   \
    return ::ballast::Status(std::move(result.error()))                            \
        __VA_OPT__(.with_context(::ballast::status_detail::context(__VA_ARGS__))); \
  lhs = std::move(result).value()

BALLAST_API_END
