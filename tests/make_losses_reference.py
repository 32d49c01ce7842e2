#!/usr/bin/python3
# tests/make_losses_reference.py: reference values for tests/test_losses.cpp, made with Debian's
# PyTorch 1.13 in F64:
#   /usr/bin/python3 tests/make_losses_reference.py  ->  tests/data/losses/losses.json
# For each case: the inputs, and per reduction the loss and the gradient of sum(loss * cot)
# with respect to every floating input but y and w (cot: a stored cotangent for "none", 1 otherwise).
# Losses: binary_cross_entropy (with weight), huber_loss (delta 1 and 0.5),
# cosine_embedding_loss (margin 0 and 0.3), triplet_margin_loss (p 2 and 1, swap), and the
# older ones without parity data before: nll_loss (class weights, ignore_index, (N, C, d)),
# l1_loss, smooth_l1_loss (beta 1 and 0.5), binary_cross_entropy_with_logits (weight,
# pos_weight), kl_div (log_target or not).
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
        ins = {k: (v.clone().requires_grad_(v.is_floating_point() and k not in ("y", "w", "pw"))) for k, v in inputs.items()}
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
lp = torch.log_softmax(torch.randn(6, 4, dtype=DT), 1)
cls = torch.tensor([0, 3, 1, -100, 2, 3])
cw = torch.rand(4, dtype=DT) + 0.5
cases.append(case("nll weight ignore_index",
                  lambda i, r: F.nll_loss(i["x"], i["y"].long(), weight=i["w"], ignore_index=-100, reduction=r),
                  {"x": lp, "y": cls.to(DT), "w": cw}))
lp3 = torch.log_softmax(torch.randn(2, 4, 3, dtype=DT), 1)
cls3 = torch.randint(0, 4, (2, 3))
cases.append(case("nll (N, C, d)", lambda i, r: F.nll_loss(i["x"], i["y"].long(), reduction=r),
                  {"x": lp3, "y": cls3.to(DT)}))
cases.append(case("l1", lambda i, r: F.l1_loss(i["x"], i["t"], reduction=r), {"x": a, "t": b}))
for beta in (1.0, 0.5):
    cases.append(case(f"smooth_l1 beta {beta}",
                      lambda i, r, be=beta: F.smooth_l1_loss(i["x"], i["t"], reduction=r, beta=be),
                      {"x": a, "t": b}, {"beta": beta}))
logits = torch.randn(4, 3, dtype=DT) * 3
pw = torch.rand(3, dtype=DT) + 0.5
cases.append(case("bce_with_logits weight pos_weight",
                  lambda i, r: F.binary_cross_entropy_with_logits(i["x"], i["t"], weight=i["w"], pos_weight=i["pw"],
                                                                  reduction=r),
                  {"x": logits, "t": y, "w": w, "pw": pw}))
q = torch.softmax(torch.randn(4, 5, dtype=DT), 1)
lq = torch.log_softmax(torch.randn(4, 5, dtype=DT), 1)
for log_target in (False, True):
    cases.append(case(f"kl_div log_target {log_target}",
                      lambda i, r, lt=log_target: F.kl_div(i["x"], i["t"], reduction=r, log_target=lt),
                      {"x": lq, "t": torch.log(q) if log_target else q}, {"log_target": log_target}))
with open("tests/data/losses/losses.json", "w") as f:
    json.dump({"torch": torch.__version__, "cases": cases}, f)
print(f"wrote {len(cases)} cases")
