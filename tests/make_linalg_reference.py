#!/usr/bin/env python3
# tests/make_linalg_reference.py: the PyTorch side of the linear algebra parity test
# (tests/test_linalg.cpp). For each of brisk::linalg's ops it runs small fixed F64
# cases through torch.linalg and writes the inputs, the outputs, a fixed upstream gradient per
# output and the gradients of the inputs to tests/data/linalg/linalg.json.
# Run by hand (Debian's torch 1.13 is importable only from /usr/bin/python3):
#     /usr/bin/python3 tests/make_linalg_reference.py
# Not here: tolerances and the sign conventions the C++ test allows for; CI never runs this.
import json
import math
import os

import torch

torch.set_num_threads(1)
OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data", "linalg")
D = torch.float64


def enc(v):
    v = float(v)
    if math.isnan(v):
        return "nan"
    if math.isinf(v):
        return "inf" if v > 0 else "-inf"
    return v


def rec(t):
    t = t.detach().to(D)
    return {"shape": list(t.shape), "values": [enc(v) for v in t.flatten().tolist()]}


def values(shape, seed, lo=-1.0, hi=1.0):
    g = torch.Generator().manual_seed(seed)
    return lo + (hi - lo) * torch.rand(shape, generator=g, dtype=D)


def well_conditioned(shape, seed):
    # a random matrix plus n on the diagonal: far from singular
    a = values(shape, seed)
    return a + shape[-1] * torch.eye(shape[-1], dtype=D)


def spd(shape, seed):
    x = values(shape, seed)
    return x @ x.mT + shape[-1] * torch.eye(shape[-1], dtype=D)


def symmetric(shape, seed):
    x = values(shape, seed)
    return x + x.mT


def case(op, inputs, fn, grad=True, params=None):
    leaves = [x.clone().requires_grad_(grad) for x in inputs]
    outs = fn(*leaves)
    outs = list(outs) if isinstance(outs, (tuple, list)) else [outs]
    upstream = [values(o.shape, 1000 + i) for i, o in enumerate(outs)]
    r = {"op": op, "params": params or {}, "inputs": [rec(x) for x in inputs], "outputs": [rec(o) for o in outs]}
    if grad:
        loss = sum((o * u).sum() for o, u in zip(outs, upstream))
        grads = torch.autograd.grad(loss, leaves)
        r["upstream"] = [rec(u) for u in upstream]
        r["grads"] = [rec(g) for g in grads]
    return r


def eigh_loss_outputs(a):
    # eigenvectors enter squared, so the loss does not depend on their signs
    w, v = torch.linalg.eigh(a)
    return w, v * v


def main():
    la = torch.linalg
    cases = [
        case("solve", [well_conditioned((3, 3), 1), values((3, 2), 2)], la.solve),
        case("solve", [well_conditioned((2, 3, 3), 3), values((2, 3, 1), 4)], la.solve),
        case("solve", [well_conditioned((3, 3), 5), values((3,), 6)], la.solve),
        case("solve", [well_conditioned((3, 3), 7), values((2, 3, 2), 8)], la.solve),
        case("inv", [well_conditioned((3, 3), 9)], la.inv),
        case("inv", [well_conditioned((2, 4, 4), 10)], la.inv),
        case("det", [values((3, 3), 11)], la.det),
        case("det", [well_conditioned((2, 3, 3), 12)], la.det),
        case("det", [torch.tensor([[1.0, 2.0], [2.0, 4.0]], dtype=D)], la.det, grad=False),
        case("slogdet", [values((3, 3), 13)], la.slogdet),
        case("slogdet", [values((2, 4, 4), 14)], la.slogdet),
        case("slogdet", [torch.tensor([[1.0, 2.0], [2.0, 4.0]], dtype=D)], la.slogdet, grad=False),
        case("cholesky", [spd((3, 3), 15)], la.cholesky),
        case("cholesky", [spd((2, 4, 4), 16)], la.cholesky),
        case("cholesky", [spd((3, 3), 17)], lambda a: la.cholesky(a, upper=True), params={"upper": True}),
        case("qr", [values((4, 3), 18)], la.qr),
        case("qr", [values((3, 3), 19)], la.qr),
        case("qr", [values((2, 5, 3), 20)], la.qr),
        case("qr", [values((2, 4), 21)], la.qr, grad=False),
        case("eigh", [symmetric((3, 3), 22)], eigh_loss_outputs),
        case("eigh", [symmetric((2, 4, 4), 23)], eigh_loss_outputs),
        case("lstsq", [values((5, 3), 24), values((5, 2), 25)], lambda a, b: la.lstsq(a, b).solution),
        case("lstsq", [values((2, 6, 3), 26), values((2, 6, 1), 27)], lambda a, b: la.lstsq(a, b).solution),
    ]
    os.makedirs(OUT, exist_ok=True)
    path = os.path.join(OUT, "linalg.json")
    with open(path, "w") as f:
        json.dump({"torch": torch.__version__, "cases": cases}, f)
        f.write("\n")
    print(f"wrote {len(cases)} cases to {path} ({os.path.getsize(path)} bytes)")


if __name__ == "__main__":
    main()
