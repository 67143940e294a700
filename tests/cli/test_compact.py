#!/usr/bin/python3
"""`ballast compact` (issue 26): a copy of a model holding only referenced bytes.

- ONNX with an orphaned prefix, dead gaps, two data files (one in a
  subfolder), aliased and overlapping ranges, a Constant with external data,
  checksums, a tensor without `length`, an inline initializer: after compact
  no byte is dead, every weight's SHA-256 is the same, `verify` passes, every
  range is aligned to --align, and the .onnx is the original with only its
  external_data entries changed (byte for byte, against onnx's own
  serializer). Under ONNX Runtime (npm onnxruntime-node, build/node) both
  models give identical outputs (--ort, its own test: exit 77 with the
  reason when build/node has no onnxruntime-node).
- Every model of tools/gen/make_test_models.py's corpus at --align 1: no
  dead byte, the same hashes, verify passing.
- A sharded safetensors checkpoint whose shard holds a tensor the index does
  not name, and a file with holes (--allow-holes): no dead bytes after, the
  same hashes, headers 8-aligned, the index's weight_map and total_size.
- Refusals, exit 2 with one line naming the path: OUT_DIR already holds a
  file compact would write, OUT_DIR is the model's folder, a bad --align; a
  model compact cannot copy whole (a sparse tensor with external values)
  leaves nothing behind.
- Writes that go wrong: an OUT_DIR that reaches the model's folder through
  a folder compact makes (model_dir/new/..) is refused, a file size limit
  is exit 2 naming the output with nothing left, SIGTERM mid-write leaves
  no temporary; a 250-byte data file name compacts.

Exit 0 pass, 1 fail, 77 skipped (with the reason printed).
"""

import argparse
import hashlib
import json
import os
import shutil
import struct
import subprocess
import sys

from cli_check import FAILURES, expect, skip

try:
    import numpy as np
    import onnx
    from onnx import TensorProto, helper, numpy_helper
except ImportError as e:  # pragma: no cover
    skip("python3 lacks numpy/onnx: %s" % e)


class Cli:
    def __init__(self, ballast):
        self.ballast = ballast

    def __call__(self, *args):
        proc = subprocess.run([self.ballast, *map(str, args)], capture_output=True, text=True, timeout=120)
        return proc.returncode, proc.stdout, proc.stderr


def one_line_error(stderr, *must_contain):
    lines = [l for l in stderr.splitlines() if l.strip()]
    return len(lines) == 1 and all(s in lines[0] for s in must_contain)


# ---------------------------------------------------------------------------
# The ONNX model: Y = (X @ W1 + B1 + C) @ W2 + K, Z = X @ W1b + B2, where
# W1b aliases W1's bytes, C overlaps W1's first 32 floats, K is a Constant
# node's external value and B2 is inline.


def external(name, arr, location, offset, checksum=False, write_length=True, data_type=None):
    t = TensorProto(name=name, data_type=data_type or TensorProto.FLOAT, dims=list(arr.shape))
    t.data_location = TensorProto.EXTERNAL
    entries = [("location", location), ("offset", str(offset))]
    if write_length:
        entries.append(("length", str(arr.nbytes)))
    if checksum:
        entries.append(("checksum", hashlib.sha1(arr.tobytes()).hexdigest()))
    for k, v in entries:
        e = t.external_data.add()
        e.key, e.value = k, v
    return t


def write_onnx_model(folder, sparse=False, function=False):
    os.makedirs(os.path.join(folder, "extra"), exist_ok=True)
    r = np.random.default_rng(26)
    w1 = r.standard_normal((64, 32)).astype(np.float32)
    b1 = r.standard_normal((32,)).astype(np.float32)
    w2 = r.standard_normal((32, 16)).astype(np.float32)
    k = r.standard_normal((16,)).astype(np.float32)
    b2 = r.standard_normal((32,)).astype(np.float32)
    c = w1.reshape(-1)[:32].copy()

    # weights.bin: 1000 bytes of an older export, w1, 100 dead bytes, b1, k.
    data = bytearray(r.integers(0, 255, 1000, dtype=np.uint8).tobytes())
    off_w1 = len(data)
    data += w1.tobytes()
    data += b"\xee" * 100
    off_b1 = len(data)
    data += b1.tobytes()
    data += b"\xdd" * 37
    off_k = len(data)
    data += k.tobytes()
    with open(os.path.join(folder, "weights.bin"), "wb") as f:
        f.write(data)
    # extra/second.bin: a dead prefix, then w2.
    second = bytearray(b"\x00" * 333)
    off_w2 = len(second)
    second += w2.tobytes()
    sparse_values = np.arange(4, dtype=np.float32)
    off_sparse = len(second)
    if sparse or function:
        second += sparse_values.tobytes()
    with open(os.path.join(folder, "extra", "second.bin"), "wb") as f:
        f.write(second)

    inits = [
        external("W1", w1, "weights.bin", off_w1, checksum=True),
        external("W1b", w1, "weights.bin", off_w1),
        external("C", c, "weights.bin", off_w1, write_length=False),
        external("B1", b1, "weights.bin", off_b1, checksum=True),
        external("W2", w2, "extra/second.bin", off_w2, checksum=True),
        numpy_helper.from_array(b2, "B2"),
    ]
    kt = external("", k, "weights.bin", off_k, checksum=True)
    nodes = [
        helper.make_node("Constant", [], ["K"], value=kt, name="k_const"),
        helper.make_node("MatMul", ["X", "W1"], ["H"], name="mm1"),
        helper.make_node("Add", ["H", "B1"], ["H2"], name="add1"),
        helper.make_node("Add", ["H2", "C"], ["H3"], name="add_c"),
        helper.make_node("MatMul", ["H3", "W2"], ["Y0"], name="mm2"),
        helper.make_node("Add", ["Y0", "K"], ["Y"], name="add_k"),
        helper.make_node("MatMul", ["X", "W1b"], ["Z0"], name="mm1b"),
        helper.make_node("Add", ["Z0", "B2"], ["Z"], name="add2"),
    ]
    graph = helper.make_graph(
        nodes, "compact_test",
        [helper.make_tensor_value_info("X", TensorProto.FLOAT, [2, 64])],
        [helper.make_tensor_value_info("Y", TensorProto.FLOAT, [2, 16]),
         helper.make_tensor_value_info("Z", TensorProto.FLOAT, [2, 32])],
        initializer=inits)
    if sparse:
        values = external("S_values", sparse_values, "extra/second.bin", off_sparse)
        indices = numpy_helper.from_array(np.array([0, 3, 5, 7], dtype=np.int64), "S_indices")
        graph.sparse_initializer.append(helper.make_sparse_tensor(values, indices, [8]))
    functions = []
    if function:
        # A model-local function whose Constant holds its value as external
        # data: ballast does not read function bodies, so no weight covers
        # those bytes; compact must refuse, not drop them.
        body = [helper.make_node("Constant", [], ["fc"], value=external("", sparse_values, "extra/second.bin", off_sparse)),
                helper.make_node("Add", ["fx", "fc"], ["fy"])]
        functions.append(helper.make_function("test.fn", "AddConst", ["fx"], ["fy"], body,
                                              [helper.make_opsetid("", 17)]))
        graph.node.append(helper.make_node("AddConst", ["B2"], ["F"], domain="test.fn", name="call_fn"))
        graph.output.append(helper.make_tensor_value_info("F", TensorProto.FLOAT, [32]))
    model = helper.make_model(graph, producer_name="test_compact", functions=functions,
                              opset_imports=[helper.make_opsetid("", 17)] +
                              ([helper.make_opsetid("test.fn", 1)] if function else []))
    model.ir_version = 8
    path = os.path.join(folder, "model.onnx")
    with open(path, "wb") as f:
        f.write(model.SerializeToString())
    return path


# ---------------------------------------------------------------------------


def inspect(cli, model, *extra):
    rc, out, err = cli("inspect", "--json", "--hash", model, *extra)
    if rc != 0:
        return None, err
    return json.loads(out), err


def same_weights(before, after):
    key = lambda w: (w["name"], w["dtype"], tuple(w["dims"]), w["bytes"], w["location"], w["sha256"])
    return sorted(map(key, before["weights"])) == sorted(map(key, after["weights"]))


def merged_starts(weights):
    """Start offsets of the merged referenced ranges per file."""
    by_file = {}
    for w in weights:
        if w["location"] == "external" and w["length"] > 0:
            by_file.setdefault(w["file"], []).append((w["offset"], w["offset"] + w["length"]))
    starts = []
    for ranges in by_file.values():
        ranges.sort()
        end = -1
        for b, e in ranges:
            if b >= end:
                starts.append(b)
            end = max(end, e)
    return starts


def compact(cli, model, out_dir, *extra):
    rc, out, err = cli("compact", model, out_dir, "--json", *extra)
    doc = json.loads(out) if rc == 0 and out.strip() else None
    return rc, doc, err


def check_summary(doc, what):
    expect(doc is not None and doc["bytes_saved"] == doc["bytes_before"] - doc["bytes_after"] and
           doc["files_written"] == len(doc["files"]) and
           all(os.path.getsize(f["path"]) == f["bytes"] for f in doc["files"]) and
           doc["bytes_after"] == sum(f["bytes"] for f in doc["files"]),
           "%s: --json figures add up and match the files written" % what)


def test_onnx(cli, work):
    src = os.path.join(work, "onnx_src")
    shutil.rmtree(src, ignore_errors=True)
    os.makedirs(src)
    model = write_onnx_model(src)
    before, err = inspect(cli, model)
    if not expect(before is not None, "inspect the generated ONNX model (%s)" % err.strip()):
        return
    expect(before["totals"]["unreferenced_bytes"] > 1000, "the generated model has dead bytes (orphaned prefix, gaps)")

    for align in (64, 4096, 1):
        out_dir = os.path.join(work, "onnx_out_%d" % align)
        shutil.rmtree(out_dir, ignore_errors=True)
        extra = () if align == 64 else ("--align", align)
        rc, doc, err = compact(cli, model, out_dir, *extra)
        if not expect(rc == 0, "compact ONNX --align %d: exit 0 (got %d; %s)" % (align, rc, err.strip())):
            continue
        check_summary(doc, "compact ONNX --align %d" % align)
        expect(doc["files_written"] == 3 and doc["align"] == align, "compact ONNX: 3 files written (.onnx and 2 data)")
        out_model = os.path.join(out_dir, "model.onnx")
        after, err = inspect(cli, out_model)
        if not expect(after is not None, "inspect the compacted model (%s)" % err.strip()):
            continue
        # Every range of this model is a multiple of 64 bytes long: at 64 and 1
        # nothing is dead; at 4096 only the padding that aligns each range is.
        dead = after["totals"]["unreferenced_bytes"]
        padding_only = all(length < align and (offset + length) % align == 0
                           for f in after["external_files"] for offset, length in f["dead_ranges"])
        expect(dead == 0 if align <= 64 else (dead > 0 and padding_only),
               "compacted --align %d: %s (got %d dead bytes)" %
               (align, "0 unreferenced bytes" if align <= 64 else "dead bytes only alignment padding", dead))
        expect(same_weights(before, after), "compacted --align %d: every weight's SHA-256, dtype and shape equal" % align)
        expect(after["totals"]["referenced_bytes"] == before["totals"]["referenced_bytes"],
               "compacted: referenced bytes unchanged (aliases share their bytes)")
        starts = merged_starts(after["weights"])
        expect(starts and all(s % align == 0 for s in starts), "compacted: every range starts %d-aligned" % align)
        by_name = {w["name"]: w for w in after["weights"]}
        expect(by_name["W1"]["offset"] == by_name["W1b"]["offset"] == by_name["C"]["offset"],
               "compacted: the alias and the overlapping tensor still share W1's bytes")
        rc, out, err = cli("verify", out_model)
        expect(rc == 0 and "ok" in out, "verify the compacted model: checksums match (rc %d; %s)" % (rc, out.strip()))

        # The .onnx: the original, external_data entries aside, byte for byte.
        original = onnx.load(model, load_external_data=False)
        written = onnx.load(out_model, load_external_data=False)
        def tensors(m):
            out = list(m.graph.initializer)
            out += [a.t for n in m.graph.node for a in n.attribute if a.HasField("t")]
            return out
        for a, b in zip(tensors(original), tensors(written)):
            del a.external_data[:]
            a.external_data.extend(b.external_data)
        raw = open(out_model, "rb").read()
        expect(original.SerializeToString() == raw,
               "compacted .onnx: only external_data entries changed, everything else byte for byte")
        entries = {t.name: {e.key: e.value for e in t.external_data} for t in written.graph.initializer
                   if t.data_location == 1}
        expect("length" in entries["C"] and entries["W2"]["location"] == "extra/second.bin" and
               os.path.isfile(os.path.join(out_dir, "extra", "second.bin")),
               "compacted .onnx: a missing length written, a data file in a subfolder kept there")
        leftovers = [n for n in os.listdir(out_dir) if n.startswith(".")]
        expect(not leftovers, "compact leaves no temporaries (%s)" % leftovers)



def test_ort(cli, work, node_modules, ort_script):
    """ONNX Runtime: the same outputs from the original and the compacted model."""
    if not os.path.isdir(os.path.join(node_modules, "onnxruntime-node")):
        skip("%s/onnxruntime-node is missing (tools/dev deps installs it)" % node_modules)
    node = shutil.which("node")
    if node is None:
        skip("node is not on PATH")
    src = os.path.join(work, "ort_src")
    shutil.rmtree(src, ignore_errors=True)
    os.makedirs(src)
    model = write_onnx_model(src)
    out_dir = os.path.join(work, "ort_out")
    shutil.rmtree(out_dir, ignore_errors=True)
    rc, doc, err = compact(cli, model, out_dir)
    if not expect(rc == 0, "compact the ONNX model (%d; %s)" % (rc, err.strip())):
        return
    out_model = os.path.join(out_dir, "model.onnx")
    proc = subprocess.run([node, ort_script, node_modules, "X", "2x64", model, out_model],
                          capture_output=True, text=True, timeout=120)
    if not expect(proc.returncode == 0, "ONNX Runtime runs both models (%s)" % proc.stderr.strip()[-400:]):
        return
    res = json.loads(proc.stdout)
    a, b = res[model], res[out_model]
    expect(set(a) == {"Y", "Z"} and len(a["Y"]["data"]) == 32 and len(a["Z"]["data"]) == 64,
           "ONNX Runtime: both outputs of the original model computed")
    expect(a == b, "ONNX Runtime: identical outputs from the original and the compacted model")
    # The dead bytes matter: a model pointing at the wrong offsets would compute something else.
    expect(any(v != 0 for v in a["Y"]["data"]), "ONNX Runtime: the outputs are not all zero")


def test_corpus(cli, work, gen):
    """Every model of the ONNX corpus (tools/gen/make_test_models.py: the
    orphaned prefix, aliases and overlaps, a blob two models share, subgraphs,
    Constants, every dtype, external_data keys): compacted at --align 1, no
    byte dead, the same SHA-256 per weight, verify passing."""
    src = os.path.join(work, "corpus")
    shutil.rmtree(src, ignore_errors=True)
    proc = subprocess.run([sys.executable, os.path.join(gen, "make_test_models.py"), src],
                          capture_output=True, text=True, timeout=300)
    if not expect(proc.returncode == 0,
                  "make_test_models.py (%s)" % (proc.stderr.strip()[-300:] if proc.returncode else "")):
        return
    models = sorted(os.path.join(d, f) for d in (os.path.join(src, e) for e in os.listdir(src)) if os.path.isdir(d)
                    for f in os.listdir(d) if f.endswith(".onnx"))
    expect(len(models) >= 20, "the corpus has its models (%d)" % len(models))
    for model in models:
        name = os.path.splitext(os.path.basename(model))[0]
        before, err = inspect(cli, model)
        if before is None:
            continue  # a model ballast refuses to open is not this test's
        out_dir = os.path.join(work, "corpus_out", name)
        shutil.rmtree(out_dir, ignore_errors=True)
        rc, doc, err = compact(cli, model, out_dir, "--align", 1)
        if not expect(rc == 0, "compact %s: exit 0 (%d; %s)" % (name, rc, err.strip())):
            continue
        after, err = inspect(cli, os.path.join(out_dir, os.path.basename(model)))
        rc, out, verr = cli("verify", os.path.join(out_dir, os.path.basename(model)))
        expect(after is not None and after["totals"]["unreferenced_bytes"] == 0 and same_weights(before, after) and
               rc == 0 and doc["bytes_after"] <= doc["bytes_before"] + 64,
               "compact %s: no dead bytes, the same weights and hashes, verify passes (%s%s)" %
               (name, err.strip(), out.strip()[-200:] if rc else ""))


def test_refusals(cli, work):
    src = os.path.join(work, "refuse_src")
    shutil.rmtree(src, ignore_errors=True)
    os.makedirs(src)
    model = write_onnx_model(src)
    out_dir = os.path.join(work, "refuse_out")
    shutil.rmtree(out_dir, ignore_errors=True)
    rc, out, err = cli("compact", model, out_dir)
    expect(rc == 0 and "saved" in out and "3 files written" in out,
           "compact (text): exit 0 and a summary (%s)" % out.strip().replace("\n", " | "))

    rc, out, err = cli("compact", model, out_dir)
    expect(rc == 2 and one_line_error(err, "already holds", out_dir),
           "compact into an OUT_DIR that has the files: exit 2, one line naming the path (%d; %s)" % (rc, err.strip()))
    rc, out, err = cli("compact", model, src)
    expect(rc == 2 and one_line_error(err, "own directory", src),
           "compact into the model's own folder: exit 2, one line (%d; %s)" % (rc, err.strip()))
    link = os.path.join(work, "refuse_link")
    if os.path.lexists(link):
        os.unlink(link)
    os.symlink(src, link)
    rc, out, err = cli("compact", model, link)
    expect(rc == 2 and one_line_error(err, "own directory"),
           "compact into a symlink to the model's folder: exit 2, one line (%d; %s)" % (rc, err.strip()))
    # An OUT_DIR whose model.onnx is a hard link to the input, or whose
    # weights.bin is a symlink to the input's.
    for what, make in (("model.onnx", os.link), ("weights.bin", os.symlink)):
        same = os.path.join(work, "refuse_same")
        shutil.rmtree(same, ignore_errors=True)
        os.makedirs(same)
        make(os.path.join(src, what), os.path.join(same, what))
        rc, out, err = cli("compact", model, same)
        expect(rc == 2 and one_line_error(err, "input itself", what),
               "compact over the input's own %s (%s): exit 2, one line (%d; %s)" % (what, make.__name__, rc, err.strip()))
        expect(sorted(os.listdir(same)) == [what], "  ... and nothing written beside it")
        shutil.rmtree(same)
    for bad in ("48", "0", "3", "-64", str(1 << 31)):
        fresh = os.path.join(work, "refuse_align")
        shutil.rmtree(fresh, ignore_errors=True)
        rc, out, err = cli("compact", model, fresh, "--align", bad)
        expect(rc == 2 and one_line_error(err, "power of two") and not os.path.exists(fresh),
               "compact --align %s: exit 2, one line, nothing written (%d; %s)" % (bad, rc, err.strip()))

    # A model compact cannot copy whole: nothing is left behind.
    sp_src = os.path.join(work, "sparse_src")
    shutil.rmtree(sp_src, ignore_errors=True)
    os.makedirs(sp_src)
    sp_model = write_onnx_model(sp_src, sparse=True)
    sp_out = os.path.join(work, "sparse_out")
    shutil.rmtree(sp_out, ignore_errors=True)
    rc, out, err = cli("compact", sp_model, sp_out)
    expect(rc == 2 and one_line_error(err, "unsupported") and not os.path.exists(sp_out),
           "compact of external sparse values: exit 2, one line, no partial outputs (%d; %s)" % (rc, err.strip()))
    fn_src = os.path.join(work, "function_src")
    shutil.rmtree(fn_src, ignore_errors=True)
    os.makedirs(fn_src)
    fn_model = write_onnx_model(fn_src, function=True)
    # inspect says what compact will refuse: the function is listed and one
    # note says its Constant's external bytes count as dead.
    fn_doc, err = inspect(cli, fn_model)
    if expect(fn_doc is not None, "inspect the function model (%s)" % err.strip()):
        expect(fn_doc["functions"] == [{"domain": "test.fn", "name": "AddConst", "nodes": 2}],
               "inspect --json lists the model-local function (got %r)" % fn_doc["functions"])
        notes = [n for n in fn_doc["notes"] if "model-local function" in n["message"]]
        expect(len(notes) == 1 and notes[0]["tensor"] == "test.fn:AddConst" and "'test.fn:AddConst'" in
               notes[0]["message"] and "2 nodes in all" in notes[0]["message"] and "count as dead" in
               notes[0]["message"], "one note names the function, counts its nodes and says its bytes are dead (%r)"
               % notes)
    rc, out, err = cli("inspect", fn_model)
    expect(rc == 0 and "a model-local function ('test.fn:AddConst', 2 nodes in all)" in out,
           "inspect's text prints the function note (%d; %s)" % (rc, out[-600:]))
    fn_out = os.path.join(work, "function_out")
    shutil.rmtree(fn_out, ignore_errors=True)
    rc, out, err = cli("compact", fn_model, fn_out)
    expect(rc == 2 and one_line_error(err, "unsupported", "model-local function") and not os.path.exists(fn_out),
           "compact of a function's external Constant: exit 2, one line naming the cause, no partial outputs "
           "(%d; %s)" % (rc, err.strip()))


def one_external_model(folder, location, floats):
    """model.onnx whose only weight, `floats` float32s, lives in `location`."""
    os.makedirs(folder, exist_ok=True)
    w = np.arange(floats, dtype=np.float32).reshape(-1, 16)
    with open(os.path.join(folder, location), "wb") as f:
        f.write(b"\xaa" * 4096 + w.tobytes())  # a dead prefix, so the copy differs
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["X", "W"], ["Y"], name="mm")], "compact_writes",
        [helper.make_tensor_value_info("X", TensorProto.FLOAT, [1, w.shape[0]])],
        [helper.make_tensor_value_info("Y", TensorProto.FLOAT, [1, 16])],
        initializer=[external("W", w, location, 4096)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    path = os.path.join(folder, "model.onnx")
    with open(path, "wb") as f:
        f.write(model.SerializeToString())
    return path


def files_under(folder):
    return sorted(os.path.relpath(os.path.join(d, n), folder) for d, _, names in os.walk(folder) for n in names)


def test_writes(cli, work):
    """What a compact leaves on disk when the write goes wrong, and names a
    write must still handle."""
    import resource
    import signal
    import time
    src = os.path.join(work, "writes_src")
    shutil.rmtree(src, ignore_errors=True)
    model = write_onnx_model(src)
    listing = files_under(src)

    # OUT_DIR reaching the model's folder through a folder that does not
    # exist yet: it was checked before the folder was made, so the copy was
    # written beside the model (only RENAME_NOREPLACE kept the inputs).
    through = os.path.join(src, "new", "..")
    rc, out, err = cli("compact", model, through)
    expect(rc == 2 and one_line_error(err, "own directory"),
           "compact into model_dir/new/..: exit 2, one line (%d; %s)" % (rc, err.strip()))
    expect(files_under(src) == listing and not os.path.exists(os.path.join(src, "new")),
           "  ... and nothing written or made beside the model (%s)" % files_under(src))

    # A data file name of 250 bytes (under NAME_MAX): its temporary, the
    # name plus a suffix, used to be too long to create.
    long_src = os.path.join(work, "writes_long")
    shutil.rmtree(long_src, ignore_errors=True)
    long_name = "w" * 246 + ".bin"
    long_model = one_external_model(long_src, long_name, 256)
    long_out = os.path.join(work, "writes_long_out")
    shutil.rmtree(long_out, ignore_errors=True)
    rc, out, err = cli("compact", long_model, long_out)
    before, after = inspect(cli, long_model)[0], inspect(cli, os.path.join(long_out, "model.onnx"))[0]
    expect(rc == 0 and after is not None and same_weights(before, after) and
           sorted(os.listdir(long_out)) == sorted(["model.onnx", long_name]),
           "compact of a 250-byte data file name: exit 0, the same weights (%d; %s)" % (rc, err.strip()))

    # A file size limit (RLIMIT_FSIZE) with SIGXFSZ at its default action:
    # the signal used to kill the run, leaving its temporary in OUT_DIR.
    limited = os.path.join(work, "writes_limit")
    shutil.rmtree(limited, ignore_errors=True)
    limit = lambda: resource.setrlimit(resource.RLIMIT_FSIZE, (4096, 4096))
    proc = subprocess.run([cli.ballast, "compact", model, limited], capture_output=True, text=True, timeout=120,
                          preexec_fn=limit)
    expect(proc.returncode == 2 and one_line_error(proc.stderr, "io", "too large",
                                                   "file=" + os.path.join(limited, "weights.bin")),
           "compact past a file size limit: exit 2, one line naming the output (%d; %s)"
           % (proc.returncode, proc.stderr.strip()))
    expect(not os.path.exists(limited), "  ... and nothing left behind (%s)" % (
        files_under(limited) if os.path.exists(limited) else ""))

    # SIGTERM while the data file is written: no temporary (nor any file)
    # is left. Whether the signal lands mid-write depends on the machine's
    # speed: a run that finished first is retried with a larger model.
    for megabytes in (64, 256):
        big_src = os.path.join(work, "writes_big")
        shutil.rmtree(big_src, ignore_errors=True)
        big_model = one_external_model(big_src, "big.bin", megabytes << 18)
        big_out = os.path.join(work, "writes_big_out")
        shutil.rmtree(big_out, ignore_errors=True)
        proc = subprocess.Popen([cli.ballast, "compact", big_model, big_out], stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 60
        while proc.poll() is None and time.monotonic() < deadline:
            if os.path.isdir(big_out) and any(n.endswith(".tmp") for n in os.listdir(big_out)):
                proc.send_signal(signal.SIGTERM)
                break
            time.sleep(0.001)
        rc = proc.wait(timeout=120)
        if rc == -signal.SIGTERM:
            left = files_under(big_out) if os.path.exists(big_out) else []
            expect(not left, "compact ended by SIGTERM mid-write: no file left in OUT_DIR (%s)" % left)
            break
        shutil.rmtree(big_out, ignore_errors=True)
    else:
        print("note: compact finished before SIGTERM landed twice; the signal case was not exercised")
    shutil.rmtree(big_src, ignore_errors=True)


def read_st_header(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        return n, json.loads(f.read(n))


def test_safetensors(cli, work, gen):
    src = os.path.join(work, "st_src")
    shutil.rmtree(src, ignore_errors=True)
    proc = subprocess.run([sys.executable, os.path.join(gen, "make_safetensors_models.py"), src],
                          capture_output=True, text=True, timeout=300)
    if not expect(proc.returncode == 0,
                  "make_safetensors_models.py (%s)" % (proc.stderr.strip()[-300:] if proc.returncode else "")):
        return
    index = os.path.join(src, "sharded", "model.safetensors.index.json")
    before, err = inspect(cli, index)
    if not expect(before is not None, "inspect the sharded checkpoint (%s)" % err.strip()):
        return
    expect(before["totals"]["unreferenced_bytes"] > 0, "the sharded checkpoint has dead bytes (orphan.weight)")
    out_dir = os.path.join(work, "st_out")
    shutil.rmtree(out_dir, ignore_errors=True)
    rc, doc, err = compact(cli, index, out_dir)
    if expect(rc == 0, "compact the sharded checkpoint: exit 0 (%d; %s)" % (rc, err.strip())):
        check_summary(doc, "compact sharded")
        out_index = os.path.join(out_dir, "model.safetensors.index.json")
        after, err = inspect(cli, out_index)
        if expect(after is not None, "inspect the compacted checkpoint (%s)" % err.strip()):
            expect(after["totals"]["unreferenced_bytes"] == 0, "compacted checkpoint: 0 dead bytes")
            expect(same_weights(before, after), "compacted checkpoint: every weight's SHA-256, dtype and shape equal")
            expect(after["metadata"] == before["metadata"], "compacted checkpoint: metadata kept")
        idx = json.load(open(out_index))
        orig = json.load(open(index))
        expect(idx["weight_map"] == orig["weight_map"] and
               idx["metadata"]["total_size"] == sum(w["bytes"] for w in before["weights"]),
               "compacted index: weight_map as before, metadata.total_size the tensors' bytes")
        ok = True
        for shard in set(idx["weight_map"].values()):
            n, header = read_st_header(os.path.join(out_dir, shard))
            ok &= (8 + n) % 8 == 0 and "orphan.weight" not in header
            ok &= set(k for k in header if k != "__metadata__") == {k for k, v in idx["weight_map"].items() if v == shard}
        expect(ok, "compacted shards: headers 8-aligned, only the tensors the index names")
        rc, out, err = cli("verify", out_index)
        expect(rc == 0, "verify the compacted checkpoint (%d; %s)" % (rc, err.strip()))

    holes = os.path.join(src, "holes.safetensors")
    before, err = inspect(cli, holes, "--allow-holes")
    out_dir = os.path.join(work, "st_holes_out")
    shutil.rmtree(out_dir, ignore_errors=True)
    rc, doc, err = compact(cli, holes, out_dir, "--allow-holes")
    if expect(before is not None and rc == 0, "compact a safetensors file with holes (%d; %s)" % (rc, err.strip())):
        check_summary(doc, "compact holes")
        after, err = inspect(cli, os.path.join(out_dir, "holes.safetensors"))
        expect(after is not None and after["totals"]["unreferenced_bytes"] == 0 and same_weights(before, after),
               "compacted holes.safetensors: opens without --allow-holes, 0 dead bytes, same hashes (%s)" % err.strip())



def training_model(folder, t_entries, w_offset=True):
    """model.onnx whose weight W (4x16 float32) is the first 256 bytes of
    weights.bin (its entry with or without an "offset" key), and whose
    training_info holds a tensor T with the external_data `t_entries`. The
    loader reads no training info, so only compact meets T's entries."""
    os.makedirs(folder, exist_ok=True)
    w = np.arange(64, dtype=np.float32).reshape(4, 16)
    with open(os.path.join(folder, "weights.bin"), "wb") as f:
        f.write(w.tobytes() + b"\xaa" * 100)

    def tensor(name, entries):
        t = TensorProto(name=name, data_type=TensorProto.FLOAT, dims=[4, 16])
        t.data_location = TensorProto.EXTERNAL
        for k, v in entries:
            e = t.external_data.add()
            e.key, e.value = k, v
        return t
    w_entries = [("location", "weights.bin")] + ([("offset", "0")] if w_offset else []) + [("length", "256")]
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["X", "W"], ["Y"], name="mm")], "compact_entries",
        [helper.make_tensor_value_info("X", TensorProto.FLOAT, [1, 4])],
        [helper.make_tensor_value_info("Y", TensorProto.FLOAT, [1, 16])],
        initializer=[tensor("W", w_entries)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    if t_entries is not None:
        info = model.training_info.add()
        info.initialization.CopyFrom(helper.make_graph([], "init", [], [], initializer=[tensor("T", t_entries)]))
    path = os.path.join(folder, "model.onnx")
    with open(path, "wb") as f:
        f.write(model.SerializeToString())
    return path


def test_entries(cli, work):
    """The external_data entries compact writes: no key the input lacked, and
    an offset or length that is not a 64-bit decimal refused, never read as
    0 (a tensor the loader does not read, in training_info, pointed at W's
    bytes after the rewrite)."""
    src = os.path.join(work, "entries_src")
    out_dir = os.path.join(work, "entries_out")
    for label, w_offset in (("with", True), ("without", False)):
        shutil.rmtree(src, ignore_errors=True)
        shutil.rmtree(out_dir, ignore_errors=True)
        model = training_model(src, None, w_offset=w_offset)
        rc, out, err = cli("compact", model, out_dir)
        keys = []
        if rc == 0:
            m = onnx.load(os.path.join(out_dir, "model.onnx"), load_external_data=False)
            keys = [e.key for e in m.graph.initializer[0].external_data]
        expected = ["location", "offset", "length"] if w_offset else ["location", "length"]
        expect(rc == 0 and keys == expected,
               "compact of a weight %s an \"offset\" entry keeps its keys as they were (%d; %s; %s)"
               % (label, rc, keys, err.strip()))

    t_at_w = [("location", "weights.bin"), ("offset", "0"), ("length", "256")]
    shutil.rmtree(src, ignore_errors=True)
    shutil.rmtree(out_dir, ignore_errors=True)
    rc, out, err = cli("compact", training_model(src, t_at_w), out_dir)
    expect(rc == 0, "compact of a training tensor on W's bytes: exit 0 (%d; %s)" % (rc, err.strip()))

    for key, value, phrase in (("offset", "abc", "offset 'abc' is not a decimal number"),
                               ("offset", "-1", "offset '-1' is not a decimal number"),
                               ("offset", "", "offset '' is not a decimal number"),
                               ("offset", "18446744073709551616", "offset '18446744073709551616' is not a decimal"),
                               ("offset", "99999999999999999999", "offset '99999999999999999999' is not a decimal"),
                               ("length", "25x", "length '25x' is not a decimal number"),
                               ("offset", "18446744073709551615", "offset 18446744073709551615 with length 256 of "
                                                                  "weights.bin runs past 2^64"),
                               ("offset", "18446744073709551360", "offset 18446744073709551360 with length 256 of "
                                                                  "weights.bin runs past 2^64")):
        entries = [(k, value if k == key else v) for k, v in t_at_w]
        shutil.rmtree(src, ignore_errors=True)
        shutil.rmtree(out_dir, ignore_errors=True)
        rc, out, err = cli("compact", training_model(src, entries), out_dir)
        expect(rc == 2 and one_line_error(err, "malformed", phrase, "tensor=T") and not os.path.exists(out_dir),
               "compact of a training tensor with %s %r: exit 2, one line, nothing written (%d; %s)"
               % (key, value, rc, err.strip()))
    # The last offset whose range still ends within 2^64 is not refused as past it.
    entries = [(k, "18446744073709551359" if k == "offset" else v) for k, v in t_at_w]
    shutil.rmtree(src, ignore_errors=True)
    rc, out, err = cli("compact", training_model(src, entries), out_dir)
    expect(rc == 2 and one_line_error(err, "unsupported", "bytes [18446744073709551359, 18446744073709551615)"),
           "compact of a training tensor ending at 2^64 - 1: refused as no weight's bytes (%d; %s)"
           % (rc, err.strip()))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ballast", required=True)
    ap.add_argument("--gen", required=True)
    ap.add_argument("--work", required=True)
    ap.add_argument("--node-modules", help="with --ort: the node_modules holding onnxruntime-node")
    ap.add_argument("--ort", action="store_true", help="only the ONNX Runtime comparison (exit 77 without it)")
    args = ap.parse_args()
    work = os.path.abspath(args.work)
    os.makedirs(work, exist_ok=True)
    cli = Cli(args.ballast)
    if args.ort:
        ort_script = os.path.join(os.path.dirname(os.path.abspath(__file__)), "ort_run.js")
        test_ort(cli, work, os.path.abspath(args.node_modules or "build/node/node_modules"), ort_script)
    else:
        test_onnx(cli, work)
        test_corpus(cli, work, args.gen)
        test_refusals(cli, work)
        test_writes(cli, work)
        test_entries(cli, work)
        test_safetensors(cli, work, args.gen)
    if FAILURES:
        print("%d check(s) failed" % len(FAILURES))
        return 1
    print("all checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
