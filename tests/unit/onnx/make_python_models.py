#!/usr/bin/python3
"""Writes models with Debian's python3-onnx for test_loader_python.cpp.

Usage: make_python_models.py OUT_DIR
For every model M it writes OUT_DIR/M.onnx (+ external data) and
OUT_DIR/M.expect: one line per weight, "name dtype_number dims hex_bytes",
with the bytes as onnx.numpy_helper sees them.
"""
import os
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

out = sys.argv[1]
os.makedirs(out, exist_ok=True)


def expect_line(name, t):
    arr = numpy_helper.to_array(t)
    dims = ",".join(str(d) for d in t.dims)
    return f"{name} {t.data_type} [{dims}] {arr.tobytes().hex()}"


def write(name, model, expected, **save):
    onnx.save_model(model, os.path.join(out, name + ".onnx"), **save)
    with open(os.path.join(out, name + ".expect"), "w") as f:
        f.write("\n".join(expected) + "\n")


rng = np.random.default_rng(7)
inits = [
    numpy_helper.from_array(rng.standard_normal((4, 8)).astype(np.float32), "f32"),
    numpy_helper.from_array(rng.standard_normal((3, 5)).astype(np.float16), "f16"),
    numpy_helper.from_array(rng.integers(-100, 100, (7,)).astype(np.int8), "i8"),
    numpy_helper.from_array(rng.integers(0, 2**40, (3,)).astype(np.int64), "i64"),
    numpy_helper.from_array(np.array([True, False, True]), "b"),
    numpy_helper.from_array(rng.standard_normal((2,)).astype(np.float64), "f64"),
    helper.make_tensor("typed_f32", TensorProto.FLOAT, [3], [1.5, -2.0, 3.25]),
    helper.make_tensor("typed_f16", TensorProto.FLOAT16, [2], [0.5, -4.0]),
    helper.make_tensor("typed_i16", TensorProto.INT16, [3], [-300, 7, 32000]),
    helper.make_tensor("typed_u8", TensorProto.UINT8, [2], [255, 1]),
    helper.make_tensor("typed_i64", TensorProto.INT64, [2], [-(2**40), 5]),
    helper.make_tensor("typed_u32", TensorProto.UINT32, [2], [4000000000, 3]),
    helper.make_tensor("typed_u64", TensorProto.UINT64, [1], [2**63 + 5]),
    helper.make_tensor("typed_f64", TensorProto.DOUBLE, [2], [0.1, -1e100]),
]
const_value = numpy_helper.from_array(np.arange(6, dtype=np.float32).reshape(2, 3), "ignored")
body_w = numpy_helper.from_array(np.array([9.0, 8.0], np.float32), "body_w")
then_g = helper.make_graph([helper.make_node("Identity", ["body_w"], ["t_out"])], "then", [], [
    helper.make_tensor_value_info("t_out", TensorProto.FLOAT, [2])], [body_w])
else_g = helper.make_graph([helper.make_node("Constant", [], ["e_out"], value_ints=[4, -5])], "else", [], [
    helper.make_tensor_value_info("e_out", TensorProto.INT64, [2])])
nodes = [
    helper.make_node("Constant", [], ["c_value"], value=const_value),
    helper.make_node("Constant", [], ["c_float"], value_float=0.75),
    helper.make_node("Constant", [], ["c_ints"], value_ints=[1, 2, 3]),
    helper.make_node("If", ["cond"], ["y"], then_branch=then_g, else_branch=else_g),
]
graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("cond", TensorProto.BOOL, [])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])], inits)
model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])

expected = [expect_line(t.name, t) for t in inits]
expected.append(expect_line("c_value", const_value))
expected.append(expect_line("c_float", numpy_helper.from_array(np.array(0.75, np.float32))))
expected.append(expect_line("c_ints", numpy_helper.from_array(np.array([1, 2, 3], np.int64))))
expected.append(expect_line("body_w", body_w))
expected.append(expect_line("e_out", numpy_helper.from_array(np.array([4, -5], np.int64))))

write("inline", model, expected)
# The same model with every tensor of 16 bytes or more in one file in a subdirectory.
os.makedirs(os.path.join(out, "data"), exist_ok=True)
write("external_one", onnx.load(os.path.join(out, "inline.onnx")), expected, save_as_external_data=True,
      all_tensors_to_one_file=True, location="data/weights.bin", size_threshold=16)
# One file per tensor, every tensor external.
os.makedirs(os.path.join(out, "many"), exist_ok=True)
onnx.save_model(onnx.load(os.path.join(out, "inline.onnx")), os.path.join(out, "many", "model.onnx"),
                save_as_external_data=True, all_tensors_to_one_file=False, size_threshold=0)
with open(os.path.join(out, "many", "model.expect"), "w") as f:
    f.write("\n".join(expected) + "\n")
