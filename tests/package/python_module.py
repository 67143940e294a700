#!/usr/bin/env python3
"""python_module.py STEP MOVED MODEL WORK: the installed Python module
(docs/python.md), one step of package_test.sh, run with only
MOVED/lib/python3/dist-packages on sys.path and no BALLAST_* variable, so
the module must find its libballast from where the moved prefix lies.

Steps: numpy, torch (each against `ballast derive --dump` on cpu), release
(and, with the cyclic collector off, that reference counting alone frees
what is dropped), misuse (and the CUDA/HIP export path on a stand-in
device, integer arguments checked before ctypes could wrap them,
`python3 -m ballast`'s exit codes and error line against the CLI's, and
the command lines of tools/gen), names (strings into C), conformance,
vulkan. Exit 0 passed, 1 failed, 77 skipped.
"""
import ctypes.util
import gc
import json
import os
import subprocess
import sys
import threading
import weakref

step, moved, model_path, work = sys.argv[1:5]

import numpy  # noqa: E402

import ballast  # noqa: E402

# The dump's file name of each output: <weight>.<kind><suffix>.npy (derivation_kinds.hpp).
SUFFIXES = {"repack_int4": (".words", ".scale_offset"), "repack_gguf_int4": (".words", ".scale_offset"),
            "quant_int8": (".codes", ".scales")}
failures = []


def expect(ok, what):
    print(("ok:   " if ok else "FAIL: ") + what)
    if not ok:
        failures.append(what)
    return ok


def done():
    if failures:
        sys.exit("%d check(s) failed: %s" % (len(failures), failures[0]))
    print("python %s: ok" % step)


def dump(path=None):
    """`ballast derive MODEL --backend cpu --dump DIR` of the moved install: {file name: array}."""
    out = os.path.join(work, "python-dump-" + step)  # steps may run at once (ctest -j)
    subprocess.run(["rm", "-rf", out], check=True)
    subprocess.run([os.path.join(moved, "bin", "ballast"), "derive", path or model_path, "--backend", "cpu", "--dump",
                    out], check=True, stdout=subprocess.DEVNULL)
    return {n: numpy.load(os.path.join(out, n)) for n in os.listdir(out)}


def compare_with_dump(path, take, as_numpy, strategy="upload"):
    """Every derived value of the model at `path`, pinned on cpu and taken
    by `take` (numpy.from_dlpack, torch.from_dlpack), is the dump's array,
    bit for bit. Returns the residency's plan."""
    dumped = dump(path)
    model = ballast.open_model(path)
    res = ballast.Residency(ballast.open_backend("cpu"), model, strategy=strategy)
    seen = []
    plan = res.derive(progress=lambda d, t: seen.append((d, t)))
    expect(len(plan) > 0 and seen[-1] == (len(plan), len(plan)), "%s: derive: %d values, progress to %s"
           % (os.path.basename(path), len(plan), seen[-1:]))
    compared = 0
    for d in plan:
        value = res.pin(d)
        for half, name in zip(value.halves, dump_names(d)):
            ref = dumped.get(name)
            if not expect(ref is not None, "%s is in the dump" % name):
                continue
            if step == "torch" and half.dtype in ("uint16", "uint32", "uint64"):
                # torch 1.13 (Debian 12) has no unsigned types past uint8: the numpy step checks these.
                print("note: torch has no %s: %s of %s left to the numpy step" % (half.dtype, d.kind, d.weight))
                compared += 1
                continue
            arr = as_numpy(take(half))
            same = arr.dtype == ref.dtype and arr.shape == ref.shape and arr.tobytes() == ref.tobytes()
            expect(same, "%s from_dlpack(%s of %s): %s%s == %s" % (step, d.kind, d.weight, arr.dtype,
                                                                   list(arr.shape), name))
            compared += 1
        value.close()
    expect(compared == len(dumped), "%s: every dumped file compared (%d of %d)"
           % (os.path.basename(path), compared, len(dumped)))
    return res, plan


def dump_names(d):
    suffixes = SUFFIXES.get(d.kind, ("",))
    return ["%s.%s%s.npy" % (d.weight, d.kind, s) for s in suffixes]


def mapped(path):
    """Whether `path` is mapped into this process now."""
    real = os.path.realpath(path)
    with open("/proc/self/maps") as f:
        return any(line.rstrip("\n").endswith(" " + real) for line in f)


expect(ballast.library_path().startswith(moved + "/lib/"), "libballast loaded from the moved prefix: %s"
       % ballast.library_path())
expect(ballast.c_api_version() >= ballast.API_VERSION, "C API version %d" % ballast.c_api_version())

if step in ("numpy", "torch"):
    if step == "torch":
        try:
            import torch
        except ImportError:
            print("skipped: python3-torch not installed")
            sys.exit(77)
        take = torch.from_dlpack
        as_numpy = lambda t: t.numpy()  # noqa: E731 (a CPU tensor over the same memory)
    else:
        take = numpy.from_dlpack
        as_numpy = lambda a: a  # noqa: E731
    model = ballast.open_model(model_path)
    weights = model.weights
    # Weights: in place in the mapping, the bytes as stored.
    for w in weights:
        arr = as_numpy(take(w))
        if w.file:  # external data: the file's bytes at the offset
            with open(w.file, "rb") as f:
                f.seek(w.offset)
                stored = f.read(w.bytes)
        else:  # inline in the model file: as ballast_model_read_weight copies it
            stored = w.read()
        ok = arr.nbytes == w.bytes and arr.tobytes() == stored and (w.file == "" or list(arr.shape) == list(w.dims))
        expect(ok, "%s from_dlpack(weight %s): %s%s, the bytes as stored" % (step, w.name, arr.dtype,
                                                                            list(arr.shape)))
        del arr
    w0 = model.weight("layer0.weight")
    view = as_numpy(take(w0))
    expect(view.__array_interface__["data"][0] != 0 and numpy.shares_memory(view, as_numpy(take(w0))),
           "two exports of one weight share memory (no copy)")
    del view
    # Derived values on the cpu backend: the dump's arrays, bit for bit.
    expect(ballast.open_backend("cpu").info.host_visible, "the cpu backend's memory is host-visible")
    res, plan = compare_with_dump(model_path, take, as_numpy)
    # A transpose is the weight's own bytes, transposed.
    t = next(d for d in plan if d.weight == "layer0.weight" and d.kind == "transpose")
    with res.pin(t) as v:
        expect(numpy.array_equal(as_numpy(take(v)), as_numpy(take(w0)).T), "transpose == weight.T")
    if step == "numpy":
        # The cold start (ballast_residency_load): the referenced bytes read
        # once, every planned value built, the values the dump's.
        cold = ballast.Residency(ballast.open_backend("cpu"), model, strategy="upload")
        report = cold.load(engine="threads", read_cached=True, chunk_bytes=64 << 10)
        referenced = model.accounting.referenced_bytes
        expect(report.planned_bytes == referenced and report.read_bytes == referenced and report.engine == "threads"
               and report.cache == "drop" and report.derived_built == len(plan) and report.left_for_demand == 0,
               "load(): read %d of %d referenced bytes by %s, built %d of %d, page cache %s"
               % (report.read_bytes, referenced, report.engine, report.derived_built, len(plan), report.cache))
        dumped = dump()
        wrong = []
        for d in cold.plan:  # entries of this residency's model (plan's are another handle's)
            with cold.pin(d) as v:
                for half, name in zip(v.halves, dump_names(d)):
                    if numpy.from_dlpack(half).tobytes() != dumped[name].tobytes():
                        wrong.append(name)
        expect(not wrong and cold.stats.derived_builds == len(plan),
               "after load(), every pinned value is the dump's, none rebuilt (wrong: %s)" % wrong[:3])
        again = cold.load()
        expect(again.read_bytes == 0 and again.derived_built == 0 and again.already_resident > 0,
               "a second load() finds everything resident")
        for kwargs, code, what in (({"engine": "nvme"}, ballast.Code.INVALID_ARGUMENT, "an unknown engine"),
                                   ({"cache": "maybe"}, ballast.Code.INVALID_ARGUMENT, "an unknown cache policy"),
                                   ({"chunk_bytes": 1 << 40}, ballast.Code.INVALID_ARGUMENT, "a chunk past the cap")):
            try:
                cold.load(**kwargs)
                expect(False, "load(%s) refused: %s" % (kwargs, what))
            except ballast.BallastError as e:
                expect(e.code == code, "load(%s) refused: %s (%s)" % (kwargs, what, e))
        try:
            cold.load(queue_depth=2 ** 32)
            expect(False, "load(queue_depth=2**32) refused before ctypes")
        except (ValueError, OverflowError) as e:
            expect(True, "load(queue_depth=2**32) refused before ctypes (%s)" % e)
        cold.release()
    gen = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tools", "gen")
    models = os.path.join(work, "python-models-" + step)
    subprocess.run(["rm", "-rf", models], check=True)
    for script, sub in (("make_gguf_models.py", "gguf"), ("make_safetensors_models.py", "safetensors")):
        subprocess.run([sys.executable, os.path.join(gen, script), os.path.join(models, sub)], check=True,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    # GGUF blocks dequantized, and a checkpoint planned by the rules (no graph).
    compare_with_dump(os.path.join(models, "gguf/llama.gguf"), take, as_numpy, strategy="paged")
    compare_with_dump(os.path.join(models, "safetensors/sharded/model.safetensors.index.json"), take, as_numpy)
    # python3 -m ballast inspect names a GGUF weight's type as the command
    # line does (Q4_K, not the library's q4_k), in its text and its JSON.
    types_path = os.path.join(models, "gguf/types.gguf")

    def inspect_of(*command):
        return subprocess.run([*command, "inspect", types_path, "--json"], capture_output=True, text=True,
                              check=True).stdout

    py = json.loads(inspect_of(sys.executable, "-m", "ballast"))
    cli = json.loads(inspect_of(os.path.join(moved, "bin", "ballast")))
    py_types = {w["name"]: w.get("gguf_type") for w in py["weights"]}
    cli_types = {w["name"]: w.get("gguf_type") for w in cli["weights"]}
    text_lines = subprocess.run([sys.executable, "-m", "ballast", "inspect", types_path], capture_output=True,
                                text=True, check=True).stdout.splitlines()
    untyped = [n for n, t in py_types.items() if not any(line.split()[:2] == [n, t] for line in text_lines)]
    expect(py_types == cli_types and "Q4_K" in py_types.values() and "F32" in py_types.values() and not untyped,
           "python -m ballast inspect types.gguf: GGUF type names as the CLI's (%d weights; not in the text: %s)"
           % (len(py_types), untyped))
    if step == "numpy":
        # Every format and dtype ballast reads: each weight's .numpy() is its
        # bytes as stored (bfloat16 as uint16 bits, bool as bool, GGUF blocks
        # as uint8), in place in the mapping.
        for rel in ("gguf/types.gguf", "gguf/llama.gguf", "safetensors/dtypes.safetensors",
                    "safetensors/sharded/model.safetensors.index.json"):
            other = ballast.open_model(os.path.join(models, rel))
            ws = other.weights
            wrong = [w.name for w in ws if w.numpy().tobytes() != w.read()]
            kinds = sorted({str(w.numpy().dtype) for w in ws})
            expect(ws and not wrong, "%s (%s): %d weights' arrays are their bytes as stored (%s)%s"
                   % (rel, other.format, len(ws), ", ".join(kinds), "; wrong: %s" % wrong[:3] if wrong else ""))
            for w in ws:
                a = w.numpy()
                if w.dtype == "bfloat16":
                    expect(a.dtype == numpy.uint16 and list(a.shape) == list(w.dims), "%s: bfloat16 as uint16 bits"
                           % w.name)
                if w.dtype == "bool":
                    expect(a.dtype == numpy.bool_, "%s: bool as bool" % w.name)
                if w.dtype == "complex64":  # DLPack's kDLComplex, not the bytes
                    expect(a.dtype == numpy.complex64 and list(a.shape) == list(w.dims), "%s: complex64 as complex64"
                           % w.name)
            del other, ws
        # A pair kind keeps its second half when it holds no bytes: quant_int8
        # of MatMul's B [4, 0] has int8 codes [0, 4] and float scales [0],
        # each exported as an empty array (a plan's `second` came from its
        # size, and was None here).
        import onnx
        from onnx import TensorProto, helper, numpy_helper
        empty_b = numpy_helper.from_array(numpy.zeros((4, 0), numpy.float32), "B")
        graph = helper.make_graph([helper.make_node("MatMul", ["X", "B"], ["Y"])], "g",
                                  [helper.make_tensor_value_info("X", TensorProto.FLOAT, [1, 4])],
                                  [helper.make_tensor_value_info("Y", TensorProto.FLOAT, [1, 0])], [empty_b])
        empty_path = os.path.join(work, "python-empty-b.onnx")
        onnx.save(helper.make_model(graph), empty_path)
        empty = ballast.open_model(empty_path)
        quant = [d for d in empty.plan() if d.kind == "quant_int8"]
        expect(len(quant) == 1 and quant[0].second is not None and quant[0].second.bytes == 0
               and quant[0].second.dims == (0,) and quant[0].first.dims == (0, 4),
               "quant_int8 of an empty B: both halves planned (%s)" % quant)
        empty_res = ballast.Residency(ballast.open_backend("cpu"), empty)
        value = empty_res.pin(quant[0])
        shapes = [(h.dtype, numpy.from_dlpack(h).shape) for h in value.halves]
        expect(shapes == [("int8", (0, 4)), ("float", (0,))], "quant_int8 of an empty B pinned: %s" % shapes)
        del value
        empty_res.release()
        del empty_res, empty, quant
    if step == "torch":
        ten = torch.from_dlpack(w0)
        expect(tuple(ten.shape) == w0.dims and ten.dtype == torch.float32 and ten.device.type == "cpu",
               "a torch tensor of the weight: %s %s on %s" % (tuple(ten.shape), ten.dtype, ten.device))
        del ten
    done()

elif step == "release":
    model = ballast.open_model(model_path)
    backend = ballast.open_backend("cpu")
    res = ballast.Residency(backend, model, strategy="upload")
    plan = model.plan()
    t = next(d for d in plan if d.kind == "transpose")
    value = res.pin(t)
    expect(res.stats.pinned_bytes == t.first.bytes, "pinned: %d bytes" % res.stats.pinned_bytes)
    arr = value.numpy()
    copy = arr.copy()
    expect(ballast.live_exports() == 1, "one export alive")
    value.close()  # the Value's own pin goes; the array's stays
    expect(res.stats.pinned_bytes == t.first.bytes, "after value.close(): still pinned (%d bytes) for the array"
           % res.stats.pinned_bytes)
    refused = False
    try:
        res.release()
    except ballast.BallastError as e:
        refused = e.code == ballast.Code.INVALID_ARGUMENT
    expect(refused, "release() refused while an array reads a value")
    view = arr[1:3]  # a second consumer of the same memory
    del arr
    gc.collect()
    expect(ballast.live_exports() == 1 and res.stats.pinned_bytes == t.first.bytes,
           "a view keeps the pin after the array goes")
    expect(numpy.array_equal(view, copy[1:3]), "the view reads the value")
    del view
    gc.collect()
    expect(ballast.live_exports() == 0 and res.stats.pinned_bytes == 0,
           "last consumer gone: no pin left (pinned_bytes %d)" % res.stats.pinned_bytes)
    # A release from another thread while an export is being made, between
    # its pin and its count: it must be refused (it would free the value
    # under the array), never let through.
    racing = res.pin(t)
    in_window, go_on, made = threading.Event(), threading.Event(), {}
    pin_handle = res._pin_handle

    def held_pin(target):
        h = pin_handle(target)
        in_window.set()
        go_on.wait(10)
        return h

    res._pin_handle = held_pin
    exporter = threading.Thread(target=lambda: made.update(arr=numpy.from_dlpack(racing)))
    exporter.start()
    in_window.wait(10)
    racing.close()
    refused = False
    try:
        res.release()
    except ballast.BallastError as e:
        refused = e.code == ballast.Code.INVALID_ARGUMENT and "exported" in e.message
    go_on.set()
    exporter.join()
    del res._pin_handle
    expect(refused, "release() refused while another thread's export is being made")
    expect("arr" in made and numpy.array_equal(made["arr"], copy) and res.stats.pinned_bytes == t.first.bytes,
           "that export reads the value, pinned")
    made.clear()
    gc.collect()
    expect(ballast.live_exports() == 0 and res.stats.pinned_bytes == 0, "its array gone: no pin left")
    del racing, exporter, held_pin, pin_handle  # they name the residency (and so the model)
    td = res.release()
    expect(td.failed_frees == 0 and td.bytes_freed > 0, "released: %s" % (td,))
    expect(backend.counters.live_allocations == 0, "no device allocation left")

    # Every Python object freed while a torch-free consumer holds the memory:
    # the capsule's own pin and model handle keep it.
    res2 = ballast.Residency(backend, model, strategy="upload")
    with res2.pin(t) as v:
        held = v.numpy()
    del v, value  # closed Values still name their residency; drop them too
    weight = model.weight("layer0.weight").numpy()
    weight_copy = weight.copy()
    data_file = model.weight("layer0.weight").file
    del res2, model, plan, t, res
    gc.collect()
    expect(backend.counters.live_allocations > 0, "the array's value is still allocated after the residency, "
           "plan and model objects went (%d allocation(s))" % backend.counters.live_allocations)
    expect(numpy.array_equal(held, copy), "the array reads the value after its Python objects went")
    expect(mapped(data_file), "the data file is still mapped while the weight's array lives")
    expect(numpy.array_equal(weight, weight_copy), "the weight's array reads the mapping after the model went")
    del held
    gc.collect()
    expect(backend.counters.live_allocations == 0, "the last array gone: the value freed")
    del weight
    gc.collect()
    expect(not mapped(data_file), "the last weight array gone: the file unmapped")
    expect(ballast.live_exports() == 0, "no export left")

    # A consumer that refuses a capsule (NumPy has no bfloat16) sets its
    # error, then drops the capsule. Destroying it there ran the capsule's
    # destructor (Python, through ctypes) under the pending error: NumPy's
    # "Unsupported dtype" became a SystemError, and the pin and the export
    # were never released, so release() was refused for good.
    bf16_path = os.path.join(work, "python-release-bf16.safetensors")
    header = json.dumps({"w": {"dtype": "BF16", "shape": [2, 2], "data_offsets": [0, 8]}}).encode()
    header += b" " * (-len(header) % 8)
    with open(bf16_path, "wb") as f:
        f.write(len(header).to_bytes(8, "little") + header + bytes(range(8)))
    bf16_model = ballast.open_model(bf16_path)
    bf16_res = ballast.Residency(backend, bf16_model, strategy="upload")
    for label, target in (("a pinned bfloat16 value", lambda: bf16_res.pin("w")),
                          ("a bfloat16 weight", lambda: bf16_model.weight("w"))):
        source = target()
        try:
            numpy.from_dlpack(source)
            expect(False, "numpy.from_dlpack of %s: accepted" % label)
        except Exception as e:  # noqa: BLE001 - which exception is the point
            expect(type(e) is RuntimeError and "Unsupported dtype" in str(e),
                   "numpy.from_dlpack of %s: NumPy's own error reaches the caller, not %s: %s"
                   % (label, type(e).__name__, e))
        del source
        expect(ballast.live_exports() == 0 and bf16_res.stats.pinned_bytes == 0,
               "the refused capsule of %s is released (%d export(s), %d bytes pinned)"
               % (label, ballast.live_exports(), bf16_res.stats.pinned_bytes))
        # The same while an exception of the caller's own unwinds past an untaken capsule.
        try:
            capsule = target().__dlpack__()
            raise KeyError("unwinding")
        except KeyError as e:
            expect(e.args == ("unwinding",), "the caller's exception survives an untaken capsule")
        del capsule
        expect(ballast.live_exports() == 0, "an untaken capsule dropped: released (%d)" % ballast.live_exports())
    try:
        bf16_res.release()
    except ballast.BallastError as e:
        expect(False, "release() after a refused capsule: %s" % e.message)
    del bf16_res, bf16_model

    # Reference counting alone frees what a program drops: the cyclic
    # collector is off, so an object that points back at its owner (a Value
    # and its halves did) would keep its pin, or its residency, for good.
    gc.collect()
    gc.disable()
    model = ballast.open_model(model_path)
    backend = ballast.open_backend("cpu")
    paged = ballast.Residency(backend, model, strategy="paged", budget=2 << 20)
    x = paged.pin("layer0.weight")
    pinned = paged.stats.pinned_bytes
    del x
    expect(pinned == 524288 and paged.stats.pinned_bytes == 0, "gc off: a dropped Value unpins at once (%d bytes "
           "pinned, %d after del)" % (pinned, paged.stats.pinned_bytes))
    plan = paged.plan
    try:
        read = 0
        for d in plan:  # every value of the plan, under a 2 MiB budget: each pin must go with its Value
            data = paged.pin(d).read()
            read += len(data)
        expect(read > 2 << 20 and paged.stats.pinned_bytes == 0, "gc off: paged.pin(d).read() over the whole "
               "plan, %d bytes through a 2 MiB budget, nothing left pinned" % read)
    except ballast.BallastError as e:
        expect(False, "gc off: paged.pin(d).read() over the whole plan: %s" % e.message)
    half = paged.pin(plan[0]).first  # a Half keeps its Value, and the pin, while it lives
    held = paged.stats.pinned_bytes
    arr = half.numpy()
    del half
    expect(held > 0 and paged.stats.pinned_bytes == held, "gc off: a Half holds its Value's pin; the array holds "
           "its own after the Half went (%d bytes)" % paged.stats.pinned_bytes)
    del arr
    expect(paged.stats.pinned_bytes == 0 and ballast.live_exports() == 0, "gc off: the array gone, nothing pinned")
    calls = []

    def stop(done_, total):
        calls.append(done_)
        raise RuntimeError("stop at %d" % done_)

    derived = ballast.Residency(backend, model, strategy="upload")
    gone = weakref.ref(derived)
    try:
        derived.derive(progress=stop)
        expect(False, "a raising progress callback: derive() returned")
    except RuntimeError as e:
        expect(str(e) == "stop at 1" and len(calls) == len(plan), "the first of %d callback exceptions re-raised: "
               "%s" % (len(calls), e))
    del derived
    expect(gone() is None, "gc off: a residency whose derive() re-raised a callback's exception is freed when "
           "dropped")
    del paged, plan, d, data
    # Every class in use, then dropped: the collector finds no ballast
    # object in a cycle (each would hold its C handle until it ran).
    gc.set_debug(gc.DEBUG_SAVEALL)
    gc.collect()
    gc.garbage.clear()

    def every_class():
        w = model.weight("layer0.weight")
        held = [model.weights, model.accounting, w.numpy(), w.read(0, 4), backend.info, backend.counters]
        r = ballast.Residency(backend, model, strategy="paged", group_by_layer="layer",
                              overrides={"layer1.weight": "upload"}, kinds=["transpose", "quant_int8"])
        p = r.derive(progress=lambda d, t: None)
        held += [r.budget_plan, r.group_count, r.stats]
        for d in p:
            v = r.pin(d)
            hs = v.halves
            held += [h.numpy() for h in hs] + [v.read(), hs[-1].read(), repr(v)]
            r.prefetch(d)
        r.wait_prefetches()
        r.prefetch_group(0)
        with r.pin_group(0) as g:
            g.read(0)
        try:
            model.weight("no.such.weight")
        except ballast.BallastError:
            pass
        del held, v, hs  # every array and Value gone: release() finds nothing pinned
        return r.release()

    try:
        every_class()
    except ballast.BallastError as e:  # release() with pins the dropped objects still hold
        expect(False, "gc off: every class used and dropped: %s" % e.message)
    gc.collect()
    cyclic = sorted({type(o).__name__ for o in gc.garbage if type(o).__module__.startswith("ballast")})
    expect(not cyclic, "gc off: no ballast object in a reference cycle after use%s"
           % (" (found: %s)" % ", ".join(cyclic) if cyclic else ""))
    gc.set_debug(0)
    gc.garbage.clear()
    gc.enable()

    # set_budget: arrays that hold pins keep a lowering they would not fit
    # in refused, changing nothing; once they go, the same lowering evicts
    # down to it.
    paged = ballast.Residency(backend, model, strategy="paged", budget=4 << 20)
    for w in ("layer0.weight", "layer1.weight", "layer2.weight", "layer3.qweight"):
        paged.pin(w).read()
    arrays = [paged.pin(w).numpy() for w in ("layer0.weight", "layer1.weight", "layer2.weight")]
    before = paged.stats
    code = None
    try:
        paged.set_budget(1 << 20)  # the minimum: the transpose of layer0.weight with its source
    except ballast.BallastError as e:
        code = e.code
    after = paged.stats
    expect(code == ballast.Code.OUT_OF_MEMORY and after.budget_bytes == 4 << 20
           and after.device_bytes == before.device_bytes and after.source_evictions == before.source_evictions,
           "set_budget below what three arrays pin: refused (%s), nothing changed" % code)
    code = None
    try:
        paged.set_budget((1 << 20) - 1)
    except ballast.BallastError as e:
        code = e.code
    expect(code == ballast.Code.INVALID_ARGUMENT, "set_budget below the minimum: INVALID_ARGUMENT (%s)" % code)
    del arrays
    gc.collect()
    paged.set_budget(1 << 20)
    expect(paged.stats.budget_bytes == 1 << 20 and paged.stats.device_bytes <= 1 << 20,
           "set_budget once the arrays went: %d bytes held under %d" % (paged.stats.device_bytes,
                                                                       paged.stats.budget_bytes))
    expect(paged.pin("layer1.weight").read() == model.weight("layer1.weight").read(),
           "a value evicted by set_budget pages in again as its file holds it")
    paged.release()

    # Load notes reach Python: an initializer that is also a graph input.
    import onnx
    from onnx import TensorProto, helper, numpy_helper
    w = numpy_helper.from_array(numpy.ones((2, 2), numpy.float32), "W")
    graph = helper.make_graph([helper.make_node("MatMul", ["X", "W"], ["Y"])], "g",
                              [helper.make_tensor_value_info("X", TensorProto.FLOAT, [1, 2]),
                               helper.make_tensor_value_info("W", TensorProto.FLOAT, [2, 2])],
                              [helper.make_tensor_value_info("Y", TensorProto.FLOAT, [1, 2])], [w])
    noted_path = os.path.join(work, "python-input-initializer.onnx")
    onnx.save(helper.make_model(graph), noted_path)
    notes = ballast.open_model(noted_path).notes
    expect(len(notes) == 1 and notes[0].tensor == "W" and "also a graph input" in notes[0].message,
           "a model's notes in Python: %r" % (notes,))
    expect(ballast.open_model(model_path).notes == [], "the sample has no notes")
    done()

elif step == "misuse":
    def raises(fn, code, what):
        try:
            fn()
        except ballast.BallastError as e:
            return expect(e.code == code and e.message, "%s: BallastError %s (%s)" % (what, e.code.name, e.message))
        except Exception as e:  # noqa: BLE001
            return expect(False, "%s: %s, not BallastError" % (what, type(e).__name__))
        return expect(False, "%s: no error" % what)

    try:
        ballast.open_model(os.path.join(work, "no-such-model.onnx"))
        expect(False, "a missing model opened")
    except ballast.BallastError as e:
        expect(e.code != ballast.Code.OK and "no-such-model" in e.message, "a missing model: %s" % e.message)
    raises(lambda: ballast.open_backend("nosuchbackend"), ballast.Code.INVALID_ARGUMENT, "an unknown backend")
    model = ballast.open_model(model_path)
    weight = model.weight("layer0.weight")
    raises(lambda: model.weight("no.such.weight"), ballast.Code.NOT_FOUND, "an unknown weight")
    backend = ballast.open_backend("cpu")
    # Extensions (C API version 5): the CPU device's kernel set names itself; none of another name.
    import ctypes
    kernel_set = backend.extension("ballast_cpu_kernel_set")
    expect(kernel_set != 0 and ctypes.string_at(kernel_set).decode() in ("portable", "avx2+f16c", "avx512bw+avx2+f16c"),
           "the cpu backend's kernel set extension: %s"
           % (ctypes.string_at(kernel_set).decode() if kernel_set else "none"))
    expect(backend.extension("no_such_extension") == 0, "no extension of an unknown name")
    expect(ballast.plugin_extension("cpu", "no_such_extension") == 0, "the cpu plugin has no extension of that name")
    raises(lambda: ballast.plugin_extension("nosuchbackend", "x"), ballast.Code.INVALID_ARGUMENT,
           "an extension of an unknown backend")
    raises(lambda: ballast.Residency(backend, model, strategy="sideways"), ballast.Code.INVALID_ARGUMENT,
           "an unknown strategy")
    # Residency options cross as the C API takes them: an override, a budget, groups.
    raises(lambda: ballast.Residency(backend, model, overrides={"no.such.weight": "upload"}), ballast.Code.NOT_FOUND,
           "an override of no weight")
    raises(lambda: ballast.Residency(backend, model, strategy="paged", budget=4096), ballast.Code.INVALID_ARGUMENT,
           "a budget below the largest value")
    over = ballast.Residency(backend, model, overrides={"layer0.weight": "upload"}, derivations=False)
    with over.pin("layer0.weight"), over.pin("layer2.weight"):
        s = over.stats
        expect(s.uploaded_bytes == weight.bytes and s.registered_bytes > 0,
               "zero_copy with layer0.weight overridden to upload: %d bytes uploaded, %d registered"
               % (s.uploaded_bytes, s.registered_bytes))
    # derive() without a plan builds what create() was told the engine
    # pins: none with derivations=False, only the kinds given with kinds=.
    over.derive()
    expect(over.stats.derived_builds == 0, "derivations=False: derive() built %d values" % over.stats.derived_builds)
    one_kind = ballast.Residency(backend, model, kinds="transpose")
    wanted = [d for d in one_kind.plan if d.kind == "transpose"]
    seen = []
    one_kind.derive(progress=lambda d, t: seen.append((d, t)))
    expect(0 < len(wanted) < len(one_kind.plan) and one_kind.stats.derived_builds == len(wanted)
           and seen == [(i + 1, len(wanted)) for i in range(len(wanted))],
           "kinds='transpose': derive() built %d of %d planned (%d transposes), progress %r"
           % (one_kind.stats.derived_builds, len(one_kind.plan), len(wanted), seen))
    one_kind.release()
    # Released, it is refused, as before derive() narrowed: also where
    # nothing is left to build (derivations=False, no entry of the kinds).
    over.release()
    raises(lambda: over.derive(), ballast.Code.INVALID_ARGUMENT, "derive() of a released residency (derivations=False)")
    raises(lambda: one_kind.derive(), ballast.Code.INVALID_ARGUMENT, "derive() of a released residency (kinds=)")
    groups = ballast.Residency(backend, model, strategy="paged", group_by_layer="layer")
    expect(groups.group_count == 6, "6 layer groups (%d)" % groups.group_count)
    # "" is a stem, as in C: no name here starts with a number, so every
    # member is a group of its own; None forms none.
    ungrouped = ballast.Residency(backend, model, strategy="paged")
    empty_stem = ballast.Residency(backend, model, strategy="paged", group_by_layer="")
    expect(ungrouped.group_count == 0 and empty_stem.group_count > groups.group_count,
           "group_by_layer None: no groups (%d); \"\": one per member (%d)"
           % (ungrouped.group_count, empty_stem.group_count))
    ungrouped.release()
    empty_stem.release()
    with groups.pin_group(0) as g:
        expect(len(g) >= 2 and len(g.read(0)) == g.value(0)[2], "a group pinned whole: %d members" % len(g))
    # The CUDA/HIP export path without a GPU: a cpu value whose device info
    # says cuda (or hip) exports a capsule on kDLCUDA (kDLROCM) with the
    # value's own pointer, and the capsule, never taken, releases its pin.
    import dataclasses
    from ballast import dlpack
    stand_in = ballast.Residency(backend, model, strategy="upload")
    for name, code in (("cuda", dlpack.CUDA), ("hip", dlpack.ROCM)):
        v = stand_in.pin(model.plan()[0])
        v._device = dataclasses.replace(v._device, backend=name, index=3, host_visible=False)
        cap = v.__dlpack__(stream=1)
        m = dlpack.DLManagedTensor.from_address(dlpack._capsule_pointer(id(cap), b"dltensor"))  # id: its address
        t = m.dl_tensor
        expect(v.__dlpack_device__() == (code, 3) and (t.device.device_type, t.device.device_id) == (code, 3)
               and t.data == v.value(0)[0] and t.ndim == 2, "%s stand-in: __dlpack_device__ %s, the capsule on "
               "device (%d, %d) at the value's pointer" % (name, v.__dlpack_device__(), t.device.device_type,
                                                          t.device.device_id))
        v.close()
        expect(stand_in.stats.pinned_bytes > 0, "%s stand-in: the untaken capsule holds its pin" % name)
        del cap, m, t
        gc.collect()
        expect(stand_in.stats.pinned_bytes == 0, "%s stand-in: the capsule's destruction unpinned it" % name)
    del stand_in, v
    # An export that cannot be built (no memory for its structs) gives its
    # pin and its count back: the residency unpins and releases after it.
    failing = ballast.Residency(backend, model, strategy="upload")
    v = failing.pin(model.plan()[0])
    real_export, exports_before = dlpack._Export, ballast.live_exports()

    def no_memory(*args, **kwargs):
        raise MemoryError("test: no memory for the export")

    dlpack._Export = no_memory
    try:
        v.numpy()
        expect(False, "an export whose structs cannot be made raised nothing")
    except MemoryError:
        pass
    finally:
        dlpack._Export = real_export
    v.close()
    expect(failing.stats.pinned_bytes == 0 and ballast.live_exports() == exports_before,
           "a failed export leaves no pin (%d bytes pinned) and no export (%d live, %d before)"
           % (failing.stats.pinned_bytes, ballast.live_exports(), exports_before))
    try:
        failing.release()
    except ballast.BallastError as e:
        expect(False, "release() after a failed export: %s" % e.message)
    del failing, v
    res = ballast.Residency(backend, model)
    plan = model.plan()
    value = res.pin(plan[0])
    value.close()
    value.close()  # twice: a no-op
    raises(lambda: value.numpy(), ballast.Code.INVALID_HANDLE, "a freed value's numpy()")
    raises(lambda: value.__dlpack__(), ballast.Code.INVALID_HANDLE, "a freed value's __dlpack__()")
    raises(lambda: value.read(), ballast.Code.INVALID_HANDLE, "a freed value's read()")
    raises(lambda: value.second.numpy() if value.second else value.first.numpy(), ballast.Code.INVALID_HANDLE,
           "a freed value's half")
    other = ballast.open_model(model_path)
    raises(lambda: ballast.Residency(backend, other).pin(plan[0]), ballast.Code.INVALID_ARGUMENT,
           "a plan of another model")
    # A Weight is pinned by its name and exported with its own dtype and
    # dims: another model's weight of the same name (here a [2, 2] float32
    # "layer0.weight", 16 bytes) is refused, never exported with its
    # layout over this model's value (which read past the 16-byte value).
    tiny = os.path.join(work, "python-misuse-tiny.safetensors")
    header = json.dumps({"layer0.weight": {"dtype": "F32", "shape": [2, 2], "data_offsets": [0, 16]}}).encode()
    with open(tiny, "wb") as f:
        f.write(len(header).to_bytes(8, "little") + header + bytes(16))
    small = ballast.open_model(tiny)
    with ballast.Residency(backend, small, strategy="upload", derivations=False) as own:
        with own.pin("layer0.weight") as v:
            expect(v.first.bytes == v.value()[2] == 16, "a weight pinned by name in its own model: 16 bytes")
        raises(lambda: own.pin(model.weight("layer0.weight")), ballast.Code.INVALID_ARGUMENT,
               "a Weight of another model, of another shape under the same name")
        raises(lambda: own.pin(ballast.open_model(tiny).weight("layer0.weight")), ballast.Code.INVALID_ARGUMENT,
               "a Weight of another opening of the same file")
    small.close()
    raises(lambda: plan[len(plan)], ballast.Code.OUT_OF_BOUNDS, "a plan index past the end")
    model.close()
    raises(lambda: model.weights, ballast.Code.INVALID_HANDLE, "a freed model's weights")
    raises(lambda: model.accounting, ballast.Code.INVALID_HANDLE, "a freed model's accounting")
    raises(lambda: weight.numpy(), ballast.Code.INVALID_HANDLE, "a freed model's weight numpy()")
    raises(lambda: weight.read(), ballast.Code.INVALID_HANDLE, "a freed model's weight read()")
    raises(lambda: model.plan(), ballast.Code.INVALID_HANDLE, "a freed model's plan()")
    # The residency holds the model in C: pins still work after the model's handle went.
    with res.pin(plan[0]) as v:
        expect(len(v.read()) == plan[0].first.bytes, "a residency outlives its model's Python handle")
    res.release()
    raises(lambda: res.pin(plan[0]), ballast.Code.INVALID_ARGUMENT, "a pin after release()")
    res.close()
    raises(lambda: res.stats, ballast.Code.INVALID_HANDLE, "a freed residency's stats")
    plan.close()
    raises(lambda: len(plan), ballast.Code.INVALID_HANDLE, "a freed plan")
    # A residency holds its backend in C: after the backend's handle goes it
    # still pins and exports.
    keeps = ballast.Residency(backend, other, strategy="upload")
    backend.close()
    with keeps.pin("layer0.weight") as v:
        expect(v.numpy().tobytes() == other.weight("layer0.weight").read(),
               "a residency pins and exports after its backend's handle went")
    raises(lambda: backend.info, ballast.Code.INVALID_HANDLE, "a freed backend's info")
    raises(lambda: ballast.Residency(backend, other), ballast.Code.INVALID_HANDLE, "a residency on a freed backend")

    # Integer arguments: an int inside the range of the C field it goes
    # into, else ValueError (out of range) or TypeError (bool, float, str),
    # naming the argument and the range; ctypes would wrap them silently
    # (budget=-1 was unlimited, 2**64 auto, plan[2**64] entry 0).
    import ctypes
    u64 = "[0, %d]" % (2 ** 64 - 1)
    size = "[0, %d]" % (2 ** (8 * ctypes.sizeof(ctypes.c_size_t)) - 1)

    def refused(fn, error, name, bounds, what):
        try:
            fn()
        except error as e:
            return expect(name in str(e) and bounds in str(e), "%s: %s (%s)" % (what, error.__name__, e))
        except Exception as e:  # noqa: BLE001
            return expect(False, "%s: %s (%s), not %s" % (what, type(e).__name__, e, error.__name__))
        return expect(False, "%s: accepted, not %s" % (what, error.__name__))

    model = ballast.open_model(model_path)
    backend = ballast.open_backend("cpu")
    for bad, error in ((-1, ValueError), (2 ** 64, ValueError), (10 ** 30, ValueError), (1.5e6, TypeError),
                       (True, TypeError), ("4096", TypeError)):
        refused(lambda: ballast.Residency(backend, model, strategy="paged", budget=bad), error, "budget", u64,
                "budget=%r" % (bad,))
    sized = ballast.Residency(backend, model, strategy="paged", budget=numpy.int64(2 << 20))
    expect(sized.stats.budget_bytes == 2 << 20, "budget=numpy.int64(2 << 20) taken: %d" % sized.stats.budget_bytes)
    refused(lambda: ballast.Residency(backend, model, kinds=[]), ValueError, "kinds", "", "kinds=[] (would be 0: "
            "every kind)")
    def works(fn, what):
        try:
            return expect(fn(), what)
        except Exception as e:  # noqa: BLE001
            return expect(False, "%s: %s (%s)" % (what, type(e).__name__, e))

    works(lambda: ballast.Residency(backend, model, kinds="transpose"), "kinds='transpose': one kind")
    grouped = ballast.Residency(backend, model, strategy="paged", group_by_layer="layer")
    for args, error, name, bounds in (((-1,), ValueError, "index", size), ((2 ** 64,), ValueError, "index", size),
                                      ((0.0,), TypeError, "index", size),
                                      ((0, -1), ValueError, "wait_ms", "[0, 4294967295]"),
                                      ((0, 2 ** 32), ValueError, "wait_ms", "[0, 4294967295]"),
                                      ((0, 1.5), TypeError, "wait_ms", "[0, 4294967295]")):
        refused(lambda: grouped.pin_group(*args), error, name, bounds, "pin_group%r" % (args,))
    refused(lambda: grouped.prefetch_group(-1), ValueError, "index", size, "prefetch_group(-1)")
    refused(lambda: grouped.prefetch_group(True), TypeError, "index", size, "prefetch_group(True)")
    plan = model.plan()
    n = len(plan)
    refused(lambda: plan[2 ** 64], ValueError, "plan index", "", "plan[2**64] (was plan[0])")
    refused(lambda: plan[True], TypeError, "plan index", "", "plan[True]")
    refused(lambda: plan[1.0], TypeError, "plan index", "", "plan[1.0]")
    raises(lambda: plan[-n - 1], ballast.Code.OUT_OF_BOUNDS, "plan[-len - 1]")
    works(lambda: plan[numpy.int64(1)] == plan[1] and plan[-1] == plan[n - 1], "plan[numpy.int64(1)] and plan[-1]")
    import dataclasses
    stray = dataclasses.replace(plan[0], index=-1)
    refused(lambda: grouped.pin(stray), ValueError, "derivation index", size, "pin(a Derivation with index -1)")
    refused(lambda: grouped.prefetch(stray), ValueError, "derivation index", size, "prefetch(a Derivation with "
            "index -1)")
    weight_bytes = model.weight("layer0.weight").read()
    with grouped.pin("layer0.weight") as v:
        nbytes = v.value()[2]
        for kwargs, error, name, bounds in (({"half": 2}, ValueError, "half", "[0, 1]"),
                                            ({"half": -1}, ValueError, "half", "[0, 1]"),
                                            ({"half": True}, TypeError, "half", "[0, 1]"),
                                            ({"offset": -1}, ValueError, "offset", u64),
                                            ({"offset": 1.0}, TypeError, "offset", u64),
                                            ({"length": -1}, ValueError, "length", size),
                                            ({"length": 2 ** 64}, ValueError, "length", size)):
            refused(lambda: v.read(**kwargs), error, name, bounds, "Value.read(%s)" % kwargs)
        refused(lambda: v.value(-1), ValueError, "member", size, "Value.value(-1)")
        refused(lambda: ballast.Pin.read(v, 2 ** 64), ValueError, "member", size, "Pin.read(member=2**64)")
        raises(lambda: v.read(length=2 ** 62), ballast.Code.OUT_OF_BOUNDS, "Value.read(length=2**62), nothing "
               "allocated")
        raises(lambda: v.read(offset=nbytes + 1), ballast.Code.OUT_OF_BOUNDS, "Value.read(offset past the end)")
        try:  # the error names what it missed, as the C API's does
            v.read(offset=nbytes + 1)
        except ballast.BallastError as e:
            expect("weight 'layer0.weight'" in e.message, "Value.read past the end names the weight: " + e.message)
        works(lambda: v.read(offset=8, length=4) == weight_bytes[8:12], "Value.read(offset=8, length=4): the "
              "weight's bytes 8..12")
    w = model.weight("layer0.weight")
    for args, error, name, bounds in (((-1,), ValueError, "offset", u64), ((2 ** 64,), ValueError, "offset", u64),
                                      ((0, -5), ValueError, "length", size), ((0, 2.0), TypeError, "length", size)):
        refused(lambda: w.read(*args), error, name, bounds, "Weight.read%r" % (args,))
    raises(lambda: w.read(0, 2 ** 62), ballast.Code.OUT_OF_BOUNDS, "Weight.read(0, 2**62), nothing allocated")
    try:  # named as the C API names it: [file=..., tensor=...]
        w.read(0, 2 ** 62)
    except ballast.BallastError as e:
        expect("tensor=layer0.weight]" in e.message and "file=" + w.file in e.message,
               "Weight.read past the end names the file and the weight: " + e.message)
    works(lambda: w.read(w.bytes) == b"" and w.read(4, 4) == weight_bytes[4:8], "Weight.read at the end and (4, 4)")
    w.name = "n" * 3000  # a hostile model's name: echoed at most 1024 long, as the library's messages echo it
    try:
        w.read(0, 2 ** 62)
    except ballast.BallastError as e:
        expect(("tensor=" + "n" * 1024 + "... (3000 characters)]") in e.message and len(e.message) < 1400,
               "Weight.read's message echoes a long name cut: " + e.message[:200])
    del sized, grouped, v, plan, stray

    # python3 -m ballast inspect: the CLI's exit codes (0 ok, 2 bad input
    # or usage) and its one error line, `ballast inspect: <code>: ...`.
    def inspect(*args, stdout=subprocess.PIPE):
        return subprocess.run([sys.executable, "-m", "ballast", "inspect", *args], stdout=stdout,
                              stderr=subprocess.PIPE, text=True, cwd="/")

    def cli_inspect(*args):
        return subprocess.run([os.path.join(moved, "bin", "ballast"), "inspect", *args], stdout=subprocess.DEVNULL,
                              stderr=subprocess.PIPE, text=True, cwd="/")

    garbage = os.path.join(work, "python-not-a-model.onnx")
    with open(garbage, "w") as f:
        f.write("not a model\n")
    for label, path, code in (("a missing model", os.path.join(work, "python-no-such.onnx"), "not_found"),
                              ("not a model", garbage, "unsupported"), ("a directory", work, "io")):
        r, c = inspect(path), cli_inspect(path)
        lines = r.stderr.splitlines()
        expect(r.returncode == 2 == c.returncode and len(lines) == 1
               and lines[0].startswith("ballast inspect: %s: " % code) and path in lines[0]
               and lines[0].split(": ")[:2] == c.stderr.splitlines()[0].split(": ")[:2],
               "python -m ballast inspect, %s: exit %d (CLI %d), %r" % (label, r.returncode, c.returncode, r.stderr))
    r = inspect(model_path)
    expect(r.returncode == 0 and r.stdout.startswith("model: "), "python -m ballast inspect: exit %d" % r.returncode)
    for args in ((), (model_path, "--no-such-flag")):
        r = inspect(*args)
        expect(r.returncode == 2, "python -m ballast inspect %r: a usage error, exit %d" % (args, r.returncode))
    with open("/dev/full", "w") as full:
        r = inspect(model_path, "--json", stdout=full)
    expect(r.returncode == 2 and r.stderr.startswith("ballast inspect: io: ") and len(r.stderr.splitlines()) == 1,
           "python -m ballast inspect into a full disk: exit %d, %r" % (r.returncode, r.stderr))

    # A BALLAST_LIBRARY that cannot be loaded: an ImportError naming it, as
    # for a library too old, not ctypes' OSError.
    env = dict(os.environ, BALLAST_LIBRARY=os.path.join(work, "no-such-libballast.so"))
    r = subprocess.run([sys.executable, "-c", "import ballast"], env=env, capture_output=True, text=True, cwd="/")
    last = (r.stderr.strip().splitlines() or [""])[-1]
    expect(r.returncode != 0 and last.startswith("ImportError: ballast: cannot load ")
           and "no-such-libballast.so (BALLAST_LIBRARY)" in last,
           "import ballast with a BALLAST_LIBRARY that cannot be loaded: %r" % last)
    # One that loads but is no libballast (the C math library): the same,
    # not ctypes' AttributeError for the missing ballast_get_api.
    libm = ctypes.util.find_library("m")
    if libm:
        env = dict(os.environ, BALLAST_LIBRARY=libm)
        r = subprocess.run([sys.executable, "-c", "import ballast"], env=env, capture_output=True, text=True, cwd="/")
        last = (r.stderr.strip().splitlines() or [""])[-1]
        expect(r.returncode != 0 and last.startswith("ImportError: ballast: %s (BALLAST_LIBRARY) is no libballast" % libm),
               "import ballast with a BALLAST_LIBRARY that is no libballast: %r" % last)

    # Every command-line script of tools/gen: --help prints its usage,
    # anything else that is not its command line is refused (exit 2), and
    # neither makes a folder (one named "--help" was made).
    gen = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tools", "gen"))
    scratch = os.path.join(work, "python-gen-args")
    subprocess.run(["rm", "-rf", scratch], check=True)
    os.makedirs(scratch)
    scripts = sorted(f for f in os.listdir(gen)
                     if f.endswith(".py") and "__main__" in open(os.path.join(gen, f)).read())
    expect(len(scripts) >= 7, "tools/gen scripts with a command line: %s" % ", ".join(scripts))
    for script in scripts:
        def run(*args):
            return subprocess.run([sys.executable, os.path.join(gen, script), *args], cwd=scratch,
                                  capture_output=True, text=True)
        h, bad, alone, none = run("--help"), run("out", "--no-such-option"), run("--no-such-option"), run()
        made = os.listdir(scratch)
        expect(h.returncode == 0 and h.stdout.startswith("usage: ") and bad.returncode == alone.returncode == 2
               and "--no-such-option" in bad.stderr + alone.stderr and none.returncode == 2 and not made,
               "%s: --help exit %d (%s), an unknown option exit %d and alone %d, no folder exit %d, made %s"
               % (script, h.returncode, "usage" if h.stdout.startswith("usage: ") else "no usage", bad.returncode,
                  alone.returncode, none.returncode, made or "nothing"))
        subprocess.run(["rm", "-rf", scratch], check=True)
        os.makedirs(scratch)
    done()

elif step == "names":
    # Strings into C. A NUL inside a path, name or config string ends the
    # C string there, and the library acted on what came before it:
    # weight("layer0.weight\0x") was layer0.weight, open_model(path +
    # "\0...") opened path, open_backend("cpu\0...") opened cpu. Each is
    # refused before the call (ValueError), as Python's file calls refuse one.
    model = ballast.open_model(model_path)
    backend = ballast.open_backend("cpu")

    def refused_nul(fn, what):
        try:
            fn()
        except ValueError as e:
            return expect("NUL" in str(e), "%s: ValueError (%s)" % (what, e))
        except Exception as e:  # noqa: BLE001
            return expect(False, "%s: %s (%s), not ValueError" % (what, type(e).__name__, e))
        return expect(False, "%s: accepted (the C string ended at the NUL)" % what)

    refused_nul(lambda: ballast.open_model(model_path + "\0.other"), "open_model(a path with a NUL)")
    refused_nul(lambda: ballast.open_model(os.fsencode(model_path) + b"\0x"), "open_model(bytes with a NUL)")
    refused_nul(lambda: model.weight("layer0.weight\0x"), "Model.weight(a name with a NUL)")
    refused_nul(lambda: ballast.open_backend("cpu\0garbage"), "open_backend('cpu\\0garbage')")
    refused_nul(lambda: backend.extension("x\0y"), "Backend.extension(a name with a NUL)")
    refused_nul(lambda: ballast.plugin_extension("cpu\0x", "y"), "plugin_extension(a backend with a NUL)")
    refused_nul(lambda: ballast.run_conformance("cpu\0x"), "run_conformance(a config with a NUL)")
    refused_nul(lambda: ballast.Residency(backend, model, overrides={"layer0.weight\0x": "upload"}),
                "Residency(overrides={a name with a NUL: ...})")
    refused_nul(lambda: ballast.Residency(backend, model, group_by_layer="layer\0x"),
                "Residency(group_by_layer=a stem with a NUL)")
    res = ballast.Residency(backend, model, strategy="upload")
    refused_nul(lambda: res.pin("layer0.weight\0x"), "Residency.pin(a name with a NUL)")
    with res.pin("layer0.weight") as v:  # the same calls without the NUL still work
        expect(v.read() == model.weight("layer0.weight").read(), "Residency.pin('layer0.weight') as stored")

    # Names that are not UTF-8 (ONNX spells names in bytes): a Weight's
    # `name` is their decoded form (U+FFFD for each bad byte), which is no
    # name of the model, so pinning the Weight by it was NOT_FOUND. It pins
    # by the bytes the model spells, and Model.weight() takes those bytes.
    gen = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "cli", "hostile_names_model.py")
    hostile_dir = os.path.join(work, "python-names-hostile")
    spelled = json.loads(subprocess.run([sys.executable, gen, hostile_dir], check=True, capture_output=True,
                                        text=True).stdout)
    hostile = ballast.open_model(os.path.join(hostile_dir, "hostile.onnx"))
    on_cpu = ballast.Residency(backend, hostile, strategy="upload")
    for w in hostile.weights:
        try:
            with on_cpu.pin(w) as v:
                expect(v.read() == w.read(), "Residency.pin(Weight %r): its bytes as stored" % w.name)
        except ballast.BallastError as e:
            expect(False, "Residency.pin(Weight %r): %s" % (w.name, e.message))
    for raw in map(bytes.fromhex, spelled["inline"]):
        try:
            expect(hostile.weight(raw).read() == b"\x00\x00\x80\x3f\x00\x00\x00\x40",
                   "Model.weight(%r): found by its bytes" % raw)
        except ballast.BallastError as e:
            expect(False, "Model.weight(%r): %s" % (raw, e.message))

    # What `python3 -m ballast inspect` writes of those names: escaped as
    # the command line escapes them (docs/security.md, "What a terminal
    # shows"), never raw (its table printed the carriage return and escape
    # sequences of a name as they were, and its error line the message as
    # the C API quotes it), and its error line is the CLI's, byte for byte.
    import re
    raw_control = re.compile(rb"[\x00-\x09\x0b-\x1f\x7f]|\xc2[\x80-\x9f]|\xe2\x80[\x8e\x8f\xaa-\xae]|"
                             rb"\xe2\x81[\xa6-\xa9]|\xd8\x9c")
    for name in ("hostile.onnx", "hostile_missing.onnx"):
        path = os.path.join(hostile_dir, name)
        py = subprocess.run([sys.executable, "-m", "ballast", "inspect", path], capture_output=True, cwd="/")
        cli = subprocess.run([os.path.join(moved, "bin", "ballast"), "inspect", path], capture_output=True, cwd="/")
        for what, out in (("stdout", py.stdout), ("stderr", py.stderr)):
            m = raw_control.search(out)
            expect(m is None, "python -m ballast inspect %s, %s: no raw control byte (%r)"
                   % (name, what, out[max(0, m.start() - 20):m.start() + 20] if m else b""))
        if cli.returncode != 0:
            expect(py.returncode == cli.returncode and py.stderr == cli.stderr,
                   "python -m ballast inspect %s: the CLI's error line %r, got %r" % (name, cli.stderr, py.stderr))
        else:
            expect(py.returncode == 0 and b"\\x1b[2Kverify" in py.stdout and b"bidi\\u{202e}evil" in py.stdout,
                   "python -m ballast inspect %s: the names escaped as the CLI escapes them" % name)
    # A dead range of a data file whose name is not UTF-8: its bytes
    # escaped (\xff), not the U+FFFD a decoded name would show.
    py = subprocess.run([sys.executable, "-m", "ballast", "inspect", os.path.join(hostile_dir, "hostile_dead.onnx")],
                        capture_output=True, cwd="/")
    expect(py.returncode == 0 and b"/dead\\xff.bin [0, +32)" in py.stdout,
           "python -m ballast inspect hostile_dead.onnx: the dead range's file escaped (%r)" % py.stdout[-200:])
    # --json of a model whose path is not UTF-8: the path decoded as the
    # CLI's --json writes it (U+FFFD), not the lone surrogate ("\udcff")
    # a str from argv holds, which strict JSON readers refuse.
    odd_path = os.path.join(os.fsencode(hostile_dir), b"not\xffutf8.onnx")
    if os.path.lexists(odd_path):
        os.remove(odd_path)
    os.symlink("hostile.onnx", odd_path)
    py = subprocess.run([sys.executable, "-m", "ballast", "inspect", odd_path, "--json"], capture_output=True, cwd="/")
    cli = subprocess.run([os.path.join(moved, "bin", "ballast"), "inspect", odd_path, "--json"], capture_output=True,
                         cwd="/")
    shown = json.loads(py.stdout)["model"] if py.returncode == 0 else None
    expect(py.returncode == 0 and b"\\udc" not in py.stdout and shown == json.loads(cli.stdout)["model"]
           and shown.endswith("/not\ufffdutf8.onnx"),
           "python -m ballast inspect --json, a path that is not UTF-8: %r as the CLI's" % (shown,))
    done()

elif step == "conformance":
    # The suite from Python: the moved prefix's ballast-conformance, in a child process.
    r = ballast.run_conformance("cpu", "device weights*")
    expect(r.exit_code == 0 and r.passed >= 2 and r.failed == 0, "cpu: %s" % (r,))
    expect(isinstance(r.summary, dict) and r.summary.get("result") == "passed" and r.summary.get("passed") == r.passed,
           "the JSON summary agrees: %s" % ((r.summary or {}).get("result"),))
    bad = ballast.run_conformance("nosuch")
    expect(bad.exit_code == 2 and bad.passed + bad.failed + bad.skipped == 0, "an unknown backend is the suite's "
           "usage error (exit 2), not the call's: %s" % (bad,))
    done()

elif step == "vulkan":
    # A device whose memory is not host-visible: __dlpack_device__ says
    # which, exporting is refused with a BallastError, read() copies, and
    # the copy is the cpu backend's value, in place.
    model = ballast.open_model(model_path)
    vk = ballast.open_backend("vulkan")
    expect(not vk.info.host_visible, "vulkan (%s) is not host-visible" % vk.info.name)
    res = ballast.Residency(vk, model, strategy="upload")
    cpu = ballast.Residency(ballast.open_backend("cpu"), model)
    plan = res.derive()
    for d in plan:
        with res.pin(d) as v, cpu.pin(d) as c:
            for h, ch in zip(v.halves, c.halves):
                expect(h.__dlpack_device__() == (7, vk.info.index), "%s of %s: kDLVulkan" % (d.kind, d.weight))
                try:
                    numpy.from_dlpack(h)
                    expect(False, "numpy.from_dlpack of a vulkan value")
                except ballast.BallastError as e:
                    expect(e.code == ballast.Code.UNSUPPORTED, "from_dlpack refused: %s" % e.message)
                expect(h.read() == ch.numpy().tobytes(), "read() == the cpu value in place")
    done()

else:
    sys.exit("unknown step " + step)
