#!/usr/bin/env python3
"""tests/make_onnx_reference.py: the small ONNX files tests/test_onnx_import.cpp reads, written
with the onnx package (python3-onnx, 1.12): a two-layer MLP exported as PyTorch names it
(dotted initializer names, Gemm with transB, an int64 shape initializer), and the bad files the
importer must refuse (a cycle, data shorter than its shape, a 2^62-element initializer, an op
brisk lacks, an attribute value it refuses, a dtype brisk lacks). Run: python3 tests/make_onnx_reference.py
"""
import os

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data", "onnx")


def save(model, name, check=True):
    if check:
        onnx.checker.check_model(model)
    onnx.save(model, os.path.join(OUT, name))


def mlp():
    rng = np.random.default_rng(0)
    inits = [
        numpy_helper.from_array(rng.standard_normal((8, 4)).astype(np.float32) * 0.5, "fc1.weight"),
        numpy_helper.from_array(rng.standard_normal(8).astype(np.float32) * 0.1, "fc1.bias"),
        numpy_helper.from_array(rng.standard_normal((3, 8)).astype(np.float32) * 0.5, "fc2.weight"),
        numpy_helper.from_array(rng.standard_normal(3).astype(np.float32) * 0.1, "fc2.bias"),
        numpy_helper.from_array(np.array([-1, 3], dtype=np.int64), "shape"),
    ]
    nodes = [
        helper.make_node("Gemm", ["input", "fc1.weight", "fc1.bias"], ["h"], name="fc1", transB=1),
        helper.make_node("Relu", ["h"], ["a"], name="act"),
        helper.make_node("Gemm", ["a", "fc2.weight", "fc2.bias"], ["z"], name="fc2", transB=1),
        helper.make_node("Reshape", ["z", "shape"], ["output"], name="reshape"),
    ]
    graph = helper.make_graph(nodes, "mlp", [helper.make_tensor_value_info("input", TensorProto.FLOAT, ["N", 4])],
                              [helper.make_tensor_value_info("output", TensorProto.FLOAT, ["N", 3])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])


def raw_tensor(name, dims, data):
    # make_tensor checks the data's size; these tensors are wrong on purpose
    t = TensorProto()
    t.name = name
    t.data_type = TensorProto.FLOAT
    t.dims.extend(dims)
    t.raw_data = data
    return t


def one_node(name, node, inits=(), in_type=TensorProto.FLOAT):
    graph = helper.make_graph([node], name, [helper.make_tensor_value_info("x", in_type, [2])],
                              [helper.make_tensor_value_info("y", in_type, [2])], list(inits))
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])


def main():
    os.makedirs(OUT, exist_ok=True)
    save(mlp(), "mlp.onnx")
    # a -> b -> a: a cycle (the checker is not run on it here; the importer must find it)
    cycle = helper.make_graph(
        [helper.make_node("Relu", ["b"], ["a"], name="first"), helper.make_node("Relu", ["a"], ["b"], name="second")],
        "cycle", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
        [helper.make_tensor_value_info("b", TensorProto.FLOAT, [2])])
    save(helper.make_model(cycle, opset_imports=[helper.make_opsetid("", 13)]), "cycle.onnx", check=False)
    # (4, 4) floats with 8 bytes of data
    short = raw_tensor("w", [4, 4], b"\0" * 8)
    save(one_node("short", helper.make_node("Add", ["x", "w"], ["y"], name="add"), [short]), "short_data.onnx",
         check=False)
    # 2^31 x 2^31 = 2^62 floats, no data at all
    huge = raw_tensor("w", [2**31, 2**31], b"")
    save(one_node("huge", helper.make_node("Add", ["x", "w"], ["y"], name="add"), [huge]), "huge.onnx", check=False)
    # BitShift exists in ONNX but not in brisk
    save(one_node("bitshift", helper.make_node("BitShift", ["x", "x"], ["y"], name="shift", direction="LEFT"),
                  in_type=TensorProto.UINT8), "unsupported_op.onnx")
    # BatchNormalization in training mode: an attribute value the importer refuses at load
    bn_inits = [numpy_helper.from_array(np.ones(2, dtype=np.float32), n) for n in ("scale", "b", "mean", "var")]
    bn = helper.make_graph(
        [helper.make_node("BatchNormalization", ["x", "scale", "b", "mean", "var"], ["y"], name="bn", training_mode=1)],
        "bn", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3, 2])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [3, 2])], bn_inits)
    save(helper.make_model(bn, opset_imports=[helper.make_opsetid("", 15)]), "training_batch_norm.onnx")
    # uint16 has no brisk dtype
    save(one_node("uint16", helper.make_node("Identity", ["x"], ["y"], name="same"), in_type=TensorProto.UINT16),
         "unsupported_dtype.onnx")
    pytorch_gelus()


def pytorch_gelus():
    """GELU as PyTorch 2.x's exporter writes it at opset 17 (no Gelu op before opset 20): the erf
    form, the tanh form, and GPT-2's NewGELU (Pow, the 0.5 taken first). Needs torch >= 2 (a venv:
    /work/venv/bin/python tests/make_onnx_reference.py); skipped with a note otherwise."""
    try:
        import math

        import torch
    except ImportError:
        print("make_onnx_reference: no torch here, gelu_*.onnx not rewritten")
        return

    class NewGELU(torch.nn.Module):
        def forward(self, x):
            return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * torch.pow(x, 3.0))))

    for name, m in [("gelu_erf", torch.nn.GELU()), ("gelu_tanh", torch.nn.GELU(approximate="tanh")),
                    ("gelu_new", NewGELU())]:
        torch.onnx.export(m, (torch.randn(2, 5),), os.path.join(OUT, name + ".onnx"), opset_version=17,
                          dynamo=False, input_names=["input"], output_names=["output"],
                          dynamic_axes={"input": {0: "batch"}, "output": {0: "batch"}})


if __name__ == "__main__":
    main()
