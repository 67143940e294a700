#!/usr/bin/python3
"""Differential test: ballast's wire decoder against python-onnx.

Generates the corpus with tools/gen/make_test_models.py (each model with a
.expect.json written from onnx's own view), runs
`ballast inspect --json --hash` on every model and requires the same weight
names, source kinds, dtypes, dims, locations, byte lengths and SHA-256 of the
bytes, the same string tensors, every sparse initializer either supported or
reported by name, and the same per-file mapped/referenced/dead bytes and dead
ranges. Exit 0 pass, 1 fail, 77 skipped (with the reason printed).
"""

import argparse
import glob
import json
import os
import subprocess
import sys


def skip(reason):
    print("skipped: " + reason)
    sys.exit(77)


class Mismatch:
    def __init__(self, model):
        self.model = model
        self.problems = []

    def check(self, ok, what):
        if not ok:
            self.problems.append(what)
        return ok

    def equal(self, got, want, what):
        return self.check(got == want, "%s: ballast %r, onnx %r" % (what, got, want))


def run_inspect(ballast, model_path):
    proc = subprocess.run([ballast, "inspect", "--json", "--hash", model_path],
                          capture_output=True, text=True, timeout=120)
    if proc.returncode != 0:
        return None, "exit %d: %s" % (proc.returncode, proc.stderr.strip())
    try:
        return json.loads(proc.stdout), None
    except json.JSONDecodeError as e:
        return None, "invalid JSON on stdout: %s" % e


def compare_weights(m, got, want):
    got_names = [w["name"] for w in got["weights"]]
    m.check(len(got_names) == len(set(got_names)), "duplicate weight names: %r" % sorted(
        n for n in set(got_names) if got_names.count(n) > 1))
    by_name = {w["name"]: w for w in got["weights"]}
    want_names = {w["name"] for w in want["weights"]}
    sparse = set(want["sparse_initializers"])
    extra = set(by_name) - want_names - sparse
    m.check(not extra, "weights python does not see: %s" % sorted(extra))
    for w in want["weights"]:
        g = by_name.get(w["name"])
        if not m.check(g is not None, "missing weight %r" % w["name"]):
            continue
        label = "weight %r" % w["name"]
        for key in ("source", "dtype", "dims", "bytes", "location", "sha256"):
            m.equal(g.get(key), w[key], "%s %s" % (label, key))
        m.equal(g.get("length"), w["bytes"], label + " length")
        if w["location"] == "external":
            m.equal(os.path.realpath(g.get("file") or ""), w["file"], label + " file")
            m.equal(g.get("offset"), w["offset"], label + " offset")


def compare_strings(m, got, want):
    got_strings = {(s["name"], s["source"]) for s in got.get("string_tensors", [])}
    want_strings = {(s["name"], s["source"]) for s in want["string_tensors"]}
    m.equal(sorted(got_strings), sorted(want_strings), "string tensors (name, source)")
    weight_names = {w["name"] for w in got["weights"]}
    for name, _ in want_strings:
        m.check(name not in weight_names, "string tensor %r listed as a weight" % name)


def note_mentions(got, name):
    return any(name == n.get("tensor") or name in n.get("message", "") for n in got.get("notes", []))


def compare_notes(m, got, want):
    weight_names = {w["name"] for w in got["weights"]}
    for name in want["sparse_initializers"]:
        m.check(name in weight_names or note_mentions(got, name),
                "sparse initializer %r neither loaded nor reported in notes" % name)
    for name in want.get("notes_must_mention", []):
        m.check(note_mentions(got, name), "no note names %r" % name)


def compare_files(m, got, want):
    got_files = {os.path.realpath(f["path"]): f for f in got["external_files"]}
    want_files = {f["path"]: f for f in want["external_files"]}
    m.equal(sorted(got_files), sorted(want_files), "external files")
    for path, w in want_files.items():
        g = got_files.get(path)
        if g is None:
            continue
        for key in ("mapped_bytes", "referenced_bytes", "unreferenced_bytes"):
            m.equal(g.get(key), w[key], "%s %s" % (os.path.basename(path), key))
        m.equal([list(r) for r in g.get("dead_ranges", [])], w["dead_ranges"],
                os.path.basename(path) + " dead_ranges")
    dead_python = sum(f["unreferenced_bytes"] for f in want["external_files"])
    totals = got.get("totals", {})
    m.equal(totals.get("unreferenced_bytes"), dead_python, "totals.unreferenced_bytes")
    m.equal(totals.get("weights"), len(want["weights"]) + sum(
        1 for n in want["sparse_initializers"] if n in {w["name"] for w in got["weights"]}), "totals.weights")
    if "expected_dead_bytes" in want:
        # The generator's own count of the bytes it orphaned: python's union
        # arithmetic and ballast must both land on it.
        m.equal(dead_python, want["expected_dead_bytes"], "python-side dead bytes vs generator")
        m.equal(totals.get("unreferenced_bytes"), want["expected_dead_bytes"], "dead bytes vs generator")


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--ballast", required=True)
    p.add_argument("--gen", required=True, help="tools/gen folder")
    p.add_argument("--out", required=True)
    a = p.parse_args()
    try:
        import numpy  # noqa: F401
        import onnx  # noqa: F401
    except ImportError as e:
        skip("%s has no onnx/numpy (%s); install python3-onnx python3-numpy" % (sys.executable, e))

    gen = subprocess.run([sys.executable, os.path.join(a.gen, "make_test_models.py"), a.out],
                         capture_output=True, text=True)
    sys.stderr.write(gen.stderr)
    if gen.returncode != 0:
        print("FAIL: the generator failed (exit %d)" % gen.returncode)
        return 1

    expectations = sorted(glob.glob(os.path.join(a.out, "*", "*.expect.json")))
    if len(expectations) < 15:
        print("FAIL: only %d models generated" % len(expectations))
        return 1
    failed, weights_checked = 0, 0
    for path in expectations:
        with open(path) as f:
            want = json.load(f)
        model_path = os.path.join(os.path.dirname(path), want["model"])
        m = Mismatch(os.path.relpath(model_path, a.out))
        got, error = run_inspect(a.ballast, model_path)
        if got is None:
            m.problems.append(error)
        else:
            compare_weights(m, got, want)
            compare_strings(m, got, want)
            compare_notes(m, got, want)
            compare_files(m, got, want)
            weights_checked += len(want["weights"])
        if m.problems:
            failed += 1
            print("FAIL %s" % m.model)
            for problem in m.problems[:40]:
                print("     " + problem)
        else:
            print("ok   %s (%d weights)" % (m.model, len(want["weights"])))
    print("%d of %d models agree with onnx %s (%d weights compared byte for byte)"
          % (len(expectations) - failed, len(expectations), onnx.__version__, weights_checked))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
