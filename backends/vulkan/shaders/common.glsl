// Shared by every derivation shader: operands addressed by buffer device
// addresses (as uvec2, so no shaderInt64 is needed), read and written as
// 32-bit words or 16-byte packets (so no 8/16-bit storage features are
// needed), and the per-element math of backends/common/kernel_math.hpp
// ported bit for bit.
#extension GL_EXT_buffer_reference : require
#extension GL_EXT_buffer_reference_uvec2 : require
#extension GL_EXT_control_flow_attributes : require

layout(local_size_x_id = 0) in;
layout(constant_id = 1) const uint VARIANT = 0;    // per shader: element size, source type
layout(constant_id = 2) const uint ZERO_POINTS = 0;  // int4: 0 absent, 1 packed u4, 2 unpacked
// 1: the packet pipeline, which the host picks when the operands are 16-byte
// aligned and the shape splits into whole packets (backends/vulkan/
// kernels.cpp says when); 0: the general word pipeline, for everything else.
layout(constant_id = 3) const uint FAST = 0;

// Operands never overlap (the backend refuses launches whose outputs
// overlap another operand), so every reference is `restrict`; inputs are
// read through a `readonly` view, so loads need not wait on stores.
layout(buffer_reference, std430, buffer_reference_align = 4) restrict buffer Words { uint w[]; };
layout(buffer_reference, std430, buffer_reference_align = 4) restrict readonly buffer ReadWords { uint w[]; };
layout(buffer_reference, std430, buffer_reference_align = 16) restrict buffer Packets { uvec4 v[]; };
layout(buffer_reference, std430, buffer_reference_align = 16) restrict readonly buffer ReadPackets { uvec4 v[]; };

// Addresses are rounded down to 4 bytes on the host; the low two bits of
// each operand's address are in `shifts` (2 bits per operand, in the order
// of the OP_ constants) so byte offsets become word indices here.
layout(push_constant) uniform Params {
  uvec2 src;
  uvec2 scales;
  uvec2 zero_points;
  uvec2 dst;
  uvec2 dst2;
  uint shifts;
  uint rows;
  uint cols;
  uint block_size;
  uint dst_bytes;   // bytes of the output this dispatch writes
  uint dst2_bytes;
  uint base;        // first work item of this dispatch (large launches are split)
  uint total;       // work items in the whole launch
  uint mode;        // shader-specific (repack_int4: 0 words, 1 scale pairs)
  uint div_mul;     // packet pipelines: packet index / packets per row is
  uint div_shift;   // (index * div_mul) >> (32 + div_shift), or index >> div_shift when div_mul is 0
  uint src_cols;    // slice: the source's row length, in elements
  uint col_offset;  // slice: the first column taken
} p;

const uint OP_SRC = 0u, OP_SCALES = 1u, OP_ZP = 2u, OP_DST = 3u, OP_DST2 = 4u;

uint op_shift(uint op) { return (p.shifts >> (2u * op)) & 3u; }

uvec2 op_base(uint op) {
  if (op == OP_SRC) return p.src;
  if (op == OP_SCALES) return p.scales;
  if (op == OP_ZP) return p.zero_points;
  if (op == OP_DST) return p.dst;
  return p.dst2;
}

// Word kernels: each invocation handles WORDS_PER_INVOCATION output words,
// strided by the dispatch's invocation count (neighbouring invocations
// touch neighbouring words), so a dispatch of g workgroups covers
// g * local_size * WORDS_PER_INVOCATION words from p.base. Fewer, fuller
// workgroups matter on CPU drivers, where each workgroup has a fixed cost.
const uint WORDS_PER_INVOCATION = 16u;

void process_word(uint word);

void run_words() {
  const uint stride = gl_NumWorkGroups.x * gl_WorkGroupSize.x;
  uint word = p.base + gl_GlobalInvocationID.x;
  for (uint i = 0u; i < WORDS_PER_INVOCATION && word < p.total; ++i, word += stride) process_word(word);
}

// Packet pipelines: one invocation per 16-byte packet of the output.
uint packet_index() { return p.base + gl_GlobalInvocationID.x; }

// The row of a packet, without a division: the host's multiplier is exact
// for every index below 2^31 (packets of a < 4 GiB output are below 2^28).
uint row_of_packet(uint packet) {
  uint hi, lo;
  umulExtended(packet, p.div_mul, hi, lo);
  return (p.div_mul == 0u ? packet : hi) >> p.div_shift;  // a select, not a branch
}

// ------------------------------------------------------------ byte access
uint load_word(uint op, uint word) { return ReadWords(op_base(op)).w[word]; }

uint read_u8(uint op, uint offset) {
  const uint b = op_shift(op) + offset;
  return (load_word(op, b >> 2) >> (8u * (b & 3u))) & 0xffu;
}

uint read_u16(uint op, uint offset) {
  const uint b = op_shift(op) + offset;
  const uint lo = load_word(op, b >> 2);
  if ((b & 3u) != 3u) return (lo >> (8u * (b & 3u))) & 0xffffu;
  return (lo >> 24) | ((load_word(op, (b >> 2) + 1u) & 0xffu) << 8);
}

uint read_u32(uint op, uint offset) {
  const uint b = op_shift(op) + offset;
  const uint s = b & 3u;
  const uint lo = load_word(op, b >> 2);
  if (s == 0u) return lo;
  return (lo >> (8u * s)) | (load_word(op, (b >> 2) + 1u) << (32u - 8u * s));
}

// Output words: word `word` of the operand's aligned view covers operand
// bytes [4*word - shift, 4*word - shift + 4). `mask` marks the bytes that
// belong to the operand; the others belong to someone else (a neighbouring
// row written by another workgroup, another tensor) and are preserved with
// atomics. Whole words are plain stores.
void store_word(uint op, uint word, uint value, uint mask) {
  if (mask == 0xffffffffu) {
    Words(op_base(op)).w[word] = value;
  } else if (mask != 0u) {
    atomicAnd(Words(op_base(op)).w[word], ~mask);
    atomicOr(Words(op_base(op)).w[word], value & mask);
  }
}

// Words of the aligned view of an operand of `bytes` bytes.
uint word_count(uint op, uint bytes) { return (op_shift(op) + bytes + 3u) >> 2; }

// ------------------------------------------------------------ kernel_math
uint f16_bits_from_f32_bits(uint x) {
  const uint sign = (x >> 16) & 0x8000u;
  const uint ax = x & 0x7fffffffu;
  if (ax >= 0x7f800000u) {
    if (ax == 0x7f800000u) return sign | 0x7c00u;
    return sign | 0x7e00u | ((ax >> 13) & 0x3ffu);
  }
  if (ax >= 0x477ff000u) return sign | 0x7c00u;
  if (ax >= 0x38800000u) {
    const uint m = ax - (112u << 23);
    return sign | ((m + 0xfffu + ((m >> 13) & 1u)) >> 13);
  }
  const uint e = ax >> 23;
  const uint shift = 126u - e;
  if (shift > 24u) return sign;
  const uint significand = (ax & 0x7fffffu) | 0x800000u;
  uint q = significand >> shift;
  const uint rem = significand & ((1u << shift) - 1u);
  const uint half_ = 1u << (shift - 1u);
  if (rem > half_ || (rem == half_ && (q & 1u) != 0u)) ++q;
  return sign | q;
}

uint f32_bits_from_f16_bits(uint h) {
  const uint sign = (h & 0x8000u) << 16;
  uint e = (h >> 10) & 0x1fu;
  uint m = h & 0x3ffu;
  if (e == 0x1fu) return sign | 0x7f800000u | (m << 13) | (m != 0u ? 0x400000u : 0u);
  if (e != 0u) return sign | ((e + 112u) << 23) | (m << 13);
  if (m == 0u) return sign;
  // Subnormal f16: normalise (findMSB gives the leading bit, 0..9).
  const uint lead = uint(findMSB(m));
  e = 113u - (10u - lead);
  m = (m << (10u - lead)) & 0x3ffu;
  return sign | (e << 23) | (m << 13);
}

int round_half_even_bits(uint x) {
  const uint ax = x & 0x7fffffffu;
  const uint e = ax >> 23;
  uint magnitude;
  if (e < 126u) {
    magnitude = 0u;
  } else if (e >= 150u) {
    magnitude = ((ax & 0x7fffffu) | 0x800000u) << (e - 150u);
  } else {
    const uint significand = (ax & 0x7fffffu) | 0x800000u;
    const uint shift = 150u - e;
    magnitude = significand >> shift;
    const uint rem = significand & ((1u << shift) - 1u);
    const uint half_ = 1u << (shift - 1u);
    if (rem > half_ || (rem == half_ && (magnitude & 1u) != 0u)) ++magnitude;
  }
  const int m = int(magnitude);
  return (x >> 31) != 0u ? -m : m;
}

// Packet pipelines convert the common case without branches: f32 bits
// whose f16 is a normal number (|x| in [2^-14, 65520)) or a zero, where
// rounding to f16 is a fixed shift of the significand. Anything else (f16
// subnormals, overflow, infinities, NaNs) takes f16_bits_from_f32_bits.
bool f16_fast(uint x) {
  const uint ax = x & 0x7fffffffu;
  return ax - 0x38800000u < 0x477ff000u - 0x38800000u || ax == 0u;
}

bool all_f16_fast(uvec4 v) {
  const uvec4 ax = v & 0x7fffffffu;
  return all(lessThan(mix(ax - 0x38800000u, uvec4(0u), equal(ax, uvec4(0u))), uvec4(0x477ff000u - 0x38800000u)));
}

// f16_bits_from_f32_bits for f16_fast inputs.
uint f16_bits_fast(uint x) {
  const uint ax = x & 0x7fffffffu;
  const uint m = ax - (112u << 23);
  const uint magnitude = (m + 0xfffu + ((m >> 13) & 1u)) >> 13;
  return ((x >> 16) & 0x8000u) | (ax == 0u ? 0u : magnitude);
}

// Eight f32 (as bits: a, then b) to the packet of their eight f16, when
// all_f16_fast holds for both.
uvec4 f16_packet_fast(uvec4 a, uvec4 b) {
  return uvec4(f16_bits_fast(a.x) | (f16_bits_fast(a.y) << 16), f16_bits_fast(a.z) | (f16_bits_fast(a.w) << 16),
               f16_bits_fast(b.x) | (f16_bits_fast(b.y) << 16), f16_bits_fast(b.z) | (f16_bits_fast(b.w) << 16));
}

bool is_nan_bits(uint x) { return (x & 0x7fffffffu) > 0x7f800000u; }

// Float arithmetic here must match IEEE f32 exactly. Drivers may flush
// subnormal inputs to zero (shaderDenormPreserveFloat32 is optional), so
// callers keep subnormals out of the hardware operations where that would
// change a result that is visible after rounding.
bool is_subnormal_bits(uint x) { return (x & 0x7f800000u) == 0u && (x & 0x7fffffu) != 0u; }
