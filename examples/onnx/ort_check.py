#!/usr/bin/env python3
"""examples/onnx/ort_check.py MODEL.onnx IO.safetensors: runs MODEL in ONNX Runtime on the
batch in IO (key "input") and compares with brisk's output for it (key "output"): the largest
difference relative to the largest output, and whether the predicted classes agree. Needs
onnxruntime, safetensors and numpy (pip install onnxruntime safetensors numpy)."""
import sys

import numpy as np
import onnxruntime as ort
from safetensors.numpy import load_file

model, io_path = sys.argv[1], sys.argv[2]
io = load_file(io_path)
sess = ort.InferenceSession(model, providers=["CPUExecutionProvider"])
got = sess.run(None, {sess.get_inputs()[0].name: io["input"]})[0]
want = io["output"]
err = float(np.max(np.abs(got - want)) / max(1.0, float(np.max(np.abs(want)))))
same = int(np.sum(got.argmax(1) == want.argmax(1)))
print(f"ONNX Runtime {ort.__version__} on {model}: max difference {err:.1e} (relative), "
      f"{same}/{len(want)} predictions equal")
sys.exit(0 if err <= 1e-5 and same == len(want) else 1)
