#!/usr/bin/env python3
# tests/make_torch_file_reference.py: the PyTorch side of brisk's torch.save reader
# (interop/torch_file.h). Writes small .pth files with torch.save into tests/data/torch_file/,
# and beside each the tensors it holds as safetensors (contiguous copies under the names that
# load_torch_state_dict gives them), so tests/test_torch_file.cpp checks every value without
# hand-written numbers. Not run by CI: it needs torch and safetensors; the files it makes are
# committed (about 60 KB). The ResNet-18 parity file is made by the test itself (45 MB).
#
#   /work/venv/bin/python tests/make_torch_file_reference.py
#
# Files:
#   dtypes.pth          a state_dict with one tensor per dtype brisk reads (f32 f64 f16 bf16 i64
#                       i32 i8 u8 bool), a 0-dim tensor, an empty one and an nn.Parameter
#   views.pth           tensors sharing one storage: a slice (storage offset), a transpose saved
#                       as is (non-contiguous strides), a strided column pick, a row, the base
#   containers.pth      nested dicts, lists and tuples of ints, floats, str, None, bools, int
#                       keys, torch.Size and tensors (protocol 2, torch.save's default)
#   containers_p4.pth   the same plus bytes, with pickle_protocol=4 (FRAME, MEMOIZE,
#                       SHORT_BINUNICODE, STACK_GLOBAL, BINBYTES); containers_p5.pth with 5
#   checkpoint.pth      {"model": a small CNN's state_dict, "optimizer": Adam's state_dict after
#                       one step (int keys, param_groups), "epoch": 3}
#   small_cnn_io.safetensors   that CNN's input and its eval-mode logits in PyTorch
#   big_endian.pth      dtypes.pth's f32 and i64 tensors rewritten as a big-endian archive
#   int16.pth           an int16 tensor (a dtype brisk lacks: refused by name)
#   legacy.pth          the pre-1.6 format (_use_new_zipfile_serialization=False): refused
#   module.pth          a whole nn.Linear (torch.save(model)): refused, naming its class
#   <name>.expected.safetensors  the tensors of <name>.pth (flattened names, contiguous)
import io
import os
import struct
import zipfile
from collections import OrderedDict

import torch
from safetensors.torch import save_file

HERE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data", "torch_file")


def flatten(value, prefix=""):
    """load_torch_state_dict's names: dict keys and sequence indices joined with '.'."""
    out = {}
    if isinstance(value, torch.Tensor):
        out[prefix] = value.detach().contiguous().clone()
    elif isinstance(value, dict):
        for k, v in value.items():
            out.update(flatten(v, f"{prefix}.{k}" if prefix else str(k)))
    elif isinstance(value, (list, tuple)):
        for i, v in enumerate(value):
            out.update(flatten(v, f"{prefix}.{i}" if prefix else str(i)))
    return out


def save(name, value, **kwargs):
    path = os.path.join(HERE, name + ".pth")
    torch.save(value, path, **kwargs)
    tensors = flatten(value)
    save_file(tensors, os.path.join(HERE, name + ".expected.safetensors"))
    return path


def dtypes():
    sd = OrderedDict()
    sd["f32"] = torch.tensor([[-1.5, 0.0, 2.25], [3.0, -0.0, 1e-30]], dtype=torch.float32)
    sd["f64"] = torch.tensor([0.1, -2.25, 1e300], dtype=torch.float64)
    sd["f16"] = torch.tensor([0.5, -65504.0, 6e-8], dtype=torch.float16)
    sd["bf16"] = torch.tensor([1.0, -2.0, 3.0e38], dtype=torch.bfloat16)
    sd["i64"] = torch.tensor([-(2**63), -1, 2**40, 2**63 - 1], dtype=torch.int64)
    sd["i32"] = torch.tensor([-(2**31), 0, 2**31 - 1], dtype=torch.int32)
    sd["i8"] = torch.tensor([-128, -1, 0, 127], dtype=torch.int8)
    sd["u8"] = torch.tensor([0, 7, 255], dtype=torch.uint8)
    sd["bool"] = torch.tensor([True, False, True])
    sd["scalar"] = torch.tensor(2.5)
    sd["empty"] = torch.zeros(0, 3)
    sd["param"] = torch.nn.Parameter(torch.tensor([1.0, 2.0]))
    save("dtypes", sd)
    return sd


def views():
    base = torch.arange(24, dtype=torch.float32) * 0.5
    sd = OrderedDict()
    sd["base"] = base
    sd["slice"] = base[5:11]  # storage offset 5
    sd["transposed"] = base.view(4, 6).t()  # strides (1, 6)
    sd["columns"] = base.view(4, 6)[1:, ::2]  # offset 6, strides (6, 2)
    sd["row"] = base.view(4, 6)[2]  # offset 12
    sd["expanded"] = base[:3].view(3, 1).expand(3, 4)  # stride 0
    sd["other"] = torch.arange(6, dtype=torch.int64).view(2, 3).t()
    save("views", sd)


def containers():
    value = {
        "ints": [0, 1, -1, 255, 256, 65535, 65536, -(2**31), 2**31, 2**40, -(2**63), 2**63 - 1],
        "floats": (0.5, -1e300, float("inf")),
        "text": "héllo ✓",
        "none": None,
        "flags": [True, False],
        "nested": {"deep": {"t": torch.tensor([1.0, 2.0])}, 3: "int key", "empty": {}, "list": []},
        "tuple": (1, ("a", (2.5,))),
        "size": torch.Size([2, 3]),
        "tensors": [torch.tensor([1, 2], dtype=torch.int32), (torch.tensor(True),)],
    }
    save("containers", value)
    value_bytes = dict(value, raw=b"\x00\x01binary\xff")
    save("containers_p4", value_bytes, pickle_protocol=4)
    save("containers_p5", value_bytes, pickle_protocol=5)


def small_cnn():
    """In brisk: Sequential{Conv2d(1, 4, 3, padding 1), BatchNorm2d(4), ReLU, MaxPool2d(2),
    Flatten, Linear(64, 3)} on (B, 1, 8, 8): the same names (0.weight, 1.running_mean, 5.bias)."""
    return torch.nn.Sequential(
        torch.nn.Conv2d(1, 4, 3, padding=1), torch.nn.BatchNorm2d(4), torch.nn.ReLU(), torch.nn.MaxPool2d(2),
        torch.nn.Flatten(), torch.nn.Linear(64, 3))


def checkpoint():
    torch.manual_seed(0)
    model = small_cnn()
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    x = torch.randn(2, 1, 8, 8)
    model(x).square().mean().backward()  # train mode: the BatchNorm statistics move too
    opt.step()
    model.eval()
    with torch.no_grad():
        logits = model(x)
    save("checkpoint", {"model": model.state_dict(), "optimizer": opt.state_dict(), "epoch": 3})
    save_file({"input": x, "logits": logits}, os.path.join(HERE, "small_cnn_io.safetensors"))


def big_endian():
    """dtypes.pth's f32 and i64 tensors in an archive whose byteorder record says big, with
    every element's bytes reversed: what torch.save writes on a big-endian machine."""
    value = OrderedDict(f32=torch.tensor([1.5, -2.0, 3.25]), i64=torch.tensor([1, -2, 2**40]))
    buf = io.BytesIO()
    torch.save(value, buf)
    src = zipfile.ZipFile(io.BytesIO(buf.getvalue()))
    out = os.path.join(HERE, "big_endian.pth")
    with zipfile.ZipFile(out, "w", zipfile.ZIP_STORED) as dst:
        for info in src.infolist():
            data = src.read(info.filename)
            folder, rest = info.filename.split("/", 1)
            name = "big_endian/" + rest
            if rest == "byteorder":
                data = b"big"
            elif rest == "data/0":  # f32
                data = b"".join(struct.pack(">f", v) for v in struct.unpack("<3f", data))
            elif rest == "data/1":  # i64
                data = b"".join(struct.pack(">q", v) for v in struct.unpack("<3q", data))
            dst.writestr(zipfile.ZipInfo(name, date_time=(2020, 1, 1, 0, 0, 0)), data)  # no clock in the bytes
    save_file({k: v.contiguous() for k, v in value.items()}, os.path.join(HERE, "big_endian.expected.safetensors"))


def refused():
    torch.save({"x": torch.tensor([1, 2], dtype=torch.int16)}, os.path.join(HERE, "int16.pth"))
    torch.save({"x": torch.tensor([1.0])}, os.path.join(HERE, "legacy.pth"), _use_new_zipfile_serialization=False)
    torch.save(torch.nn.Linear(2, 1), os.path.join(HERE, "module.pth"))


def main():
    os.makedirs(HERE, exist_ok=True)
    dtypes()
    views()
    containers()
    checkpoint()
    big_endian()
    refused()
    total = sum(os.path.getsize(os.path.join(HERE, f)) for f in os.listdir(HERE))
    print(f"wrote {len(os.listdir(HERE))} files, {total} bytes, to {HERE}")


if __name__ == "__main__":
    main()
