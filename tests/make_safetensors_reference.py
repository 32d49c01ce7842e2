#!/usr/bin/env python3
# tests/make_safetensors_reference.py: the PyTorch side of brisk's safetensors compatibility.
# Writes tests/data/safetensors/torch_written.safetensors with safetensors' own torch writer
# (brisk's test_serialize.cpp loads it and checks the values), then reads the committed
# tests/data/safetensors/brisk_written.safetensors (written by brisk; the C++ test keeps brisk
# writing exactly it) and checks PyTorch gets the same tensors. Not run by CI: it needs torch
# and safetensors (pip install safetensors); the files it makes are committed.
#
#   python3 tests/make_safetensors_reference.py          # write torch's file, check brisk's
#   python3 tests/make_safetensors_reference.py --check  # only check, write nothing
import os
import sys

import torch
from safetensors.torch import load_file, save_file

HERE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data", "safetensors")


def reference_tensors():
    """The same tensors as reference_tensors() in tests/test_serialize.cpp."""
    return {
        "f32": torch.tensor([[-1.0, -0.5, 0.0], [0.5, 1.0, 1.5]], dtype=torch.float32),
        "f64": torch.tensor([0.1, -2.25, 1e300], dtype=torch.float64),
        "f16": torch.tensor([[0.0, 0.25], [0.5, 0.75]], dtype=torch.float16),
        "bf16": torch.tensor([1.0, -2.0, 3.0, 384.0], dtype=torch.bfloat16),
        "i8": torch.tensor([-128, -1, 0, 127], dtype=torch.int8),
        "u8": torch.tensor([0, 7, 255], dtype=torch.uint8),
        "i32": torch.tensor([-2147483648, 0, 2147483647], dtype=torch.int32),
        "i64": torch.tensor([[-3, 0], [7, 1099511627776]], dtype=torch.int64),
        "bool": torch.tensor([True, False, True]),
        "scalar": torch.tensor(3.25, dtype=torch.float32),
        "empty": torch.zeros((0, 2), dtype=torch.float32),
    }


def check(path, writer):
    expected = reference_tensors()
    got = load_file(path)
    assert sorted(got) == sorted(expected), f"{path}: names {sorted(got)}"
    for name, want in expected.items():
        t = got[name]
        assert t.dtype == want.dtype, f"{path}: {name}: dtype {t.dtype}, want {want.dtype}"
        assert t.shape == want.shape, f"{path}: {name}: shape {tuple(t.shape)}, want {tuple(want.shape)}"
        assert torch.equal(t, want), f"{path}: {name}: values {t}, want {want}"
    with open(path, "rb") as f:
        header_len = int.from_bytes(f.read(8), "little")
        assert header_len % 8 == 0, f"{path}: header length {header_len} is not padded to 8"
    from safetensors import safe_open

    with safe_open(path, framework="pt") as f:
        meta = f.metadata()
    assert meta.get("writer") == writer, f"{path}: metadata {meta}"
    print(f"ok: {path} ({len(expected)} tensors, read by torch {torch.__version__})")


def main():
    os.makedirs(HERE, exist_ok=True)
    torch_file = os.path.join(HERE, "torch_written.safetensors")
    brisk_file = os.path.join(HERE, "brisk_written.safetensors")
    if "--check" not in sys.argv[1:]:
        save_file(reference_tensors(), torch_file, metadata={"format": "pt", "writer": "torch"})
    check(torch_file, "torch")
    if os.path.exists(brisk_file):
        check(brisk_file, "brisk")
    else:
        print(f"missing {brisk_file}: run brisk_tests with BRISK_REGENERATE_SAFETENSORS=1 first")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
