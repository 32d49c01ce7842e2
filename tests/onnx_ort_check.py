#!/usr/bin/env python3
"""tests/onnx_ort_check.py DIR: for each DIR/<model>.onnx (exported by brisk at batch 2 with a
dynamic batch axis) and DIR/<model>.safetensors (input_B and output_B for B = 2 and 5, brisk's
outputs), checks the model with onnx.checker.check_model(full_check=True), runs it in ONNX
Runtime at both batch sizes and compares with brisk's outputs:
max |ort - brisk| / max(1, max |brisk|) <= 1e-5. The safetensors files are read by hand (JSON
header + little-endian data), so only onnxruntime and numpy are needed. Exit 1 on a mismatch."""
import glob
import json
import os
import struct
import sys

import numpy as np
import onnx
import onnxruntime as ort

DTYPES = {"F32": np.float32, "F64": np.float64, "I64": np.int64, "I32": np.int32, "BOOL": np.bool_}


def read_safetensors(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        data = f.read()
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        a, b = info["data_offsets"]
        out[name] = np.frombuffer(data[a:b], dtype=DTYPES[info["dtype"]]).reshape(info["shape"])
    return out


failed = 0
models = sorted(glob.glob(os.path.join(sys.argv[1], "*.onnx")))
assert models, "no exported models"
for model in models:
    name = os.path.basename(model)[:-5]
    io = read_safetensors(model[:-5] + ".safetensors")
    onnx.checker.check_model(onnx.load(model), full_check=True)
    sess = ort.InferenceSession(model, providers=["CPUExecutionProvider"])
    errs = []
    for batch in (2, 5):
        got = sess.run(None, {"input": io[f"input_{batch}"]})[0]
        want = io[f"output_{batch}"]
        if got.shape != want.shape:
            errs.append(f"batch {batch}: shape {got.shape} vs {want.shape}")
            continue
        err = float(np.max(np.abs(got.astype(np.float64) - want)) / max(1.0, float(np.max(np.abs(want)))))
        errs.append(f"batch {batch}: {err:.2e}")
        if not err <= 1e-5:
            failed += 1
    print(f"{name}: {', '.join(errs)}")
if failed:
    print(f"onnx_ort_check: {failed} mismatches")
    sys.exit(1)
print(f"onnx_ort_check: {len(models)} models agree with ONNX Runtime {ort.__version__} at batch 2 and 5")
