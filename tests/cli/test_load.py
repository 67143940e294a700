#!/usr/bin/python3
"""`ballast load` on one backend (issue 28's read path, docs/loading.md).

  test_load.py --ballast BIN --gen DIR --work DIR --backend cpu|vulkan

- an LLM-shaped model with an orphaned prefix 8x its referenced bytes,
  written for real (not sparse): the read path reads exactly the
  referenced bytes (never the prefix), through every strategy; the same
  after --cold (whatever the process may drop) and with each engine
  (io_uring, threads), buffered and O_DIRECT;
- --mmap and the read path build the same number of values;
- staging stays within its ring; no host copies; the device is back at its
  baseline afterwards (exit 0);
- --anchor reports every thread count and a ratio;
- bad input: a missing model, a bad engine or strategy, a chunk of 0 MiB:
  one-line error, exit 2; a data file truncated after the model was
  written: exit 2 naming the file.

Exit 0 pass, 1 fail, 77 skipped (no device here, or no onnx), with the
reason printed.
"""

import argparse
import json
import os
import shutil
import subprocess
import sys

from cli_check import FAILURES, expect, skip


def run(ballast, *args):
    proc = subprocess.run([ballast, *map(str, args)], capture_output=True, text=True, timeout=600)
    return proc.returncode, proc.stdout, proc.stderr


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ballast", required=True)
    ap.add_argument("--gen", required=True)
    ap.add_argument("--work", required=True)
    ap.add_argument("--backend", required=True)
    args = ap.parse_args()
    try:
        import onnx  # noqa: F401
    except ImportError:
        skip("python3-onnx is not installed")

    rc, out, err = run(args.ballast, "backends", "--load", "--json")
    listing = {b["name"]: b for b in json.loads(out)["backends"]} if rc == 0 else {}
    if args.backend != "cpu" and not listing.get(args.backend, {}).get("available"):
        skip("backend %s is not available here: %s" % (args.backend, listing.get(args.backend, {}).get("reason")))

    shutil.rmtree(args.work, ignore_errors=True)
    os.makedirs(args.work)
    model_dir = os.path.join(args.work, "model")
    # 2 layers at H=256: about 1.6 MiB referenced; the prefix 8x that.
    gen = ["/usr/bin/python3", os.path.join(args.gen, "make_llm_model.py"), model_dir, "--layers", "2", "--hidden",
           "256", "--ffn", "512", "--vocab", "1024"]
    subprocess.run(gen + ["--orphaned-prefix", "0"], check=True, capture_output=True)
    plain = os.path.getsize(os.path.join(model_dir, "llm.weights"))
    subprocess.run(gen + ["--orphaned-prefix", str(8 * plain)], check=True, capture_output=True)
    model = os.path.join(model_dir, "llm.onnx")

    def load(*extra):
        rc, out, err = run(args.ballast, "load", model, "--backend", args.backend, "--json", *extra)
        try:
            return rc, json.loads(out), err
        except ValueError:
            return rc, {}, err

    builds = {}
    for strategy in ("upload", "paged", "zero-copy"):
        for extra in (("--read-cached",), ("--cold",), ("--engine", "threads", "--read-cached"),
                      ("--engine", "threads", "--direct-io", "--read-cached"), ("--cold", "--direct-io"),
                      ("--buffered", "--read-cached"),
                      ("--chunk-mib", "1", "--staging", "2", "--queue-depth", "2", "--read-cached"),
                      # The library's bounds: a ring of one buffer, 1,024 reads in flight.
                      ("--staging", "1", "--queue-depth", "1024", "--read-cached"),
                      # 0 is the default the help shows (one per hardware thread), so it is accepted.
                      ("--populate-threads", "0", "--read-cached"), ("--populate-threads", "2", "--read-cached")):
            label = "%s %s" % (strategy, " ".join(extra))
            rc, doc, err = load("--residency", strategy, *extra)
            expect(rc == 0, "%s: exit 0 (%d: %s)" % (label, rc, err.strip()))
            if rc != 0:
                continue
            referenced = doc["referenced_bytes"]
            expect(referenced < plain + 4096, "%s: the referenced bytes exclude the prefix" % label)
            read = doc["load"]["read"]
            stats = doc["stats"]
            expect(stats.get("host_copy_bytes") == 0, "%s: no host copies" % label)
            if strategy == "zero-copy":
                expect(read["bytes"] == 0 and doc["load"]["populated_bytes"] == referenced,
                       "%s: zero-copy reads nothing and populates the referenced bytes (%d, %d of %d)"
                       % (label, read["bytes"], doc["load"]["populated_bytes"], referenced))
            else:
                expect(read["bytes"] == referenced and doc["load"]["planned_bytes"] == referenced,
                       "%s: read exactly the referenced bytes (%d of %d)" % (label, read["bytes"], referenced))
                expect(read["io_bytes"] < referenced + 8192 * max(1, read["reads"]),
                       "%s: I/O within the alignment margins (%d)" % (label, read["io_bytes"]))
                ring = read["staging_bytes"]
                expect(0 < read["peak_staging_in_use"] <= ring, "%s: staging within its ring (%d of %d)"
                       % (label, read["peak_staging_in_use"], ring))
                if "--engine" in extra:
                    expect(read["engine"] == "threads", "%s: the engine asked for ran" % label)
                if "--direct-io" in extra:
                    expect(read["direct_files"] == 1, "%s: O_DIRECT on this file system (%d)" % (label, read["direct_files"]))
                else:
                    expect(read["direct_files"] == 0, "%s: buffered by default and with --buffered" % label)
            expect(doc["load"]["left_for_demand"] == 0, "%s: nothing left for demand" % label)
            builds.setdefault(strategy, doc["stats"]["derived_builds"])
            expect(doc["stats"]["derived_builds"] == builds[strategy], "%s: the same builds every time" % label)
        rc, doc, err = load("--residency", strategy, "--mmap")
        expect(rc == 0 and doc.get("path") == "mmap" and "load" not in doc, "%s --mmap: the mapped path (%s)"
               % (strategy, err.strip()))
        if rc == 0:
            expect(doc["stats"]["derived_builds"] == builds[strategy],
                   "%s --mmap builds what the read path builds (%d, %d)" % (strategy, doc["stats"]["derived_builds"],
                                                                             builds[strategy]))

    # Every format through the same store: safetensors (one file, and the
    # sharded checkpoint the generator writes) and GGUF (a llama-shaped
    # file with gaps the tensors leave, and a split set).
    st_dir = os.path.join(args.work, "st")
    subprocess.run(["/usr/bin/python3", os.path.join(args.gen, "make_llm_model.py"), st_dir, "--layers", "2",
                    "--hidden", "256", "--ffn", "512", "--vocab", "1024", "--safetensors"], check=True,
                   capture_output=True)
    gguf_dir = os.path.join(args.work, "gguf")
    subprocess.run(["/usr/bin/python3", os.path.join(args.gen, "make_gguf_models.py"), gguf_dir], check=True,
                   capture_output=True)
    sharded_dir = os.path.join(args.work, "sharded")
    subprocess.run(["/usr/bin/python3", os.path.join(args.gen, "make_safetensors_models.py"), sharded_dir],
                   check=True, capture_output=True)
    for other in (os.path.join(st_dir, "llm.safetensors"), os.path.join(gguf_dir, "llama.gguf"),
                  os.path.join(gguf_dir, "gap.gguf"), os.path.join(gguf_dir, "split", "model-00001-of-00003.gguf"),
                  os.path.join(sharded_dir, "sharded", "model.safetensors.index.json")):
        name = os.path.relpath(other, args.work)
        for strategy in ("upload", "paged"):
            rc, out, err = run(args.ballast, "load", other, "--backend", args.backend, "--residency", strategy,
                               "--json", "--chunk-mib", "1", "--read-cached")
            doc = json.loads(out) if rc == 0 else {}
            read = doc.get("load", {}).get("read", {}).get("bytes")
            expect(rc == 0 and read == doc.get("referenced_bytes") and read > 0,
                   "%s %s: read exactly the referenced bytes (%r of %r; %s)"
                   % (name, strategy, read, doc.get("referenced_bytes"), err.strip()[:200]))
            rc2, out2, err2 = run(args.ballast, "load", other, "--backend", args.backend, "--residency", strategy,
                                  "--json", "--mmap")
            doc2 = json.loads(out2) if rc2 == 0 else {}
            expect(rc2 == 0 and doc2.get("stats", {}).get("derived_builds") == doc.get("stats", {}).get("derived_builds"),
                   "%s %s: --mmap builds what the read path builds" % (name, strategy))

    # The read plan, printed: the referenced bytes, in ranges that skip the prefix.
    rc, out, err = run(args.ballast, "load", model, "--plan", "--json")
    plan = json.loads(out) if rc == 0 else {}
    expect(rc == 0 and plan.get("bytes") == plan.get("referenced_bytes")
           and all(r["offset"] >= 8 * plain for f in plan["files"] for r in f["ranges"]),
           "--plan: the referenced bytes, none in the prefix (%s)" % err.strip())
    rc, out, err = run(args.ballast, "load", model, "--plan")
    expect(rc == 0 and "llm.weights" in out and "range" in out, "--plan prints the files and ranges")

    # A relative MODEL: "model" is the absolute path, as derive and inspect print it.
    for extra in (("--plan",), ("--backend", args.backend)):
        p = subprocess.run([os.path.abspath(args.ballast), "load", "llm.onnx", "--json", *extra], cwd=model_dir,
                           capture_output=True, text=True, timeout=600)
        got = json.loads(p.stdout).get("model") if p.returncode == 0 else None
        expect(got == os.path.abspath(model), "load llm.onnx --json %s (relative): model is the absolute path (%r; %s)"
               % (" ".join(extra), got, p.stderr.strip()))

    # paged keeps what it read in the page cache only when its budget
    # cannot hold every value (evictions page in again from the mapping):
    # at the auto budget it drops it, so the next load reads everything;
    # at half of it, it keeps what it read, so the next load finds it cached.
    rc, doc, err = load("--residency", "paged", "--cold")
    expect(rc == 0 and doc.get("page_cache") == "drop", "paged at the auto budget drops the page cache (%s)" % err.strip())
    rc, after, err = load()
    expect(rc == 0 and after["load"]["cached_bytes"] == 0 and after["load"]["read"]["bytes"] == after["referenced_bytes"],
           "after paged at the auto budget, nothing is cached (cached %s, read %s of %s; %s)"
           % (after.get("load", {}).get("cached_bytes"), after.get("load", {}).get("read", {}).get("bytes"),
              after.get("referenced_bytes"), err.strip()))
    half = doc["stats"]["budget_bytes"] // 2 if rc == 0 else 1 << 20
    for _ in range(3):  # another test's --cold may drop every file's cache meanwhile (the warm case below)
        rc, doc, err = load("--residency", "paged", "--budget", str(half), "--cold")
        expect(rc == 0 and doc.get("page_cache") == "keep" and doc["load"]["read"]["bytes"] > 0,
               "paged at half the auto budget keeps the page cache (%s)" % err.strip())
        rc, after, err = load()
        if rc != 0 or after["load"]["cached_bytes"] > 0:
            break
    expect(rc == 0 and after["load"]["cached_bytes"] > 0,
           "after paged at half the auto budget, what it read is cached (%s)" % err.strip())

    # Warm: copied from the mapping, nothing read. The file is read whole
    # first (the loads above drop what they read from the page cache). Run
    # as root, another test's --cold may drop the whole system's page cache
    # (/proc/sys/vm/drop_caches) between the warming and the load (seen
    # with ctest -j2): a load that found less cached is tried again, warmed
    # again, up to three times.
    for _ in range(3):
        with open(os.path.join(model_dir, "llm.weights"), "rb") as f:
            while f.read(8 << 20):
                pass
        rc, doc, err = load()
        if rc != 0 or doc["load"]["cached_bytes"] == doc["referenced_bytes"]:
            break
    expect(rc == 0 and doc["load"]["read"]["bytes"] == 0 and doc["load"]["cached_bytes"] == doc["referenced_bytes"],
           "warm: every source from the page cache, nothing read (%s)" % err.strip())

    rc, doc, err = load("--anchor")
    expect(rc == 0 and [t["threads"] for t in doc.get("anchor", {}).get("trials", [])] == [1, 2, 4, 8, 16]
           and doc["anchor"]["ratio"] > 0, "--anchor: every thread count and a ratio (%s)" % err.strip())

    rc, out, err = run(args.ballast, "load", model, "--backend", args.backend)
    expect(rc == 0 and "read path" in out and "referenced bytes" in out, "the plain report (%s)" % err.strip())

    def one_line(err, *words):
        lines = [l for l in err.splitlines() if l.strip()]
        return len(lines) == 1 and all(w in lines[0] for w in words)

    rc, out, err = run(args.ballast, "load", os.path.join(args.work, "missing.onnx"), "--backend", args.backend)
    expect(rc == 2 and one_line(err, "missing.onnx"), "a missing model: exit 2, one line (%d: %s)" % (rc, err))
    for bad in (("--engine", "aio"), ("--residency", "somewhere"), ("--chunk-mib", "0"), ("--populate-threads", "257"),
                ("--staging", "0"), ("--staging", "1025"), ("--queue-depth", "1025"), ("--chunk-mib", "1025")):
        rc, out, err = run(args.ballast, "load", model, "--backend", args.backend, *bad)
        expect(rc == 2, "%s: exit 2 (%d)" % (" ".join(bad), rc))
    # Flags that contradict each other, or that --plan (which loads nothing)
    # would ignore: refused, one line with the code, never the last one winning.
    for bad in (("--direct-io", "--buffered"), ("--buffered", "--direct-io"), ("--plan", "--cold"),
                ("--plan", "--mmap"), ("--plan", "--anchor")):
        rc, out, err = run(args.ballast, "load", model, "--backend", args.backend, *bad)
        expect(rc == 2 and one_line(err, "invalid_argument", bad[0], bad[1]),
               "%s: refused, one line naming both (%d: %s)" % (" ".join(bad), rc, err.strip()))
    # A load that fails on the device: a safetensors weight of 1 TiB (a
    # sparse file) no backend allocates. The error opens with what was being
    # loaded, the model's file name (it read "loading load: ...").
    huge = os.path.join(args.work, "huge.safetensors")
    header = json.dumps({"w": {"dtype": "F32", "shape": [1 << 20, 1 << 18], "data_offsets": [0, 1 << 40]}}).encode()
    header += b" " * (-len(header) % 8)
    with open(huge, "wb") as f:
        f.write(len(header).to_bytes(8, "little") + header)
        f.truncate(8 + len(header) + (1 << 40))
    rc, out, err = run(args.ballast, "load", huge, "--backend", args.backend)
    # (Another backend may refuse it before the load: the words only on cpu.)
    expect(rc == 2 and "loading load" not in err and (args.backend != "cpu" or one_line(err, "loading huge.safetensors: ")),
           "a load that fails on the device: exit 2, one line saying what was loading (%d: %s)" % (rc, err.strip()))
    os.remove(huge)
    # The data file cut short after the model was written: an io error naming it.
    with open(os.path.join(model_dir, "llm.weights"), "r+b") as f:
        f.truncate(os.path.getsize(os.path.join(model_dir, "llm.weights")) - 4096)
    rc, out, err = run(args.ballast, "load", model, "--backend", args.backend)
    expect(rc == 2 and "llm.weights" in err, "a truncated data file: exit 2 naming it (%d: %s)" % (rc, err.strip()))

    if FAILURES:
        print("%d failure(s)" % len(FAILURES))
        return 1
    print("ballast load on %s: all checks passed" % args.backend)
    return 0


if __name__ == "__main__":
    sys.exit(main())
