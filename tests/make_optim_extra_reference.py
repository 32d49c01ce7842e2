# tests/make_optim_extra_reference.py: writes the PyTorch reference trajectories that
# tests/test_optim_extra.cpp checks brisk's NAdam, RAdam and Adamax against. Run by hand:
#   /work/venv-torch/bin/python tests/make_optim_extra_reference.py
# (needs torch >= 2.1: NAdam's and RAdam's decoupled_weight_decay are newer than Debian's 1.13).
# Same setup as tests/make_optim_reference.py: two float64 tensors in two parameter groups, 20
# steps with gradients from a fixed formula (stored in the file), the weights after every step.
# Not here: anything brisk itself runs; this script is never part of the build or the tests.
import json
import math
import os

import torch

torch.set_num_threads(1)
torch.set_default_dtype(torch.float64)

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data", "optim_extra")
STEPS = 20

A0 = [0.5, -1.25, 2.0, 0.75, -0.3]
B0 = [[1.5, -0.5], [0.25, 3.0], [-2.0, 0.1]]


def grads_at(t):
    # grad_t[i] = sin(t + i) * (1 + i / 4), i runs over a's 5 then b's 6 values. The first
    # gradient of a[0] is exactly 0 (Adamax's eps inside the max keeps its update finite).
    flat = [math.sin(t + i) * (1.0 + i / 4.0) for i in range(11)]
    return flat[:5], flat[5:]


OPTIMIZERS = {"NAdam": torch.optim.NAdam, "RAdam": torch.optim.RAdam, "Adamax": torch.optim.Adamax}

# (optimizer, options for both groups, lr of group 1 (b), steps at which b gets no gradient,
#  beta1 of both groups from step 10 on (a scheduler's change) or None)
CASES = [
    ("NAdam", {}, None, [], None),
    ("NAdam", {"lr": 0.01, "weight_decay": 0.1}, 0.02, [], None),
    ("NAdam", {"lr": 0.01, "weight_decay": 0.1, "decoupled_weight_decay": True}, None, [5, 6, 7], None),
    ("NAdam", {"lr": 0.02, "momentum_decay": 0.01, "beta1": 0.8, "beta2": 0.99, "eps": 1e-6}, None, [], None),
    ("NAdam", {"lr": 0.01, "maximize": True}, 0.005, [], None),
    ("NAdam", {"lr": 0.01}, None, [], 0.85),
    ("RAdam", {}, None, [], None),
    ("RAdam", {"lr": 0.01, "weight_decay": 0.1}, 0.02, [3, 4], None),
    ("RAdam", {"lr": 0.01, "weight_decay": 0.1, "decoupled_weight_decay": True}, None, [], None),
    # beta2 = 0.5: rho_inf = 3 < 5, the rectified branch never runs (SGD with momentum only).
    ("RAdam", {"lr": 0.02, "beta1": 0.8, "beta2": 0.5}, None, [], None),
    # beta2 = 0.9: rho_t passes 5 at step 6, both branches run.
    ("RAdam", {"lr": 0.02, "beta2": 0.9, "eps": 1e-6, "maximize": True}, 0.01, [], None),
    ("Adamax", {}, None, [], None),
    ("Adamax", {"lr": 0.02, "weight_decay": 0.1}, 0.01, [5, 6, 7], None),
    ("Adamax", {"lr": 0.02, "beta1": 0.8, "beta2": 0.9, "eps": 1e-3}, None, [], None),
    ("Adamax", {"lr": 0.02, "maximize": True}, None, [], None),
]


def torch_kwargs(options):
    kw = {k: v for k, v in options.items() if k not in ("beta1", "beta2")}
    if "beta1" in options or "beta2" in options:
        kw["betas"] = (options.get("beta1", 0.9), options.get("beta2", 0.999))
    kw["foreach"] = False
    return kw


def run(name, options, lr_b, skip_b, beta1_later):
    a = torch.tensor(A0, requires_grad=True)
    b = torch.tensor(B0, requires_grad=True)
    group_b = {"params": [b]}
    if lr_b is not None:
        group_b["lr"] = lr_b
    opt = OPTIMIZERS[name]([{"params": [a]}, group_b], **torch_kwargs(options))
    trajectory = []
    for t in range(STEPS):
        if beta1_later is not None and t == 10:
            for g in opt.param_groups:
                g["betas"] = (beta1_later, g["betas"][1])
        ga, gb = grads_at(t)
        a.grad = torch.tensor(ga)
        b.grad = None if t in skip_b else torch.tensor(gb).reshape(3, 2)
        opt.step()
        trajectory.append({"a": a.detach().flatten().tolist(), "b": b.detach().flatten().tolist()})
    return trajectory


def main():
    cases = []
    for name, options, lr_b, skip_b, beta1_later in CASES:
        cases.append({"optimizer": name, "options": options, "lr_b": lr_b, "skip_b": skip_b,
                      "beta1_from_step_10": beta1_later,
                      "trajectory": run(name, options, lr_b, skip_b, beta1_later)})
    grads = []
    for t in range(STEPS):
        ga, gb = grads_at(t)
        grads.append({"a": ga, "b": gb})
    data = {"torch_version": torch.__version__, "dtype": "float64", "steps": STEPS, "a": A0,
            "b": [v for row in B0 for v in row], "grads": grads, "cases": cases}
    os.makedirs(OUT, exist_ok=True)
    path = os.path.join(OUT, "optimizers.json")
    with open(path, "w") as f:
        f.write("{\n")
        items = list(data.items())
        for i, (key, value) in enumerate(items):
            if isinstance(value, list) and value and isinstance(value[0], dict):
                f.write(json.dumps(key) + ": [\n" + ",\n".join(json.dumps(v) for v in value) + "\n]")
            else:
                f.write(json.dumps(key) + ": " + json.dumps(value))
            f.write(",\n" if i + 1 < len(items) else "\n")
        f.write("}\n")
    print("wrote", path, os.path.getsize(path), "bytes")


if __name__ == "__main__":
    main()
