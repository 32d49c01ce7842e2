#!/usr/bin/env python3
# tests/make_edge_reference.py: the PyTorch side of the edge-value differential test
# (tests/test_pytorch_edge.cpp). For every differentiable op with a PyTorch counterpart it
# runs small cases full of edge values (0, -0, +-inf, NaN, denormals, huge and tiny
# magnitudes, ties) and broadcast / non-contiguous inputs in float32, and writes PyTorch's
# outputs and the gradients of a fixed upstream gradient to tests/data/edge/<family>.json.
# Run by hand (Debian's torch 1.13 is importable only from /usr/bin/python3):
#     /usr/bin/python3 tests/make_edge_reference.py
# Not here: tolerances and deliberate differences (the C++ test owns them); CI never runs this.
import json
import math
import os

import torch
import torch.nn.functional as F

torch.set_num_threads(1)
OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data", "edge")
NAN, INF = float("nan"), float("inf")
DEN = 1e-40  # a float32 denormal

# ------------------------------------------------------------------ encoding
# Values are JSON numbers (float32 values printed exactly as doubles) or the strings "nan",
# "inf", "-inf", so that -0.0, denormals and non-finite values survive the round trip.


def enc(v):
    v = float(v)
    if math.isnan(v):
        return "nan"
    if math.isinf(v):
        return "inf" if v > 0 else "-inf"
    return v


def dec(v):
    return float(v) if isinstance(v, str) else v


def enc_params(p):
    return {k: (enc(v) if isinstance(v, float) else v) for k, v in p.items()}


def tensor_record(t):
    t = t.detach()
    if t.dtype == torch.bool:
        return {"dtype": "bool", "shape": list(t.shape), "values": [int(v) for v in t.flatten().tolist()]}
    if t.dtype == torch.int64:
        return {"dtype": "i64", "shape": list(t.shape), "values": t.flatten().tolist()}
    return {"dtype": "f32", "shape": list(t.shape), "values": [enc(v) for v in t.float().flatten().tolist()]}


# ------------------------------------------------------------------ inputs
# An input is its base tensor (stored) and a layout that makes the view the op sees:
#   dense, t (the last two dims transposed), step2 (every other element of the last dim),
#   expand (the base broadcast to `to` by a stride-0 view). Gradients are of the base.


def inp(values, shape=None, dtype="f32", layout="dense", grad=None, to=None):
    flat = [float(v) for v in values] if dtype == "f32" else [int(v) for v in values]
    shape = list(shape) if shape is not None else [len(flat)]
    if dtype == "f32":  # the float32 values, exactly
        flat = [enc(v) for v in torch.tensor(flat, dtype=torch.float32).tolist()]
    rec = {"dtype": dtype, "shape": shape, "values": flat, "layout": layout,
           "grad": (dtype == "f32") if grad is None else grad}
    if to is not None:
        rec["to"] = list(to)
    return rec


def make_view(rec):
    tdt = {"f32": torch.float32, "i64": torch.int64, "bool": torch.bool}[rec["dtype"]]
    base = torch.tensor([dec(v) for v in rec["values"]], dtype=tdt).reshape(rec["shape"])
    if rec["grad"]:
        base.requires_grad_(True)
    layout = rec["layout"]
    if layout == "dense":
        view = base
    elif layout == "t":
        view = base.transpose(-2, -1)
    elif layout == "step2":
        view = base[..., ::2]
    elif layout == "expand":
        view = base.expand(rec["to"])
    else:
        raise ValueError(layout)
    return base, view


UPSTREAM = [1.0, -0.5, 2.0, 0.25, -1.5, 0.75, 3.0, -2.0]


def upstream_for(y):
    n = y.numel()
    vals = [UPSTREAM[i % len(UPSTREAM)] for i in range(n)]
    return torch.tensor(vals, dtype=y.dtype).reshape(y.shape)


# ------------------------------------------------------------------ ops
# Each op takes the input views and the params dict, as the C++ side's table does.

def reduction(p):
    return p.get("reduction", "mean")


OPS = {
    "neg": lambda x, p: torch.neg(x[0]),
    "exp": lambda x, p: torch.exp(x[0]),
    "log": lambda x, p: torch.log(x[0]),
    "log2": lambda x, p: torch.log2(x[0]),
    "sqrt": lambda x, p: torch.sqrt(x[0]),
    "rsqrt": lambda x, p: torch.rsqrt(x[0]),
    "abs": lambda x, p: torch.abs(x[0]),
    "sign": lambda x, p: torch.sign(x[0]),
    "square": lambda x, p: torch.square(x[0]),
    "relu": lambda x, p: torch.relu(x[0]),
    "gelu": lambda x, p: F.gelu(x[0]),
    "gelu_tanh": lambda x, p: F.gelu(x[0], approximate="tanh"),
    "sigmoid": lambda x, p: torch.sigmoid(x[0]),
    "tanh": lambda x, p: torch.tanh(x[0]),
    "silu": lambda x, p: F.silu(x[0]),
    "clamp": lambda x, p: torch.clamp(x[0], p["min"], p["max"]),
    "clamp_min": lambda x, p: torch.clamp_min(x[0], p["min"]),
    "clamp_max": lambda x, p: torch.clamp_max(x[0], p["max"]),
    "pow_scalar": lambda x, p: torch.pow(x[0], p["exponent"]),
    "add": lambda x, p: torch.add(x[0], x[1], alpha=p.get("alpha", 1.0)),
    "sub": lambda x, p: torch.sub(x[0], x[1], alpha=p.get("alpha", 1.0)),
    "mul": lambda x, p: torch.mul(x[0], x[1]),
    "div": lambda x, p: torch.div(x[0], x[1]),
    "pow": lambda x, p: torch.pow(x[0], x[1]),
    "maximum": lambda x, p: torch.maximum(x[0], x[1]),
    "minimum": lambda x, p: torch.minimum(x[0], x[1]),
    "eq": lambda x, p: torch.eq(x[0], x[1]),
    "ne": lambda x, p: torch.ne(x[0], x[1]),
    "lt": lambda x, p: torch.lt(x[0], x[1]),
    "le": lambda x, p: torch.le(x[0], x[1]),
    "gt": lambda x, p: torch.gt(x[0], x[1]),
    "ge": lambda x, p: torch.ge(x[0], x[1]),
    "where": lambda x, p: torch.where(x[0], x[1], x[2]),
    "masked_fill": lambda x, p: x[0].masked_fill(x[1], p["value"]),
    "sum": lambda x, p: torch.sum(x[0], p["dims"], keepdim=p["keepdim"]) if p["dims"] else torch.sum(x[0]),
    "nansum": lambda x, p: torch.nansum(x[0], p["dims"], keepdim=p["keepdim"]) if p["dims"] else torch.nansum(x[0]),
    "logcumsumexp": lambda x, p: torch.logcumsumexp(x[0], p["dim"]),
    "mean": lambda x, p: torch.mean(x[0], p["dims"], keepdim=p["keepdim"]) if p["dims"] else torch.mean(x[0]),
    "amax": lambda x, p: torch.amax(x[0], p["dims"], keepdim=p["keepdim"]),
    "amin": lambda x, p: torch.amin(x[0], p["dims"], keepdim=p["keepdim"]),
    "max_all": lambda x, p: torch.max(x[0]),
    "min_all": lambda x, p: torch.min(x[0]),
    "var": lambda x, p: torch.var(x[0], p["dims"] or None, correction=p["correction"], keepdim=p["keepdim"]),
    "std": lambda x, p: torch.std(x[0], p["dims"] or None, correction=p["correction"], keepdim=p["keepdim"]),
    "argmax": lambda x, p: torch.argmax(x[0], p["dim"], keepdim=p["keepdim"]),
    "argmin": lambda x, p: torch.argmin(x[0], p["dim"], keepdim=p["keepdim"]),
    "argmax_all": lambda x, p: torch.argmax(x[0]),
    "softmax": lambda x, p: torch.softmax(x[0], p["dim"]),
    "log_softmax": lambda x, p: torch.log_softmax(x[0], p["dim"]),
    "cross_entropy": lambda x, p: F.cross_entropy(
        x[0], x[1], weight=x[2] if len(x) > 2 else None, reduction=reduction(p),
        ignore_index=p.get("ignore_index", -100), label_smoothing=p.get("label_smoothing", 0.0)),
    # brisk's linear_cross_entropy (x, w, target[, bias]): the head fused into the loss
    "linear_cross_entropy": lambda x, p: F.cross_entropy(
        F.linear(x[0], x[1], x[3] if len(x) > 3 else None), x[2], reduction=reduction(p),
        ignore_index=p.get("ignore_index", -100), label_smoothing=p.get("label_smoothing", 0.0)),
    "nll_loss": lambda x, p: F.nll_loss(x[0], x[1], reduction=reduction(p), ignore_index=p.get("ignore_index", -100)),
    "mse_loss": lambda x, p: F.mse_loss(x[0], x[1], reduction=reduction(p)),
    "l1_loss": lambda x, p: F.l1_loss(x[0], x[1], reduction=reduction(p)),
    "smooth_l1_loss": lambda x, p: F.smooth_l1_loss(x[0], x[1], reduction=reduction(p), beta=p["beta"]),
    "bce_with_logits": lambda x, p: F.binary_cross_entropy_with_logits(
        x[0], x[1], weight=x[2] if p.get("weight") else None,
        pos_weight=x[-1] if p.get("pos_weight") else None, reduction=reduction(p)),
    "kl_div": lambda x, p: F.kl_div(x[0], x[1], reduction=reduction(p), log_target=p["log_target"]),
    "matmul": lambda x, p: torch.matmul(x[0], x[1]),
    "linear": lambda x, p: F.linear(x[0], x[1], x[2]),
    "linear_nobias": lambda x, p: F.linear(x[0], x[1]),
    # brisk's linear_in_out: the weight stored (in, out), as Hugging Face's Conv1D (x @ w + b)
    "linear_in_out": lambda x, p: F.linear(x[0], x[1].t(), x[2]),
    # brisk's linear_gelu: gelu(linear(x, w, b)) as one op (tanh: the tanh form)
    "linear_gelu": lambda x, p: F.gelu(F.linear(x[0], x[1], x[2] if len(x) > 2 else None),
                                       approximate="tanh" if p["tanh"] else "none"),
    "cat": lambda x, p: torch.cat(x, p["dim"]),
    "stack": lambda x, p: torch.stack(x, p["dim"]),
    "index_select": lambda x, p: torch.index_select(x[0], p["dim"], x[1]),
    "gather": lambda x, p: torch.gather(x[0], p["dim"], x[1]),
    "scatter_add": lambda x, p: torch.scatter_add(x[0], p["dim"], x[1], x[2]),
    "index_add": lambda x, p: torch.index_add(x[0], p["dim"], x[1], x[2]),
    "embedding": lambda x, p: F.embedding(x[0], x[1]),
    "conv2d": lambda x, p: F.conv2d(x[0], x[1], x[2] if len(x) > 2 else None, stride=p["stride"],
                                    padding=p["padding"], dilation=p["dilation"], groups=p["groups"]),
    "max_pool2d": lambda x, p: F.max_pool2d(x[0], p["kernel"], p["stride"], p["padding"], p["dilation"],
                                            ceil_mode=p["ceil_mode"], return_indices=True),
    "avg_pool2d": lambda x, p: F.avg_pool2d(x[0], p["kernel"], p["stride"], p["padding"], ceil_mode=p["ceil_mode"],
                                            count_include_pad=p["count_include_pad"]),
    "adaptive_avg_pool2d": lambda x, p: F.adaptive_avg_pool2d(x[0], p["output_size"]),
    "layer_norm": lambda x, p: F.layer_norm(x[0], p["normalized_shape"], x[1] if len(x) > 1 else None,
                                            x[2] if len(x) > 2 else None, eps=p["eps"]),
    "group_norm": lambda x, p: F.group_norm(x[0], p["groups"], x[1], x[2], eps=p["eps"]),
}


def batch_norm(x, p):
    rm, rv = x[3].detach().clone(), x[4].detach().clone()
    y = F.batch_norm(x[0], rm, rv, x[1], x[2], training=p["training"], momentum=p["momentum"], eps=p["eps"])
    return y, rm, rv  # the running statistics after the call


OPS["batch_norm"] = batch_norm


def run_case(op, name, inputs, params=None):
    params = params or {}
    views, bases = [], []
    for rec in inputs:
        base, view = make_view(rec)
        bases.append(base)
        views.append(view)
    out = OPS[op](views, params)
    outs = list(out) if isinstance(out, tuple) else [out]
    case = {"op": op, "case": name, "params": enc_params(params), "inputs": inputs,
            "outputs": [tensor_record(o) for o in outs]}
    y = outs[0]
    wants = [b for b, rec in zip(bases, inputs) if rec["grad"]]
    if y.requires_grad and wants:
        g = upstream_for(y)
        grads = torch.autograd.grad(y, wants, g, allow_unused=True)
        case["upstream"] = tensor_record(g)
        it = iter(grads)
        case["grads"] = [None if not rec["grad"] else
                         (lambda gr: None if gr is None else tensor_record(gr))(next(it)) for rec in inputs]
    return case


# ------------------------------------------------------------------ cases
U = [0.0, -0.0, 1.0, -1.0, 0.5, -2.5, INF, -INF, NAN, DEN, -DEN, 1e-30, 3e38, -3e38, 20.0, -20.0, 90.0, -90.0,
     1e-4, 7.0]
B = [0.0, -0.0, 1.0, -2.0, 0.5, INF, -INF, NAN, DEN, 3e38]
PAIRS_A = [a for a in B for _ in B]
PAIRS_B = [b for _ in B for b in B]


def elementwise_cases():
    cases = []
    unary = ["neg", "exp", "log", "log2", "sqrt", "rsqrt", "abs", "sign", "square", "relu", "gelu", "gelu_tanh", "sigmoid",
             "tanh", "silu"]
    for op in unary:
        cases.append(run_case(op, "edge values", [inp(U)]))
        cases.append(run_case(op, "transposed (5, 4)", [inp(U, [4, 5], layout="t")]))
    cases.append(run_case("relu", "every other element", [inp(U + U, [4, 10], layout="step2")]))
    cases.append(run_case("exp", "every other element", [inp(U + U, [4, 10], layout="step2")]))
    for lo, hi in [(-1.0, 1.0), (0.0, 0.0), (-INF, 0.5), (1e-30, 3e38)]:
        cases.append(run_case("clamp", f"[{lo}, {hi}]", [inp(U)], {"min": lo, "max": hi}))
    cases.append(run_case("clamp", "[-1, 1] transposed", [inp(U, [4, 5], layout="t")], {"min": -1.0, "max": 1.0}))
    cases.append(run_case("clamp_min", "0 (relu-like)", [inp(U)], {"min": 0.0}))
    cases.append(run_case("clamp_max", "-0.5", [inp(U)], {"max": -0.5}))
    for e in [0.0, 1.0, 2.0, 3.0, 0.5, -0.5, -1.0, -2.0, 1.5, 2.5, -3.0]:
        cases.append(run_case("pow_scalar", f"exponent {e}", [inp(U)], {"exponent": e}))
    binary = ["add", "sub", "mul", "div", "pow", "maximum", "minimum", "eq", "ne", "lt", "le", "gt", "ge"]
    bc_a = [1.0, 0.0, NAN]
    bc_b = [0.0, 1.0, -INF, 2.0]
    t_a = [0.5, -1.0, 2.0, 2.0, 0.0, 3.0, -0.0, 1e-30, 1.0, 4.0, -2.0, 0.25]
    t_b = [0.5, 1.0, -2.0, 2.0, 0.0, 1.0, 0.0, 1e-30, 1.0, 4.0, 2.0, 0.5]
    for op in binary:
        cases.append(run_case(op, "all pairs of edge values", [inp(PAIRS_A), inp(PAIRS_B)]))
        cases.append(run_case(op, "broadcast (3, 1) with (4)", [inp(bc_a, [3, 1]), inp(bc_b)]))
        cases.append(run_case(op, "transposed (4, 3) with (4, 3)", [inp(t_a, [3, 4], layout="t"), inp(t_b, [4, 3])]))
    cases.append(run_case("add", "alpha 2.5", [inp(PAIRS_A), inp(PAIRS_B)], {"alpha": 2.5}))
    cases.append(run_case("sub", "alpha -3", [inp(PAIRS_A), inp(PAIRS_B)], {"alpha": -3.0}))
    cases.append(run_case("maximum", "expanded (3, 4) from (3, 1)", [inp([NAN, 1.0, 0.0], [3, 1], layout="expand",
                                                                          to=[3, 4]), inp(t_b, [3, 4])]))
    cond = [1, 0] * 10
    cases.append(run_case("where", "edge values on both sides", [inp(cond, dtype="bool"), inp(U), inp(U[::-1])]))
    cases.append(run_case("where", "broadcast cond (3, 1), x (4), y 0-dim",
                          [inp([1, 0, 1], [3, 1], dtype="bool"), inp([NAN, INF, -0.0, 2.0]), inp([-INF], [])]))
    mask = [(i % 3) == 0 for i in range(20)]
    for v in [0.0, NAN, -INF, 3e38]:
        cases.append(run_case("masked_fill", f"value {v}", [inp(U), inp(mask, dtype="bool")], {"value": v}))
    cases.append(run_case("masked_fill", "broadcast mask (5) over transposed (4, 5)",
                          [inp(U, [5, 4], layout="t"), inp([1, 0, 0, 1, 0], dtype="bool")], {"value": -INF}))
    return cases


# rows: NaN first and later, ties, infinities of both signs, signed zeros and denormals, huge values
R = [[1.0, NAN, 3.0, NAN, 2.0],
     [2.0, 2.0, -INF, 1.0, 2.0],
     [INF, -INF, 0.0, -0.0, DEN],
     [3e38, 3e38, 1.0, -1.0, 0.0],
     [-0.0, 0.0, -0.0, 0.0, -0.0],
     [5.0, 5.0, 5.0, 5.0, 5.0]]
R_FLAT = [v for row in R for v in row]
# finite rows for the statistics: constant, huge, tiny, mixed
S = [[1.0, 1.0, 1.0, 1.0], [1e20, -1e20, 1e20, 3.0], [1e-30, -1e-30, 0.0, 1e-30], [0.5, 2.0, -1.5, 4.0],
     [INF, 1.0, 2.0, 3.0], [NAN, 1.0, 2.0, 3.0]]
S_FLAT = [v for row in S for v in row]


def reduce_cases():
    cases = []
    for op in ["sum", "mean", "amax", "amin"]:
        for dims, keep in [([1], False), ([0], False), ([1], True), ([], False), ([0, 1], True)]:
            cases.append(run_case(op, f"(6, 5) over {dims} keepdim {keep}", [inp(R_FLAT, [6, 5])],
                                  {"dims": dims, "keepdim": keep}))
        cases.append(run_case(op, "transposed (5, 6) over [0]", [inp(R_FLAT, [6, 5], layout="t")],
                              {"dims": [0], "keepdim": False}))
    # (3e38 + 3e38) - 3e38 is inf or 3e38 by summation order: only order-free overflow is compared.
    cases.append(run_case("sum", "overflow to inf", [inp([3e38, 3e38, 1.0])], {"dims": [], "keepdim": False}))
    cases.append(run_case("amax", "ties of the row maximum only", [inp([1.0, 3.0, 3.0, 3.0, 2.0], [1, 5])],
                          {"dims": [1], "keepdim": False}))
    cases.append(run_case("amax", "no NaN, over everything", [inp([1.0, 3.0, 3.0, -INF, 2.0, 3.0], [2, 3])],
                          {"dims": [], "keepdim": False}))
    for op in ["max_all", "min_all"]:
        cases.append(run_case(op, "with NaN", [inp(R_FLAT, [6, 5])]))
        cases.append(run_case(op, "ties, no NaN", [inp([2.0, 5.0, 5.0, -INF, 5.0, 1.0], [2, 3])]))
    for op in ["var", "std"]:
        for dims, corr in [([1], 1), ([1], 0), ([0], 1), ([], 1)]:
            cases.append(run_case(op, f"(6, 4) over {dims} correction {corr}", [inp(S_FLAT, [6, 4])],
                                  {"dims": dims, "correction": corr, "keepdim": False}))
        cases.append(run_case(op, "denormal row", [inp([DEN, -DEN, 0.0, DEN], [1, 4])],
                              {"dims": [1], "correction": 1, "keepdim": False}))
        cases.append(run_case(op, "one element, correction 1", [inp([2.0], [1, 1])],
                              {"dims": [1], "correction": 1, "keepdim": False}))
        cases.append(run_case(op, "transposed (4, 6) over [0]", [inp(S_FLAT, [6, 4], layout="t")],
                              {"dims": [0], "correction": 1, "keepdim": True}))
    for op in ["argmax", "argmin"]:
        cases.append(run_case(op, "(6, 5) over 1", [inp(R_FLAT, [6, 5])], {"dim": 1, "keepdim": False}))
        cases.append(run_case(op, "(6, 5) over 0 keepdim", [inp(R_FLAT, [6, 5])], {"dim": 0, "keepdim": True}))
        cases.append(run_case(op, "transposed (5, 6) over 1", [inp(R_FLAT, [6, 5], layout="t")],
                              {"dim": 1, "keepdim": False}))
    cases.append(run_case("argmax_all", "first NaN", [inp(R_FLAT, [6, 5])]))
    cases.append(run_case("argmax_all", "first of tied maxima", [inp([1.0, 4.0, -INF, 4.0], [2, 2])]))
    sm = [[1.0, 2.0, 3.0], [-INF, 0.0, 1.0], [-INF, -INF, -INF], [INF, 0.0, 1.0], [NAN, 0.0, 1.0],
          [1e30, -1e30, 0.0], [88.0, 89.0, 90.0], [0.0, 0.0, 0.0], [-100.0, 0.0, DEN]]
    sm_flat = [v for row in sm for v in row]
    for op in ["softmax", "log_softmax"]:
        cases.append(run_case(op, "rows of edge values, dim 1", [inp(sm_flat, [9, 3])], {"dim": 1}))
        cases.append(run_case(op, "transposed (3, 9), dim 0", [inp(sm_flat, [9, 3], layout="t")], {"dim": 0}))
        cases.append(run_case(op, "dim -1 of (3, 2, 3)", [inp(sm_flat[:18], [3, 2, 3])], {"dim": -1}))
    # the exercise ops of issue 47 (docs/DECISIONS.md, Note [Adding an op, counted])
    for dims, keep in [([1], False), ([0], True), ([], False)]:
        cases.append(run_case("nansum", f"(6, 5) over {dims} keepdim {keep}", [inp(R_FLAT, [6, 5])],
                              {"dims": dims, "keepdim": keep}))
    cases.append(run_case("nansum", "transposed (5, 6) over [0]", [inp(R_FLAT, [6, 5], layout="t")],
                          {"dims": [0], "keepdim": False}))
    cases.append(run_case("nansum", "only NaN", [inp([NAN, NAN, NAN])], {"dims": [], "keepdim": False}))
    lc = [[1.0, 2.0, 3.0], [-INF, 0.0, 1.0], [-INF, -INF, -INF], [INF, 0.0, 1.0], [NAN, 0.0, 1.0],
          [1e30, -1e30, 0.0], [88.0, 89.0, 90.0], [0.0, 0.0, 0.0], [-100.0, 0.0, DEN], [3e38, 3e38, 1.0]]
    lc_flat = [v for row in lc for v in row]
    cases.append(run_case("logcumsumexp", "rows of edge values, dim 1", [inp(lc_flat, [10, 3])], {"dim": 1}))
    cases.append(run_case("logcumsumexp", "transposed (3, 10), dim 0", [inp(lc_flat, [10, 3], layout="t")],
                          {"dim": 0}))
    cases.append(run_case("logcumsumexp", "dim -1 of (3, 2, 3)", [inp(lc_flat[:18], [3, 2, 3])],
                          {"dim": -1}))
    return cases


def loss_cases():
    cases = []
    logits = [[1.0, 2.0, 3.0, 4.0], [1e30, 0.0, -1e30, 1.0], [0.0, 0.0, 0.0, 0.0], [-INF, 1.0, 2.0, 0.0],
              [50.0, -50.0, 100.0, 0.0], [DEN, -DEN, 0.0, 1e-30]]
    lf = [v for row in logits for v in row]
    target = [3, 0, 2, 1, 2, 0]
    for red in ["mean", "sum", "none"]:
        for eps in [0.0, 0.1]:
            cases.append(run_case("cross_entropy", f"{red}, smoothing {eps}",
                                  [inp(lf, [6, 4]), inp(target, dtype="i64")],
                                  {"reduction": red, "label_smoothing": eps}))
    with_ignore = [3, -100, 2, 1, -100, 0]
    cases.append(run_case("cross_entropy", "ignore_index -100, mean",
                          [inp(lf, [6, 4]), inp(with_ignore, dtype="i64")], {"reduction": "mean"}))
    cases.append(run_case("cross_entropy", "ignore_index 2, smoothing 0.2, mean",
                          [inp(lf, [6, 4]), inp(target, dtype="i64")],
                          {"reduction": "mean", "ignore_index": 2, "label_smoothing": 0.2}))
    cases.append(run_case("cross_entropy", "every row ignored, mean",
                          [inp(lf[:8], [2, 4]), inp([-100, -100], dtype="i64")], {"reduction": "mean"}))
    cases.append(run_case("cross_entropy", "transposed logits (6, 4)",
                          [inp(lf, [4, 6], layout="t"), inp(target, dtype="i64")], {"reduction": "mean"}))
    cases.append(run_case("cross_entropy", "class weights, smoothing 0.1, ignore -100",
                          [inp(lf, [6, 4]), inp(with_ignore, dtype="i64"), inp([1.0, 0.5, 2.0, 0.0], grad=False)],
                          {"reduction": "mean", "label_smoothing": 0.1}))
    # linear_cross_entropy: x (5, 3) @ w (4, 3)^T [+ bias] then cross_entropy, never the logits.
    lx = [1.0, -2.0, 0.5, 30.0, 0.0, -30.0, DEN, 1e-30, 0.0, -0.0, 4.0, 2.0, 0.25, -1.0, 3.0]
    lw = [0.5, 1.0, -1.0, 2.0, -0.5, 0.0, -1.0, 3.0, 0.5, 0.0, 0.0, 0.0]
    lt = [0, 3, -100, 2, 1]
    for red in ["mean", "sum", "none"]:
        cases.append(run_case("linear_cross_entropy", f"{red}, smoothing 0.1, an ignored row",
                              [inp(lx, [5, 3]), inp(lw, [4, 3]), inp(lt, dtype="i64")],
                              {"reduction": red, "label_smoothing": 0.1}))
    cases.append(run_case("linear_cross_entropy", "bias with -inf (a class never taken), transposed weight",
                          [inp(lx, [5, 3]), inp(lw, [3, 4], layout="t"), inp([0, 3, 1, 3, 1], dtype="i64"),
                           inp([0.5, -INF, 1.0, 0.0])], {"reduction": "mean"}))
    cases.append(run_case("linear_cross_entropy", "NaN in one row of x, none",
                          [inp([NAN] + lx[1:], [5, 3]), inp(lw, [4, 3]), inp(lt, dtype="i64")], {"reduction": "none"}))
    logp = [[-1.0, -0.5, -INF], [0.0, -2.0, -3.0], [-0.5, NAN, -1.0]]
    for red in ["mean", "sum", "none"]:
        cases.append(run_case("nll_loss", red, [inp([v for r in logp for v in r], [3, 3]),
                                                inp([1, 0, 2], dtype="i64")], {"reduction": red}))
    cases.append(run_case("nll_loss", "ignore_index 1", [inp([v for r in logp for v in r], [3, 3]),
                                                        inp([1, 0, 2], dtype="i64")],
                          {"reduction": "mean", "ignore_index": 1}))
    x = [0.0, -0.0, 1.0, -1.0, 0.5, INF, -INF, NAN, 3e38, DEN, 2.0, 1e-30]
    y = [0.0, 0.0, 1.0, 1.0, 0.5, 1.0, 1.0, 1.0, -3e38, 0.0, 2.0, 0.0]
    for op in ["mse_loss", "l1_loss"]:
        for red in ["mean", "sum", "none"]:
            cases.append(run_case(op, red, [inp(x), inp(y)], {"reduction": red}))
        cases.append(run_case(op, "transposed (4, 3)", [inp(x, [3, 4], layout="t"), inp(y, [4, 3])],
                              {"reduction": "mean"}))
    for beta in [1.0, 0.5, 0.0]:
        for red in ["mean", "none"]:
            cases.append(run_case("smooth_l1_loss", f"beta {beta}, {red}", [inp(x), inp(y)],
                                  {"reduction": red, "beta": beta}))
    bx = [0.0, 0.0, 0.0, -0.0, 1.0, -1.0, 20.0, -20.0, 100.0, -100.0, 1e-30, DEN]
    by = [0.0, 0.5, 1.0, 1.0, 0.0, 1.0, 0.0, 1.0, 1.0, 0.0, 0.25, 0.75]
    for red in ["mean", "sum", "none"]:
        cases.append(run_case("bce_with_logits", red, [inp(bx), inp(by, grad=False)], {"reduction": red}))
    cases.append(run_case("bce_with_logits", "zero logits, targets 0, 0.5, 1", [inp([0.0, 0.0, 0.0]),
                                                                                  inp([0.0, 0.5, 1.0], grad=False)],
                          {"reduction": "none"}))
    cases.append(run_case("bce_with_logits", "weight", [inp(bx, [3, 4]), inp(by, [3, 4], grad=False),
                                                        inp([1.0, 0.5, 2.0, 0.0], grad=False)],
                          {"reduction": "mean", "weight": True}))
    cases.append(run_case("bce_with_logits", "pos_weight", [inp(bx, [3, 4]), inp(by, [3, 4], grad=False),
                                                            inp([1.0, 3.0, 0.5, 2.0], grad=False)],
                          {"reduction": "mean", "pos_weight": True}))
    cases.append(run_case("bce_with_logits", "weight and pos_weight, sum",
                          [inp(bx, [3, 4]), inp(by, [3, 4], grad=False), inp([2.0, 1.0, 0.5], [3, 1], grad=False),
                           inp([1.0, 3.0, 0.5, 2.0], grad=False)],
                          {"reduction": "sum", "weight": True, "pos_weight": True}))
    kx = [-1.0, -0.5, 0.0, -INF, -2.0, -0.0, -3.0, -1e-30]
    kt = [0.5, 0.0, 1.0, 0.0, 0.25, 0.0, DEN, 1.0]
    for red in ["mean", "sum", "none"]:
        cases.append(run_case("kl_div", red, [inp(kx), inp(kt)], {"reduction": red, "log_target": False}))
    klt = [-1.0, -INF, 0.0, -INF, -2.0, 0.0, -100.0, 0.0]
    cases.append(run_case("kl_div", "log_target", [inp(kx), inp(klt)], {"reduction": "sum", "log_target": True}))
    return cases


def linalg_index_cases():
    cases = []
    a = [1.0, 0.0, INF, 2.0, NAN, 1.0, 0.0, -1.0, 3e38, 3e38, 1.0, DEN]
    b = [0.0, 1.0, 2.0, -INF, 1.0, 1.0, 3e38, 1.0, 0.5, 1.0, -1.0, 2.0]
    cases.append(run_case("matmul", "(3, 4) @ (4, 3) with inf, NaN, 0 * inf, overflow",
                          [inp(a, [3, 4]), inp(b, [4, 3])]))
    cases.append(run_case("matmul", "finite, transposed left", [inp([0.5, -1, 2, 0, 1, 3, -2, 1e-30, 4, 1, 1, -1],
                                                                    [4, 3], layout="t"),
                                                                inp([1, 2, -1, 0.5, 0, 3, 2, -2, 1, 1, 1, 0],
                                                                    [4, 3])]))
    # No product that overflows next to an infinite sum here: with FMA, inf + (3e38 * -1.5) stays
    # inf where separate rounding gives inf - inf = NaN, so the result depends on contraction.
    a_fin = [1e30 if v == 3e38 else v for v in a]
    cases.append(run_case("matmul", "batched (2, 2, 3) @ (3, 2) broadcast", [inp(a_fin, [2, 2, 3]),
                                                                            inp(b[:6], [3, 2])]))
    cases.append(run_case("matmul", "vector @ matrix", [inp([1.0, INF, 0.0]), inp(b[:6], [3, 2])]))
    cases.append(run_case("linear", "with bias, NaN in one input", [inp(a, [3, 4]), inp(b[:8], [2, 4]),
                                                                    inp([0.5, -INF])]))
    cases.append(run_case("linear_nobias", "(3, 4) with weight (2, 4), edge values", [inp(a, [3, 4]),
                                                                                     inp(b[:8], [2, 4])]))
    cases.append(run_case("linear_nobias", "no rows (0, 4)", [inp([], [0, 4]), inp(b[:8], [2, 4])]))
    cases.append(run_case("linear_in_out", "weight (4, 2) stored (in, out), bias with -inf",
                          [inp(a, [3, 4]), inp(b[:8], [4, 2]), inp([0.5, -INF])]))
    cases.append(run_case("linear_in_out", "transposed weight view", [inp(a, [3, 4]), inp(b[:8], [2, 4], layout="t"),
                                                                      inp([1.0, 2.0])]))
    # linear_gelu: NaN and inf through the product into the GELU, a bias of -inf, both forms.
    g = [0.5, -1.0, 2.0, 0.0, NAN, 1.0, -3.0, 0.25, INF, 1.0, -0.5, DEN]
    for tanh in (True, False):
        form = "tanh" if tanh else "erf"
        cases.append(run_case("linear_gelu", f"{form}, bias with -inf, NaN and inf in the input",
                              [inp(g, [3, 4]), inp(b[:8], [2, 4]), inp([0.5, -INF])], {"tanh": tanh}))
        cases.append(run_case("linear_gelu", f"{form}, no bias, finite", [inp([0.5, -1.0, 2.0, 0.0, 1.5, -0.25], [2, 3]),
                                                                         inp([1.0, -2.0, 0.5, 0.0, 3.0, -1.0], [2, 3])],
                              {"tanh": tanh}))
    x1 = [1.0, NAN, -0.0, INF, 2.0, DEN]
    x2 = [3.0, -INF, 0.0, 1e-30]
    cases.append(run_case("cat", "dim 0, (3, 2) and (2, 2)", [inp(x1, [3, 2]), inp(x2, [2, 2])], {"dim": 0}))
    cases.append(run_case("cat", "dim 1, transposed (2, 3) and (2, 2)", [inp(x1, [3, 2], layout="t"),
                                                                        inp(x2, [2, 2])], {"dim": 1}))
    cases.append(run_case("stack", "dim 1", [inp(x2, [2, 2]), inp(x1[:4], [2, 2])], {"dim": 1}))
    cases.append(run_case("index_select", "repeated rows", [inp(x1, [3, 2]), inp([2, 0, 2, 1], dtype="i64")],
                          {"dim": 0}))
    cases.append(run_case("index_select", "dim 1 of transposed", [inp(x1, [3, 2], layout="t"),
                                                                   inp([1, 1, 0], dtype="i64")], {"dim": 1}))
    cases.append(run_case("gather", "dim 1 with repeats", [inp(x1, [2, 3]), inp([0, 0, 2, 1, 2, 2], [2, 3], "i64")],
                          {"dim": 1}))
    cases.append(run_case("scatter_add", "dim 0, collisions, NaN and inf sources",
                          [inp([0.0, 1.0, -0.0, 2.0, 3.0, 4.0], [3, 2]), inp([0, 2, 0, 2], [2, 2], "i64"),
                           inp([NAN, 1.0, INF, -INF], [2, 2])], {"dim": 0}))
    cases.append(run_case("index_add", "dim 0, collisions", [inp([0.0, 1.0, -0.0, 2.0, 3.0, 4.0], [3, 2]),
                                                             inp([2, 2, 0], dtype="i64"),
                                                             inp([1.0, INF, -INF, 1.0, 1e-30, NAN], [3, 2])],
                          {"dim": 0}))
    cases.append(run_case("embedding", "repeated ids", [inp([1, 3, 1, 0], [2, 2], "i64"),
                                                        inp([0.0, 1.0, NAN, 2.0, -INF, 3.0, DEN, -0.0], [4, 2])]))
    return cases


def nn_cases():
    cases = []
    img = [float(v) for v in [1, 2, 0, -1, 3, 1, 2, 2, -2, 0, 1, 4, 0.5, 1, 1, -3, 2, 0, 1, 1, 2, 3, -1, 0, 1]]
    img_edge = list(img)
    img_edge[6] = NAN
    img_edge[18] = INF
    w = [0.5, -1.0, 1.0, 0.25, 0.0, 2.0, 1.0, -0.5, 1.0]
    cases.append(run_case("conv2d", "3x3, pad 1, NaN and inf in the input",
                          [inp(img_edge, [1, 1, 5, 5]), inp(w, [1, 1, 3, 3]), inp([0.5])],
                          {"stride": [1, 1], "padding": [1, 1], "dilation": [1, 1], "groups": 1}))
    cases.append(run_case("conv2d", "stride 2, dilation 2, no bias", [inp(img, [1, 1, 5, 5]), inp(w, [1, 1, 3, 3])],
                          {"stride": [2, 2], "padding": [1, 1], "dilation": [2, 2], "groups": 1}))
    cases.append(run_case("conv2d", "2 groups, transposed input",
                          [inp(img[:16] + img[:16], [1, 2, 4, 4], layout="t"),
                           inp(w[:8], [2, 1, 2, 2]), inp([0.0, 1.0])],
                          {"stride": [1, 1], "padding": [0, 0], "dilation": [1, 1], "groups": 2}))
    pool = [1.0, 2.0, 2.0, NAN, 0.0, -INF, -INF, 1.0, 3.0, 3.0, NAN, NAN, -INF, -INF, -INF, -INF,
            5.0, 5.0, 5.0, 5.0, 1.0, -0.0, 0.0, 2.0, DEN]
    for k, s, pad, dil, ceil in [(2, 2, 0, 1, False), (3, 1, 1, 1, False), (2, 2, 1, 1, True), (2, 1, 0, 2, False)]:
        cases.append(run_case("max_pool2d", f"kernel {k} stride {s} pad {pad} dilation {dil} ceil {ceil}",
                              [inp(pool, [1, 1, 5, 5])],
                              {"kernel": [k, k], "stride": [s, s], "padding": [pad, pad], "dilation": [dil, dil],
                               "ceil_mode": ceil}))
    cases.append(run_case("max_pool2d", "2x2 transposed planes", [inp(pool[:16] + pool[:16], [2, 1, 4, 4], layout="t")],
                          {"kernel": [2, 2], "stride": [2, 2], "padding": [0, 0], "dilation": [1, 1],
                           "ceil_mode": False}))
    avg = list(pool)
    avg[3] = 1.0
    avg[10] = 2.0
    avg[11] = 3.0
    for k, s, pad, ceil, cip in [(2, 2, 0, False, True), (3, 2, 1, True, False), (3, 2, 1, False, True)]:
        cases.append(run_case("avg_pool2d", f"kernel {k} stride {s} pad {pad} ceil {ceil} count_pad {cip}",
                              [inp(avg, [1, 1, 5, 5])], {"kernel": [k, k], "stride": [s, s], "padding": [pad, pad],
                                                         "ceil_mode": ceil, "count_include_pad": cip}))
    cases.append(run_case("avg_pool2d", "NaN in a window", [inp(pool, [1, 1, 5, 5])],
                          {"kernel": [2, 2], "stride": [2, 2], "padding": [0, 0], "ceil_mode": False,
                           "count_include_pad": True}))
    cases.append(run_case("adaptive_avg_pool2d", "5x5 to 2x3 (overlapping windows)", [inp(pool, [1, 1, 5, 5])],
                          {"output_size": [2, 3]}))
    cases.append(run_case("adaptive_avg_pool2d", "5x5 to 1x1, finite", [inp(avg, [1, 1, 5, 5])],
                          {"output_size": [1, 1]}))
    ln = [1.0, 1.0, 1.0, 1.0, 1e15, -1e15, 1e15, 3.0, DEN, -DEN, 0.0, DEN, 0.5, 2.0, -1.5, 4.0, NAN, 1.0, 2.0, 3.0,
          INF, 0.0, 0.0, 0.0]
    cases.append(run_case("layer_norm", "rows: constant, huge, denormal, plain, NaN, inf",
                          [inp(ln, [6, 4]), inp([1.0, 0.5, 2.0, -1.0]), inp([0.0, 0.1, -0.2, 0.3])],
                          {"normalized_shape": [4], "eps": 1e-5}))
    cases.append(run_case("layer_norm", "no affine, eps 0, constant row", [inp(ln[:8], [2, 4])],
                          {"normalized_shape": [4], "eps": 0.0}))
    # float32 moments overflow in PyTorch (NaN); brisk's are in double (a deliberate difference)
    cases.append(run_case("layer_norm", "variance beyond float32", [inp([1e20, -1e20, 1e20, 3.0], [1, 4])],
                          {"normalized_shape": [4], "eps": 1e-5}))
    cases.append(run_case("layer_norm", "over two dims, transposed", [inp(ln[:12] + ln[12:16] * 3, [2, 3, 4],
                                                                          layout="t"),
                                                                      inp([1.0] * 12, [4, 3]), inp([0.0] * 12, [4, 3])],
                          {"normalized_shape": [4, 3], "eps": 1e-5}))
    bn = [1.0, 2.0, 3.0, 4.0, 5.0, 5.0, 5.0, 5.0, 1e15, -1e15, 0.0, 1.0, DEN, 0.0, -DEN, 0.0,
          0.5, -0.5, 2.0, 1.0, 5.0, 5.0, 5.0, 5.0, 1e15, 1e15, 2.0, 0.0, 0.0, DEN, 0.0, -DEN]
    bn_params = [inp([1.0, 2.0, 0.5, -1.0]), inp([0.0, 0.5, 1.0, 0.0]), inp([0.0, 1.0, 0.0, 0.0], grad=False),
                 inp([1.0, 1.0, 2.0, 0.5], grad=False)]
    cases.append(run_case("batch_norm", "training, channels: plain, constant, huge, denormal",
                          [inp(bn, [2, 4, 2, 2])] + bn_params, {"training": True, "momentum": 0.1, "eps": 1e-5}))
    cases.append(run_case("batch_norm", "variance beyond float32", [inp([1e20, -1e20, 1e20, 3.0], [4, 1])]
                          + [inp([1.0]), inp([0.0]), inp([0.0], grad=False), inp([1.0], grad=False)],
                          {"training": True, "momentum": 0.1, "eps": 1e-5}))
    cases.append(run_case("batch_norm", "eval, running statistics", [inp(bn, [2, 4, 2, 2])] + bn_params,
                          {"training": False, "momentum": 0.1, "eps": 1e-5}))
    cases.append(run_case("batch_norm", "training, (4, 4) input, NaN in one channel",
                          [inp([1.0, NAN, 3.0, 4.0] + bn[:12], [4, 4])] + bn_params,
                          {"training": True, "momentum": 0.1, "eps": 1e-5}))
    cases.append(run_case("group_norm", "2 groups, constant group", [inp(bn, [2, 4, 2, 2]), inp([1.0, 2.0, 0.5, -1.0]),
                                                                     inp([0.0, 0.5, 1.0, 0.0])],
                          {"groups": 2, "eps": 1e-5}))
    return cases


def main():
    os.makedirs(OUT, exist_ok=True)
    families = {"elementwise": elementwise_cases, "reduce": reduce_cases, "loss": loss_cases,
                "linalg_index": linalg_index_cases, "nn": nn_cases}
    total = 0
    for name, make in families.items():
        cases = make()
        data = {"generator": "tests/make_edge_reference.py", "torch": torch.__version__, "cases": cases}
        path = os.path.join(OUT, name + ".json")
        with open(path, "w") as f:
            json.dump(data, f, separators=(",", ":"), allow_nan=False)
            f.write("\n")
        size = os.path.getsize(path)
        total += size
        print(f"{path}: {len(cases)} cases, {size} bytes")
    print(f"total {total} bytes")


if __name__ == "__main__":
    main()
