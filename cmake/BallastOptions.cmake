# Build options, one per optional part. Backends take AUTO|ON|OFF:
# AUTO builds the backend when its toolchain is found, ON fails the
# configure when it is not, OFF skips it.
# Tests, tools and benchmarks default to ON only when ballast is the
# top-level project; a project that embeds ballast opts in to each.
option(BALLAST_BUILD_TESTS "Build the tests" ${PROJECT_IS_TOP_LEVEL})
option(BALLAST_BUILD_TOOLS "Build the ballast command line" ${PROJECT_IS_TOP_LEVEL})
option(BALLAST_BUILD_BENCHMARKS "Build the benchmarks (Google Benchmark)" ${PROJECT_IS_TOP_LEVEL})
option(BALLAST_FUZZ "Build the libFuzzer targets (needs clang)" OFF)

foreach(_backend VULKAN CUDA HIP)
  set(BALLAST_BACKEND_${_backend} AUTO CACHE STRING "Build the ${_backend} backend plugin: AUTO, ON or OFF")
  set_property(CACHE BALLAST_BACKEND_${_backend} PROPERTY STRINGS AUTO ON OFF)
endforeach()

# ballast_backend_enabled(<NAME> <FOUND> <OUT>): resolves AUTO|ON|OFF.
function(ballast_backend_enabled name found out)
  set(mode "${BALLAST_BACKEND_${name}}")
  if(mode STREQUAL "OFF")
    set(${out} FALSE PARENT_SCOPE)
  elseif(found)
    set(${out} TRUE PARENT_SCOPE)
  elseif(mode STREQUAL "ON")
    message(FATAL_ERROR "BALLAST_BACKEND_${name}=ON but its toolchain was not found")
  else()
    message(STATUS "ballast: ${name} backend skipped (toolchain not found; BALLAST_BACKEND_${name}=AUTO)")
    set(${out} FALSE PARENT_SCOPE)
  endif()
endfunction()

# Warnings for ballast's own code.
add_library(ballast_warnings INTERFACE)
target_compile_options(ballast_warnings INTERFACE
  $<$<COMPILE_LANG_AND_ID:CXX,GNU,Clang>:-Wall -Wextra -Wpedantic -Wno-missing-field-initializers>)
