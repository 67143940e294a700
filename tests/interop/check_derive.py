#!/usr/bin/python3
"""check_derive.py: `ballast derive --dump` against numpy, and backends against each other.

  check_derive.py --ballast BIN --gen DIR --work DIR --backend cpu
      generates the sample model, runs `ballast derive MODEL --backend cpu
      --dump`, and recomputes every derived tensor in numpy straight from the
      format description (docs/derivations.md), reading the weights with
      onnx itself: a third implementation, independent of both the C++
      kernels and the scalar references in tests/reference.

  check_derive.py ... --backend vulkan --against cpu
      runs derive on both backends and compares their dumps with the
      documented tolerances (bit-exact but NaN payloads; int8 codes exact,
      or +-1 where a backend declares the capability int8_codes_within_one).

  --generator alias derives tools/gen/make_alias_model.py's model (weights
      that share bytes with other shapes or other scales) instead.

  --unnamed generates the model without node names (unnamed consumers of
      one weight get the files "weight@<OpType>#<index>").

  --model PATH derives an existing model (e.g. tools/gen/make_llm_model.py's)
      instead of generating the sample model.

Exit 0 on agreement, 1 on a mismatch, 77 (skipped) when the backend is
unavailable on this machine.
"""

import argparse
import json
import os
import re
import subprocess
import sys

import numpy as np
import onnx
from onnx import numpy_helper


def run_derive(ballast, model, backend, dump):
    os.makedirs(dump, exist_ok=True)
    for f in os.listdir(dump):
        os.remove(os.path.join(dump, f))
    p = subprocess.run([ballast, "derive", model, "--backend", backend, "--dump", dump],
                       capture_output=True, text=True)
    if p.returncode != 0:
        if "unavailable" in p.stderr or "not_found" in p.stderr:
            print(f"skipped: backend {backend}: {p.stderr.strip()}")
            sys.exit(77)
        print(p.stdout)
        print(p.stderr, file=sys.stderr)
        sys.exit(f"ballast derive --backend {backend} failed with exit code {p.returncode}")
    if "0 live allocation(s), 0 live registration(s)" not in p.stdout:
        sys.exit(f"derive on {backend} did not tear down to its baseline:\n{p.stdout}")
    return p.stdout


def f16_bits(a):
    return np.asarray(a, dtype=np.float16).view(np.uint16)


def same_f16(name, got, want):
    g, w = f16_bits(got), f16_bits(want)
    nan_g, nan_w = np.isnan(np.asarray(got, np.float16)), np.isnan(np.asarray(want, np.float16))
    if not np.array_equal(nan_g, nan_w):
        return f"{name}: NaN positions differ"
    bad = (g != w) & ~nan_w
    if bad.any():
        i = np.argwhere(bad)[0]
        return f"{name}: first mismatch at {tuple(i)}: got 0x{g[tuple(i)]:04x}, want 0x{w[tuple(i)]:04x} ({bad.sum()} in all)"
    return None


def nbits_parts(model, node):
    inits = {t.name: t for t in model.graph.initializer}
    attrs = {a.name: a.i for a in node.attribute}
    k, n, bs = attrs["K"], attrs["N"], attrs["block_size"]
    kb = -(-k // bs)
    b = numpy_helper.to_array(inits[node.input[1]]).reshape(n, kb, bs // 2)
    scales = numpy_helper.to_array(inits[node.input[2]]).reshape(n, kb)
    codes = np.empty((n, kb, bs), dtype=np.int32)
    codes[:, :, 0::2] = b & 0x0F
    codes[:, :, 1::2] = b >> 4
    codes = codes.reshape(n, kb * bs)
    zp = np.full((n, kb), 8.0, dtype=np.float32)
    if len(node.input) > 3 and node.input[3]:
        z = numpy_helper.to_array(inits[node.input[3]])
        if z.dtype == np.uint8:
            per_row = -(-kb // 2)
            z = z.reshape(n, per_row)
            un = np.empty((n, per_row * 2), dtype=np.int32)
            un[:, 0::2] = z & 0x0F
            un[:, 1::2] = z >> 4
            zp = un[:, :kb].astype(np.float32)
        else:
            zp = z.reshape(n, kb).astype(np.float32)
    return k, n, bs, kb, codes, scales, zp


def planned_nodes(model, inits):
    """The nodes whose weights get derived, one per distinct (weight, parameters),
    each with the dump stem `ballast derive` gives it: the weight's name, or
    "weight@node" when one weight has several distinct entries (consumers with
    other scales or another shape on the same bytes)."""
    firsts, per_weight = {}, {}
    for node in model.graph.node:
        if node.op_type == "MatMulNBits" and node.domain == "com.microsoft":
            attrs = {a.name: a.i for a in node.attribute}
            ident = ("nbits", tuple(node.input[1:]), attrs.get("K"), attrs.get("N"), attrs.get("block_size"))
        elif node.op_type in ("MatMul", "Gemm") and node.domain == "" and node.input[1] in inits:
            trans_b = any(a.name == "transB" and a.i for a in node.attribute)
            ident = ("dense", node.input[1], node.op_type == "Gemm" and trans_b)
        else:
            continue
        if ident not in firsts:
            firsts[ident] = node
            per_weight[node.input[1]] = per_weight.get(node.input[1], 0) + 1
    # ballast's name of a node: its own, or "<op_type>#<index>" (docs/derivations.md, "Node names").
    name = {id(n): n.name or "%s#%d" % (n.op_type, i) for i, n in enumerate(model.graph.node)}
    return [(node, node.input[1] + ("@" + name[id(node)] if per_weight[node.input[1]] > 1 else ""))
            for node in firsts.values()]


def expected(model):
    """name stem -> {suffix: ndarray} computed in numpy."""
    inits = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    out = {}
    for node, stem in planned_nodes(model, inits):
        if node.op_type == "MatMulNBits" and node.domain == "com.microsoft":
            k, n, bs, kb, codes, scales, zp = nbits_parts(model, node)
            s32 = scales.astype(np.float32)
            blk = np.repeat(np.arange(kb), bs)[:k]
            deq = ((codes[:, :k].astype(np.float32) - zp[:, blk]) * s32[:, blk]).astype(np.float16)
            words_cols = -(-k // 8)
            padded = np.empty((n, words_cols * 8), dtype=np.uint32)
            padded[:, :k] = codes[:, :k]
            pad_blk = np.minimum(np.arange(words_cols * 8) // bs, kb - 1)
            padded[:, k:] = zp[:, pad_blk[k:]].astype(np.uint32)
            order = [0, 2, 4, 6, 1, 3, 5, 7]
            words = np.zeros((n, words_cols), dtype=np.uint32)
            grouped = padded.reshape(n, words_cols, 8)
            for i, col in enumerate(order):
                words |= grouped[:, :, col] << np.uint32(4 * i)
            pairs = np.stack([s32, (-s32 * zp).astype(np.float32)], axis=-1).astype(np.float16)
            out[stem] = {"dequant_int4": deq, "repack_int4.words": words, "repack_int4.scale_offset": pairs}
        elif node.op_type in ("MatMul", "Gemm") and node.domain == "" and node.input[1] in inits:
            w = inits[node.input[1]]
            if w.ndim != 2 or w.dtype not in (np.float32, np.float16):
                continue
            trans_b = any(a.name == "transB" and a.i for a in node.attribute)
            d = {"transpose": w.T.copy()}
            if w.dtype == np.float32:
                d["to_f16"] = w.astype(np.float16)
            nk = w if (node.op_type == "Gemm" and trans_b) else w.T
            nk32 = nk.astype(np.float32)
            scale = (np.abs(nk32).max(axis=1) * np.float32(1.0 / 127.0)).astype(np.float32)
            with np.errstate(divide="ignore", invalid="ignore"):
                q = np.where(scale[:, None] == 0, 0, np.rint(nk32 / scale[:, None]))
            d["quant_int8.codes"] = np.clip(q, -127, 127).astype(np.int8)
            d["quant_int8.scales"] = scale
            out[stem] = d
    return out


def codes_within_one(ballast, backend):
    """The backend's declared int8_codes_within_one capability (`ballast backends --json`)."""
    name = backend.split(":")[0].split("?")[0]
    p = subprocess.run([ballast, "backends", "--load", "--json"], capture_output=True, text=True, check=True)
    for b in json.loads(p.stdout)["backends"]:
        if b["name"] == name and b.get("capabilities"):
            return bool(b["capabilities"]["int8_codes_within_one"])
    return False


def compare(name, got, want, int8_tolerance=0):
    if got.shape != want.shape:
        return f"{name}: shape {got.shape}, want {want.shape}"
    if want.dtype == np.float16:
        return same_f16(name, got, want)
    if name.endswith("quant_int8.codes"):
        diff = np.abs(got.astype(np.int32) - want.astype(np.int32))
        if diff.max(initial=0) > int8_tolerance:
            i = np.unravel_index(np.argmax(diff), diff.shape)
            return f"{name}: code differs by {diff[i]} at {i}: got {got[i]}, want {want[i]}"
        return None
    if got.dtype != want.dtype:
        return f"{name}: dtype {got.dtype}, want {want.dtype}"
    if not np.array_equal(got.view(np.uint8), want.view(np.uint8)):
        bad = np.argwhere(got != want)
        return f"{name}: {len(bad)} elements differ, first at {tuple(bad[0])}"
    return None


def load_dump(dump):
    # A name that had to be sanitized (e.g. "weight@node") carries "~" and a
    # 16-digit hash of the full name; the comparison keys by the readable part.
    return {re.sub(r"~[0-9a-f]{16}", "", f[:-4]): np.load(os.path.join(dump, f))
            for f in sorted(os.listdir(dump)) if f.endswith(".npy")}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ballast", required=True)
    ap.add_argument("--gen", required=True)
    ap.add_argument("--work", required=True)
    ap.add_argument("--backend", required=True)
    ap.add_argument("--against", help="compare with this backend's dump instead of numpy")
    ap.add_argument("--model", help="an existing model to derive instead of generating the sample model")
    ap.add_argument("--generator", default="sample",
                    help="which tools/gen/make_<NAME>_model.py makes the model: sample (default) or alias")
    ap.add_argument("--unnamed", action="store_true", help="generate the model without node names")
    args = ap.parse_args()

    os.makedirs(args.work, exist_ok=True)
    if args.model:
        model_path = os.path.abspath(args.model)
    else:
        subprocess.run([sys.executable, os.path.join(args.gen, "make_%s_model.py" % args.generator), args.work]
                       + (["--unnamed"] if args.unnamed else []), check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        model_path = os.path.join(args.work, args.generator + ".onnx")
    safe = lambda s: "".join(c if c.isalnum() or c in "._-" else "_" for c in s)  # noqa: E731
    out = run_derive(args.ballast, model_path, args.backend, os.path.join(args.work, "dump_" + safe(args.backend)))
    if args.generator == "alias" and not args.model:
        # same.d shares same.c's three entries; tied.b's transpose and to_f16
        # and the second B's dequant and repack are kept apart by parameters.
        want_sharing = ("sharing: 3 planned derivation(s) shared an entry (same bytes, same parameters); "
                        "4 entries read bytes another entry of the same derivation reads")
        if want_sharing not in out:
            sys.exit("derive's sharing summary is not the alias model's:\n" + out)
    got = load_dump(os.path.join(args.work, "dump_" + safe(args.backend)))

    if args.against:
        run_derive(args.ballast, model_path, args.against, os.path.join(args.work, "dump_" + safe(args.against)))
        want = load_dump(os.path.join(args.work, "dump_" + safe(args.against)))
        label = args.against
    else:
        model = onnx.load(model_path)  # loads the external data too
        want = {}
        for stem, parts in expected(model).items():
            for suffix, arr in parts.items():
                want[safe(stem) + "." + suffix] = arr
        label = "numpy"

    # Exact int8 codes unless a backend compared says it cannot round them correctly.
    compared = [args.backend] + ([args.against] if args.against else [])
    int8_tolerance = 1 if any(codes_within_one(args.ballast, b) for b in compared) else 0
    print(f"int8 codes compared {'within one' if int8_tolerance else 'exactly'}")

    problems = []
    if set(got) != set(want):
        problems.append(f"tensor sets differ: only {args.backend}: {sorted(set(got) - set(want))}, "
                        f"only {label}: {sorted(set(want) - set(got))}")
    for name in sorted(set(got) & set(want)):
        p = compare(name, got[name], want[name], int8_tolerance)
        if p:
            problems.append(p)
    for p in problems:
        print("MISMATCH", p)
    print(f"{len(set(got) & set(want))} derived tensors compared, {args.backend} vs {label}: "
          f"{'ok' if not problems else str(len(problems)) + ' mismatching'}")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
