#!/usr/bin/python3
"""time_onnx_load.py MODEL: in-process time of
onnx.load(MODEL, load_external_data=False), the reference that bench_open
measures ballast's open against.

Prints {"ready": true, "onnx": VERSION} once warmed up (the first load,
page cache and imports, is not counted). Then, for each line "N" read on
stdin, times N loads and answers one JSON line {"wall_s", "cpu_s"} (sums
over the N loads; freeing each model is not timed); an empty line or EOF
ends. bench_open drives it this way to interleave batches of onnx.load with
batches of its own opens, so a change in machine load hits both sides.
"""

import json
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


def main(argv):
    if len(argv) != 2:
        sys.stderr.write(__doc__)
        return 2
    path = argv[1]
    onnx.load(path, load_external_data=False)
    print(json.dumps({"ready": True, "onnx": onnx.__version__}), flush=True)
    for line in sys.stdin:
        line = line.strip()
        if not line:
            break
        wall, cpu = timed_loads(path, int(line))
        print(json.dumps({"wall_s": wall, "cpu_s": cpu}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
