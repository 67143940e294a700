#!/usr/bin/python3
"""What a terminal shows: names made of control characters and invalid UTF-8
(tests/cli/hostile_names_model.py) never reach the output raw.

For `inspect`, `inspect --hash`, `verify`, `derive --backend cpu` and a load
error: no control byte but the line break, no C1 control, no bidi override,
and valid UTF-8, on stdout and on stderr; the escaped forms are there
instead (\\x1b, \\u{202e}); `verify` still ends in "failed" on a line of
its own and the hostile name cannot print a line saying "ok". With
`--json`: ASCII text that parses, and the names come back exactly (bytes
that are not UTF-8 as U+FFFD, the documented replacement).

Exit 0 pass, 1 fail.
"""

import argparse
import json
import os
import re
import shutil
import subprocess
import sys

from cli_check import FAILURES, expect


def run(ballast, *args):
    p = subprocess.run([ballast, *args], capture_output=True, timeout=300)
    return p.returncode, p.stdout, p.stderr


# A raw byte a terminal acts on: C0 but the line break, DEL, and C1 / bidi
# controls in their UTF-8 form.
RAW_CONTROL = re.compile(rb"[\x00-\x09\x0b-\x1f\x7f]|\xc2[\x80-\x9f]|\xe2\x80[\x8e\x8f\xaa-\xae]|\xe2\x81[\xa6-\xa9]|\xd8\x9c")


def terminal_safe(what, data):
    m = RAW_CONTROL.search(data)
    expect(m is None, "%s: no raw control byte (first at %s: %r)" % (
        what, m.start() if m else "-", data[max(0, m.start() - 20):m.start() + 20] if m else b""))
    try:
        data.decode("utf-8")
        expect(True, "%s: valid UTF-8" % what)
    except UnicodeDecodeError as e:
        expect(False, "%s: valid UTF-8 (%s)" % (what, e))


def strings_in(doc):
    if isinstance(doc, str):
        yield doc
    elif isinstance(doc, dict):
        for k, v in doc.items():
            yield k
            yield from strings_in(v)
    elif isinstance(doc, list):
        for v in doc:
            yield from strings_in(v)


def json_names(data):
    return data.decode("ascii"), json.loads(data)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ballast", required=True)
    ap.add_argument("--work", required=True)
    a = ap.parse_args()
    shutil.rmtree(a.work, ignore_errors=True)
    os.makedirs(a.work)
    gen = subprocess.run([sys.executable, os.path.join(os.path.dirname(os.path.abspath(__file__)), "hostile_names_model.py"),
                          a.work], capture_output=True, check=True)
    names = json.loads(gen.stdout)
    weight = bytes.fromhex(names["weight"])
    node = bytes.fromhex(names["node"])
    inline = [bytes.fromhex(n) for n in names["inline"]]
    model = os.path.join(a.work, "hostile.onnx")

    # inspect, as a table.
    rc, out, err = run(a.ballast, "inspect", model)
    expect(rc == 0, "inspect: exit 0 (got %d; %r)" % (rc, err[:300]))
    terminal_safe("inspect stdout", out)
    terminal_safe("inspect stderr", err)
    expect(b"\\x1b[8m" in out and b"\\x0d\\x1b[2K" in out, "inspect: the escape sequences are shown escaped")
    expect(b"bad\\xff\\xfeutf8\\xc0\\xaf\\xed\\xa0\\x80" in out, "inspect: invalid UTF-8 shown byte by byte as \\xNN")
    expect(b"c1\\xc2\\x9b31mcsi\\xc2\\x85line" in out, "inspect: C1 controls escaped")
    expect(b"bidi\\u{202e}evil" in out, "inspect: bidi override escaped")
    expect(b"tab\\x09new\\x0aline\\\\x1b" in out, "inspect: tab, newline and a literal backslash escaped")
    expect("café 中文".encode() in out, "inspect: printable UTF-8 kept as it is")
    expect(not any(l.startswith(b"verify") or l.startswith(b"derive") for l in out.split(b"\n")),
           "inspect: no name starts a line of its own")

    rc, out, err = run(a.ballast, "inspect", model, "--hash")
    expect(rc == 0, "inspect --hash: exit 0 (got %d)" % rc)
    terminal_safe("inspect --hash stdout", out)
    terminal_safe("inspect --hash stderr", err)

    # inspect --json: parses, is ASCII, and the names round-trip.
    rc, out, err = run(a.ballast, "inspect", model, "--json")
    expect(rc == 0, "inspect --json: exit 0 (got %d; %r)" % (rc, err[:300]))
    terminal_safe("inspect --json stdout", out)
    try:
        text, doc = json_names(out)
        got = {w["name"] for w in doc["weights"]}
        want = {weight.decode("utf-8")} | {n.decode("utf-8", "replace") for n in inline}
        expect(got == want, "inspect --json: every name round-trips (missing %r, extra %r)" % (want - got, got - want))
        expect("\\u001b[8m" in text, "inspect --json: ESC written as the JSON escape \\u001b")
    except (UnicodeDecodeError, ValueError, KeyError) as e:
        expect(False, "inspect --json: ASCII JSON with a weights list (%s)" % e)

    # verify: the checksum is wrong; the name tries to print "...: ok".
    rc, out, err = run(a.ballast, "verify", model)
    expect(rc == 1, "verify: exit 1, the checksum mismatch found (got %d; %r)" % (rc, err[:300]))
    terminal_safe("verify stdout", out)
    terminal_safe("verify stderr", err)
    lines = out.decode("utf-8", "replace").splitlines()
    expect(bool(lines) and lines[-1].endswith(": failed"), "verify: the last line says failed (%r)" % lines[-1:])
    expect(not any(l.rstrip().endswith(": ok") and not l.startswith("FAIL") for l in lines),
           "verify: no line but a FAIL line ends in ': ok' (%r)" % lines)
    expect(any(l.startswith("FAIL checksum_mismatch: tensor=\\x0d\\x1b[2Kverify") for l in lines),
           "verify: the FAIL line names the tensor, escaped")

    # derive on cpu, text and JSON: the node name escaped, then round-tripped.
    rc, out, err = run(a.ballast, "derive", model, "--backend", "cpu")
    expect(rc == 0, "derive: exit 0 (got %d; %r)" % (rc, err[:300]))
    terminal_safe("derive stdout", out)
    terminal_safe("derive stderr", err)
    rc, out, err = run(a.ballast, "derive", model, "--backend", "cpu", "--json")
    expect(rc == 0, "derive --json: exit 0 (got %d)" % rc)
    terminal_safe("derive --json stdout", out)
    try:
        text, doc = json_names(out)
        # derive reports per derivation, not per weight; whatever names it
        # does carry (model path, errors) come back as written.
        found = set(strings_in(doc))
        expect(doc.get("model") == model and doc.get("backend") == "cpu",
               "derive --json: parses, the model path round-trips (%r)" % doc.get("model"))
    except (UnicodeDecodeError, ValueError) as e:
        expect(False, "derive --json: ASCII JSON (%s)" % e)

    # A load error that echoes a hostile location: one escaped line.
    rc, out, err = run(a.ballast, "inspect", os.path.join(a.work, "hostile_missing.onnx"))
    expect(rc == 2, "load error: exit 2 (got %d)" % rc)
    terminal_safe("load error stderr", err)
    terminal_safe("load error stdout", out)
    err_lines = [l for l in err.split(b"\n") if l.strip()]
    expect(len(err_lines) == 1 and b"\\x1b[8mmissing\\x0d\\x1b[2K.bin" in err_lines[0],
           "load error: one line naming the location, escaped (%r)" % err_lines)

    # Every command's --json on the model in a folder whose name is not
    # UTF-8 and holds ESC, a bidi override and a C1 control: ASCII JSON that
    # parses, the path back as written (the invalid byte as U+FFFD). `load
    # --json` aborted on the invalid byte (an uncaught json type_error), and
    # `load` and `compact` wrote the other characters raw, which the
    # terminal filter turned into `\u{202e}`, an invalid JSON escape.
    odd = os.path.join(os.fsencode(a.work), b"dir\xff\x1b[2K\xe2\x80\xae\xc2\x85")
    os.makedirs(odd)
    for f in (b"hostile.onnx", b"hostile.bin"):
        shutil.copy(os.path.join(os.fsencode(a.work), f), os.path.join(odd, f))
    odd_model = os.path.join(odd, b"hostile.onnx")
    odd_text = odd_model.decode("utf-8", "replace")
    for args in ((b"inspect", odd_model, b"--json", b"--hash"),
                 (b"derive", odd_model, b"--backend", b"cpu", b"--json"),
                 (b"derive", odd_model, b"--backend", b"cpu", b"--residency", b"paged", b"--json"),
                 (b"replay", odd_model, b"--backend", b"cpu", b"--tokens", b"2", b"--json"),
                 (b"load", odd_model, b"--backend", b"cpu", b"--json"),
                 (b"load", odd_model, b"--backend", b"cpu", b"--plan", b"--json"),
                 (b"load", odd_model, b"--backend", b"cpu", b"--comm", b"local", b"--world", b"1", b"--json"),
                 (b"derive", odd_model, b"--backend", b"cpu", b"--comm", b"local", b"--world", b"1", b"--json"),
                 (b"compact", odd_model, os.path.join(odd, b"out\xfe\xe2\x80\xae"), b"--json")):
        what = b" ".join(a for a in args if a != odd_model and b"/" not in a).decode("ascii")
        rc, out, err = run(a.ballast, *args)
        expect(rc == 0, "%s in an odd folder: exit 0 (got %d; %r)" % (what, rc, err[-300:]))
        terminal_safe("%s in an odd folder stdout" % what, out)
        try:
            docs = [json.loads(line) for line in out.decode("ascii").splitlines() if line.strip()] \
                if b"--comm" in args else [json.loads(out.decode("ascii"))]
            expect(all(d.get("model", odd_text) in (odd_text, os.path.abspath(odd_text)) for d in docs),
                   "%s in an odd folder: ASCII JSON, the model path back (%r)" % (what, [d.get("model") for d in docs]))
        except (UnicodeDecodeError, ValueError) as e:
            expect(False, "%s in an odd folder: ASCII JSON that parses (%s; %r)" % (what, e, out[:200]))

    if FAILURES:
        print("%d failed" % len(FAILURES))
        return 1
    print("all passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
