#!/usr/bin/python3
# tests/make_distill_reference.py: reference values for tests/test_distill.cpp, made with
# PyTorch (Debian's 1.13 is enough: probability targets and label_smoothing exist since 1.10):
#   /usr/bin/python3 tests/make_distill_reference.py  ->  tests/data/distill/reference.json
# Three groups, all in F64 so the comparison can be tight:
#   distill: Hinton's loss as PyTorch users write it,
#            alpha * T^2 * kl_div(log_softmax(s / T), softmax(t / T), 'batchmean')
#            + (1 - alpha) * cross_entropy(s, y, label_smoothing), value and d/ds;
#   cross_entropy: F.cross_entropy with probability targets (weight, label_smoothing, each
#            reduction, (N, C), (N, C, H, W) and (C) logits), value and d/dlogits, d/dtarget;
#   kl_div: F.kl_div for each reduction (batchmean included), log_target or not, d/dinput.
# Gradients of a non-scalar result are of sum(result * cot) with the stored cotangent `cot`.
import json
import warnings

import torch
import torch.nn.functional as F

torch.manual_seed(0)
DT = torch.float64


def flat(t):
    return t.detach().reshape(-1).tolist()


def tensor_json(t):
    return {"shape": list(t.shape), "data": flat(t)}


def scalar_or_cot(out):
    """The scalar to differentiate, and the cotangent used (None for a scalar output)."""
    if out.dim() == 0:
        return out, None
    cot = torch.randn(out.shape, dtype=DT)
    return (out * cot).sum(), cot


def distill_case(shape, temperature, alpha, label_smoothing, int_target=True):
    n, c = shape[0], shape[1]
    s = (torch.randn(shape, dtype=DT) * 3).requires_grad_(True)
    t = torch.randn(shape, dtype=DT) * 4
    target_shape = (n,) + tuple(shape[2:])
    y = torch.randint(0, c, target_shape)
    soft = F.kl_div(F.log_softmax(s / temperature, 1), F.softmax(t / temperature, 1), reduction="batchmean")
    soft = soft * temperature * temperature
    hard = F.cross_entropy(s, y, label_smoothing=label_smoothing)
    loss = alpha * soft + (1 - alpha) * hard
    loss.backward()
    return {
        "student": tensor_json(s),
        "teacher": tensor_json(t),
        "target": tensor_json(y),
        "temperature": temperature,
        "alpha": alpha,
        "label_smoothing": label_smoothing,
        "soft": soft.item(),
        "hard": hard.item(),
        "loss": loss.item(),
        "grad_student": flat(s.grad),
    }


def ce_case(name, shape, reduction, use_weight, label_smoothing, normalized=True):
    class_dim = 0 if len(shape) == 1 else 1
    c = shape[class_dim]
    x = (torch.randn(shape, dtype=DT) * 2).requires_grad_(True)
    if normalized:
        p = F.softmax(torch.randn(shape, dtype=DT) * 2, class_dim)
    else:  # PyTorch does not normalize soft targets: any floats are taken as they are
        p = torch.rand(shape, dtype=DT) * 1.5
    p.requires_grad_(True)
    w = torch.rand(c, dtype=DT) + 0.25 if use_weight else None
    out = F.cross_entropy(x, p, weight=w, reduction=reduction, label_smoothing=label_smoothing)
    scalar, cot = scalar_or_cot(out)
    scalar.backward()
    case = {
        "name": name,
        "logits": tensor_json(x),
        "target": tensor_json(p),
        "reduction": reduction,
        "label_smoothing": label_smoothing,
        "out": tensor_json(out),
        "grad_logits": flat(x.grad),
        "grad_target": flat(p.grad),
    }
    if w is not None:
        case["weight"] = flat(w)
    if cot is not None:
        case["cot"] = flat(cot)
    return case


def kl_case(shape, reduction, log_target):
    x = F.log_softmax(torch.randn(shape, dtype=DT) * 2, -1).detach().requires_grad_(True)
    if log_target:
        tgt = F.log_softmax(torch.randn(shape, dtype=DT) * 2, -1)
    else:
        tgt = F.softmax(torch.randn(shape, dtype=DT) * 2, -1)
        tgt.view(-1)[::5] = 0.0  # zeros: t log t is 0 there (xlogy)
    out = F.kl_div(x, tgt, reduction=reduction, log_target=log_target)
    scalar, cot = scalar_or_cot(out)
    scalar.backward()
    case = {
        "input": tensor_json(x),
        "target": tensor_json(tgt),
        "reduction": reduction,
        "log_target": log_target,
        "out": tensor_json(out),
        "grad_input": flat(x.grad),
    }
    if cot is not None:
        case["cot"] = flat(cot)
    return case


def main():
    warnings.filterwarnings("ignore", message="reduction: .mean. divides")
    distill = []
    for temperature, alpha, ls in [(1.0, 0.5, 0.0), (2.0, 0.9, 0.0), (4.0, 0.9, 0.1), (4.0, 1.0, 0.0),
                                   (3.0, 0.0, 0.0), (0.5, 0.3, 0.0), (8.0, 0.7, 0.0)]:
        distill.append(distill_case((6, 5), temperature, alpha, ls))
    distill.append(distill_case((2, 4, 3, 2), 2.0, 0.8, 0.0))  # classes on dim 1, batchmean over N

    ce = []
    for reduction in ["none", "mean", "sum"]:
        for use_weight in [False, True]:
            for ls in [0.0, 0.2]:
                name = f"(5, 4) {reduction}{' weight' if use_weight else ''}{f' ls {ls}' if ls else ''}"
                ce.append(ce_case(name, (5, 4), reduction, use_weight, ls))
    ce.append(ce_case("(5, 4) unnormalized targets", (5, 4), "mean", False, 0.0, normalized=False))
    for reduction in ["none", "mean", "sum"]:
        ce.append(ce_case(f"(2, 3, 2, 3) {reduction} weight ls 0.1", (2, 3, 2, 3), reduction, True, 0.1))
    ce.append(ce_case("(2, 3, 2, 3) mean", (2, 3, 2, 3), "mean", False, 0.0))
    ce.append(ce_case("(6) one sample", (6,), "mean", True, 0.15))
    ce.append(ce_case("(6) one sample none", (6,), "none", False, 0.0))

    kl = []
    for reduction in ["none", "sum", "mean", "batchmean"]:
        for log_target in [False, True]:
            kl.append(kl_case((4, 5), reduction, log_target))
    kl.append(kl_case((2, 3, 4), "batchmean", False))

    ref = {"torch": torch.__version__, "distill": distill, "cross_entropy": ce, "kl_div": kl}
    path = "tests/data/distill/reference.json"
    with open(path, "w") as f:
        json.dump(ref, f)
        f.write("\n")
    print(f"{path}: {len(distill)} distill, {len(ce)} cross_entropy, {len(kl)} kl_div cases")


if __name__ == "__main__":
    main()
