#!/usr/bin/env python3
"""Writes tests/data/attention/reference.safetensors: PyTorch's
torch.nn.functional.scaled_dot_product_attention on fixed random inputs, values and gradients
(F32; the math of the op, run here in F64 and stored in F32 so the reference is exact to F32
rounding), for tests/test_attention.cpp. Cases: head sizes 32, 64, 80 and 128; odd T and S;
causal (square and end-aligned), a Bool mask (PyTorch's convention: true = attend), a float mask
from nn.Transformer.generate_square_subsequent_mask plus noise, a custom scale; dropout off.
Each case c stores c.q, c.k, c.v, [c.mask], c.gout, c.out, c.dq, c.dk, c.dv; metadata holds each
case's options as JSON.

The safetensors file is written by hand (json header + little-endian data), so the venv needs
no safetensors package. Run with PyTorch 2.x:
  env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE /work/venv/bin/python tests/make_attention_reference.py
"""
import json
import os
import struct

import torch
import torch.nn.functional as F

torch.manual_seed(0)

CASES = [
    # name, (B, H, T, S, D, Dv), options
    ("d32_causal", (2, 3, 17, 17, 32, 32), {"causal": True}),
    ("d64_plain_odd", (1, 2, 33, 47, 64, 64), {}),
    ("d80_boolmask", (2, 2, 29, 29, 80, 80), {"mask": "bool"}),
    ("d128_floatmask_scale", (1, 2, 65, 65, 128, 128), {"mask": "float", "scale": 0.05}),
    ("d64_causal_endaligned", (1, 3, 9, 40, 64, 48), {"causal": True}),
    ("d64_long_causal", (1, 1, 200, 200, 64, 64), {"causal": True}),
]

tensors = {}
meta = {}
for name, (B, H, T, S, D, Dv), opt in CASES:
    q = torch.randn(B, H, T, D, dtype=torch.float64)
    k = torch.randn(B, H, S, D, dtype=torch.float64)
    v = torch.randn(B, H, S, Dv, dtype=torch.float64)
    gout = torch.randn(B, H, T, Dv, dtype=torch.float64)
    mask = None
    if opt.get("mask") == "bool":
        mask = torch.rand(B, 1, T, S) > 0.3
        mask[..., 0] = True  # every row attends at least one key
    elif opt.get("mask") == "float":
        mask = torch.nn.Transformer.generate_square_subsequent_mask(T, dtype=torch.float64) + 0.5 * torch.randn(T, S, dtype=torch.float64)
    q.requires_grad_(), k.requires_grad_(), v.requires_grad_()
    out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=opt.get("causal", False),
                                         scale=opt.get("scale"))
    dq, dk, dv = torch.autograd.grad(out, (q, k, v), gout)
    for key, t in (("q", q), ("k", k), ("v", v), ("gout", gout), ("out", out), ("dq", dq), ("dk", dk), ("dv", dv)):
        tensors[f"{name}.{key}"] = t.detach().float()
    if mask is not None:
        tensors[f"{name}.mask"] = mask if mask.dtype == torch.bool else mask.float()
    meta[name] = json.dumps(opt)
meta["torch_version"] = torch.__version__

DT = {torch.float32: "F32", torch.bool: "BOOL"}
header, blobs, offset = {"__metadata__": meta}, [], 0
# Data largest element first (F32 before BOOL): every tensor starts aligned to its element.
for key, t in sorted(tensors.items(), key=lambda kv: -kv[1].element_size()):
    data = t.contiguous().numpy().tobytes()
    header[key] = {"dtype": DT[t.dtype], "shape": list(t.shape), "data_offsets": [offset, offset + len(data)]}
    blobs.append(data)
    offset += len(data)
text = json.dumps(header).encode()
text += b" " * ((8 - len(text) % 8) % 8)
path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data", "attention", "reference.safetensors")
with open(path, "wb") as f:
    f.write(struct.pack("<Q", len(text)))
    f.write(text)
    for b in blobs:
        f.write(b)
print("wrote", path, os.path.getsize(path), "bytes")
