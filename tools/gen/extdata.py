"""Shared helpers for the model generators: hand-placed external data and
the python-side description of every weight (the reference view that the
differential tests compare ballast against).

Only Debian's python3-onnx and numpy are used. Nothing here downloads.
"""

import hashlib
import os
import struct
import sys

import numpy as np
import onnx
from onnx import TensorProto, numpy_helper

# ONNX type number -> lower-case ONNX name, as ballast prints them (dtype.hpp).
DTYPE_NAMES = {
    1: "float", 2: "uint8", 3: "int8", 4: "uint16", 5: "int16", 6: "int32", 7: "int64",
    8: "string", 9: "bool", 10: "float16", 11: "double", 12: "uint32", 13: "uint64",
    14: "complex64", 15: "complex128", 16: "bfloat16", 17: "float8e4m3fn", 18: "float8e4m3fnuz",
    19: "float8e5m2", 20: "float8e5m2fnuz", 21: "uint4", 22: "int4", 23: "float4e2m1",
}

# Bits per element of the raw little-endian form.
DTYPE_BITS = {
    1: 32, 2: 8, 3: 8, 4: 16, 5: 16, 6: 32, 7: 64, 9: 8, 10: 16, 11: 64, 12: 32, 13: 64,
    14: 64, 15: 128, 16: 16, 17: 8, 18: 8, 19: 8, 20: 8, 21: 4, 22: 4, 23: 4,
}

# Types whose typed-field form is int32_data, each value the element's bit
# pattern in its low bits (sub-byte types: one packed byte per int32).
_INT32_FIELD = {2: "<B", 3: "<b", 4: "<H", 5: "<h", 6: "<i", 9: "<B", 10: "<H", 16: "<H",
                17: "<B", 18: "<B", 19: "<B", 20: "<B", 21: "<B", 22: "<B", 23: "<B"}


def log(*parts):
    print(*parts, file=sys.stderr)


def storage_bytes(data_type, dims):
    n = 1
    for d in dims:
        n *= d
    bits = DTYPE_BITS[data_type]
    return (n * bits + 7) // 8


def sha256(data):
    return hashlib.sha256(data).hexdigest()


def sha1(data):
    return hashlib.sha1(data).hexdigest()


def _typed_field_bytes(t):
    """Raw little-endian bytes of a tensor stored in its typed repeated field."""
    dt = t.data_type
    if dt in _INT32_FIELD:
        width = struct.calcsize(_INT32_FIELD[dt])
        unsigned = {1: "<B", 2: "<H", 4: "<I"}[width]
        mask = (1 << (8 * width)) - 1
        return b"".join(struct.pack(unsigned, v & mask) for v in t.int32_data)
    if dt in (1, 14):
        return struct.pack("<%df" % len(t.float_data), *t.float_data)
    if dt in (11, 15):
        return struct.pack("<%dd" % len(t.double_data), *t.double_data)
    if dt == 7:
        return struct.pack("<%dq" % len(t.int64_data), *t.int64_data)
    if dt == 12:
        return struct.pack("<%dI" % len(t.uint64_data), *t.uint64_data)
    if dt == 13:
        return struct.pack("<%dQ" % len(t.uint64_data), *t.uint64_data)
    raise ValueError("no typed field for data type %d" % dt)


def raw_bytes(t, base_dir):
    """The weight's bytes as ballast must see them: raw_data, the external
    range, or the typed field re-packed little-endian."""
    if t.data_location == TensorProto.EXTERNAL:
        info = {e.key: e.value for e in t.external_data}
        path = os.path.join(base_dir, info["location"])
        offset = int(info.get("offset", "0"))
        length = int(info["length"]) if "length" in info else storage_bytes(t.data_type, t.dims)
        with open(path, "rb") as f:
            f.seek(offset)
            data = f.read(length)
        assert len(data) == length, "external range past EOF for %s" % t.name
        return data
    if t.HasField("raw_data"):
        return t.raw_data
    return _typed_field_bytes(t)


def cross_check_with_numpy(t, data, base_dir):
    """onnx.numpy_helper is the real implementation: where it can express the
    type, its bytes must equal ours, so the expectation never rests on this
    file's own decoding alone."""
    if t.data_type not in onnx.TensorProto.DataType.values():
        return "generator"
    if t.data_type in (TensorProto.COMPLEX64, TensorProto.COMPLEX128) and not t.HasField("raw_data") \
            and t.data_location != TensorProto.EXTERNAL:
        # onnx 1.12's to_array cannot decode complex float_data/double_data
        # (it hands python complex numbers to a float dtype): check the pairs.
        pairs = np.frombuffer(data, dtype="<f4" if t.data_type == TensorProto.COMPLEX64 else "<f8")
        assert pairs.size == 2 * int(np.prod(t.dims)), t.name
        return "generator"
    if t.data_location == TensorProto.EXTERNAL and not any(e.key == "length" for e in t.external_data):
        # onnx reads to end of file without `length`; ONNX means dtype x dims.
        with_length = TensorProto()
        with_length.CopyFrom(t)
        e = with_length.external_data.add()
        e.key, e.value = "length", str(len(data))
        t = with_length
    arr = numpy_helper.to_array(t, base_dir)  # reads external data itself
    if t.data_type == TensorProto.BFLOAT16:
        # numpy_helper widens bfloat16 to float32: compare the high halves.
        widened = np.frombuffer(data, dtype="<u2").astype(np.uint32) << 16
        assert widened.tobytes() == np.ascontiguousarray(arr, dtype="<f4").view("<u4").tobytes(), t.name
        return "onnx"
    got = np.ascontiguousarray(arr).tobytes()
    assert got == data, "numpy_helper disagrees with generator on %s" % t.name
    return "onnx"


def describe_tensor(t, source, base_dir):
    """One entry of a .expect.json `weights` list."""
    entry = {"name": t.name, "source": source, "dtype": DTYPE_NAMES[t.data_type], "dims": list(t.dims)}
    if t.data_location == TensorProto.EXTERNAL:
        info = {e.key: e.value for e in t.external_data}
        entry["location"] = "external"
        entry["file"] = os.path.realpath(os.path.join(base_dir, info["location"]))
        entry["offset"] = int(info.get("offset", "0"))
    else:
        entry["location"] = "inline"
    data = raw_bytes(t, base_dir)
    entry["bytes"] = len(data)
    entry["sha256"] = sha256(data)
    entry["reference"] = cross_check_with_numpy(t, data, base_dir)
    return entry


def constant_tensor(node):
    """The tensor a Constant node produces, as ONNX defines each attribute form;
    string tensors are listed by the caller, not counted as weights; None
    for sparse_value."""
    for a in node.attribute:
        if a.name == "value":
            t = TensorProto()
            t.CopyFrom(a.t)
            t.name = node.output[0]
            return t
        if a.name == "value_float":
            return onnx.helper.make_tensor(node.output[0], TensorProto.FLOAT, [], [a.f], raw=False)
        if a.name == "value_floats":
            return onnx.helper.make_tensor(node.output[0], TensorProto.FLOAT, [len(a.floats)], list(a.floats))
        if a.name == "value_int":
            return onnx.helper.make_tensor(node.output[0], TensorProto.INT64, [], [a.i])
        if a.name == "value_ints":
            return onnx.helper.make_tensor(node.output[0], TensorProto.INT64, [len(a.ints)], list(a.ints))
        if a.name == "value_string":
            return onnx.helper.make_tensor(node.output[0], TensorProto.STRING, [], [a.s])
        if a.name == "value_strings":
            return onnx.helper.make_tensor(node.output[0], TensorProto.STRING, [len(a.strings)], list(a.strings))
    return None


def walk_weights(graph, depth=0):
    """(tensor, source) for every initializer and Constant value, subgraphs included."""
    for t in graph.initializer:
        yield t, "initializer" if depth == 0 else "subgraph"
    for node in graph.node:
        if node.op_type == "Constant" and node.domain in ("", "ai.onnx"):
            t = constant_tensor(node)
            if t is not None:
                yield t, "constant"
        for a in node.attribute:
            if a.type == onnx.AttributeProto.GRAPH:
                yield from walk_weights(a.g, depth + 1)
            for g in a.graphs:
                yield from walk_weights(g, depth + 1)


def walk_sparse(graph):
    for s in graph.sparse_initializer:
        yield s.values.name
    for node in graph.node:
        for a in node.attribute:
            if a.type == onnx.AttributeProto.GRAPH:
                yield from walk_sparse(a.g)
            for g in a.graphs:
                yield from walk_sparse(g)


def external_file_accounting(weights):
    """Per external file: size and the union of referenced ranges, clipped to
    the file (overlapping or aliased ranges count once)."""
    ranges = {}
    for w in weights:
        if w["location"] == "external":
            ranges.setdefault(w["file"], []).append((w["offset"], w["offset"] + w["bytes"]))
    files = []
    for path in sorted(ranges):
        size = os.path.getsize(path)
        merged = []
        for lo, hi in sorted(ranges[path]):
            hi = min(hi, size)
            if lo >= hi:
                continue
            if merged and lo <= merged[-1][1]:
                merged[-1][1] = max(merged[-1][1], hi)
            else:
                merged.append([lo, hi])
        referenced = sum(hi - lo for lo, hi in merged)
        dead, cursor = [], 0
        for lo, hi in merged:
            if lo > cursor:
                dead.append([cursor, lo - cursor])
            cursor = hi
        if cursor < size:
            dead.append([cursor, size - cursor])
        files.append({"path": path, "mapped_bytes": size, "referenced_bytes": referenced,
                      "unreferenced_bytes": size - referenced, "dead_ranges": dead})
    return files


class Blob:
    """An external-data file whose layout the generator controls byte by byte."""

    def __init__(self, path, mode="wb"):
        self.path = path
        os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
        self.f = open(path, mode)
        self.f.seek(0, os.SEEK_END)

    def tell(self):
        return self.f.tell()

    def pad_to(self, alignment):
        pos = self.f.tell()
        if pos % alignment:
            self.f.write(b"\0" * (alignment - pos % alignment))

    def append(self, data):
        offset = self.f.tell()
        self.f.write(data)
        return offset, len(data)

    def hole(self, length):
        """Reserves `length` zero bytes without writing them (a sparse file)."""
        offset = self.f.tell()
        self.f.seek(offset + length)
        return offset, length

    def close(self):
        self.f.truncate()  # a trailing hole still counts in the file's length
        self.f.close()


def strip_node_names(nodes):
    """Clears every node's name, as onnx.helper (without name=) and many
    exporters leave them: NodeProto.name is optional. ballast then names a
    node "<op_type>#<index>" (docs/derivations.md, "Node names")."""
    for node in nodes:
        node.ClearField("name")
    return nodes


def set_external(t, location, offset, length, *, write_length=True, checksum=None, extra=()):
    """Points `t` at [offset, offset+length) of `location` and drops its inline data."""
    t.ClearField("raw_data")
    for field in ("float_data", "int32_data", "int64_data", "double_data", "uint64_data"):
        t.ClearField(field)
    del t.external_data[:]
    entries = [("location", location), ("offset", str(offset))]
    if write_length:
        entries.append(("length", str(length)))
    if checksum:
        entries.append(("checksum", checksum))
    entries.extend(extra)
    for k, v in entries:
        e = t.external_data.add()
        e.key, e.value = k, v
    t.data_location = TensorProto.EXTERNAL


def expectation(model_path, extra=None):
    """The python-side view of `model_path` (the .expect.json content)."""
    model = onnx.load(model_path, load_external_data=False)
    base = os.path.dirname(os.path.abspath(model_path))
    weights, strings = [], []
    for t, source in walk_weights(model.graph):
        if t.data_type == TensorProto.STRING:
            strings.append({"name": t.name, "dims": list(t.dims), "source": source})
            continue
        weights.append(describe_tensor(t, source, base))
    doc = {
        "model": os.path.basename(model_path),
        "weights": weights,
        "string_tensors": strings,
        "sparse_initializers": list(walk_sparse(model.graph)),
        "external_files": external_file_accounting(weights),
    }
    if extra:
        doc.update(extra)
    return doc
