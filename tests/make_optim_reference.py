# tests/make_optim_reference.py: writes the PyTorch reference data that tests/test_optim.cpp
# checks brisk's optimizers, LR schedulers and gradient clipping against. Run by hand:
#   /usr/bin/python3 tests/make_optim_reference.py
# (Debian's torch; any torch >= 1.13 works, the version used is written into each file).
# Optimizers: two small float64 tensors given literally, 20 steps with gradients from a fixed
# formula (stored in the file, so the C++ side needs no math of its own), the weights after
# every step. Schedulers: the LR (and momentum) of two parameter groups over 100 steps.
# Not here: anything brisk itself runs; this script is never part of the build or the tests.
import json
import math
import os

import torch

torch.set_num_threads(1)
torch.set_default_dtype(torch.float64)

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data", "optim")
STEPS = 20
SCHED_STEPS = 100

A0 = [0.5, -1.25, 2.0, 0.75, -0.3]
B0 = [[1.5, -0.5], [0.25, 3.0], [-2.0, 0.1]]


def grads_at(t):
    # grad_t[i] = sin(t + i) * (1 + i / 4), i runs over a's 5 then b's 6 values.
    flat = [math.sin(t + i) * (1.0 + i / 4.0) for i in range(11)]
    return flat[:5], flat[5:]


def make_params():
    a = torch.tensor(A0, requires_grad=True)
    b = torch.tensor(B0, requires_grad=True)
    return a, b


# brisk option names -> torch keyword arguments.
def torch_kwargs(name, options):
    kw = {}
    for key, value in options.items():
        if key in ("beta1", "beta2"):
            continue
        kw[key] = value
    if "beta1" in options or "beta2" in options:
        kw["betas"] = (options.get("beta1", 0.9), options.get("beta2", 0.999))
    kw["foreach"] = False
    return kw


OPTIMIZERS = {
    "SGD": torch.optim.SGD,
    "Adam": torch.optim.Adam,
    "AdamW": torch.optim.AdamW,
    "RMSprop": torch.optim.RMSprop,
    "Adagrad": torch.optim.Adagrad,
}

# (optimizer, options for both groups, lr of group 1 (b), steps at which b gets no gradient)
OPTIMIZER_CASES = [
    ("SGD", {"lr": 0.1}, None, []),
    ("SGD", {"lr": 0.1, "momentum": 0.9}, 0.05, []),
    ("SGD", {"lr": 0.05, "momentum": 0.9, "dampening": 0.1, "weight_decay": 0.01}, None, []),
    ("SGD", {"lr": 0.05, "momentum": 0.9, "nesterov": True, "weight_decay": 0.01}, 0.02, []),
    ("SGD", {"lr": 0.1, "momentum": 0.5, "maximize": True}, None, [5, 6, 7]),
    ("Adam", {"lr": 0.01}, None, []),
    ("Adam", {"lr": 0.01, "weight_decay": 0.1}, 0.02, []),
    ("Adam", {"lr": 0.01, "amsgrad": True}, None, [5, 6, 7]),
    ("Adam", {"lr": 0.02, "maximize": True}, None, []),
    ("Adam", {"lr": 0.01, "beta1": 0.8, "beta2": 0.99, "eps": 1e-6, "weight_decay": 0.05, "amsgrad": True}, 0.005, []),
    ("AdamW", {"lr": 0.01}, None, []),
    ("AdamW", {"lr": 0.01, "weight_decay": 0.1, "amsgrad": True}, 0.02, [3, 4]),
    ("AdamW", {"lr": 0.01, "maximize": True, "beta1": 0.7}, None, []),
    ("RMSprop", {"lr": 0.01}, None, []),
    ("RMSprop", {"lr": 0.01, "centered": True}, 0.005, []),
    ("RMSprop", {"lr": 0.01, "momentum": 0.9}, None, [5, 6, 7]),
    ("RMSprop", {"lr": 0.01, "centered": True, "momentum": 0.5, "weight_decay": 0.1}, None, []),
    ("RMSprop", {"lr": 0.02, "alpha": 0.9, "eps": 1e-6, "maximize": True}, None, []),
    ("Adagrad", {"lr": 0.1}, None, []),
    ("Adagrad", {"lr": 0.1, "lr_decay": 0.01}, 0.05, []),
    ("Adagrad", {"lr": 0.1, "weight_decay": 0.1, "initial_accumulator_value": 0.1}, None, [5, 6, 7]),
    ("Adagrad", {"lr": 0.05, "eps": 1e-3, "maximize": True}, None, []),
]


def run_optimizer(name, options, lr_b, skip_b):
    a, b = make_params()
    group_b = {"params": [b]}
    if lr_b is not None:
        group_b["lr"] = lr_b
    opt = OPTIMIZERS[name]([{"params": [a]}, group_b], **torch_kwargs(name, options))
    trajectory = []
    for t in range(STEPS):
        ga, gb = grads_at(t)
        a.grad = torch.tensor(ga)
        b.grad = None if t in skip_b else torch.tensor(gb).reshape(3, 2)
        opt.step()
        trajectory.append({"a": a.detach().flatten().tolist(), "b": b.detach().flatten().tolist()})
    return trajectory


def optimizer_data():
    cases = []
    for name, options, lr_b, skip_b in OPTIMIZER_CASES:
        cases.append({
            "optimizer": name,
            "options": options,
            "lr_b": lr_b,
            "skip_b": skip_b,
            "trajectory": run_optimizer(name, options, lr_b, skip_b),
        })
    grads = []
    for t in range(STEPS):
        ga, gb = grads_at(t)
        grads.append({"a": ga, "b": gb})
    return {
        "torch_version": torch.__version__,
        "dtype": "float64",
        "steps": STEPS,
        "a": A0,
        "b": [v for row in B0 for v in row],
        "grads": grads,
        "cases": cases,
    }


# ---- schedulers: two groups, lr 0.1 and 0.05.
def make_opt(kind):
    a, b = make_params()
    groups = [{"params": [a]}, {"params": [b], "lr": 0.05}]
    if kind == "SGD":
        return torch.optim.SGD(groups, lr=0.1, momentum=0.9)
    return torch.optim.Adam(groups, lr=0.1, betas=(0.9, 0.999))


def momentum_of(opt, group):
    if "betas" in group:
        return group["betas"][0]
    return group["momentum"]


def plateau_metric(t):
    # Falls for 30 steps, then sits on plateaus with small wiggles, then falls again.
    if t < 30:
        return 10.0 - 0.25 * t
    if t < 70:
        return 2.5 + 0.001 * ((t * 7) % 5)
    return 2.5 - 0.2 * (t - 70) / 30.0


def sched(spec):
    kind = spec.get("opt", "SGD")
    opt = make_opt(kind)
    s = spec["name"]
    a = spec.get("args", {})
    L = torch.optim.lr_scheduler
    if s == "StepLR":
        sch = L.StepLR(opt, **a)
    elif s == "MultiStepLR":
        sch = L.MultiStepLR(opt, **a)
    elif s == "ExponentialLR":
        sch = L.ExponentialLR(opt, **a)
    elif s == "CosineAnnealingLR":
        sch = L.CosineAnnealingLR(opt, **a)
    elif s == "CosineAnnealingWarmRestarts":
        sch = L.CosineAnnealingWarmRestarts(opt, **a)
    elif s == "CyclicLR":
        sch = L.CyclicLR(opt, **a)
    elif s == "OneCycleLR":
        sch = L.OneCycleLR(opt, **a)
    elif s == "PolynomialLR":
        sch = L.PolynomialLR(opt, **a)
    elif s == "LinearLR":
        sch = L.LinearLR(opt, **a)
    elif s == "ConstantLR":
        sch = L.ConstantLR(opt, **a)
    elif s == "LambdaLR":
        fns = {
            "pow095": lambda e: 0.95 ** e,
            "inv": lambda e: 1.0 / (1.0 + 0.1 * e),
        }
        sch = L.LambdaLR(opt, [fns[f] for f in a["lambdas"]])
    elif s == "SequentialLR":
        subs = [make_sub(opt, sub) for sub in a["schedulers"]]
        sch = L.SequentialLR(opt, subs, milestones=a["milestones"])
    elif s == "ChainedScheduler":
        subs = [make_sub(opt, sub) for sub in a["schedulers"]]
        sch = L.ChainedScheduler(subs)
    elif s == "ReduceLROnPlateau":
        sch = L.ReduceLROnPlateau(opt, **a)
    else:
        raise ValueError(s)
    lrs = []
    momenta = []

    def record():
        lrs.append([g["lr"] for g in opt.param_groups])
        momenta.append([momentum_of(opt, g) for g in opt.param_groups])

    record()
    metrics = []
    for t in range(SCHED_STEPS):
        if s == "ReduceLROnPlateau":
            m = plateau_metric(t)
            if a.get("mode") == "max":
                m = -m
            metrics.append(m)
            sch.step(m)
        else:
            sch.step()
        record()
    out = dict(spec)
    out["lr"] = lrs
    out["momentum"] = momenta
    if metrics:
        out["metrics"] = metrics
    return out


def make_sub(opt, sub):
    L = torch.optim.lr_scheduler
    return getattr(L, sub["name"])(opt, **sub["args"])


SCHEDULER_CASES = [
    {"name": "StepLR", "args": {"step_size": 7, "gamma": 0.5}},
    {"name": "MultiStepLR", "args": {"milestones": [10, 25, 25, 60], "gamma": 0.3}},
    {"name": "ExponentialLR", "args": {"gamma": 0.97}},
    {"name": "CosineAnnealingLR", "args": {"T_max": 30, "eta_min": 0.001}},
    {"name": "CosineAnnealingLR", "args": {"T_max": 100}},
    {"name": "CosineAnnealingWarmRestarts", "args": {"T_0": 10, "T_mult": 2, "eta_min": 1e-4}},
    {"name": "CosineAnnealingWarmRestarts", "args": {"T_0": 7}},
    {"name": "CyclicLR", "args": {"base_lr": 0.01, "max_lr": 0.1, "step_size_up": 10}},
    {"name": "CyclicLR", "args": {"base_lr": [0.01, 0.02], "max_lr": [0.1, 0.2], "step_size_up": 8,
                                  "step_size_down": 12, "mode": "triangular2"}},
    # torch 1.13's CyclicLR cycles SGD momentum only (Adam's beta1 came in 2.0): tested in C++.
    {"name": "CyclicLR", "args": {"base_lr": 0.001, "max_lr": 0.01, "step_size_up": 10,
                                                 "mode": "exp_range", "gamma": 0.98,
                                                 "base_momentum": 0.85, "max_momentum": 0.95}},
    {"name": "CyclicLR", "args": {"base_lr": 0.01, "max_lr": 0.1, "step_size_up": 5,
                                  "cycle_momentum": False}},
    {"name": "OneCycleLR", "args": {"max_lr": 0.1, "total_steps": 100}},
    {"name": "OneCycleLR", "opt": "Adam", "args": {"max_lr": [0.1, 0.05], "epochs": 10, "steps_per_epoch": 10,
                                                   "anneal_strategy": "linear", "three_phase": True,
                                                   "div_factor": 10.0, "final_div_factor": 100.0,
                                                   "pct_start": 0.25}},
    {"name": "OneCycleLR", "args": {"max_lr": 0.1, "total_steps": 120, "cycle_momentum": False,
                                    "pct_start": 0.4}},
    {"name": "LinearLR", "args": {"start_factor": 0.25, "end_factor": 1.0, "total_iters": 8}},
    {"name": "LinearLR", "args": {"start_factor": 1.0, "end_factor": 0.1, "total_iters": 50}},
    {"name": "ConstantLR", "args": {"factor": 0.5, "total_iters": 10}},
    {"name": "PolynomialLR", "args": {"total_iters": 40, "power": 2.0}},
    {"name": "LambdaLR", "args": {"lambdas": ["pow095", "inv"]}},
    {"name": "SequentialLR", "args": {"schedulers": [
        {"name": "LinearLR", "args": {"start_factor": 0.1, "end_factor": 1.0, "total_iters": 5}},
        {"name": "CosineAnnealingLR", "args": {"T_max": 95}}], "milestones": [5]}},
    {"name": "SequentialLR", "args": {"schedulers": [
        {"name": "ConstantLR", "args": {"factor": 0.1, "total_iters": 3}},
        {"name": "ExponentialLR", "args": {"gamma": 0.9}},
        {"name": "StepLR", "args": {"step_size": 10, "gamma": 0.5}}], "milestones": [3, 40]}},
    {"name": "ChainedScheduler", "args": {"schedulers": [
        {"name": "ExponentialLR", "args": {"gamma": 0.98}},
        {"name": "StepLR", "args": {"step_size": 20, "gamma": 0.5}}]}},
    {"name": "ReduceLROnPlateau", "args": {"mode": "min", "factor": 0.5, "patience": 3, "threshold": 1e-2,
                                           "cooldown": 2, "min_lr": [0.001, 0.01]}},
    {"name": "ReduceLROnPlateau", "args": {"mode": "max", "factor": 0.3, "patience": 5, "threshold": 0.05,
                                           "threshold_mode": "abs"}},
]


def clip_data():
    ga, gb = grads_at(3)
    cases = []
    for norm_type in [2.0, 1.0, 3.0, "inf"]:
        for max_norm in [1.0, 100.0]:
            a, b = make_params()
            a.grad = torch.tensor(ga)
            b.grad = torch.tensor(gb).reshape(3, 2)
            nt = math.inf if norm_type == "inf" else norm_type
            total = torch.nn.utils.clip_grad_norm_([a, b], max_norm, norm_type=nt)
            cases.append({
                "norm_type": norm_type,
                "max_norm": max_norm,
                "total_norm": total.item(),
                "a": a.grad.flatten().tolist(),
                "b": b.grad.flatten().tolist(),
            })
    a, b = make_params()
    a.grad = torch.tensor(ga)
    b.grad = torch.tensor(gb).reshape(3, 2)
    torch.nn.utils.clip_grad_value_([a, b], 0.5)
    value_case = {"clip_value": 0.5, "a": a.grad.flatten().tolist(), "b": b.grad.flatten().tolist()}
    return {"torch_version": torch.__version__, "a_grad": ga, "b_grad": gb, "norm": cases, "value": value_case}


def write(name, data):
    os.makedirs(OUT, exist_ok=True)
    path = os.path.join(OUT, name)
    with open(path, "w") as f:
        # One line per case keeps the files small and their diffs readable.
        f.write("{\n")
        items = list(data.items())
        for i, (key, value) in enumerate(items):
            if isinstance(value, list) and value and isinstance(value[0], dict):
                f.write(json.dumps(key) + ": [\n")
                f.write(",\n".join(json.dumps(v) for v in value))
                f.write("\n]")
            else:
                f.write(json.dumps(key) + ": " + json.dumps(value))
            f.write(",\n" if i + 1 < len(items) else "\n")
        f.write("}\n")
    print("wrote", path, os.path.getsize(path), "bytes")


if __name__ == "__main__":
    write("optimizers.json", optimizer_data())
    write("schedulers.json", {"torch_version": torch.__version__, "steps": SCHED_STEPS,
                              "cases": [sched(c) for c in SCHEDULER_CASES]})
    write("clip.json", clip_data())
