#!/usr/bin/python3
"""`ballast load MODEL --comm local|mpi [--world N] --dump DIR --json` and
`ballast derive MODEL --comm ...` (issue 29): the cooperative load of tensor-parallel shards, on the llm test
model (tools/gen/make_llm_model.py: ONNX MatMul and MatMulNBits) and a
Hugging Face-named safetensors file (a fused gate_up among them), with ranks as threads (--comm local, 1, 2 and
4 ranks) and as the processes of an MPI job (mpirun -np 2 and 4, where Open
MPI and the mpi communicator are built), on the cpu backend and, where a
Vulkan device opens (lavapipe here), on vulkan at 2 and 4 ranks both ways.

For every rank, every shard it dumps (read back from the device) equals the
weight's slice computed here with NumPy from the file itself (onnx's
external-data reader, or the safetensors header): the rank's part of each
fused part along the plan's axis. The ranks' reads add up to the model's
referenced bytes (each byte read once between them), every byte sent is
received, and each rank holds its plan's device bytes. With --in-place
(no load: each rank takes its shards from the model it opened) the same
shards and derived files come out, nothing is traded, and under
--residency zero-copy the one-range shards are registered in the mapping. Each rank's derived
values, joined along their split axis, are the single-process derive's
files, byte for byte (quant_int8 of a row-parallel weight too: the ranks
all-reduce its rows' maxima, so each rank's codes are the whole codes'
columns and its scales the whole scales; no rank skips it). Under MPI, ranks
given different shard plans fail with errors naming the peer (no hang), and
a rank that dies takes the job down in bounded time.

Exit 0 pass, 1 fail, 77 skip (python3-onnx or numpy missing).
"""

import argparse
import filecmp
import glob
import json
import os
import re
import shutil
import struct
import subprocess
import sys
import time

from cli_check import FAILURES, expect, run, skip
from test_inspect_shards import HF, write_safetensors

try:
    import numpy as np
    import onnx
    from onnx import numpy_helper
except ImportError as e:  # pragma: no cover
    skip("python3-onnx and numpy are needed: %s" % e)

MPI_ENV = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
               OMPI_MCA_rmaps_base_oversubscribe="1")


def onnx_arrays(path):
    m = onnx.load(path, load_external_data=True)
    return {t.name: numpy_helper.to_array(t) for t in m.graph.initializer}


def safetensors_arrays(path):
    types = {"F32": np.float32, "F16": np.float16, "U8": np.uint8, "I8": np.int8, "BF16": np.uint16}
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        data = f.read()
    out = {}
    for name, t in header.items():
        if name == "__metadata__":
            continue
        lo, hi = t["data_offsets"]
        out[name] = np.frombuffer(data[lo:hi], dtype=types[t["dtype"]]).reshape(t["shape"])
    return out


def expected_shard(full, w, rank, world, by_name):
    """The rank's slice of `full` by the plan's entry `w` for it: each fused
    part split along the plan's axis, the rank's piece of each, in order."""
    if w["split"] == "replicated" or world == 1:
        return full
    dims = w["dims"]
    axis = w["axis"]
    if axis >= len(dims):
        # MatMulNBits scales or zero points stored 1-D: the plan's axis is
        # of their [N, k_blocks] view, whose rows are B's.
        b = by_name[w["layout"].split("follows B '")[1].split("'")[0]]
        rows = b["dims"][0]
        dims = [rows, int(np.prod(dims)) // rows]
    shape = list(dims)
    shape[axis] *= world
    whole = full.reshape(shape)  # scales stored 1-D are [rows, blocks] in the plan
    parts = np.split(whole, w["parts"], axis=axis)
    return np.concatenate([np.split(p, world, axis=axis)[rank] for p in parts], axis=axis)


def check_dumps(label, dump, plan, arrays, world):
    good = True
    by_name = {w["name"]: w for w in plan["weights"]}
    for w in plan["weights"]:
        for rank in range(world):
            path = os.path.join(dump, "rank%d" % rank, w["name"] + ".shard.npy")
            if not os.path.exists(path):
                if w["device_bytes"] != 0:
                    good = False
                    print("  %s: rank %d dumped no %s" % (label, rank, w["name"]))
                continue
            got = np.load(path)
            want = expected_shard(arrays[w["name"]], w, rank, world, by_name)
            if got.tobytes() != np.ascontiguousarray(want).tobytes():
                good = False
                print("  %s: rank %d's %s differs from the slice of the file's array" % (label, rank, w["name"]))
    expect(good, "%s: every rank's dumped shards are the slices NumPy cuts from the file" % label)


def timed(cmd):
    """(the finished process, seconds it took) of an mpirun command line."""
    start = time.monotonic()
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=MPI_ENV)
    return proc, time.monotonic() - start


def weight_of(file_name, weights):
    """The plan weight a dump file belongs to: the longest name that
    prefixes the file's name before a '.'."""
    best = None
    for w in weights:
        if file_name.startswith(w["name"] + ".") and (best is None or len(w["name"]) > len(best["name"])):
            best = w
    return best


def check_derived(label, single, dump, plan, world, reports):
    """Every file of the single-process derive is the ranks' files joined:
    equal on every rank for a replicated weight, else the ranks' pieces of
    each fused part concatenated along one axis; a file no rank wrote is a
    derivation every rank skipped, with its reason."""
    skipped = [s for r in reports for s in r.get("skipped", [])]
    good, joined, missing = True, 0, 0
    for name in sorted(os.listdir(single)):
        w = weight_of(name, plan["weights"])
        kind = name[len(w["name"]) + 1:].split(".")[0] if w else "?"
        x = np.load(os.path.join(single, name))
        paths = [os.path.join(dump, "rank%d" % r, name) for r in range(world)]
        present = [os.path.exists(p) for p in paths]
        if not any(present):
            missing += 1
            if not any(s.startswith(kind + " of '" + (w["name"] if w else "")) for s in skipped):
                good = False
                print("  %s: no rank wrote %s, and none says why" % (label, name))
            continue
        if not all(present):
            good = False
            print("  %s: only some ranks wrote %s" % (label, name))
            continue
        ys = [np.load(p) for p in paths]
        if all(y.tobytes() == x.tobytes() and y.shape == x.shape for y in ys):
            ok = True  # whole on every rank: a replicated weight's, or a row-parallel quant_int8's scales
        elif world == 1 or (w and w["split"] == "replicated"):
            ok = all(y.tobytes() == x.tobytes() and y.shape == x.shape for y in ys)
        else:
            parts = w["parts"] if w else 1
            ok = False
            for axis in range(x.ndim):
                if x.shape[axis] % parts or any(y.ndim != x.ndim or y.shape[axis] % parts for y in ys):
                    continue
                pieces = [np.split(y, parts, axis=axis) for y in ys]
                whole = np.concatenate([np.concatenate([p[i] for p in pieces], axis=axis) for i in range(parts)], axis=axis)
                if whole.shape == x.shape and whole.tobytes() == x.tobytes():
                    ok = True
                    break
        joined += ok
        if not ok:
            good = False
            print("  %s: the ranks' %s do not join into the single-process one" % (label, name))
    expect(good and joined > 0, "%s: every derived file is the ranks' pieces joined (%d joined, %d skipped by every rank "
                                "with its reason)" % (label, joined, missing))
    row_parallel = [s for s in skipped if s.startswith("quant_int8 ")]
    expect(not row_parallel, "%s: no rank skips a quant_int8 (row-parallel ones take the ranks' maxima; got %s)" %
           (label, row_parallel[:2]))


def check_reports(label, lines, plan, referenced, world):
    # In rank order, whole: an MPI job's rank 0 prints every rank's report
    # (two ranks writing long lines side by side could interleave them).
    ranks = [json.loads(l) for l in lines if l.startswith("{")]
    if not expect([r["rank"] for r in ranks] == list(range(world)), "%s: one report per rank, in rank order" % label):
        return
    want = {p["rank"]: p for p in plan["ranks"]}
    if "in place" in label:
        # No load: each rank's shards are its mapping's bytes (kept) or
        # gathered from it (read); nothing crosses between ranks.
        expect(all(r["in_place"] and r["exchange"] == "none" and r["sent_bytes"] == 0 and r["received_bytes"] == 0
                   for r in ranks), "%s: every rank took its shards in place, trading nothing" % label)
        expect(all(r["kept_bytes"] + r["read_bytes"] == want[r["rank"]]["device_bytes"] == r["device_bytes"]
                   for r in ranks), "%s: each rank's shards in its mapping and gathered add up to its plan's "
               "device bytes (got %s)" % (label, [(r["kept_bytes"], r["read_bytes"], r["device_bytes"]) for r in ranks]))
        expect(world == 1 or all(r["kept_bytes"] > 0 for r in ranks),
               "%s: every rank holds shards in its mapping, not copied" % label)
        return
    expect(not any(r["in_place"] for r in ranks), "%s: no rank says it is in place" % label)
    expect(sum(r["read_bytes"] for r in ranks) == referenced,
           "%s: the ranks read %d bytes together = the referenced bytes (%d), each once" %
           (label, sum(r["read_bytes"] for r in ranks), referenced))
    expect(sum(r["sent_bytes"] for r in ranks) == sum(r["received_bytes"] for r in ranks), "%s: every byte sent is received" % label)
    expect(all(r["device_bytes"] == want[r["rank"]]["device_bytes"] for r in ranks),
           "%s: each rank holds its plan's device bytes" % label)
    expect(all(r["received_bytes"] == want[r["rank"]]["cooperative"]["received_bytes"] and
               r["sent_bytes"] == want[r["rank"]]["cooperative"]["sent_bytes"] for r in ranks),
           "%s: what each rank sent and received is what inspect --world planned" % label)


def check_residency(label, dcmd, derived, work):
    """derive --comm --residency S: each rank's derivations pinned through a
    Residency over its own shards write the same files as the direct launches
    (`derived`), on every strategy and on a paged budget half the auto one
    (which evicts); each rank reports its residency, never above its budget,
    and its auto budget is its shards plus its derivations."""
    auto = None
    for strategy, budget in (("upload", None), ("zero-copy", None), ("paged", None), ("paged", "half")):
        what = "%s, --residency %s%s" % (label, strategy, " at half the auto budget" if budget else "")
        out = os.path.join(work, "resident-%s-%s" % (strategy, budget or "auto"))
        shutil.rmtree(out, ignore_errors=True)
        cmd = dcmd + ["--residency", strategy, "--dump", out, "--json", "--timeout-s", "60"]
        if budget:
            if auto is None:
                continue
            cmd += ["--budget", str(auto // 2)]
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=MPI_ENV)
        if not expect(proc.returncode == 0, "%s: exits 0 (got %d: %s)" % (what, proc.returncode, proc.stderr.strip()[-400:])):
            continue
        same = filecmp.dircmp(derived, out)
        files = sorted(os.path.relpath(os.path.join(d, f), derived) for d, _, fs in os.walk(derived) for f in fs)
        mine = sorted(os.path.relpath(os.path.join(d, f), out) for d, _, fs in os.walk(out) for f in fs)
        differ = [f for f in files if f in mine and not filecmp.cmp(os.path.join(derived, f), os.path.join(out, f), shallow=False)]
        expect(files == mine and not differ, "%s: the same files as the direct derive, byte for byte (missing or extra: %s; "
               "differ: %s)" % (what, sorted(set(files) ^ set(mine))[:5], differ[:5]))
        for r in (json.loads(l) for l in proc.stdout.splitlines() if l.startswith("{")):
            res = r.get("residency") or {}
            expect(res.get("strategy") == strategy and res["peak_device_bytes"] <= (res["budget_bytes"] or 2**64),
                   "%s: rank %d reports its residency within its budget (got %s)" % (what, r["rank"], res))
            if strategy == "zero-copy" and "in place" in label:
                # Shards in place are views of the file: registered where they lie, not uploaded.
                expect(res["registered_bytes"] > 0 and res["host_copy_bytes"] == 0,
                       "%s: rank %d registers its in-place shards in the mapping (got %s)" % (what, r["rank"], res))
            if strategy == "paged" and not budget:
                expect(res["budget_bytes"] == r["device_bytes"] + r["derived_bytes"] + r["row_maxima_bytes"],
                       "%s: rank %d's auto budget is its shards plus its derivations and their rows' maxima "
                       "(%s vs %d + %d + %d)" % (what, r["rank"], res["budget_bytes"], r["device_bytes"],
                                                 r["derived_bytes"], r["row_maxima_bytes"]))
                auto = res["budget_bytes"] if auto is None else min(auto, res["budget_bytes"])
            if budget:
                expect(res["derived_evictions"] + res["source_evictions"] > 0,
                       "%s: rank %d evicts under half its auto budget (got %s)" % (what, r["rank"], res))


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--ballast", required=True)
    p.add_argument("--gen", required=True)
    p.add_argument("--work", required=True)
    p.add_argument("--mpi-library", default="", help="libballast_comm_mpi.so when it was built")
    a = p.parse_args()
    shutil.rmtree(a.work, ignore_errors=True)
    os.makedirs(a.work)
    cli = a.ballast

    llm = os.path.join(a.work, "llm")
    gen = subprocess.run([sys.executable, os.path.join(a.gen, "make_llm_model.py"), llm, "--layers", "2", "--hidden",
                          "128", "--ffn", "256", "--vocab", "512"], capture_output=True, text=True)
    if gen.returncode != 0:
        skip("the llm model was not generated: %s" % gen.stderr.strip()[-300:])
    # A Hugging Face-named safetensors file ([out, in] Linear weights, a
    # fused gate_up split part by part), beside the llm ONNX model.
    hf = os.path.join(a.work, "hf.safetensors")
    write_safetensors(hf, HF + [("model.layers.0.mlp.gate_up_proj.weight", "F16", [64, 16], 2)])
    models = [("onnx", os.path.join(llm, "llm.onnx"), onnx_arrays(os.path.join(llm, "llm.onnx"))),
              ("safetensors", hf, safetensors_arrays(hf))]
    mpirun = shutil.which("mpirun")
    mpi = bool(mpirun) and bool(a.mpi_library) and os.path.exists(a.mpi_library)
    if not mpi:
        print("note: the mpi runs are skipped: %s" % ("no mpirun" if not mpirun else "the mpi communicator is not built"))

    # Vulkan where a device opens (lavapipe here and in CI).
    rc, _, err = run(cli, "load", hf, "--comm", "local", "--world", "1", "--backend", "vulkan")
    vulkan = rc == 0
    if not vulkan:
        print("note: the vulkan runs are skipped: %s" % err.strip()[-200:])

    # The single-process derive of each model: what the ranks' pieces join into.
    singles = {}
    for fmt, model, _ in models:
        singles[fmt] = os.path.join(a.work, "single-" + fmt)
        shutil.rmtree(singles[fmt], ignore_errors=True)
        rc, _, err = run(cli, "derive", model, "--dump", singles[fmt])
        expect(rc == 0, "%s: the single-process derive (got %d: %s)" % (fmt, rc, err.strip()[-300:]))

    # --round-bytes takes a byte count, not auto or zero; no reason offers
    # auto (a bad count was answered "... 1.5GiB, or auto").
    for bad in ("auto", "0", "-1", "12Q"):
        rc, _, err = run(cli, "load", models[0][1], "--comm", "local", "--world", "2", "--round-bytes", bad)
        expect(rc == 2 and "--round-bytes" in err and "budget" not in err and "or auto" not in err,
               "--round-bytes %s is refused, naming the option, not a budget, not suggesting auto (got %d: %s)"
               % (bad, rc, err.strip()[-200:]))
    # --round-bytes sizes rounds only: where the ranks trade in messages
    # (--exchange messages, or auto on local, which has them) it was
    # silently ignored; now refused, one line. (With rounds: "small rounds" below.)
    for command, exchange in (("load", ["--exchange", "messages"]), ("load", ["--exchange", "auto"]), ("load", []),
                              ("derive", ["--exchange", "messages"])):
        rc, _, err = run(cli, command, models[0][1], "--comm", "local", "--world", "2", *exchange, "--round-bytes", "1K")
        expect(rc == 2 and err.startswith("ballast %s: invalid_argument: --round-bytes sizes the rounds" % command)
               and len(err.strip().splitlines()) == 1,
               "%s --round-bytes with %s is refused, one line (got %d: %s)"
               % (command, " ".join(exchange) or "the default exchange", rc, err.strip()[-200:]))

    # The text report's summary: in place, the shards each rank read from
    # its own mapping; otherwise what the ranks read together. (Every run
    # below is --json, which prints neither.)
    for extra, want, other in (([], "the ranks read ", "in place: "),
                               (["--in-place"], "in place: the ranks' shards are ", "the ranks read ")):
        rc, out, err = run(cli, "load", models[0][1], "--comm", "local", "--world", "2", *extra)
        expect(rc == 0 and want in out and other not in out,
               "load --comm local --world 2 %s: the text summary says %r (got %d: %s)"
               % (" ".join(extra), want.strip(), rc, (out + err).strip()[-300:]))

    round_counts = {}  # (format, world, how, rank) -> rounds traded
    for fmt, model, arrays in models:
        for world in (1, 2, 4):
            rc, out, err = run(cli, "inspect", model, "--world", world, "--json")
            if not expect(rc == 0, "%s: inspect --world %d (got %d: %s)" % (fmt, world, rc, err.strip()[-300:])):
                continue
            doc = json.loads(out)
            plan, referenced = doc["shards"], doc["totals"]["referenced_bytes"]
            runs = [("local", [cli, "load", model, "--comm", "local", "--world", str(world)]),
                    # No load: each rank's shards from the model it opened (shards_in_place).
                    ("local in place", [cli, "load", model, "--comm", "local", "--world", str(world), "--in-place"])]
            if mpi and world == 2:
                runs.append(("mpi in place", [mpirun, "-np", str(world), "--oversubscribe", cli, "load", model, "--comm",
                                              "mpi", "--in-place"]))
            if world > 1:
                # Rounds (Communicator::exchange, NCCL's only way): the same shards, traded collectively.
                runs.append(("local rounds", [cli, "load", model, "--comm", "local", "--world", str(world),
                                              "--exchange", "rounds"]))
            if world == 2:
                # Small rounds (--round-bytes): the same shards in more rounds.
                small = "4K" if fmt == "onnx" else "256"  # the safetensors model trades about 1 KiB
                runs.append(("local small rounds", [cli, "load", model, "--comm", "local", "--world", str(world),
                                                    "--exchange", "rounds", "--round-bytes", small]))
            if mpi and world > 1:
                runs.append(("mpi", [mpirun, "-np", str(world), "--oversubscribe", cli, "load", model, "--comm", "mpi"]))
                runs.append(("mpi rounds", [mpirun, "-np", str(world), "--oversubscribe", cli, "load", model, "--comm",
                                            "mpi", "--exchange", "rounds"]))
            if vulkan and world > 1:
                runs.append(("local on vulkan", [cli, "load", model, "--comm", "local", "--world", str(world),
                                                 "--backend", "vulkan"]))
                if mpi:
                    runs.append(("mpi on vulkan", [mpirun, "-np", str(world), "--oversubscribe", cli, "load", model,
                                                   "--comm", "mpi", "--backend", "vulkan"]))
            for how, cmd in runs:
                label = "%s, %s, %d rank(s)" % (fmt, how, world)
                dump = os.path.join(a.work, "dump-%s-%s-%d" % (fmt, how.replace(" ", "-"), world))
                shutil.rmtree(dump, ignore_errors=True)
                proc = subprocess.run(cmd + ["--dump", dump, "--json", "--timeout-s", "60"], capture_output=True,
                                      text=True, timeout=300, env=MPI_ENV)
                if not expect(proc.returncode == 0, "%s: exits 0 (got %d: %s)" % (label, proc.returncode, proc.stderr.strip()[-400:])):
                    continue
                check_reports(label, proc.stdout.splitlines(), plan, referenced, world)
                for line in proc.stdout.splitlines():
                    if line.startswith("{"):
                        r = json.loads(line)
                        want = "none" if "in place" in how else "rounds" if "rounds" in how else "messages"
                        expect(r["exchange"] == want and (r["rounds"] > 0) == (want == "rounds"),
                               "%s: rank %d traded in %s (got %s, %d rounds)" % (label, r["rank"], want, r["exchange"], r["rounds"]))
                        round_counts[(fmt, world, how, r["rank"])] = r["rounds"]
                if how == "local small rounds":
                    for rank in range(world):
                        small, default = (round_counts.get((fmt, world, h, rank), 0) for h in (how, "local rounds"))
                        expect(small > default > 0, "%s: rank %d traded in more rounds with a small --round-bytes (%d) "
                               "than with the default (%d)" % (label, rank, small, default))
                check_dumps(label, dump, plan, arrays, world)
                # derive --comm: each rank derives its shards; joined, they
                # are the single-process derive's files.
                derived = os.path.join(a.work, "derived-%s-%s-%d" % (fmt, how.replace(" ", "-"), world))
                shutil.rmtree(derived, ignore_errors=True)
                dcmd = [c if c != "load" else "derive" for c in cmd]
                proc = subprocess.run(dcmd + ["--dump", derived, "--json", "--timeout-s", "60"], capture_output=True,
                                      text=True, timeout=300, env=MPI_ENV)
                if not expect(proc.returncode == 0, "%s: derive exits 0 (got %d: %s)" %
                              (label, proc.returncode, proc.stderr.strip()[-400:])):
                    continue
                reports = [json.loads(l) for l in proc.stdout.splitlines() if l.startswith("{")]
                check_derived(label, singles[fmt], derived, plan, world, reports)
                if world == 2 and how in ("local", "mpi", "local on vulkan", "local in place"):
                    check_residency(label, dcmd, derived, a.work)
                if how == "mpi":
                    # The text report: each rank's block whole, in rank order.
                    proc = subprocess.run(dcmd + ["--residency", "paged", "--timeout-s", "60"], capture_output=True,
                                          text=True, timeout=300, env=MPI_ENV)
                    heads = [l.split(" ")[1] for l in proc.stdout.splitlines() if re.match(r"rank \d+ of ", l)]
                    blocks = re.split(r"^rank \d+ of ", proc.stdout, flags=re.M)[1:]
                    expect(proc.returncode == 0 and heads == [str(r) for r in range(world)] and
                           all("derived" in b and "page" in b for b in blocks),
                           "%s: derive's text report is each rank's block whole, in rank order (got %d: %s)" %
                           (label, proc.returncode, proc.stdout[-600:] + proc.stderr[-300:]))

    if mpi:
        model = models[1][1]
        # Ranks with different plans (one keeps every weight whole): the
        # bytes one sends are not what the other's plan takes. Both fail,
        # one naming the other, and the job ends.
        whole = os.path.join(a.work, "replicate-all.json")
        with open(whole, "w") as f:
            json.dump({"defaults": False, "rules": [{"pattern": "*", "split": "replicated"}]}, f)
        rank0 = ["-np", "1", cli, "load", model, "--comm", "mpi", "--timeout-s", "20"]
        proc, took = timed([mpirun] + rank0 + [":"] + rank0 + ["--shard-rules", whole])
        expect(proc.returncode != 0 and "do the ranks have the same model and plan" in proc.stderr and took < 15,
               "mpi: ranks with different plans fail, naming a rank, in %.1f s (got %d: %s)" %
               (took, proc.returncode, proc.stderr.strip()[-400:]))
        # Ranks given different --exchange: the error says so, not that
        # the plans differ.
        proc, took = timed([mpirun] + rank0 + ["--exchange", "rounds", ":"] + rank0 + ["--exchange", "messages"])
        expect(proc.returncode != 0 and "the same exchange mode (--exchange)" in proc.stderr and
               "same model and plan" not in proc.stderr and took < 15,
               "mpi: ranks given different --exchange fail, naming the mismatch, in %.1f s (got %d: %s)" %
               (took, proc.returncode, proc.stderr.strip()[-400:]))
        # A rank whose model does not open tells the others at once.
        proc, took = timed([mpirun] + rank0 + [":", "-np", "1", cli, "load", model + ".missing", "--comm", "mpi",
                                               "--timeout-s", "20"])
        expect(proc.returncode != 0 and "rank 1 failed" in proc.stderr and took < 15,
               "mpi: a rank whose model does not open fails the others, naming it, in %.1f s (got %d: %s)" %
               (took, proc.returncode, proc.stderr.strip()[-400:]))
        # A rank that dies before it loads: the job ends (mpirun takes the
        # others down), it does not hang.
        proc, took = timed([mpirun] + rank0 + [":", "-np", "1", "sh", "-c", "exit 3"])
        expect(proc.returncode != 0 and took < 60,
               "mpi: a rank that dies ends the job in %.1f s with a failure (got %d)" % (took, proc.returncode))

    # A --dump folder that cannot be made is said once, before anything is
    # loaded (it was found only after the load, once per rank).
    blocker = os.path.join(a.work, "dump-blocker")
    with open(blocker, "w") as f:
        f.write("a file where the dump folder would go\n")
    rc, _, err = run(cli, "load", models[1][1], "--comm", "local", "--world", "2", "--dump",
                     os.path.join(blocker, "dump"))
    lines = err.strip().splitlines()
    expect(rc == 2 and len(lines) == 1 and "cannot create dump directory" in lines[0] and "rank 0 of 2" not in err,
           "a --dump folder that cannot be made fails once, before the load (got %d: %s)" % (rc, err.strip()[-400:]))

    # Usage: local needs --world; --world must match an MPI job's.
    rc, _, err = run(cli, "load", models[1][1], "--comm", "local")
    expect(rc == 2 and err.startswith("ballast load: invalid_argument: --comm local needs --world N")
           and len(err.strip().splitlines()) == 1,
           "local without --world is refused, one line with its code (got %d: %s)" % (rc, err.strip()))
    # Every single-process option is refused when given at all, its default
    # value too (--residency upload and --populate-threads 0 were let through
    # for equalling the defaults).
    for bad in (["--mmap"], ["--residency", "upload"], ["--populate-threads", "0"], ["--budget", "auto"],
                ["--read-cached"]):
        rc, _, err = run(cli, "load", models[1][1], "--comm", "local", "--world", "2", *bad)
        expect(rc == 2 and err.startswith("ballast load: invalid_argument: --comm takes none of")
               and "given: " + bad[0] in err and len(err.strip().splitlines()) == 1,
               "--comm with %s is refused, one line with its code naming it (got %d: %s)"
               % (" ".join(bad), rc, err.strip()))
    rc, _, err = run(cli, "load", models[1][1], "--comm", "gloo?x")
    expect(rc == 2 and "not_found" in err and "libballast_comm_gloo.so" in err,
           "a communicator library that is not there is not_found, naming it (got %d: %s)" % (rc, err.strip()[-300:]))

    if FAILURES:
        print("%d check(s) failed" % len(FAILURES))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
