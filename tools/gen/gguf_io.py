"""Writing and reading GGUF files with numpy, from the specification, and a
reference dequantization of its block types.

A GGUF file, every number little-endian:
  - the magic b"GGUF", a u32 version (3 now; 2 is the same layout; 1 had
    u32 where 2 and 3 have u64: string lengths, counts, dims);
  - u64 tensor_count, u64 kv_count;
  - kv_count metadata pairs: the key as a string (u64 length, UTF-8 bytes,
    no terminator), a u32 value type, the value. An array is a u32 element
    type, a u64 count and the elements; arrays may hold arrays;
  - tensor_count tensor infos: the name as a string, u32 n_dims, n_dims u64
    dims ne[0..] (ne[0] varies fastest, the reverse of a row-major shape),
    a u32 ggml type, a u64 offset relative to the data section;
  - zero padding up to a multiple of the alignment: the uint32
    `general.alignment` metadata value when the file has it, else 32;
  - the data section: each tensor's bytes at its offset, a multiple of the
    alignment, padded between with zeros.

A tensor's type is an element type (F32, F16, BF16, I8..I64, F64) or a
block type: ne[0] is a multiple of the block's element count and the
tensor is its blocks back to back, row by row. The block packers below
build blocks from chosen integer codes and scales (not by quantizing
floats) so tests reach every code, scale sign and packed bit; dequant() is
the reference the C++ kernels are checked bit-exactly against: float32
arithmetic, each operation rounded on its own, in the order written.

A split set is <prefix>-00001-of-0000N.gguf ...: each part a GGUF file of
its own with split.no (uint16, from 0), split.count (uint16) and
split.tensors.count (int32, over all parts); the general metadata is in the
first part only.

tests/interop/check_gguf_reference.py checks this module: the writer and
the reader against each other, dequant() against hand-computed blocks and
against a per-element transcription of the layouts.
"""

import os
import struct

import numpy as np

MAGIC = b"GGUF"
DEFAULT_ALIGNMENT = 32

# Metadata value types.
VALUE_TYPES = {
    "uint8": 0, "int8": 1, "uint16": 2, "int16": 3, "uint32": 4, "int32": 5, "float32": 6, "bool": 7,
    "string": 8, "array": 9, "uint64": 10, "int64": 11, "float64": 12,
}
VALUE_TYPE_NAMES = {v: k for k, v in VALUE_TYPES.items()}
# struct format of each fixed-width scalar value type.
SCALAR_FORMATS = {
    "uint8": "<B", "int8": "<b", "uint16": "<H", "int16": "<h", "uint32": "<I", "int32": "<i",
    "float32": "<f", "bool": "<B", "uint64": "<Q", "int64": "<q", "float64": "<d",
}

# ggml type: (id, elements per block, bytes per block).
GGML_TYPES = {
    "F32": (0, 1, 4), "F16": (1, 1, 2), "Q4_0": (2, 32, 18), "Q4_1": (3, 32, 20), "Q5_0": (6, 32, 22),
    "Q5_1": (7, 32, 24), "Q8_0": (8, 32, 34), "Q8_1": (9, 32, 36), "Q2_K": (10, 256, 84),
    "Q3_K": (11, 256, 110), "Q4_K": (12, 256, 144), "Q5_K": (13, 256, 176), "Q6_K": (14, 256, 210),
    "Q8_K": (15, 256, 292), "IQ2_XXS": (16, 256, 66), "IQ2_XS": (17, 256, 74), "IQ3_XXS": (18, 256, 98),
    "IQ1_S": (19, 256, 50), "IQ4_NL": (20, 32, 18), "IQ3_S": (21, 256, 110), "IQ2_S": (22, 256, 82),
    "IQ4_XS": (23, 256, 136), "I8": (24, 1, 1), "I16": (25, 1, 2), "I32": (26, 1, 4), "I64": (27, 1, 8),
    "F64": (28, 1, 8), "IQ1_M": (29, 256, 56), "BF16": (30, 1, 2), "TQ1_0": (34, 256, 54),
    "TQ2_0": (35, 256, 66), "MXFP4": (39, 32, 17),
}
GGML_TYPE_NAMES = {v[0]: k for k, v in GGML_TYPES.items()}

# The types dequant() and random_blocks() know the layout of.
DEQUANT_TYPES = ("F32", "F16", "BF16", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0", "Q2_K", "Q3_K", "Q4_K",
                 "Q5_K", "Q6_K", "Q8_K")
ELEMENT_TYPES = ("F32", "F16", "BF16", "I8", "I16", "I32", "I64", "F64")


def tensor_bytes(ggml_type, ne):
    """Bytes of a tensor of `ne`; ValueError unless ne[0] is whole blocks."""
    _, blk, size = GGML_TYPES[ggml_type]
    n = 1
    for d in ne:
        n *= int(d)
    if ne and int(ne[0]) % blk:
        raise ValueError("%s: ne[0]=%d is not a multiple of the block (%d)" % (ggml_type, ne[0], blk))
    return n // blk * size


def align_up(n, alignment):
    return (n + alignment - 1) // alignment * alignment


# ---------------------------------------------------------------- writer

def _size(n, version):
    # Version 1 wrote lengths and counts as u32; 2 and 3 as u64.
    return struct.pack("<I" if version == 1 else "<Q", n)


def encode_string(s, version=3):
    raw = s.encode("utf-8") if isinstance(s, str) else bytes(s)
    return _size(len(raw), version) + raw


def type_id(value_type):
    """The u32 id of a value type given as a name, ("array", elem) or an int."""
    if isinstance(value_type, int):
        return value_type
    if isinstance(value_type, tuple):
        return VALUE_TYPES["array"]
    return VALUE_TYPES[value_type]


def encode_value(value_type, value, version=3):
    """The bytes of one value (without its type id). value_type an int (an
    id of no type, for hostile files) takes `value` as the raw bytes."""
    if isinstance(value_type, int):
        return bytes(value)
    if isinstance(value_type, tuple):
        _, elem = value_type
        out = [struct.pack("<I", type_id(elem)), _size(len(value), version)]
        out += [encode_value(elem, v, version) for v in value]
        return b"".join(out)
    if value_type == "string":
        return encode_string(value, version)
    if value_type == "bool" and isinstance(value, bool):
        return b"\x01" if value else b"\x00"
    # An int given for a bool is written as that byte (2 is not a valid bool).
    return struct.pack(SCALAR_FORMATS[value_type], value)


def encode_header(metadata, infos, version=3, counts=None, magic=MAGIC):
    """Header bytes up to the end of the tensor infos (no padding).
    metadata: [(key, value_type, value)]; infos: [(name, ggml type name or
    id, ne, relative offset)]; counts: (tensor_count, kv_count) to write
    instead of the lists' lengths. Nothing is checked, so tests can
    describe any file, consistent or not."""
    n_tensors, n_kv = counts if counts is not None else (len(infos), len(metadata))
    out = [magic, struct.pack("<I", version), _size(n_tensors, version), _size(n_kv, version)]
    for key, value_type, value in metadata:
        out += [encode_string(key, version), struct.pack("<I", type_id(value_type)),
                encode_value(value_type, value, version)]
    for name, ggml_type, ne, offset in infos:
        tid = ggml_type if isinstance(ggml_type, int) else GGML_TYPES[ggml_type][0]
        out += [encode_string(name, version), struct.pack("<I", len(ne))]
        out += [_size(int(d), version) for d in ne]
        out += [struct.pack("<I", tid), struct.pack("<Q", offset)]
    return b"".join(out)


def packed_offsets(tensors, alignment=DEFAULT_ALIGNMENT, gaps=None):
    """Relative offsets placing each tensor at the next multiple of
    `alignment` after the previous one; gaps (name -> bytes, a multiple of
    the alignment) leaves that much more room before the named tensor."""
    at, out = 0, []
    for name, _type, _ne, raw in tensors:
        at = align_up(at, alignment) + (gaps or {}).get(name, 0)
        out.append(at)
        at += len(raw)
    return out


def _metadata_alignment(metadata):
    for key, value_type, value in metadata:
        if key == "general.alignment" and isinstance(value, int) and value > 0:
            return value
    return None


def write_gguf(path, metadata, tensors, alignment=None, version=3, offsets=None, gaps=None, tail=b"",
               data_start=None):
    """Writes a GGUF file. metadata: [(key, value_type, value)], value_type
    a name of VALUE_TYPES or ("array", elem) (nested allowed); tensors:
    [(name, ggml type name, ne, raw bytes)]. With `alignment` the writer adds
    general.alignment (uint32) itself; without it the data is aligned to a
    general.alignment already in `metadata`, else to 32. `offsets` (relative
    to the data section) replaces the packed placement, `gaps` widens it
    (packed_offsets), `tail` is appended after the last tensor, and
    `data_start` puts the data section elsewhere than the aligned end of the
    header (for files that break the rule).
    Returns {"data_start", "header_bytes", "tensors": [(name, type, ne,
    absolute offset, length)]}."""
    metadata = list(metadata)
    if alignment is not None:
        metadata.append(("general.alignment", "uint32", alignment))
    align = alignment or _metadata_alignment(metadata) or DEFAULT_ALIGNMENT
    if offsets is None:
        offsets = packed_offsets(tensors, align, gaps)
    infos = [(name, t, ne, off) for (name, t, ne, _raw), off in zip(tensors, offsets)]
    header = encode_header(metadata, infos, version)
    if data_start is None:
        data_start = align_up(len(header), align)
    layout = []
    with open(path, "wb") as f:
        f.write(header)
        f.write(b"\x00" * max(0, data_start - len(header)))
        end = data_start
        for (name, t, ne, raw), off in zip(tensors, offsets):
            # Seeking past the end leaves zeros: the padding between tensors.
            f.seek(data_start + off)
            f.write(raw)
            end = max(end, data_start + off + len(raw))
            layout.append((name, t, list(ne), data_start + off, len(raw)))
        f.seek(end)
        f.write(tail)
        f.truncate(end + len(tail))
    return {"data_start": data_start, "header_bytes": len(header), "tensors": layout}


def split_name(prefix, no, count):
    """<prefix>-0000i-of-0000n.gguf, i counted from 1."""
    return "%s-%05d-of-%05d.gguf" % (prefix, no + 1, count)


def write_gguf_split(directory, prefix, parts, metadata, alignment=None, version=3):
    """Writes a split set: parts is a list of tensor lists (as write_gguf
    takes), one file each; the split keys go in every part, `metadata`
    in the first only. Returns the paths in order."""
    os.makedirs(directory, exist_ok=True)
    total = sum(len(p) for p in parts)
    paths = []
    for no, tensors in enumerate(parts):
        keys = [("split.no", "uint16", no), ("split.count", "uint16", len(parts)),
                ("split.tensors.count", "int32", total)]
        path = os.path.join(directory, split_name(prefix, no, len(parts)))
        write_gguf(path, (list(metadata) if no == 0 else []) + keys, tensors, alignment, version)
        paths.append(path)
    return paths


# ---------------------------------------------------------------- reader
# Written apart from the writer (it shares only the tables above), so that a
# mistake in one does not hide in the other.

class GGUFError(ValueError):
    pass


class _Cursor:
    def __init__(self, data, version=3):
        self.data, self.at, self.version = data, 0, version

    def take(self, n):
        if n < 0 or self.at + n > len(self.data):
            raise GGUFError("truncated at byte %d (wanted %d more)" % (self.at, n))
        out = self.data[self.at:self.at + n]
        self.at += n
        return out

    def unpack(self, fmt):
        return struct.unpack(fmt, self.take(struct.calcsize(fmt)))[0]

    def size(self):
        return self.unpack("<I" if self.version == 1 else "<Q")

    def string(self):
        at = self.at
        try:
            return self.take(self.size()).decode("utf-8")
        except UnicodeDecodeError as e:
            raise GGUFError("the string at byte %d is not UTF-8 (%s)" % (at, e.reason))


def _read_value(cur, tid):
    """(type, value): type a name, or ("array", elem type) for an array."""
    name = VALUE_TYPE_NAMES.get(tid)
    if name is None:
        raise GGUFError("unknown value type %d at byte %d" % (tid, cur.at))
    if name == "string":
        return name, cur.string()
    if name == "bool":
        b = cur.unpack("<B")
        if b > 1:
            raise GGUFError("bool value %d" % b)
        return name, b == 1
    if name != "array":
        return name, cur.unpack(SCALAR_FORMATS[name])
    elem_id = cur.unpack("<I")
    count = cur.size()
    elem_name = VALUE_TYPE_NAMES.get(elem_id)
    if elem_name is None:
        raise GGUFError("unknown array element type %d" % elem_id)
    values, inner = [], None
    for _ in range(count):
        t, v = _read_value(cur, elem_id)
        if elem_name == "array":
            # An array of arrays: the inner element type is each inner
            # array's own; recorded when they agree.
            inner = t if inner in (None, t) else ("array", None)
        values.append(v)
    if elem_name == "array":
        return ("array", inner or ("array", None)), values
    return ("array", elem_name), values


def type_label(value_type):
    """"uint32", ..., "array[T]" with T the element type, "array" when it
    is an array itself (the names ballast prints)."""
    if isinstance(value_type, tuple):
        elem = value_type[1]
        return "array[%s]" % ("array" if isinstance(elem, tuple) else elem)
    return value_type


def read_gguf(path):
    """The file's structure as the specification describes it: a dict of
    version, tensor_count, kv_count, alignment, metadata {key: (type,
    value)}, tensors [{name, type, type_id, ne, offset, abs_offset,
    length}], header_bytes (where the tensor infos end), data_start,
    file_size. GGUFError on a file that does not follow it (an alignment
    that is no uint32 multiple of 8, an unaligned offset, bytes past the
    end, a bool that is not 0 or 1, a key twice, an unknown value type);
    a tensor of an unknown ggml type has type and length None."""
    with open(path, "rb") as f:
        data = f.read()
    cur = _Cursor(data)
    if cur.take(4) != MAGIC:
        raise GGUFError("%s: no GGUF magic" % path)
    version = cur.unpack("<I")
    if version not in (1, 2, 3):
        raise GGUFError("%s: version %d" % (path, version))
    cur.version = version
    n_tensors = cur.size()
    n_kv = cur.size()
    metadata = {}
    for _ in range(n_kv):
        key = cur.string()
        tid = cur.unpack("<I")
        if key in metadata:
            raise GGUFError("%s: key %r twice" % (path, key))
        metadata[key] = _read_value(cur, tid)
    alignment = DEFAULT_ALIGNMENT
    if "general.alignment" in metadata:
        t, v = metadata["general.alignment"]
        # The specification: a uint32, a multiple of 8.
        if t != "uint32" or v == 0 or v % 8:
            raise GGUFError("%s: general.alignment is %s %r" % (path, t, v))
        alignment = v
    infos = []
    for _ in range(n_tensors):
        name = cur.string()
        n_dims = cur.unpack("<I")
        ne = [cur.size() for _ in range(n_dims)]
        tid = cur.unpack("<I")
        offset = cur.unpack("<Q")
        infos.append((name, ne, tid, offset))
    header_bytes = cur.at
    data_start = (header_bytes + alignment - 1) // alignment * alignment
    tensors = []
    for name, ne, tid, offset in infos:
        tname = GGML_TYPE_NAMES.get(tid)
        length = None
        if tname is not None:
            _, blk, size = GGML_TYPES[tname]
            count = int(np.prod(ne, dtype=object)) if ne else 1
            if ne and ne[0] % blk:
                raise GGUFError("%s: %s: ne[0]=%d is not whole %s blocks" % (path, name, ne[0], tname))
            length = count // blk * size
        # Offsets are multiples of the alignment, and the bytes are in the file.
        if offset % alignment:
            raise GGUFError("%s: %s: offset %d is not a multiple of %d" % (path, name, offset, alignment))
        if length is not None and data_start + offset + length > len(data):
            raise GGUFError("%s: %s: bytes %d..%d past the end (%d)" % (path, name, data_start + offset,
                                                                    data_start + offset + length, len(data)))
        tensors.append({"name": name, "type": tname, "type_id": tid, "ne": ne, "offset": offset,
                        "abs_offset": data_start + offset, "length": length})
    return {"version": version, "tensor_count": n_tensors, "kv_count": n_kv, "alignment": alignment,
            "metadata": metadata, "tensors": tensors, "header_bytes": header_bytes,
            "data_start": data_start, "file_size": len(data)}


# ---------------------------------------------------------------- block packers
# Each takes per-block scales (arrays of n_blocks) and integer codes in
# element order ((n_blocks, block elements)) and returns the raw bytes.
# f16 scales are numpy float16 values (any of them, subnormals included);
# f16_from_bits() makes them from bit patterns.

def f16_from_bits(bits):
    return np.asarray(bits, dtype="<u2").view("<f2")


def _f16_bytes(a, n):
    return np.asarray(a, dtype="<f2").reshape(n, 1).view(np.uint8).reshape(n, 2)


def _codes(q, n, per_block, lo, hi):
    q = np.asarray(q, dtype=np.int64).reshape(n, per_block)
    if q.min(initial=lo) < lo or q.max(initial=lo) > hi:
        raise ValueError("codes outside %d..%d" % (lo, hi))
    return q


def _nibbles(q):
    """(n, 32) 4-bit codes -> (n, 16) bytes: element j in the low nibble of
    byte j, element j+16 in its high nibble."""
    return (q[:, :16] | (q[:, 16:] << 4)).astype(np.uint8)


def pack_f32(values):
    return np.asarray(values, dtype="<f4").tobytes()


def pack_f16(values):
    return np.asarray(values, dtype="<f2").tobytes()


def pack_bf16(bits):
    """bf16 from its bit patterns (uint16): the top half of a float32."""
    return np.asarray(bits, dtype="<u2").tobytes()


def pack_q8_0(d, q):
    """q: int8 codes -128..127; y = q * d."""
    n = len(d)
    q = _codes(q, n, 32, -128, 127)
    return np.concatenate([_f16_bytes(d, n), q.astype(np.int8).view(np.uint8)], axis=1).tobytes()


def pack_q4_0(d, q):
    """q: 0..15; y = (q - 8) * d."""
    n = len(d)
    return np.concatenate([_f16_bytes(d, n), _nibbles(_codes(q, n, 32, 0, 15))], axis=1).tobytes()


def pack_q4_1(d, m, q):
    """q: 0..15; y = q * d + m."""
    n = len(d)
    return np.concatenate([_f16_bytes(d, n), _f16_bytes(m, n), _nibbles(_codes(q, n, 32, 0, 15))],
                          axis=1).tobytes()


def _q5_high(q):
    """The fifth bits of 32 codes as a little-endian u32: bit e for element e."""
    h = ((q >> 4) & 1).astype(np.uint64) << np.arange(32, dtype=np.uint64)
    return h.sum(axis=1).astype("<u4").reshape(-1, 1).view(np.uint8)


def pack_q5_0(d, q):
    """q: 0..31; y = (q - 16) * d."""
    n = len(d)
    q = _codes(q, n, 32, 0, 31)
    return np.concatenate([_f16_bytes(d, n), _q5_high(q), _nibbles(q & 15)], axis=1).tobytes()


def pack_q5_1(d, m, q):
    """q: 0..31; y = q * d + m."""
    n = len(d)
    q = _codes(q, n, 32, 0, 31)
    return np.concatenate([_f16_bytes(d, n), _f16_bytes(m, n), _q5_high(q), _nibbles(q & 15)],
                          axis=1).tobytes()


def pack_q8_k(d, q):
    """d: float32 per block; q: int8 codes; y = q * d. The 16 bsums (sums of
    16 codes each) are written as the format has them, though unused."""
    n = len(d)
    q = _codes(q, n, 256, -128, 127)
    bsums = q.reshape(n, 16, 16).sum(axis=2).astype("<i2").view(np.uint8)
    d = np.asarray(d, dtype="<f4").reshape(n, 1).view(np.uint8)
    return np.concatenate([d, q.astype(np.int8).view(np.uint8), bsums], axis=1).tobytes()


def pack_q2_k(d, dmin, sc, mn, q):
    """sc, mn: (n, 16) 4-bit scale and min of each 16 elements; q: 0..3.
    y = (d * sc) * q - (dmin * mn)."""
    n = len(d)
    sc = _codes(sc, n, 16, 0, 15)
    mn = _codes(mn, n, 16, 0, 15)
    q = _codes(q, n, 256, 0, 3)
    # Element 128h + 32j + 16g + l sits in qs[32h + 16g + l] at bits 2j.
    q = q.reshape(n, 2, 4, 2, 16)
    qs = (q << (2 * np.arange(4)).reshape(1, 1, 4, 1, 1)).sum(axis=2).astype(np.uint8).reshape(n, 64)
    scales = (sc | (mn << 4)).astype(np.uint8)
    return np.concatenate([scales, qs, _f16_bytes(d, n), _f16_bytes(dmin, n)], axis=1).tobytes()


def pack_q3_k(d, sc, q):
    """sc: (n, 16) stored 6-bit scales 0..63 (the scale is sc - 32); q: 3-bit
    codes 0..7 (the value is q - 4). y = (d * (sc - 32)) * (q - 4)."""
    n = len(d)
    sc = _codes(sc, n, 16, 0, 63)
    q = _codes(q, n, 256, 0, 7).reshape(n, 2, 4, 2, 16)  # h, j, g, l
    low = q & 3
    qs = (low << (2 * np.arange(4)).reshape(1, 1, 4, 1, 1)).sum(axis=2).astype(np.uint8).reshape(n, 64)
    # The third bit is the hmask bit 4h + j of byte 16g + l (set: value q & 3;
    # clear: minus 4), so it is set exactly when q >= 4.
    high = (q >> 2).astype(np.int64)
    bit = (4 * np.arange(2).reshape(1, 2, 1, 1, 1) + np.arange(4).reshape(1, 1, 4, 1, 1))
    hmask = (high << bit).sum(axis=(1, 2)).astype(np.uint8).reshape(n, 32)
    packed = np.zeros((n, 12), dtype=np.int64)
    packed[:, :8] = (sc[:, :8] & 15) | ((sc[:, 8:] & 15) << 4)
    for i in range(16):
        packed[:, 8 + i % 4] |= ((sc[:, i] >> 4) & 3) << (2 * (i // 4))
    return np.concatenate([hmask, qs, packed.astype(np.uint8), _f16_bytes(d, n)], axis=1).tobytes()


def _pack_k_scales(sc, mn):
    """Eight 6-bit (scale, min) pairs in 12 bytes: pairs 0..3 in the low six
    bits of bytes 0..3 and 4..7; pairs 4..7 as low nibbles in bytes 8..11 and
    their top two bits in the top bits of bytes 0..7."""
    out = np.zeros((len(sc), 12), dtype=np.int64)
    out[:, 0:4] = sc[:, :4] | ((sc[:, 4:] >> 4) << 6)
    out[:, 4:8] = mn[:, :4] | ((mn[:, 4:] >> 4) << 6)
    out[:, 8:12] = (sc[:, 4:] & 15) | ((mn[:, 4:] & 15) << 4)
    return out.astype(np.uint8)


def _k_nibbles(q):
    """(n, 256) 4-bit codes -> (n, 128): chunk c's 32 bytes hold elements
    64c..64c+31 in the low nibbles and 64c+32..64c+63 in the high ones."""
    q = q.reshape(-1, 4, 2, 32)
    return (q[:, :, 0] | (q[:, :, 1] << 4)).astype(np.uint8).reshape(-1, 128)


def pack_q4_k(d, dmin, sc, mn, q):
    """sc, mn: (n, 8) 6-bit scale and min of each 32 elements; q: 0..15.
    y = (d * sc) * q - (dmin * mn)."""
    n = len(d)
    sc, mn = _codes(sc, n, 8, 0, 63), _codes(mn, n, 8, 0, 63)
    q = _codes(q, n, 256, 0, 15)
    return np.concatenate([_f16_bytes(d, n), _f16_bytes(dmin, n), _pack_k_scales(sc, mn), _k_nibbles(q)],
                          axis=1).tobytes()


def pack_q5_k(d, dmin, sc, mn, q):
    """As pack_q4_k with 5-bit codes 0..31: the fifth bit of chunk c's
    low-nibble element l is bit 2c of qh[l], of its high-nibble one bit 2c+1."""
    n = len(d)
    sc, mn = _codes(sc, n, 8, 0, 63), _codes(mn, n, 8, 0, 63)
    q = _codes(q, n, 256, 0, 31)
    high = (q >> 4).reshape(n, 8, 32)  # sub-block 2c + nibble, l
    qh = (high << np.arange(8).reshape(1, 8, 1)).sum(axis=1).astype(np.uint8)
    return np.concatenate([_f16_bytes(d, n), _f16_bytes(dmin, n), _pack_k_scales(sc, mn), qh,
                           _k_nibbles(q & 15)], axis=1).tobytes()


def pack_q6_k(d, sc, q):
    """sc: (n, 16) int8 scales of each 16 elements; q: 6-bit codes 0..63
    (the value is q - 32). y = (d * sc) * (q - 32)."""
    n = len(d)
    sc = _codes(sc, n, 16, -128, 127)
    q = _codes(q, n, 256, 0, 63).reshape(n, 2, 4, 32)  # h, k (quarter of the half), l
    # Quarter k of half h: low four bits in ql[64h + 32(k & 1) + l], low
    # nibble for k < 2, high for k >= 2; top two bits in qh[32h + l] at 2k.
    low = q & 15
    ql = (low[:, :, 0:2] | (low[:, :, 2:4] << 4)).astype(np.uint8).reshape(n, 128)
    qh = ((q >> 4) << (2 * np.arange(4)).reshape(1, 1, 4, 1)).sum(axis=2).astype(np.uint8).reshape(n, 64)
    return np.concatenate([ql, qh, sc.astype(np.int8).view(np.uint8), _f16_bytes(d, n)], axis=1).tobytes()


# ---------------------------------------------------------------- random blocks

def random_f16(rng, n):
    """n finite f16 values over all finite bit patterns (either sign,
    subnormals and zeros included); the first four are a positive and a
    negative subnormal, a negative normal and a positive normal, so that
    every call has each."""
    bits = rng.integers(0, 1 << 16, size=n, dtype=np.uint32)
    bits = np.where((bits & 0x7C00) == 0x7C00, bits & 0x83FF, bits)  # inf/NaN -> exponent 0
    fixed = [0x0001 + int(rng.integers(0, 0x3FF)), 0x8001 + int(rng.integers(0, 0x3FF)), 0xBC00, 0x3C00]
    bits[:min(4, n)] = fixed[:min(4, n)]
    return f16_from_bits(bits.astype(np.uint16))


def _random_finite_bits32(rng, n, max_exponent=0xFE):
    """Finite float32 bit patterns, exponent field at most max_exponent
    (lower it where a product must stay finite)."""
    bits = rng.integers(0, 1 << 32, size=n, dtype=np.uint64).astype(np.uint32)
    exponent = (bits >> 23) & 0xFF
    return np.where(exponent > max_exponent, bits & 0x807FFFFF | (exponent % (max_exponent + 1)) << 23, bits)


def _cover(rng, shape, lo, hi):
    """Uniform integers lo..hi, the first (hi - lo + 1) of them (in flat order)
    a permutation of the whole range when there is room, so every value
    appears."""
    a = rng.integers(lo, hi + 1, size=shape).reshape(-1)
    k = min(a.size, hi - lo + 1)
    a[:k] = (rng.permutation(hi - lo + 1) + lo)[:k]
    return a.reshape(shape)


def random_blocks(ggml_type, n_blocks, rng):
    """Raw bytes of n_blocks blocks (elements, for the element types) with
    codes uniform over their whole range, f16 scales of both signs
    (random_f16) and 6-bit sub-block fields covering all 64 values once
    there are enough fields; F32, F16, BF16 and F64 finite. Other types
    (the integer ones, the block types dequant() does not know): random
    bytes."""
    n = n_blocks
    if ggml_type == "F32":
        return _random_finite_bits32(rng, n).astype("<u4").tobytes()
    if ggml_type == "F16":
        return random_f16(rng, n).tobytes()
    if ggml_type == "F64":
        bits = rng.integers(0, 1 << 63, size=n, dtype=np.uint64) | (rng.integers(0, 2, size=n, dtype=np.uint64) << 63)
        exponent = (bits >> 52) & 0x7FF
        return np.where(exponent == 0x7FF, bits & ~np.uint64(0x7FF << 52), bits).astype("<u8").tobytes()
    if ggml_type == "BF16":
        bits = rng.integers(0, 1 << 16, size=n, dtype=np.uint32)
        bits = np.where((bits & 0x7F80) == 0x7F80, bits & 0x807F, bits)
        return bits.astype("<u2").tobytes()
    if ggml_type == "Q8_0":
        return pack_q8_0(random_f16(rng, n), _cover(rng, (n, 32), -128, 127))
    if ggml_type == "Q4_0":
        return pack_q4_0(random_f16(rng, n), _cover(rng, (n, 32), 0, 15))
    if ggml_type == "Q4_1":
        return pack_q4_1(random_f16(rng, n), random_f16(rng, n), _cover(rng, (n, 32), 0, 15))
    if ggml_type == "Q5_0":
        return pack_q5_0(random_f16(rng, n), _cover(rng, (n, 32), 0, 31))
    if ggml_type == "Q5_1":
        return pack_q5_1(random_f16(rng, n), random_f16(rng, n), _cover(rng, (n, 32), 0, 31))
    if ggml_type == "Q8_K":
        d = _random_finite_bits32(rng, n, 0xF7)  # |d| < 2^121: d * 128 stays finite
        d[:min(2, n)] = [0x00000001 + int(rng.integers(0, 1 << 20)), 0xBF800000][:min(2, n)]
        return pack_q8_k(d.view("<f4"), _cover(rng, (n, 256), -128, 127))
    if ggml_type == "Q2_K":
        return pack_q2_k(random_f16(rng, n), random_f16(rng, n), _cover(rng, (n, 16), 0, 15),
                         _cover(rng, (n, 16), 0, 15), _cover(rng, (n, 256), 0, 3))
    if ggml_type == "Q3_K":
        return pack_q3_k(random_f16(rng, n), _cover(rng, (n, 16), 0, 63), _cover(rng, (n, 256), 0, 7))
    if ggml_type in ("Q4_K", "Q5_K"):
        pack = pack_q4_k if ggml_type == "Q4_K" else pack_q5_k
        top = 15 if ggml_type == "Q4_K" else 31
        return pack(random_f16(rng, n), random_f16(rng, n), _cover(rng, (n, 8), 0, 63),
                    _cover(rng, (n, 8), 0, 63), _cover(rng, (n, 256), 0, top))
    if ggml_type == "Q6_K":
        return pack_q6_k(random_f16(rng, n), _cover(rng, (n, 16), -128, 127), _cover(rng, (n, 256), 0, 63))
    _, _, size = GGML_TYPES[ggml_type]
    return rng.integers(0, 256, size=n * size, dtype=np.uint16).astype(np.uint8).tobytes()


# ---------------------------------------------------------------- dequantization
# float32 throughout; numpy rounds each operation by itself (it never fuses a
# multiply and an add), so the order written is the order computed.

F32 = np.float32


def _blocks(raw, ggml_type, n_elements):
    _, blk, size = GGML_TYPES[ggml_type]
    if n_elements % blk or len(raw) != n_elements // blk * size:
        raise ValueError("%s: %d bytes for %d elements" % (ggml_type, len(raw), n_elements))
    return np.frombuffer(raw, dtype=np.uint8).reshape(-1, size)


def _f16(b, at):
    """Column of f16 at byte `at` of each block, as float32 (n, 1)."""
    return b[:, at:at + 2].copy().view("<f2").astype(F32)


def _low_high(qs):
    """(n, 16) bytes -> (n, 32): low nibbles are elements 0..15, high 16..31."""
    return np.concatenate([qs & 15, qs >> 4], axis=1).astype(np.int32)


def _k_pairs(scales):
    """The eight (scale, min) 6-bit pairs of a Q4_K/Q5_K block, (n, 8) each."""
    s = scales.astype(np.int32)
    sc = np.empty((len(s), 8), dtype=np.int32)
    mn = np.empty((len(s), 8), dtype=np.int32)
    sc[:, :4] = s[:, 0:4] & 63
    mn[:, :4] = s[:, 4:8] & 63
    sc[:, 4:] = (s[:, 8:12] & 15) | ((s[:, 0:4] >> 6) << 4)
    mn[:, 4:] = (s[:, 8:12] >> 4) | ((s[:, 4:8] >> 6) << 4)
    return sc, mn


def _k_codes4(qs):
    """(n, 128) bytes -> (n, 256) low four bits in element order."""
    q = qs.reshape(-1, 4, 1, 32).astype(np.int32)
    return np.concatenate([q & 15, q >> 4], axis=2).reshape(-1, 256)


def dequant(ggml_type, raw, n_elements):
    """float32 values of `n_elements` elements of `ggml_type` stored in `raw`."""
    t = ggml_type
    if t == "F32":
        return np.frombuffer(raw, dtype="<f4", count=n_elements).astype(F32)
    if t == "F16":
        return np.frombuffer(raw, dtype="<f2", count=n_elements).astype(F32)
    if t == "BF16":
        return (np.frombuffer(raw, dtype="<u2", count=n_elements).astype(np.uint32) << 16).view(F32)
    b = _blocks(raw, t, n_elements)
    n = len(b)
    if t == "Q4_0":
        return ((_low_high(b[:, 2:18]) - 8).astype(F32) * _f16(b, 0)).reshape(-1)
    if t == "Q4_1":
        return (_low_high(b[:, 4:20]).astype(F32) * _f16(b, 0) + _f16(b, 2)).reshape(-1)
    if t in ("Q5_0", "Q5_1"):
        at = 2 if t == "Q5_0" else 4
        h = b[:, at:at + 4].copy().view("<u4").astype(np.int64)  # (n, 1)
        fifth = ((h >> np.arange(32)) & 1) << 4  # element e takes bit e
        q = (_low_high(b[:, at + 4:at + 20]) | fifth).astype(np.int32)
        if t == "Q5_0":
            return ((q - 16).astype(F32) * _f16(b, 0)).reshape(-1)
        return (q.astype(F32) * _f16(b, 0) + _f16(b, 2)).reshape(-1)
    if t == "Q8_0":
        return (b[:, 2:34].view(np.int8).astype(F32) * _f16(b, 0)).reshape(-1)
    if t == "Q8_K":
        d = b[:, 0:4].copy().view("<f4")
        return (b[:, 4:260].view(np.int8).astype(F32) * d).reshape(-1)
    if t == "Q2_K":
        sc = b[:, 0:16].astype(np.int32)  # sub-block k (elements 16k..) is scales[k]
        qs = b[:, 16:80].reshape(n, 2, 1, 2, 16).astype(np.int32)  # h, -, g, l
        q = ((qs >> (2 * np.arange(4)).reshape(1, 1, 4, 1, 1)) & 3).reshape(n, 16, 16)
        dl = (_f16(b, 80) * (sc & 15).astype(F32)).reshape(n, 16, 1)
        ml = (_f16(b, 82) * (sc >> 4).astype(F32)).reshape(n, 16, 1)
        return (dl * q.astype(F32) - ml).reshape(-1)
    if t == "Q3_K":
        s = b[:, 96:108].astype(np.int32)
        i = np.arange(16)
        low4 = np.where(i < 8, s[:, i % 8] & 15, s[:, i % 8] >> 4)
        high2 = (s[:, 8 + i % 4] >> (2 * (i // 4))) & 3
        sc = (low4 | (high2 << 4)) - 32
        qs = b[:, 32:96].reshape(n, 2, 1, 2, 16).astype(np.int32)  # h, -, g, l
        q = (qs >> (2 * np.arange(4)).reshape(1, 1, 4, 1, 1)) & 3
        hm = b[:, 0:32].reshape(n, 1, 1, 2, 16).astype(np.int32)  # -, -, g, l
        m = 1 << (4 * np.arange(2).reshape(1, 2, 1, 1, 1) + np.arange(4).reshape(1, 1, 4, 1, 1))
        v = (q - np.where(hm & m, 0, 4)).reshape(n, 16, 16)
        dl = (_f16(b, 108) * sc.astype(F32)).reshape(n, 16, 1)
        return (dl * v.astype(F32)).reshape(-1)
    if t in ("Q4_K", "Q5_K"):
        sc, mn = _k_pairs(b[:, 4:16])
        if t == "Q4_K":
            q = _k_codes4(b[:, 16:144])
        else:
            qh = b[:, 16:48].reshape(n, 1, 32).astype(np.int32)
            fifth = ((qh >> np.arange(8).reshape(1, 8, 1)) & 1) << 4  # sub-block 2c + nibble
            q = _k_codes4(b[:, 48:176]) | fifth.reshape(n, 256)
        d1 = (_f16(b, 0) * sc.astype(F32)).reshape(n, 8, 1)
        m1 = (_f16(b, 2) * mn.astype(F32)).reshape(n, 8, 1)
        return (d1 * q.reshape(n, 8, 32).astype(F32) - m1).reshape(-1)
    if t == "Q6_K":
        ql = b[:, 0:128].reshape(n, 2, 2, 32).astype(np.int32)  # h, byte half, l
        qh = b[:, 128:192].reshape(n, 2, 1, 32).astype(np.int32)  # h, -, l
        low = np.concatenate([ql & 15, ql >> 4], axis=2)  # h, k, l (k = 0..3)
        q = (low | (((qh >> (2 * np.arange(4)).reshape(1, 1, 4, 1)) & 3) << 4)) - 32
        sc = b[:, 192:208].view(np.int8).astype(F32)  # sub-block k is scales[k]
        dl = (_f16(b, 208) * sc).reshape(n, 16, 1)
        return (dl * q.reshape(n, 16, 16).astype(F32)).reshape(-1)
    raise ValueError("no dequantization for %s" % t)
