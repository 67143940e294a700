#!/usr/bin/python3
"""GGUF read by ballast against two independent readers.

Files are written by the numpy generator (tools/gen/make_gguf_models.py);
`ballast inspect --json --hash` on each (a split set by its first part) must
agree, tensor by tensor (dtype, dims, file, absolute offset, length, SHA-256
of the bytes), key by key (type, value, array count) and in its accounting
(header bytes, mapped bytes, padding and gaps as unreferenced bytes), with:
  - read_gguf in tools/gen/gguf_io.py, a reader written from the
    specification (checked by itself in check_gguf_reference.py);
  - with --node-modules, @huggingface/gguf run by Node over the same local
    files (tests/interop/node/gguf_headers.mjs), which must agree with the
    spec reader on every key, type and value and every tensor info.

Without --ballast only the readers are compared with each other.
Exit 0 pass, 1 fail, 77 skipped (with the reason printed).
"""

import argparse
import json
import os
import shutil
import struct
import subprocess
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "cli"))
from cli_check import FAILURES, expect, run, sha256_of, skip  # noqa: E402

# ggml type -> the dtype name ballast prints.
BALLAST_DTYPE = {
    "F32": "float", "F16": "float16", "BF16": "bfloat16", "F64": "double", "I8": "int8", "I16": "int16",
    "I32": "int32", "I64": "int64", "Q4_0": "q4_0", "Q4_1": "q4_1", "Q5_0": "q5_0", "Q5_1": "q5_1",
    "Q8_0": "q8_0", "Q8_1": "q8_1", "Q2_K": "q2_k", "Q3_K": "q3_k", "Q4_K": "q4_k", "Q5_K": "q5_k",
    "Q6_K": "q6_k", "Q8_K": "q8_k", "IQ2_XXS": "iq2_xxs", "IQ2_XS": "iq2_xs", "IQ3_XXS": "iq3_xxs",
    "IQ1_S": "iq1_s", "IQ4_NL": "iq4_nl", "IQ3_S": "iq3_s", "IQ2_S": "iq2_s", "IQ4_XS": "iq4_xs",
    "IQ1_M": "iq1_m", "TQ1_0": "tq1_0", "TQ2_0": "tq2_0", "MXFP4": "mxfp4",
}

# The models, each with its files (a split set: all parts).
SPLIT = ["split/model-0000%d-of-00003.gguf" % i for i in (1, 2, 3)]
MODELS = [("llama.gguf", ["llama.gguf"]), ("types.gguf", ["types.gguf"]), ("v2.gguf", ["v2.gguf"]),
          ("align64.gguf", ["align64.gguf"]), ("gap.gguf", ["gap.gguf"]), (SPLIT[0], SPLIT)]


def f32_bits(x):
    return struct.unpack("<I", struct.pack("<f", x))[0]


def f64_bits(x):
    return struct.unpack("<Q", struct.pack("<d", x))[0]


def same_value(value_type, mine, theirs):
    """The spec reader's value and another reader's, by the spec reader's
    type: integers exactly (64-bit ones may come as text), floats as the
    bits of a float32 / float64 (so -0 and subnormals count), arrays element
    by element."""
    if isinstance(value_type, tuple):
        return (isinstance(theirs, list) and len(theirs) == len(mine)
                and all(same_value(value_type[1], a, b) for a, b in zip(mine, theirs)))
    if value_type in ("float32", "float64"):
        try:
            got = float(theirs)
        except (TypeError, ValueError):
            return False
        if value_type == "float32":
            return f32_bits(np.float32(got)) == f32_bits(mine)
        return f64_bits(got) == f64_bits(mine)
    if value_type == "bool":
        return theirs is mine
    if value_type == "string":
        return theirs == mine
    try:
        return not isinstance(theirs, (bool, float)) and int(theirs) == mine
    except (TypeError, ValueError):
        return False


def check_node(g, node_modules, work):
    script = os.path.join(os.path.dirname(os.path.abspath(__file__)), "node", "gguf_headers.mjs")
    files = [f for _, fs in MODELS for f in fs]
    p = subprocess.run(["node", script, node_modules] + files, capture_output=True, text=True, timeout=300,
                       cwd=work)
    if not expect(p.returncode == 0, "node reads every file (rc=%d: %s)" % (p.returncode, p.stderr.strip()[-300:])):
        return
    parsed = json.loads(p.stdout)
    for rel in files:
        mine = g.read_gguf(os.path.join(work, rel))
        theirs = parsed.get(rel)
        if not expect(theirs is not None, "node has %s" % rel):
            continue
        expect((theirs["version"], int(theirs["tensor_count"]), int(theirs["kv_count"]))
               == (mine["version"], mine["tensor_count"], mine["kv_count"]), "%s: version and counts" % rel)
        md = theirs["metadata"]
        expect(sorted(md) == sorted(mine["metadata"]), "%s: the same %d keys" % (rel, len(mine["metadata"])))
        bad = []
        for key, (t, v) in mine["metadata"].items():
            entry = md.get(key)
            if entry is None:
                continue
            ok = entry["type"] == g.type_id(t)
            if isinstance(t, tuple):
                ok = ok and entry.get("subType") == g.type_id(t[1]) and len(entry["value"]) == len(v)
            if not (ok and same_value(t, v, entry["value"])):
                bad.append((key, g.type_label(t), entry))
        expect(not bad, "%s: every key's type, value and count agree (first differing: %s)"
               % (rel, str(bad[:1])[:300]))
        want = [(t["name"], t["type_id"], t["ne"], t["offset"]) for t in mine["tensors"]]
        got = [(t["name"], t["dtype"], [int(d) for d in t["shape"]], int(t["offset"])) for t in theirs["tensorInfos"]]
        expect(got == want, "%s: every tensor's name, type, ne and offset agree (%d tensors)" % (rel, len(want)))
        expect(int(theirs["tensorDataOffset"]) == mine["data_start"],
               "%s: data section at %d" % (rel, mine["data_start"]))
        expect(theirs["tensorInfoByteRange"][1] == mine["header_bytes"], "%s: tensor infos end at %d"
               % (rel, mine["header_bytes"]))


def scalar_text_ok(value_type, mine, text):
    """ballast's text for a scalar against the spec reader's value."""
    if value_type == "bool":
        return text == ("true" if mine else "false")
    if value_type == "string":
        return text == mine
    if value_type in ("float32", "float64"):
        return same_value(value_type, mine, text)
    try:
        return str(int(text)) == text and int(text) == mine
    except ValueError:
        return False


def compare_inspect(g, ballast, work, model, files):
    paths = [os.path.join(work, f) for f in files]
    rc, out, err = run(ballast, "inspect", "--json", "--hash", os.path.join(work, model))
    if not expect(rc == 0, "%s: inspect exits 0 (rc=%d: %s)" % (model, rc, err.strip()[-300:])):
        return
    doc = json.loads(out)
    expect(doc.get("format") == "gguf", "%s: format is gguf (%s)" % (model, doc.get("format")))
    views = [g.read_gguf(p) for p in paths]
    want = {}
    for path, view in zip(paths, views):
        for t in view["tensors"]:
            want[t["name"]] = {"dtype": BALLAST_DTYPE[t["type"]], "dims": list(reversed(t["ne"])),
                               "file": os.path.realpath(path), "offset": t["abs_offset"], "length": t["length"],
                               "sha256": sha256_of(path, t["abs_offset"], t["length"])}
    got = {w["name"]: {"dtype": w["dtype"], "dims": w["dims"], "file": os.path.realpath(w["file"]),
                       "offset": w["offset"], "length": w["length"], "sha256": w.get("sha256")}
           for w in doc["weights"]}
    expect(sorted(got) == sorted(want), "%s: the same tensor names (%d vs %d)" % (model, len(got), len(want)))
    bad = [n for n in want if got.get(n) != want[n]]
    expect(not bad, "%s: every tensor agrees with the spec reader (first differing: %s)"
           % (model, bad[:1] and (bad[0], got.get(bad[0]), want[bad[0]])))
    # Metadata: every key of every file, by the file's name.
    got_md = {}
    for m in doc["metadata"]:
        got_md[(os.path.basename(m["file"]), m["key"])] = m
    want_keys = {(os.path.basename(p), k): tv for p, v in zip(paths, views) for k, tv in v["metadata"].items()}
    expect(sorted(got_md) == sorted(want_keys), "%s: the same metadata keys (%d vs %d; missing %s, extra %s)"
           % (model, len(got_md), len(want_keys), sorted(set(want_keys) - set(got_md))[:3],
              sorted(set(got_md) - set(want_keys))[:3]))
    bad = []
    for k, (t, v) in want_keys.items():
        m = got_md.get(k)
        if m is None:
            continue
        if isinstance(t, tuple):
            ok = m["type"] == g.type_label(t) and m["value"] == "" and m["count"] == len(v)
        else:
            ok = m["type"] == t and scalar_text_ok(t, v, m["value"])
        if not ok:
            bad.append((k, g.type_label(t), v if not isinstance(t, tuple) else len(v), m))
    expect(not bad, "%s: every key's type, value and count agree (first differing: %s)" % (model, str(bad[:1])[:400]))
    headers = sum(v["header_bytes"] for v in views)
    mapped = sum(v["file_size"] for v in views)
    referenced = sum(t["length"] for v in views for t in v["tensors"])
    totals = doc["totals"]
    expect(totals["header_bytes"] == headers, "%s: header bytes %s == %d" % (model, totals["header_bytes"], headers))
    expect(totals["mapped_bytes"] == mapped, "%s: mapped bytes %s == %d" % (model, totals["mapped_bytes"], mapped))
    expect(totals["unreferenced_bytes"] == mapped - headers - referenced, "%s: unreferenced bytes %s == %d"
           % (model, totals["unreferenced_bytes"], mapped - headers - referenced))
    return doc


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ballast", help="the ballast tool; without it only the readers are compared")
    ap.add_argument("--gen", required=True)
    ap.add_argument("--work", required=True)
    ap.add_argument("--node-modules", help="node_modules holding @huggingface/gguf (tools/dev deps installs it)")
    args = ap.parse_args()

    if args.node_modules is not None:
        if shutil.which("node") is None:
            skip("node is not installed (tools/dev deps installs nodejs)")
        if not os.path.isdir(os.path.join(args.node_modules, "@huggingface", "gguf")):
            skip("@huggingface/gguf is not in %s (tools/dev deps installs it with npm)" % args.node_modules)

    sys.path.insert(0, os.path.abspath(args.gen))
    import gguf_io  # noqa: E402

    shutil.rmtree(args.work, ignore_errors=True)
    os.makedirs(args.work)
    rc, _, err = run(sys.executable, os.path.join(args.gen, "make_gguf_models.py"), args.work)
    if rc != 0:
        print(err)
        return 1

    if args.node_modules is not None:
        check_node(gguf_io, args.node_modules, args.work)
    if args.ballast is not None:
        # ballast against the spec reader (and so, with --node-modules, against node's reading too).
        docs = {model: compare_inspect(gguf_io, args.ballast, args.work, model, files) for model, files in MODELS}
        if docs.get("gap.gguf"):
            expect(docs["gap.gguf"]["totals"]["unreferenced_bytes"] >= 96,
                   "gap.gguf: the 96-byte gap is unreferenced (%d bytes in all, padding included)"
                   % docs["gap.gguf"]["totals"]["unreferenced_bytes"])
        if docs.get(SPLIT[0]):
            files = {os.path.realpath(w["file"]) for w in docs[SPLIT[0]]["weights"]}
            expect(len(files) == 3, "the split set: tensors from all 3 parts")
    print("%s: %s" % (os.path.basename(__file__), "FAILED" if FAILURES else "ok"))
    return 1 if FAILURES else 0


if __name__ == "__main__":
    sys.exit(main())
