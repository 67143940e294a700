#!/usr/bin/env python3
"""python_module.py STEP MOVED MODEL WORK: the installed Python module
(docs/python.md), one step of package_test.sh, run with only
MOVED/lib/python3/dist-packages on sys.path and no BALLAST_* variable, so
the module must find its libballast from where the moved prefix lies.

Steps: numpy, torch (each against `ballast derive --dump` on cpu), release,
misuse (and the CUDA/HIP export path on a stand-in device), conformance,
vulkan. Exit 0 passed, 1 failed, 77 skipped.
"""
import gc
import os
import subprocess
import sys

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
    gen = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tools", "gen")
    models = os.path.join(work, "python-models-" + step)
    subprocess.run(["rm", "-rf", models], check=True)
    for script, sub in (("make_gguf_models.py", "gguf"), ("make_safetensors_models.py", "safetensors")):
        subprocess.run([sys.executable, os.path.join(gen, script), os.path.join(models, sub)], check=True,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    # GGUF blocks dequantized, and a checkpoint planned by the rules (no graph).
    compare_with_dump(os.path.join(models, "gguf/llama.gguf"), take, as_numpy, strategy="paged")
    compare_with_dump(os.path.join(models, "safetensors/sharded/model.safetensors.index.json"), take, as_numpy)
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
            del other, ws
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
    groups = ballast.Residency(backend, model, strategy="paged", group_by_layer="layer")
    expect(groups.group_count == 6, "6 layer groups (%d)" % groups.group_count)
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
    done()

elif step == "conformance":
    # The suite from Python: the moved prefix's ballast-conformance, in a child process.
    r = ballast.run_conformance("cpu", "device weights*")
    expect(r.exit_code == 0 and r.passed >= 2 and r.failed == 0, "cpu: %s" % (r,))
    expect(isinstance(r.summary, dict) and r.summary.get("result") == "passed" and r.summary.get("passed") == r.passed,
           "the JSON summary agrees: %s" % ((r.summary or {}).get("result"),))
    bad = ballast.run_conformance("nosuch")
    expect(bad.exit_code == 1 and bad.passed + bad.failed + bad.skipped == 0, "an unknown backend fails the suite, "
           "not the call: %s" % (bad,))
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
