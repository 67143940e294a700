"""python3 -m ballast inspect MODEL [--json]: the weights, the accounting and the load notes.

Exit codes and errors as the `ballast` command line's (docs/tools.md):
0 ok, 2 bad input or usage (a model that cannot be opened, a wrong flag,
output that cannot be written), each error one line on stderr,
`ballast <command>: <code>: <message> [where]`."""
import argparse
import json
import os
import sys

from . import BallastError, library_path, open_model
from .printable import printable


def _inspect(path, as_json):
    model = open_model(path)
    weights, acc, notes = model.weights, model.accounting, model.notes
    if as_json:
        # The path as the other strings here are decoded (U+FFFD for each
        # byte that is not UTF-8, as the command line's --json writes it):
        # the str argv gives holds such bytes as lone surrogates, which
        # json.dump wrote as "\udcff", an escape strict JSON readers refuse.
        shown_path = os.fsencode(path).decode("utf-8", "replace")
        json.dump({"model": shown_path, "format": model.format,
                   "weights": [dict({"name": w.name, "dtype": w.dtype, "dims": list(w.dims), "bytes": w.bytes,
                                     "file": w.file, "offset": w.offset},
                                    **({"gguf_type": w.gguf_type} if w.gguf_type else {})) for w in weights],
                   "accounting": {"mapped_bytes": acc.mapped_bytes, "referenced_bytes": acc.referenced_bytes,
                                  "header_bytes": acc.header_bytes, "dead_bytes": acc.dead_bytes,
                                  "files": acc.files,
                                  "dead_ranges": [{"file": r.file, "offset": r.offset, "length": r.length}
                                                  for r in acc.dead_ranges]},
                   "notes": [{"tensor": n.tensor, "message": n.message} for n in notes]}, sys.stdout, indent=2)
        print()
        return
    # Names and paths are the model's bytes, chosen by whoever made it: each
    # is escaped as the command line escapes it (printable.py), so none can
    # move the cursor or print a line of its own over this output.
    print("model: %s (%s), %d weights" % (printable(os.fsencode(path)), model.format, len(weights)))
    for w in weights:
        where = "inline" if not w.file else "%s @ %d" % (printable(w._raw_file), w.offset)
        # A GGUF weight's type by GGUF's name, as the command line prints it.
        print("  %-40s %-8s %-18s %10d B  %s" % (printable(w._raw_name), w.gguf_type or w.dtype,
                                                 "[" + ", ".join(map(str, w.dims)) + "]", w.bytes, where))
    print("accounting: mapped %d B, referenced %d B, header %d B, dead %d B in %d range(s) over %d file(s)"
          % (acc.mapped_bytes, acc.referenced_bytes, acc.header_bytes, acc.dead_bytes, len(acc.dead_ranges),
             acc.files))
    for r in acc.dead_ranges:
        print("  dead: %s [%d, +%d)" % (printable(r.raw_file), r.offset, r.length))
    if notes:  # as the command line's: what the file holds that was read past
        print("\nnotes:")
        for n in notes:
            print("  %s: %s" % (printable(n.raw_tensor) if n.raw_tensor else "(model)", printable(n.raw_message)))


def main(argv=None):
    ap = argparse.ArgumentParser(prog="python3 -m ballast", description="ballast from Python (" + library_path() + ")")
    sub = ap.add_subparsers(dest="command", required=True)
    p = sub.add_parser("inspect", help="print a model's weights and accounting")
    p.add_argument("model")
    p.add_argument("--json", action="store_true")
    a = ap.parse_args(argv)  # usage errors: argparse's message, exit 2
    try:
        _inspect(a.model, a.json)
        sys.stdout.flush()
    except BallastError as e:
        # The command line's error line: the message escaped (it quotes names and paths).
        print("ballast %s: %s" % (a.command, printable(getattr(e, "_raw", e.message))), file=sys.stderr)
        return 2
    except BrokenPipeError:
        # The reader stopped reading (`| head`): as the CLI, no error. Later
        # writes, and the flush at exit, go nowhere instead of failing.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except OSError as e:  # stdout cannot be written (a full disk)
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        print("ballast %s: io: writing the output: %s" % (a.command, e.strerror or e), file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
