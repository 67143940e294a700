// Two float32 MatMul weights stored inline in the .onnx, q.weight [8, 16]
// and o.weight [16, 8], each with its own byte pattern: a model whose
// weights are uploaded, never registered in place (for the tests that make
// each allocation fail in turn).
#pragma once

#include "unit/onnx/load_helpers.hpp"

#include <ballast/model.hpp>
#include <doctest/doctest.h>

#include <cstdint>
#include <vector>

namespace ballast::test_models {

inline Model inline_matmul_model() {
  using namespace testing::onnx_proto;
  auto f32 = [](const char* name, std::initializer_list<std::int64_t> dims, std::size_t n, unsigned seed) {
    testing::Proto t = tensor(name, 1, dims);
    std::vector<std::uint8_t> bytes(n * 4);
    for (std::size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<std::uint8_t>((i * 37 + seed * 11) % 64);
    raw_data(t, bytes);
    return t;
  };
  static const testing::Proto bytes = model(
      graph({named_node("q", "MatMul", {"x", "q.weight"}, {"y"}), named_node("o", "MatMul", {"y", "o.weight"}, {"z"})},
            {f32("q.weight", {8, 16}, 128, 1), f32("o.weight", {16, 8}, 128, 2)}));
  auto m = testing::load_proto(bytes);
  REQUIRE_MESSAGE(m.ok(), m.error().to_string());
  return std::move(*m);
}

}  // namespace ballast::test_models
