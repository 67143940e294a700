#!/usr/bin/python3
"""residency.py [--dir DIR] [--backends cpu,vulkan] [--tokens N] [--ballast PATH] [--out FILE.json]

The residency benchmark (issue 17; figures in the README and
docs/residency.md). On a generated model shaped like a decoder LLM
(make_llm_model.py --sparse: 20 layers, hidden 4096, ffn 11008, vocab
16000: 4.12 GiB of referenced weights in a sparse file), for each backend:

1. `ballast derive --residency S --only transpose,repack_int4` for
   S = upload, zero-copy, paged (auto): time to the first derivation and to
   all of them, peak host RSS, peak device bytes. Each run is its own
   process, so each peak RSS is its own.
2. `ballast replay --derived none --anchor` (the decode loop over the
   source weights) at budgets of 25%, 50% and 100% of what a token touches
   (the auto budget of a walk without derivations), prefetch off and on.
   Ratios are measured in the same process as the run they judge: paging
   throughput against the anchor (a memcpy of the same bytes from the
   mapping into fresh memory), steady bytes paged in per token against the
   minimum (touched - budget), and a token's time against the time its
   page-ins take.

Every figure comes from the commands' own --json; this script only runs
them and lays the numbers out.
"""

import argparse
import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
GIB = float(1 << 30)


def run_json(cmd):
    print("+ " + " ".join(cmd), file=sys.stderr, flush=True)
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        doc = json.loads(p.stdout)
    except json.JSONDecodeError:
        sys.exit("no JSON from %s (exit %d):\n%s" % (cmd[1], p.returncode, p.stderr[-2000:]))
    if doc.get("error"):
        sys.exit("%s failed: %s" % (" ".join(cmd), doc["error"]))
    return doc


def fmt_s(v):
    return "-" if v is None else ("%.3f s" % v if v >= 1 else "%.1f ms" % (v * 1e3))


def fmt_gib(v):
    return "-" if v is None else "%.2f GiB" % (v / GIB)


def fmt_x(v):
    return "-" if v is None else "%.2fx" % v


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--dir", default="/var/tmp/ballast-residency-bench")
    ap.add_argument("--backends", default="cpu,vulkan")
    ap.add_argument("--tokens", type=int, default=4)
    ap.add_argument("--ballast", default=os.path.join(ROOT, "build", "bench", "bin", "ballast"))
    ap.add_argument("--layers", type=int, default=20)
    ap.add_argument("--out", default=None)
    args = ap.parse_args()

    model = os.path.join(args.dir, "llm.onnx")
    if not os.path.exists(model):
        subprocess.run(["/usr/bin/python3", os.path.join(ROOT, "tools", "gen", "make_llm_model.py"), args.dir,
                        "--sparse", "--layers", str(args.layers), "--hidden", "4096", "--ffn", "11008",
                        "--vocab", "16000"], check=True)
    # Warm the page cache, so that the first strategy measured does not pay
    # for everyone's first read of the file.
    with open(os.path.join(args.dir, "llm.weights"), "rb") as f:
        while f.read(64 << 20):
            pass
    results = {"model": model, "derive": [], "replay": []}
    for backend in args.backends.split(","):
        for strategy in ("upload", "zero-copy", "paged"):
            d = run_json([args.ballast, "derive", model, "--backend", backend, "--residency", strategy,
                          "--only", "transpose,repack_int4", "--json"])
            r = d["residency"]
            results["derive"].append({
                "backend": backend, "strategy": strategy, "derivations": sum(k["count"] for k in d["derivations"]),
                "derived_bytes": sum(k["bytes"] for k in d["derivations"]),
                "time_to_first_s": d["time_to_first_derivation_seconds"],
                "time_to_all_s": d["time_to_all_derivations_seconds"], "peak_rss_bytes": d["peak_rss_bytes"],
                "peak_device_bytes": r["peak_device_bytes"], "budget_bytes": r["budget_bytes"],
                "registered_bytes": r["registered_bytes"], "uploaded_bytes": r["uploaded_bytes"],
                "paged_in_bytes": r["paged_in_bytes"], "host_copy_bytes": r["host_copy_bytes"]})
        probe = run_json([args.ballast, "replay", model, "--backend", backend, "--derived", "none", "--tokens", "1",
                          "--json"])
        touched = probe["walk"]["touched_bytes"]
        for pct in (25, 50, 100):
            for prefetch in ("off", "on"):
                budget = touched * pct // 100
                d = run_json([args.ballast, "replay", model, "--backend", backend, "--derived", "none",
                              "--budget", str(budget), "--tokens", str(args.tokens), "--prefetch", prefetch,
                              "--anchor", "--json"])
                s, a = d["summary"], d.get("anchor") or {}
                results["replay"].append({
                    "backend": backend, "budget_pct": pct, "budget_bytes": budget, "prefetch": prefetch,
                    "touched_bytes": touched, "first_token_s": s["first_token_seconds"],
                    "steady_token_s": s["steady_token_seconds"],
                    "steady_paged_bytes_per_token": s["steady_paged_bytes_per_token"],
                    "minimum_paged_bytes_per_token": s["minimum_paged_bytes_per_token"],
                    "paged_vs_minimum": s["paged_vs_minimum"], "largest_entry_bytes": s["largest_entry_bytes"],
                    "peak_device_bytes": s["peak_device_bytes"], "peak_within_budget": s["peak_within_budget"],
                    "host_copy_bytes": s["host_copy_bytes"], "peak_rss_bytes": s["peak_rss_bytes"],
                    "anchor_gb_s": (a.get("anchor_bytes_per_second") or 0) / 1e9 or None,
                    "paging_gb_s": (a.get("paging_bytes_per_second") or 0) / 1e9 or None,
                    "paging_vs_anchor": a.get("paging_vs_anchor"),
                    "hot_gb_s": (a.get("hot_copy_bytes_per_second") or 0) / 1e9 or None,
                    "paging_vs_hot": a.get("paging_vs_hot_copy"),
                    "pool_hits": d["residency"].get("pool_hits"), "pool_misses": d["residency"].get("pool_misses"),
                    "token_vs_page_in_time": a.get("token_vs_page_in_time")})

    print("\n### derive --residency S --only transpose,repack_int4 (%s)\n" % model)
    print("| backend | strategy | derivations | time to first | time to all | peak RSS | peak device | registered | uploaded | paged in | host copies |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for r in results["derive"]:
        print("| %s | %s | %d (%s) | %s | %s | %s | %s | %s | %s | %s | %d |" % (
            r["backend"], r["strategy"], r["derivations"], fmt_gib(r["derived_bytes"]), fmt_s(r["time_to_first_s"]),
            fmt_s(r["time_to_all_s"]), fmt_gib(r["peak_rss_bytes"]), fmt_gib(r["peak_device_bytes"]),
            fmt_gib(r["registered_bytes"]), fmt_gib(r["uploaded_bytes"]), fmt_gib(r["paged_in_bytes"]),
            r["host_copy_bytes"]))
    print("\n### replay --derived none --tokens %d --anchor (a token touches %s)\n" %
          (args.tokens, fmt_gib(results["replay"][0]["touched_bytes"]) if results["replay"] else "-"))
    print("| backend | budget | prefetch | first token | steady token | paged / token | minimum | paged / minimum | paging GB/s | anchor GB/s | paging / anchor | hot copy GB/s | paging / hot copy | pool hits / misses | token / its page-ins | peak <= budget |")
    print("|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|")
    for r in results["replay"]:
        print("| %s | %d%% (%s) | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |" % (
            r["backend"], r["budget_pct"], fmt_gib(r["budget_bytes"]), r["prefetch"], fmt_s(r["first_token_s"]),
            fmt_s(r["steady_token_s"]), fmt_gib(r["steady_paged_bytes_per_token"]),
            fmt_gib(r["minimum_paged_bytes_per_token"]), fmt_x(r["paged_vs_minimum"]),
            "-" if r["paging_gb_s"] is None else "%.2f" % r["paging_gb_s"],
            "-" if r["anchor_gb_s"] is None else "%.2f" % r["anchor_gb_s"], fmt_x(r["paging_vs_anchor"]),
            "-" if r["hot_gb_s"] is None else "%.2f" % r["hot_gb_s"], fmt_x(r["paging_vs_hot"]),
            "%s / %s" % (r["pool_hits"], r["pool_misses"]), fmt_x(r["token_vs_page_in_time"]), "yes" if r["peak_within_budget"] else "NO"))
    if args.out:
        with open(args.out, "w") as f:
            json.dump(results, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
