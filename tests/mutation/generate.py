#!/usr/bin/python3
"""generate.py: plant mutants systematically (`tools/dev mutate --generated`).

The curated list (mutants.txt) holds the bugs someone thought of; it reaches
100% and still misses what nobody thought of. This writes mutants nobody
chose: every line of product code in the folders of tests/mutation/folders.txt
that holds a mutable operator is a candidate, and a seeded sample of them per
folder is written in mutants.txt's format, with the folder's tests as the
regex that must kill each one. mutate.py runs the list and scores it per
folder.

Operators (applied to code, never inside a string or a comment):
  relational   <  <=  >  >=  ==  !=   (each to its neighbour: off by one, or negated)
  logical      &&  <->  ||
  off by one   + 1  and  - 1  dropped
  boolean      return true;  <->  return false;
  negation     if (!x  ->  if (x
Binary operators must have a space on either side (the project's format), so
template brackets, shifts and arrows never match.

Each mutant's ORIGINAL is its whole line (with indentation), widened by the
lines before it until it occurs once in the file, so mutate.py can apply it
exactly. Lines with a backslash are skipped (mutants.txt writes a newline as
\\n). The sample is a pure function of the tree and --seed: the same tree
gives the same list, and another seed another list.

  generate.py [--folders F,...] [--per-folder N] [--seed S] [--out FILE]
"""

import argparse
import os
import random
import re
import sys

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
SOURCE_EXTENSIONS = (".cpp", ".hpp", ".inl", ".h")

# (name, pattern, replacement); the pattern must match inside code only.
OPERATORS = [
    ("lt_le", r" < ", " <= "),
    ("le_lt", r" <= ", " < "),
    ("gt_ge", r" > ", " >= "),
    ("ge_gt", r" >= ", " > "),
    ("eq_ne", r" == ", " != "),
    ("ne_eq", r" != ", " == "),
    ("and_or", r" && ", " || "),
    ("or_and", r" \|\| ", " && "),
    ("drop_plus1", r" \+ 1\b", ""),
    ("drop_minus1", r" - 1\b", ""),
    ("true_false", r"\breturn true;", "return false;"),
    ("false_true", r"\breturn false;", "return true;"),
    ("drop_not", r"\bif \(!(?=[A-Za-z_(])", "if ("),
]

SKIP_LINE = re.compile(r"^\s*(#|//|\*|/\*|static_assert|assert\()")


def read_folders(path):
    folders = []
    with open(path, encoding="utf-8") as f:
        for n, raw in enumerate(f, 1):
            line = raw.rstrip("\n")
            if not line.strip() or line.lstrip().startswith("#"):
                continue
            fields = line.split("\t")
            if len(fields) != 2:
                sys.exit(f"{path}:{n}: expected FOLDER<TAB>CTEST-REGEX")
            folders.append((fields[0], fields[1]))
    return folders


def code_mask(lines):
    """Per line, the line with strings, character literals and comments
    blanked to spaces (same length), so operators are only found in code.
    Block comments may span lines."""
    masked, in_block = [], False
    for line in lines:
        out, i = [], 0
        while i < len(line):
            if in_block:
                end = line.find("*/", i)
                if end < 0:
                    out.append(" " * (len(line) - i))
                    i = len(line)
                else:
                    out.append(" " * (end + 2 - i))
                    i, in_block = end + 2, False
                continue
            c = line[i]
            if line.startswith("//", i):
                out.append(" " * (len(line) - i))
                break
            if line.startswith("/*", i):
                in_block = True
                continue
            if c in "\"'":
                j = i + 1
                while j < len(line) and line[j] != c:
                    j += 2 if line[j] == "\\" else 1
                out.append(" " * (min(j + 1, len(line)) - i))
                i = j + 1
                continue
            out.append(c)
            i += 1
        masked.append("".join(out))
    return masked


def candidates(path):
    """Every (line index, operator name, start, end, replacement) in a file."""
    with open(os.path.join(ROOT, path), encoding="utf-8") as f:
        lines = f.read().split("\n")
    masked = code_mask(lines)
    found = []
    for i, (line, code) in enumerate(zip(lines, masked)):
        if "\\" in line or "\t" in line or SKIP_LINE.match(line):
            continue
        for name, pattern, replacement in OPERATORS:
            for m in re.finditer(pattern, code):
                found.append((i, name, m.start(), m.end(), replacement))
    return lines, found


def unique_snippet(lines, i, start, end, replacement):
    """The smallest run of lines ending at line i that occurs once in the
    file, and the same run with the mutation applied; None when no run of up
    to four lines is unique."""
    text = "\n".join(lines)
    mutated_line = lines[i][:start] + replacement + lines[i][end:]
    for first in range(i, max(-1, i - 4), -1):
        original = "\n".join(lines[first:i + 1])
        if text.count(original) == 1:
            return original, "\n".join(lines[first:i] + [mutated_line])
    return None


def mutant_id(folder, path, i, name):
    """g.<folder>.<file>.<line>.<operator>: the file by its stem for a .cpp
    (the ids of earlier runs), with its extension for any other, so a .cpp
    and a .hpp of one name never share an id (the second was dropped)."""
    stem, ext = os.path.splitext(os.path.basename(path))
    if ext != ".cpp":
        stem += "_" + ext.lstrip(".")
    return f"g.{folder.replace('/', '.')}.{stem}.{i + 1}.{name}"


def escape(s):
    return s.replace("\n", "\\n")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--folders", help="comma-separated folders of folders.txt (default: all of them)")
    ap.add_argument("--per-folder", type=int, default=12, help="mutants sampled per folder (default 12; 0: all)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--table", default=os.path.join(ROOT, "tests", "mutation", "folders.txt"))
    ap.add_argument("--out", default="-", help="the list to write (default: stdout)")
    args = ap.parse_args()

    table = read_folders(args.table)
    if args.folders:
        wanted = args.folders.split(",")
        unknown = set(wanted) - {f for f, _ in table}
        if unknown:
            sys.exit(f"generate: not in {os.path.relpath(args.table, ROOT)}: {', '.join(sorted(unknown))}")
        table = [(f, r) for f, r in table if f in wanted]

    out = sys.stdout if args.out == "-" else open(args.out, "w", encoding="utf-8")
    print("# Generated by tests/mutation/generate.py "
          f"--per-folder {args.per_folder} --seed {args.seed}; do not edit, regenerate.", file=out)
    total = 0
    for folder, regex in table:
        files = sorted(os.path.join(folder, n) for n in os.listdir(os.path.join(ROOT, folder))
                       if n.endswith(SOURCE_EXTENSIONS))
        pool = []
        for path in files:
            lines, found = candidates(path)
            for i, name, start, end, replacement in found:
                pool.append((path, lines, i, name, start, end, replacement))
        # Seeded per folder, so adding a folder leaves the others' samples alone.
        rng = random.Random(f"{args.seed}:{folder}")
        rng.shuffle(pool)
        chosen, seen = [], set()
        for path, lines, i, name, start, end, replacement in pool:
            if args.per_folder and len(chosen) >= args.per_folder:
                break
            snippet = unique_snippet(lines, i, start, end, replacement)
            if snippet is None:
                continue
            ident = mutant_id(folder, path, i, name)
            if ident in seen:  # two matches of one operator on a line: the first is enough
                continue
            seen.add(ident)
            chosen.append((ident, path, *snippet))
        print(f"\n# {folder}: {len(chosen)} of {len(pool)} candidates", file=out)
        for ident, path, original, mutated in sorted(chosen):
            print("\t".join([ident, path, escape(original), escape(mutated), regex]), file=out)
        total += len(chosen)
    if out is not sys.stdout:
        out.close()
        print(f"generate: {total} mutants in {len(table)} folders -> {os.path.relpath(args.out, ROOT)}",
              file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
