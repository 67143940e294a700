#!/usr/bin/python3
"""make_gguf_models.py OUT_DIR

GGUF files for the tests, written with numpy (gguf_io.py):

  OUT_DIR/llama.gguf        a small llama-shaped model: 2 layers, Q4_0, Q4_K
                            and Q6_K matrices, F32 norms, an F16 embedding,
                            the architecture's metadata and a tokenizer
                            (string and float32 arrays)
  OUT_DIR/types.gguf        one tensor of every type: the ones gguf_io can
                            dequantize from random_blocks(), the integer and
                            F64 ones, and every other block type as random
                            bytes of the right size; one metadata key of
                            every scalar type, both bools, a non-ASCII
                            string, nested and empty arrays
  OUT_DIR/v2.gguf           version 2
  OUT_DIR/align64.gguf      general.alignment 64
  OUT_DIR/gap.gguf          a tensor placed past the next aligned offset,
                            leaving bytes no tensor covers
  OUT_DIR/split/model-0000{1,2,3}-of-00003.gguf   a split set
  OUT_DIR/models.json       [{model, files}]: each model by the path it is
                            opened by (a split set: its first part)

Next to each file: <file>.expected.json, the spec reader's view of it
(metadata with ballast's type labels and value text, tensors with their
absolute offsets, lengths and SHA-256), and for each tensor of a type
gguf_io.dequant() knows, <file>.<tensor>.f32.npy with its float32 values.
Deterministic (one fixed seed).
"""

import argparse
import hashlib
import json
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gguf_io as g  # noqa: E402

# ggml type -> the dtype name ballast prints.
BALLAST_DTYPE = {"F32": "float", "F16": "float16", "BF16": "bfloat16", "F64": "double", "I8": "int8",
                 "I16": "int16", "I32": "int32", "I64": "int64"}
for _t in g.GGML_TYPES:
    BALLAST_DTYPE.setdefault(_t, _t.lower())


# ---------------------------------------------------------------- llama.gguf

def small_f16(rng, n, scale):
    """f16 scales of a plausible size (a model's, not random_blocks' full range)."""
    return (rng.standard_normal(n) * scale).astype(np.float16)


def model_matrix(rng, ggml_type, k, n):
    """A k x n weight (ne = [k, n]) of ggml_type with small scales."""
    nb = k * n // 256 if ggml_type.endswith("_K") else k * n // 32
    if ggml_type == "Q4_0":
        raw = g.pack_q4_0(small_f16(rng, nb, 0.01), rng.integers(0, 16, (nb, 32)))
    elif ggml_type == "Q4_K":
        raw = g.pack_q4_k(np.abs(small_f16(rng, nb, 0.002)), np.abs(small_f16(rng, nb, 0.002)),
                          rng.integers(0, 64, (nb, 8)), rng.integers(0, 64, (nb, 8)), rng.integers(0, 16, (nb, 256)))
    elif ggml_type == "Q6_K":
        raw = g.pack_q6_k(np.abs(small_f16(rng, nb, 0.0005)), rng.integers(-128, 128, (nb, 16)),
                          rng.integers(0, 64, (nb, 256)))
    else:
        raise ValueError(ggml_type)
    return ggml_type, [k, n], raw


def llama_model(rng):
    n_embd, n_ff, n_kv, n_vocab, n_layer = 256, 512, 128, 64, 2
    tokens = ["<unk>", "<s>", "</s>"] + ["\u2581tok%d" % i for i in range(n_vocab - 4)] + ["\u00e9t\u00e9"]
    metadata = [
        ("general.architecture", "string", "llama"),
        ("general.name", "string", "ballast tiny llama"),
        ("llama.block_count", "uint32", n_layer),
        ("llama.context_length", "uint32", 2048),
        ("llama.embedding_length", "uint32", n_embd),
        ("llama.feed_forward_length", "uint32", n_ff),
        ("llama.attention.head_count", "uint32", 4),
        ("llama.attention.head_count_kv", "uint32", 2),
        ("llama.attention.layer_norm_rms_epsilon", "float32", 1e-5),
        ("llama.rope.freq_base", "float32", 10000.0),
        ("tokenizer.ggml.model", "string", "llama"),
        ("tokenizer.ggml.tokens", ("array", "string"), tokens),
        ("tokenizer.ggml.scores", ("array", "float32"), [float(np.float32(-i / 7.0)) for i in range(n_vocab)]),
        ("tokenizer.ggml.token_type", ("array", "int32"), [2, 3, 3] + [1] * (n_vocab - 3)),
        ("tokenizer.ggml.bos_token_id", "uint32", 1),
        ("tokenizer.ggml.eos_token_id", "uint32", 2),
    ]
    norm = lambda: ("F32", [n_embd], g.pack_f32(1.0 + 0.1 * rng.standard_normal(n_embd)))  # noqa: E731
    tensors = [("token_embd.weight", "F16", [n_embd, n_vocab],
                g.pack_f16(0.02 * rng.standard_normal(n_embd * n_vocab)))]
    for i in range(n_layer):
        blk = "blk.%d." % i
        for name, t in (("attn_norm.weight", norm()), ("attn_q.weight", model_matrix(rng, "Q4_K", n_embd, n_embd)),
                        ("attn_k.weight", model_matrix(rng, "Q4_0", n_embd, n_kv)),
                        ("attn_v.weight", model_matrix(rng, "Q6_K", n_embd, n_kv)),
                        ("attn_output.weight", model_matrix(rng, "Q4_0", n_embd, n_embd)),
                        ("ffn_norm.weight", norm()),
                        ("ffn_gate.weight", model_matrix(rng, "Q4_K", n_embd, n_ff)),
                        ("ffn_up.weight", model_matrix(rng, "Q4_0", n_embd, n_ff)),
                        ("ffn_down.weight", model_matrix(rng, "Q6_K", n_ff, n_embd))):
            tensors.append((blk + name,) + t)
    tensors.append(("output_norm.weight",) + norm())
    tensors.append(("output.weight",) + model_matrix(rng, "Q6_K", n_embd, n_vocab))
    return metadata, tensors


# ---------------------------------------------------------------- types.gguf

def type_tensors(rng):
    tensors = []
    for t in g.GGML_TYPES:
        _, blk, _ = g.GGML_TYPES[t]
        if blk == 1:
            # Element types: 64 elements, 16 x 4. Random bytes for the
            # integer and F64 types (every bit pattern is a value of theirs).
            raw = g.random_blocks(t, 64, rng)
            tensors.append(("t.%s" % t, t, [16, 4], raw))
        else:
            # 16 blocks: 4 per row, 4 rows (random bytes for the types
            # gguf_io does not dequantize).
            tensors.append(("t.%s" % t, t, [blk * 4, 4], g.random_blocks(t, 16, rng)))
    # Other ranks: 1, 3 and 4 dims.
    tensors.append(("rank1.f32", "F32", [5], g.random_blocks("F32", 5, rng)))
    tensors.append(("rank3.q8_0", "Q8_0", [32, 3, 2], g.random_blocks("Q8_0", 6, rng)))
    tensors.append(("rank4.f16", "F16", [2, 3, 2, 2], g.random_blocks("F16", 24, rng)))
    return tensors


def type_metadata():
    return [
        ("general.architecture", "string", "ballast-types"),
        ("test.uint8", "uint8", 255), ("test.int8", "int8", -128),
        ("test.uint16", "uint16", 65535), ("test.int16", "int16", -32768),
        ("test.uint32", "uint32", 4294967295), ("test.int32", "int32", -2147483648),
        ("test.float32", "float32", 0.1), ("test.float32_subnormal", "float32", float(np.float32(1e-45))),
        ("test.float32_negative_zero", "float32", -0.0), ("test.float32_max", "float32",
                                                          float(np.finfo(np.float32).max)),
        ("test.bool_true", "bool", True), ("test.bool_false", "bool", False),
        ("test.string", "string", "gr\u00fc\u00dfe, \u65e5\u672c, \U0001F600"),
        ("test.string_empty", "string", ""),
        ("test.uint64", "uint64", 2 ** 64 - 1), ("test.int64", "int64", -2 ** 63),
        ("test.float64", "float64", 0.1), ("test.float64_tiny", "float64", 5e-324),
        ("test.array_empty", ("array", "float32"), []),
        ("test.array_nested", ("array", ("array", "int16")), [[1, -2, 3], [], [32767, -32768]]),
        ("test.array_nested_strings", ("array", ("array", "string")), [["a", "b\u00e9"], ["c"]]),
        ("test.array_bool", ("array", "bool"), [True, False, True]),
        ("test.array_uint64", ("array", "uint64"), [0, 2 ** 63, 2 ** 64 - 1]),
        ("test.array_int8", ("array", "int8"), list(range(-128, 128))),
        ("test.array_float64", ("array", "float64"), [1.5, -2.25, 1e300]),
        ("test.array_string", ("array", "string"), ["", "x", "\u00fc"]),
    ]


# ---------------------------------------------------------------- expected views

def value_text(value_type, value):
    """The text ballast prints for a scalar value (arrays: "")."""
    if isinstance(value_type, tuple):
        return ""
    if value_type == "bool":
        return "true" if value else "false"
    if value_type == "float32":
        return str(np.float32(value))  # numpy prints the shortest text that reads back
    if value_type == "float64":
        return repr(float(value))
    if value_type == "string":
        return value
    return str(int(value))


def jsonable_type(value_type):
    return [value_type[0], jsonable_type(value_type[1])] if isinstance(value_type, tuple) else value_type


def expected_view(path, out_dir):
    """The spec reader's view of `path`, written beside it as .expected.json,
    with the float32 values of each tensor dequant() knows beside it too."""
    r = g.read_gguf(path)
    with open(path, "rb") as f:
        data = f.read()
    metadata = []
    for key, (t, v) in r["metadata"].items():
        metadata.append({"key": key, "type": g.type_label(t), "value_type": jsonable_type(t),
                         "count": len(v) if isinstance(t, tuple) else 1, "value": v, "text": value_text(t, v)})
    tensors = []
    for t in r["tensors"]:
        raw = data[t["abs_offset"]:t["abs_offset"] + t["length"]]
        values = None
        if t["type"] in g.DEQUANT_TYPES:
            n = 1
            for d in t["ne"]:
                n *= d
            values = "%s.%s.f32.npy" % (os.path.basename(path), t["name"])
            with np.errstate(over="ignore", under="ignore"):
                np.save(os.path.join(os.path.dirname(path), values), g.dequant(t["type"], raw, n))
        tensors.append({"name": t["name"], "type": t["type"], "type_id": t["type_id"], "ne": t["ne"],
                        "dtype": BALLAST_DTYPE[t["type"]], "dims": list(reversed(t["ne"])), "offset": t["offset"],
                        "abs_offset": t["abs_offset"], "length": t["length"],
                        "sha256": hashlib.sha256(raw).hexdigest(), "values": values})
    referenced = sum(t["length"] for t in r["tensors"])
    view = {"file": os.path.relpath(path, out_dir), "version": r["version"], "alignment": r["alignment"],
            "tensor_count": r["tensor_count"], "kv_count": r["kv_count"], "header_bytes": r["header_bytes"],
            "data_start": r["data_start"], "file_size": r["file_size"], "referenced_bytes": referenced,
            "unreferenced_bytes": r["file_size"] - r["header_bytes"] - referenced,
            "metadata": metadata, "tensors": tensors}
    with open(path + ".expected.json", "w") as f:
        json.dump(view, f, indent=1, ensure_ascii=False)
    return view


# The models written, each the path it is opened by and its files, relative to OUT_DIR.
SPLIT = ["split/model-%05d-of-00003.gguf" % i for i in (1, 2, 3)]
MODELS = [("llama.gguf", ["llama.gguf"]), ("types.gguf", ["types.gguf"]), ("v2.gguf", ["v2.gguf"]),
          ("align64.gguf", ["align64.gguf"]), ("gap.gguf", ["gap.gguf"]), (SPLIT[0], SPLIT)]


def main(argv):
    ap = argparse.ArgumentParser(prog=os.path.basename(argv[0]), description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("outdir", help="the folder to write into (made if missing)")
    args = ap.parse_args(argv[1:])  # --help, and a usage error (exit 2) for anything else
    out = args.outdir
    os.makedirs(out, exist_ok=True)
    rng = np.random.default_rng(20261202)
    metadata, tensors = llama_model(rng)
    g.write_gguf(os.path.join(out, "llama.gguf"), metadata, tensors)
    g.write_gguf(os.path.join(out, "types.gguf"), type_metadata(), type_tensors(rng))
    few = [("a.weight", "F32", [3, 5], g.random_blocks("F32", 15, rng)),
           ("b.weight", "Q4_K", [256, 2], g.random_blocks("Q4_K", 2, rng)),
           ("c.weight", "Q8_0", [32, 3], g.random_blocks("Q8_0", 3, rng)),
           ("d.weight", "F16", [7], g.random_blocks("F16", 7, rng))]
    small = [("general.architecture", "string", "llama"), ("general.name", "string", "ballast")]
    g.write_gguf(os.path.join(out, "v2.gguf"), small, few, version=2)
    # Every tensor here is a length that is no multiple of 64: each is followed by padding.
    g.write_gguf(os.path.join(out, "align64.gguf"), small, few, alignment=64)
    g.write_gguf(os.path.join(out, "gap.gguf"), small, few, gaps={"c.weight": 96})
    parts = [tensors[:1], tensors[1:12], tensors[12:]]
    g.write_gguf_split(os.path.join(out, "split"), "model", parts, metadata)
    for _, files in MODELS:
        for rel in files:
            expected_view(os.path.join(out, rel), out)
    with open(os.path.join(out, "models.json"), "w") as f:
        json.dump([{"model": m, "files": files} for m, files in MODELS], f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
