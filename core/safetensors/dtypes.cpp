#include "safetensors/dtypes.hpp"

#include <array>

namespace ballast::safetensors {

namespace {

// The specification's list. Each maps onto the ONNX type of the same
// encoding (F8_E4M3 is OCP's E4M3 with no infinities: ONNX float8e4m3fn);
// the 6-bit floats have no ONNX number and use ballast's own (data_type.hpp).
constexpr std::array<Dtype, 22> kDtypes = {{
    {"BOOL", DataType::bool_, 8},
    {"U8", DataType::uint8, 8},
    {"I8", DataType::int8, 8},
    {"I16", DataType::int16, 16},
    {"U16", DataType::uint16, 16},
    {"F16", DataType::float16, 16},
    {"BF16", DataType::bfloat16, 16},
    {"I32", DataType::int32, 32},
    {"U32", DataType::uint32, 32},
    {"F32", DataType::float32, 32},
    {"F64", DataType::float64, 64},
    {"I64", DataType::int64, 64},
    {"U64", DataType::uint64, 64},
    {"C64", DataType::complex64, 64},
    {"F8_E4M3", DataType::float8e4m3fn, 8},
    {"F8_E5M2", DataType::float8e5m2, 8},
    {"F8_E8M0", DataType::float8e8m0, 8},
    {"F8_E4M3FNUZ", DataType::float8e4m3fnuz, 8},
    {"F8_E5M2FNUZ", DataType::float8e5m2fnuz, 8},
    {"F4", DataType::float4e2m1, 4},
    {"F6_E2M3", DataType::float6e2m3, 6},
    {"F6_E3M2", DataType::float6e3m2, 6},
}};

}  // namespace

const Dtype* dtype_named(std::string_view name) noexcept {
  for (const Dtype& d : kDtypes)
    if (d.name == name) return &d;
  return nullptr;
}

std::span<const Dtype> all_dtypes() noexcept { return kDtypes; }

std::string_view safetensors_name(DataType type) noexcept {
  for (const Dtype& d : kDtypes)
    if (d.type == type) return d.name;
  return {};
}

}  // namespace ballast::safetensors
