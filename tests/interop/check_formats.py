#!/usr/bin/python3
"""One model's weights in two formats give the same derived bytes.

The LLM-shaped generator writes the same weights as ONNX (llm.onnx +
llm.weights) and as safetensors (llm.safetensors). Both are derived on one
backend with the same rules file (source "rules": the ONNX graph is not
read, so both plans are the rules'), with --dump; every dumped file must be
byte-identical across the formats, and across the residency strategies
(upload, zero-copy, paged under the auto budget) on the safetensors model.
The safetensors model with no rules file is planned by the built-in rules
and derives too (it has no Hugging Face names, so only what they match).

Exit 0 pass, 1 fail, 77 skipped (with the reason printed).
"""

import argparse
import json
import os
import shutil
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "cli"))
from cli_check import FAILURES, derive_dump as derive, expect, same_files, skip  # noqa: E402

RULES = {
    "source": "rules",
    "rules": [
        {"name": "attention", "pattern": "layers.*.attn.{q,k,v,o}_proj.weight", "derive": ["transpose", "quant_int8"]},
        {"name": "head", "pattern": "lm_head.weight", "derive": ["transpose", "to_f16", "quant_int8"]},
    ],
}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ballast", required=True)
    ap.add_argument("--gen", required=True)
    ap.add_argument("--work", required=True)
    ap.add_argument("--backend", default="cpu")
    args = ap.parse_args()
    shutil.rmtree(args.work, ignore_errors=True)
    os.makedirs(args.work)
    gen = subprocess.run([sys.executable, os.path.join(args.gen, "make_llm_model.py"), args.work, "--layers", "2",
                          "--hidden", "128", "--ffn", "256", "--vocab", "512", "--safetensors"],
                         capture_output=True, text=True)
    if gen.returncode != 0:
        if "No module named 'onnx'" in gen.stderr:
            skip("python3-onnx is not installed")
        print(gen.stderr)
        return 1
    rules = os.path.join(args.work, "rules.json")
    with open(rules, "w") as f:
        json.dump(RULES, f)
    onnx_model = os.path.join(args.work, "llm.onnx")
    st_model = os.path.join(args.work, "llm.safetensors")

    dumps = {}
    for name, model in (("onnx", onnx_model), ("safetensors", st_model)):
        dump = os.path.join(args.work, "dump-" + name)
        p = derive(args.ballast, model, args.backend, dump, "--rules", rules)
        if expect(p.returncode == 0, "%s: derive --rules on %s exits 0 (%s)" % (name, args.backend, p.stderr.strip())):
            # 2 layers x 4 projections x 2 derivations, and the head's 3.
            expect("plan: 19 derivations: 16 by rule attention, 3 by rule head" in p.stdout,
                   "%s: the plan says which rule planned what" % name)
            dumps[name] = dump
    if len(dumps) == 2:
        same_files(dumps["onnx"], dumps["safetensors"], "onnx vs safetensors on " + args.backend)
    for strategy, budget in (("upload", None), ("zero-copy", None), ("paged", "auto")):
        dump = os.path.join(args.work, "dump-st-" + strategy)
        extra = ["--rules", rules, "--residency", strategy] + (["--budget", budget] if budget else [])
        p = derive(args.ballast, st_model, args.backend, dump, *extra)
        if expect(p.returncode == 0, "safetensors --residency %s exits 0 (%s)" % (strategy, p.stderr.strip())) \
                and "safetensors" in dumps:
            same_files(dumps["safetensors"], dump, "safetensors memo vs --residency " + strategy)
    p = derive(args.ballast, st_model, args.backend, os.path.join(args.work, "dump-default"))
    expect(p.returncode == 0 and "plan: " in p.stdout,
           "safetensors with the built-in rules derives (rc=%d: %s)" % (p.returncode, p.stderr.strip()))
    print("%s: %s" % (os.path.basename(__file__), "FAILED" if FAILURES else "ok"))
    return 1 if FAILURES else 0


if __name__ == "__main__":
    sys.exit(main())
