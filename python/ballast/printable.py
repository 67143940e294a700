"""printable(raw): bytes from a model (a name, a path, an error message that
quotes them) made safe to show on a terminal. A name is attacker-chosen,
and written raw its carriage returns and escape sequences can print a fake
line over a real one.

The escaping is the library's own (ballast_printable, C API version 7):
the command line's, byte for byte (docs/security.md, "What a terminal
shows"), so there is one implementation and nothing here to drift from it.
"""
import ctypes

from ._capi import api, check, read_buffer


def printable(raw):
    """`raw` (bytes, or a str, taken as its UTF-8) escaped as one value."""
    if isinstance(raw, str):
        raw = raw.encode("utf-8", "surrogateescape")
    raw = bytes(raw)
    needed = ctypes.c_size_t(0)
    check(api.printable(raw, len(raw), None, 0, ctypes.byref(needed)))
    buf, out = read_buffer(needed.value + 1)  # the escaped text and its NUL
    check(api.printable(raw, len(raw), out, len(buf), ctypes.byref(needed)))
    return bytes(memoryview(buf)[:needed.value]).decode("utf-8")
