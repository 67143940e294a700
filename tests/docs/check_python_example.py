#!/usr/bin/env python3
"""check_python_example.py --root SRC --lib-dir DIR --model MODEL

The README's Python example (the first ```python fence of its "Python"
section) as written: run by this python with SRC/python on its path and
libballast from DIR (BALLAST_LIBRARY), on MODEL; it must exit 0 and print
"ok" last.
"""
import argparse
import os
import subprocess
import sys
import tempfile

from readme_section import fenced_code


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--root", required=True)
    ap.add_argument("--lib-dir", required=True)
    ap.add_argument("--model", required=True)
    a = ap.parse_args()
    code = fenced_code(os.path.join(a.root, "README.md"), "Python", "python")
    env = dict(os.environ, PYTHONPATH=os.path.join(a.root, "python"),
               BALLAST_LIBRARY=os.path.join(a.lib_dir, "libballast.so"))
    with tempfile.TemporaryDirectory() as tmp:
        script = os.path.join(tmp, "example.py")
        open(script, "w").write(code)
        r = subprocess.run([sys.executable, script, a.model], capture_output=True, text=True, env=env, cwd=tmp)
    print(r.stdout, end="")
    lines = r.stdout.strip().splitlines()
    if r.returncode != 0 or not lines or lines[-1] != "ok":
        sys.exit("the README's Python example exited %d: %s%s" % (r.returncode, r.stdout, r.stderr))
    print("docs_python_example: the README's Python example runs")


if __name__ == "__main__":
    main()
