#include <ballast/dtype.hpp>
#include <doctest/doctest.h>

#include <cstdint>
#include <vector>

using namespace ballast;

TEST_CASE("every ONNX type 1..24 has a lower-case name that round-trips") {
  for (int raw = 1; raw <= kMaxKnownDataType; ++raw) {
    auto t = static_cast<DataType>(raw);
    auto name = dtype_name(t);
    CAPTURE(raw);
    CHECK(dtype_from_name(name) == t);
  }
  CHECK(dtype_name(DataType::float32) == "float");
  CHECK(dtype_name(DataType::float64) == "double");
  CHECK(dtype_name(DataType::int4) == "int4");
  CHECK(dtype_name(DataType::float4e2m1) == "float4e2m1");
  CHECK_FALSE(is_known_dtype(25));
  CHECK_FALSE(is_known_dtype(static_cast<std::int32_t>(DataType::float6e2m3)));
  CHECK(dtype_from_name("float6e3m2") == DataType::float6e3m2);
  CHECK(dtype_bits(DataType::float6e2m3) == 6);
}

TEST_CASE("storage bytes pack 4-bit types two per byte and refuse overflow") {
  CHECK(dtype_storage_bytes(DataType::int4, 5) == 3);
  CHECK(dtype_storage_bytes(DataType::uint4, 4) == 2);
  CHECK(dtype_storage_bytes(DataType::float4e2m1, 0) == 0);
  CHECK(dtype_storage_bytes(DataType::float6e2m3, 4) == 3);
  CHECK(dtype_storage_bytes(DataType::float6e3m2, 5) == 4);  // 30 bits
  CHECK(dtype_storage_bytes(DataType::float6e3m2, UINT64_MAX) == UINT64_MAX / 8 * 6 + 6);
  CHECK(dtype_storage_bytes(DataType::int4, UINT64_MAX) == UINT64_MAX / 2 + 1);
  CHECK(dtype_storage_bytes(DataType::complex128, 3) == 48);
  CHECK(dtype_storage_bytes(DataType::bool_, 3) == 3);
  CHECK_FALSE(dtype_storage_bytes(DataType::string, 3).has_value());
  CHECK_FALSE(dtype_storage_bytes(DataType::float64, UINT64_MAX / 4).has_value());
  std::vector<std::int64_t> dims{1LL << 40, 1LL << 40};
  CHECK_FALSE(element_count(dims).has_value());
  std::vector<std::int64_t> neg{3, -1};
  CHECK_FALSE(element_count(neg).has_value());
  std::vector<std::int64_t> scalar{};
  CHECK(element_count(scalar) == 1);
}
