// ONNX TensorProto.DataType, numbered exactly as the ONNX schema numbers
// them: the enum alone, in C++17 with no library dependence, so the CUDA and
// HIP kernel objects can read the kind table (derivation_kinds.hpp).
// dtype.hpp has the functions (names, widths, storage sizes).
#pragma once

#include <cstdint>

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
  float8e8m0 = 24,

  // Not ONNX types: safetensors' 6-bit floats (F6_E2M3, F6_E3M2, the OCP
  // MX formats). Numbered past ONNX's range, so no ONNX file can name them.
  float6e2m3 = 1001,
  float6e3m2 = 1002,

  // Not ONNX types: GGUF's block-quantized types, numbered 2000 + the ggml
  // type id. A block holds a fixed number of elements in a fixed number of
  // bytes (dtype_block()); the layouts are in docs/derivations.md.
  q4_0 = 2002,
  q4_1 = 2003,
  q5_0 = 2006,
  q5_1 = 2007,
  q8_0 = 2008,
  q8_1 = 2009,
  q2_k = 2010,
  q3_k = 2011,
  q4_k = 2012,
  q5_k = 2013,
  q6_k = 2014,
  q8_k = 2015,
  iq2_xxs = 2016,
  iq2_xs = 2017,
  iq3_xxs = 2018,
  iq1_s = 2019,
  iq4_nl = 2020,
  iq3_s = 2021,
  iq2_s = 2022,
  iq4_xs = 2023,
  iq1_m = 2029,
  tq1_0 = 2034,
  tq2_0 = 2035,
  mxfp4 = 2039,
};

// Highest ONNX type number this build understands.
inline constexpr std::int32_t kMaxKnownDataType = 24;

}  // namespace ballast
