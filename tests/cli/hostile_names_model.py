#!/usr/bin/python3
"""Writes ONNX models whose names are terminal attacks, as raw protobuf bytes
(the onnx package will not write a name that is not valid UTF-8).

  hostile.onnx + hostile.bin: a MatMul whose weight, node and other
    initializers are named with carriage returns, cursor movement, erase,
    conceal (ESC [ 8 m), backspaces, C1 controls, bidi overrides and invalid
    UTF-8. The external weight's checksum is wrong, so `verify` must fail,
    and its name tries to print a fake "ok" line over that failure.
  hostile_missing.onnx: one external tensor whose location (escape
    sequences included) names a file that is not there: a load error that
    echoes the location.
  hostile_dead.onnx + dead\xff.bin: one external tensor over the second
    half of a data file whose name is not UTF-8, so the first half is a
    dead range of that file (`inspect` escapes its name).

Usage: hostile_names_model.py OUT_DIR; prints the names as JSON (hex) so a
test knows what to expect.
"""

import hashlib
import json
import os
import struct
import sys

# The names. Each is bytes; the test reads them back from NAMES below.
FAKE_OK = b"\r\x1b[2Kverify: 1/1 external ranges inside their files, 1/1 checksums match: ok\x1b[8m"
WEIGHT = FAKE_OK
NODE = b"\x1b[1A\x1b[2Kderive: ok\x08\x08\x08\x08"
INLINE_NAMES = [
    b"bad\xff\xfeutf8\xc0\xaf\xed\xa0\x80",   # invalid bytes, an overlong '/', a surrogate
    b"back\x08\x08\x08\x08space\x7f",
    b"c1\xc2\x9b31mcsi\xc2\x85line",          # C1 CSI and NEL, valid UTF-8
    b"bidi\xe2\x80\xaeevil",                  # U+202E right-to-left override
    b"tab\tnew\nline\\x1b",                   # a literal backslash-x too
    "caf\u00e9 \u4e2d\u6587".encode(),        # printable UTF-8: kept as it is
]
INPUT = b"x"
OUTPUT = b"y"
K, N = 4, 4


def varint(n):
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def field_varint(num, value):
    return varint(num << 3) + varint(value)


def field_bytes(num, data):
    return varint((num << 3) | 2) + varint(len(data)) + data


def entry(key, value):
    return field_bytes(1, key) + field_bytes(2, value)


def tensor(name, dims, raw=None, external=None):
    t = b"".join(field_varint(1, d) for d in dims) + field_varint(2, 1)  # FLOAT
    t += field_bytes(8, name)
    if raw is not None:
        t += field_bytes(9, raw)
    if external is not None:
        for k, v in external:
            t += field_bytes(13, entry(k, v))
        t += field_varint(14, 1)  # data_location EXTERNAL
    return t


def value_info(name, dims):
    shape = b"".join(field_bytes(1, field_varint(1, d)) for d in dims)
    tensor_type = field_varint(1, 1) + field_bytes(2, shape)
    return field_bytes(1, name) + field_bytes(2, field_bytes(1, tensor_type))


def model(graph):
    opset = field_bytes(1, b"") + field_varint(2, 17)
    return (field_varint(1, 8) + field_bytes(2, b"hostile_names_model") + field_bytes(8, opset) + field_bytes(7, graph)
            + field_bytes(14, entry(b"note\x1b]0;pwned\x07", b"value\x1b[8m")))


def main():
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    weight_bytes = struct.pack("<%df" % (K * N), *[float(i) for i in range(K * N)])
    with open(os.path.join(out, "hostile.bin"), "wb") as f:
        f.write(weight_bytes)
    wrong_sha1 = hashlib.sha1(b"not these bytes").hexdigest().encode()
    graph = field_bytes(1, field_bytes(1, INPUT) + field_bytes(1, WEIGHT) + field_bytes(2, OUTPUT)
                        + field_bytes(3, NODE) + field_bytes(4, b"MatMul"))
    graph += field_bytes(2, b"graph\x1b[8m")
    graph += field_bytes(5, tensor(WEIGHT, [K, N], external=[(b"location", b"hostile.bin"), (b"offset", b"0"),
                                                            (b"length", str(len(weight_bytes)).encode()),
                                                            (b"checksum", wrong_sha1)]))
    for name in INLINE_NAMES:
        graph += field_bytes(5, tensor(name, [2], raw=struct.pack("<2f", 1.0, 2.0)))
    graph += field_bytes(11, value_info(INPUT, [1, K]))
    graph += field_bytes(12, value_info(OUTPUT, [1, N]))
    with open(os.path.join(out, "hostile.onnx"), "wb") as f:
        f.write(model(graph))

    missing = b"\x1b[8mmissing\r\x1b[2K.bin"
    g2 = field_bytes(2, b"g")
    g2 += field_bytes(5, tensor(b"w\x1b[31m", [K], external=[(b"location", missing), (b"offset", b"0"),
                                                            (b"length", b"16")]))
    with open(os.path.join(out, "hostile_missing.onnx"), "wb") as f:
        f.write(model(g2))

    dead_file = b"dead\xff.bin"
    with open(os.path.join(os.fsencode(out), dead_file), "wb") as f:
        f.write(bytes(64))
    g3 = field_bytes(2, b"g")
    g3 += field_bytes(5, tensor(b"w", [8], external=[(b"location", dead_file), (b"offset", b"32"),
                                                     (b"length", b"32")]))
    with open(os.path.join(out, "hostile_dead.onnx"), "wb") as f:
        f.write(model(g3))

    json.dump({"weight": WEIGHT.hex(), "node": NODE.hex(), "inline": [n.hex() for n in INLINE_NAMES],
               "missing_location": missing.hex()}, sys.stdout)


if __name__ == "__main__":
    main()
