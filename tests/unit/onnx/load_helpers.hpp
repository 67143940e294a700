// Shared helpers of the loader tests.
#pragma once

#include <ballast/onnx_loader.hpp>

#include "unit/onnx/proto_builder.hpp"

#include <doctest/doctest.h>

#include <cstdint>
#include <string_view>
#include <vector>

namespace ballast::testing {

// Loads a model built in memory; `model` must outlive the result.
inline Result<Model> load_proto(const Proto& model, const std::filesystem::path& dir = ".",
                                const LoadOptions& options = {}) {
  return load_onnx_from_bytes(model.span(), dir, options);
}

// A model whose main graph has exactly these initializers.
inline Proto model_with(std::initializer_list<Proto> initializers) {
  Proto g;
  g.str(2, "g");
  for (const auto& t : initializers) g.msg(5, t);
  return onnx_proto::model(g);
}

inline const WeightRef& weight_named(const Model& m, std::string_view name) {
  auto id = m.value_id(name);
  REQUIRE_MESSAGE(id.has_value(), "no value named " << name);
  auto it = m.store().weights().find(*id);
  REQUIRE_MESSAGE(it != m.store().weights().end(), "no weight named " << name);
  return it->second;
}

inline std::vector<std::uint8_t> bytes_named(const Model& m, std::string_view name) {
  auto b = m.store().bytes(weight_named(m, name));
  REQUIRE(b.has_value());
  std::vector<std::uint8_t> out;
  for (std::byte x : *b) out.push_back(std::to_integer<std::uint8_t>(x));
  return out;
}

// True when `inner` lies inside `outer` (a borrowed weight points into the input).
inline bool points_into(Bytes inner, std::span<const std::byte> outer) {
  return !inner.empty() && inner.data() >= outer.data() && inner.data() + inner.size() <= outer.data() + outer.size();
}

}  // namespace ballast::testing
