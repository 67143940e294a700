#!/usr/bin/python3
"""tools/gen/gguf_io.py checked by itself, before anything is checked
against it:
  - the writer and the spec reader agree on every value type, nested and
    empty arrays, versions 1 to 3, alignments, gaps and split sets;
  - dequant() gives hand-computed values for one block of each type, and
    the packers put the bits where the layout says;
  - dequant() (vectorized) equals a per-element transcription of the block
    layouts on random blocks of every type, bit for bit.

Exit 0 pass, 1 fail.
"""

import os
import struct
import sys
import tempfile

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "cli"))
from cli_check import FAILURES, expect  # noqa: E402

sys.path.insert(0, os.path.join(HERE, "..", "..", "tools", "gen"))
import gguf_io as g  # noqa: E402

F = np.float32


def same_bits(a, b):
    a, b = np.asarray(a, dtype=F), np.asarray(b, dtype=F)
    return a.shape == b.shape and np.array_equal(a.view(np.uint32), b.view(np.uint32))


# ---------------------------------------------------------------- round trip

def check_round_trip(tmp):
    metadata = [
        ("general.architecture", "string", "llama"),
        ("u8", "uint8", 255), ("i8", "int8", -128), ("u16", "uint16", 65535), ("i16", "int16", -32768),
        ("u32", "uint32", 4294967295), ("i32", "int32", -2147483648), ("f32", "float32", 0.1),
        ("t", "bool", True), ("f", "bool", False), ("s", "string", "gr\u00fc\u00df \u2603"),
        ("u64", "uint64", 2 ** 64 - 1), ("i64", "int64", -2 ** 63), ("f64", "float64", -1e-300),
        ("empty", ("array", "int32"), []),
        ("nested", ("array", ("array", "uint8")), [[1, 2], [], [3]]),
        ("strings", ("array", "string"), ["a", "", "\u00e9"]),
    ]
    rng = np.random.default_rng(1)
    tensors = [("a", "F32", [3], g.pack_f32([1, 2, 3])), ("b", "Q4_0", [64, 2], g.random_blocks("Q4_0", 4, rng)),
               ("c", "Q6_K", [256], g.random_blocks("Q6_K", 1, rng))]
    for version in (1, 2, 3):
        for alignment, gaps in ((None, None), (64, None), (None, {"c": 96})):
            path = os.path.join(tmp, "rt.gguf")
            w = g.write_gguf(path, metadata, tensors, alignment=alignment, version=version, gaps=gaps)
            r = g.read_gguf(path)
            what = "round trip v%d alignment %s gaps %s" % (version, alignment, gaps)
            want = {k: (t, v) for k, t, v in metadata}
            if alignment:
                want["general.alignment"] = ("uint32", alignment)
            got = dict(r["metadata"])
            f32 = got.pop("f32")
            want.pop("f32")
            expect(f32 == ("float32", float(F(0.1))), what + ": float32 value")
            expect(got == want, what + ": metadata")
            expect(r["version"] == version and r["alignment"] == (alignment or 32), what + ": version, alignment")
            expect(r["header_bytes"] == w["header_bytes"] and r["data_start"] == w["data_start"]
                   and r["data_start"] % (alignment or 32) == 0, what + ": header and data start")
            infos = [(t["name"], t["type"], t["ne"], t["abs_offset"], t["length"]) for t in r["tensors"]]
            expect(infos == w["tensors"], what + ": tensor infos")
            expect(all(t["offset"] % (alignment or 32) == 0 for t in r["tensors"]), what + ": aligned offsets")
            with open(path, "rb") as f:
                data = f.read()
            expect(all(data[o:o + n] == raw for (_, _, _, o, n), (_, _, _, raw) in zip(w["tensors"], tensors)),
                   what + ": tensor bytes")
            if gaps:
                c = r["tensors"][2]
                b = r["tensors"][1]
                expect(c["offset"] - g.align_up(b["offset"] + b["length"], 32) == 96, what + ": the gap")
            expect(r["file_size"] == w["tensors"][-1][3] + w["tensors"][-1][4], what + ": file ends at the last tensor")
    # The bytes of a small file, written out by hand from the specification.
    path = os.path.join(tmp, "tiny.gguf")
    g.write_gguf(path, [("k", "uint16", 7)], [("t", "F32", [1], g.pack_f32([1.0]))])
    want = (b"GGUF" + struct.pack("<IQQ", 3, 1, 1) + struct.pack("<Q", 1) + b"k" + struct.pack("<IH", 2, 7)
            + struct.pack("<Q", 1) + b"t" + struct.pack("<IQIQ", 1, 1, 0, 0))
    want += b"\0" * (-len(want) % 32) + struct.pack("<f", 1.0)
    with open(path, "rb") as f:
        expect(f.read() == want, "a one-tensor file byte for byte")
    # A split set.
    paths = g.write_gguf_split(os.path.join(tmp, "split"), "m", [tensors[:1], tensors[1:2], tensors[2:]],
                               [("general.name", "string", "x")])
    expect([os.path.basename(p) for p in paths] == ["m-00001-of-00003.gguf", "m-00002-of-00003.gguf",
                                                     "m-00003-of-00003.gguf"], "split names")
    for i, p in enumerate(paths):
        md = g.read_gguf(p)["metadata"]
        expect(md["split.no"] == ("uint16", i) and md["split.count"] == ("uint16", 3)
               and md["split.tensors.count"] == ("int32", 3) and ("general.name" in md) == (i == 0),
               "split part %d keys" % (i + 1))
    # The reader refuses what the specification does not allow.
    for name, raw in (("magic", b"GGUX" + b"\0" * 20), ("version", b"GGUF" + struct.pack("<IQQ", 4, 0, 0)),
                      ("truncated", b"GGUF" + struct.pack("<IQQ", 3, 0, 1) + struct.pack("<Q", 99))):
        path = os.path.join(tmp, "bad.gguf")
        with open(path, "wb") as f:
            f.write(raw)
        try:
            g.read_gguf(path)
            expect(False, "the reader refuses a bad " + name)
        except g.GGUFError:
            expect(True, "the reader refuses a bad " + name)
    f32 = [("t", "F32", [8], g.pack_f32(range(8)))]
    odd = {
        "alignment that is no multiple of 8": dict(metadata=[("general.alignment", "uint32", 12)], tensors=f32),
        "alignment of another type": dict(metadata=[("general.alignment", "uint64", 32)], tensors=f32),
        "unaligned offset": dict(metadata=[], tensors=f32, offsets=[4]),
        "tensor past the end": dict(metadata=[], tensors=[("t", "F32", [9], g.pack_f32(range(8)))]),
        "bool of 2": dict(metadata=[("b", "bool", 2)], tensors=[]),
        "key twice": dict(metadata=[("k", "uint8", 1), ("k", "uint8", 2)], tensors=[]),
        "value type 13": dict(metadata=[("k", 13, b"")], tensors=[]),
        "string that is not UTF-8": dict(metadata=[("k", "string", b"\xff\xfe")], tensors=[]),
        "ne[0] of part of a block": dict(metadata=[], tensors=[("t", "Q8_0", [16], b"\0" * 34)]),
    }
    for name, kw in odd.items():
        path = os.path.join(tmp, "odd.gguf")
        g.write_gguf(path, **kw)
        try:
            g.read_gguf(path)
            expect(False, "the reader refuses a file with a " + name)
        except g.GGUFError:
            expect(True, "the reader refuses a file with a " + name)


# ---------------------------------------------------------------- hand-computed blocks

def check_hand_blocks():
    one = np.array([1.0], dtype=np.float16)
    e = np.arange(256)
    expect(same_bits(g.dequant("F32", g.pack_f32([1.5, -2.0]), 2), [1.5, -2.0]), "F32")
    expect(same_bits(g.dequant("F16", g.pack_f16(g.f16_from_bits([0x3C00, 0x0001, 0xC000])), 3),
                     [1.0, 2.0 ** -24, -2.0]), "F16 (with a subnormal)")
    expect(same_bits(g.dequant("BF16", g.pack_bf16([0x3F80, 0xC040, 0x0001]), 3), [1.0, -3.0, 2.0 ** -133]),
           "BF16")

    j = np.arange(32)
    raw = g.pack_q4_0([0.5], [j % 16])
    expect(raw[2 + 1] == 0x11 and raw[2 + 15] == 0xFF, "Q4_0: elements j and j+16 share byte j (low, high)")
    expect(same_bits(g.dequant("Q4_0", raw, 32), ((j % 16) - 8) * 0.5), "Q4_0: (q - 8) * d")
    raw = g.pack_q4_1([2.0], [-1.0], [j % 16])
    expect(same_bits(g.dequant("Q4_1", raw, 32), (j % 16) * 2.0 - 1.0), "Q4_1: q * d + m")
    raw = g.pack_q5_0(one, [j])
    expect(raw[2:6] == b"\x00\x00\xff\xff", "Q5_0: the fifth bits as a little-endian u32, bit e for element e")
    expect(same_bits(g.dequant("Q5_0", raw, 32), j - 16.0), "Q5_0: (q - 16) * d")
    raw = g.pack_q5_1(one, [0.5], [31 - j])
    expect(raw[4:8] == b"\xff\xff\x00\x00", "Q5_1: fifth bits")
    expect(same_bits(g.dequant("Q5_1", raw, 32), (31 - j) + 0.5), "Q5_1: q * d + m")
    raw = g.pack_q8_0([-1.0], [j - 16])
    expect(same_bits(g.dequant("Q8_0", raw, 32), -(j - 16.0)), "Q8_0: q * d")
    raw = g.pack_q8_k([0.25], [e - 128])
    expect(struct.unpack_from("<h", raw, 260)[0] == sum(range(-128, -112)), "Q8_K: bsums")
    expect(same_bits(g.dequant("Q8_K", raw, 256), (e - 128) / 4.0), "Q8_K: q * d (f32 d)")

    k = e // 16
    raw = g.pack_q2_k(one, one, [np.ones(16, int)], [np.arange(16)], [(e // 32) % 4])
    expect(raw[5] == 0x51, "Q2_K: scales[k] = sc | mn << 4")
    expect(raw[16] == 0b11100100, "Q2_K: qs[0] holds elements 0, 32, 64, 96 at bits 0, 2, 4, 6")
    expect(same_bits(g.dequant("Q2_K", raw, 256), (e // 32) % 4 - k), "Q2_K: sc=1, mn=k gives q - k")

    raw = g.pack_q3_k(one, [np.arange(16) + 24], [e % 8])
    # A negative scale times a zero value is -0.0, so the expectation is float32 too.
    expect(same_bits(g.dequant("Q3_K", raw, 256), F(k - 8) * F((e % 8) - 4)), "Q3_K: (sc - 32) * (q - 4)")
    sc = np.array([0, 63, 32, 31, 16, 47, 1, 62, 5, 58, 33, 30, 48, 15, 40, 23])
    raw = g.pack_q3_k(one, [sc], [np.full(256, 5)])
    expect(same_bits(g.dequant("Q3_K", raw, 256), (sc[k] - 32) * 1.0), "Q3_K: every 6-bit scale slot")
    # byte 0: low nibbles of scales 0 and 8; byte 8: top bits of scales 0, 4, 8, 12 at 0, 2, 4, 6.
    expect(raw[96] == 0x50 and raw[96 + 8] == (1 << 2) | (3 << 6), "Q3_K: scale bytes 0 and 8")

    sc1 = np.array([1, 2, 3, 4, 33, 50, 63, 17])
    mn1 = np.array([0, 63, 5, 40, 16, 32, 48, 1])
    raw = g.pack_q4_k(one, one, [np.ones(8, int)], [np.zeros(8, int)], [e % 16])
    expect(same_bits(g.dequant("Q4_K", raw, 256), e % 16), "Q4_K: sc=1, mn=0, d=1 gives the codes")
    expect(list(raw[4:16]) == [1] * 4 + [0] * 4 + [1] * 4, "Q4_K: sc=1, mn=0 packed")
    raw = g.pack_q4_k(one, one, [sc1], [mn1], [e % 16])
    expect(same_bits(g.dequant("Q4_K", raw, 256), sc1[e // 32] * (e % 16) - mn1[e // 32]),
           "Q4_K: six-bit scales and mins, high bits included")
    expect(raw[4 + 0] == (1 | ((33 >> 4) << 6)) and raw[4 + 11] == ((17 & 15) | ((1 & 15) << 4)),
           "Q4_K: scale bytes 0 and 11")
    raw = g.pack_q5_k(one, one, [sc1], [mn1], [e % 32])
    expect(same_bits(g.dequant("Q5_K", raw, 256), sc1[e // 32] * (e % 32) - mn1[e // 32]), "Q5_K")
    raw = g.pack_q5_k(one, one, [np.ones(8, int)], [np.zeros(8, int)], [np.where(e == 33, 16, 0)])
    expect(raw[16 + 1] == 2 and sum(raw[16:48]) == 2, "Q5_K: element 33 (chunk 0, high nibble, l=1) is qh[1] bit 1")

    sc6 = np.array([-128, 127, -1, 0, 1, 2, -2, 3, -3, 4, 64, -64, 5, -5, 100, -100])
    raw = g.pack_q6_k(one, [sc6], [e % 64])
    expect(same_bits(g.dequant("Q6_K", raw, 256), sc6[k] * ((e % 64) - 32.0)), "Q6_K: sc * (q - 32)")
    raw = g.pack_q6_k(one, [np.ones(16, int)], [np.where(e == 200, 63, 0)])
    # element 200 = half 1, quarter 2 (l = 8): ql[64 + 8] high nibble, qh[32 + 8] bits 4..5.
    expect(raw[64 + 8] == 0xF0 and raw[128 + 32 + 8] == 0x30, "Q6_K: where element 200's bits go")

    # Rounding: each operation rounded by itself in float32, not fused.
    d = np.array([np.float16(0.1)])
    m = np.array([np.float16(0.3)])
    raw = g.pack_q4_1(d, m, [np.full(32, 7)])
    want = F(F(7) * F(d[0])) + F(m[0])
    expect(same_bits(g.dequant("Q4_1", raw, 32), np.full(32, want)), "Q4_1 rounds the product, then the sum")


# ---------------------------------------------------------------- per-element transcription

def _f16_at(b, at):
    return F(np.frombuffer(b[at:at + 2], dtype="<f2")[0])


def slow_dequant(t, raw, n):
    """The block layouts one element at a time, as the specification words them."""
    blk, size = g.GGML_TYPES[t][1:]
    out = []
    for bi in range(n // blk):
        b = raw[bi * size:(bi + 1) * size]
        y = [None] * blk
        if t in ("Q4_0", "Q4_1", "Q5_0", "Q5_1"):
            d = _f16_at(b, 0)
            m = _f16_at(b, 2) if t in ("Q4_1", "Q5_1") else None
            qs_at = {"Q4_0": 2, "Q4_1": 4, "Q5_0": 6, "Q5_1": 8}[t]
            h = struct.unpack_from("<I", b, qs_at - 4)[0] if t in ("Q5_0", "Q5_1") else 0
            for jj in range(16):
                for e, q in ((jj, b[qs_at + jj] & 15), (jj + 16, b[qs_at + jj] >> 4)):
                    if t in ("Q5_0", "Q5_1"):
                        q |= ((h >> e) & 1) << 4
                    if t == "Q4_0":
                        y[e] = F(q - 8) * d
                    elif t == "Q5_0":
                        y[e] = F(q - 16) * d
                    else:
                        y[e] = F(F(q) * d) + m
        elif t == "Q8_0":
            d = _f16_at(b, 0)
            y = [F(np.int8(np.uint8(b[2 + jj]))) * d for jj in range(32)]
        elif t == "Q8_K":
            d = F(struct.unpack_from("<f", b, 0)[0])
            y = [F(np.int8(np.uint8(b[4 + jj]))) * d for jj in range(256)]
        elif t == "Q2_K":
            scales, qs, d, dmin = b[0:16], b[16:80], _f16_at(b, 80), _f16_at(b, 82)
            at = 0
            for h in range(2):
                for s in (0, 2, 4, 6):
                    for gg in range(2):
                        sc = scales[8 * h + s + gg]
                        dl, ml = d * F(sc & 15), dmin * F(sc >> 4)
                        for l in range(16):
                            y[at] = F(dl * F((qs[32 * h + 16 * gg + l] >> s) & 3)) - ml
                            at += 1
        elif t == "Q3_K":
            hmask, qs, scales, d = b[0:32], b[32:96], b[96:108], _f16_at(b, 108)
            sc = []
            for i in range(16):
                low4 = (scales[i] & 15) if i < 8 else (scales[i - 8] >> 4)
                high2 = (scales[8 + i % 4] >> (2 * (i // 4))) & 3
                sc.append((low4 | (high2 << 4)) - 32)
            at = 0
            for h in range(2):
                for s in (0, 2, 4, 6):
                    for gg in range(2):
                        dl = d * F(sc[8 * h + s + gg])
                        bit = 1 << (4 * h + s // 2)
                        for l in range(16):
                            q = (qs[32 * h + 16 * gg + l] >> s) & 3
                            v = q - (0 if hmask[16 * gg + l] & bit else 4)
                            y[at] = dl * F(v)
                            at += 1
        elif t in ("Q4_K", "Q5_K"):
            d, dmin, scales = _f16_at(b, 0), _f16_at(b, 2), b[4:16]
            qh = b[16:48] if t == "Q5_K" else None
            qs = b[48:176] if t == "Q5_K" else b[16:144]
            pairs = []
            for jj in range(8):
                if jj < 4:
                    pairs.append((scales[jj] & 63, scales[jj + 4] & 63))
                else:
                    pairs.append(((scales[jj + 4] & 15) | ((scales[jj - 4] >> 6) << 4),
                                  (scales[jj + 4] >> 4) | ((scales[jj] >> 6) << 4)))
            for c in range(4):
                for half in range(2):
                    sc, mn = pairs[2 * c + half]
                    d1, m1 = d * F(sc), dmin * F(mn)
                    for l in range(32):
                        q = (qs[32 * c + l] >> (4 * half)) & 15
                        if qh is not None and qh[l] & (1 << (2 * c + half)):
                            q += 16
                        y[64 * c + 32 * half + l] = F(d1 * F(q)) - m1
        elif t == "Q6_K":
            ql, qh, d = b[0:128], b[128:192], _f16_at(b, 208)
            scales = np.frombuffer(b[192:208], dtype=np.int8)
            for h in range(2):
                for l in range(32):
                    a, c = ql[64 * h + l], ql[64 * h + l + 32]
                    hh = qh[32 * h + l]
                    qv = [(a & 15) | ((hh & 3) << 4), (c & 15) | (((hh >> 2) & 3) << 4),
                          (a >> 4) | (((hh >> 4) & 3) << 4), (c >> 4) | (((hh >> 6) & 3) << 4)]
                    for kk in range(4):
                        s = F(scales[8 * h + l // 16 + 2 * kk])
                        y[128 * h + 32 * kk + l] = (d * s) * F(qv[kk] - 32)
        out += y
    return np.array(out, dtype=F)


def check_against_transcription():
    rng = np.random.default_rng(7)
    with np.errstate(over="ignore", under="ignore", invalid="ignore"):
        for t in ("Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0", "Q8_K", "Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K"):
            blk = g.GGML_TYPES[t][1]
            nb = 64 if blk == 256 else 256
            raw = g.random_blocks(t, nb, rng)
            fast = g.dequant(t, raw, nb * blk)
            slow = slow_dequant(t, raw, nb * blk)
            expect(same_bits(fast, slow), "%s: dequant equals the per-element transcription on %d random blocks"
                   % (t, nb))
            expect(np.isfinite(fast).all(), "%s: random blocks dequantize to finite values" % t)


def check_random_coverage():
    rng = np.random.default_rng(3)
    n = 64
    raw = np.frombuffer(g.random_blocks("Q4_K", n, rng), dtype=np.uint8).reshape(n, 144)
    # Decode the 6-bit fields by hand (bytes 4..15) and check all 64 values occur.
    s = raw[:, 4:16].astype(int)
    sc = np.concatenate([s[:, 0:4] & 63, (s[:, 8:12] & 15) | ((s[:, 0:4] >> 6) << 4)], axis=1)
    mn = np.concatenate([s[:, 4:8] & 63, (s[:, 8:12] >> 4) | ((s[:, 4:8] >> 6) << 4)], axis=1)
    expect(len(set(sc.ravel())) == 64 and len(set(mn.ravel())) == 64, "Q4_K random blocks: all 64 scales and mins")
    d = raw[:, 0:2].copy().view("<u2").ravel()
    expect(((d & 0x7C00) == 0).any() and (d & 0x8000).any() and ((d & 0x7C00) != 0x7C00).all(),
           "random f16 scales: subnormal and negative ones, never inf or NaN")
    raw6 = np.frombuffer(g.random_blocks("Q6_K", 16, rng), dtype=np.uint8).reshape(16, 210)
    expect(len(set(raw6[:, 192:208].ravel())) == 256, "Q6_K random blocks: all 256 int8 scales")
    raw3 = np.frombuffer(g.random_blocks("Q3_K", 4, rng), dtype=np.uint8).reshape(4, 110)
    expect(len(set(raw3[:, 32:96].ravel() & 3)) == 4 and raw3[:, 0:32].any(), "Q3_K random blocks: codes")


def main():
    with tempfile.TemporaryDirectory() as tmp:
        check_round_trip(tmp)
    check_hand_blocks()
    check_random_coverage()
    check_against_transcription()
    print("%s: %s" % (os.path.basename(__file__), "FAILED" if FAILURES else "ok"))
    return 1 if FAILURES else 0


if __name__ == "__main__":
    sys.exit(main())
