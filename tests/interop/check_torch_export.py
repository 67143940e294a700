#!/usr/bin/python3
"""check_torch_export.py: ballast on models exported by torch.onnx.export, against torch's own parameters.

  check_torch_export.py --ballast BIN --gen DIR --work DIR [--backend cpu] [--strict-gaps]

Exports the decoder of tools/gen/make_torch_model.py in each variant (the
default MatMul export, the Gemm export with a tied head on one initializer,
fp16, external data, bf16, no constant folding, and the known gap:
model-local functions), then for each:

  * works out from the ONNX graph which nn.Linear each MatMul/Gemm reads
    (its B matched bit for bit to a torch parameter, W or W.T, through
    Identity and Transpose nodes and function calls), and so what the
    planner should plan: transpose, to_f16 (float32, bfloat16 sources) and
    quant_int8 (float32, float16) of every Linear's weight, once per
    weight, and nothing for norms, biases or the embedding's Gather;
  * runs `ballast derive MODEL --backend B --dump DIR --json` and checks the
    plan (every entry from the graph, named for its first consumer node,
    the layout its `why` gives; what is skipped, each with its node: a
    bfloat16 weight's quant_int8, a model-local function with its node
    count; nothing else), the
    memo (each value built once) and every dumped array bit for bit against
    the value computed by torch from the parameter: a MatMul's B is W.T,
    so its transpose is W itself; a Gemm(transB=1)'s B is W, its transpose
    W.T; to_f16 is torch's W.half() of B; quant_int8 is W's rows quantized
    by docs/derivations.md section 5, in torch;
  * the tie: in the Gemm export the head's Gemm and the embedding's Gather
    read one initializer, planned once; in the MatMul export torch writes
    the head as a folded copy of embed_tokens.weight.T, and its derived
    transpose is bit for bit the embedding;
  * external data: inspect maps one data file, no dead bytes; the dumps
    equal the inline export's; every residency strategy (upload,
    zero-copy, paged at the auto budget and at the least budget) dumps the
    same bytes; `ballast load --json` builds every planned value.

A Linear the planner should plan and does not is a failure in every
variant but the gap one (functions: the loader does not inline model-local
functions), where it is printed as "GAP" and fails only with --strict-gaps;
there every function must still be a listed skip giving its node count (so
the gap is visible), any value dumped is compared bit for bit, and an
entry planned that should not be fails.

Exit 0 pass, 1 fail, 77 skipped (python3-torch or python3-onnx missing,
or the backend unavailable; the reason printed).
"""

import argparse
import json
import os
import re
import shutil
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "cli"))
from cli_check import FAILURES, expect, same_files, skip  # noqa: E402

try:
    import numpy as np
    import onnx
    from onnx import numpy_helper
except ImportError as e:
    skip("%s: the test needs python3-onnx and python3-numpy (this is %s)" % (e, sys.executable))
try:
    import torch
except ImportError as e:
    skip("%s: the test exports with python3-torch (this is %s)" % (e, sys.executable))

STRICT = ("matmul", "gemm", "fp16", "external", "bf16", "nofold")
GAPS = ("functions",)
KINDS = {  # what the planner derives from a dense MatMul/Gemm weight of each type
    "float32": ("transpose", "to_f16", "quant_int8"),
    "float16": ("transpose", "quant_int8"),
    "bfloat16": ("transpose", "to_f16"),  # quant_int8 reads float32 or float16
}
TYPES = {1: "float32", 10: "float16", 16: "bfloat16"}
NOTES = []


def note(text):
    print("note " + text)
    NOTES.append(text)


def bits(t):
    """A torch tensor as a numpy array of its exact bits (bfloat16 as uint16)."""
    t = t.detach().contiguous()
    if t.dtype == torch.bfloat16:
        return t.view(torch.int16).numpy().view(np.uint16)
    return t.numpy()


def init_array(t, base):
    """An initializer's values, bfloat16 as uint16 bits (onnx 1.12's numpy_helper widens it)."""
    if t.data_type == onnx.TensorProto.BFLOAT16:
        if t.HasField("raw_data"):
            raw = t.raw_data
        else:
            raw = np.asarray(t.int32_data, dtype=np.uint16).tobytes()
        return np.frombuffer(raw, dtype=np.uint16).reshape(tuple(t.dims))
    return numpy_helper.to_array(t, base_dir=base)


def quant_int8(w):
    """docs/derivations.md section 5, in torch: per row of [N, K]."""
    w = w.float()
    scale = w.abs().amax(dim=1) * torch.tensor(1.0 / 127.0, dtype=torch.float32)
    q = torch.round(w / scale[:, None])  # round half to even, an f32 division
    q = torch.where(scale[:, None] == 0, torch.zeros_like(q), torch.nan_to_num(q, nan=0.0))
    return q.clamp(-127, 127).to(torch.int8), scale


def expected_values(kind, w, nk):
    """The dumped arrays of one derivation of a Linear weight W [out, in], stored as W (nk) or W.T."""
    stored = w if nk else w.t()
    if kind == "transpose":
        return {"transpose": bits(stored.t())}
    if kind == "to_f16":
        return {"to_f16": bits(stored.to(torch.float16))}
    codes, scales = quant_int8(w)
    return {"quant_int8.codes": bits(codes), "quant_int8.scales": bits(scales)}


class Consumer:
    def __init__(self, node, weight, nk, via):
        self.node, self.weight, self.nk, self.via = node, weight, nk, via


def consumers(model):
    """Every MatMul/Gemm whose B resolves to an initializer, through Identity and
    2-D Transpose nodes and model-local function calls."""
    inits = {t.name for t in model.graph.initializer}
    functions = {(f.domain, f.name): f for f in model.functions}
    out = []

    class Scope:
        def __init__(self, nodes, formals, parent):
            self.producers = {o: n for n in nodes for o in n.output}
            self.formals, self.parent = formals, parent  # formal input -> the caller's value

    def resolve(scope, name, via):
        flip = False
        while True:
            p = scope.producers.get(name)
            if p is not None and p.op_type == "Identity":
                name, via = p.input[0], via + ["Identity"]
                continue
            perm = [list(a.ints) for a in p.attribute if a.name == "perm"] if p is not None else []
            if p is not None and p.op_type == "Transpose" and perm in ([], [[1, 0]]):
                name, via, flip = p.input[0], via + ["Transpose"], not flip
                continue
            if p is not None:
                return None  # computed at run time
            if scope.parent is not None and name in scope.formals:
                name, scope = scope.formals[name], scope.parent
                continue
            return (name, flip, via) if scope.parent is None and name in inits else None

    def walk(nodes, scope, label):
        for node in nodes:
            if (node.domain, node.op_type) in functions:
                f = functions[(node.domain, node.op_type)]
                inner = Scope(f.node, dict(zip(f.input, node.input)), scope)
                walk(f.node, inner, label + [node.name or node.op_type])
                continue
            if node.op_type not in ("MatMul", "Gemm") or node.domain not in ("", "ai.onnx") or len(node.input) < 2:
                continue
            r = resolve(scope, node.input[1], ["function " + "/".join(label)] if label else [])
            if r is None:
                continue
            name, flip, via = r
            trans_b = node.op_type == "Gemm" and any(a.name == "transB" and a.i for a in node.attribute)
            out.append(Consumer(node.name, name, trans_b != flip, via))

    walk(model.graph.node, Scope(model.graph.node, {}, None), [])
    return out


def run(ballast, *args):
    p = subprocess.run([ballast, *map(str, args)], capture_output=True, text=True, timeout=300)
    return p


def ballast_json(ballast, *args):
    p = run(ballast, *args)
    if p.returncode != 0:
        if "unavailable" in p.stderr or "not_found: opening backend" in p.stderr:
            skip("backend: %s" % p.stderr.strip())
        expect(False, "ballast %s exits 0 (got %d: %s)" % (" ".join(map(str, args[:2])), p.returncode,
                                                           p.stderr.strip()))
        return None
    return json.loads(p.stdout)


def load_dump(dump):
    """stem (the weight's name, sanitized, '~hash' taken off) + '.' + file suffix -> array."""
    out = {}
    for f in sorted(os.listdir(dump)):
        if f.endswith(".npy"):
            out[re.sub(r"~[0-9a-f]{16}", "", f[:-4])] = np.load(os.path.join(dump, f))
    return out


def safe(name):
    return "".join(c if c.isalnum() or c in "._-" else "_" for c in name)


def same_bits(got, want):
    return got.dtype == want.dtype and got.shape == want.shape and got.tobytes() == want.tobytes()


def check_variant(args, gen, variant, codes_within_one):
    strict = variant in STRICT or args.strict_gaps
    print("== %s" % variant)
    path = gen.export(variant, args.work)
    base = os.path.dirname(path)
    model = onnx.load(path)  # with its external data
    torch_model = gen.build(variant)
    params = {name: t for name, t in torch_model.state_dict().items() if t.dim() == 2}
    inits = {t.name: t for t in model.graph.initializer}

    # Which torch Linear each consumer reads, by the bits of B.
    entries = {}  # (weight, kind) -> (consumer, torch weight)
    linear_names = set()
    found = consumers(model)
    unmatched = []
    for c in found:
        b = init_array(inits[c.weight], base)
        matches = [n for n, w in params.items() if same_bits(b, bits(w if c.nk else w.t()))]
        if not matches:
            unmatched.append("%s B %s (via %s)" % (c.node, c.weight, " ".join(c.via) or "nothing"))
            continue
        linear_names.update(matches)
        tname = TYPES.get(inits[c.weight].data_type)
        for kind in KINDS.get(tname, ()):
            key = (c.weight, kind)
            if key in entries and entries[key][0].nk != c.nk:
                expect(False, "%s: %s read in two layouts (the test does not name @node dumps)" % (variant, c.weight))
            entries.setdefault(key, (c, params[matches[0]]))
    expect(not unmatched, "%s: the B of each of the %d MatMul/Gemm on a weight is a torch Linear's W (Gemm "
           "transB, or through a Transpose) or W.T (MatMul), bit for bit (not: %s)"
           % (variant, len(found), unmatched[:3]))
    # The export covers every nn.Linear of the model (the embedding is the tied head's weight).
    linear_params = {n for n in params if n != "embed_tokens.weight"}
    expect(linear_params <= linear_names,
           "%s: every nn.Linear weight is read by a MatMul or Gemm of the export (missing: %s)"
           % (variant, sorted(linear_params - linear_names)[:3]))
    shared = [c for c in consumers(model) if c.via == ["Identity"]]
    if shared:
        note("%s: %d MatMul(s) read their weight through Identity (torch's deduplication of a shared "
             "module's folded weight), e.g. %s reads %s: planned once, under its first consumer"
             % (variant, len(shared), shared[0].node, shared[0].weight))

    dump = os.path.join(args.work, "dump_%s_%s" % (variant, safe(args.backend)))
    shutil.rmtree(dump, ignore_errors=True)
    d = ballast_json(args.ballast, "derive", path, "--backend", args.backend, "--dump", dump, "--json")
    if d is None:
        return None
    planned = {(p["weight"], p["derivation"]): p for p in d["plan"]["planned"]}
    expect(all(p["source"] == "graph" for p in planned.values()), "%s: every planned entry is from the graph" % variant)
    extra = sorted(set(planned) - set(entries))
    expect(not extra, "%s: nothing planned but the Linear weights (norms, biases, the Gather's embedding: none); "
           "extra: %s" % (variant, extra[:3]))
    missing = sorted(set(entries) - set(planned))
    if strict or not missing:
        expect(not missing, "%s: all %d derivations of the %d Linear weights planned (missing: %s)"
               % (variant, len(entries), len({w for w, _ in entries}), missing[:3]))
    else:
        phrase = {"Transpose": "B through a Transpose node of the weight", "Identity": "B through Identity",
                  "function": "B inside a model-local function"}
        how = sorted({phrase[c.via[0].split(" ")[0]] if c.via else "a %s B" % TYPES.get(inits[c.weight].data_type)
                      for c in (entries[k][0] for k in missing)})
        listed = [s for s in d["plan"]["skipped"] if not s["weight"]]
        expect(all(entries[k][0].via[:1] and entries[k][0].via[0].startswith("function") for k in missing) and listed,
               "%s: what is not planned is read inside model-local functions, and listed as %d skip(s)"
               % (variant, len(listed)))
        note("GAP %s: %d of the %d derivations of the Linear weights are not planned (listed: %d model-local "
             "function skips); their MatMuls read %s, e.g. %s"
             % (variant, len(missing), len(entries), len(listed), " or ".join(how), missing[0]))
    # Each entry names the node it was planned for: the weight's first consumer.
    wrong_node = ["%s %s: %r, not %r" % (k[0], k[1], p.get("node"), entries[k][0].node)
                  for k, p in sorted(planned.items()) if k in entries and p.get("node") != entries[k][0].node]
    expect(not wrong_node, "%s: each entry's node is its weight's first consumer (wrong: %s)" % (variant, wrong_node[:2]))
    check_skips(variant, model, d["plan"]["skipped"], entries, inits)
    wrong_why = ["%s %s: '%s'" % (k[0], k[1], p["why"]) for k, p in sorted(planned.items())
                 if k in entries and ("[N, K]" if entries[k][0].nk else "[K, N]") not in p["why"]]
    expect(not wrong_why, "%s: each entry's why gives the layout torch wrote (Gemm transB B [N, K], MatMul B "
           "[K, N]; wrong: %s)" % (variant, wrong_why[:2]))
    memo = d["memo"]
    expect(memo["builds"] == memo["entries"] == len(planned),
           "%s: each planned value built once (memo %d entries, %d builds, %d planned)"
           % (variant, memo["entries"], memo["builds"], len(planned)))
    expect(d["error"] is None and d["device_after_teardown"] == {"live_allocations": 0, "live_registrations": 0},
           "%s: no error, the device back to its baseline after teardown" % variant)

    # Every dumped array against torch.
    got = load_dump(dump)
    want = {}
    for (weight, kind) in planned:
        if (weight, kind) in entries:
            c, w = entries[(weight, kind)]
            for suffix, arr in expected_values(kind, w, c.nk).items():
                want[safe(weight) + "." + suffix] = arr
    expect(set(got) == set(want), "%s: one dump file per planned output (only dumped: %s; not dumped: %s)"
           % (variant, sorted(set(got) - set(want))[:3], sorted(set(want) - set(got))[:3]))
    bad = []
    for name in sorted(set(got) & set(want)):
        g, w = got[name], want[name]
        if name.endswith("quant_int8.codes") and codes_within_one and g.shape == w.shape:
            ok = g.dtype == w.dtype and np.abs(g.astype(np.int32) - w.astype(np.int32)).max(initial=0) <= 1
        else:
            ok = same_bits(g, w)
        if not ok:
            first = ""
            if g.shape == w.shape and g.dtype == w.dtype:
                i = tuple(np.argwhere(g.view(np.uint8) != w.view(np.uint8))[0]) if g.itemsize == 1 else \
                    tuple(np.argwhere(g != w)[0])
                first = " first at %s: got %r, want %r" % (i, g[i], w[i])
            bad.append("%s (%s %s vs torch %s %s)%s" % (name, g.dtype, g.shape, w.dtype, w.shape, first))
    expect(not bad, "%s: %d dumped arrays equal torch's, bit for bit%s%s" % (
        variant, len(got), " (%d differ)" % len(bad) if bad else "", "".join("\n     MISMATCH " + b for b in bad[:5])))
    return {"dump": dump, "path": path, "entries": entries, "planned": planned, "model": model}


def check_skips(variant, model, skipped, entries, inits):
    """What the plan lists as skipped: quant_int8 of each bfloat16 Linear weight, once, under a node that
    reads it; one entry per model-local function, with its node count; nothing else."""
    graph = [s for s in skipped if s["source"] == "graph" and not s["rule"]]
    expect(len(graph) == len(skipped), "%s: every skip is the graph's (%d of %d)" % (variant, len(graph), len(skipped)))
    readers = {}
    for c in consumers(model):
        readers.setdefault(c.weight, set()).add(c.node)
    bf16 = sorted({w for w, _ in entries if TYPES.get(inits[w].data_type) == "bfloat16"})
    weights = [s for s in graph if s["weight"]]
    expect(sorted(s["weight"] for s in weights) == bf16 and
           all(s["node"] in readers.get(s["weight"], ()) and s["reason"].startswith("quant_int8 ") for s in weights),
           "%s: quant_int8 of each of the %d bfloat16 Linear weights is one listed skip, under a node that reads it "
           "(%s)" % (variant, len(bf16), [(s["weight"], s["node"]) for s in weights][:2]))
    functions = [s for s in graph if not s["weight"]]
    first_call = {}
    for n in model.graph.node:
        first_call.setdefault((n.domain, n.op_type), n.name)
    want = sorted(("model-local function '%s': its %d node%s" % ((f.domain + "." if f.domain else "") + f.name,
                                                                  len(f.node), " is" if len(f.node) == 1 else "s are"),
                   first_call.get((f.domain, f.name), "")) for f in model.functions)
    prefixes = [w[0] for w in want]

    def head(reason):  # the reason up to the node count, when it is one of those wanted
        return next((p for p in prefixes if reason.startswith(p)), reason)
    got = sorted((head(s["reason"]), s["node"]) for s in functions)
    expect(got == want, "%s: each of the %d model-local functions is a listed skip naming its node count and first "
           "caller (got %s; want %s)" % (variant, len(want), got[:2], want[:2]))
    return functions


def check_tie(args, results):
    """The tied head: one source in the Gemm export; a folded copy in the MatMul export."""
    if "gemm" in results:
        r = results["gemm"]
        gathers = [n for n in r["model"].graph.node if n.op_type == "Gather"]
        head = [k for k in r["planned"] if k[0] == "embed_tokens.weight"]
        expect(gathers and gathers[0].input[0] == "embed_tokens.weight" and
               sorted(k for _, k in head) == sorted(KINDS["float32"]),
               "gemm: the tied head's Gemm and the embedding's Gather read one initializer, embed_tokens.weight, "
               "its derivations planned once each (%s)" % sorted(k for _, k in head))
        ins = ballast_json(args.ballast, "inspect", r["path"], "--json")
        if ins:
            names = [w["name"] for w in ins["weights"]]
            expect(names.count("embed_tokens.weight") == 1, "gemm: inspect lists embed_tokens.weight once")
    if "matmul" in results:
        r = results["matmul"]
        head = [c for c in consumers(r["model"]) if c.node == "/lm_head/MatMul"]
        if expect(len(head) == 1 and head[0].weight != "embed_tokens.weight",
                  "matmul: torch wrote the tied head's B as its own folded initializer (%s)"
                  % (head[0].weight if head else None)):
            dumped = load_dump(r["dump"]).get(safe(head[0].weight) + ".transpose")
            emb = init_array({t.name: t for t in r["model"].graph.initializer}["embed_tokens.weight"], None)
            if expect(dumped is not None and same_bits(dumped, emb),
                      "matmul: the head copy's derived transpose is embed_tokens.weight, bit for bit"):
                note("matmul: the default torch export breaks the tie: %s (%d bytes) is embed_tokens.weight.T, "
                     "and ballast's transpose of it rebuilds the embedding the file already holds"
                     % (head[0].weight, dumped.nbytes))


def check_external(args, results):
    r = results.get("external")
    if r is None:
        return
    ins = ballast_json(args.ballast, "inspect", r["path"], "--json")
    if ins:
        files = ins["external_files"]
        data = os.path.join(args.work, "torch_external.data")
        expect(len(files) == 1 and os.path.realpath(files[0]["path"]) == os.path.realpath(data) and
               files[0]["unreferenced_bytes"] == 0 and files[0]["referenced_bytes"] == os.path.getsize(data),
               "external: inspect maps one data file, torch_external.data, every byte referenced")
        dense = [w for w in ins["weights"] if len(w["dims"]) == 2]
        expect(dense and all(w["location"] == "external" for w in dense), "external: every 2-D weight is external")
    if "matmul" in results:
        same_files(results["matmul"]["dump"], r["dump"], "external: dumps equal the inline export's")
    # The least budget: the largest weight and its transpose on the device at once.
    largest = max(int(np.prod(t.dims)) * 4 for t in r["model"].graph.initializer)
    for strategy, extra in (("upload", []), ("zero-copy", []), ("paged", []), ("paged", ["--budget", 2 * largest])):
        dump = os.path.join(args.work, "dump_external_%s%s" % (strategy, "_least" if extra else ""))
        shutil.rmtree(dump, ignore_errors=True)
        p = run(args.ballast, "derive", r["path"], "--backend", args.backend, "--residency", strategy, "--dump", dump,
                *extra)
        label = "external: derive --residency %s%s" % (strategy, " --budget %d" % (2 * largest) if extra else "")
        if expect(p.returncode == 0, "%s exits 0 (%s)" % (label, p.stderr.strip()[:300])):
            same_files(r["dump"], dump, label + " dumps the same bytes")
    load = ballast_json(args.ballast, "load", r["path"], "--backend", args.backend, "--json")
    if load:
        expect(load["load"]["derived_built"] == len(r["planned"]) and load.get("error") is None,
               "external: ballast load builds every planned value (%d of %d)"
               % (load["load"]["derived_built"], len(r["planned"])))


def check_walk(args, results):
    """`ballast replay`'s walk of the export without constant folding pins what
    the folded export's does: each MatMul its derived value of the weight
    behind the Transpose, the Transpose nothing."""
    if "matmul" not in results or "nofold" not in results:
        return
    walks = {}
    for variant in ("matmul", "nofold"):
        w = ballast_json(args.ballast, "replay", results[variant]["path"], "--backend", args.backend, "--tokens", "1",
                         "--json")
        if w is None:
            return
        walks[variant] = (w["walk"], w["tokens"][0]["builds"])
    (a, a_builds), (b, b_builds) = walks["matmul"], walks["nofold"]
    # Steps and bytes alone would not tell: a source pinned at the
    # Transpose weighs what its transpose does. The builds do.
    expect(a["steps"] == b["steps"] and a["entries"] == b["entries"] and a["touched_bytes"] == b["touched_bytes"]
           and a_builds == b_builds and b_builds > 0,
           "replay walks: nofold pins what matmul pins (%s, %d builds, against %s, %d builds)"
           % (b, b_builds, a, a_builds))
    print("replay walk of nofold as of matmul: %d steps, %d bytes, %d builds" % (b["steps"], b["touched_bytes"],
                                                                               b_builds))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ballast", required=True)
    ap.add_argument("--gen", required=True, help="tools/gen (make_torch_model.py)")
    ap.add_argument("--work", required=True)
    ap.add_argument("--backend", default="cpu")
    ap.add_argument("--variant", action="append", help="only these variants (default: all)")
    ap.add_argument("--strict-gaps", action="store_true", help="the gap variants must be planned in full too")
    args = ap.parse_args()
    args.work = os.path.abspath(args.work)
    shutil.rmtree(args.work, ignore_errors=True)
    os.makedirs(args.work)
    sys.path.insert(0, os.path.abspath(args.gen))
    import make_torch_model as gen

    caps = ballast_json(args.ballast, "backends", "--load", "--json") or {"backends": []}
    name = args.backend.split(":")[0].split("?")[0]
    entry = next((b for b in caps["backends"] if b["name"] == name), None)
    if entry is None or not entry["available"]:
        skip("backend %s: %s" % (args.backend, entry["reason"] if entry else "not listed by ballast backends"))
    within_one = bool((entry.get("capabilities") or {}).get("int8_codes_within_one"))
    print("int8 codes compared %s" % ("within one" if within_one else "exactly"))

    results = {}
    for variant in args.variant or (STRICT + GAPS):
        r = check_variant(args, gen, variant, within_one)
        if r:
            results[variant] = r
    check_tie(args, results)
    check_external(args, results)
    check_walk(args, results)
    print("%d failure(s), %d note(s)" % (len(FAILURES), len(NOTES)))
    return 1 if FAILURES else 0


if __name__ == "__main__":
    sys.exit(main())
