#!/usr/bin/python3
"""Writes the seeds of fuzz_open_model (tests/fuzz/corpus_open_model): small
whole models in every format open_model reads, shaped so that planning
finds work and derivation runs every kind:
  - GGUF with llama names over every block type the kinds read (random
    codes and scales, both signs), plain float layers and a float head, and
    one IQ type (a listed skip);
  - safetensors with Hugging Face names in float32, float16 and bfloat16,
    with a head and with a tied embedding;
  - sharded safetensors indexes naming the two shards fuzz_open_model.cpp
    writes beside the input (shard_a, shard_b);
  - ONNX: MatMul, Gemm transB, a Transpose in front of a MatMul and
    MatMulNBits with each zero-point form, nodes named and unnamed.
Each seed starts with the flag byte fuzz_open_model.cpp reads (0: default
limits, the vector kernels, derive_weights; variants set the portable
kernels and each Residency mode). Deterministic. Needs numpy and python3-onnx:
/usr/bin/python3 make_open_model_seeds.py
"""
import io
import os
import sys

import numpy as np
from onnx import TensorProto, helper, numpy_helper

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "tools", "gen"))
import gguf_io  # noqa: E402
import safetensors_io  # noqa: E402
from make_sample_model import quantize_nbits  # noqa: E402

OUT = os.path.join(HERE, "corpus_open_model")


def file_bytes(write, *args, **kwargs):
    """What write(path, ...) writes, as bytes (through a scratch file)."""
    path = os.path.join(OUT, ".scratch")
    write(path, *args, **kwargs)
    with open(path, "rb") as f:
        data = f.read()
    os.remove(path)
    return data


def gguf_seeds(rng):
    blocks = ("Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0", "Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K", "Q8_K", "BF16")
    layers = []
    for i, t in enumerate(blocks):
        _, per_block, _ = gguf_io.GGML_TYPES[t]
        ne = [per_block if per_block > 1 else 16, 2]
        n_blocks = 2 if per_block > 1 else 32
        layers.append(("blk.%d.attn_q.weight" % i, t, ne, gguf_io.random_blocks(t, n_blocks, rng)))
    plain = [
        ("blk.0.ffn_down.weight", "F32", [8, 4], gguf_io.random_blocks("F32", 32, rng)),
        ("blk.0.ffn_up.weight", "F16", [4, 8], gguf_io.random_blocks("F16", 32, rng)),
        ("blk.0.ffn_gate_exps.weight", "Q4_0", [32, 2, 2], gguf_io.random_blocks("Q4_0", 4, rng)),
        ("output.weight", "F32", [8, 4], gguf_io.random_blocks("F32", 32, rng)),
        ("blk.0.attn_norm.weight", "F32", [8], gguf_io.random_blocks("F32", 8, rng)),
    ]
    meta = [("general.architecture", "string", "llama")]
    return {
        "gguf_blocks": file_bytes(gguf_io.write_gguf, meta, layers),
        "gguf_plain": file_bytes(gguf_io.write_gguf, meta, plain),
        "gguf_tied_iq": file_bytes(gguf_io.write_gguf, meta, [
            ("token_embd.weight", "F16", [8, 4], gguf_io.random_blocks("F16", 32, rng)),
            ("blk.0.attn_k.weight", "IQ2_XXS", [256, 1], gguf_io.random_blocks("IQ2_XXS", 1, rng)),
        ]),
    }


def split_part1():
    """Part 1 of 2 of a GGUF split set (flag 0x40): fuzz_open_model.cpp
    writes part 2, one Q4_0 tensor blk.1.attn_q.weight, split.tensors.count 2."""
    rng = np.random.default_rng(2)
    meta = [("general.architecture", "string", "llama"), ("split.no", "uint16", 0), ("split.count", "uint16", 2),
            ("split.tensors.count", "int32", 2)]
    return file_bytes(gguf_io.write_gguf, meta,
                      [("blk.0.attn_q.weight", "Q4_K", [256, 2], gguf_io.random_blocks("Q4_K", 2, rng))])


def hf(rng, dtype):
    a = rng.standard_normal((8, 4)).astype(np.float32)
    return a.astype(dtype) if dtype != "bf16" else ("BF16", (a.view(np.uint32) >> 16).astype("<u2").tobytes())


def st_tensor(name, value, shape=(8, 4)):
    if isinstance(value, tuple):
        return (name, value[0], list(shape), value[1])
    return (name, value)


def safetensors_seeds(rng):
    layers = [st_tensor("model.layers.0.self_attn.q_proj.weight", hf(rng, np.float32)),
              st_tensor("model.layers.0.self_attn.k_proj.weight", hf(rng, "bf16")),
              st_tensor("model.layers.0.self_attn.v_proj.weight", hf(rng, np.float16)),
              st_tensor("model.layers.0.mlp.up_proj.weight", hf(rng, np.float32)),
              st_tensor("model.layers.0.input_layernorm.weight", rng.standard_normal(4).astype(np.float32))]
    return {
        "st_head": file_bytes(safetensors_io.write_safetensors,
                              layers + [st_tensor("lm_head.weight", hf(rng, np.float16))], {"format": "pt"}),
        "st_bf16_head": file_bytes(safetensors_io.write_safetensors,
                                   [st_tensor("lm_head.weight", hf(rng, "bf16"))]),
        "st_tied": file_bytes(safetensors_io.write_safetensors,
                              [st_tensor("model.embed_tokens.weight", hf(rng, np.float32)),
                               st_tensor("model.layers.0.mlp.down_proj.weight", hf(rng, "bf16"))]),
    }


def index_seeds():
    # The shards are fuzz_open_model.cpp's own (it writes them beside the input).
    a, b = "shard_a.safetensors", "shard_b.safetensors"
    return {
        "index_two": ('{"metadata":{"total_size":512},"weight_map":{'
                      '"model.layers.0.self_attn.q_proj.weight":"%s","lm_head.weight":"%s"}}' % (a, b)).encode(),
        "index_one": ('{"weight_map":{"model.layers.1.mlp.gate_proj.weight":"%s"}}' % b).encode(),
    }


def onnx_seeds(rng):
    w = (rng.standard_normal((8, 4)) * 0.5).astype(np.float32)
    w16 = (rng.standard_normal((4, 8)) * 0.5).astype(np.float16)
    g = (rng.standard_normal((4, 8)) * 0.5).astype(np.float32)
    inits = [numpy_helper.from_array(w, "W"), numpy_helper.from_array(w16, "W16"), numpy_helper.from_array(g, "G")]
    nodes = [
        helper.make_node("MatMul", ["X", "W"], ["h0"], name="mm"),
        helper.make_node("MatMul", ["X8", "W16"], ["h1"]),
        helper.make_node("Gemm", ["X", "G"], ["h2"], transB=1),
        helper.make_node("Transpose", ["W"], ["Wt"], perm=[1, 0]),
        helper.make_node("MatMul", ["X", "Wt"], ["h3"]),
    ]
    for i, (form, block) in enumerate([("packed", 16), ("float", 32), ("none", 16)]):
        q, _ = quantize_nbits((rng.standard_normal((8, 40)) * 0.1).astype(np.float32), block, form)
        names = ["X40", "B%d" % i, "S%d" % i] + (["Z%d" % i] if "zero_points" in q else [])
        inits += [numpy_helper.from_array(q["B"], names[1]), numpy_helper.from_array(q["scales"], names[2])]
        if "zero_points" in q:
            inits.append(numpy_helper.from_array(q["zero_points"], names[3]))
        nodes.append(helper.make_node("MatMulNBits", names, ["q%d" % i], name=("nbits%d" % i) if i else "",
                                      domain="com.microsoft", K=40, N=8, bits=4, block_size=block))
    # The same B under two scales: two entries, one source.
    nodes.append(helper.make_node("MatMulNBits", ["X40", "B2", "S0"], ["q3"], domain="com.microsoft", K=40, N=8,
                                  bits=4, block_size=16))
    graph = helper.make_graph(nodes, "g", [], [], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)])
    out = io.BytesIO()
    out.write(model.SerializeToString())
    return {"onnx_kinds": out.getvalue()}


def main():
    os.makedirs(OUT, exist_ok=True)
    rng = np.random.default_rng(1207)
    seeds = {}
    seeds.update(gguf_seeds(rng))
    seeds.update(safetensors_seeds(rng))
    seeds.update(index_seeds())
    seeds.update(onnx_seeds(rng))
    seeds["gguf_split_part1"] = split_part1()
    for name, data in seeds.items():
        if name == "gguf_split_part1":
            continue  # only as a split part (its variants below)
        with open(os.path.join(OUT, name), "wb") as f:
            f.write(b"\0" + data)
    # The portable kernels on one thread over the block types too, and each
    # Residency mode (flag bits 4-5: paged, paged at a quarter of its
    # budget, zero_copy) over a model of each format.
    variants = {"gguf_blocks_portable": (0x04, "gguf_blocks"), "gguf_blocks_paged": (0x10, "gguf_blocks"),
                "onnx_kinds_paged_quarter": (0x20, "onnx_kinds"), "gguf_plain_paged_quarter": (0x20, "gguf_plain"),
                "st_head_zero_copy": (0x30, "st_head"), "index_two_paged": (0x10, "index_two"),
                "gguf_split_part1": (0x40, "gguf_split_part1"), "gguf_split_part1_paged": (0x50, "gguf_split_part1")}
    for name, (flags, seed) in variants.items():
        with open(os.path.join(OUT, name), "wb") as f:
            f.write(bytes([flags]) + seeds[seed])


if __name__ == "__main__":
    main()
