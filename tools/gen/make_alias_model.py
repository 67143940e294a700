#!/usr/bin/python3
"""make_alias_model.py OUTDIR [--unnamed]: weights that share bytes, the cases a memo keyed
by the source pointer alone gets wrong.

Writes OUTDIR/alias.onnx and OUTDIR/alias.weights with
  tied.a  float32 [16, 48]  and  tied.b  float32 [48, 16]
      two initializers on ONE external range (as exporters dedupe identical
      blobs, or tie an embedding to its transposed head), each consumed by
      its own MatMul: their transposes differ in shape and layout;
  shared.qweight  one MatMulNBits B consumed by two nodes, nbits.a (float32
      scales, packed zero points) and nbits.b (other float32 scales, no zero
      points): their dequantised and repacked results differ;
  same.c  and  same.d  float32 [32, 32] on one range, each consumed by a
      MatMul with the same parameters: one value, rightly shared.

--unnamed leaves every node without a name (as onnx.helper and many
exporters do): the two MatMulNBits consumers of shared.qweight then differ
only by their place in the graph.
"""

import argparse
import os
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import extdata  # noqa: E402


def main(argv):
    ap = argparse.ArgumentParser(prog=os.path.basename(argv[0]), description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("outdir", help="the folder to write into (made if missing)")
    ap.add_argument("--unnamed", action="store_true", help="leave every node without a name")
    args = ap.parse_args(argv[1:])  # --help, and a usage error (exit 2) for anything else
    unnamed = args.unnamed
    outdir = os.path.abspath(args.outdir)
    os.makedirs(outdir, exist_ok=True)
    rng = np.random.default_rng(7)
    blob = extdata.Blob(os.path.join(outdir, "alias.weights"), "wb")
    inits, nodes = [], []

    def place(name, arr, at=None):
        t = numpy_helper.from_array(np.ascontiguousarray(arr), name)
        if at is None:
            blob.pad_to(64)
            at = blob.append(np.ascontiguousarray(arr).tobytes())
        extdata.set_external(t, "alias.weights", at[0], at[1])
        inits.append(t)
        return at

    tied = (rng.standard_normal(16 * 48) * 0.1).astype(np.float32)
    at = place("tied.a", tied.reshape(16, 48))
    place("tied.b", tied.reshape(48, 16), at)
    nodes.append(helper.make_node("MatMul", ["X16", "tied.a"], ["ya"], name="matmul.tied_a"))
    nodes.append(helper.make_node("MatMul", ["X48", "tied.b"], ["yb"], name="matmul.tied_b"))

    same = (rng.standard_normal(32 * 32) * 0.1).astype(np.float32).reshape(32, 32)
    at = place("same.c", same)
    place("same.d", same, at)
    nodes.append(helper.make_node("MatMul", ["X32", "same.c"], ["yc"], name="matmul.same_c"))
    nodes.append(helper.make_node("MatMul", ["X32", "same.d"], ["yd"], name="matmul.same_d"))

    k, n, block = 96, 40, 32
    kb = k // block
    place("shared.qweight", rng.integers(0, 256, size=(n, kb, block // 2), dtype=np.uint8))
    place("scales.a", rng.uniform(0.01, 0.05, size=n * kb).astype(np.float32))
    place("scales.b", rng.uniform(0.10, 0.50, size=n * kb).astype(np.float32))
    place("zero_points.a", rng.integers(0, 256, size=n * ((kb + 1) // 2), dtype=np.uint8))
    nodes.append(helper.make_node("MatMulNBits", ["X96", "shared.qweight", "scales.a", "zero_points.a"], ["yq_a"],
                                  name="nbits.a", domain="com.microsoft", K=k, N=n, bits=4, block_size=block))
    nodes.append(helper.make_node("MatMulNBits", ["X96", "shared.qweight", "scales.b"], ["yq_b"],
                                  name="nbits.b", domain="com.microsoft", K=k, N=n, bits=4, block_size=block))
    blob.close()

    if unnamed:
        extdata.strip_node_names(nodes)
    f = TensorProto.FLOAT
    graph = helper.make_graph(
        nodes, "ballast_alias",
        [helper.make_tensor_value_info(x, f, [1, d]) for x, d in (("X16", 16), ("X48", 48), ("X32", 32), ("X96", 96))],
        [helper.make_tensor_value_info(y, f, None) for y in ("ya", "yb", "yc", "yd", "yq_a", "yq_b")],
        initializer=inits)
    model = helper.make_model(graph, producer_name="ballast make_alias_model.py",
                              opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)])
    model.ir_version = 8
    onnx.save_model(model, os.path.join(outdir, "alias.onnx"))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
