"""The checks the CLI test scripts share: each prints one line per check and
collects the failures; skip() ends a script with exit 77 and its reason."""

import sys

FAILURES = []


def skip(reason):
    print("skipped: " + reason)
    sys.exit(77)


def expect(ok, what):
    print(("ok   " if ok else "FAIL ") + what)
    if not ok:
        FAILURES.append(what)
    return ok


def run(*args):
    """(returncode, stdout, stderr) of a command, 300 s at most."""
    import subprocess
    p = subprocess.run([str(a) for a in args], capture_output=True, text=True, timeout=300)
    return p.returncode, p.stdout, p.stderr


def sha256_of(path, offset, length):
    """SHA-256 hex digest of `length` bytes of `path` at `offset`."""
    import hashlib
    with open(path, "rb") as f:
        f.seek(offset)
        return hashlib.sha256(f.read(length)).hexdigest()


def derive_dump(ballast, model, backend, dump, *extra):
    """`ballast derive MODEL --backend B --dump DUMP ...` into an empty DUMP;
    skips (77) when the backend is not there."""
    import shutil
    import subprocess
    shutil.rmtree(dump, ignore_errors=True)
    p = subprocess.run([ballast, "derive", model, "--backend", backend, "--dump", dump, *extra],
                       capture_output=True, text=True, timeout=600)
    if p.returncode != 0 and ("unavailable" in p.stderr or "not_found: no backend" in p.stderr):
        skip("backend %s: %s" % (backend, p.stderr.strip()))
    return p


def same_files(a, b, what):
    """The two folders hold the same file names, each byte-identical."""
    import filecmp
    import os
    names_a, names_b = sorted(os.listdir(a)), sorted(os.listdir(b))
    if not expect(names_a == names_b and names_a, "%s: the same %d dumped files" % (what, len(names_a))):
        print("  only in first:", sorted(set(names_a) - set(names_b))[:5], "only in second:",
              sorted(set(names_b) - set(names_a))[:5])
        return
    differ = [n for n in names_a if not filecmp.cmp(os.path.join(a, n), os.path.join(b, n), shallow=False)]
    expect(not differ, "%s: every file byte-identical (first differing: %s)" % (what, differ[:1]))
