#!/usr/bin/python3
"""Writes the GGUF fuzz target's seeds (tests/fuzz/corpus_gguf): small valid
files of every metadata type, block types, a split part, v2, a 64-byte
alignment. Each seed starts with the byte fuzz_gguf.cpp reads as its limit
flags (0: the default limits). Run from anywhere: python3 make_gguf_seeds.py
"""
import os
import struct

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "corpus_gguf")


def s(text):
    b = text.encode()
    return struct.pack("<Q", len(b)) + b


def kv(key, vtype, payload):
    return s(key) + struct.pack("<I", vtype) + payload


def tinfo(name, ne, ttype, offset):
    return s(name) + struct.pack("<I", len(ne)) + b"".join(struct.pack("<Q", d) for d in ne) + struct.pack("<IQ", ttype, offset)


def gguf(kvs, infos, data, alignment=32, version=3):
    out = b"GGUF" + struct.pack("<IQQ", version, len(infos), len(kvs)) + b"".join(kvs) + b"".join(infos)
    out += b"\0" * (-len(out) % alignment)
    return out + data


def main():
    os.makedirs(OUT, exist_ok=True)
    every = [
        kv("u8", 0, b"\x07"), kv("i8", 1, b"\xff"), kv("u16", 2, b"\x01\x02"), kv("i16", 3, b"\xfe\xff"),
        kv("u32", 4, struct.pack("<I", 9)), kv("i32", 5, struct.pack("<i", -9)), kv("f32", 6, struct.pack("<f", 0.5)),
        kv("b", 7, b"\x01"), kv("s", 8, s("text")), kv("u64", 10, struct.pack("<Q", 1)),
        kv("i64", 11, struct.pack("<q", -1)), kv("f64", 12, struct.pack("<d", 2.5)),
        kv("arr", 9, struct.pack("<IQ", 8, 2) + s("a") + s("b")),
        kv("nest", 9, struct.pack("<IQ", 9, 1) + struct.pack("<IQ", 0, 2) + b"\x01\x02"),
    ]
    seeds = {
        "metadata": gguf(every, [], b""),
        "f32_tensor": gguf([kv("general.alignment", 4, struct.pack("<I", 32))], [tinfo("w", [4, 2], 0, 0)], bytes(32)),
        "blocks": gguf([], [tinfo("q4_0", [32], 2, 0), tinfo("q4_k", [256], 12, 32), tinfo("q6_k", [256], 14, 192)],
                       bytes(192 + 210)),
        "gap": gguf([], [tinfo("a", [4], 0, 0), tinfo("b", [4], 0, 64)], bytes(80)),
        "split_part": gguf([kv("split.no", 2, b"\x00\x00"), kv("split.count", 2, b"\x02\x00"),
                            kv("split.tensors.count", 5, struct.pack("<i", 2))], [tinfo("a", [8], 1, 0)], bytes(16)),
        "v2": gguf([kv("general.name", 8, s("v2"))], [tinfo("a", [2], 0, 0)], bytes(8), version=2),
        "align64": gguf([kv("general.alignment", 4, struct.pack("<I", 64))],
                        [tinfo("a", [4], 0, 0), tinfo("b", [32], 8, 64)], bytes(64 + 34), alignment=64),
    }
    for name, data in seeds.items():
        with open(os.path.join(OUT, name), "wb") as f:
            f.write(b"\0" + data)


if __name__ == "__main__":
    main()
