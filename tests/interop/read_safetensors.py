"""An independent safetensors reader, written from the specification for the
differential tests (it shares no code with ballast or with the generator):
the 8-byte little-endian length, the JSON header, the byte buffer.
Returns what a reader must agree on: every tensor's dtype, shape, absolute
file offset and length, and __metadata__."""

import json
import struct


def read_header(path):
    with open(path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        text = f.read(n)
    if len(text) != n:
        raise ValueError("%s: header length past the end" % path)
    seen = []

    def pairs(items):
        keys = [k for k, _ in items]
        if len(keys) != len(set(keys)):
            raise ValueError("%s: duplicate key" % path)
        seen.append(len(items))
        return dict(items)

    header = json.loads(text.decode("utf-8"), object_pairs_hook=pairs)
    metadata = header.pop("__metadata__", None) or {}
    start = 8 + n
    tensors = {}
    for name, info in header.items():
        begin, end = info["data_offsets"]
        tensors[name] = {"dtype": info["dtype"], "shape": info["shape"], "offset": start + begin,
                         "length": end - begin}
    return {"tensors": tensors, "metadata": metadata, "header_bytes": start}


def read_index(path):
    with open(path) as f:
        index = json.load(f)
    return index["weight_map"], index.get("metadata", {})
