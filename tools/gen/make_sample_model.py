#!/usr/bin/python3
"""make_sample_model.py OUTDIR [--unnamed]: the demo model of `tools/dev demo`.

Writes OUTDIR/sample.onnx and OUTDIR/sample.weights: a small network
(X[1,256] -> 256) with

  layer 0  MatMul       float32 weight [256, 512], Relu
  layer 1  MatMul       float16 weight [512, 384] (Cast around it)
  layer 2  Gemm transB  float32 weight [320, 384] + bias [320], Relu
  layer 3  MatMulNBits  K=320 N=288 block 64, packed uint8 zero points
  layer 4  MatMulNBits  K=288 N=272 block 64 (K not a multiple), float zero points
  layer 5  MatMulNBits  K=272 N=256 block 128 (K not a multiple), no zero points

(com.microsoft MatMulNBits, bits=4: B uint8 [N, k_blocks, block_size/2],
scales [N * k_blocks], zero_points either uint8 [N * ceil(k_blocks*4/8)]
packed low nibble first or scales' type [N * k_blocks].)

The external data file reproduces a re-export that appended fresh tensors to
an existing blob without truncating it: the first export's bytes stay in the
file as an orphaned prefix that nothing references. The exact dead byte count
goes to stderr. Deterministic and idempotent; stdout stays empty.

--unnamed leaves every node without a name (as onnx.helper and many
exporters do); the weights and their bytes are the same.
"""

import argparse
import os
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import extdata  # noqa: E402

INLINE_LIMIT = 1024  # smaller tensors stay inline, as onnx's own exporter does
BITS = 4


def quantize_nbits(w, block_size, zp_form):
    """MatMulNBits tensors for a float weight w[N, K] (y = x @ w.T)."""
    n, k = w.shape
    k_blocks = -(-k // block_size)
    padded = np.zeros((n, k_blocks * block_size), dtype=np.float32)
    padded[:, :k] = w
    blocks = padded.reshape(n, k_blocks, block_size)
    lo, hi = blocks.min(axis=2), blocks.max(axis=2)
    if zp_form == "none":
        # Symmetric: the implied zero point is 2^(bits-1).
        scale = np.maximum(np.abs(lo), np.abs(hi)) / 7.0
        scale[scale == 0] = 1.0
        zp = np.full((n, k_blocks), 8, dtype=np.int32)
    else:
        scale = (hi - lo) / 15.0
        scale[scale == 0] = 1.0
        zp = np.clip(np.round(-lo / scale), 0, 15).astype(np.int32)
    codes = np.clip(np.round(blocks / scale[:, :, None]) + zp[:, :, None], 0, 15).astype(np.uint8)
    packed = (codes[:, :, 0::2] | (codes[:, :, 1::2] << 4)).astype(np.uint8)  # low nibble first
    tensors = {"B": packed, "scales": scale.astype(np.float32).reshape(-1)}
    if zp_form == "packed":
        per_row = -(-k_blocks * BITS // 8)
        zrow = np.zeros((n, per_row * 2), dtype=np.uint8)
        zrow[:, :k_blocks] = zp
        tensors["zero_points"] = (zrow[:, 0::2] | (zrow[:, 1::2] << 4)).astype(np.uint8).reshape(-1)
    elif zp_form == "float":
        tensors["zero_points"] = zp.astype(np.float32).reshape(-1)
    return tensors, k_blocks


def build_weights(rng):
    """(name, ndarray) in file order, plus the nodes that consume them."""
    weights, nodes = [], []

    def add(name, arr):
        weights.append((name, arr))
        return name

    w0 = add("layer0.weight", (rng.standard_normal((256, 512)) * 0.06).astype(np.float32))
    nodes.append(helper.make_node("MatMul", ["X", w0], ["h0_mm"], name="layer0.matmul"))
    nodes.append(helper.make_node("Relu", ["h0_mm"], ["h0"], name="layer0.relu"))

    w1 = add("layer1.weight", (rng.standard_normal((512, 384)) * 0.04).astype(np.float16))
    nodes.append(helper.make_node("Cast", ["h0"], ["h0_f16"], name="layer1.cast_in", to=TensorProto.FLOAT16))
    nodes.append(helper.make_node("MatMul", ["h0_f16", w1], ["h1_f16"], name="layer1.matmul"))
    nodes.append(helper.make_node("Cast", ["h1_f16"], ["h1"], name="layer1.cast_out", to=TensorProto.FLOAT))

    w2 = add("layer2.weight", (rng.standard_normal((320, 384)) * 0.05).astype(np.float32))
    b2 = add("layer2.bias", (rng.standard_normal(320) * 0.01).astype(np.float32))
    nodes.append(helper.make_node("Gemm", ["h1", w2, b2], ["h2_mm"], name="layer2.gemm", transB=1))
    nodes.append(helper.make_node("Relu", ["h2_mm"], ["h2"], name="layer2.relu"))

    x = "h2"
    for i, (k, n, block, zp_form) in enumerate([(320, 288, 64, "packed"), (288, 272, 64, "float"),
                                                 (272, 256, 128, "none")], start=3):
        w = (rng.standard_normal((n, k)) * 0.05).astype(np.float32)
        q, _ = quantize_nbits(w, block, zp_form)
        inputs = [x, add("layer%d.qweight" % i, q["B"]), add("layer%d.scales" % i, q["scales"])]
        if "zero_points" in q:
            inputs.append(add("layer%d.zero_points" % i, q["zero_points"]))
        out = "h%d" % i if i < 5 else "Y"
        nodes.append(helper.make_node("MatMulNBits", inputs, [out], name="layer%d.matmul_nbits" % i,
                                      domain="com.microsoft", K=k, N=n, bits=BITS, block_size=block))
        x = out
    return weights, nodes


def export_blob(blob, weights, checksum_every):
    """Appends every large weight to `blob`; returns name -> (offset, length, sha1 or None)."""
    placed = {}
    for i, (name, arr) in enumerate(weights):
        data = np.ascontiguousarray(arr).tobytes()
        if len(data) < INLINE_LIMIT:
            continue
        offset, length = blob.append(data)
        placed[name] = (offset, length, extdata.sha1(data) if i % checksum_every == 0 else None)
    return placed


def main(argv):
    ap = argparse.ArgumentParser(prog=os.path.basename(argv[0]), description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("outdir", help="the folder to write into (made if missing)")
    ap.add_argument("--unnamed", action="store_true", help="leave every node without a name")
    args = ap.parse_args(argv[1:])  # --help, and a usage error (exit 2) for anything else
    unnamed = args.unnamed
    outdir = os.path.abspath(args.outdir)
    os.makedirs(outdir, exist_ok=True)
    weights_file = "sample.weights"
    blob_path = os.path.join(outdir, weights_file)

    # First export: an earlier revision of the same weights.
    old_weights, _ = build_weights(np.random.default_rng(20240101))
    blob = extdata.Blob(blob_path, "wb")
    export_blob(blob, old_weights, checksum_every=1)
    orphaned_prefix = blob.tell()
    blob.close()

    # Re-export: fresh tensors appended to the same file, never truncated.
    weights, nodes = build_weights(np.random.default_rng(20240202))
    blob = extdata.Blob(blob_path, "ab")
    placed = export_blob(blob, weights, checksum_every=2)
    blob.close()

    initializers = []
    for name, arr in weights:
        t = numpy_helper.from_array(arr, name)
        if name in placed:
            offset, length, checksum = placed[name]
            extdata.set_external(t, weights_file, offset, length, checksum=checksum)
        initializers.append(t)

    if unnamed:
        extdata.strip_node_names(nodes)
    graph = helper.make_graph(
        nodes, "ballast_sample",
        [helper.make_tensor_value_info("X", TensorProto.FLOAT, [1, 256])],
        [helper.make_tensor_value_info("Y", TensorProto.FLOAT, [1, 256])],
        initializer=initializers)
    model = helper.make_model(graph, producer_name="ballast make_sample_model.py",
                              opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)])
    model.ir_version = 8
    model_path = os.path.join(outdir, "sample.onnx")
    onnx.save_model(model, model_path)
    onnx.checker.check_model(model_path)  # by path, so it resolves the external data

    size = os.path.getsize(blob_path)
    extdata.log("sample model: %s/sample.onnx, external data %s: %d bytes, %d referenced, "
                "%d dead (orphaned prefix [0, %d), %.2f%% of the file)"
                % (outdir, weights_file, size, size - orphaned_prefix, orphaned_prefix, orphaned_prefix,
                   100.0 * orphaned_prefix / size))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
