// Functions of ONNX TensorProto.DataType (the enum: data_type.hpp).
#pragma once

#include <ballast/data_type.hpp>
#include <ballast/export.hpp>
#include <cstdint>
#include <optional>
#include <span>
#include <string_view>

BALLAST_API_BEGIN

namespace ballast {

// Whether `raw` is an ONNX type number this build knows (0..kMaxKnownDataType).
// The types past ONNX's range (float6e2m3, float6e3m2) are not: no ONNX file
// may name them.
bool is_known_dtype(std::int32_t raw) noexcept;

// ONNX name in lower case: "float", "float16", "int4", "bool", "double", ...
std::string_view dtype_name(DataType t) noexcept;
std::optional<DataType> dtype_from_name(std::string_view name) noexcept;

// Bits per element: 4 for the 4-bit types, 6 for the 6-bit ones, 0 for
// string/undefined and for the block types (their elements have no whole
// width of their own: dtype_block()).
unsigned dtype_bits(DataType t) noexcept;

// A block type's fixed unit: `elements` values stored in `bytes` bytes
// (GGUF's Q4_0: 32 in 18). Element types are blocks of one element.
struct DtypeBlock {
  std::uint32_t elements = 1;
  std::uint32_t bytes = 0;
};
// nullopt for every type that is not a block type.
std::optional<DtypeBlock> dtype_block(DataType t) noexcept;

// Bytes of a dense little-endian tensor of `elements` elements: sub-byte
// types packed densely (4-bit ones two per byte, low nibble first),
// rounded up to whole bytes; block types as whole blocks (nullopt unless
// `elements` is a multiple of the block). nullopt on overflow or for types
// without a fixed width (string, undefined).
std::optional<std::uint64_t> dtype_storage_bytes(DataType t, std::uint64_t elements) noexcept;

// GGUF's tensor types (ggml type ids): the DataType a GGUF file's type id
// reads as (nullopt for an id the format does not define, or no longer
// does), and GGUF's name for a type a GGUF file can hold ("Q4_K", "F32",
// "BF16"; "" for any other type).
std::optional<DataType> dtype_from_gguf_type(std::uint32_t id) noexcept;
std::string_view dtype_gguf_name(DataType t) noexcept;

// Product of dims; nullopt when a dim is negative or the product overflows.
std::optional<std::uint64_t> element_count(std::span<const std::int64_t> dims) noexcept;

}  // namespace ballast

BALLAST_API_END
