#!/usr/bin/python3
"""The mutation generator's own test (ctest mutation_generator): what it
finds is code, what it writes applies exactly once, and the sample is a
pure function of the tree and the seed."""

import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(__file__))
import generate  # noqa: E402
import mutate  # noqa: E402

failures = []


def check(cond, what):
    if not cond:
        failures.append(what)


# 1. Operators inside strings, character literals and comments are not code.
lines = [
    'if (a < b) x = "c < d";  // e == f',
    "  char q = '<'; if (p && q) return true;",
    "  /* a > b spans",
    "     c >= d */ if (!ok) return false;",
    "std::vector<int> v; auto w = x >> 2; auto y = p->q;",
]
masked = generate.code_mask(lines)
check(all(len(m) == len(l) for m, l in zip(masked, lines)), "the mask keeps every line's length")
check(" < " in masked[0] and "c < d" not in masked[0] and "==" not in masked[0], f"strings and // comments: {masked[0]!r}")
check("'<'" not in masked[1] and " && " in masked[1], f"character literals: {masked[1]!r}")
check(masked[2].strip() == "" and ">=" not in masked[3] and "if (!ok)" in masked[3], f"block comments: {masked[2:4]!r}")
found = {name for name, pattern, _ in generate.OPERATORS
         for _m in __import__("re").finditer(pattern, masked[4])}
check(not found, f"templates, shifts and arrows are not operators: {found}")

# 2. A snippet is widened until it is unique.
text = ["int f() {", "  if (a == b) return 1;", "}", "int g() {", "  if (a == b) return 1;", "}"]
snip = generate.unique_snippet(text, 4, text[4].index(" == "), text[4].index(" == ") + 4, " != ")
check(snip == ("int g() {\n  if (a == b) return 1;", "int g() {\n  if (a != b) return 1;"), f"widened: {snip!r}")

# 3. A .cpp and a .hpp of one name, the same line and operator: two ids (the
# second was dropped as a repeat); a .cpp keeps the id earlier runs used.
cpp = generate.mutant_id("core/read", "core/read/reader.cpp", 9, "rel_lt")
hpp = generate.mutant_id("core/read", "core/read/reader.hpp", 9, "rel_lt")
check(cpp == "g.core.read.reader.10.rel_lt", f"a .cpp's id: {cpp}")
check(hpp != cpp and hpp == "g.core.read.reader_hpp.10.rel_lt", f"a .hpp's id: {hpp}")

# 4. On the real tree: every generated mutant parses, applies exactly once and
# changes its file; the same seed gives the same list, another seed another.
def generated(seed):
    out = subprocess.run([sys.executable, generate.__file__, "--per-folder", "6", "--seed", str(seed)],
                         capture_output=True, text=True, check=True).stdout
    return out

a, b, c = generated(1), generated(1), generated(2)
check(a == b, "the same seed gives the same list")
check(a != c, "another seed gives another list")
listing = os.path.join(os.environ.get("TMPDIR", "/tmp"), f"ballast-generated-{os.getpid()}.txt")
with open(listing, "w", encoding="utf-8") as f:
    f.write(a)
try:
    mutants = mutate.parse(listing)
finally:
    os.unlink(listing)
table = generate.read_folders(os.path.join(generate.ROOT, "tests", "mutation", "folders.txt"))
check(len(mutants) >= 6 * len(table) - 6, f"about six per folder: {len(mutants)} for {len(table)} folders")
for m in mutants:
    with open(os.path.join(generate.ROOT, m.path), encoding="utf-8") as f:
        src = f.read()
    check(src.count(m.original) == 1, f"{m.ident}: ORIGINAL occurs once")
    check(src.replace(m.original, m.replacement, 1) != src, f"{m.ident}: the mutant changes the file")
    check(any(m.path.startswith(folder + "/") and m.tests == regex for folder, regex in table),
          f"{m.ident}: carries its folder's tests")

for f in failures:
    print("FAIL:", f)
print(f"mutation_generator: {'ok' if not failures else f'{len(failures)} failures'}")
sys.exit(1 if failures else 0)
