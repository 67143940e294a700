// The derivation shaders, compiled by glslc at build time and embedded as
// bytes (backends/vulkan/cmake/embed_spirv.cmake).
#pragma once

#include <ballast/derivation_kinds.hpp>

#include <cstddef>

namespace ballast::vulkan::shaders {

struct Spirv {
  const unsigned char* bytes;
  std::size_t size;
};

// The shader of each derivation kind, indexed by Derivation
// (shader_table.cpp, generated from the kind table).
extern const Spirv* const by_kind[kDerivationCount];

}  // namespace ballast::vulkan::shaders
