// ONNX TensorProto.DataType, numbered exactly as the ONNX schema numbers them.
#pragma once

#include <ballast/export.hpp>
#include <cstdint>
#include <optional>
#include <span>
#include <string_view>

BALLAST_API_BEGIN

namespace ballast {

enum class DataType : std::int32_t {
  undefined = 0,
  float32 = 1,
  uint8 = 2,
  int8 = 3,
  uint16 = 4,
  int16 = 5,
  int32 = 6,
  int64 = 7,
  string = 8,
  bool_ = 9,
  float16 = 10,
  float64 = 11,
  uint32 = 12,
  uint64 = 13,
  complex64 = 14,
  complex128 = 15,
  bfloat16 = 16,
  float8e4m3fn = 17,
  float8e4m3fnuz = 18,
  float8e5m2 = 19,
  float8e5m2fnuz = 20,
  uint4 = 21,
  int4 = 22,
  float4e2m1 = 23,
};

// Highest type number this build understands.
inline constexpr std::int32_t kMaxKnownDataType = 23;

bool is_known_dtype(std::int32_t raw) noexcept;

// ONNX name in lower case: "float", "float16", "int4", "bool", "double", ...
std::string_view dtype_name(DataType t) noexcept;
std::optional<DataType> dtype_from_name(std::string_view name) noexcept;

// Bits per element: 4 for the 4-bit types, 0 for string/undefined.
unsigned dtype_bits(DataType t) noexcept;

// Bytes of a dense little-endian tensor of `elements` elements, sub-byte
// types packed two per byte (low nibble first), rounded up. nullopt on
// overflow or for types without a fixed width (string, undefined).
std::optional<std::uint64_t> dtype_storage_bytes(DataType t, std::uint64_t elements) noexcept;

// Product of dims; nullopt when a dim is negative or the product overflows.
std::optional<std::uint64_t> element_count(std::span<const std::int64_t> dims) noexcept;

}  // namespace ballast

BALLAST_API_END
