#!/usr/bin/python3
"""`ballast derive --residency` and `ballast replay` on one backend.

  test_residency.py --ballast BIN --gen DIR --work DIR --backend cpu|vulkan

- derive through each strategy (upload, zero-copy, paged) gives the same
  digest per derivation, equal to the bytes the plain `derive --dump` path
  writes; paged at about 40% of the auto budget too, with its peak device
  bytes within the budget and evictions; no host copies anywhere;
- replay at the auto budget pages nothing after the first token; at about
  50% of it, with prefetch off and on, it completes without a mismatch,
  pages at most 1.1x the least any policy could plus one largest entry per
  steady token, and its peak stays within the budget; --json parses;
- bad --budget, bad --residency, a budget below the largest entry: a clear
  one-line error, exit 2, no crash;
- replay of models without a graph (a llama-shaped GGUF, a sharded
  safetensors checkpoint) walks the derivations the built-in rules plan.

Exit 0 pass, 1 fail, 77 skipped (the backend has no device here, or the
python has no onnx), with the reason printed.
"""

import argparse
import glob
import hashlib
import json
import os
import shutil
import subprocess
import sys

from cli_check import FAILURES, expect, skip

STRATEGIES = ("upload", "zero-copy", "paged")


class Cli:
    def __init__(self, ballast, backend):
        self.ballast = ballast
        self.backend = backend

    def __call__(self, *args):
        proc = subprocess.run([self.ballast, *map(str, args)], capture_output=True, text=True, timeout=600)
        return proc.returncode, proc.stdout, proc.stderr

    def json(self, *args):
        rc, out, err = self(*args, "--backend", self.backend, "--json")
        try:
            doc = json.loads(out)
        except ValueError as e:
            doc = {"_unparsed": "%s: %r" % (e, out[:200])}
        return rc, doc, err


def one_line_error(stderr, *must_contain):
    lines = [l for l in stderr.splitlines() if l.strip()]
    return len(lines) == 1 and all(s.lower() in lines[0].lower() for s in must_contain)


def auto_budget(cli, model):
    rc, out, err = cli("inspect", model, "--json")
    if rc != 0:
        sys.exit("inspect %s failed: %s" % (model, err))
    return json.loads(out)["auto_budget"]["total_bytes"]


def digests(doc):
    return [(v["derivation"], v["weight"], v["node"], v["bytes"], v["digest"]) for v in doc.get("values", [])]


def clean(doc, label):
    """The checks every derive/replay document must pass."""
    r = doc.get("residency", {})
    expect(doc.get("error", "missing") is None, "%s: no error (%s)" % (label, doc.get("error", doc.get("_unparsed"))))
    expect(r.get("host_copy_bytes") == 0, "%s: host_copy_bytes == 0 (%r)" % (label, r.get("host_copy_bytes")))
    expect(doc.get("device_after_teardown") == {"live_allocations": 0, "live_registrations": 0}
           and doc.get("teardown", {}).get("ok"), "%s: teardown back to the baseline" % label)


def dump_digests(cli, model, work):
    """SHA-256 per derivation of what the plain derive --dump path writes (pairs: both halves in order)."""
    import numpy as np
    dump = os.path.join(work, "dump_" + cli.backend)
    shutil.rmtree(dump, ignore_errors=True)
    rc, out, err = cli("derive", model, "--backend", cli.backend, "--dump", dump)
    if not expect(rc == 0, "plain derive --dump on %s: exit 0 (%s)" % (cli.backend, err.strip())):
        return {}
    suffixes = {"repack_int4": (".words", ".scale_offset"), "quant_int8": (".codes", ".scales")}
    out = {}
    for kind in ("transpose", "to_f16", "dequant_int4", "repack_int4", "quant_int8"):
        for first in glob.glob(os.path.join(dump, "*.%s%s.npy" % (kind, suffixes.get(kind, ("",))[0]))):
            weight = os.path.basename(first)[: -len(".%s%s.npy" % (kind, suffixes.get(kind, ("",))[0]))]
            h = hashlib.sha256()
            for suffix in suffixes.get(kind, ("",)):
                h.update(np.load(os.path.join(dump, "%s.%s%s.npy" % (weight, kind, suffix))).tobytes())
            out[(kind, weight)] = h.hexdigest()
    return out


def test_derive(cli, model, label, work, reference_dump):
    auto = auto_budget(cli, model)
    runs = {}
    for s in STRATEGIES:
        rc, doc, err = cli.json("derive", model, "--residency", s)
        if rc == 2 and ("unavailable" in err or "not_found" in err):
            skip("backend %s: %s" % (cli.backend, err.strip()))
        expect(rc == 0, "derive %s --residency %s on %s: exit 0 (got %d: %s)" % (label, s, cli.backend, rc, err.strip()))
        clean(doc, "derive %s %s" % (label, s))
        runs[s] = doc
    base = digests(runs["upload"])
    expect(len(base) > 0 and all(len(d[4]) == 64 for d in base), "derive %s: %d derivations hashed" % (label, len(base)))
    for s in STRATEGIES[1:]:
        expect(digests(runs[s]) == base, "derive %s: %s digests equal upload's, derivation by derivation" % (label, s))
    t = runs["paged"]
    expect(t.get("time_to_first_derivation_seconds", 0) > 0
           and t["time_to_all_derivations_seconds"] >= t["time_to_first_derivation_seconds"]
           and t.get("peak_rss_bytes", 0) > 0, "derive %s: times to first and all derivations, peak RSS" % label)
    r = t["residency"]
    expect(r["strategy"] == "paged" and r["budget_bytes"] == auto and r["peak_device_bytes"] <= auto,
           "derive %s paged: budget auto = inspect's auto budget %d, peak %d within it" % (label, auto, r["peak_device_bytes"]))
    expect(runs["upload"]["residency"]["uploaded_bytes"] > 0 and runs["zero-copy"]["residency"]["paged_in_bytes"] == 0,
           "derive %s: upload uploads, zero-copy pages nothing in" % label)

    budget = auto * 40 // 100
    rc, doc, err = cli.json("derive", model, "--residency", "paged", "--budget", budget)
    expect(rc == 0, "derive %s paged at 40%% of auto (%d B): exit 0 (got %d: %s)" % (label, budget, rc, err.strip()))
    clean(doc, "derive %s paged 40%%" % label)
    r = doc.get("residency", {})
    expect(digests(doc) == base, "derive %s paged 40%%: digests equal upload's" % label)
    expect(r.get("budget_bytes") == budget and r.get("peak_device_bytes", budget + 1) <= budget,
           "derive %s paged 40%%: peak %s <= budget %d" % (label, r.get("peak_device_bytes"), budget))
    expect(r.get("source_evictions", 0) + r.get("derived_evictions", 0) > 0,
           "derive %s paged 40%%: evictions (%s source, %s derived)" % (label, r.get("source_evictions"), r.get("derived_evictions")))

    if reference_dump:
        ref = dump_digests(cli, model, work)
        mine = {(d[0], d[1]): d[4] for d in base}
        expect(ref and ref == mine, "derive %s: residency digests equal the plain --dump path's (%d of %d)"
               % (label, sum(1 for k in mine if ref.get(k) == mine[k]), len(mine)))

    rc, doc, err = cli.json("derive", model, "--residency", "paged", "--only", "transpose,quant_int8")
    kinds = {v["derivation"] for v in doc.get("values", [])}
    expect(rc == 0 and kinds == {"transpose", "quant_int8"}
           and [d for d in base if d[0] in kinds] == digests(doc),
           "derive %s --only transpose,quant_int8: only those, same digests (%s)" % (label, sorted(kinds)))
    # auto counts the sources and only the derivations this run pins (each
    # entry of these models is distinct).
    rc2, out, _ = cli("inspect", model, "--json")
    source_bytes = json.loads(out)["auto_budget"]["source_bytes"]
    want = source_bytes + sum(d[3] for d in base if d[0] in kinds)
    expect(doc.get("residency", {}).get("budget_bytes") == want,
           "derive %s --only: the auto budget is sources + the derivations kept (%s, want %d)"
           % (label, doc.get("residency", {}).get("budget_bytes"), want))

    rc, out, err = cli("derive", model, "--backend", cli.backend, "--residency", "paged", "--budget", budget)
    expect(rc == 0 and "residency:" in out and "evictions:" in out and "time to first derivation" in out
           and "peak RSS" in out and "device after teardown: 0 live allocation(s), 0 live registration(s)" in out,
           "derive %s paged (text): per-kind table, residency summary, times, teardown" % label)
    if label == "sample":
        # Nothing of the kind planned: no first derivation to time. The text
        # says so, as the JSON's null does (it printed 0.000 ms).
        rc, out, err = cli("derive", model, "--backend", cli.backend, "--residency", "upload", "--only", "dequant_gguf")
        expect(rc == 0 and "time to first derivation none (nothing derived), to all 0:" in out,
               "derive %s --only dequant_gguf (nothing planned): no first time (%d: %s)" % (label, rc, err.strip()))


def test_replay(cli, model, label):
    auto = auto_budget(cli, model)
    rc, doc, err = cli.json("replay", model, "--tokens", 4)
    expect(rc == 0, "replay %s at auto: exit 0 (got %d: %s)" % (label, rc, err.strip()))
    clean(doc, "replay %s auto" % label)
    tokens = doc.get("tokens", [])
    expect(len(tokens) == 4 and tokens[0]["paged_in_bytes"] > 0 and all(t["paged_in_bytes"] == 0 for t in tokens[1:]),
           "replay %s at auto: tokens 2-4 page in 0 bytes (%s)" % (label, [t["paged_in_bytes"] for t in tokens]))
    s = doc.get("summary", {})
    expect(s.get("minimum_paged_bytes_per_token") == 0 and s.get("peak_within_budget") is True,
           "replay %s at auto: minimum 0, peak within budget" % label)

    budget = auto // 2
    for prefetch in ("off", "on"):
        what = "replay %s at 50%% of auto (%d B), prefetch %s" % (label, budget, prefetch)
        rc, doc, err = cli.json("replay", model, "--budget", budget, "--tokens", 5, "--prefetch", prefetch, "--anchor")
        expect(rc == 0, "%s: exit 0, no mismatch (got %d: %s)" % (what, rc, err.strip()))
        clean(doc, what)
        s = doc.get("summary", {})
        steady, minimum, largest = (s.get("steady_paged_bytes_per_token"), s.get("minimum_paged_bytes_per_token"),
                                    s.get("largest_entry_bytes"))
        print("     %s: steady %s B/token, minimum %s, largest entry %s, ratio %s"
              % (what, steady, minimum, largest, s.get("paged_vs_minimum")))
        expect(steady is not None and minimum is not None and steady <= 1.1 * minimum + largest,
               "%s: steady paged bytes <= 1.1 x minimum + one largest entry" % what)
        expect(s.get("peak_device_bytes", budget + 1) <= budget and s.get("peak_within_budget") is True,
               "%s: peak %s <= budget" % (what, s.get("peak_device_bytes")))
        a = doc.get("anchor") or {}
        expect(a.get("error") is None and (a.get("anchor_bytes_per_second") or 0) > 0,
               "%s: --anchor measured (%s)" % (what, a.get("anchor_bytes_per_second")))
        expect(a.get("hot_copy_error") is None and (a.get("hot_copy_bytes_per_second") or 0) > 0
               and a.get("hot_copy_threads") == 2
               and (a.get("paging_bytes_per_second") is None or (a.get("paging_vs_hot_copy") or 0) > 0),
               "%s: --anchor's hot two-thread copy measured (%s)" % (what, a.get("hot_copy_bytes_per_second")))
        r = doc.get("residency", {})
        expect(r.get("pool_hits", -1) >= 0 and r.get("pool_misses", 0) > 0 and r.get("pooled_bytes", -1) >= 0,
               "%s: the block pool's counts reported (hits %s)" % (what, r.get("pool_hits")))

    # Every derivation per consumer: the walk touches more than the budget,
    # so the minimum is not 0 and the bound means something. Without
    # prefetch the paging is deterministic; with it, the background loads
    # race the walk, so only completion, values and the budget are checked
    # (the numbers are printed).
    for prefetch in ("off", "on"):
        what = "replay %s --derived all at 50%% of auto, prefetch %s" % (label, prefetch)
        rc, doc, err = cli.json("replay", model, "--budget", budget, "--tokens", 5, "--derived", "all",
                                "--prefetch", prefetch)
        expect(rc == 0, "%s: exit 0, no mismatch (got %d: %s)" % (what, rc, err.strip()))
        clean(doc, what)
        s = doc.get("summary", {})
        steady, minimum, largest = (s.get("steady_paged_bytes_per_token"), s.get("minimum_paged_bytes_per_token"),
                                    s.get("largest_entry_bytes"))
        print("     %s: steady %s B/token, minimum %s, largest entry %s, ratio %s, per token %s"
              % (what, steady, minimum, largest, s.get("paged_vs_minimum"),
                 [t["paged_in_bytes"] for t in doc.get("tokens", [])]))
        if prefetch == "off":
            expect(steady is not None and minimum is not None and steady <= 1.1 * minimum + largest,
                   "%s: steady paged bytes <= 1.1 x minimum + one largest entry" % what)
        expect(s.get("peak_device_bytes", budget + 1) <= budget, "%s: peak %s <= budget" % (what, s.get("peak_device_bytes")))

    # The walks: --derived all pins every planned derivation (each weight of
    # these models has one consumer) plus weights nothing is derived from
    # (the sample's Gemm bias); none pins every weight as stored.
    rc, out, err = cli("inspect", model, "--json")
    ab = json.loads(out)["auto_budget"]
    walks = {}
    for derived in ("first", "all", "none"):
        rc, doc, err = cli.json("replay", model, "--budget", budget, "--tokens", 3, "--derived", derived)
        expect(rc == 0 and doc.get("error", "x") is None and doc["walk"]["steps"] > 0,
               "replay %s --derived %s at 50%%: exit 0 (got %d: %s)" % (label, derived, rc, err.strip()))
        walks[derived] = doc.get("walk", {})
    w = walks["all"]
    direct = w.get("touched_bytes", 0) - ab["derived_bytes"]
    expect(w.get("entries", 0) >= ab["derivations"] and 0 <= direct < ab["source_bytes"]
           and (label != "llm" or (w["entries"] == ab["derivations"] and direct == 0)),
           "replay %s --derived all: the walk covers every planned derivation (%s; auto budget %d derivations, %d B)"
           % (label, w, ab["derivations"], ab["derived_bytes"]))
    expect(walks["none"].get("touched_bytes") == ab["source_bytes"] == walks["none"].get("source_bytes"),
           "replay %s --derived none: the walk touches every source weight, as stored (%s)" % (label, walks["none"]))
    rc, doc, err = cli.json("replay", model, "--tokens", 2, "--derived", "none")
    s = doc.get("summary", {})
    expect(rc == 0 and s.get("budget_bytes") == ab["source_bytes"] and doc["tokens"][1]["paged_in_bytes"] == 0,
           "replay %s --derived none at auto: the budget is the source bytes, nothing paged after token 1 (%s)"
           % (label, s.get("budget_bytes")))
    if label == "llm":
        # Half the source bytes, walked as stored: the layers' like-sized
        # matrices evict each other, so steady page-ins take the evicted
        # block from the pool (issue 28).
        rc, doc, err = cli.json("replay", model, "--tokens", 3, "--derived", "none", "--budget", ab["source_bytes"] // 2)
        r = doc.get("residency", {})
        expect(rc == 0 and r.get("pool_hits", 0) > 0 and r.get("page_ins", 0) > r.get("pool_misses", 0) > 0,
               "replay %s --derived none at 50%%: page-ins take pooled blocks (hits %s, misses %s, page-ins %s)"
               % (label, r.get("pool_hits"), r.get("pool_misses"), r.get("page_ins")))
    expect(0 < walks["first"].get("steps", 0) < w.get("steps", 0)
           and walks["first"].get("source_bytes") == ab["source_bytes"],
           "replay %s --derived first: one derivation per consumer (%s)" % (label, walks["first"]))
    for strategy in ("upload", "zero-copy"):
        rc, doc, err = cli.json("replay", model, "--residency", strategy, "--tokens", 3)
        expect(rc == 0 and doc.get("error", "x") is None and all(t["paged_in_bytes"] == 0 for t in doc["tokens"]),
               "replay %s --residency %s: exit 0, nothing paged (got %d: %s)" % (label, strategy, rc, err.strip()))

    rc, out, err = cli("replay", model, "--backend", cli.backend, "--budget", budget, "--tokens", 3)
    expect(rc == 0 and "TOKEN" in out and "summary:" in out and "steady state" in out and "\r" not in out + err,
           "replay %s (text): per-token table and summary, no progress bar in a pipe" % label)


def test_replay_aliases(cli, model):
    """Names that share bytes (tools/gen/make_alias_model.py): the walk
    tells its values apart as the residency does, by where the bytes are, so
    tied names are one value and the auto budget covers the walk (it once
    counted same.c and same.d, and tied.a and tied.b as stored, twice)."""
    rc, out, err = cli("inspect", model, "--json")
    ab = json.loads(out)["auto_budget"]
    for derived, entries in (("none", 6), ("first", 5)):
        # none: tied.a/b, same.c/d, shared.qweight, scales.a, scales.b, zero_points.a: 6 ranges;
        # first: the transposes of tied.a and tied.b (other shapes), of same.c/d (one), two dequant_int4.
        rc, doc, err = cli.json("replay", model, "--tokens", 3, "--derived", derived)
        clean(doc, "replay alias --derived %s" % derived)
        w, s = doc.get("walk", {}), doc.get("summary", {})
        expect(rc == 0 and w.get("entries") == entries and w.get("source_bytes") == ab["source_bytes"]
               and s.get("minimum_paged_bytes_per_token") == 0 and s.get("budget_bytes", 0) >= w.get("touched_bytes")
               and all(t["paged_in_bytes"] == 0 for t in doc.get("tokens", [{}])[1:]),
               "replay alias --derived %s at auto: %d distinct values, tied names once, minimum 0 (got %d: %s; %s; %s)"
               % (derived, entries, rc, err.strip(), w, s.get("budget_bytes")))
        if derived == "none":
            expect(w.get("touched_bytes") == ab["source_bytes"],
                   "replay alias --derived none: touches the source bytes once (%s, %d)" % (w, ab["source_bytes"]))


def test_replay_no_graph(cli, model, label):
    """A model without a graph (GGUF, sharded safetensors): replay walks its
    weights with the derivations the built-in rules plan, never an empty walk."""
    rc, out, err = cli("inspect", model, "--json")
    ab = json.loads(out)["auto_budget"]
    expect(ab["derivations"] > 0, "%s: the built-in rules plan derivations (%s)" % (label, ab))
    walks = {}
    for derived in ("first", "all", "none"):
        rc, doc, err = cli.json("replay", model, "--tokens", 3, "--derived", derived)
        clean(doc, "replay %s --derived %s" % (label, derived))
        tokens = doc.get("tokens", [])
        expect(rc == 0 and len(tokens) == 3 and tokens[0]["paged_in_bytes"] > 0
               and all(t["paged_in_bytes"] == 0 for t in tokens[1:]),
               "replay %s --derived %s at auto: exit 0, pages in on token 1 only (got %d: %s; %s)"
               % (label, derived, rc, err.strip(), [t["paged_in_bytes"] for t in tokens]))
        walks[derived] = doc.get("walk", {})
    w = walks["all"]
    expect(w.get("entries", 0) >= ab["derivations"] and w.get("steps", 0) >= walks["first"].get("steps", 0) > 0,
           "replay %s --derived all: every planned derivation is a step (%s; plan %d)" % (label, w, ab["derivations"]))
    expect(w.get("touched_bytes", 0) >= ab["derived_bytes"],
           "replay %s --derived all: touches every derived byte (%s >= %d)" % (label, w.get("touched_bytes"),
                                                                              ab["derived_bytes"]))
    expect(walks["none"].get("touched_bytes") == ab["source_bytes"] == walks["none"].get("source_bytes"),
           "replay %s --derived none: every weight as stored (%s; %d B)" % (label, walks["none"], ab["source_bytes"]))
    budget = ab["total_bytes"] // 2
    rc, doc, err = cli.json("replay", model, "--budget", budget, "--tokens", 4, "--derived", "all")
    if "below the" in err:  # a model whose largest entry is half its budget: the error is the right answer
        expect(rc == 2 and one_line_error(err, "budget"), "replay %s at 50%%: a one-line budget error" % label)
    else:
        s = doc.get("summary", {})
        expect(rc == 0 and s.get("peak_within_budget") is True and doc["tokens"][1]["paged_in_bytes"] > 0,
               "replay %s --derived all at 50%% of auto: exit 0, pages each token, peak within budget (got %d: %s)"
               % (label, rc, err.strip()))


def test_errors(cli, model):
    b = cli.backend
    cases = [
        (("derive", model, "--backend", b, "--residency", "sideways"), "residency"),
        (("derive", model, "--backend", b, "--residency", "paged", "--budget", "12Q"), "budget"),
        (("derive", model, "--backend", b, "--residency", "paged", "--budget", "lots"), "budget"),
        (("derive", model, "--backend", b, "--residency", "paged", "--budget", "0"), "budget"),
        (("derive", model, "--backend", b, "--residency", "paged", "--budget", "4MB"), "budget"),
        (("derive", model, "--backend", b, "--budget", "4M"), "residency"),
        (("derive", model, "--backend", b, "--residency", "paged", "--only", "rotate"), "rotate"),
        (("replay", model, "--backend", b, "--residency", "sideways"), "residency"),
        (("replay", model, "--backend", b, "--budget", "-5"), "budget"),
        (("replay", model, "--backend", b, "--budget", "99999999999999999999999"), "budget"),
        (("replay", model, "--backend", b, "--prefetch", "maybe"), "prefetch"),
        (("replay", model, "--backend", b, "--tokens", "0"), "tokens"),
        (("replay", model, "--backend", b, "--rules", model), "rules"),  # a graph's walk follows its nodes
        (("derive", model, "--backend", b, "--no-such-option"), "no-such-option"),
        (("no-such-command", model), "no-such-command"),
        (("derive", model, "--backend", b, "--max-amplification", "nan"), "amplification"),
        (("inspect", model, "--max-amplification", "-1"), "amplification"),
    ]
    for args, word in cases:
        rc, out, err = cli(*args)
        # One line, "ballast <command>: invalid_argument: ...", like every other error.
        expect(rc == 2 and one_line_error(err, word, "invalid_argument") and err.startswith("ballast"),
               "%s: usage error, exit 2, one line naming %s (got %d: %s)" % (" ".join(map(str, args)), word, rc,
                                                                             err.strip().splitlines()))
    for command in ("derive", "replay"):
        args = [command, model, "--backend", b, "--residency", "paged", "--budget", "1K"]
        rc, out, err = cli(*args)
        expect(rc == 2 and one_line_error(err, "budget"),
               "%s with a budget below the largest entry: exit 2, one line naming the budget (got %d: %s)"
               % (command, rc, err.strip()))


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--ballast", required=True)
    p.add_argument("--gen", required=True)
    p.add_argument("--work", required=True)
    p.add_argument("--backend", default="cpu")
    a = p.parse_args()
    try:
        import onnx  # noqa: F401
        import numpy  # noqa: F401
    except ImportError as e:
        skip("%s has no onnx or numpy (%s)" % (sys.executable, e))
    work = os.path.join(a.work, a.backend)
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    gens = [("sample", ["make_sample_model.py"], "sample.onnx"),
            ("llm", ["make_llm_model.py", "--layers", "2", "--hidden", "256", "--ffn", "512", "--vocab", "1024"],
             "llm.onnx")]
    models = {}
    for name, cmd, file in gens:
        out = os.path.join(work, name)
        gen = subprocess.run([sys.executable, os.path.join(a.gen, cmd[0]), out, *cmd[1:]], capture_output=True, text=True)
        if gen.returncode != 0:
            print("FAIL: %s exit %d\n%s" % (cmd[0], gen.returncode, gen.stderr))
            return 1
        models[name] = os.path.join(out, file)
    cli = Cli(a.ballast, a.backend)
    test_derive(cli, models["sample"], "sample", work, reference_dump=True)
    test_derive(cli, models["llm"], "llm", work, reference_dump=False)
    test_replay(cli, models["llm"], "llm")
    test_replay(cli, models["sample"], "sample")
    test_errors(cli, models["sample"])
    alias = os.path.join(work, "alias")
    gen = subprocess.run([sys.executable, os.path.join(a.gen, "make_alias_model.py"), alias], capture_output=True,
                         text=True)
    if not expect(gen.returncode == 0, "make_alias_model.py: exit 0 (%s)" % gen.stderr.strip()[-300:]):
        return 1
    test_replay_aliases(cli, os.path.join(alias, "alias.onnx"))
    gguf, st = os.path.join(work, "gguf"), os.path.join(work, "st")
    for script, out in (("make_gguf_models.py", gguf), ("make_safetensors_models.py", st)):
        gen = subprocess.run([sys.executable, os.path.join(a.gen, script), out], capture_output=True, text=True)
        if not expect(gen.returncode == 0, "%s: exit 0 (%s)" % (script, gen.stderr.strip()[-300:])):
            return 1
    test_replay_no_graph(cli, os.path.join(gguf, "llama.gguf"), "llama.gguf")
    test_replay_no_graph(cli, os.path.join(st, "sharded", "model.safetensors.index.json"), "sharded safetensors")
    print("%d check(s) failed" % len(FAILURES) if FAILURES else "all residency CLI checks passed on " + a.backend)
    return 1 if FAILURES else 0


if __name__ == "__main__":
    sys.exit(main())
