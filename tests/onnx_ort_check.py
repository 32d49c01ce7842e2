#!/usr/bin/env python3
"""tests/onnx_ort_check.py DIR: for each DIR/<model>.onnx (exported by brisk at batch 2 with a
dynamic batch axis; a sequence model at length 7 with a dynamic sequence axis too) and
DIR/<model>.safetensors (input_S and output_S, brisk's outputs, for each size S: "5" is batch 5,
"5x11" batch 5 and length 11), checks the model with onnx.checker.check_model(full_check=True),
runs it in ONNX Runtime at every size and compares with brisk's outputs:
max |ort - brisk| / max(1, max |brisk|) <= 1e-5; for the int8 models (names ending "_int8", QDQ
graphs) max |ort - brisk| <= one quantization step of the output (quint8 over the output's range,
as a requantizing module would take it), also against the QDQ graph imported again into brisk
(reimported_S). The safetensors files are read by hand (JSON
header + little-endian data), so only onnxruntime and numpy are needed. Exit 1 on a mismatch."""
import glob
import json
import os
import struct
import sys

import numpy as np
import onnx
import onnxruntime as ort

DTYPES = {"F32": np.float32, "F64": np.float64, "F16": np.float16, "I64": np.int64, "I32": np.int32, "I8": np.int8,
          "U8": np.uint8, "BOOL": np.bool_}


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


def roundtrip(directory):
    """ONNX's node cases as brisk imported and exported them again (tests/test_onnx_conformance.cpp
    with BRISK_ONNX_ROUNDTRIP_DIR): each runs in ONNX Runtime on the case's inputs and must give
    the case's expected output by ONNX's runner's rule (allclose, rtol 1e-3, atol 1e-7)."""
    bad, skipped, models = [], 0, sorted(glob.glob(os.path.join(directory, "*.onnx")))
    for model in models:
        try:
            io = read_safetensors(model[:-5] + ".safetensors")
        except KeyError:  # a dtype numpy lacks (BF16)
            skipped += 1
            continue
        wants = [io.pop(k) for k in sorted([k for k in io if k.startswith("expected_output_")],
                                           key=lambda k: int(k.rsplit("_", 1)[1]))]
        try:
            sess = ort.InferenceSession(model, providers=["CPUExecutionProvider"])
            gots = sess.run(None, io)
        except Exception as e:  # noqa: BLE001 (ONNX Runtime raises its own types)
            bad.append(f"{os.path.basename(model)}: {str(e).splitlines()[0][:200]}")
            continue
        if len(gots) != len(wants):
            bad.append(f"{os.path.basename(model)}: {len(gots)} outputs, expected {len(wants)}")
            continue
        for k, (got, want) in enumerate(zip(gots, wants)):
            if got.shape != want.shape or got.dtype != want.dtype or not np.allclose(got, want, rtol=1e-3,
                                                                                       atol=1e-7, equal_nan=True):
                bad.append(f"{os.path.basename(model)}: output {k} differs")
                break
    for b in bad:
        print(b)
    print(f"onnx_ort_check: {len(models) - skipped - len(bad)} of {len(models) - skipped} re-exported node cases "
          f"give ONNX's expected outputs in ONNX Runtime ({skipped} skipped: BF16)")
    return len(bad)


if sys.argv[1] == "--roundtrip":
    sys.exit(1 if roundtrip(sys.argv[2]) else 0)

failed = 0
models = sorted(glob.glob(os.path.join(sys.argv[1], "*.onnx")))
assert models, "no exported models"
for model in models:
    name = os.path.basename(model)[:-5]
    io = read_safetensors(model[:-5] + ".safetensors")
    onnx.checker.check_model(onnx.load(model), full_check=True)
    sess = ort.InferenceSession(model, providers=["CPUExecutionProvider"])
    errs = []
    sizes = [k[len("input_"):] for k in io if k.startswith("input_")]
    assert len(sizes) >= 2, f"{name}: brisk's outputs at fewer than two sizes"
    for batch in sizes:  # "5" (batch 5) or "5x11" (batch 5, length 11)
        got = sess.run(None, {"input": io[f"input_{batch}"]})[0]
        want = io[f"output_{batch}"]
        if got.shape != want.shape:
            errs.append(f"batch {batch}: shape {got.shape} vs {want.shape}")
            failed += 1
            continue
        if name.endswith("_int8"):
            # int8 models (QDQ): within one quantization step of the output, the step of quint8
            # over the output's range as a requantizing module would take it (max(0, hi) - min(0, lo)) / 255.
            step = (max(0.0, float(np.max(want))) - min(0.0, float(np.min(want)))) / 255
            err = float(np.max(np.abs(got.astype(np.float64) - want))) / step
            # The same graph imported again into brisk (brisk::onnx::load_model).
            again = float(np.max(np.abs(got.astype(np.float64) - io[f"reimported_{batch}"]))) / step
            errs.append(f"batch {batch}: {err:.3f} steps (brisk's import: {again:.3f})")
            if not (err <= 1.0 and again <= 1.0):
                failed += 1
            continue
        err = float(np.max(np.abs(got.astype(np.float64) - want)) / max(1.0, float(np.max(np.abs(want)))))
        errs.append(f"batch {batch}: {err:.2e}")
        if not err <= 1e-5:
            failed += 1
    print(f"{name}: {', '.join(errs)}")
if failed:
    print(f"onnx_ort_check: {failed} mismatches")
    sys.exit(1)
print(f"onnx_ort_check: {len(models)} models agree with ONNX Runtime {ort.__version__} at every size")
