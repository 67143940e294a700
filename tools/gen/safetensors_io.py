"""Writing safetensors files and sharded checkpoints with numpy, from the
specification: an 8-byte little-endian header length N, N bytes of UTF-8
JSON (an object; padded with spaces so the byte buffer starts 8-aligned),
then the byte buffer, tensors back to back in the order given.

A tensor is (name, array) for the dtypes numpy has, or (name, dtype, shape,
raw bytes) for the rest (BF16, the float8, float6 and float4 types); raw
given as an int is that many zero bytes, left as a hole in a sparse file.
"""

import json
import os
import struct

import numpy as np

# numpy dtype -> safetensors dtype, for the types numpy can hold.
NUMPY_DTYPES = {
    np.dtype(np.bool_): "BOOL",
    np.dtype(np.uint8): "U8",
    np.dtype(np.int8): "I8",
    np.dtype(np.int16): "I16",
    np.dtype(np.uint16): "U16",
    np.dtype(np.float16): "F16",
    np.dtype(np.int32): "I32",
    np.dtype(np.uint32): "U32",
    np.dtype(np.float32): "F32",
    np.dtype(np.float64): "F64",
    np.dtype(np.int64): "I64",
    np.dtype(np.uint64): "U64",
    np.dtype(np.complex64): "C64",
}

# Bits per element of every dtype of the specification.
DTYPE_BITS = {
    "BOOL": 8, "U8": 8, "I8": 8, "I16": 16, "U16": 16, "F16": 16, "BF16": 16, "I32": 32, "U32": 32,
    "F32": 32, "F64": 64, "I64": 64, "U64": 64, "C64": 64, "F8_E4M3": 8, "F8_E5M2": 8, "F8_E8M0": 8,
    "F8_E4M3FNUZ": 8, "F8_E5M2FNUZ": 8, "F4": 4, "F6_E2M3": 6, "F6_E3M2": 6,
}


def as_entry(tensor):
    """(name, dtype, shape, bytes) of a tensor given either way."""
    if len(tensor) == 2:
        name, arr = tensor
        arr = np.ascontiguousarray(arr)
        little = arr.dtype.newbyteorder("<") if arr.dtype.byteorder == ">" else arr.dtype
        return name, NUMPY_DTYPES[np.dtype(little)], list(arr.shape), arr.astype(little, copy=False).tobytes()
    name, dtype, shape, raw = tensor
    if isinstance(raw, int):  # a length of zeros, left as a hole in a sparse file
        return name, dtype, list(shape), raw
    return name, dtype, list(shape), bytes(raw)


def _length(raw):
    return raw if isinstance(raw, int) else len(raw)


def header_bytes(entries, metadata=None):
    header = {}
    if metadata:
        header["__metadata__"] = dict(metadata)
    at = 0
    for name, dtype, shape, raw in entries:
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [at, at + _length(raw)]}
        at += _length(raw)
    text = json.dumps(header, separators=(",", ":")).encode("utf-8")
    text += b" " * ((-(8 + len(text))) % 8)
    return text


def write_safetensors(path, tensors, metadata=None):
    """Writes `tensors` to `path`; returns [(name, dtype, shape, absolute offset, length)]."""
    entries = [as_entry(t) for t in tensors]
    header = header_bytes(entries, metadata)
    layout = []
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(header)))
        f.write(header)
        at = 8 + len(header)
        for name, dtype, shape, raw in entries:
            if isinstance(raw, int):
                f.seek(raw, os.SEEK_CUR)
            else:
                f.write(raw)
            layout.append((name, dtype, shape, at, _length(raw)))
            at += _length(raw)
        f.truncate(at)
    return layout


def write_sharded(outdir, shards, metadata=None, index_name="model.safetensors.index.json", leave_out=()):
    """Writes each shard (a list of tensors) as model-0000i-of-0000n.safetensors
    and the index naming every tensor's shard except those in `leave_out`
    (present in their shard, absent from the index: dead bytes)."""
    os.makedirs(outdir, exist_ok=True)
    weight_map = {}
    total = 0
    n = len(shards)
    for i, tensors in enumerate(shards, 1):
        file = "model-%05d-of-%05d.safetensors" % (i, n)
        for name, _dtype, _shape, _offset, length in write_safetensors(os.path.join(outdir, file), tensors,
                                                                       {"format": "pt"}):
            if name not in leave_out:
                weight_map[name] = file
                total += length
    index = {"metadata": dict(metadata or {}, total_size=total), "weight_map": weight_map}
    with open(os.path.join(outdir, index_name), "w") as f:
        json.dump(index, f, indent=2)
    return os.path.join(outdir, index_name)
