#!/usr/bin/python3
"""time_onnx_load.py MODEL [--repeat N] [--serve]: in-process time of
onnx.load(MODEL, load_external_data=False), the reference that bench_open
measures ballast's open against.

Default: prints one JSON line on stdout: {"mean_s", "median_s", "min_s"
(wall), "cpu_mean_s" (process CPU time), "repeat", "onnx"}.

--serve: for each line "N" read on stdin, times N loads and answers one JSON
line {"wall_s", "cpu_s"} (sums over the N loads); an empty line or EOF ends.
bench_open drives it this way to interleave batches of onnx.load with
batches of its own opens, so a change in machine load hits both sides.

The first load is a warm-up (page cache, imports) and is not counted.
"""

import argparse
import json
import statistics
import sys
import time

import onnx


def timed_loads(path, count):
    wall = cpu = 0.0
    for _ in range(count):
        t0, c0 = time.perf_counter(), time.process_time()
        model = onnx.load(path, load_external_data=False)
        wall += time.perf_counter() - t0
        cpu += time.process_time() - c0
        del model  # freeing is not opening: outside the timed part
    return wall, cpu


def serve(path):
    print(json.dumps({"ready": True, "onnx": onnx.__version__}), flush=True)
    for line in sys.stdin:
        line = line.strip()
        if not line:
            break
        wall, cpu = timed_loads(path, int(line))
        print(json.dumps({"wall_s": wall, "cpu_s": cpu}), flush=True)
    return 0


def main():
    p = argparse.ArgumentParser()
    p.add_argument("model")
    p.add_argument("--repeat", type=int, default=20)
    p.add_argument("--serve", action="store_true")
    a = p.parse_args()
    onnx.load(a.model, load_external_data=False)
    if a.serve:
        return serve(a.model)
    times, cpu = [], []
    for _ in range(a.repeat):
        w, c = timed_loads(a.model, 1)
        times.append(w)
        cpu.append(c)
    print(json.dumps({"mean_s": statistics.mean(times), "median_s": statistics.median(times),
                      "min_s": min(times), "cpu_mean_s": statistics.mean(cpu), "repeat": a.repeat,
                      "onnx": onnx.__version__}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
