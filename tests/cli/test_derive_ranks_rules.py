#!/usr/bin/python3
"""`ballast derive MODEL --rules FILE --comm local --world N`: a derivation
rules file whose rules do not fit every weight they match (to_f16 on
float16 weights) plans the same on the ranks as in one process.

The single-process derive lists such a rule's weights as skipped and
derives the rest; the ranks planned without a skip list, so the first rule
skip was an error and every rank failed ("PlanOptions::skipped lists them
instead of failing"). Now each rank derives what the single derive does
(its files, joined along the split axis, are the single derive's), the
skips are said once on stderr and listed in each rank's JSON
(`plan_skipped`), as threads at 1, 2 and 4 ranks, directly and through a
Residency.

Exit 0 pass, 1 fail, 77 skip (numpy missing).
"""

import argparse
import json
import os
import shutil
import subprocess
import sys

from cli_check import FAILURES, expect, skip
from test_inspect_shards import HF, write_safetensors

try:
    import numpy  # noqa: F401  (check_derived reads the dumps with it)
    from test_load_ranks import check_derived
except ImportError as e:  # pragma: no cover
    skip("numpy and python3-onnx are needed: %s" % e)

RULES = {"source": "rules",
         "rules": [{"name": "attn", "pattern": "*.{q,k,v,o}_proj.weight", "derive": ["transpose", "quant_int8", "to_f16"]},
                   {"name": "head", "pattern": "lm_head.weight", "derive": ["transpose", "to_f16"]}]}


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--ballast", required=True)
    p.add_argument("--work", required=True)
    a = p.parse_args()
    shutil.rmtree(a.work, ignore_errors=True)
    os.makedirs(a.work)
    model = os.path.join(a.work, "hf.safetensors")
    write_safetensors(model, HF)
    rules = os.path.join(a.work, "rules.json")
    with open(rules, "w") as f:
        json.dump(RULES, f)

    single = os.path.join(a.work, "single")
    proc = subprocess.run([a.ballast, "derive", model, "--rules", rules, "--dump", single, "--json"],
                          capture_output=True, text=True, timeout=300)
    if not expect(proc.returncode == 0, "the single-process derive exits 0 (got %d: %s)" %
                  (proc.returncode, proc.stderr.strip()[-300:])):
        sys.exit(1)
    skipped = json.loads(proc.stdout)["plan"]["skipped"]
    expect(len(skipped) > 0, "the rules skip some weights in one process (to_f16 of float16: %d)" % len(skipped))

    for world in (1, 2, 4):
        for residency in ([], ["--residency", "paged"]):
            label = "world %d%s" % (world, " " + " ".join(residency) if residency else "")
            plan = json.loads(subprocess.run([a.ballast, "inspect", model, "--world", str(world), "--json"],
                                             capture_output=True, text=True, timeout=300).stdout)["shards"]
            dump = os.path.join(a.work, "ranks-%d-%d" % (world, len(residency)))
            proc = subprocess.run([a.ballast, "derive", model, "--rules", rules, "--comm", "local", "--world", str(world),
                                   "--dump", dump, "--json"] + residency, capture_output=True, text=True, timeout=300)
            if not expect(proc.returncode == 0, "%s: derive --comm with the rules exits 0 (got %d: %s)" %
                          (label, proc.returncode, proc.stderr.strip()[-300:])):
                continue
            reports = [json.loads(l) for l in proc.stdout.splitlines() if l.startswith("{")]
            expect(all(len(r["plan_skipped"]) == len(skipped) for r in reports),
                   "%s: every rank lists the plan's %d skips (got %s)" %
                   (label, len(skipped), [len(r["plan_skipped"]) for r in reports]))
            notes = [l for l in proc.stderr.splitlines() if "note: not planned: rule" in l]
            expect(len(notes) == len(skipped), "%s: each skip is said once on stderr (got %d lines)" % (label, len(notes)))
            check_derived(label, single, dump, plan, world, reports)
    sys.exit(1 if FAILURES else 0)


if __name__ == "__main__":
    main()
