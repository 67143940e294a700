#!/usr/bin/python3
"""GGUF tensors dequantized by ballast against an independent NumPy reading.

The generator (tools/gen/make_gguf_models.py) writes GGUF files with a
`<file>.<tensor>.f32.npy` beside each: the tensor's values computed by
dequant() in tools/gen/gguf_io.py, written from the format description
(and itself checked against hand-computed blocks by check_gguf_reference.py).
On one backend:
  - every tensor of types.gguf (one of each type the kinds read), of the
    llama-shaped model and of the split set, derived with dequant_gguf and
    dequant_gguf_f32 by a rules file: each f32 dump equals the NumPy values
    bit for bit, each f16 dump equals them rounded by NumPy's f32 -> f16
    (round to nearest even; any two NaNs are equal);
  - the llama-shaped model with the built-in rules plans dequant_gguf for its
    Q4_0/Q4_K/Q6_K layers and head by the rules named in docs/derivations.md;
  - the same dumps from every residency strategy (upload, zero-copy, paged
    under the auto budget), byte-identical;
  - with --reference-backend (cpu), every dump byte-identical to its.
Exit 0 pass, 1 fail, 77 skipped (with the reason printed).
"""

import argparse
import json
import os
import shutil
import subprocess
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "cli"))
from cli_check import FAILURES, derive_dump as derive, expect, same_files  # noqa: E402

TYPES = ["float", "float16", "bfloat16", "q4_0", "q4_1", "q5_0", "q5_1", "q8_0", "q2_k", "q3_k", "q4_k", "q5_k",
         "q6_k", "q8_k"]
RULES = {"rules": [{"name": "all", "pattern": "*", "derive": ["dequant_gguf", "dequant_gguf_f32"], "dtypes": TYPES}]}
SUFFIX = {"dequant_gguf": np.float16, "dequant_gguf_f32": np.float32}


def same_bits(expected, got):
    """Equal bit patterns, any NaN equal to any NaN."""
    e, g = expected.reshape(-1), got.reshape(-1)
    if e.shape != g.shape or e.dtype != g.dtype:
        return False
    nan = np.isnan(e)
    if not np.array_equal(nan, np.isnan(g)):
        return False
    bits = np.uint16 if e.dtype == np.float16 else np.uint32
    return np.array_equal(e.view(bits)[~nan], g.view(bits)[~nan])


def numpy_reading(npy_prefixes, tensor, what):
    """The generator's .f32.npy of `tensor`: exactly one beside the files of
    the model (a split set's parts each have their own), else None."""
    found = [p + tensor + ".f32.npy" for p in npy_prefixes if os.path.exists(p + tensor + ".f32.npy")]
    return found[0] if expect(len(found) == 1, "%s: a NumPy reading of %s" % (what, tensor)) else None


def check_values(dump, npy_prefixes, what):
    """Every dump against the NumPy values (beside whichever file of a split
    set holds the tensor); returns how many were compared."""
    compared = 0
    for name in sorted(os.listdir(dump)):
        for kind, dtype in SUFFIX.items():
            if not name.endswith("." + kind + ".npy"):
                continue
            tensor = name[: -len("." + kind + ".npy")]
            reference = numpy_reading(npy_prefixes, tensor, what)
            if reference is None:
                continue
            with np.errstate(over="ignore", invalid="ignore"):
                expected = np.load(reference).astype(dtype)
            got = np.load(os.path.join(dump, name))
            expect(got.dtype == dtype and same_bits(expected, got),
                   "%s: %s %s equals the NumPy reading (%s %s)" % (what, tensor, kind, got.dtype, got.shape))
            compared += 1
    return compared


# GGUF's own type names, as `inspect` prints them for a GGUF model (RULES
# above uses ballast's): a rules file takes either.
REPACK_RULES = {"rules": [{"name": "repack", "pattern": "*", "derive": ["repack_gguf_int4"],
                           "dtypes": ["Q4_0", "Q4_1"]}]}
COLUMN_OF_NIBBLE = [0, 2, 4, 6, 1, 3, 5, 7]


def check_repack(dump, npy_prefixes, what):
    """repack_gguf_int4's words and (scale, offset) pairs, read back as
    q * scale + offset in f32, against the NumPy values: equal (for Q4_0's
    (q - 8) * d and Q4_1's q * d + m every term is a multiple of d's unit,
    so the sums are exact), but for the sign of a zero."""
    compared = 0
    for name in sorted(os.listdir(dump)):
        if not name.endswith(".repack_gguf_int4.words.npy"):
            continue
        tensor = name[: -len(".repack_gguf_int4.words.npy")]
        words = np.load(os.path.join(dump, name))
        pairs = np.load(os.path.join(dump, tensor + ".repack_gguf_int4.scale_offset.npy")).astype(np.float32)
        rows, nwords = words.shape
        codes = np.zeros((rows, nwords * 8), dtype=np.uint32)
        for i, col in enumerate(COLUMN_OF_NIBBLE):
            codes[:, col::8] = (words >> np.uint32(4 * i)) & np.uint32(15)
        scale = np.repeat(pairs[:, :, 0], 32, axis=1)
        offset = np.repeat(pairs[:, :, 1], 32, axis=1)
        with np.errstate(over="ignore", invalid="ignore"):
            got = codes.astype(np.float32) * scale + offset
        reference = numpy_reading(npy_prefixes, tensor, what)
        if reference is None:
            continue
        expected = np.load(reference).astype(np.float32).reshape(got.shape)
        # A Q4_0 block whose |d| passes 65504 / 8 has no finite offset -8d in
        # f16 (docs/derivations.md): only such blocks, and blocks of a
        # non-finite d, are left out of the comparison.
        exact = np.isfinite(scale) & np.isfinite(offset)
        expect(np.all(~np.isfinite(scale[~exact]) | (np.abs(scale[~exact]) > 65504 / 8)),
               "%s: %s: only blocks with |d| > 8188 or a non-finite d have a non-finite pair" % (what, tensor))
        # Equal values, NaN equal to NaN; a zero's sign aside (Q4_0's code 8:
        # (8 - 8) * d is -0 for a negative d, 8 * d + (-8 d) is +0).
        expect(np.array_equal(expected[exact], got[exact], equal_nan=True),
               "%s: %s repack_gguf_int4 read back equals the NumPy reading (%s words)" % (what, tensor, words.shape))
        compared += 1
    return compared


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ballast", required=True)
    ap.add_argument("--gen", required=True)
    ap.add_argument("--work", required=True)
    ap.add_argument("--backend", default="cpu")
    ap.add_argument("--reference-backend", default="")
    args = ap.parse_args()
    shutil.rmtree(args.work, ignore_errors=True)
    os.makedirs(args.work)
    models = os.path.join(args.work, "models")
    gen = subprocess.run([sys.executable, os.path.join(args.gen, "make_gguf_models.py"), models],
                         capture_output=True, text=True)
    if not expect(gen.returncode == 0, "the generator writes the models (%s)" % gen.stderr.strip()[-300:]):
        return 1
    rules = os.path.join(args.work, "rules.json")
    with open(rules, "w") as f:
        json.dump(RULES, f)

    cases = [("types", os.path.join(models, "types.gguf"), [os.path.join(models, "types.gguf.")]),
             ("llama", os.path.join(models, "llama.gguf"), [os.path.join(models, "llama.gguf.")])]
    split_first = os.path.join(models, "split", "model-00001-of-00003.gguf")
    cases.append(("split", split_first,
                  [os.path.join(models, "split", "model-%05d-of-00003.gguf." % i) for i in (1, 2, 3)]))
    dumps = {}
    for label, model, prefix in cases:
        dump = os.path.join(args.work, "dump-" + label)
        p = derive(args.ballast, model, args.backend, dump, "--rules", rules)
        if not expect(p.returncode == 0, "%s: derive --rules on %s exits 0 (%s)" % (label, args.backend,
                                                                                    p.stderr.strip())):
            continue
        dumps[label] = dump
        n = check_values(dump, prefix, "%s on %s" % (label, args.backend))
        expect(n >= 2, "%s: %d dumps compared" % (label, n))

    repack_rules = os.path.join(args.work, "repack.json")
    with open(repack_rules, "w") as f:
        json.dump(REPACK_RULES, f)
    for label, model, prefix in cases[:2]:
        dump = os.path.join(args.work, "dump-repack-" + label)
        p = derive(args.ballast, model, args.backend, dump, "--rules", repack_rules)
        if expect(p.returncode == 0, "%s: derive repack_gguf_int4 exits 0 (%s)" % (label, p.stderr.strip())):
            dumps["repack-" + label] = dump
            n = check_repack(dump, prefix, "%s on %s" % (label, args.backend))
            expect(n >= 1, "%s: %d repacked tensors compared" % (label, n))

    llama = os.path.join(models, "llama.gguf")
    dump = os.path.join(args.work, "dump-llama-default")
    p = derive(args.ballast, llama, args.backend, dump)
    if expect(p.returncode == 0, "llama with the built-in rules exits 0 (%s)" % p.stderr.strip()):
        # 2 layers x 7 block-quantized matrices, and the Q6_K head.
        expect("plan: 15 derivations: 14 by rule gguf-layers, 1 by rule gguf-head" in p.stdout,
               "the built-in rules plan the layers and the head (%s)" % p.stdout.splitlines()[:1])
        dumps["llama-default"] = dump
        check_values(dump, [os.path.join(models, "llama.gguf.")], "llama built-in rules")
        for strategy, budget in (("upload", None), ("zero-copy", None), ("paged", "auto")):
            d = os.path.join(args.work, "dump-llama-" + strategy)
            extra = ["--residency", strategy] + (["--budget", budget] if budget else [])
            q = derive(args.ballast, llama, args.backend, d, *extra)
            if expect(q.returncode == 0, "llama --residency %s exits 0 (%s)" % (strategy, q.stderr.strip())):
                same_files(dump, d, "llama: memo vs --residency " + strategy)

    if args.reference_backend:
        for label, d in dumps.items():
            ref = d + "-" + args.reference_backend
            base = label[len("repack-"):] if label.startswith("repack-") else label
            model = {"types": cases[0][1], "llama": cases[1][1], "split": split_first}.get(base, llama)
            extra = ([] if label == "llama-default" else
                     ["--rules", repack_rules] if label.startswith("repack-") else ["--rules", rules])
            p = derive(args.ballast, model, args.reference_backend, ref, *extra)
            if expect(p.returncode == 0, "%s on %s exits 0" % (label, args.reference_backend)):
                same_files(ref, d, "%s: %s vs %s" % (label, args.reference_backend, args.backend))

    print("%s: %s" % (os.path.basename(__file__), "FAILED" if FAILURES else "ok"))
    return 1 if FAILURES else 0


if __name__ == "__main__":
    sys.exit(main())
