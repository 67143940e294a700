#!/usr/bin/python3
"""Writes the seed corpus of fuzz_onnx_loader (run with Debian's python3-onnx).

Each seed is a tiny model (< 4 KiB) that reaches one part of the decoder:
raw and typed tensor fields, Constant nodes, subgraphs, strings, sparse
initializers, external data (pointing at fuzz-data/w.bin, which the fuzz
target creates), plus a few deliberately broken inputs.
"""
import os
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "corpus")
os.makedirs(out, exist_ok=True)


def save(name, data):
    assert len(data) < 4096, name
    with open(os.path.join(out, name), "wb") as f:
        f.write(data)


def model(nodes, inits, sparse=()):
    g = helper.make_graph(nodes, "g", [], [], inits, sparse_initializer=list(sparse))
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


raw = model([], [numpy_helper.from_array(np.arange(6, dtype=np.float32).reshape(2, 3), "w"),
                 numpy_helper.from_array(np.array([1, 2, 3], dtype=np.int8), "i8")])
save("raw_tensors.onnx", raw.SerializeToString())

typed = model([], [
    helper.make_tensor("f", TensorProto.FLOAT, [3], [1.0, 2.0, 3.0]),
    helper.make_tensor("h", TensorProto.FLOAT16, [2], [1.0, -2.0]),
    helper.make_tensor("b", TensorProto.BOOL, [2], [True, False]),
    helper.make_tensor("i64", TensorProto.INT64, [2], [-5, 7]),
    helper.make_tensor("u64", TensorProto.UINT64, [1], [2**63]),
    helper.make_tensor("d", TensorProto.DOUBLE, [1], [0.5]),
    helper.make_tensor("c", TensorProto.COMPLEX64, [1], [complex(1, 2)]),
    helper.make_tensor("s", TensorProto.STRING, [2], [b"a", b"b"]),
])
save("typed_fields.onnx", typed.SerializeToString())

consts = model([
    helper.make_node("Constant", [], ["c0"], value=numpy_helper.from_array(np.ones(4, np.float32))),
    helper.make_node("Constant", [], ["c1"], value_float=0.5),
    helper.make_node("Constant", [], ["c2"], value_floats=[1.0, 2.0]),
    helper.make_node("Constant", [], ["c3"], value_int=3),
    helper.make_node("Constant", [], ["c4"], value_ints=[1, -2]),
    helper.make_node("Constant", [], ["c5"], value_string="x"),
    helper.make_node("MatMulNBits", ["a", "c0"], ["y"], domain="com.microsoft", K=4, N=1, bits=4, block_size=32),
], [])
save("constants.onnx", consts.SerializeToString())



def body(w):
    return helper.make_graph([helper.make_node("Identity", [w], [w + "_out"])], "body_" + w, [], [],
                             [numpy_helper.from_array(np.array([9.0], np.float32), w)])


inner = helper.make_graph([helper.make_node("If", ["cond"], ["io"], then_branch=body("tw"), else_branch=body("ew"))],
                          "inner", [], [])
nested = model([helper.make_node("Loop", ["", "cond"], ["lo"], body=inner)], [])
save("subgraphs.onnx", nested.SerializeToString())

values = numpy_helper.from_array(np.array([1.0, 2.0], np.float32), "sp")
indices = numpy_helper.from_array(np.array([0, 3], np.int64), "sp_idx")
sparse = model([], [], [helper.make_sparse_tensor(values, indices, [4])])
save("sparse.onnx", sparse.SerializeToString())


def external(name, dims, dtype, entries):
    t = TensorProto()
    t.name = name
    t.data_type = dtype
    t.dims.extend(dims)
    for k, v in entries:
        e = t.external_data.add()
        e.key, e.value = k, v
    t.data_location = TensorProto.EXTERNAL
    return t


ext = model([], [
    external("e0", [4], TensorProto.FLOAT, [("location", "w.bin"), ("offset", "0"), ("length", "16")]),
    external("e1", [8], TensorProto.UINT8, [("location", "w.bin"), ("offset", "8")]),
    external("e2", [3], 22, [("location", "./w.bin"), ("offset", "4090"), ("checksum", "0" * 40)]),
    external("e3", [0], TensorProto.FLOAT, [("location", "sub/empty.bin"), ("extra", "kept")]),
])
save("external.onnx", ext.SerializeToString())

bad_paths = model([], [external("x", [1], TensorProto.FLOAT, [("location", "../w.bin")])])
save("external_traversal.onnx", bad_paths.SerializeToString())
save("external_fifo.onnx", model([], [external("x", [1], TensorProto.FLOAT, [("location", "fifo")])]).SerializeToString())

good = raw.SerializeToString()
save("truncated.onnx", good[: len(good) // 2])
save("overlong_varint.onnx", bytes([0x08] + [0xff] * 10 + [0x01]))
save("group.onnx", bytes([0x3b, 0x3c]))
save("empty.onnx", b"")
