#!/usr/bin/python3
"""CLI behaviour of `ballast inspect` and `ballast verify`: exit codes on good,
corrupted, truncated and hostile models; one-line errors naming what and
where; a well-formed --map SVG, never written over the model or half
written; verify catching a single flipped byte.

Exit 0 pass, 1 fail, 77 skipped (with the reason printed).
"""

import argparse
import json
import os
import shutil
import subprocess
import sys
import xml.etree.ElementTree as ET

from cli_check import FAILURES, expect, skip


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
# Model surgery: copies of the sample model with one thing broken.


def copy_sample(src_dir, dst_dir):
    shutil.rmtree(dst_dir, ignore_errors=True)
    shutil.copytree(src_dir, dst_dir)
    return os.path.join(dst_dir, "sample.onnx")


def external_entries(model):
    """name -> dict of external_data keys for every external initializer."""
    return {t.name: {e.key: e.value for e in t.external_data}
            for t in model.graph.initializer if t.data_location == 1}


def rewrite(model_path, tensor_name, **changes):
    import onnx
    model = onnx.load(model_path, load_external_data=False)
    for t in model.graph.initializer:
        if t.name != tensor_name:
            continue
        entries = {e.key: e.value for e in t.external_data}
        entries.update({k: str(v) for k, v in changes.items()})
        del t.external_data[:]
        for k, v in entries.items():
            e = t.external_data.add()
            e.key, e.value = k, v
    onnx.save_model(model, model_path)


def flip_byte(path, offset):
    with open(path, "r+b") as f:
        f.seek(offset)
        b = f.read(1)
        f.seek(offset)
        f.write(bytes([b[0] ^ 0x01]))


# ---------------------------------------------------------------------------


def test_good(cli, sample, work):
    rc, out, err = cli("inspect", sample)
    expect(rc == 0, "inspect sample: exit 0 (got %d; %s)" % (rc, err.strip()))
    expect("layer3.qweight" in out and "dead ranges" in out and "MiB" in out,
           "inspect sample: table lists weights, human sizes and dead ranges")

    rc, out, err = cli("inspect", "--json", sample)
    doc = json.loads(out) if rc == 0 else {}
    expect(rc == 0 and {"weights", "external_files", "totals"} <= set(doc), "inspect --json: required top-level keys")
    if doc:
        keys = {"name", "source", "dtype", "dims", "bytes", "location", "file", "offset", "length"}
        expect(all(keys <= set(w) for w in doc["weights"]), "inspect --json: every weight has the documented keys")
        expect(all("sha256" not in w for w in doc["weights"]), "inspect --json: no sha256 without --hash")
        f = doc["external_files"][0]
        expect({"path", "mapped_bytes", "referenced_bytes", "unreferenced_bytes", "dead_ranges"} <= set(f),
               "inspect --json: external file keys")
        expect(f["unreferenced_bytes"] * 2 == f["mapped_bytes"] and f["dead_ranges"] == [[0, f["unreferenced_bytes"]]],
               "inspect --json: the sample's orphaned prefix is exactly the first half (%r)" % f["dead_ranges"])
        b = doc.get("auto_budget") or {}
        t = doc["totals"]
        expect(b.get("external_bytes") == f["referenced_bytes"] and b.get("inline_bytes") == t["inline_bytes"]
               and b.get("source_bytes") == f["referenced_bytes"] + t["inline_bytes"]
               and b.get("derived_bytes", 0) > 0 and b.get("total_bytes") == b.get("source_bytes", 0) + b["derived_bytes"],
               "inspect --json: auto budget = referenced + inline + derived, the orphaned prefix not counted (%r)" % b)
    rc, out, err = cli("inspect", sample)
    expect(rc == 0 and "auto budget: " in out and "planned derivations)" in out,
           "inspect sample: the table shows the auto budget")

    rc, out, err = cli("derive", sample, "--backend", "cpu", "--json")
    d = json.loads(out) if rc == 0 else {}
    sw = d.get("source_weights", {})
    if expect(rc == 0 and sw, "derive --json on cpu: exit 0 and a source_weights object (got %d; %s)" % (rc, err.strip())):
        expect(sw["registered_files"] == 1 and sw["registered_ranges"] == 1
               and sw["registered_bytes"] == sw["referenced_bytes"] == sw["mapped_bytes"] // 2,
               "derive --json: cpu registers exactly the referenced half of the sample's data file (%r)" % sw)
        expect(d["device_after_teardown"] == {"live_allocations": 0, "live_registrations": 0}
               and d["teardown"]["ok"] and d["error"] is None and len(d["derivations"]) >= 3,
               "derive --json: derivations listed, teardown back to the baseline")
    rc, out, err = cli("derive", sample, "--backend", "cpu")
    expect(rc == 0 and " range(s); referenced " in out, "derive: the summary gives registered vs referenced bytes")

    rc, out, err = cli("verify", sample)
    expect(rc == 0 and "ok" in out, "verify sample: exit 0 (got %d; %s%s)" % (rc, out.strip(), err.strip()))

    svg = os.path.join(work, "map.svg")
    rc, out, err = cli("inspect", sample, "--map", svg)
    expect(rc == 0 and os.path.exists(svg), "inspect --map: exit 0 and the file exists")
    try:
        root = ET.parse(svg).getroot()
        ns = "{http://www.w3.org/2000/svg}"
        fills = {r.get("fill") for r in root.iter(ns + "rect")}
        texts = " ".join("".join(t.itertext()) for t in root.iter(ns + "text"))
        expect(root.tag == ns + "svg", "--map: root element is svg")
        expect(len(fills & {"#2f6fd0", "#e0452b"}) == 2, "--map: referenced and dead drawn in two colours")
        expect("referenced" in texts and "dead" in texts and "sample.weights" in texts,
               "--map: legend, file label and byte counts present")
    except ET.ParseError as e:
        expect(False, "--map: well-formed XML (%s)" % e)

    rc, out, err = cli("inspect", sample, "--map", "/nonexistent-dir/x.svg")
    expect(rc == 2 and one_line_error(err, "x.svg"), "--map to an unwritable path: exit 2, one line naming it")


def test_checksums(cli, sample_dir, work):
    import onnx
    model = onnx.load(os.path.join(sample_dir, "sample.onnx"), load_external_data=False)
    entries = external_entries(model)
    checked = [n for n, e in entries.items() if "checksum" in e]
    unchecked = [n for n, e in entries.items() if "checksum" not in e]
    if not expect(checked and unchecked, "sample has tensors with and without checksum"):
        return
    name = checked[0]
    e = entries[name]

    path = copy_sample(sample_dir, os.path.join(work, "flipped"))
    flip_byte(os.path.join(os.path.dirname(path), e["location"]), int(e["offset"]) + int(e["length"]) // 2)
    rc, out, err = cli("verify", path)
    expect(rc == 1 and name in out and "checksum" in out,
           "verify: one flipped byte in %s -> exit 1 naming the tensor (got %d: %s)" % (name, rc, out.strip()))
    rc, _, err = cli("inspect", path)
    expect(rc == 0, "inspect does not read weight bytes: a flipped byte still inspects (exit %d, %s)" % (rc, err.strip()))

    path = copy_sample(sample_dir, os.path.join(work, "flipped_dead"))
    flip_byte(os.path.join(os.path.dirname(path), e["location"]), 10)  # inside the orphaned prefix
    rc, out, _ = cli("verify", path)
    expect(rc == 0, "verify: a flipped byte in the dead prefix is not a failure (exit %d)" % rc)

    path = copy_sample(sample_dir, os.path.join(work, "bad_checksum"))
    rewrite(path, name, checksum="0" * 40)
    rc, out, _ = cli("verify", path)
    expect(rc == 1 and name in out, "verify: a wrong checksum entry -> exit 1 naming %s" % name)


def test_truncated(cli, sample_dir, work):
    path = copy_sample(sample_dir, os.path.join(work, "truncated_data"))
    data = os.path.join(os.path.dirname(path), "sample.weights")
    size = os.path.getsize(data)
    with open(data, "r+b") as f:
        f.truncate(size - 100)
    rc, out, err = cli("verify", path)
    expect(rc == 1, "verify: external data truncated by 100 bytes -> exit 1 (got %d: %s %s)"
           % (rc, out.strip(), err.strip()))
    rc, out, err = cli("inspect", path)
    expect(rc in (0, 2) and (rc == 0 or one_line_error(err, "out_of_bounds")),
           "inspect: truncated external data -> exit 0 or a one-line out_of_bounds error (got %d: %s)" % (rc, err.strip()))

    path = copy_sample(sample_dir, os.path.join(work, "truncated_onnx"))
    with open(path, "rb") as f:
        blob = f.read()
    with open(path, "wb") as f:
        f.write(blob[: len(blob) // 2])
    for command in ("inspect", "verify"):
        rc, _, err = cli(command, path)
        expect(rc == 2 and one_line_error(err, "malformed", "sample.onnx"),
               "%s: .onnx cut in half -> exit 2, one line naming malformed and the file (got %d: %s)"
               % (command, rc, err.strip()))


def test_hostile(cli, sample_dir, work):
    cases = [
        ("traversal", {"location": "../sample.weights"}, "path_escapes"),
        ("absolute", {"location": os.path.join(sample_dir, "sample.weights")}, "path_escapes"),
        ("missing_file", {"location": "no_such.weights"}, "not_found"),
        ("offset_overflow", {"offset": str(2**64 - 16)}, None),
        ("length_past_eof", {"length": str(2**40)}, None),
    ]
    for label, change, code in cases:
        path = copy_sample(sample_dir, os.path.join(work, "hostile_" + label))
        rewrite(path, "layer0.weight", **change)
        rc, out, err = cli("inspect", path)
        if code:
            expect(rc == 2 and one_line_error(err, code, "layer0.weight"),
                   "inspect %s: exit 2, one line naming %s and the tensor (got %d: %s)" % (label, code, rc, err.strip()))
        else:
            expect(rc == 2 and one_line_error(err, "layer0.weight"),
                   "inspect %s: exit 2, one line naming the tensor (got %d: %s)" % (label, rc, err.strip()))
            rc, out, err = cli("verify", path)
            expect(rc in (1, 2), "verify %s: non-zero exit (got %d)" % (label, rc))

    # Symlink escape: the data file is a link to a file outside the model folder.
    outside = os.path.join(work, "outside.weights")
    shutil.copy(os.path.join(sample_dir, "sample.weights"), outside)
    path = copy_sample(sample_dir, os.path.join(work, "hostile_symlink"))
    os.remove(os.path.join(os.path.dirname(path), "sample.weights"))
    os.symlink(outside, os.path.join(os.path.dirname(path), "sample.weights"))
    rc, _, err = cli("inspect", path)
    expect(rc == 2 and one_line_error(err, "path_escapes"),
           "inspect symlink escape: exit 2, one line naming path_escapes (got %d: %s)" % (rc, err.strip()))
    rc, _, err = cli("verify", "--allow-external-outside-model-dir", path)
    expect(rc == 2 and one_line_error(err, "path_escapes"),
           "verify --allow-external-outside-model-dir no longer admits any outside file (got %d: %s)" % (rc, err.strip()))

    # A Hugging Face cache: snapshots/rev/ holds symlinks into ../../blobs/.
    # The model file's real directory (blobs/) is admitted with the flag, nothing else.
    cache = os.path.join(work, "hf_cache")
    shutil.rmtree(cache, ignore_errors=True)
    os.makedirs(os.path.join(cache, "blobs"))
    os.makedirs(os.path.join(cache, "snapshots", "rev"))
    shutil.copy(os.path.join(sample_dir, "sample.onnx"), os.path.join(cache, "blobs", "m0"))
    shutil.copy(os.path.join(sample_dir, "sample.weights"), os.path.join(cache, "blobs", "w0"))
    os.symlink("../../blobs/m0", os.path.join(cache, "snapshots", "rev", "sample.onnx"))
    os.symlink("../../blobs/w0", os.path.join(cache, "snapshots", "rev", "sample.weights"))
    path = os.path.join(cache, "snapshots", "rev", "sample.onnx")
    rc, _, err = cli("inspect", path)
    expect(rc == 2 and one_line_error(err, "path_escapes", "allow_model_real_dir", "--allow-model-real-dir"),
           "inspect HF cache without the flag: path_escapes naming the option (got %d: %s)" % (rc, err.strip()))
    for flag in ("--allow-model-real-dir", "--allow-external-outside-model-dir"):
        rc, _, err = cli("verify", flag, path)
        expect(rc == 0, "verify %s accepts the HF cache layout (got %d: %s)" % (flag, rc, err.strip()))

    # The same layout for a sharded safetensors checkpoint, the form a
    # Hugging Face download takes: `derive` takes the flag too (it had none,
    # so no cached checkpoint could be derived), and the refusal names it.
    import struct
    st_cache = os.path.join(work, "hf_cache_st")
    shutil.rmtree(st_cache, ignore_errors=True)
    os.makedirs(os.path.join(st_cache, "blobs"))
    os.makedirs(os.path.join(st_cache, "snapshots", "rev"))
    weight = bytes(range(64))  # a [4, 4] float32 weight's bytes (any bytes: transpose moves them)
    header = json.dumps({"model.layers.0.self_attn.q_proj.weight":
                         {"dtype": "F32", "shape": [4, 4], "data_offsets": [0, 64]}}).encode()
    header += b" " * (-len(header) % 8)
    with open(os.path.join(st_cache, "blobs", "b0"), "wb") as f:
        f.write(struct.pack("<Q", len(header)) + header + weight)
    with open(os.path.join(st_cache, "blobs", "b1"), "w") as f:
        json.dump({"metadata": {"total_size": 64},
                   "weight_map": {"model.layers.0.self_attn.q_proj.weight": "model-00001-of-00001.safetensors"}}, f)
    os.symlink("../../blobs/b0", os.path.join(st_cache, "snapshots", "rev", "model-00001-of-00001.safetensors"))
    os.symlink("../../blobs/b1", os.path.join(st_cache, "snapshots", "rev", "model.safetensors.index.json"))
    path = os.path.join(st_cache, "snapshots", "rev", "model.safetensors.index.json")
    rc, _, err = cli("derive", "--backend", "cpu", path)
    expect(rc == 2 and one_line_error(err, "path_escapes", "allow_model_real_dir", "--allow-model-real-dir"),
           "derive HF cache checkpoint without the flag: path_escapes naming the option (got %d: %s)"
           % (rc, err.strip()))
    rc, out, err = cli("derive", "--backend", "cpu", "--allow-model-real-dir", path)
    expect(rc == 0 and "transpose" in out,
           "derive --allow-model-real-dir derives the HF cache checkpoint (got %d: %s)" % (rc, err.strip()))
    # Every command that opens a model takes the flag (and its older name):
    # refused without it, opened with it.
    for command in (["inspect"], ["verify"], ["load", "--backend", "cpu"],
                    ["replay", "--backend", "cpu", "--tokens", "1"]):
        rc, _, err = cli(*command, path)
        expect(rc == 2 and one_line_error(err, "path_escapes", "allow_model_real_dir", "--allow-model-real-dir"),
               "%s of the HF cache checkpoint without the flag: path_escapes naming the option (got %d: %s)"
               % (command[0], rc, err.strip()))
        for flag in ("--allow-model-real-dir", "--allow-external-outside-model-dir"):
            rc, _, err = cli(*command, flag, path)
            expect(rc == 0, "%s %s opens the HF cache checkpoint (got %d: %s)" % (command[0], flag, rc, err.strip()))

    # A safetensors file with a hole (bytes no tensor covers): the library's
    # refusal says --allow-holes opens it, so every command that opens a
    # model takes the flag (load, derive and replay refused it as unknown).
    holes = os.path.join(work, "holes.safetensors")
    header = json.dumps({"model.layers.0.self_attn.q_proj.weight": {"dtype": "F32", "shape": [4, 4],
                                                                    "data_offsets": [0, 64]},
                         "b": {"dtype": "U8", "shape": [8], "data_offsets": [72, 80]}}).encode()
    header += b" " * (-len(header) % 8)
    with open(holes, "wb") as f:
        f.write(struct.pack("<Q", len(header)) + header + bytes(range(64)) + b"holehole" + bytes(8))
    for command in (["inspect"], ["verify"], ["load", "--backend", "cpu"], ["derive", "--backend", "cpu"],
                    ["replay", "--backend", "cpu", "--tokens", "1"], ["load", "--comm", "local", "--world", "1"],
                    ["derive", "--comm", "local", "--world", "1"]):
        rc, _, err = cli(*command, holes)
        expect(rc == 2 and one_line_error(err, "malformed", "--allow-holes"),
               "%s of a file with a hole without the flag: malformed naming --allow-holes (got %d: %s)"
               % (" ".join(command), rc, err.strip()))
        rc, _, err = cli(*command, "--allow-holes", holes)
        expect(rc == 0, "%s --allow-holes opens the file with a hole (got %d: %s)" % (" ".join(command), rc, err.strip()))

    # A FIFO where the data file should be: refused, never opened for reading.
    path = copy_sample(sample_dir, os.path.join(work, "hostile_fifo"))
    os.remove(os.path.join(os.path.dirname(path), "sample.weights"))
    os.mkfifo(os.path.join(os.path.dirname(path), "sample.weights"))
    rc, _, err = cli("inspect", path)
    expect(rc == 2 and one_line_error(err), "inspect FIFO data file: exit 2, one line (got %d: %s)" % (rc, err.strip()))

    rc, _, err = cli("inspect", os.path.join(work, "does_not_exist.onnx"))
    expect(rc == 2 and one_line_error(err, "not_found", "does_not_exist.onnx"), "inspect missing model: exit 2 (%s)" % err.strip())
    rc, _, err = cli("inspect", work)
    expect(rc == 2 and one_line_error(err), "inspect a directory: exit 2, one line (got %d: %s)" % (rc, err.strip()))
    rc, _, _ = cli("inspect")
    expect(rc == 2, "inspect without MODEL: usage error exit 2")
    rc, _, _ = cli("verify", "--no-such-flag", "x.onnx")
    expect(rc == 2, "verify with an unknown flag: usage error exit 2")


def test_progress_bar(cli, work):
    """The bar shows on a terminal for large checksummed files, never in a pipe."""
    import hashlib
    import pty
    import onnx
    from onnx import TensorProto, helper
    folder = os.path.join(work, "progress")
    os.makedirs(folder, exist_ok=True)
    n = 80 << 20  # above the 64 MiB threshold; a sparse file of zeros
    with open(os.path.join(folder, "zeros.bin"), "wb") as f:
        f.truncate(n)
    digest = hashlib.sha1()
    chunk = bytes(1 << 20)
    for _ in range(n >> 20):
        digest.update(chunk)
    t = TensorProto(name="zeros", data_type=TensorProto.UINT8, dims=[n], data_location=TensorProto.EXTERNAL)
    for k, v in (("location", "zeros.bin"), ("offset", "0"), ("length", str(n)), ("checksum", digest.hexdigest())):
        e = t.external_data.add()
        e.key, e.value = k, v
    graph = helper.make_graph([helper.make_node("Identity", ["zeros"], ["y"])], "g", [],
                              [helper.make_tensor_value_info("y", TensorProto.UINT8, [n])], initializer=[t])
    path = os.path.join(folder, "progress.onnx")
    onnx.save_model(helper.make_model(graph), path)

    rc, out, err = cli("verify", path)
    expect(rc == 0 and "\r" not in err and err.strip() == "",
           "verify 80 MiB with stderr in a pipe: exit 0, no progress output (got %d, %r)" % (rc, err[:80]))

    master, slave = pty.openpty()
    proc = subprocess.Popen([cli.ballast, "verify", path], stdout=subprocess.PIPE, stderr=slave)
    os.close(slave)
    seen = b""
    while True:
        try:
            data = os.read(master, 4096)
        except OSError:
            break
        if not data:
            break
        seen += data
    proc.wait(timeout=120)
    os.close(master)
    text = seen.decode(errors="replace")
    expect(proc.returncode == 0 and "verifying checksums [" in text and "100.0%" in text,
           "verify with stderr on a terminal: a progress bar reaching 100%% (got %d, %r)" % (proc.returncode, text[-120:]))


def test_amplification(cli, work):
    """Issue 24 §5: 400 MatMulNBits nodes over one 8 KiB B, each with scales of
    its own: a file of about 120 KB asking for 16 MB of derived values."""
    import numpy as np
    import onnx
    from onnx import TensorProto, helper, numpy_helper
    d = os.path.join(work, "amplification")
    os.makedirs(d, exist_ok=True)
    inits = [numpy_helper.from_array(np.full((16, 8, 64), 0x5a, dtype=np.uint8), "B")]
    nodes = []
    for i in range(400):
        inits.append(numpy_helper.from_array(np.full((128,), 0.01 * (i + 1), dtype=np.float16), "scales_%d" % i))
        nodes.append(helper.make_node("MatMulNBits", ["X", "B", "scales_%d" % i], ["y_%d" % i], domain="com.microsoft",
                                      K=1024, N=16, bits=4, block_size=128))
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("X", TensorProto.FLOAT, [1, 1024])],
                              [helper.make_tensor_value_info("y_0", TensorProto.FLOAT, [1, 16])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)])
    path = os.path.join(d, "amplified.onnx")
    onnx.save_model(model, path)
    for args, what in ((["derive", path, "--backend", "cpu"], "derive"),
                       (["derive", path, "--backend", "cpu", "--residency", "paged", "--budget", "auto"], "derive --residency")):
        rc, out, err = cli(*args)
        expect(rc == 2 and one_line_error(err, "unsupported:", "above the cap of 64x", "--max-amplification"),
               "%s: a plan 150x its referenced bytes is refused with the ratio (got %d: %s)" % (what, rc, err.strip()[-300:]))
    rc, out, err = cli("inspect", path, "--json")
    doc = json.loads(out) if rc == 0 else {}
    expect(rc == 0 and doc.get("auto_budget") is None and "above the cap" in doc.get("auto_budget_error", ""),
           "inspect --json: the auto budget is refused with the ratio, the rest is listed (got %d)" % rc)
    rc, out, err = cli("derive", path, "--backend", "cpu", "--max-amplification", "0", "--json")
    expect(rc == 0, "derive --max-amplification 0: the cap lifted, all 800 derivations run (got %d: %s)"
           % (rc, err.strip()[-200:]))


def test_map_writes(cli, sample_dir, work):
    """--map replaces the file it names whole or not at all, and never one
    the model is read from: `--map sample.onnx` used to truncate the model
    it had just read (and `--map` through a symlink to the data file the
    weights), and a write cut short left half an SVG under the name."""
    import resource
    src = os.path.join(work, "map_inputs")
    copy_sample(sample_dir, src)
    model = os.path.join(src, "sample.onnx")
    weights = os.path.join(src, "sample.weights")
    before = {p: open(p, "rb").read() for p in (model, weights)}
    link = os.path.join(src, "link.svg")
    os.symlink("sample.weights", link)
    for target, what in ((model, "the model itself"), (weights, "its data file"), (link, "a symlink to its data file")):
        rc, out, err = cli("inspect", model, "--map", target)
        expect(rc == 2 and one_line_error(err, "invalid_argument", "read from", "file=" + target),
               "inspect --map over %s: exit 2, one line naming it (%d; %s)" % (what, rc, err.strip()))
        expect(all(open(p, "rb").read() == b for p, b in before.items()), "  ... and the model's files are unchanged")
    expect(os.path.islink(link), "  ... and the symlink is left as it was")

    # A file size limit (RLIMIT_FSIZE, SIGXFSZ at its default) stops the
    # write: exit 2 naming the file, the earlier map whole, no temporary.
    svg = os.path.join(work, "map_limit", "map.svg")
    os.makedirs(os.path.dirname(svg), exist_ok=True)
    with open(svg, "w") as f:
        f.write("earlier map")
    limit = lambda: resource.setrlimit(resource.RLIMIT_FSIZE, (512, 512))
    proc = subprocess.run([cli.ballast, "inspect", os.path.join(sample_dir, "sample.onnx"), "--map", svg], capture_output=True, text=True,
                          timeout=120, preexec_fn=limit)
    expect(proc.returncode == 2 and one_line_error(proc.stderr, "io", "too large", "file=" + svg),
           "inspect --map past a file size limit: exit 2, one line naming the map (%d; %s)"
           % (proc.returncode, proc.stderr.strip()))
    expect(open(svg).read() == "earlier map" and os.listdir(os.path.dirname(svg)) == ["map.svg"],
           "  ... the earlier map is whole and no temporary is left (%s)" % os.listdir(os.path.dirname(svg)))
def test_rules_file(cli, sample, work):
    """`derive --rules FILE`: a rule's unknown key, and a known key with a
    value of the wrong type, are refused (exit 2, one line naming the file,
    the rule and the key), not read as another key."""
    rules = os.path.join(work, "rules.json")
    good = {"name": "all", "pattern": "*", "derive": ["transpose"]}
    for extra, what in (({"note": "x"}, "an unknown key with a string value"),
                        ({"unless_present": 5}, "unless_present that is not a string"),
                        ({"pattern": 5}, "a pattern that is not a string"),
                        ({"name": ["a"]}, "a name that is not a string")):
        rule = dict(good)
        rule.update(extra)
        with open(rules, "w") as f:
            json.dump({"rules": [rule]}, f)
        key = next(iter(extra))
        rc, out, err = cli("derive", sample, "--backend", "cpu", "--rules", rules)
        expect(rc == 2 and one_line_error(err, "invalid_argument", "rule 0: unknown key '%s'" % key, rules),
               "derive --rules with %s: exit 2, one line naming the rule and the key (%d; %s)"
               % (what, rc, err.strip()))
    with open(rules, "w") as f:
        json.dump({"rules": [dict(good, unless_present="no.such.weight")]}, f)
    rc, out, err = cli("derive", sample, "--backend", "cpu", "--rules", rules)
    expect(rc == 0, "derive --rules with a string unless_present: exit 0 (%d; %s)" % (rc, err.strip()))
    # Each name in "derive" plans that derivation, and only it.
    for kind in ("transpose", "to_f16", "quant_int8"):
        with open(rules, "w") as f:
            json.dump({"source": "rules", "rules": [dict(good, derive=[kind])]}, f)
        rc, out, err = cli("derive", sample, "--backend", "cpu", "--rules", rules, "--json")
        planned = json.loads(out)["plan"]["planned"] if rc == 0 else []
        got = sorted({(p["derivation"], p["source"]) for p in planned})
        expect(rc == 0 and got == [(kind, "all")],
               "derive --rules deriving %s plans %s alone, from the rule (%d; %s; %s)" % (kind, kind, rc, got, err.strip()))


def test_conformance_command(cli, work):
    """`ballast conformance` finds ballast-conformance beside its own
    executable and hands over (arguments, output and exit code are the
    runner's); without a runner there, or one it cannot run, exit 2 and one
    line naming the path. Run from a scratch prefix holding a link to the
    binary and a scripted runner, so no suite runs."""
    prefix = os.path.join(work, "conformance_prefix")
    shutil.rmtree(prefix, ignore_errors=True)
    os.makedirs(os.path.join(prefix, "bin"))
    os.symlink(os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(cli.ballast))), "lib"),
               os.path.join(prefix, "lib"))
    exe = os.path.join(prefix, "bin", "ballast")
    try:
        os.link(cli.ballast, exe)  # /proc/self/exe is then this path
    except OSError:
        shutil.copy2(cli.ballast, exe)
    runner = os.path.join(prefix, "bin", "ballast-conformance")
    local = Cli(exe)

    rc, out, err = local("conformance", "--backend", "cpu")
    expect(rc == 2 and one_line_error(err, "not installed", runner),
           "conformance without a runner beside it: exit 2, one line naming it (%d; %s)" % (rc, err.strip()))

    with open(runner, "w") as f:
        f.write('#!/bin/sh\nprintf "%s\\n" "$@" > "$0.args"\necho "runner output"\nexit 7\n')
    os.chmod(runner, 0o644)
    rc, out, err = local("conformance", "--backend", "cpu")
    expect(rc == 2 and one_line_error(err, "cannot run", runner),
           "conformance with a runner it cannot execute: exit 2, one line naming it (%d; %s)" % (rc, err.strip()))

    os.chmod(runner, 0o755)
    rc, out, err = local("conformance", "--backend", "cpu:threads=2", "--json", "--", "-tc=device weights*")
    with open(runner + ".args") as f:
        args = f.read().splitlines()
    expect(rc == 7 and out == "runner output\n" and args == ["--backend", "cpu:threads=2", "--json",
                                                              "-tc=device weights*"],
           "conformance hands over to the runner beside it: its arguments, output and exit code (%d; %r; %s)"
           % (rc, out, args))
    shutil.rmtree(prefix, ignore_errors=True)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--ballast", required=True)
    p.add_argument("--gen", required=True)
    p.add_argument("--work", required=True)
    a = p.parse_args()
    try:
        import onnx  # noqa: F401
    except ImportError as e:
        skip("%s has no onnx (%s); install python3-onnx" % (sys.executable, e))
    shutil.rmtree(a.work, ignore_errors=True)
    os.makedirs(a.work)
    sample_dir = os.path.join(a.work, "sample")
    gen = subprocess.run([sys.executable, os.path.join(a.gen, "make_sample_model.py"), sample_dir],
                         capture_output=True, text=True)
    if gen.returncode != 0 or gen.stdout:
        print("FAIL: make_sample_model.py exit %d, stdout %r\n%s" % (gen.returncode, gen.stdout, gen.stderr))
        return 1
    cli = Cli(a.ballast)
    sample = os.path.join(sample_dir, "sample.onnx")
    test_good(cli, sample, a.work)
    test_checksums(cli, sample_dir, a.work)
    test_truncated(cli, sample_dir, a.work)
    test_hostile(cli, sample_dir, a.work)
    test_progress_bar(cli, a.work)
    test_amplification(cli, a.work)
    test_map_writes(cli, sample_dir, a.work)
    test_conformance_command(cli, a.work)
    test_rules_file(cli, sample, a.work)
    print("%d check(s) failed" % len(FAILURES) if FAILURES else "all CLI checks passed")
    return 1 if FAILURES else 0


if __name__ == "__main__":
    sys.exit(main())
