#!/usr/bin/python3
"""make_safetensors_models.py OUTDIR

safetensors files for the tests, written with numpy (safetensors_io.py):

  OUTDIR/dtypes.safetensors   one tensor of every dtype of the specification
                              (numpy's own types from arrays, the others as
                              raw bytes), with __metadata__
  OUTDIR/sharded/             a Hugging Face-style checkpoint in 3 shards with
                              model.safetensors.index.json, decoder names
                              (model.layers.N.self_attn.q_proj.weight, ...);
                              shard 2 also holds "orphan.weight", which the
                              index does not name (dead bytes)
  OUTDIR/holes.safetensors    a byte buffer with bytes no tensor covers
                              (refused unless --allow-holes)
"""

import argparse
import json
import os
import struct
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import safetensors_io as st  # noqa: E402


def dtype_tensors(rng):
    out = []
    for np_type in st.NUMPY_DTYPES:
        if np_type == np.dtype(np.bool_):
            arr = rng.integers(0, 2, (3, 4)).astype(np.bool_)
        elif np_type.kind in "iu":
            info = np.iinfo(np_type)
            arr = rng.integers(info.min, info.max, (3, 4), dtype=np_type, endpoint=True)
        elif np_type.kind == "c":
            arr = (rng.standard_normal((3, 4)) + 1j * rng.standard_normal((3, 4))).astype(np_type)
        else:
            arr = rng.standard_normal((3, 4)).astype(np_type)
        out.append(("t_" + st.NUMPY_DTYPES[np_type], arr))
    for dtype in ("BF16", "F8_E4M3", "F8_E5M2", "F8_E8M0", "F8_E4M3FNUZ", "F8_E5M2FNUZ", "F4", "F6_E2M3", "F6_E3M2"):
        elements = 3 * 8  # fills whole bytes for every width
        raw = rng.integers(0, 256, elements * st.DTYPE_BITS[dtype] // 8, dtype=np.uint8).tobytes()
        out.append(("t_" + dtype, dtype, [3, 8], raw))
    return out


def decoder_shards(rng, layers=2, hidden=64, ffn=128, vocab=256):
    def w(*shape):
        return (rng.standard_normal(shape) * 0.02).astype(np.float32)

    shards = [[("model.embed_tokens.weight", w(vocab, hidden))]]
    for layer in range(layers):
        p = "model.layers.%d." % layer
        shard = []
        for proj in ("q", "k", "v", "o"):
            shard.append((p + "self_attn.%s_proj.weight" % proj, w(hidden, hidden).astype(np.float16)))
        shard.append((p + "mlp.gate_proj.weight", w(ffn, hidden)))
        shard.append((p + "mlp.up_proj.weight", w(ffn, hidden)))
        shard.append((p + "mlp.down_proj.weight", w(hidden, ffn)))
        shard.append((p + "input_layernorm.weight", np.ones(hidden, np.float32)))
        shards.append(shard)
    shards[1].append(("orphan.weight", w(32, 32)))
    shards[-1].append(("lm_head.weight", w(vocab, hidden)))
    return shards


def holes_file(path):
    header = json.dumps({"a": {"dtype": "U8", "shape": [8], "data_offsets": [0, 8]},
                         "b": {"dtype": "U8", "shape": [8], "data_offsets": [16, 24]}}).encode()
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(header)) + header + bytes(range(1, 25)) + b"trailing")


def main(argv):
    ap = argparse.ArgumentParser(prog=os.path.basename(argv[0]), description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("outdir", help="the folder to write into (made if missing)")
    args = ap.parse_args(argv[1:])  # --help, and a usage error (exit 2) for anything else
    out = args.outdir
    os.makedirs(out, exist_ok=True)
    rng = np.random.default_rng(20261202)
    st.write_safetensors(os.path.join(out, "dtypes.safetensors"), dtype_tensors(rng),
                         {"format": "pt", "producer": "ballast make_safetensors_models.py"})
    shards = decoder_shards(rng)
    # Three files: the embedding alone, then the layers split in two.
    grouped = [shards[0], [t for s in shards[1:len(shards) // 2 + 1] for t in s],
               [t for s in shards[len(shards) // 2 + 1:] for t in s]]
    st.write_sharded(os.path.join(out, "sharded"), grouped, leave_out={"orphan.weight"})
    holes_file(os.path.join(out, "holes.safetensors"))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
