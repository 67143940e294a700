#!/usr/bin/python3
"""fuzz_long.py: long libFuzzer runs (`tools/dev fuzz [--minutes N]`).

Runs every fuzz target the fuzz preset registers with ctest (label `fuzz`;
their seeds, data and run_fuzz.cmake as CI runs them) one after another for
N minutes each, keeping each target's grown corpus in
build/fuzz/long/<target>/corpus so that later runs continue from it. Prints
one line per target and a total, and writes them to
build/fuzz/long/summary.md: wall and CPU time, executions, coverage
(`cov`: edges) and features (`ft`), corpus size, and findings (the
artifacts a crash, leak, timeout or sanitizer report left; each run's
libFuzzer output is in build/fuzz/long/<target>/log.txt).

  fuzz_long.py [--minutes N] [--only NAME[,NAME...]] [--jobs J]

Exit 0 when no target found anything. A finding's input is in
build/fuzz/long/<target>/artifacts: fix it, then add it to the target's
seed corpus (tests/fuzz/corpus*/) so CI replays it.
"""

import argparse
import json
import os
import re
import subprocess
import sys
import time

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
BUILD = os.path.join(ROOT, "build", "fuzz")
LONG = os.path.join(BUILD, "long")


def fuzz_tests():
    out = subprocess.run(["ctest", "--preset", "fuzz", "-N", "-L", "fuzz", "--show-only=json-v1"], cwd=ROOT,
                         check=True, capture_output=True, text=True).stdout
    return [(t["name"], t["command"]) for t in json.loads(out)["tests"]]


def parse_log(path):
    text = open(path, encoding="utf-8", errors="replace").read()
    stats = {"execs": None, "cov": None, "ft": None, "corpus": None, "corpus_bytes": None}
    m = re.search(r"stat::number_of_executed_units:\s*(\d+)", text)
    if m:
        stats["execs"] = int(m.group(1))
    # The last status line: "#N  DONE cov: C ft: F corp: U/SIZE ..." (or
    # the last pulse/new line when the run stopped early).
    for line in reversed(text.splitlines()):
        m = re.search(r"^#(\d+)\s+\w+\s+cov: (\d+) ft: (\d+) corp: (\d+)/(\S+)", line)
        if m:
            if stats["execs"] is None:
                stats["execs"] = int(m.group(1))
            stats["cov"], stats["ft"], stats["corpus"], stats["corpus_bytes"] = (
                int(m.group(2)), int(m.group(3)), int(m.group(4)), m.group(5))
            break
    return stats


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--minutes", type=float, default=15.0, help="minutes per target (default 15)")
    ap.add_argument("--only", default="", help="comma-separated target names")
    ap.add_argument("--jobs", type=int, default=1,
                    help="targets run at once (default 1); under nice, more use a busy machine's idle moments")
    args = ap.parse_args()
    seconds = max(1, int(args.minutes * 60))
    only = {n for n in args.only.split(",") if n}

    tests = fuzz_tests()
    if only:
        unknown = only - {name for name, _ in tests}
        if unknown:
            print("no fuzz target named: " + ", ".join(sorted(unknown)), file=sys.stderr)
            return 2
        tests = [t for t in tests if t[0] in only]
    os.makedirs(LONG, exist_ok=True)
    rows = []
    totals = {"cpu": 0.0, "execs": 0, "findings": 0}
    running = {}  # pid -> (name, work, log, wall0)
    run_wall0 = time.monotonic()

    def start(name, command):
        work = os.path.join(LONG, name)
        log = os.path.join(work, "log.txt")
        os.makedirs(work, exist_ok=True)
        cmd = [a for a in command if not a.startswith(("-DSECONDS=", "-DWORK="))]
        script = cmd.index("-P")
        cmd[script:script] = ["-DSECONDS=%d" % seconds, "-DWORK=" + work, "-DKEEP=ON", "-DLOG=" + log]
        print("[fuzz] %s: %d s (log: %s)" % (name, seconds, os.path.relpath(log, ROOT)), flush=True)
        proc = subprocess.Popen(cmd, cwd=BUILD, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        running[proc.pid] = (name, work, log, time.monotonic())

    def finish():
        # wait4 gives each run's own CPU time (the fuzzer included), also
        # when several run at once.
        pid, status, usage = os.wait4(-1, 0)
        if pid not in running:
            return
        name, work, log, wall0 = running.pop(pid)
        rc = os.waitstatus_to_exitcode(status)
        cpu, wall = usage.ru_utime + usage.ru_stime, time.monotonic() - wall0
        adir = os.path.join(work, "artifacts")
        artifacts = sorted(os.listdir(adir)) if os.path.isdir(adir) else []
        stats = parse_log(log) if os.path.exists(log) else {}
        found = len(artifacts) if artifacts else (1 if rc != 0 else 0)
        totals["cpu"] += cpu
        totals["execs"] += stats.get("execs") or 0
        totals["findings"] += found
        rows.append((name, wall, cpu, stats, found, artifacts))
        print("[fuzz] %s: %s" % (name, line(rows[-1])), flush=True)

    for name, command in tests:
        while len(running) >= args.jobs:
            finish()
        start(name, command)
    while running:
        finish()
    total_cpu, total_execs, findings = totals["cpu"], totals["execs"], totals["findings"]
    order = [name for name, _ in tests]
    rows.sort(key=lambda r: order.index(r[0]))

    lines = ["| target | wall min | CPU min | executions | cov | ft | corpus | findings |",
             "|---|---:|---:|---:|---:|---:|---:|---|"]
    for name, wall, cpu, stats, found, artifacts in rows:
        lines.append("| `%s` | %.1f | %.1f | %s | %s | %s | %s | %s |" % (
            name, wall / 60, cpu / 60, fmt(stats.get("execs")), fmt(stats.get("cov")), fmt(stats.get("ft")),
            "%s (%s)" % (fmt(stats.get("corpus")), stats.get("corpus_bytes") or "?"),
            "none" if not found else ", ".join(artifacts) or "exit status"))
    lines.append("| total (elapsed) | %.1f | %.1f | %s | | | | %d |" % (
        (time.monotonic() - run_wall0) / 60, total_cpu / 60, fmt(total_execs), findings))
    summary = "\n".join(lines)
    with open(os.path.join(LONG, "summary.md"), "w", encoding="utf-8") as f:
        f.write("`tools/dev fuzz --minutes %g --jobs %d` (%s)\n\n%s\n" % (args.minutes, args.jobs, time.strftime("%d %b %Y"),
                                                                         summary))
    print(summary)
    return 0 if findings == 0 else 1


def fmt(v):
    return "?" if v is None else format(v, ",")


def line(row):
    name, wall, cpu, stats, found, artifacts = row
    return "%.1f min wall, %.1f CPU min, %s executions, cov %s, ft %s, corpus %s, %s" % (
        wall / 60, cpu / 60, fmt(stats.get("execs")), fmt(stats.get("cov")), fmt(stats.get("ft")),
        fmt(stats.get("corpus")), "no findings" if not found else "FINDINGS: " + (", ".join(artifacts) or "exit status"))


if __name__ == "__main__":
    sys.exit(main())
