#!/usr/bin/python3
# tests/make_prune_reference.py: reference masks for tests/test_prune.cpp, made with
# torch.nn.utils.prune (Debian's PyTorch 1.13):
#   /usr/bin/python3 tests/make_prune_reference.py  ->  tests/data/prune/prune.json
# Weights are random but tie-free (every |w| and every channel norm distinct, checked here), so
# the selection does not depend on how torch.topk orders ties. Each case applies a sequence of
# pruning calls to one module and records the mask after each call (repeated calls compose as
# PyTorch's PruningContainer), plus state_dict keys, and the gradient of weight_orig.
# Values: F32 numbers printed exactly as doubles; masks as 0/1.
import json
import os

import torch
import torch.nn.utils.prune as prune


def flat(t):
    return t.detach().flatten().tolist()


def tie_free(w):
    a = w.detach().abs().flatten()
    assert len(set(a.tolist())) == a.numel(), "ties in |w|"


def distinct_norms(w, dim, n):
    dims = [d for d in range(w.dim()) if d != dim % w.dim()]
    norms = [v for v in torch.norm(w.detach(), p=n, dim=dims).tolist() if v != 0]
    assert len(set(norms)) == len(norms), "ties in channel norms"


def make(kind, shape):
    if kind == "linear":
        m = torch.nn.Linear(shape[1], shape[0])
    else:
        m = torch.nn.Conv2d(shape[1], shape[0], shape[2])
    with torch.no_grad():
        m.weight.copy_(torch.randn(shape))
        m.bias.copy_(torch.randn(shape[0]))
    tie_free(m.weight)
    return m


def run_case(name, kind, shape, steps):
    """steps: list of (method, kwargs); amount given as float or int."""
    m = make(kind, shape)
    case = {"name": name, "kind": kind, "shape": list(shape), "weight": flat(m.weight), "bias": flat(m.bias),
            "steps": []}
    for method, kw in steps:
        if method == "l1_unstructured":
            prune.l1_unstructured(m, "weight", amount=kw["amount"])
        elif method == "ln_structured":
            distinct_norms(m.weight, kw["dim"], kw["n"])
            prune.ln_structured(m, "weight", amount=kw["amount"], n=kw["n"], dim=kw["dim"])
        else:
            raise ValueError(method)
        step = dict(kw)
        step["method"] = method
        step["amount_is_count"] = isinstance(kw["amount"], int)
        step["mask"] = flat(m.weight_mask)
        case["steps"].append(step)
    case["state_dict_keys"] = list(m.state_dict().keys())
    return case


def main():
    torch.manual_seed(15)
    cases = []
    cases.append(run_case("l1 linear, repeated", "linear", (5, 7), [
        ("l1_unstructured", {"amount": 0.3}),
        ("l1_unstructured", {"amount": 0.5}),
        ("l1_unstructured", {"amount": 3}),
    ]))
    # round(0.25 * 10) = 2 and round(0.35 * 10) = 4 (3.5, half to even), then 0.5 of 4 alive.
    cases.append(run_case("l1 rounding", "linear", (5, 2), [
        ("l1_unstructured", {"amount": 0.25}),
    ]))
    cases.append(run_case("l1 rounding up", "linear", (5, 2), [
        ("l1_unstructured", {"amount": 0.35}),
        ("l1_unstructured", {"amount": 0.5}),
    ]))
    for n in (2, 1):
        for dim in (0, 1):
            cases.append(run_case(f"ln_structured n={n} dim={dim}", "conv", (6, 4, 3, 3), [
                ("ln_structured", {"amount": 0.34, "n": n, "dim": dim}),
                ("ln_structured", {"amount": 0.5, "n": n, "dim": dim}),
            ]))
    cases.append(run_case("ln_structured dim=-1 count", "conv", (6, 4, 3, 3), [
        ("ln_structured", {"amount": 1, "n": 2, "dim": -1}),
    ]))
    cases.append(run_case("l1 then ln_structured", "conv", (6, 4, 3, 3), [
        ("l1_unstructured", {"amount": 0.2}),
        ("ln_structured", {"amount": 0.5, "n": 2, "dim": 0}),
        ("l1_unstructured", {"amount": 0.3}),
    ]))

    # global_unstructured over three modules; the first linear already pruned once.
    conv = make("conv", (6, 4, 3, 3))
    fc1 = make("linear", (5, 7))
    fc2 = make("linear", (3, 5))
    all_w = torch.cat([flat_t.detach().abs().flatten() for flat_t in (conv.weight, fc1.weight, fc2.weight)])
    assert len(set(all_w.tolist())) == all_w.numel()
    glob = {"conv_weight": flat(conv.weight), "fc1_weight": flat(fc1.weight), "fc2_weight": flat(fc2.weight),
            "steps": []}
    prune.l1_unstructured(fc1, "weight", amount=0.2)
    glob["fc1_pre_mask"] = flat(fc1.weight_mask)
    params = [(conv, "weight"), (fc1, "weight"), (fc2, "weight")]
    for amount in (0.4, 0.25, 10):
        prune.global_unstructured(params, pruning_method=prune.L1Unstructured, amount=amount)
        glob["steps"].append({"amount": amount, "amount_is_count": isinstance(amount, int),
                              "conv_mask": flat(conv.weight_mask), "fc1_mask": flat(fc1.weight_mask),
                              "fc2_mask": flat(fc2.weight_mask)})

    # state_dict keys of a pruned Sequential, the gradient of weight_orig, and remove().
    seq = torch.nn.Sequential(make("conv", (4, 2, 3, 3)), torch.nn.ReLU(), torch.nn.Flatten(),
                              make("linear", (3, 16)))
    seq_state = {"conv_weight": flat(seq[0].weight), "conv_bias": flat(seq[0].bias),
                 "fc_weight": flat(seq[3].weight), "fc_bias": flat(seq[3].bias)}
    prune.l1_unstructured(seq[0], "weight", amount=0.5)
    prune.l1_unstructured(seq[3], "bias", amount=1)
    prune.ln_structured(seq[3], "weight", amount=0.5, n=1, dim=1)
    seq_state["keys_pruned"] = list(seq.state_dict().keys())
    x = torch.randn(2, 2, 4, 4)
    g = torch.randn(2, 3)
    y = seq(x)
    (y * g).sum().backward()
    seq_state["x"] = flat(x)
    seq_state["g"] = flat(g)
    seq_state["y"] = flat(y)
    seq_state["conv_mask"] = flat(seq[0].weight_mask)
    seq_state["fc_weight_mask"] = flat(seq[3].weight_mask)
    seq_state["fc_bias_mask"] = flat(seq[3].bias_mask)
    seq_state["conv_weight_orig_grad"] = flat(seq[0].weight_orig.grad)
    seq_state["fc_weight_orig_grad"] = flat(seq[3].weight_orig.grad)
    seq_state["fc_bias_orig_grad"] = flat(seq[3].bias_orig.grad)
    prune.remove(seq[3], "weight")
    seq_state["keys_after_remove"] = list(seq.state_dict().keys())

    out = {"torch_version": torch.__version__, "cases": cases, "global": glob, "sequential": seq_state}
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data", "prune", "prune.json")
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        json.dump(out, f)
    print("wrote", path, os.path.getsize(path), "bytes")


if __name__ == "__main__":
    main()
