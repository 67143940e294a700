// The derivation shaders, compiled by glslc at build time and embedded as
// bytes (backends/vulkan/cmake/embed_spirv.cmake).
#pragma once

#include <cstddef>

namespace ballast::vulkan::shaders {

struct Spirv {
  const unsigned char* bytes;
  std::size_t size;
};

extern const Spirv transpose;
extern const Spirv to_f16;
extern const Spirv dequant_int4;
extern const Spirv repack_int4;
extern const Spirv quant_int8;

}  // namespace ballast::vulkan::shaders
