#!/usr/bin/python3
"""Issue 24 §3: no `ballast` command dies of SIGBUS when a model file is
truncated under it. Each path ballast reads a mapping by itself runs while a
helper truncates the file and puts it back, again and again:

  inspect --hash          hashing every weight (through WeightStore::transfer)
  replay --anchor         the anchor's copy out of the mapping
  derive --backend cpu    zero-copy: the CPU kernels read the registered mapping
  derive --backend vulkan zero-copy on lavapipe (skipped without the plugin)
  inspect / derive        the .onnx itself truncated while decoded and planned
  compact                 the data copied out and the .onnx re-read; a failed
                          run leaves nothing behind

Every run must end with exit 0 (the race lost) or a one-line error (exit 1 or
2, an io error naming the file); never a signal. Exit 0 pass, 1 fail, 77 skip.
"""

import argparse
import os
import random
import shutil
import subprocess
import sys
import time

from cli_check import FAILURES, expect


def restore(path, original):
    with open(path, "r+b") as f:  # the same inode: a live mapping sees it
        f.write(original)
        f.truncate(len(original))


def race(ballast, args, victim, runs, label, seed, prepare=None, after_failure=None):
    """Runs the command `runs` times; each time, after a random delay within
    the command's own untouched run time, truncates `victim` to a random size,
    lets the command finish, and puts the file back. `prepare()` runs before
    each run; `after_failure(stderr)` (a problem's text, or None) after each
    that failed."""
    with open(victim, "rb") as f:
        original = f.read()
    rng = random.Random(seed)
    prepare = prepare or (lambda: None)
    prepare()
    start = time.monotonic()
    base = subprocess.run([ballast, *args], capture_output=True, text=True, timeout=300)
    baseline = time.monotonic() - start
    if not expect(base.returncode == 0, "%s: untouched run succeeds (%.2f s; %s)"
                  % (label, baseline, base.stderr.strip()[-200:])):
        return
    outcomes = {}
    try:
        for _ in range(runs):
            prepare()
            proc = subprocess.Popen([ballast, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            time.sleep(rng.uniform(0.0, baseline))
            with open(victim, "r+b") as f:
                f.truncate(rng.randrange(0, max(1, len(original) // 2)))
            out, err = proc.communicate(timeout=300)
            restore(victim, original)
            rc = proc.returncode
            outcomes[rc] = outcomes.get(rc, 0) + 1
            if rc < 0:
                expect(False, "%s: died of signal %d (stderr: %s)" % (label, -rc, err.strip()[-300:]))
                return
            if rc not in (0, 1, 2):
                expect(False, "%s: exit %d (stderr: %s)" % (label, rc, err.strip()[-300:]))
                return
            if rc != 0 and not any(code in err for code in ("io:", "out_of_bounds", "malformed", "size_mismatch")):
                expect(False, "%s: exit %d without a typed error: %s" % (label, rc, err.strip()[-300:]))
                return
            if rc != 0 and len([l for l in err.splitlines() if l.strip()]) != 1:  # docs/tools.md: one line
                expect(False, "%s: exit %d with %d error lines, not one: %s"
                       % (label, rc, len(err.splitlines()), err.strip()[-300:]))
                return
            problem = after_failure(err) if rc != 0 and after_failure else None
            if problem:
                expect(False, "%s: %s" % (label, problem))
                return
    finally:
        restore(victim, original)
    expect(True, "%s: %d runs truncated at a random point, never a signal (exit codes %s)"
           % (label, runs, dict(sorted(outcomes.items()))))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ballast", required=True)
    ap.add_argument("--gen", required=True)
    ap.add_argument("--work", required=True)
    ap.add_argument("--runs", type=int, default=12)
    a = ap.parse_args()
    shutil.rmtree(a.work, ignore_errors=True)
    os.makedirs(a.work)
    # A small LLM-shaped model with real (non-sparse) bytes, so reads take long
    # enough for the helper to land inside them.
    subprocess.run([sys.executable, os.path.join(a.gen, "make_llm_model.py"), a.work, "--layers", "4"],
                   check=True, capture_output=True)
    model = os.path.join(a.work, "llm.onnx")
    data = os.path.join(a.work, "llm.weights")

    backends = subprocess.run([a.ballast, "backends"], capture_output=True, text=True).stdout
    race(a.ballast, ["inspect", model, "--hash"], data, a.runs, "inspect --hash, data truncated", 1)
    race(a.ballast, ["replay", model, "--backend", "cpu", "--tokens", "2", "--anchor"], data,
         a.runs, "replay --anchor, data truncated", 2)
    race(a.ballast, ["derive", model, "--backend", "cpu"], data, a.runs, "derive cpu (zero-copy), data truncated", 3)
    if "vulkan" in backends and "available" in backends:
        race(a.ballast, ["derive", model, "--backend", "vulkan"], data, max(4, a.runs // 3),
             "derive vulkan (zero-copy), data truncated", 4)
    else:
        print("skip vulkan: no Vulkan device or plugin here")
    # compact (issue 26): the bytes copied through WeightStore::transfer, the
    # .onnx read and checked; a failed run leaves nothing in OUT_DIR.
    out_dir = os.path.join(a.work, "compacted")
    fresh = lambda: shutil.rmtree(out_dir, ignore_errors=True)
    left = lambda err: ("left %s behind" % sorted(os.listdir(out_dir))) if os.path.exists(out_dir) else None

    def left_or_blamed(err):
        # The data file shrank: the error names it, not compact's own output
        # (pwrite from the lost pages fails with EFAULT), which has the same
        # file name in OUT_DIR: the whole path tells them apart.
        if ("file=" + data + ",") not in err and ("file=" + data + "]") not in err:
            return "the error does not name the truncated input: %s" % err.strip()[-300:]
        return left(err)
    race(a.ballast, ["compact", model, out_dir], data, a.runs, "compact, data truncated", 7, fresh, left_or_blamed)
    race(a.ballast, ["compact", model, out_dir], model, a.runs, "compact, .onnx truncated", 8, fresh, left)
    race(a.ballast, ["inspect", model], model, a.runs, "inspect, .onnx truncated", 5)
    race(a.ballast, ["derive", model, "--backend", "cpu"], model, a.runs, "derive cpu, .onnx truncated", 6)

    if FAILURES:
        print("%d failure(s)" % len(FAILURES))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
