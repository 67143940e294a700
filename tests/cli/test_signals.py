#!/usr/bin/python3
"""SIGINT and SIGTERM delivered at delays spread over a whole run of
`ballast derive --dump DIR`, `ballast compact MODEL OUT_DIR` and
`ballast load` (docs/tools.md): each run

  - ends with exit 0 (it finished first) or of the signal itself;
  - leaves no hidden temporary (`.<name>.<pid>.<n>.tmp`);
  - derive --dump: leaves only whole files, each byte-identical to an
    uninterrupted run's;
  - compact: leaves all of the outputs (byte-identical) or none;
  - and the same command run again afterwards succeeds with output
    byte-identical to an uninterrupted run's (compact into an emptied
    OUT_DIR when the interrupted run had completed).

Exit 0 pass, 1 fail, 77 skip.
"""

import argparse
import hashlib
import os
import shutil
import signal
import subprocess
import sys
import time

from cli_check import FAILURES, expect, skip


def tree(folder):
    out = {}
    if not os.path.isdir(folder):
        return out
    for root, _, files in os.walk(folder):
        for name in files:
            path = os.path.join(root, name)
            with open(path, "rb") as f:
                out[os.path.relpath(path, folder)] = hashlib.sha256(f.read()).hexdigest()
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ballast", required=True)
    ap.add_argument("--gen", required=True)
    ap.add_argument("--work", required=True)
    ap.add_argument("--points", type=int, default=8)
    a = ap.parse_args()
    try:
        import numpy  # noqa: F401
        import onnx  # noqa: F401
    except ImportError as e:
        skip(f"{sys.executable} cannot import onnx and numpy ({e})")
    shutil.rmtree(a.work, ignore_errors=True)
    os.makedirs(a.work)
    model_dir = os.path.join(a.work, "llm")
    subprocess.run([sys.executable, os.path.join(a.gen, "make_llm_model.py"), model_dir, "--layers", "2", "--hidden",
                    "512", "--ffn", "1024", "--vocab", "2048"], check=True, stdout=subprocess.DEVNULL)
    model = os.path.join(model_dir, "llm.onnx")

    def command(kind, out):
        if kind == "derive":
            return [a.ballast, "derive", model, "--backend", "cpu", "--dump", out]
        if kind == "compact":
            return [a.ballast, "compact", model, out]
        return [a.ballast, "load", model, "--backend", "cpu"]

    for kind in ("derive", "compact", "load"):
        ref = os.path.join(a.work, "ref_" + kind)
        started = time.monotonic()
        r = subprocess.run(command(kind, ref), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        took = time.monotonic() - started
        if not expect(r.returncode == 0, f"{kind}: an uninterrupted run exits 0 ({r.stderr.strip()})"):
            continue
        want = tree(ref)
        out = os.path.join(a.work, "out_" + kind)
        for sig in (signal.SIGINT, signal.SIGTERM):
            for i in range(a.points):
                delay = took * (0.02 + 0.98 * i / max(1, a.points - 1))
                shutil.rmtree(out, ignore_errors=True)
                p = subprocess.Popen(command(kind, out), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
                time.sleep(delay)
                p.send_signal(sig)
                _, err = p.communicate(timeout=300)
                got = tree(out)
                what = f"{kind}, {sig.name} after {delay:.2f} s (of {took:.2f} s)"
                expect(p.returncode in (0, -sig), f"{what}: exit 0 or of the signal (got {p.returncode}: {err.strip()})")
                hidden = [f for f in got if os.path.basename(f).startswith(".")]
                expect(not hidden, f"{what}: no hidden temporary left ({hidden[:3]})")
                wrong = [f for f in got if f not in hidden and want.get(f) != got[f]]
                expect(not wrong, f"{what}: every file left is whole and an uninterrupted run's ({wrong[:3]})")
                if kind == "compact":
                    expect(not got or got == want, f"{what}: all of the outputs or none ({sorted(got)[:4]})")
                    if got == want:
                        shutil.rmtree(out)
                again = subprocess.run(command(kind, out), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
                expect(again.returncode == 0 and tree(out) == want,
                       f"{what}: run again, exit 0 ({again.returncode}: {again.stderr.strip()}) and the same output")
    print(f"{len(FAILURES)} failure(s)")
    return 1 if FAILURES else 0


if __name__ == "__main__":
    sys.exit(main())
