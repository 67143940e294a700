#!/usr/bin/python3
"""make_big_model.py OUTDIR [--initializers K] [--external-bytes N] [--name NAME]

The open-time benchmark's model: K float32 initializers (default 10,000), each
consumed by one node, whose external data in NAME.data totals exactly N bytes
(N rounded down to a multiple of 4). The data file is written sparse (one
truncate, no data), so 4 GiB of external data costs no disk and reads back
as zeros. Prints the model path on stdout; details on stderr. Deterministic.
"""

import argparse
import os
import sys

import onnx
from onnx import TensorProto, helper

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import extdata  # noqa: E402


def build(initializers, external_bytes, data_name):
    elements = external_bytes // 4
    base, extra = divmod(elements, initializers)
    tensors, nodes = [], []
    offset = 0
    for i in range(initializers):
        n = base + (1 if i < extra else 0)
        name = "blocks.%d.weight" % i
        t = TensorProto(name=name, data_type=TensorProto.FLOAT, dims=[n])
        extdata.set_external(t, data_name, offset, 4 * n)
        offset += 4 * n
        tensors.append(t)
        nodes.append(helper.make_node("Mul", ["x%d" % i, name], ["x%d" % (i + 1)], name="blocks.%d.mul" % i))
    graph = helper.make_graph(
        nodes, "ballast_big",
        [helper.make_tensor_value_info("x0", TensorProto.FLOAT, None)],
        [helper.make_tensor_value_info("x%d" % initializers, TensorProto.FLOAT, None)],
        initializer=tensors)
    model = helper.make_model(graph, producer_name="ballast make_big_model.py",
                              opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model, offset


def main(argv):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("outdir")
    p.add_argument("--initializers", type=int, default=10000)
    p.add_argument("--external-bytes", type=int, default=4 << 30)
    p.add_argument("--name", default=None)
    a = p.parse_args(argv[1:])
    if a.initializers < 1 or a.external_bytes < 4 * a.initializers:
        p.error("need at least 4 bytes of external data per initializer")
    name = a.name or "big_%d_%d" % (a.initializers, a.external_bytes)
    os.makedirs(a.outdir, exist_ok=True)
    data_name = name + ".data"
    model, total = build(a.initializers, a.external_bytes, data_name)

    data_path = os.path.join(a.outdir, data_name)
    with open(data_path, "wb") as f:
        f.truncate(total)  # a hole: no blocks allocated
    model_path = os.path.join(a.outdir, name + ".onnx")
    tmp = model_path + ".tmp"
    onnx.save_model(model, tmp)
    os.replace(tmp, model_path)  # the .onnx appears last, complete
    st = os.stat(data_path)
    extdata.log("%s: %d initializers, %d bytes of external data in %s (%d bytes on disk), .onnx %d bytes"
                % (model_path, a.initializers, total, data_name, st.st_blocks * 512, os.path.getsize(model_path)))
    print(model_path)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
