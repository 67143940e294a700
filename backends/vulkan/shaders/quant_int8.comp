#version 460
// quant_int8: each row's scale from the row's own max |w|
// (quant_int8_common.glsl has the kernel).
const bool GIVEN_MAX = false;
#include "quant_int8_common.glsl"
