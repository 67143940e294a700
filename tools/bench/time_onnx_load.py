#!/usr/bin/python3
"""time_onnx_load.py MODEL [--repeat N]: in-process time of
onnx.load(MODEL, load_external_data=False), the reference that bench_open
measures ballast's open against. Prints one JSON line on stdout:
{"mean_s", "median_s", "min_s" (wall), "cpu_mean_s" (process CPU time),
"repeat", "onnx"}.
The first load is a warm-up (page cache, imports) and is not counted.
"""

import argparse
import json
import statistics
import sys
import time

import onnx


def main():
    p = argparse.ArgumentParser()
    p.add_argument("model")
    p.add_argument("--repeat", type=int, default=20)
    a = p.parse_args()
    onnx.load(a.model, load_external_data=False)
    times, cpu = [], []
    for _ in range(a.repeat):
        t0, c0 = time.perf_counter(), time.process_time()
        model = onnx.load(a.model, load_external_data=False)
        times.append(time.perf_counter() - t0)
        cpu.append(time.process_time() - c0)
        del model
    print(json.dumps({"mean_s": statistics.mean(times), "median_s": statistics.median(times),
                      "min_s": min(times), "cpu_mean_s": statistics.mean(cpu), "repeat": a.repeat,
                      "onnx": onnx.__version__}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
