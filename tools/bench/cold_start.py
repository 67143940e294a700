#!/usr/bin/python3
"""cold_start.py BALLAST OUTDIR [--backends cpu,vulkan] [--strategies upload,paged,zero-copy] [--reps N]
                 [--layers N] [--hidden H] [--ffn F] [--vocab V] [--vulkan-layers N] [--prefix-factor X] [--json FILE]

The cold-start benchmark (tools/dev bench-cold; docs/loading.md#measured):
writes an LLM-shaped model of real, random bytes (a sparse file reads as
zeros from no disk and proves nothing) into OUTDIR once, then times
`ballast load` from an empty page cache (--cold) and from a full one, by
the read path and by the mapped (page-fault) path, for every strategy,
and prints one table of medians.

Runs are interleaved (each repetition runs every configuration once, in
an order shuffled per repetition with a fixed seed, so no configuration
always follows the same one) and each cell is the median of --reps runs with its range, because a
shared machine's speed moves from moment to moment. The anchor (the best of
1-16 threads of 8 MiB pread of the same bytes into fresh memory, cold,
plus the hot derive: the mapped path with every byte cached) is measured
in every repetition of the first cold read-path configuration of each
backend, in the same run as what it is compared with. A second, smaller
model with an orphaned prefix PREFIX_FACTOR times its referenced size
checks that the read path reads the referenced bytes and nothing else.
vulkan (lavapipe here: derivations 84-572x slower than the CPU backend)
runs a model of --vulkan-layers layers, so its table is about the read
path and not about lavapipe's kernels.
"""

import argparse
import json
import os
import random
import statistics
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
    cmd = [sys.executable, GEN, outdir, "--layers", str(layers), "--hidden", str(hidden), "--ffn", str(ffn),
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


def cell(values, fmt="%.3f"):
    if not values:
        return "-"
    return (fmt + " (" + fmt + "-" + fmt + ")") % (statistics.median(values), min(values), max(values))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("ballast")
    ap.add_argument("outdir")
    ap.add_argument("--backends", default="cpu,vulkan")
    ap.add_argument("--strategies", default="upload,paged,zero-copy")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--layers", type=int, default=12)
    ap.add_argument("--hidden", type=int, default=2048)
    ap.add_argument("--ffn", type=int, default=5632)
    ap.add_argument("--vocab", type=int, default=32000)
    ap.add_argument("--vulkan-layers", type=int, default=2)
    ap.add_argument("--prefix-factor", type=int, default=8)
    ap.add_argument("--json", default=None, help="also write every run's document here")
    args = ap.parse_args()

    models = {}
    for backend in args.backends.split(","):
        layers = args.vulkan_layers if backend.startswith("vulkan") else args.layers
        models[backend] = generate(os.path.join(args.outdir, "model-%dl" % layers), layers, args.hidden, args.ffn,
                                   args.vocab)
    configs = [(b, s, cold, mmap) for b in args.backends.split(",") for s in args.strategies.split(",")
               for cold in (True, False) for mmap in (True, False)]
    first_cold_read = {}
    for c in configs:
        if c[2] and not c[3]:
            first_cold_read.setdefault(c[0], c)
    seconds = {c: [] for c in configs}
    read_mb_s = {c: [] for c in configs}
    anchors = {b: [] for b in args.backends.split(",")}
    runs = []
    order = random.Random(20261203)
    for rep in range(args.reps):
        shuffled = list(configs)
        order.shuffle(shuffled)
        for c in shuffled:
            backend, strategy, cold, mmap = c
            want_anchor = first_cold_read.get(backend) == c
            doc = load(args.ballast, models[backend], backend, strategy, cold, mmap, want_anchor)
            runs.append(doc)
            seconds[c].append(doc["seconds"])
            read = doc.get("load", {}).get("read", {})
            if read.get("seconds"):
                read_mb_s[c].append(read["bytes"] / read["seconds"] / 1e6)
            if want_anchor:
                a = doc["anchor"]
                anchors[backend].append((a["read_seconds"], a["hot_derive_seconds"], doc["seconds"], a["ratio"],
                                         a["threads"]))
        print("repetition %d of %d done" % (rep + 1, args.reps), file=sys.stderr)

    print("model: %s (%d referenced bytes); medians of %d interleaved runs (min-max)" % (
        models[configs[0][0]], runs[0]["referenced_bytes"], args.reps))
    print("%-7s %-10s %-5s %-26s %-26s %-22s %s" % ("backend", "strategy", "cache", "mmap path (s)", "read path (s)",
                                                     "read MB/s", "mmap / read"))
    for b in args.backends.split(","):
        for s in args.strategies.split(","):
            for cold in (True, False):
                m, r = seconds[(b, s, cold, True)], seconds[(b, s, cold, False)]
                print("%-7s %-10s %-5s %-26s %-26s %-22s %.2f" % (
                    b, s, "cold" if cold else "warm", cell(m), cell(r), cell(read_mb_s[(b, s, cold, False)], "%.0f"),
                    statistics.median(m) / statistics.median(r)))
    for b, rows in anchors.items():
        if not rows:
            continue
        reads, hots, colds, ratios, threads = zip(*rows)
        print("%s anchor: best pread %s s (threads %s) + hot derive %s s; cold read-path upload %s s; "
              "ratio (anchor + hot) / cold %s (target >= 0.85)" % (
                  b, cell(list(reads)), ",".join(map(str, threads)), cell(list(hots)), cell(list(colds)),
                  cell(list(ratios), "%.2f")))

    # Bytes read = referenced bytes, with a dead prefix PREFIX_FACTOR times larger.
    small = generate(os.path.join(args.outdir, "prefixed"), 4, 1024, 2816, 8192, 0)
    plain = os.path.getsize(os.path.join(os.path.dirname(small), "llm.weights"))
    prefixed = generate(os.path.join(args.outdir, "prefixed"), 4, 1024, 2816, 8192, args.prefix_factor * plain)
    doc = load(args.ballast, prefixed, args.backends.split(",")[0], "upload", True, False)
    read = doc["load"]["read"]["bytes"]
    ok = read == doc["referenced_bytes"]
    print("orphaned prefix %d x the referenced bytes (%d B of %d B in the file): read %d B, referenced %d B: %s" % (
        args.prefix_factor, args.prefix_factor * plain,
        os.path.getsize(os.path.join(os.path.dirname(prefixed), "llm.weights")), read, doc["referenced_bytes"],
        "exact" if ok else "DIFFERENT"))
    runs.append(doc)
    if args.json:
        json.dump(runs, open(args.json, "w"), indent=1)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
