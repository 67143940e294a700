#!/usr/bin/python3
"""cooperative.py BALLAST OUTDIR [--ranks 1,2,4] [--reps N] [--layers N] [--hidden H] [--ffn F] [--vocab V]
                  [--no-mpi] [--exchanges messages,rounds] [--table-only] [--json FILE]

The cold start of a tensor-parallel load across ranks (tools/dev
bench-ranks; docs/distributed.md#cold-start-across-ranks-a-model):

1. Measured here: an LLM-shaped model of real, random bytes (written into
   OUTDIR once, as tools/bench/cold_start.py writes it) is loaded by
   `ballast load --comm local --world R` and under `mpirun -np R ... --comm
   mpi`, for each R and each way of trading bytes (--exchange messages,
   and rounds: NCCL's only way), from an empty page cache (every file of the model
   dropped with POSIX_FADV_DONTNEED and, when permitted, the machine's
   clean pages through /proc/sys/vm/drop_caches) each time. Runs are
   interleaved in a shuffled order per repetition (fixed seed); each cell
   is the median of --reps. Beside them, in the same run, the anchor: the
   storage's parallel read rate B (`ballast load --cold --anchor`: the best
   of 1-16 threads of 8 MiB pread) and the model's prediction for this
   machine, open + union / B (one storage domain: the ranks share B, so
   the union read once bounds the load, whatever R).
2. The model at scale: the cold-start time of 70B, 405B and 1T-parameter
   bf16 checkpoints on 8, 64 and 1,024 GPUs (8 per node), cooperative
   against each node reading the whole checkpoint, from the formulas in
   docs/distributed.md with the parameters printed beside the table.
"""

import argparse
import json
import os
import random
import shutil
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from cold_start import generate  # noqa: E402

MPI_ENV = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
               OMPI_MCA_rmaps_base_oversubscribe="1")


def drop_cache(outdir):
    """Every file of the model out of the page cache (and the machine's
    clean pages when this process may write drop_caches)."""
    for name in os.listdir(outdir):
        path = os.path.join(outdir, name)
        if os.path.isfile(path):
            fd = os.open(path, os.O_RDONLY)
            try:
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            finally:
                os.close(fd)
    os.sync()
    try:
        with open("/proc/sys/vm/drop_caches", "w") as f:
            f.write("1")
    except OSError:
        pass


def run_ranks(ballast, model, ranks, how, exchange="messages"):
    cmd = [ballast, "load", model, "--comm", "local", "--world", str(ranks), "--json"]
    if how == "mpi":
        cmd = [shutil.which("mpirun"), "-np", str(ranks), "--oversubscribe", ballast, "load", model, "--comm", "mpi",
               "--json"]
    cmd += ["--exchange", exchange]
    start = time.monotonic()
    out = subprocess.run(cmd, check=True, capture_output=True, text=True, env=MPI_ENV)
    wall = time.monotonic() - start
    reports = [json.loads(line) for line in out.stdout.splitlines() if line.startswith("{")]
    return {"wall": wall, "load": max(r["seconds"] for r in reports), "read": sum(r["read_bytes"] for r in reports),
            "sent": sum(r["sent_bytes"] for r in reports)}


# ---- The model at scale (docs/distributed.md): every quantity in bytes and bytes/s.
GB = 1e9
SCALE = {
    "gpus_per_node": 8,
    "node_read": 10 * GB,        # what one node reads from the shared file system at most (its client)
    "fs_aggregate": 200 * GB,    # what the shared file system serves to all nodes together
    "node_network": 50 * GB,     # one node's network injection (400 Gb/s)
    "strided": 0.30,             # share of the bytes in inner-axis (strided) shards: o_proj, down_proj of HF Linear
    "replicated": 0.0005,        # norms and biases
}


def scale_times(params_b, gpus, s=SCALE):
    size = params_b * 1e9 * 2  # bf16
    nodes = max(1, gpus // s["gpus_per_node"])
    per_node_rate = min(s["node_read"], s["fs_aggregate"] / nodes)
    # Each node reads the whole checkpoint once (its ranks share its page cache): the loaders that narrow after reading.
    everything = size / per_node_rate
    # Cooperative: the union once between all ranks, S / nodes per node; in parallel, each node receives the
    # strided and replicated bytes its ranks need from other nodes (its ranks' share of strided shards, all the
    # replicated bytes), less what its own ranks read.
    read = (size / nodes) / per_node_rate
    inbound = (s["strided"] * size / nodes + s["replicated"] * size) * (1 - 1 / nodes)
    network = inbound / s["node_network"]
    return size, nodes, everything, max(read, network), read, network


def scale_table():
    rows = []
    for params_b in (70, 405, 1000):
        for gpus in (8, 64, 1024):
            size, nodes, everything, coop, read, network = scale_times(params_b, gpus)
            rows.append({"params_b": params_b, "gpus": gpus, "nodes": nodes, "bytes": size, "everything_s": everything,
                         "cooperative_s": coop, "read_s": read, "network_s": network})
    return rows


def print_scale(rows):
    s = SCALE
    print("\nThe model at scale: bf16 checkpoints, %d GPUs a node, a node reads at most %.0f GB/s from a shared file "
          "system serving %.0f GB/s in all, %.0f GB/s of network a node, %.0f%% of the bytes in strided shards"
          % (s["gpus_per_node"], s["node_read"] / GB, s["fs_aggregate"] / GB, s["node_network"] / GB, 100 * s["strided"]))
    print("| checkpoint | GPUs (nodes) | each node reads everything | cooperative | of which read / network | speed-up |")
    print("|---|---:|---:|---:|---:|---:|")
    for r in rows:
        print("| %dB (%.0f GB) | %d (%d) | %.1f s | %.1f s | %.1f / %.1f s | %.1fx |" % (
            r["params_b"], r["bytes"] / GB, r["gpus"], r["nodes"], r["everything_s"], r["cooperative_s"], r["read_s"],
            r["network_s"], r["everything_s"] / r["cooperative_s"]))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("ballast", nargs="?", help="the ballast CLI (not needed with --table-only)")
    ap.add_argument("outdir", nargs="?", help="where the model is written (not needed with --table-only)")
    ap.add_argument("--ranks", default="1,2,4")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--layers", type=int, default=12)
    ap.add_argument("--hidden", type=int, default=2048)
    ap.add_argument("--ffn", type=int, default=5632)
    ap.add_argument("--vocab", type=int, default=32000)
    ap.add_argument("--no-mpi", action="store_true")
    ap.add_argument("--exchanges", default="messages,rounds", help="ways of trading bytes to measure")
    ap.add_argument("--table-only", action="store_true", help="print the model at scale only")
    ap.add_argument("--json", default="")
    a = ap.parse_args()
    rows = scale_table()
    if a.table_only:
        print_scale(rows)
        return 0
    if not a.ballast or not a.outdir:
        ap.error("BALLAST and OUTDIR are needed unless --table-only")

    os.makedirs(a.outdir, exist_ok=True)
    model = generate(a.outdir, a.layers, a.hidden, a.ffn, a.vocab)
    modeldir = os.path.dirname(model)
    ranks = [int(r) for r in a.ranks.split(",")]
    comms = ["local"] + ([] if a.no_mpi or not shutil.which("mpirun") else ["mpi"])
    exchanges = a.exchanges.split(",")
    hows = [(c, e) for c in comms for e in exchanges]
    cells = {(r, h): [] for r in ranks for h in hows}
    anchors, opens = [], []
    rng = random.Random(29)
    for rep in range(a.reps):
        # The anchor, cold, in the same run: the storage's best parallel read of the same bytes.
        drop_cache(modeldir)
        out = subprocess.run([a.ballast, "load", model, "--cold", "--anchor", "--json"], check=True,
                             capture_output=True, text=True)
        doc = json.loads(out.stdout)
        anchors.append(doc["referenced_bytes"] / doc["anchor"]["read_seconds"])
        # What a run costs besides reading: the same load with every byte in the page cache.
        warm = run_ranks(a.ballast, model, 1, "local", exchanges[0])
        opens.append(warm["wall"] - warm["load"])  # process start, open, plan, placing on the device
        order = [(r, h) for r in ranks for h in hows]
        rng.shuffle(order)
        for r, h in order:
            drop_cache(modeldir)
            cells[(r, h)].append(run_ranks(a.ballast, model, r, h[0], h[1]))
        print("repetition %d of %d done" % (rep + 1, a.reps), file=sys.stderr)

    rate = statistics.median(anchors)
    overhead = statistics.median(opens)
    union = cells[(ranks[0], hows[0])][0]["read"]
    print("model: %s, %.0f MB referenced; storage's parallel read (anchor, median of %d): %.2f GB/s; "
          "a warm run's time besides the load: %.2f s" % (model, union / 1e6, a.reps, rate / GB, overhead))
    print("| ranks | communicator, exchange | cold, wall (median, range) | cold, the load itself | bytes read by all ranks | "
          "sent | predicted: start + union / B | measured / predicted |")
    print("|---:|---|---:|---:|---:|---:|---:|---:|")
    results = []
    for r in ranks:
        for h in hows:
            runs = cells[(r, h)]
            wall = statistics.median(x["wall"] for x in runs)
            loadt = statistics.median(x["load"] for x in runs)
            predicted = overhead + runs[0]["read"] / rate
            print("| %d | %s, %s | %.2f s (%.2f-%.2f) | %.2f s | %.0f MB | %.0f MB | %.2f s | %.2f |" % (
                r, h[0], h[1], wall, min(x["wall"] for x in runs), max(x["wall"] for x in runs), loadt, runs[0]["read"] / 1e6,
                runs[0]["sent"] / 1e6, predicted, wall / predicted))
            results.append({"ranks": r, "comm": h[0], "exchange": h[1], "wall": wall, "load": loadt, "read": runs[0]["read"],
                            "sent": runs[0]["sent"], "predicted": predicted})
    print_scale(rows)
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"rate": rate, "overhead": overhead, "runs": results, "scale": rows, "params": SCALE}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
