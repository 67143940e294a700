#!/usr/bin/python3
"""make_test_models.py OUTDIR: the corpus of the differential (interop) tests.

Every model lives in its own folder OUTDIR/<name>/ next to <name>.expect.json,
the python-side view of it: for each weight its name, source kind
(initializer | constant | subgraph), dtype, dims, location, byte length and
the sha256 of its raw little-endian bytes (cross-checked against
onnx.numpy_helper, the real implementation, wherever onnx can express the
type), plus per external file its size, referenced and dead bytes. The
interop test compares `ballast inspect --json --hash` against these files.

Deterministic: the same onnx/numpy produce the same bytes on every run.
Models written through onnx.save_model are deleted first, because onnx
appends to an existing external-data file (the orphaned-prefix failure,
reproduced on purpose in `onnx_reexport_append`).
"""

import argparse
import json
import os
import shutil
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import extdata  # noqa: E402
from extdata import log  # noqa: E402

OPSETS = [helper.make_opsetid("", 17)]
RNG_SEED = 1234


def rng(salt):
    return np.random.default_rng(RNG_SEED + salt)


def make_model(nodes, initializers=(), name="ballast_test", inputs=None, outputs=None, sparse=()):
    graph = helper.make_graph(
        nodes, name,
        inputs or [helper.make_tensor_value_info("X", TensorProto.FLOAT, [1])],
        outputs or [helper.make_tensor_value_info("Y", TensorProto.FLOAT, [1])],
        initializer=list(initializers), sparse_initializer=list(sparse))
    model = helper.make_model(graph, producer_name="ballast make_test_models.py", opset_imports=OPSETS)
    model.ir_version = 8
    return model


def identity_chain(names):
    """Nodes that consume each weight, so the graph is not trivially dead."""
    return [helper.make_node("Identity", [n], ["use_" + n]) for n in names]


class Corpus:
    def __init__(self, outdir):
        self.outdir = outdir
        self.written = []

    def folder(self, name):
        path = os.path.join(self.outdir, name)
        shutil.rmtree(path, ignore_errors=True)
        os.makedirs(path)
        return path

    def finish(self, name, model_path, **extra):
        doc = extdata.expectation(model_path, extra)
        doc["model"] = os.path.relpath(model_path, os.path.join(self.outdir, name))
        with open(os.path.join(self.outdir, name, name + ".expect.json"), "w") as f:
            json.dump(doc, f, indent=1, sort_keys=True)
        self.written.append(name)
        dead = sum(x["unreferenced_bytes"] for x in doc["external_files"])
        log("  %-28s %3d weights, %d external files, %d dead bytes"
            % (name, len(doc["weights"]), len(doc["external_files"]), dead))

    def save_with_onnx(self, name, model, **save_kwargs):
        folder = self.folder(name)
        path = os.path.join(folder, name + ".onnx")
        loc = save_kwargs.get("location")
        if loc and os.path.dirname(loc):
            os.makedirs(os.path.join(folder, os.path.dirname(loc)), exist_ok=True)
        onnx.save_model(model, path, **save_kwargs)
        onnx.checker.check_model(path)
        self.finish(name, path)

    def save_plain(self, name, model, folder=None, check=True, **extra):
        folder = folder or self.folder(name)
        path = os.path.join(folder, name + ".onnx")
        onnx.save_model(model, path)
        if check:
            onnx.checker.check_model(path)
        self.finish(name, path, **extra)
        return path


# ---------------------------------------------------------------------------
# Models written by onnx's own external-data writer


def mixed_initializers(salt):
    r = rng(salt)
    arrays = {
        "w_big_f32": (r.standard_normal((64, 48))).astype(np.float32),
        "w_f16": (r.standard_normal((32, 40))).astype(np.float16),
        "w_i64": r.integers(-2**40, 2**40, size=(300,), dtype=np.int64),
        "w_small_f32": r.standard_normal((7,)).astype(np.float32),
        "w_u8": r.integers(0, 255, size=(50, 50), dtype=np.uint8),
        "w_scalar": np.array(3.5, dtype=np.float64),
    }
    return [numpy_helper.from_array(a, n) for n, a in arrays.items()]


def onnx_written_models(c):
    inits = mixed_initializers(1)
    names = [t.name for t in inits]
    c.save_with_onnx("onnx_one_file", make_model(identity_chain(names), inits),
                     save_as_external_data=True, all_tensors_to_one_file=True,
                     location="one_file.data", size_threshold=1024)

    inits = mixed_initializers(2)
    c.save_with_onnx("onnx_many_files", make_model(identity_chain(names), inits),
                     save_as_external_data=True, all_tensors_to_one_file=False, size_threshold=0)

    inits = mixed_initializers(3)
    c.save_with_onnx("onnx_threshold_large", make_model(identity_chain(names), inits),
                     save_as_external_data=True, all_tensors_to_one_file=True,
                     location="large_only.data", size_threshold=10000)

    inits = mixed_initializers(4)
    c.save_with_onnx("onnx_threshold_zero", make_model(identity_chain(names), inits),
                     save_as_external_data=True, all_tensors_to_one_file=True,
                     location="everything.data", size_threshold=0)

    inits = mixed_initializers(5)
    c.save_with_onnx("onnx_subdir", make_model(identity_chain(names), inits),
                     save_as_external_data=True, all_tensors_to_one_file=True,
                     location="weights/nested/blob.bin", size_threshold=512)


def onnx_reexport_append(c):
    """onnx.save_model appends to an existing data file: saving a loaded model
    again to the same location leaves the first export as a dead prefix."""
    name = "onnx_reexport_append"
    folder = c.folder(name)
    path = os.path.join(folder, name + ".onnx")
    inits = mixed_initializers(6)
    model = make_model(identity_chain([t.name for t in inits]), inits)
    onnx.save_model(model, path, save_as_external_data=True, location="reexport.data", size_threshold=0)
    first_export = os.path.getsize(os.path.join(folder, "reexport.data"))
    again = onnx.load(path)  # pulls the external data back in
    onnx.save_model(again, path, save_as_external_data=True, location="reexport.data", size_threshold=0)
    onnx.checker.check_model(path)
    c.finish(name, path, expected_dead_bytes=first_export)
    log("    onnx's own re-export left an orphaned prefix of %d bytes" % first_export)


# ---------------------------------------------------------------------------
# Every data type this onnx knows, in each encoding


def sample_values(dt, r, n):
    """n values of ONNX type dt as a numpy array (bfloat16 as uint16 bit patterns)."""
    if dt == TensorProto.FLOAT:
        return r.standard_normal(n).astype(np.float32)
    if dt == TensorProto.DOUBLE:
        return r.standard_normal(n).astype(np.float64)
    if dt == TensorProto.FLOAT16:
        return (r.standard_normal(n) * 100).astype(np.float16)
    if dt == TensorProto.BFLOAT16:
        return (r.standard_normal(n).astype(np.float32).view(np.uint32) >> 16).astype(np.uint16)
    if dt == TensorProto.BOOL:
        return r.integers(0, 2, n).astype(np.bool_)
    if dt == TensorProto.COMPLEX64:
        return (r.standard_normal(n) + 1j * r.standard_normal(n)).astype(np.complex64)
    if dt == TensorProto.COMPLEX128:
        return (r.standard_normal(n) + 1j * r.standard_normal(n)).astype(np.complex128)
    np_type = onnx.mapping.TENSOR_TYPE_TO_NP_TYPE[dt]
    info = np.iinfo(np_type)
    return r.integers(info.min, info.max, n, dtype=np_type, endpoint=True)


def dtype_tensor(dt, name, dims, r, raw):
    n = int(np.prod(dims)) if dims else 1
    vals = sample_values(dt, r, n)
    if dt == TensorProto.BFLOAT16:
        if raw:
            t = TensorProto(name=name, data_type=dt, dims=dims)
            t.raw_data = vals.astype("<u2").tobytes()
            return t
        t = TensorProto(name=name, data_type=dt, dims=dims)
        t.int32_data.extend(int(v) for v in vals)
        return t
    if raw:
        return numpy_helper.from_array(vals.reshape(dims), name)
    if dt == TensorProto.FLOAT16:
        return helper.make_tensor(name, dt, dims, vals)  # make_tensor stores the bit patterns in int32_data
    return helper.make_tensor(name, dt, dims, vals.tolist(), raw=False)


KNOWN = dict(onnx.TensorProto.DataType.items())


def supported_dtypes():
    types = []
    for number in range(1, 24):
        name = extdata.DTYPE_NAMES[number]
        if number == TensorProto.STRING:
            continue  # string tensors are listed, not weights: see `strings`
        if number not in KNOWN.values():
            log("  skipped dtype %s (%d): onnx %s does not define it, so python cannot be the reference"
                % (name, number, onnx.__version__))
            continue
        types.append(number)
    return types


def dtype_models(c):
    types = supported_dtypes()
    shapes = [[5], [3, 7], [2, 3, 4], []]
    for raw, label in ((True, "dtypes_raw"), (False, "dtypes_typed")):
        r = rng(10 if raw else 11)
        inits = []
        for i, dt in enumerate(types):
            dims = shapes[i % len(shapes)]
            inits.append(dtype_tensor(dt, "%s_%s" % (label, extdata.DTYPE_NAMES[dt]), dims, r, raw))
        inits.append(dtype_tensor(TensorProto.FLOAT, label + "_empty", [0, 3], r, raw))
        model = make_model(identity_chain([t.name for t in inits]), inits)
        c.save_plain(label, model)

    # Every type again, each in external data (onnx writes raw_data out).
    r = rng(12)
    inits = [dtype_tensor(dt, "ext_" + extdata.DTYPE_NAMES[dt], [3, 5], r, True) for dt in types]
    c.save_with_onnx("dtypes_external", make_model(identity_chain([t.name for t in inits]), inits),
                     save_as_external_data=True, location="dtypes.data", size_threshold=0)


# ---------------------------------------------------------------------------
# Constant nodes, subgraphs, strings, sparse


def constant_nodes(prefix, r):
    f = r.standard_normal(6).astype(np.float32)
    return [
        helper.make_node("Constant", [], [prefix + "c_tensor_raw"],
                         value=numpy_helper.from_array(r.standard_normal((4, 4)).astype(np.float32))),
        helper.make_node("Constant", [], [prefix + "c_tensor_typed_i8"],
                         value=helper.make_tensor("t", TensorProto.INT8, [6], [-128, -1, 0, 1, 77, 127])),
        helper.make_node("Constant", [], [prefix + "c_tensor_f16"],
                         value=helper.make_tensor("t", TensorProto.FLOAT16, [3], [1.5, -2.25, 65504.0])),
        helper.make_node("Constant", [], [prefix + "c_value_float"], value_float=float(f[0])),
        helper.make_node("Constant", [], [prefix + "c_value_floats"], value_floats=[float(x) for x in f]),
        helper.make_node("Constant", [], [prefix + "c_value_int"], value_int=-42),
        helper.make_node("Constant", [], [prefix + "c_value_ints"], value_ints=[1, -2, 3, 2**40]),
        helper.make_node("Constant", [], [prefix + "c_value_string"], value_string=b"not a weight"),
    ]


def constants(c):
    r = rng(20)
    nodes = constant_nodes("", r)
    nodes.append(helper.make_node("Constant", [], ["c_value_strings"], value_strings=[b"a", b"bc"]))
    c.save_plain("constants", make_model(nodes))

    # Constant tensors moved to external data too (convert_attribute=True).
    r = rng(21)
    nodes = [helper.make_node("Constant", [], ["cx_big"],
                              value=numpy_helper.from_array(r.standard_normal((40, 40)).astype(np.float32))),
             helper.make_node("Constant", [], ["cx_small"], value_ints=[4, 5, 6])]
    init = numpy_helper.from_array(r.standard_normal((30, 30)).astype(np.float32), "cx_init")
    c.save_with_onnx("constants_external", make_model(nodes, [init]), save_as_external_data=True,
                     location="constants.data", size_threshold=0, convert_attribute=True)


def branch(name, r, with_constant):
    w = numpy_helper.from_array(r.standard_normal((8, 8)).astype(np.float32), name + "_w")
    nodes = [helper.make_node("Identity", [w.name], [name + "_out"])]
    if with_constant:
        nodes.append(helper.make_node("Constant", [], [name + "_const"], value_floats=[1.0, 2.0]))
    return helper.make_graph(nodes, name, [], [helper.make_tensor_value_info(name + "_out", TensorProto.FLOAT, [8, 8])],
                             initializer=[w])


def subgraphs(c, external):
    r = rng(30 if external else 31)
    cond = helper.make_tensor_value_info("cond", TensorProto.BOOL, [])
    then_g = branch("then_branch", r, True)
    else_g = branch("else_branch", r, False)
    if_node = helper.make_node("If", ["cond"], ["if_out"], then_branch=then_g, else_branch=else_g)

    # Loop body (iter, cond, carried) -> (cond, carried), with an initializer and a nested If.
    inner_if = helper.make_node("If", ["cond_in"], ["inner_out"],
                                then_branch=branch("inner_then", r, False),
                                else_branch=branch("inner_else", r, True))
    body_w = numpy_helper.from_array(r.standard_normal((8, 8)).astype(np.float32), "loop_body_w")
    body = helper.make_graph(
        [helper.make_node("Identity", ["cond_in"], ["cond_out"]),
         helper.make_node("Add", ["carried_in", "loop_body_w"], ["carried_out"]),
         inner_if],
        "loop_body",
        [helper.make_tensor_value_info("iter", TensorProto.INT64, []),
         helper.make_tensor_value_info("cond_in", TensorProto.BOOL, []),
         helper.make_tensor_value_info("carried_in", TensorProto.FLOAT, [8, 8])],
        [helper.make_tensor_value_info("cond_out", TensorProto.BOOL, []),
         helper.make_tensor_value_info("carried_out", TensorProto.FLOAT, [8, 8])],
        initializer=[body_w])
    trip = numpy_helper.from_array(np.array(3, dtype=np.int64), "trip_count")
    loop = helper.make_node("Loop", ["trip_count", "cond", "if_out"], ["loop_out"], body=body)

    # Scan body with its own initializer.
    scan_w = numpy_helper.from_array(r.standard_normal((8,)).astype(np.float32), "scan_body_w")
    scan_body = helper.make_graph(
        [helper.make_node("Add", ["s_in", "scan_body_w"], ["s_out"]),
         helper.make_node("Identity", ["s_out"], ["s_scan"])],
        "scan_body",
        [helper.make_tensor_value_info("s_in", TensorProto.FLOAT, [8]),
         helper.make_tensor_value_info("x_in", TensorProto.FLOAT, [8])],
        [helper.make_tensor_value_info("s_out", TensorProto.FLOAT, [8]),
         helper.make_tensor_value_info("s_scan", TensorProto.FLOAT, [8])],
        initializer=[scan_w])
    scan = helper.make_node("Scan", ["s0", "loop_out"], ["s_final", "scan_out"], body=scan_body, num_scan_inputs=1)
    s0 = numpy_helper.from_array(np.zeros(8, dtype=np.float32), "s0")

    model = make_model([if_node, loop, scan], [trip, s0], inputs=[cond],
                       outputs=[helper.make_tensor_value_info("s_final", TensorProto.FLOAT, [8])])
    if external:
        c.save_with_onnx("subgraphs_external", model, save_as_external_data=True,
                         location="subgraphs.data", size_threshold=0)
    else:
        c.save_plain("subgraphs", model)


def strings_and_sparse(c):
    s = helper.make_tensor("vocab", TensorProto.STRING, [3], [b"alpha", b"beta", b"gamma"])
    w = numpy_helper.from_array(np.arange(12, dtype=np.float32).reshape(3, 4), "dense_w")
    nodes = [helper.make_node("Identity", ["vocab"], ["vocab_out"]),
             helper.make_node("Identity", ["dense_w"], ["dense_out"]),
             helper.make_node("Constant", [], ["label"], value_string=b"hello")]
    c.save_plain("strings", make_model(nodes, [s, w]))

    values = numpy_helper.from_array(np.array([1.5, -2.0, 3.25], dtype=np.float32), "sparse_w")
    indices = numpy_helper.from_array(np.array([1, 5, 10], dtype=np.int64), "sparse_w_indices")
    sparse = helper.make_sparse_tensor(values, indices, [4, 4])
    dense = numpy_helper.from_array(np.ones((2, 2), dtype=np.float32), "dense_next_to_sparse")
    nodes = [helper.make_node("Identity", ["sparse_w"], ["sparse_out"]),
             helper.make_node("Identity", ["dense_next_to_sparse"], ["dense_out"])]
    c.save_plain("sparse", make_model(nodes, [dense], sparse=[sparse]))


# ---------------------------------------------------------------------------
# Hand-placed external data: exact layouts and exact dead bytes


def tensor_of(name, arr):
    return numpy_helper.from_array(arr, name)


def orphaned_prefix(c):
    """A blob re-exported by appending fresh tensors without truncating."""
    name = "orphaned_prefix"
    folder = c.folder(name)
    r = rng(40)
    old = [r.standard_normal((96, 64)).astype(np.float32), r.standard_normal((96,)).astype(np.float32),
           r.standard_normal((64, 32)).astype(np.float16)]
    new = [r.standard_normal((96, 64)).astype(np.float32), r.standard_normal((96,)).astype(np.float32),
           r.standard_normal((64, 32)).astype(np.float16)]
    blob = extdata.Blob(os.path.join(folder, "model.data"), "wb")
    for a in old:
        blob.append(a.tobytes())
    prefix = blob.tell()
    blob.close()
    blob = extdata.Blob(os.path.join(folder, "model.data"), "ab")
    inits = []
    for i, a in enumerate(new):
        offset, length = blob.append(a.tobytes())
        t = tensor_of("w%d" % i, a)
        extdata.set_external(t, "model.data", offset, length, checksum=extdata.sha1(a.tobytes()))
        inits.append(t)
    blob.close()
    c.save_plain(name, make_model(identity_chain([t.name for t in inits]), inits), folder=folder,
                 expected_dead_bytes=prefix)


def overlap_and_alias(c):
    """Aliased (identical) and overlapping ranges count once; gaps are dead."""
    name = "overlap"
    folder = c.folder(name)
    r = rng(41)
    payload = r.integers(0, 255, 8192, dtype=np.uint8).tobytes()
    blob = extdata.Blob(os.path.join(folder, "overlap.bin"), "wb")
    blob.append(payload)
    blob.close()

    def ext(tname, offset, length, dims, dt=TensorProto.UINT8):
        t = TensorProto(name=tname, data_type=dt, dims=dims)
        extdata.set_external(t, "overlap.bin", offset, length)
        return t

    inits = [
        ext("a", 0, 1024, [1024]),
        ext("a_alias", 0, 1024, [1024]),          # same range again
        ext("b_overlaps_a", 512, 1024, [1024]),   # [512, 1536)
        ext("c_f32", 2048, 1024, [256], TensorProto.FLOAT),  # gap [1536, 2048) is dead
        ext("d_inside_c", 2560, 256, [64], TensorProto.FLOAT),
        ext("e_tail", 6144, 1024, [32, 32]),      # [3072, 6144) and [7168, 8192) dead
    ]
    c.save_plain(name, make_model(identity_chain([t.name for t in inits]), inits), folder=folder,
                 expected_dead_bytes=(2048 - 1536) + (6144 - 3072) + (8192 - 7168))


def shared_blob(c):
    """Two models share one data file; each sees the other's half as dead."""
    folder = c.folder("shared")
    r = rng(42)
    a = r.standard_normal((64, 64)).astype(np.float32)
    b = r.standard_normal((32, 64)).astype(np.float32)
    blob = extdata.Blob(os.path.join(folder, "shared.bin"), "wb")
    oa, la = blob.append(a.tobytes())
    ob, lb = blob.append(b.tobytes())
    blob.close()
    for model_name, arr, off, length, dead in (("shared_a", a, oa, la, lb), ("shared_b", b, ob, lb, la)):
        t = tensor_of(model_name + "_w", arr)
        extdata.set_external(t, "shared.bin", off, length)
        path = os.path.join(folder, model_name + ".onnx")
        onnx.save_model(make_model(identity_chain([t.name]), [t]), path)
        onnx.checker.check_model(path)
        doc = extdata.expectation(path, {"expected_dead_bytes": dead})
        doc["model"] = model_name + ".onnx"
        with open(os.path.join(folder, model_name + ".expect.json"), "w") as f:
            json.dump(doc, f, indent=1, sort_keys=True)
        c.written.append(model_name)
        log("  %-28s 1 weight, 1 shared file, %d dead bytes" % (model_name, dead))


def external_keys(c):
    """checksum entries, unknown keys (kept and reported), a missing length
    (computed from dtype x dims), and the same file in a subdirectory."""
    name = "external_keys"
    folder = c.folder(name)
    r = rng(43)
    arrays = [("k_checksum", r.standard_normal((20, 20)).astype(np.float32)),
              ("k_unknown_key", r.standard_normal((10,)).astype(np.float64)),
              ("k_no_length", r.integers(-100, 100, (7, 3), dtype=np.int16)),
              ("k_bf16_no_length", None)]
    blob = extdata.Blob(os.path.join(folder, "data", "keys.bin"), "wb")
    inits = []
    for tname, arr in arrays:
        blob.pad_to(64)
        if arr is None:
            t = TensorProto(name=tname, data_type=TensorProto.BFLOAT16, dims=[5, 3])
            data = r.integers(0, 65535, 15, dtype=np.uint16).astype("<u2").tobytes()
        else:
            t = tensor_of(tname, arr)
            data = arr.tobytes()
        offset, length = blob.append(data)
        extdata.set_external(t, "data/keys.bin", offset, length,
                             write_length="no_length" not in tname,
                             checksum=extdata.sha1(data) if tname == "k_checksum" else None,
                             extra=[("x-exporter-hint", "kept")] if tname == "k_unknown_key" else ())
        inits.append(t)
    blob.close()
    c.save_plain(name, make_model(identity_chain([t.name for t in inits]), inits), folder=folder,
                 notes_must_mention=["k_unknown_key"])


def main(argv):
    ap = argparse.ArgumentParser(prog=os.path.basename(argv[0]), description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("outdir", help="the folder to write into (made if missing)")
    args = ap.parse_args(argv[1:])  # --help, and a usage error (exit 2) for anything else
    outdir = os.path.abspath(args.outdir)
    os.makedirs(outdir, exist_ok=True)
    log("test models (onnx %s, numpy %s) in %s" % (onnx.__version__, np.__version__, outdir))
    c = Corpus(outdir)
    onnx_written_models(c)
    onnx_reexport_append(c)
    dtype_models(c)
    constants(c)
    subgraphs(c, external=False)
    subgraphs(c, external=True)
    strings_and_sparse(c)
    orphaned_prefix(c)
    overlap_and_alias(c)
    shared_blob(c)
    external_keys(c)
    with open(os.path.join(outdir, "index.json"), "w") as f:
        json.dump(sorted(c.written), f, indent=1)
    log("%d models written" % len(c.written))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
