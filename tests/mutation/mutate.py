#!/usr/bin/python3
"""mutate.py: the mutation stage (`tools/dev mutate`).

Applies each curated mutant of tests/mutation/mutants.txt in place, one at a
time: rebuilds the dev preset incrementally (only the targets of the tests
that should kill it), runs those tests with a timeout, and puts the file
back. Prints one line per mutant and the score:

  killed              a selected test failed (or timed out)
  SURVIVED            every selected test passed: a gap in the tests
  snippet not found   the original snippet is no longer in the file (the
                      source changed: update the mutant); not a kill
  snippet ambiguous   the snippet occurs more than once; not a kill
  build failed        the mutant does not compile; not a kill

Refuses to run on a tree with uncommitted changes to tracked files, so that
putting a file back is always `git checkout -- FILE`; it does that after
every mutant, also on failure, Ctrl-C or SIGTERM.

  mutate.py [--list FILE] [--only ID[,ID...]] [--timeout SECONDS] [--no-baseline] [--jobs N]

Exit 0 when every mutant that could be applied was killed, 1 otherwise.
"""

import argparse
import os
import re
import signal
import subprocess
import sys
import time

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
PRESET = "dev"
BUILD = os.path.join(ROOT, "build", PRESET)


class Mutant:
    def __init__(self, ident, path, original, replacement, tests, line):
        self.ident, self.path, self.original, self.replacement, self.tests, self.line = (
            ident, path, original, replacement, tests, line)


def parse(list_file):
    """One mutant per line, five TAB-separated fields:
    ID, FILE, ORIGINAL, REPLACEMENT, CTEST_REGEX. '#' starts a comment line.
    In ORIGINAL and REPLACEMENT, \\t and \\n stand for a tab and a newline."""
    mutants, seen = [], set()
    with open(list_file, encoding="utf-8") as f:
        for n, raw in enumerate(f, 1):
            line = raw.rstrip("\n")
            if not line.strip() or line.lstrip().startswith("#"):
                continue
            fields = line.split("\t")
            if len(fields) != 5:
                sys.exit(f"{list_file}:{n}: expected 5 TAB-separated fields, got {len(fields)}")
            ident, path, original, replacement, tests = fields
            if ident in seen:
                sys.exit(f"{list_file}:{n}: duplicate mutant id {ident}")
            seen.add(ident)
            unescape = lambda s: s.replace("\\t", "\t").replace("\\n", "\n")  # noqa: E731
            if original == replacement:
                sys.exit(f"{list_file}:{n}: mutant {ident} replaces a snippet with itself")
            mutants.append(Mutant(ident, path, unescape(original), unescape(replacement), tests, n))
    return mutants


def git(*args, check=True):
    return subprocess.run(["git", "-C", ROOT, *args], capture_output=True, text=True, check=check).stdout


def dirty_tracked_files():
    return [l for l in git("status", "--porcelain", "--untracked-files=no").splitlines() if l.strip()]


def restore(path):
    subprocess.run(["git", "-C", ROOT, "checkout", "--", path], check=False)


def ctest_names(regex):
    out = subprocess.run(["ctest", "--preset", PRESET, "-N", "-R", regex], cwd=ROOT, capture_output=True, text=True)
    return re.findall(r"^\s*Test\s+#\d+: (\S+)", out.stdout, re.M)


def targets_for(tests, all_targets, path):
    """Build targets for these tests: a test's target has its name;
    conformance.<suite>.<backend> run ballast_conformance, interop_* and
    cli_* (the python ones) run ballast_cli.
    None means: build everything."""
    targets = set()
    for t in tests:
        if t in all_targets:
            targets.add(t)
        elif t.startswith("conformance.") and "ballast_conformance" in all_targets:
            targets.add("ballast_conformance")
        elif t.startswith(("interop_", "cli_")) and "ballast_cli" in all_targets:
            targets.add("ballast_cli")
        else:
            return None
    # Plugins are loaded at run time, so nothing above depends on them.
    if "ballast-vulkan" in all_targets and (path.startswith(("backends/vulkan/", "tests/backends/vulkan/")) or
                                             any("vulkan" in t for t in tests)):
        targets.add("ballast-vulkan")
    return sorted(targets)


def build(targets, jobs):
    cmd = ["cmake", "--build", "--preset", PRESET, "-j", str(jobs)]
    if targets:
        cmd += ["--target", *targets]
    return subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, errors="replace")


def run_tests(regex, timeout):
    cmd = ["ctest", "--preset", PRESET, "-R", regex, "--timeout", str(timeout), "--stop-on-failure",
           "--output-on-failure"]
    try:
        p = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, errors="replace", timeout=timeout * 4 + 60)
    except subprocess.TimeoutExpired:
        return False, "timed out"
    if "No tests were found" in p.stdout + p.stderr:
        return None, "no tests match"
    failed = re.findall(r"^\s*\d+ - (\S+) \(", p.stdout, re.M)
    return p.returncode == 0, ", ".join(failed) or p.stdout.strip().splitlines()[-1:]


class Interrupted(Exception):
    pass


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--list", default=os.path.join(ROOT, "tests", "mutation", "mutants.txt"))
    ap.add_argument("--only", help="comma-separated mutant ids")
    ap.add_argument("--timeout", type=int, default=300, help="per test, seconds (default 300)")
    ap.add_argument("--no-baseline", action="store_true", help="skip the unmutated run of every selected test")
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 2)
    args = ap.parse_args()

    mutants = parse(args.list)
    if args.only:
        wanted = set(args.only.split(","))
        unknown = wanted - {m.ident for m in mutants}
        if unknown:
            sys.exit(f"unknown mutant ids: {', '.join(sorted(unknown))}")
        mutants = [m for m in mutants if m.ident in wanted]

    dirty = dirty_tracked_files()
    if dirty:
        print("mutate: refusing to run: tracked files have uncommitted changes (mutants are reverted with "
              "`git checkout -- FILE`):", file=sys.stderr)
        for l in dirty:
            print("  " + l, file=sys.stderr)
        return 2
    for m in mutants:
        if git("ls-files", "--error-unmatch", m.path, check=False).strip() != m.path:
            sys.exit(f"mutant {m.ident}: {m.path} is not a tracked file")

    def on_signal(signum, _frame):
        raise Interrupted(f"signal {signum}")
    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGHUP, on_signal)

    start = time.monotonic()
    print(f"mutate: {len(mutants)} mutants from {os.path.relpath(args.list, ROOT)}", flush=True)
    if not os.path.exists(os.path.join(BUILD, "build.ninja")):
        subprocess.run(["cmake", "--preset", PRESET, "-Wno-dev"], cwd=ROOT, check=True, stdout=subprocess.DEVNULL)
    all_targets = set(l.split(":")[0] for l in subprocess.run(
        ["ninja", "-C", BUILD, "-t", "targets", "all"], capture_output=True, text=True, check=True).stdout.splitlines())

    if not args.no_baseline:
        # The exact names of every selected test (a union of the regexes
        # would exceed the parentheses CMake's regex engine allows).
        names = sorted({t for m in mutants for t in ctest_names(m.tests)})
        union = "^(" + "|".join(re.escape(t) for t in names) + ")$"
        print("mutate: baseline: full build, then the selected tests unmutated", flush=True)
        b = build(None, args.jobs)
        if b.returncode != 0:
            print(b.stdout[-4000:] + b.stderr[-4000:])
            print("mutate: the unmutated tree does not build", file=sys.stderr)
            return 2
        ok, detail = run_tests(union, args.timeout)
        if not ok:
            print(f"mutate: the unmutated tests fail ({detail}): fix them first", file=sys.stderr)
            return 2

    results = []
    try:
        for i, m in enumerate(mutants, 1):
            t0 = time.monotonic()
            full = os.path.join(ROOT, m.path)
            with open(full, encoding="utf-8") as f:
                text = f.read()
            count = text.count(m.original)
            if count != 1:
                outcome, detail = ("snippet not found", "") if count == 0 else ("snippet ambiguous", f"{count} matches")
            else:
                tests = ctest_names(m.tests)
                if not tests:
                    outcome, detail = "no tests", f"regex {m.tests!r} selects no test"
                else:
                    try:
                        with open(full, "w", encoding="utf-8") as f:
                            f.write(text.replace(m.original, m.replacement, 1))
                        b = build(targets_for(tests, all_targets, m.path), args.jobs)
                        if b.returncode != 0:
                            outcome, detail = "build failed", (re.findall(r"error: .*", b.stdout) or [""])[0][:120]
                        else:
                            ok, detail = run_tests(m.tests, args.timeout)
                            outcome = "SURVIVED" if ok else "killed"
                            detail = "" if ok else f"by {detail}"
                    finally:
                        restore(m.path)
            dt = time.monotonic() - t0
            results.append((m, outcome))
            print(f"[{i:>3}/{len(mutants)}] {outcome:<17} {m.ident:<28} {m.path}:{m.line}  {detail}  ({dt:.0f} s)",
                  flush=True)
    except (KeyboardInterrupt, Interrupted) as e:
        print(f"\nmutate: interrupted ({e or 'Ctrl-C'}); the tree is restored", file=sys.stderr)
        return 130
    finally:
        for m in mutants:
            restore(m.path)
        # Leave the build matching the restored sources.
        if results:
            build(None, args.jobs)

    applied = [r for r in results if r[1] in ("killed", "SURVIVED")]
    killed = sum(1 for r in results if r[1] == "killed")
    elapsed = time.monotonic() - start
    print()
    for label in ("SURVIVED", "snippet not found", "snippet ambiguous", "build failed", "no tests"):
        names = [m.ident for m, o in results if o == label]
        if names:
            print(f"{label}: {', '.join(names)}")
    # Per folder: where the tests are thin shows as a low score there.
    folders = sorted({os.path.dirname(m.path) for m, _ in results})
    if len(folders) > 1:
        print("per folder (killed/applied):")
        for folder in folders:
            mine = [o for m, o in results if os.path.dirname(m.path) == folder]
            done = [o for o in mine if o in ("killed", "SURVIVED")]
            k = sum(1 for o in done if o == "killed")
            pct = f"{100.0 * k / len(done):.0f}%" if done else "-"
            print(f"  {folder:<20} {k:>3}/{len(done):<3} {pct:>5}" +
                  (f"  ({len(mine) - len(done)} not applied)" if len(mine) != len(done) else ""))
    score = 100.0 * killed / len(applied) if applied else 0.0
    print(f"mutation score: {killed}/{len(applied)} killed ({score:.0f}%), "
          f"{len(results) - len(applied)} not applied, in {elapsed / 60:.1f} min")
    return 0 if killed == len(applied) and len(applied) == len(results) else 1


if __name__ == "__main__":
    sys.exit(main())
