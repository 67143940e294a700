#!/usr/bin/python3
"""make_llm_model.py OUTDIR [--layers N] [--hidden H] [--ffn F] [--vocab V] [--block B] [--sparse] [--unnamed]
                         [--orphaned-prefix BYTES]

A model shaped like a decoder LLM's weights, for derive comparisons between
backends, soak tests and benchmarks. Writes OUTDIR/llm.onnx and
OUTDIR/llm.weights. Per layer:

  attention  q, k, v, o   MatMul    float16 [H, H]
  mlp        gate, up     MatMulNBits  K=H N=F, float16 scales, packed uint8 zero points
             down         MatMulNBits  K=F N=H, float32 scales, no zero points
and once: lm_head MatMul float32 [H, V].

The graph computes nothing sensible (activations are chained only so that
every node has an input); weight bytes are random but deterministic, with
scales in a moderate range so every derived value is a normal number.
Default size: 8 layers, H=1024, F=2816, V=8192: about 120 MiB of weights.

--sparse leaves the large tensors (projections, packed int4 weights,
lm_head) as holes in a sparse file: zeros that take no disk and no time to
write, so a model of several GiB (the residency benchmark's) is generated
in seconds. Scales and zero points are still written.

--unnamed leaves every node without a name (as onnx.helper and many
exporters do); the weights are the same.

--orphaned-prefix BYTES starts llm.weights with BYTES of random data no
weight points at (a re-export that appended to the old blob), written for
real: a cold load must read none of it (tools/bench/cold_start.py).

--safetensors also writes OUTDIR/llm.safetensors: the same weights (names,
types, shapes, bytes) as one safetensors file, so a derivation planned by
the same rules gives the same bytes from either format.
"""

import argparse
import os
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import extdata  # noqa: E402
import safetensors_io  # noqa: E402

SAFETENSORS_DTYPE = {np.dtype(np.float16): "F16", np.dtype(np.float32): "F32", np.dtype(np.uint8): "U8"}


def nbits(rng, k, n, block, scale_type, zero_points, sparse=False):
    k_blocks = -(-k // block)
    shape = (n, k_blocks, block // 2)
    tensors = {
        "B_shape": shape,
        "B": None if sparse else rng.integers(0, 256, size=shape, dtype=np.uint8),
        "scales": rng.uniform(0.001, 0.02, size=n * k_blocks).astype(scale_type),
    }
    if zero_points:
        per_row = -(-k_blocks // 2)
        tensors["zero_points"] = rng.integers(0, 256, size=n * per_row, dtype=np.uint8)
    return tensors


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("outdir", help="the folder to write into (made if missing)")
    ap.add_argument("--layers", type=int, default=8)
    ap.add_argument("--hidden", type=int, default=1024)
    ap.add_argument("--ffn", type=int, default=2816)
    ap.add_argument("--vocab", type=int, default=8192)
    ap.add_argument("--block", type=int, default=32)
    ap.add_argument("--sparse", action="store_true", help="large tensors as holes (zeros) in a sparse file")
    ap.add_argument("--unnamed", action="store_true", help="leave every node without a name")
    ap.add_argument("--safetensors", action="store_true", help="also write the weights as llm.safetensors")
    ap.add_argument("--orphaned-prefix", type=int, default=0, help="bytes of dead data before the weights")
    args = ap.parse_args()
    h, f, v, block = args.hidden, args.ffn, args.vocab, args.block

    os.makedirs(args.outdir, exist_ok=True)
    rng = np.random.default_rng(20261130)
    blob = extdata.Blob(os.path.join(args.outdir, "llm.weights"), "wb")
    prefix_rng = np.random.default_rng(7)
    for start in range(0, args.orphaned_prefix, 64 << 20):  # in pieces: the prefix may be larger than memory wants
        blob.append(prefix_rng.bytes(min(64 << 20, args.orphaned_prefix - start)))
    initializers, nodes = [], []
    tensors = []  # the same weights, for --safetensors

    def add(name, arr):
        tensors.append((name, np.ascontiguousarray(arr)))
        t = numpy_helper.from_array(np.ascontiguousarray(arr), name)
        blob.pad_to(64)  # as exporters align: every weight is read in place
        offset, length = blob.append(np.ascontiguousarray(arr).tobytes())
        extdata.set_external(t, "llm.weights", offset, length)
        initializers.append(t)
        return name

    def add_large(name, shape, dtype, make):
        if not args.sparse:
            return add(name, make())
        tensors.append((name, SAFETENSORS_DTYPE[np.dtype(dtype)], list(shape), int(np.prod(shape)) * np.dtype(dtype).itemsize))
        t = onnx.TensorProto()
        t.name = name
        t.data_type = {np.dtype(np.float16): TensorProto.FLOAT16, np.dtype(np.float32): TensorProto.FLOAT,
                       np.dtype(np.uint8): TensorProto.UINT8}[np.dtype(dtype)]
        t.dims.extend(shape)
        blob.pad_to(64)
        offset, length = blob.hole(int(np.prod(shape)) * np.dtype(dtype).itemsize)
        extdata.set_external(t, "llm.weights", offset, length)
        initializers.append(t)
        return name

    x = "X"
    for layer in range(args.layers):
        p = "layers.%d." % layer
        x16 = p + "x_f16"
        nodes.append(helper.make_node("Cast", [x], [x16], name=p + "cast", to=TensorProto.FLOAT16))
        acc = None
        for proj in ("q", "k", "v", "o"):
            w = add_large(p + "attn.%s_proj.weight" % proj, (h, h), np.float16,
                          lambda: (rng.standard_normal((h, h)) * 0.02).astype(np.float16))
            out = p + proj
            nodes.append(helper.make_node("MatMul", [x16, w], [out], name=p + "attn.%s_proj" % proj))
            if acc is None:
                acc = out
            else:
                nodes.append(helper.make_node("Add", [acc, out], [out + "_sum"], name=p + "attn.add_" + proj))
                acc = out + "_sum"
        attn = p + "attn_out"
        nodes.append(helper.make_node("Cast", [acc], [attn], name=p + "attn.cast", to=TensorProto.FLOAT))
        mlp_in = attn
        for proj, (k, n, scale_type, zp) in (("gate", (h, f, np.float16, True)), ("up", (h, f, np.float16, True))):
            q = nbits(rng, k, n, block, scale_type, zp, args.sparse)
            inputs = [mlp_in, add_large(p + "mlp.%s_proj.qweight" % proj, q["B_shape"], np.uint8, lambda: q["B"]),
                      add(p + "mlp.%s_proj.scales" % proj, q["scales"])]
            if "zero_points" in q:
                inputs.append(add(p + "mlp.%s_proj.zero_points" % proj, q["zero_points"]))
            nodes.append(helper.make_node("MatMulNBits", inputs, [p + proj], name=p + "mlp.%s_proj" % proj,
                                          domain="com.microsoft", K=k, N=n, bits=4, block_size=block))
        nodes.append(helper.make_node("Mul", [p + "gate", p + "up"], [p + "gated"], name=p + "mlp.mul"))
        q = nbits(rng, f, h, block, np.float32, False, args.sparse)
        out = p + "out"
        nodes.append(helper.make_node(
            "MatMulNBits", [p + "gated", add_large(p + "mlp.down_proj.qweight", q["B_shape"], np.uint8, lambda: q["B"]),
                            add(p + "mlp.down_proj.scales", q["scales"])],
            [out], name=p + "mlp.down_proj", domain="com.microsoft", K=f, N=h, bits=4, block_size=block))
        x = out
    head = add_large("lm_head.weight", (h, v), np.float32,
                     lambda: (rng.standard_normal((h, v)) * 0.02).astype(np.float32))
    nodes.append(helper.make_node("MatMul", [x, head], ["logits"], name="lm_head"))
    blob.close()

    if args.unnamed:
        extdata.strip_node_names(nodes)
    graph = helper.make_graph(nodes, "ballast_llm", [helper.make_tensor_value_info("X", TensorProto.FLOAT, [1, h])],
                              [helper.make_tensor_value_info("logits", TensorProto.FLOAT, [1, v])],
                              initializer=initializers)
    model = helper.make_model(graph, producer_name="ballast make_llm_model.py",
                              opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)])
    model.ir_version = 8
    onnx.save_model(model, os.path.join(args.outdir, "llm.onnx"))
    if args.safetensors:
        safetensors_io.write_safetensors(os.path.join(args.outdir, "llm.safetensors"), tensors,
                                         {"producer": "ballast make_llm_model.py"})
    size = os.path.getsize(os.path.join(args.outdir, "llm.weights"))
    extdata.log("llm model: %s/llm.onnx, %d layers, %d bytes of weights" % (args.outdir, args.layers, size))
    return 0


if __name__ == "__main__":
    sys.exit(main())
