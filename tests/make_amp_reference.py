#!/usr/bin/env python3
# tests/make_amp_reference.py: the golden trace for tests/test_amp.cpp's GradScaler test,
# made with PyTorch's own CPU GradScaler (torch.amp.GradScaler("cpu"), PyTorch >= 2.3; Debian's
# 1.13 has no CPU scaler, so run it with a current PyTorch from PyPI):
#   VENV/bin/python tests/make_amp_reference.py   ->  tests/data/amp/grad_scaler.json
# Two F32 parameters, loss = sum(w * c) so each gradient is scale * c; a scripted sequence of
# c holds Inf, NaN and values that overflow F32 once scaled, so the trace has skipped steps,
# backoffs and growths. SGD with momentum: a skipped step must leave its buffer alone.
# Values: JSON numbers (F32 values printed exactly as doubles) or "inf", "-inf", "nan".
import json
import math

import torch

INF, NAN = float("inf"), float("nan")


def enc(v):
    if math.isnan(v):
        return "nan"
    if math.isinf(v):
        return "inf" if v > 0 else "-inf"
    return v


# One row per iteration: c for w0 (4 values), c for w1 (2 x 3 values).
SCRIPT = [
    ([0.5, -0.25, 1.0, 2.0], [0.1, 0.2, 0.3, -0.4, 0.5, 0.6]),
    ([0.5, -0.25, 1.0, 2.0], [0.1, 0.2, 0.3, -0.4, 0.5, 0.6]),
    ([INF, -0.25, 1.0, 2.0], [0.1, 0.2, 0.3, -0.4, 0.5, 0.6]),  # Inf in w0
    ([0.5, -0.25, 1.0, 2.0], [0.1, NAN, 0.3, -0.4, 0.5, 0.6]),  # NaN in w1
    ([1.5, 0.25, -1.0, 0.75], [0.3, 0.2, 0.1, 0.4, -0.5, 0.6]),
    ([1e37, 0.25, -1.0, 0.75], [0.3, 0.2, 0.1, 0.4, -0.5, 0.6]),  # overflows once scaled
    ([1.5, 0.25, -1.0, 0.75], [0.3, 0.2, 0.1, 0.4, -0.5, 0.6]),
    ([1.5, 0.25, -1.0, 0.75], [0.3, 0.2, 0.1, 0.4, -0.5, 0.6]),
    ([1.5, 0.25, -1.0, 0.75], [0.3, 0.2, 0.1, 0.4, -0.5, 0.6]),  # third finite in a row: growth
    ([0.5, -0.25, 1.0, 2.0], [0.1, 0.2, 0.3, -0.4, 0.5, 0.6]),
    ([0.5, -0.25, 1.0, 2.0], [-INF, 0.2, 0.3, -0.4, 0.5, 0.6]),
    ([0.5, -0.25, 1.0, 2.0], [0.1, 0.2, 0.3, -0.4, 0.5, 0.6]),
    ([1e-30, 3e-41, 1.0, 2.0], [0.1, 0.2, 0.3, -0.4, 0.5, 0.6]),  # tiny and denormal
    ([0.5, -0.25, 1.0, 2.0], [0.1, 0.2, 0.3, -0.4, 0.5, 0.6]),
    ([0.5, -0.25, 1.0, 2.0], [0.1, 0.2, 0.3, -0.4, 0.5, 0.6]),
    ([0.5, -0.25, 1.0, 2.0], [0.1, 0.2, 0.3, -0.4, 0.5, 0.6]),
]

OPTIONS = {"init_scale": 2.0**20, "growth_factor": 2.0, "backoff_factor": 0.5, "growth_interval": 3}


def main():
    torch.manual_seed(0)
    w0 = torch.tensor([0.3, -0.7, 1.1, 0.05], requires_grad=True)
    w1 = torch.tensor([[0.2, -0.1, 0.4], [0.9, -0.6, 0.01]], requires_grad=True)
    init = [w0.detach().flatten().tolist(), w1.detach().flatten().tolist()]
    opt = torch.optim.SGD([w0, w1], lr=0.05, momentum=0.9)
    scaler = torch.amp.GradScaler("cpu", **OPTIONS)
    steps = []
    for c0, c1 in SCRIPT:
        opt.zero_grad()
        t0 = torch.tensor(c0)
        t1 = torch.tensor(c1).reshape(2, 3)
        loss = (w0 * t0).sum() + (w1 * t1).sum()
        scale_before = scaler.get_scale()
        scaler.scale(loss).backward()
        scaler.unscale_(opt)
        grads = [w0.grad.flatten().tolist(), w1.grad.flatten().tolist()]
        before = [w0.detach().clone(), w1.detach().clone()]
        scaler.step(opt)
        stepped = not (torch.equal(before[0], w0.detach()) and torch.equal(before[1], w1.detach()))
        scaler.update()
        steps.append({
            "c": [[enc(v) for v in c0], [enc(v) for v in c1]],
            "scale_before": scale_before,
            "grads": [[enc(v) for v in g] for g in grads],
            "stepped": stepped,
            "scale_after": scaler.get_scale(),
            "growth_tracker": int(scaler.state_dict()["_growth_tracker"]),
            "params": [w0.detach().flatten().tolist(), w1.detach().flatten().tolist()],
        })
    data = {
        "torch_version": torch.__version__,
        "options": OPTIONS,
        "lr": 0.05,
        "momentum": 0.9,
        "init": init,
        "steps": steps,
        "state_dict": {k: float(v) for k, v in scaler.state_dict().items()},
    }
    with open("tests/data/amp/grad_scaler.json", "w") as f:
        json.dump(data, f, indent=1)
        f.write("\n")


if __name__ == "__main__":
    main()
