#!/usr/bin/python3
# tests/make_losses_reference.py: reference values for tests/test_losses.cpp, made with Debian's
# PyTorch 1.13 in F64:
#   /usr/bin/python3 tests/make_losses_reference.py  ->  tests/data/losses/losses.json
# For each case: the inputs, and per reduction the loss and the gradient of sum(loss * cot)
# with respect to every floating input but y and w (cot: a stored cotangent for "none", 1 otherwise).
# Losses: binary_cross_entropy (with weight), huber_loss (delta 1 and 0.5),
# cosine_embedding_loss (margin 0 and 0.3), triplet_margin_loss (p 2 and 1, swap).
import json

import torch
import torch.nn.functional as F

torch.manual_seed(0)
DT = torch.float64


def tj(t):
    return {"shape": list(t.shape), "data": t.detach().reshape(-1).tolist()}


def case(name, fn, inputs, extra=None):
    out = {"name": name, "inputs": {k: tj(v) for k, v in inputs.items()}, "reductions": {}}
    if extra:
        out.update(extra)
    for r in ("none", "mean", "sum"):
        ins = {k: (v.clone().requires_grad_(v.is_floating_point() and k not in ("y", "w"))) for k, v in inputs.items()}
        loss = fn(ins, r)
        cot = torch.rand(loss.shape, dtype=DT) if r == "none" else torch.ones((), dtype=DT)
        (loss * cot).sum().backward()
        out["reductions"][r] = {
            "loss": tj(loss),
            "cot": tj(cot),
            "grads": {k: tj(v.grad) for k, v in ins.items() if v.grad is not None},
        }
    return out


cases = []
p = torch.rand(4, 3, dtype=DT) * 0.9 + 0.05
y = torch.rand(4, 3, dtype=DT)
w = torch.rand(4, 3, dtype=DT)
cases.append(case("bce", lambda i, r: F.binary_cross_entropy(i["x"], i["t"], reduction=r), {"x": p, "t": y}))
cases.append(case("bce weight", lambda i, r: F.binary_cross_entropy(i["x"], i["t"], weight=i["w"], reduction=r),
                  {"x": p, "t": y, "w": w}))
a = torch.randn(5, 4, dtype=DT) * 2
b = torch.randn(5, 4, dtype=DT)
for delta in (1.0, 0.5):
    cases.append(case(f"huber delta {delta}", lambda i, r, d=delta: F.huber_loss(i["x"], i["t"], reduction=r, delta=d),
                      {"x": a, "t": b}, {"delta": delta}))
x1 = torch.randn(6, 4, dtype=DT)
x2 = torch.randn(6, 4, dtype=DT)
lab = torch.tensor([1, -1, 1, -1, -1, 1], dtype=DT)
for margin in (0.0, 0.3):
    cases.append(case(f"cosine margin {margin}",
                      lambda i, r, m=margin: F.cosine_embedding_loss(i["x1"], i["x2"], i["y"], margin=m, reduction=r),
                      {"x1": x1, "x2": x2, "y": lab}, {"margin": margin}))
an, po, ne = (torch.randn(5, 3, dtype=DT) for _ in range(3))
for pn, swap in ((2.0, False), (1.0, False), (2.0, True)):
    cases.append(case(f"triplet p {pn} swap {swap}",
                      lambda i, r, pn=pn, s=swap: F.triplet_margin_loss(i["a"], i["p"], i["n"], margin=0.7, p=pn,
                                                                       swap=s, reduction=r),
                      {"a": an, "p": po, "n": ne}, {"p": pn, "swap": swap, "margin": 0.7}))
with open("tests/data/losses/losses.json", "w") as f:
    json.dump({"torch": torch.__version__, "cases": cases}, f)
print(f"wrote {len(cases)} cases")
