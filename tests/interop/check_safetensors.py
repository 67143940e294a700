#!/usr/bin/python3
"""safetensors read by ballast against two independent readers.

Files are written by the numpy generator (tools/gen/make_safetensors_models.py);
`ballast inspect --json --hash` on each must agree, tensor by tensor (dtype,
shape, file, absolute offset, length, SHA-256 of the bytes) and in its
accounting (header bytes, dead bytes of a tensor the index leaves out), with:
  - read_safetensors.py, a reader written from the specification for this test;
  - with --node-modules, @huggingface/hub's parseSafetensorsMetadata run by
    Node over the same local files (tests/interop/node/safetensors_headers.mjs).

Exit 0 pass, 1 fail, 77 skipped (with the reason printed).
"""

import argparse
import json
import os
import shutil
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "cli"))
from cli_check import FAILURES, expect, run, sha256_of, skip  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import read_safetensors  # noqa: E402

# safetensors dtype -> the name ballast prints (ONNX's, lower case).
BALLAST_DTYPE = {
    "BOOL": "bool", "U8": "uint8", "I8": "int8", "I16": "int16", "U16": "uint16", "F16": "float16",
    "BF16": "bfloat16", "I32": "int32", "U32": "uint32", "F32": "float", "F64": "double", "I64": "int64",
    "U64": "uint64", "C64": "complex64", "F8_E4M3": "float8e4m3fn", "F8_E5M2": "float8e5m2",
    "F8_E8M0": "float8e8m0", "F8_E4M3FNUZ": "float8e4m3fnuz", "F8_E5M2FNUZ": "float8e5m2fnuz",
    "F4": "float4e2m1", "F6_E2M3": "float6e2m3", "F6_E3M2": "float6e3m2",
}


def expected_weights(files):
    """name -> expected record, over (path, names wanted or None) pairs."""
    out = {}
    for path, wanted in files:
        h = read_safetensors.read_header(path)
        for name, t in h["tensors"].items():
            if wanted is not None and name not in wanted:
                continue
            out[name] = {"dtype": BALLAST_DTYPE[t["dtype"]], "dims": t["shape"], "file": os.path.realpath(path),
                         "offset": t["offset"], "length": t["length"],
                         "sha256": sha256_of(path, t["offset"], t["length"])}
    return out


def compare_inspect(ballast, model, files, what):
    rc, out, err = run(ballast, "inspect", "--json", "--hash", model)
    if not expect(rc == 0, "%s: inspect exits 0 (rc=%d: %s)" % (what, rc, err.strip())):
        return None
    doc = json.loads(out)
    got = {w["name"]: {"dtype": w["dtype"], "dims": w["dims"], "file": os.path.realpath(w["file"]),
                       "offset": w["offset"], "length": w["length"], "sha256": w["sha256"]} for w in doc["weights"]}
    want = expected_weights(files)
    expect(sorted(got) == sorted(want), "%s: the same tensor names (%d vs %d)" % (what, len(got), len(want)))
    bad = [n for n in want if got.get(n) != want[n]]
    expect(not bad, "%s: every tensor agrees with the independent reader (first differing: %s)"
           % (what, bad[:1] and (bad[0], got.get(bad[0]), want[bad[0]])))
    headers = sum(read_safetensors.read_header(p)["header_bytes"] for p, _ in files)
    expect(doc["totals"]["header_bytes"] == headers, "%s: header bytes %d == %d" % (what, doc["totals"]["header_bytes"], headers))
    expect(doc["totals"]["mapped_bytes"] == sum(os.path.getsize(p) for p, _ in files), "%s: mapped bytes" % what)
    return doc


def check_node(node_modules, root, rel, files):
    script = os.path.join(os.path.dirname(os.path.abspath(__file__)), "node", "safetensors_headers.mjs")
    rc, out, err = run("node", script, node_modules, root, rel)
    if not expect(rc == 0, "node reads %s (rc=%d: %s)" % (rel, rc, err.strip()[-300:])):
        return
    headers = json.loads(out)["headers"]
    for path, _ in files:
        mine = read_safetensors.read_header(path)
        theirs = headers.get(os.path.relpath(path, root))  # keyed by the name the index (or the caller) gave
        if not expect(theirs is not None, "node has a header for %s" % path):
            continue
        start = mine["header_bytes"]
        node_tensors = {n: {"dtype": t["dtype"], "shape": t["shape"], "offset": start + t["data_offsets"][0],
                            "length": t["data_offsets"][1] - t["data_offsets"][0]}
                        for n, t in theirs.items() if n != "__metadata__"}
        expect(node_tensors == mine["tensors"], "node and the spec reader agree on %s" % os.path.basename(path))
        expect(theirs.get("__metadata__", {}) == mine["metadata"], "node and the spec reader agree on %s's metadata"
               % os.path.basename(path))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ballast", required=True)
    ap.add_argument("--gen", required=True)
    ap.add_argument("--work", required=True)
    ap.add_argument("--node-modules", help="node_modules holding @huggingface/hub (tools/dev deps installs it)")
    args = ap.parse_args()

    if args.node_modules is not None:
        if shutil.which("node") is None:
            skip("node is not installed (tools/dev deps installs nodejs)")
        if not os.path.isdir(os.path.join(args.node_modules, "@huggingface", "hub")):
            skip("@huggingface/hub is not in %s (tools/dev deps installs it with npm)" % args.node_modules)

    shutil.rmtree(args.work, ignore_errors=True)
    os.makedirs(args.work)
    rc, _, err = run(sys.executable, os.path.join(args.gen, "make_safetensors_models.py"), args.work)
    if rc != 0:
        print(err)
        return 1
    dtypes = os.path.join(args.work, "dtypes.safetensors")
    sharded = os.path.join(args.work, "sharded")
    index = os.path.join(sharded, "model.safetensors.index.json")
    weight_map, _ = read_safetensors.read_index(index)
    shard_files = sorted({os.path.join(sharded, s) for s in weight_map.values()})
    sharded_files = [(p, {n for n, s in weight_map.items() if os.path.join(sharded, s) == p}) for p in shard_files]

    if args.node_modules is not None:
        check_node(args.node_modules, args.work, "dtypes.safetensors", [(dtypes, None)])
        check_node(args.node_modules, sharded, "model.safetensors.index.json", sharded_files)
    # ballast against the spec reader (and so, with --node-modules, against node's reading too).
    doc = compare_inspect(args.ballast, dtypes, [(dtypes, None)], "dtypes.safetensors")
    if doc is not None:
        expect(doc["format"] == "safetensors", "format is safetensors")
        want = read_safetensors.read_header(dtypes)["metadata"]
        expect({m["key"]: m["value"] for m in doc["metadata"]} == want, "metadata as written")
        expect(doc["totals"]["unreferenced_bytes"] == 0, "no dead bytes in a file the writer packed")
    doc = compare_inspect(args.ballast, index, sharded_files, "sharded index")
    if doc is not None:
        expect(doc["format"] == "safetensors-index", "format is safetensors-index")
        orphan = read_safetensors.read_header(shard_files[1])["tensors"]["orphan.weight"]["length"]
        expect(doc["totals"]["unreferenced_bytes"] == orphan,
               "the tensor the index leaves out is dead: %d == %d" % (doc["totals"]["unreferenced_bytes"], orphan))
        expect(doc["auto_budget"] is None or doc["auto_budget"]["source_bytes"] == doc["totals"]["referenced_bytes"],
               "the auto budget counts referenced bytes only")
    svg = os.path.join(args.work, "sharded.svg")
    rc, _, err = run(args.ballast, "inspect", index, "--map", svg)
    if expect(rc == 0 and os.path.exists(svg), "inspect --map on the index (rc=%d: %s)" % (rc, err.strip())):
        with open(svg) as f:
            picture = f.read()
        expect(all(os.path.basename(p) in picture for p in shard_files), "the map draws every shard")
    rc, out, err = run(args.ballast, "verify", index)
    expect(rc == 0, "verify on the sharded checkpoint exits 0 (rc=%d: %s)" % (rc, err.strip()))
    holes = os.path.join(args.work, "holes.safetensors")
    rc, _, err = run(args.ballast, "inspect", holes)
    lines = [l for l in err.splitlines() if l.strip()]
    expect(rc == 2 and len(lines) == 1 and "belong to no tensor" in err and "holes.safetensors" in err,
           "a file with holes is refused in one line naming it (rc=%d: %s)" % (rc, err.strip()))
    rc, out, err = run(args.ballast, "inspect", "--json", "--allow-holes", holes)
    if expect(rc == 0, "--allow-holes opens it (rc=%d: %s)" % (rc, err.strip())):
        doc = json.loads(out)
        expect(doc["totals"]["unreferenced_bytes"] == 16, "holes are dead bytes: 8 between, 8 trailing (%d)"
               % doc["totals"]["unreferenced_bytes"])
    print("%s: %s" % (os.path.basename(__file__), "FAILED" if FAILURES else "ok"))
    return 1 if FAILURES else 0


if __name__ == "__main__":
    sys.exit(main())
