"""printable(raw): bytes from a model (a name, a path, an error message that
quotes them) made safe to show on a terminal, as ballast::printable()
(core/base/printable.cpp, docs/security.md "What a terminal shows") makes
them for the command line, byte for byte: a name is attacker-chosen, and
written raw its carriage returns and escape sequences can print a fake line
over a real one.

Kept: printable ASCII and valid UTF-8 of printable characters. Escaped as
\\xNN per byte: control bytes (0x00-0x1f, 0x7f), C1 controls (U+0080-U+009F)
and each byte of invalid UTF-8; as \\u{XXXX}: the bidirectional controls;
a backslash as \\\\ (one value, one line).
"""

_BIDI = frozenset([0x061C, 0x200E, 0x200F, *range(0x202A, 0x202F), *range(0x2066, 0x206A)])


def _sequence_length(raw, i):
    """Length of the valid UTF-8 sequence at raw[i] (a byte >= 0x80), or 0.
    Python's strict decoder refuses what RFC 3629 refuses (overlong forms,
    surrogates, past U+10FFFF), as the C++ helper does."""
    lead = raw[i]
    length = 2 if 0xC2 <= lead <= 0xDF else 3 if 0xE0 <= lead <= 0xEF else 4 if 0xF0 <= lead <= 0xF4 else 0
    if length == 0 or i + length > len(raw):
        return 0
    try:
        raw[i:i + length].decode("utf-8")
    except UnicodeDecodeError:
        return 0
    return length


def printable(raw):
    """`raw` (bytes, or a str, taken as its UTF-8) escaped as one value."""
    if isinstance(raw, str):
        raw = raw.encode("utf-8", "surrogateescape")
    out, i = [], 0
    while i < len(raw):
        byte = raw[i]
        if byte < 0x80:
            out.append("\\\\" if byte == 0x5C else "\\x%02x" % byte if byte < 0x20 or byte == 0x7F else chr(byte))
            i += 1
            continue
        length = _sequence_length(raw, i)
        if length == 0:  # one byte at a time: a later byte may start a good sequence
            out.append("\\x%02x" % byte)
            i += 1
            continue
        cp = ord(raw[i:i + length].decode("utf-8"))
        if cp <= 0x9F:
            out.extend("\\x%02x" % b for b in raw[i:i + length])
        elif cp in _BIDI:
            out.append("\\u{%04x}" % cp)
        else:
            out.append(chr(cp))
        i += length
    return "".join(out)
