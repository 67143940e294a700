#!/usr/bin/python3
"""Writes the seed corpus of fuzz_launch_validation (tests/fuzz/corpus_launch).

Each seed is a short program in the target's input format (see the comment
at the top of fuzz_launch_validation.cpp): four allocations (8, 8, 4 and 1
KiB), a read-only registration in the host arena, then operations. Every
derivation is launched once validly on each kernel table, plus copies, a
read-write registration, frees and unregistrations followed by launches on
the stale pointers, and the refusals the rules name (an output aliasing an
input, a write into a read-only registration, a misaligned operand, a
range one byte past its allocation), and the inputs that found bugs.
"""
import os
import re
import struct
import sys

out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(os.path.abspath(__file__)), "corpus_launch")
os.makedirs(out, exist_ok=True)

# Known ranges, in the order the target records them.
A0, A1, A2, A3, ARENA, RO = 0, 1, 2, 3, 4, 5
RW = 6  # the first registration a seed adds itself

F32, U8, I64, F16, BF16 = 1, 2, 7, 10, 16
# The derivation kinds, numbered as the kind table numbers them.
_KINDS_HEADER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "include", "ballast",
                             "derivation_kinds.hpp")
with open(_KINDS_HEADER) as f:
    _enum = re.search(r"enum class Derivation[^{]*\{(.*?)\};", f.read(), re.S).group(1)
KINDS = {name: int(value) for name, value in re.findall(r"(\w+)\s*=\s*(\d+)", _enum)}
TRANSPOSE, TO_F16, DEQUANT, REPACK, QUANT8 = (KINDS[k] for k in ("transpose", "to_f16", "dequant_int4",
                                                                   "repack_int4", "quant_int8"))
DEQUANT_GGUF, DEQUANT_GGUF_F32 = KINDS["dequant_gguf"], KINDS["dequant_gguf_f32"]
SLICE, QUANT8_GIVEN_MAX, REPACK_GGUF = KINDS["slice"], KINDS["quant_int8_given_max"], KINDS["repack_gguf_int4"]
ABSENT, PACKED, UNPACKED = 0, 1, 2
# GGUF block types: DataType 2000 + ggml id, written as 0xE0 + id.
Q4_0, Q8_0, Q4_K, Q6_K, Q8_1, IQ2_XXS = (0xE0 + i for i in (2, 8, 12, 14, 9, 16))


def u8(v):
    return bytes([v & 0xFF])


def u16(v):
    return struct.pack("<H", v & 0xFFFF)


def count(v):
    if v < 0xE0:
        return u8(v)
    if v < 0x10000:
        return u8(0xF0) + u16(v)
    return u8(0xF8) + struct.pack("<Q", v)


def ptr(known, offset=0):
    return u8(known) + struct.pack("<h", offset)


NULL = u8(0xC0)


def block(bs):
    if bs & (bs - 1) == 0:
        return u8(bs.bit_length() - 1)
    return u8(0x80) + struct.pack("<I", bs)


def header(portable=False):
    sizes = [(8192, 8), (8192, 8), (4096, 6), (1024, 6)]  # (bytes, alignment code: 1 << code)
    h = u8(1 if portable else 0)
    for size, align in sizes:
        h += u16(size) + u8(align)
    return h + u8(7) + u16(1024) + u16(4096)  # fill seed; read-only registration [1024, +4096) of the arena


def launch(kind, dtype, rows, cols, bs=0, zp=ABSENT, src=NULL, scales=NULL, zero_point=NULL, dst=NULL, dst2=NULL,
           src_cols=0, col_offset=0):
    b = u8(0) + u8(kind) + u8(dtype) + count(rows) + count(cols)
    b += block(bs) if bs else u8(0)
    b += u8(zp) + src + scales + zero_point + dst + dst2
    return b + (count(src_cols) + count(col_offset) if kind == SLICE else b"")


def copy_to_device(dst, offset, length, seed=3):
    return u8(1) + dst + count(offset) + u16(length) + u8(seed)


def copy_to_host(src, offset, length):
    return u8(2) + src + count(offset) + u16(length)


def copy_device(dst, dst_offset, src, src_offset, nbytes):
    return u8(3) + dst + count(dst_offset) + src + count(src_offset) + count(nbytes)


def allocate(size, align_code=6):
    return u8(4) + u16(size) + u8(align_code)


def free(p):
    return u8(5) + p


def register(offset, length, read_write):
    return u8(6) + u16(offset) + u16(length) + u8(1 if read_write else 0)


def unregister(p):
    return u8(7) + p


SYNC = u8(8)

valid = {
    "transpose_f32": launch(TRANSPOSE, F32, 16, 32, src=ptr(A0), dst=ptr(A1)),
    "transpose_u8_blocks": launch(TRANSPOSE, U8, 64, 64, src=ptr(A0), dst=ptr(A1)),
    "transpose_f16_edges": launch(TRANSPOSE, F16, 48, 40, src=ptr(A0, 64), dst=ptr(A1, 2)),
    "transpose_i64": launch(TRANSPOSE, I64, 20, 24, src=ptr(A0), dst=ptr(A1, 8)),
    "transpose_vector": launch(TRANSPOSE, F32, 1, 200, src=ptr(A0, 4), dst=ptr(A1)),
    "to_f16_f32": launch(TO_F16, F32, 100, 20, src=ptr(A0), dst=ptr(A1)),
    "to_f16_bf16": launch(TO_F16, BF16, 33, 61, src=ptr(A0, 2), dst=ptr(A1, 6)),
    "quant_int8_f32": launch(QUANT8, F32, 32, 64, src=ptr(A0), dst=ptr(A1), dst2=ptr(A2)),
    "quant_int8_f16": launch(QUANT8, F16, 19, 77, src=ptr(A0), dst=ptr(A1, 1), dst2=ptr(A2, 4)),
    "dequant_int4_packed": launch(DEQUANT, F16, 16, 100, 32, PACKED, src=ptr(A0), scales=ptr(A2),
                                  zero_point=ptr(A3), dst=ptr(A1)),
    "dequant_int4_wide": launch(DEQUANT, F32, 4, 512, 32, ABSENT, src=ptr(A0), scales=ptr(A2), dst=ptr(A1)),
    "repack_int4_unpacked": launch(REPACK, F32, 8, 200, 16, UNPACKED, src=ptr(A0), scales=ptr(A2),
                                   zero_point=ptr(A2, 512), dst=ptr(A1), dst2=ptr(A1, 1024)),
    "repack_int4_f16": launch(REPACK, F16, 8, 512, 64, PACKED, src=ptr(A0), scales=ptr(A2), zero_point=ptr(A3),
                              dst=ptr(A1), dst2=ptr(A1, 4096)),
    # GGUF: one row of whole blocks; two rows of Q4_K into f32; Q6_K at an
    # odd 2-byte offset (blocks are 2-byte aligned at most).
    "dequant_gguf_q4_0": launch(DEQUANT_GGUF, Q4_0, 4, 64, src=ptr(A0), dst=ptr(A1)),
    "dequant_gguf_f32_q4_k": launch(DEQUANT_GGUF_F32, Q4_K, 2, 256, src=ptr(A0), dst=ptr(A1)),
    "dequant_gguf_q6_k": launch(DEQUANT_GGUF, Q6_K, 1, 256, src=ptr(A0, 2), dst=ptr(A1, 2)),
    "dequant_gguf_q8_0": launch(DEQUANT_GGUF_F32, Q8_0, 3, 32, src=ptr(A2, 6), dst=ptr(A1, 4)),
    # quant_int8 with its rows' maxima given (f32 [rows] in scales).
    "quant_int8_given_max_f32": launch(QUANT8_GIVEN_MAX, F32, 4, 16, src=ptr(A0), scales=ptr(A2), dst=ptr(A1),
                                       dst2=ptr(A3)),
    # Q4_0 codes moved into repack_int4's words and (scale, offset) pairs.
    "repack_gguf_int4_q4_0": launch(REPACK_GGUF, Q4_0, 2, 64, src=ptr(A0), dst=ptr(A1), dst2=ptr(A1, 1024)),
    # slice: a rank's middle columns; an odd byte run from the read-only registration.
    "slice_f32": launch(SLICE, F32, 16, 8, src=ptr(A0), dst=ptr(A1), src_cols=32, col_offset=8),
    "slice_u8_registration": launch(SLICE, U8, 40, 3, src=ptr(RO, 1), dst=ptr(A1, 5), src_cols=100, col_offset=97),
    "read_registration": launch(TRANSPOSE, F32, 8, 8, src=ptr(RO), dst=ptr(A1)),
    "write_registration": register(8192, 4096, True) + launch(TRANSPOSE, F16, 16, 16, src=ptr(A0), dst=ptr(RW)),
    "copies": copy_to_device(ptr(A2), 0, 100) + copy_to_host(ptr(A2), 50, 100) + copy_device(ptr(A1), 0, ptr(A0), 0, 512)
    + copy_to_host(ptr(RO), 0, 4096) + SYNC,
    "stale_allocation": free(ptr(A3)) + launch(TRANSPOSE, U8, 4, 4, src=ptr(A3), dst=ptr(A1)) + allocate(256)
    + launch(TRANSPOSE, U8, 4, 4, src=ptr(6), dst=ptr(A1)) + free(ptr(A3)),
    "stale_registration": unregister(ptr(RO)) + launch(TRANSPOSE, F32, 8, 8, src=ptr(RO), dst=ptr(A1))
    + unregister(ptr(RO)),
}

refused = {
    # cols not whole blocks; a block type derivations do not read; an int4
    # scale type given to a GGUF kind.
    "gguf_partial_block": launch(DEQUANT_GGUF, Q4_K, 1, 255, src=ptr(A0), dst=ptr(A1)),
    "gguf_unsupported_q8_1": launch(DEQUANT_GGUF, Q8_1, 1, 32, src=ptr(A0), dst=ptr(A1)),
    "gguf_unsupported_iq2": launch(DEQUANT_GGUF_F32, IQ2_XXS, 1, 256, src=ptr(A0), dst=ptr(A1)),
    "gguf_f16_dst_misaligned": launch(DEQUANT_GGUF, Q8_0, 1, 32, src=ptr(A0), dst=ptr(A1, 1)),
    "alias_output": launch(TRANSPOSE, F32, 16, 16, src=ptr(A0), dst=ptr(A0, 512)),
    "write_read_only": launch(TRANSPOSE, F32, 8, 8, src=ptr(A0), dst=ptr(RO))
    + copy_to_device(ptr(RO), 16, 64) + copy_device(ptr(RO), 0, ptr(A0), 0, 64),
    "misaligned": launch(TO_F16, F32, 4, 4, src=ptr(A0, 2), dst=ptr(A1)),
    "one_past": launch(TRANSPOSE, U8, 8, 8, src=ptr(A3, 1024 - 63), dst=ptr(A1))
    + copy_to_host(ptr(A3), 1, 1024) + copy_device(ptr(A1), 8192 - 99, ptr(A0), 0, 100),
    "overlapping_copy": copy_device(ptr(A0), 0, ptr(A0), 64, 128),
    "bad_shapes": launch(DEQUANT, F16, 16, 100, 24, src=ptr(A0), scales=ptr(A2), dst=ptr(A1))
    + launch(7, F32, 4, 4, src=ptr(A0), dst=ptr(A1)) + launch(TRANSPOSE, 8, 4, 4, src=ptr(A0), dst=ptr(A1))
    + launch(QUANT8, F32, 1 << 32, 1 << 32, src=ptr(A0), dst=ptr(A1), dst2=ptr(A2)),
    "bad_frees": free(ptr(A0, 64)) + free(ptr(RO)) + free(NULL) + unregister(ptr(A0)),
    # columns past the source's row; a source of 2^64 bytes.
    "slice_bad_columns": launch(SLICE, F32, 4, 8, src=ptr(A0), dst=ptr(A1), src_cols=10, col_offset=3)
    + launch(SLICE, U8, 1 << 32, 1, src=ptr(A0), dst=ptr(A1), src_cols=1 << 32, col_offset=0),
}

# Inputs that found bugs, kept so every run replays them.
regressions = {
    # derivation_sizes sized a [1, 2^64 - 1] repack as 0 bytes everywhere.
    "regression_repack_cols_2p64": launch(REPACK, F16, 1, (1 << 64) - 1, 16, src=ptr(A0), scales=ptr(A2), dst=ptr(A1),
                                          dst2=ptr(A1, 4096)),
    # quant_int8 with K = 0 and a null (empty) dst: memset(nullptr, 0, 0)
    # in the vector kernel (UBSan).
    "regression_quant_k0_null_dst": launch(QUANT8, F32, 4, 0, dst2=ptr(A2)),
    # repack_int4 pairs at a 2-byte-aligned dst2 (allowed: f16 elements)
    # were stored through a uint32_t pointer: misaligned stores (UBSan).
    "regression_repack_pairs_2_aligned": launch(REPACK, F32, 8, 200, 16, UNPACKED, src=ptr(A0), scales=ptr(A2),
                                                zero_point=ptr(A2, 512), dst=ptr(A1), dst2=ptr(A1, 1026)),
}

# Every kind of the table is launched validly at least once (a new kind's
# row needs a seed here).
_seeded = {body[1] for body in valid.values() if body[0] == 0}
_missing = sorted(k for k, v in KINDS.items() if v not in _seeded)
assert not _missing, "no valid launch seed for " + ", ".join(_missing)

for name, body in {**valid, **refused, **regressions}.items():
    for portable in (False, True):
        with open(os.path.join(out, name + ("_portable" if portable else "")), "wb") as f:
            f.write(header(portable) + body)
