#!/usr/bin/python3
"""cold_start.py BALLAST OUTDIR [--backends cpu,vulkan] [--layers N] [--hidden H] [--ffn F] [--vocab V]
                 [--prefix-factor X] [--strategies upload,paged,zero-copy] [--json FILE]

The cold-start benchmark (tools/dev bench-cold; docs/loading.md): writes an
LLM-shaped model of real, random bytes (a sparse file reads as zeros from
no disk and proves nothing) into OUTDIR once, then times `ballast load`
from an empty page cache and from a full one, by the read path and by the
mapped (page-fault) path, for every strategy, and prints one table.

Every figure of a row comes from one `ballast load --json` run; the
anchor (the best of 1-16 threads of 8 MiB pread of the same bytes, cold,
plus the hot derive) is measured in the first cold run of each backend, so
ratios compare numbers taken side by side on the same machine. A second,
smaller model with an orphaned prefix PREFIX_FACTOR times its referenced
size checks that the read path reads the referenced bytes and nothing else.
"""

import argparse
import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
GEN = os.path.join(HERE, "..", "gen", "make_llm_model.py")


def generate(outdir, layers, hidden, ffn, vocab, prefix=0):
    onnx_path = os.path.join(outdir, "llm.onnx")
    stamp = os.path.join(outdir, "params.json")
    params = {"layers": layers, "hidden": hidden, "ffn": ffn, "vocab": vocab, "prefix": prefix}
    if os.path.exists(onnx_path) and os.path.exists(stamp) and json.load(open(stamp)) == params:
        return onnx_path
    cmd = ["/usr/bin/python3", GEN, outdir, "--layers", str(layers), "--hidden", str(hidden), "--ffn", str(ffn),
           "--vocab", str(vocab), "--orphaned-prefix", str(prefix)]
    subprocess.run(cmd, check=True)
    json.dump(params, open(stamp, "w"))
    return onnx_path


def load(ballast, model, backend, strategy, cold, mmap, anchor=False):
    cmd = [ballast, "load", model, "--backend", backend, "--residency", strategy, "--json"]
    if cold:
        cmd.append("--cold")
    if mmap:
        cmd.append("--mmap")
    if anchor:
        cmd.append("--anchor")
    out = subprocess.run(cmd, check=True, capture_output=True, text=True)
    return json.loads(out.stdout)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("ballast")
    ap.add_argument("outdir")
    ap.add_argument("--backends", default="cpu,vulkan")
    ap.add_argument("--strategies", default="upload,paged,zero-copy")
    ap.add_argument("--layers", type=int, default=12)
    ap.add_argument("--hidden", type=int, default=2048)
    ap.add_argument("--ffn", type=int, default=5632)
    ap.add_argument("--vocab", type=int, default=32000)
    ap.add_argument("--prefix-factor", type=int, default=8)
    ap.add_argument("--json", default=None, help="also write every run's document here")
    args = ap.parse_args()

    model = generate(os.path.join(args.outdir, "model"), args.layers, args.hidden, args.ffn, args.vocab)
    runs = []
    print("%-8s %-10s %-5s %-5s %9s %9s %9s %9s %9s" % (
        "backend", "strategy", "cache", "path", "seconds", "read MB", "MB/s", "staging", "vs mmap"))
    for backend in args.backends.split(","):
        anchor = None
        for strategy in args.strategies.split(","):
            for cold in (True, False):
                row = {}
                for mmap in (True, False):
                    want_anchor = anchor is None and cold and not mmap
                    doc = load(args.ballast, model, backend, strategy, cold, mmap, want_anchor)
                    runs.append(doc)
                    if want_anchor:
                        anchor = doc["anchor"]
                        anchor["model_seconds"] = doc["seconds"]
                    row[mmap] = doc
                for mmap in (True, False):
                    doc = row[mmap]
                    read = doc.get("load", {}).get("read", {})
                    mb = read.get("bytes", 0) / 1e6
                    speedup = row[True]["seconds"] / doc["seconds"] if not mmap else 1.0
                    print("%-8s %-10s %-5s %-5s %9.3f %9.1f %9.0f %9.1f %9.2f" % (
                        backend, strategy, "cold" if cold else "warm", doc["path"], doc["seconds"], mb,
                        mb / read["seconds"] if read.get("seconds") else 0,
                        read.get("staging_bytes", 0) / 2**20, speedup))
        if anchor:
            print("%s anchor: best pread %.3f s (%d threads) + hot derive %.3f s = %.3f s; "
                  "cold read-path upload %.3f s; ratio %.2f (target >= 0.85)" % (
                      backend, anchor["read_seconds"], anchor["threads"], anchor["hot_derive_seconds"],
                      anchor["read_seconds"] + anchor["hot_derive_seconds"], anchor["model_seconds"], anchor["ratio"]))

    # Bytes read = referenced bytes, with a dead prefix PREFIX_FACTOR times larger.
    small = generate(os.path.join(args.outdir, "prefixed"), 4, 1024, 2816, 8192, 0)
    referenced = os.path.getsize(os.path.join(os.path.dirname(small), "llm.weights"))
    prefixed = generate(os.path.join(args.outdir, "prefixed"), 4, 1024, 2816, 8192, args.prefix_factor * referenced)
    doc = load(args.ballast, prefixed, args.backends.split(",")[0], "upload", True, False)
    read = doc["load"]["read"]["bytes"]
    ok = read == doc["referenced_bytes"]
    print("orphaned prefix %d x the referenced bytes (%d B): read %d B, referenced %d B: %s" % (
        args.prefix_factor, args.prefix_factor * referenced, read, doc["referenced_bytes"],
        "exact" if ok else "DIFFERENT"))
    runs.append(doc)
    if args.json:
        json.dump(runs, open(args.json, "w"), indent=1)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
