#version 460
// quant_int8_given_max: quant_int8 with each row's maximum read from the
// scales operand (f32 [N]), the word pipeline only: a given maximum may be
// below the row's own, so quotients past 127 must clamp, which the packet
// pipeline's reciprocal path leaves out (quant_int8_common.glsl).
const bool GIVEN_MAX = true;
#include "quant_int8_common.glsl"
