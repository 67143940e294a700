# cmake -DSPV=<file.spv> -DNAME=<identifier> -DOUT=<file.cpp> -P embed_spirv.cmake
# Writes the SPIR-V bytes as a C++ array so the plugin carries its shaders
# (nothing to find at run time).
file(READ "${SPV}" hex HEX)
string(LENGTH "${hex}" length)
math(EXPR remainder "${length} % 8")
if(length EQUAL 0 OR NOT remainder EQUAL 0)
  message(FATAL_ERROR "${SPV} is not a whole number of 32-bit SPIR-V words")
endif()
string(REGEX REPLACE "([0-9a-f][0-9a-f])" "0x\\1," bytes "${hex}")
string(REGEX REPLACE "((0x..,){16})" "\\1\n  " bytes "${bytes}")
file(WRITE "${OUT}.tmp" "// Generated from ${SPV} by embed_spirv.cmake; do not edit.
#include \"vulkan/embedded_shaders.hpp\"

namespace ballast::vulkan::shaders {
namespace {
alignas(4) const unsigned char kBytes[] = {
  ${bytes}
};
}  // namespace
extern const Spirv ${NAME} = {kBytes, sizeof kBytes};
}  // namespace ballast::vulkan::shaders
")
file(COPY_FILE "${OUT}.tmp" "${OUT}" ONLY_IF_DIFFERENT)
file(REMOVE "${OUT}.tmp")
