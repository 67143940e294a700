#!/usr/bin/env python3
"""check_c_example.py --root SRC --cc CC --lib-dir DIR --model MODEL BACKEND

The README's C example (the first ```c fence of its "C API" section) as
written: compiled as strict C99 against include/, linked with libballast
from DIR, run on MODEL with BACKEND; it must exit 0 and print "ok".
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
    ap.add_argument("--cc", required=True)
    ap.add_argument("--lib-dir", required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--backend", default="cpu")
    a = ap.parse_args()
    code = fenced_code(os.path.join(a.root, "README.md"), "C API", "c")
    with tempfile.TemporaryDirectory() as tmp:
        src, exe = os.path.join(tmp, "example.c"), os.path.join(tmp, "example")
        open(src, "w").write(code)
        cmd = [a.cc, "-std=c99", "-Wall", "-Wextra", "-Wpedantic", "-Werror", "-I", os.path.join(a.root, "include"),
               src, "-o", exe, "-L", a.lib_dir, "-lballast", "-Wl,-rpath," + a.lib_dir]
        r = subprocess.run(cmd, capture_output=True, text=True)
        if r.returncode != 0:
            sys.exit("the README's C example does not compile:\n" + r.stderr)
        r = subprocess.run([exe, a.model, a.backend], capture_output=True, text=True)
        print(r.stdout, end="")
        if r.returncode != 0 or r.stdout.strip() != "ok":
            sys.exit(f"the README's C example exited {r.returncode}: {r.stdout}{r.stderr}")
    print("docs_c_example: the README's C example compiles as C99 and runs")


if __name__ == "__main__":
    main()
