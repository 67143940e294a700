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
