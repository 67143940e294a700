// safetensors' dtype names and what each is in ballast's DataType.
#pragma once

#include <ballast/data_type.hpp>

#include <span>
#include <string_view>

namespace ballast::safetensors {

struct Dtype {
  std::string_view name;  // as the header spells it: "F16", "F8_E4M3", ...
  DataType type;
  unsigned bits;  // per element; 4 and 6 for the sub-byte floats
};

// Every dtype of the specification; nullptr for a name it does not have.
const Dtype* dtype_named(std::string_view name) noexcept;
std::span<const Dtype> all_dtypes() noexcept;
// The safetensors name of `type` ("" when safetensors has none).
std::string_view safetensors_name(DataType type) noexcept;

}  // namespace ballast::safetensors
