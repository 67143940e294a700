#!/usr/bin/python3
"""safetensors_open_baseline.py DIR REPEATS: the anchor bench_open_safetensors
measures ballast against, timed inside Python (no interpreter start-up):
json.loads of the index and of every shard's header, then numpy.memmap of
every tensor (what a Python loader does to get zero-copy arrays). Prints the
median seconds of REPEATS runs."""

import json
import os
import statistics
import struct
import sys
import time

import numpy as np

DTYPES = {"F32": np.float32, "F16": np.float16, "U8": np.uint8, "I32": np.int32}


def open_once(directory):
    with open(os.path.join(directory, "model.safetensors.index.json")) as f:
        index = json.load(f)
    arrays = []
    for shard in dict.fromkeys(index["weight_map"].values()):
        path = os.path.join(directory, shard)
        with open(path, "rb") as f:
            (n,) = struct.unpack("<Q", f.read(8))
            header = json.loads(f.read(n))
        for name, info in header.items():
            if name == "__metadata__":
                continue
            begin, _end = info["data_offsets"]
            arrays.append(np.memmap(path, dtype=DTYPES[info["dtype"]], mode="r", offset=8 + n + begin,
                                    shape=tuple(info["shape"])))
    return arrays


def main():
    directory, repeats = sys.argv[1], int(sys.argv[2])
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        arrays = open_once(directory)
        times.append(time.perf_counter() - start)
        del arrays
    print("%.9f %d" % (statistics.median(times), sum(1 for _ in open_once(directory))))


if __name__ == "__main__":
    main()
