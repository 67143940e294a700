#!/usr/bin/python3
"""`ballast inspect` stays within 64 MiB + 2x the .onnx size of resident
memory growth on a model with 10,000 initializers and 4 GiB of external data
(a sparse file, so it costs no disk): opening must not touch weight bytes.
Growth is the child's peak RSS over that of `ballast --version`.
Exit 0 pass, 1 fail, 77 skipped.
"""

import argparse
import os
import subprocess
import sys

MIB = 1 << 20


def peak_rss(argv):
    with open(os.devnull, "wb") as devnull:
        proc = subprocess.Popen(argv, stdout=devnull, stderr=subprocess.PIPE)
        _, status, usage = os.wait4(proc.pid, 0)
        err = proc.stderr.read().decode(errors="replace")
        proc.stderr.close()
    code = os.waitstatus_to_exitcode(status)
    if code != 0:
        raise RuntimeError("%s exited %d: %s" % (" ".join(argv), code, err.strip()))
    return usage.ru_maxrss * 1024  # Linux reports KiB


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--ballast", required=True)
    p.add_argument("--gen", required=True)
    p.add_argument("--work", required=True)
    a = p.parse_args()
    try:
        import onnx  # noqa: F401
    except ImportError as e:
        print("skipped: %s has no onnx (%s)" % (sys.executable, e))
        return 77
    external = 4 << 30
    model = os.path.join(a.work, "big_10000_%d.onnx" % external)
    if not os.path.exists(model):
        subprocess.run([sys.executable, os.path.join(a.gen, "make_big_model.py"), a.work,
                        "--initializers", "10000", "--external-bytes", str(external)],
                       check=True, stdout=subprocess.DEVNULL)
    bound = 64 * MIB + 2 * os.path.getsize(model)
    baseline = peak_rss([a.ballast, "--version"])
    failed = False
    for args in (["inspect"], ["inspect", "--json"]):
        growth = peak_rss([a.ballast, *args, model]) - baseline
        ok = growth <= bound
        failed |= not ok
        print("%s %s: RSS growth %.2f MiB, bound %.2f MiB (64 MiB + 2 x %.2f MiB .onnx)"
              % ("ok  " if ok else "FAIL", " ".join(args), growth / MIB, bound / MIB, os.path.getsize(model) / MIB))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
