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
