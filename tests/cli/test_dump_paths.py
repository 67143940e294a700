#!/usr/bin/python3
"""`derive --dump` through every path, and models whose nodes have no names.

  test_dump_paths.py --ballast BIN --gen DIR --work DIR --backend cpu|vulkan

On the sample, alias and LLM-shaped models, named and --unnamed:
- the plain `derive --dump` exits 0 and writes one file per planned output;
  on the unnamed alias model (one MatMulNBits B under two scales, no node
  names) the two consumers' files are told apart by the generated node
  names "MatMulNBits#4" and "MatMulNBits#5" (the bug of issue 23);
- `derive --residency S --dump` for S in upload, zero-copy, paged, and paged
  at the auto budget, half of it and the least budget create() accepts,
  writes exactly the same file names with byte-identical contents; --only
  writes the subset under the same names;
- unnamed models: the JSON `node` fields are the generated names, unique
  per consumer, never empty; the sharing summary is the named model's; a
  planner error names the node "<OpType>#<index>", never ''.

Exit 0 pass, 1 fail, 77 skipped (the backend has no device here, or the
python has no onnx), with the reason printed.
"""

import argparse
import filecmp
import json
import os
import re
import shutil
import subprocess
import sys

from cli_check import FAILURES, expect, skip

STRATEGIES = ("upload", "zero-copy", "paged")


def run(*args):
    p = subprocess.run(list(map(str, args)), capture_output=True, text=True, timeout=600)
    return p.returncode, p.stdout, p.stderr


def node_names(model_path):
    """What ballast calls each node of the main graph (these models have no
    subgraphs): its name, or "<op_type>#<index>" (docs/derivations.md)."""
    import onnx
    m = onnx.load(model_path, load_external_data=False)
    return [n.name or "%s#%d" % (n.op_type, i) for i, n in enumerate(m.graph.node)]


def safe(s):
    return "".join(c if c.isalnum() or c in "._-" else "_" for c in s)


def readable(file_name):
    """A dump file name without the "~<16 hex>" tag sanitizing adds."""
    return re.sub(r"~[0-9a-f]{16}", "", file_name)


class Case:
    def __init__(self, a, label, model):
        self.a, self.label, self.model = a, label, model

    def derive(self, dump, *extra):
        shutil.rmtree(dump, ignore_errors=True)
        return run(self.a.ballast, "derive", self.model, "--backend", self.a.backend, "--dump", dump, *extra)

    def dir(self, name):
        return os.path.join(self.a.work_dir, "%s_%s" % (self.label, name))


def same_files(ref, got):
    """(same names and bytes, what differs)"""
    a, b = sorted(os.listdir(ref)), sorted(os.listdir(got)) if os.path.isdir(got) else []
    if a != b:
        return False, "names differ: only in plain %s, only here %s" % (sorted(set(a) - set(b))[:4], sorted(set(b) - set(a))[:4])
    bad = [f for f in a if not filecmp.cmp(os.path.join(ref, f), os.path.join(got, f), shallow=False)]
    return not bad, "%d file(s) differ: %s" % (len(bad), bad[:4])


def least_budget(case):
    """The least budget create() accepts: what its refusal of 1 byte names."""
    rc, out, err = run(case.a.ballast, "derive", case.model, "--backend", case.a.backend, "--residency", "paged",
                       "--budget", 1)
    m = re.search(r"below the (\d+) bytes", err)
    expect(rc == 2 and m, "%s: a 1-byte budget is refused naming the least it needs (%s)" % (case.label, err.strip()))
    return int(m.group(1)) if m else None


def auto_budget(case):
    rc, out, err = run(case.a.ballast, "inspect", case.model, "--json")
    return json.loads(out)["auto_budget"]["total_bytes"]


def test_dump_paths(case):
    ref = case.dir("plain")
    rc, out, err = case.derive(ref)
    if rc == 2 and ("unavailable" in err or "not_found" in err):
        skip("backend %s: %s" % (case.a.backend, err.strip()))
    if not expect(rc == 0, "%s: plain derive --dump exit 0 (got %d: %s)" % (case.label, rc, err.strip())):
        return None
    files = os.listdir(ref)
    expect(len(files) > 0, "%s: plain derive --dump wrote %d file(s)" % (case.label, len(files)))

    auto = auto_budget(case)
    least = least_budget(case)
    runs = [(s, None) for s in STRATEGIES] + [("paged", auto // 2)]
    if least is not None:
        runs.append(("paged", least))
    for strategy, budget in runs:
        what = "%s --residency %s%s" % (case.label, strategy, "" if budget is None else " --budget %d" % budget)
        got = case.dir("%s_%s" % (strategy, budget))
        rc, out, err = case.derive(got, "--residency", strategy, *(() if budget is None else ("--budget", budget)))
        if not expect(rc == 0, "%s --dump: exit 0 (got %d: %s)" % (what, rc, err.strip())):
            continue
        ok, why = same_files(ref, got)
        expect(ok, "%s --dump: the plain dump's %d file names, byte-identical (%s)" % (what, len(files), why if not ok else "same"))

    # --only: the subset, under the names the whole plan gives.
    got = case.dir("only")
    rc, out, err = case.derive(got, "--residency", "paged", "--only", "dequant_int4,quant_int8")
    kept = [f for f in sorted(os.listdir(ref)) if ".dequant_int4." in f or ".quant_int8." in f]
    mine = sorted(os.listdir(got)) if os.path.isdir(got) else []
    expect(rc == 0 and kept and mine == kept
           and all(filecmp.cmp(os.path.join(ref, f), os.path.join(got, f), shallow=False) for f in kept),
           "%s --residency paged --only dequant_int4,quant_int8 --dump: those %d files, same names and bytes (%s)"
           % (case.label, len(kept), err.strip()))
    return files


def test_unnamed_reports(case, named):
    """On an --unnamed model: the generated names in every report."""
    names = node_names(case.model)
    expect(all(n == "%s#%d" % (n.split("#")[0], i) for i, n in enumerate(names)),
           "%s: the generator left every node unnamed" % case.label)
    rc, out, err = run(case.a.ballast, "derive", case.model, "--backend", case.a.backend, "--residency", "upload", "--json")
    doc = json.loads(out) if rc == 0 else {}
    nodes = [v["node"] for v in doc.get("values", [])]
    expect(nodes and all(n in names for n in nodes),
           "%s: derive --residency --json node fields are generated node names (%s)" % (case.label, sorted(set(nodes))[:4]))
    # The plan's entries name their consumer too, the same one as the value's.
    planned = doc.get("plan", {}).get("planned", [])
    expect(planned and [p.get("node") for p in planned] == nodes,
           "%s: derive --json plan entries carry the consumer node, as the values do (%s)"
           % (case.label, sorted({p.get("node") for p in planned})[:4]))
    per = {}
    for v in doc.get("values", []):
        per.setdefault((v["derivation"], v["weight"]), set()).add(v["node"])
    # One weight under two consumers with other parameters: each its own node.
    rc2, out2, _ = run(case.a.ballast, "derive", named.model, "--backend", case.a.backend, "--residency", "upload", "--json")
    named_doc = json.loads(out2) if rc2 == 0 else {}
    named_per = {}
    for v in named_doc.get("values", []):
        named_per.setdefault((v["derivation"], v["weight"]), set()).add(v["node"])
    expect({k: len(v) for k, v in per.items()} == {k: len(v) for k, v in named_per.items()},
           "%s: as many distinct consumer nodes per derived value as the named model" % case.label)

    rc, out, err = run(case.a.ballast, "derive", case.model, "--backend", case.a.backend)
    rc2, out2, err2 = run(case.a.ballast, "derive", named.model, "--backend", case.a.backend)
    line = [l for l in out.splitlines() if l.startswith("sharing:")]
    expect(rc == 0 and line and line == [l for l in out2.splitlines() if l.startswith("sharing:")],
           "%s: the sharing summary is the named model's (%s)" % (case.label, line))

    rc, out, err = run(case.a.ballast, "replay", case.model, "--backend", case.a.backend, "--tokens", 2,
                       "--derived", "all", "--json")
    expect(rc == 0 and json.loads(out).get("error", "x") is None,
           "%s: replay --derived all on the unnamed model: exit 0 (%s)" % (case.label, err.strip()))


def test_unnamed_alias_dump(case):
    """The bug of issue 23: one B under two scales, nodes unnamed."""
    names = node_names(case.model)
    files = {readable(f) for f in os.listdir(case.dir("plain"))}
    for node in ("MatMulNBits#4", "MatMulNBits#5"):
        expect(names[int(node.split("#")[1])] == node, "alias --unnamed: node %s is a MatMulNBits" % node)
        for suffix in ("dequant_int4", "repack_int4.words", "repack_int4.scale_offset"):
            f = "%s.%s.npy" % (safe("shared.qweight@" + node), suffix)
            expect(f in files, "alias --unnamed: dump file %s (B under %s's scales)" % (f, node))


def test_planner_error(a, unnamed_sample):
    """A MatMulNBits without its K attribute, in a model without node names."""
    import onnx
    m = onnx.load(unnamed_sample, load_external_data=False)
    index = next(i for i, n in enumerate(m.graph.node) if n.op_type == "MatMulNBits")
    node = m.graph.node[index]
    keep = [x for x in node.attribute if x.name != "K"]
    del node.attribute[:]
    node.attribute.extend(keep)
    bad = os.path.join(os.path.dirname(unnamed_sample), "no_k.onnx")
    onnx.save_model(m, bad)
    rc, out, err = run(a.ballast, "derive", bad, "--backend", a.backend)
    want = "MatMulNBits node 'MatMulNBits#%d'" % index
    expect(rc == 2 and want in err and "''" not in err,
           "planner error on an unnamed node names it %s (got %d: %s)" % (want, rc, err.strip()))


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--ballast", required=True)
    p.add_argument("--gen", required=True)
    p.add_argument("--work", required=True)
    p.add_argument("--backend", default="cpu")
    a = p.parse_args()
    try:
        import onnx  # noqa: F401
    except ImportError as e:
        skip("%s has no onnx (%s)" % (sys.executable, e))
    a.work_dir = os.path.join(a.work, a.backend)
    shutil.rmtree(a.work_dir, ignore_errors=True)
    os.makedirs(a.work_dir)
    llm = ["--layers", "2", "--hidden", "128", "--ffn", "256", "--vocab", "512"]
    cases = {}
    for label, gen, extra, file in (("sample", "make_sample_model.py", [], "sample.onnx"),
                                    ("alias", "make_alias_model.py", [], "alias.onnx"),
                                    ("llm", "make_llm_model.py", llm, "llm.onnx")):
        for unnamed in (False, True):
            name = label + ("_unnamed" if unnamed else "")
            out = os.path.join(a.work_dir, "model_" + name)
            g = subprocess.run([sys.executable, os.path.join(a.gen, gen), out, *extra] + (["--unnamed"] if unnamed else []),
                               capture_output=True, text=True)
            if g.returncode != 0:
                print("FAIL: %s exit %d\n%s" % (gen, g.returncode, g.stderr))
                return 1
            cases[name] = Case(a, name, os.path.join(out, file))
    for name, case in cases.items():
        test_dump_paths(case)
    test_unnamed_alias_dump(cases["alias_unnamed"])
    for label in ("sample", "alias", "llm"):
        test_unnamed_reports(cases[label + "_unnamed"], cases[label])
    test_planner_error(a, cases["sample_unnamed"].model)
    print("%d check(s) failed" % len(FAILURES) if FAILURES else "all dump-path checks passed on " + a.backend)
    return 1 if FAILURES else 0


if __name__ == "__main__":
    sys.exit(main())
