#!/usr/bin/python3
# tests/make_resize_reference.py: reference values for tests/test_resize.cpp, made with
# Debian's PyTorch 1.13:
#   /usr/bin/python3 tests/make_resize_reference.py  ->  tests/data/resize/resize.json
# Each case: an op of torch.nn.functional with its arguments, the inputs (F32 values, so that
# brisk's F32 runs read exactly PyTorch's inputs), the output computed in F64, a stored
# cotangent `cot`, and the F64 gradients of sum(out * cot) with respect to every floating input
# (and max pooling's indices). Ops: conv_transpose2d / conv_transpose1d (stride, padding,
# output_padding, groups, dilation, including output_padding >= stride where it is < dilation),
# pad (constant, reflect, replicate, circular; negative pads), interpolate (nearest,
# nearest-exact, linear, bilinear with and without align_corners, trilinear; size and
# scale_factor), max_pool1d / avg_pool1d, adaptive_max_pool2d / 1d, adaptive_avg_pool1d,
# pixel_shuffle / pixel_unshuffle.
import json
import os

import torch
import torch.nn.functional as F

torch.manual_seed(0)
DT = torch.float64


def tj(t, exact32=False):
    # F32 values (inputs, cotangents) as their shortest float32 text; F64 results to 12 digits
    # (the F64 comparisons use a 1e-10 tolerance), which keeps the file small.
    v = t.detach().reshape(-1)
    if exact32:
        data = [float(f"{x:.9g}") for x in v.float().tolist()]
    elif t.is_floating_point():
        data = [float(f"{x:.12g}") for x in v.to(DT).tolist()]
    else:
        data = v.tolist()
    return {"shape": list(t.shape), "data": data}


def rnd(*shape):
    # F32 values, held in F64 (exact)
    return torch.randn(*shape, dtype=torch.float32).to(DT)


cases = []


def case(name, op, args, inputs, fn):
    ins = {k: v.clone().requires_grad_(True) for k, v in inputs.items()}
    res = fn(ins)
    out, extra = (res, {}) if not isinstance(res, tuple) else (res[0], {"indices": tj(res[1])})
    cot = torch.randn(out.shape, dtype=torch.float32).to(DT)
    (out * cot).sum().backward()
    c = {"name": name, "op": op, "args": args, "inputs": {k: tj(v, True) for k, v in inputs.items()}, "out": tj(out),
         "cot": tj(cot, True), "grads": {k: tj(v.grad) for k, v in ins.items()}}
    c.update(extra)
    cases.append(c)


# ---- transposed convolution: weight (C_in, C_out / groups, kh, kw)
def ct2d(name, x, w, bias, stride=(1, 1), padding=(0, 0), output_padding=(0, 0), groups=1, dilation=(1, 1)):
    inputs = {"x": x, "w": w}
    if bias:
        inputs["b"] = rnd(w.shape[1] * groups)
    args = {"stride": list(stride), "padding": list(padding), "output_padding": list(output_padding),
            "groups": groups, "dilation": list(dilation)}
    case(name, "conv_transpose2d", args, inputs,
         lambda i: F.conv_transpose2d(i["x"], i["w"], i.get("b"), stride, padding, output_padding, groups, dilation))


ct2d("conv_transpose2d 3x3", rnd(2, 3, 4, 4), rnd(3, 2, 3, 3), True)
ct2d("conv_transpose2d stride 2 padding 1 output_padding 1", rnd(2, 3, 3, 4), rnd(3, 2, 3, 3), True, (2, 2), (1, 1),
     (1, 1))
ct2d("conv_transpose2d stride (2, 3) padding (1, 0) output_padding (1, 2) kernel 2x4", rnd(1, 2, 3, 4),
     rnd(2, 5, 2, 4), True, (2, 3), (1, 0), (1, 2))
ct2d("conv_transpose2d groups 2 dilation 2 stride 2 padding 2 output_padding 1", rnd(1, 4, 4, 4), rnd(4, 2, 3, 3),
     True, (2, 2), (2, 2), (1, 1), 2, (2, 2))
ct2d("conv_transpose2d output_padding 2 >= stride 1, < dilation 3", rnd(1, 2, 4, 4), rnd(2, 3, 2, 3), True, (1, 1),
     (1, 1), (2, 2), 1, (3, 3))
ct2d("conv_transpose2d stride (1, 2) dilation (2, 1) output_padding (1, 1)", rnd(2, 3, 4, 3), rnd(3, 2, 3, 2), False,
     (1, 2), (0, 1), (1, 1), 1, (2, 1))
ct2d("conv_transpose2d depthwise groups 4 stride 2 padding 1 output_padding 1", rnd(1, 4, 3, 4), rnd(4, 1, 3, 3),
     False, (2, 2), (1, 1), (1, 1), 4)
ct2d("conv_transpose2d 1x1 stride 1", rnd(2, 3, 3, 4), rnd(3, 2, 1, 1), True)
ct2d("conv_transpose2d unbatched stride 2", rnd(3, 4, 3), rnd(3, 2, 3, 3), True, (2, 2), (1, 1), (0, 1))

x = rnd(2, 3, 7)
w = rnd(3, 2, 3)
b = rnd(4)
case("conv_transpose1d stride 2 padding 1 output_padding 1 groups 1", "conv_transpose1d",
     {"stride": 2, "padding": 1, "output_padding": 1, "groups": 1, "dilation": 1}, {"x": x, "w": w, "b": rnd(2)},
     lambda i: F.conv_transpose1d(i["x"], i["w"], i["b"], 2, 1, 1, 1, 1))
case("conv_transpose1d groups 3 dilation 2", "conv_transpose1d",
     {"stride": 3, "padding": 2, "output_padding": 1, "groups": 3, "dilation": 2},
     {"x": rnd(2, 3, 5), "w": rnd(3, 1, 4), "b": rnd(3)},
     lambda i: F.conv_transpose1d(i["x"], i["w"], i["b"], 3, 2, 1, 3, 2))

# ---- pad
for mode, pads_list, value in [
    ("constant", [(1, 2), (1, 2, 0, 3), (2, 1, 1, 1, 1, 0), (-1, 2, 1, -2), (1, 0, 0, 1, 2, 0, 0, 1)], 1.5),
    ("reflect", [(2, 1, 3, 0), (-1, 2, 3, -1), (4, 4)], 0.0),
    ("replicate", [(2, 5, 0, 3), (-2, 1, 1, -3), (6, 1)], 0.0),
    ("circular", [(2, 5, 1, 4), (-2, 1, 1, -1), (5, 0)], 0.0),
]:
    for pads in pads_list:
        # PyTorch 1.13's non-constant modes pad 2-D and 3-D inputs by one pair, 4-D by two
        x = rnd(2, 2, 5) if len(pads) == 2 and mode != "constant" else rnd(1, 2, 4, 5)
        args = {"pad": list(pads), "mode": mode, "value": value}
        case(f"pad {mode} {pads}", "pad", args, {"x": x},
             lambda i, p=pads, m=mode, v=value: F.pad(i["x"], p, mode=m, value=v) if m == "constant" else
             F.pad(i["x"], p, mode=m))
case("pad reflect 1-d (1, 3)", "pad", {"pad": [1, 3], "mode": "reflect", "value": 0.0}, {"x": rnd(2, 3, 5)},
     lambda i: F.pad(i["x"], (1, 3), mode="reflect"))
case("pad replicate 3-d (1, 1, 2, 0, 1, 2)", "pad", {"pad": [1, 1, 2, 0, 1, 2], "mode": "replicate", "value": 0.0},
     {"x": rnd(1, 1, 3, 4, 5)}, lambda i: F.pad(i["x"], (1, 1, 2, 0, 1, 2), mode="replicate"))
case("pad reflect 3-d (1, 2, 2, 0, 1, 1)", "pad", {"pad": [1, 2, 2, 0, 1, 1], "mode": "reflect", "value": 0.0},
     {"x": rnd(1, 1, 3, 4, 5)}, lambda i: F.pad(i["x"], (1, 2, 2, 0, 1, 1), mode="reflect"))
case("pad circular 3-d (1, 2, 2, 0, 1, 1)", "pad", {"pad": [1, 2, 2, 0, 1, 1], "mode": "circular", "value": 0.0},
     {"x": rnd(1, 1, 3, 4, 5)}, lambda i: F.pad(i["x"], (1, 2, 2, 0, 1, 1), mode="circular"))


# ---- interpolate
def interp(name, x, size=None, scale=None, mode="nearest", align=None, recompute=None):
    args = {"mode": mode}
    if size is not None:
        args["size"] = list(size) if isinstance(size, (tuple, list)) else [size]
    if scale is not None:
        args["scale_factor"] = list(scale) if isinstance(scale, (tuple, list)) else [scale]
    if align is not None:
        args["align_corners"] = align
    if recompute is not None:
        args["recompute_scale_factor"] = recompute
    case(name, "interpolate", args, {"x": x},
         lambda i: F.interpolate(i["x"], size=size, scale_factor=scale, mode=mode, align_corners=align,
                                 recompute_scale_factor=recompute))


x4 = rnd(1, 2, 4, 5)
interp("nearest size (7, 9)", x4, size=(7, 9))
interp("nearest scale 2", x4, scale=2.0)
interp("nearest scale 1.5", x4, scale=1.5)
interp("nearest scale (0.5, 0.7)", x4, scale=(0.5, 0.7))
interp("nearest scale 1.7 recompute_scale_factor", x4, scale=1.7, recompute=True)
interp("nearest size (3, 11)", x4, size=(3, 11))
interp("nearest-exact size (7, 3)", x4, size=(7, 3), mode="nearest-exact")
interp("nearest-exact scale 2.5", x4, scale=2.5, mode="nearest-exact")
for align in (False, True):
    interp(f"bilinear size (7, 9) align_corners {align}", x4, size=(7, 9), mode="bilinear", align=align)
    interp(f"bilinear scale 2 align_corners {align}", x4, scale=2.0, mode="bilinear", align=align)
    interp(f"bilinear size (3, 2) align_corners {align}", x4, size=(3, 2), mode="bilinear", align=align)
    interp(f"bilinear size (1, 1) align_corners {align}", x4, size=(1, 1), mode="bilinear", align=align)
    interp(f"bilinear scale (0.6, 1.3) align_corners {align}", x4, scale=(0.6, 1.3), mode="bilinear", align=align)
    interp(f"linear size 10 align_corners {align}", rnd(2, 3, 6), size=10, mode="linear", align=align)
    interp(f"trilinear size (4, 6, 3) align_corners {align}", rnd(1, 1, 3, 4, 5), size=(4, 6, 3), mode="trilinear",
           align=align)
interp("bilinear default align_corners size (5, 5)", x4, size=(5, 5), mode="bilinear")
interp("bilinear size (4, 5) identity", x4, size=(4, 5), mode="bilinear", align=False)
interp("nearest 3-d scale 2", rnd(1, 1, 2, 3, 4), scale=2.0)
interp("nearest 1-d size 7", rnd(2, 3, 5), size=7)

# ---- pooling
x = rnd(2, 3, 9)
for k, s, p, d, c in [(3, 2, 1, 1, False), (2, None, 0, 1, False), (3, 1, 1, 2, False), (2, 2, 1, 1, True),
                      (4, 3, 2, 1, True)]:
    case(f"max_pool1d k {k} stride {s} padding {p} dilation {d} ceil_mode {c}", "max_pool1d",
         {"kernel": k, "stride": s, "padding": p, "dilation": d, "ceil_mode": c}, {"x": x},
         lambda i, k=k, s=s, p=p, d=d, c=c: F.max_pool1d(i["x"], k, s, p, d, c, return_indices=True))
case("max_pool1d unbatched (3, 8) k 3 stride 2", "max_pool1d",
     {"kernel": 3, "stride": 2, "padding": 0, "dilation": 1, "ceil_mode": False}, {"x": rnd(3, 8)},
     lambda i: F.max_pool1d(i["x"], 3, 2, 0, 1, False, return_indices=True))
for k, s, p, c, cip in [(3, 2, 1, False, True), (3, 2, 1, False, False), (2, None, 0, False, True),
                        (4, 3, 2, True, True), (4, 3, 2, True, False)]:
    case(f"avg_pool1d k {k} stride {s} padding {p} ceil_mode {c} count_include_pad {cip}", "avg_pool1d",
         {"kernel": k, "stride": s, "padding": p, "ceil_mode": c, "count_include_pad": cip}, {"x": x},
         lambda i, k=k, s=s, p=p, c=c, cip=cip: F.avg_pool1d(i["x"], k, s, p, c, cip))
for shape, out in [((2, 3, 7, 5), (3, 2)), ((1, 2, 4, 4), (3, 3)), ((2, 2, 5, 6), (1, 1)), ((1, 2, 3, 5), (5, 7)),
                   ((3, 6, 5), (2, 4))]:
    case(f"adaptive_max_pool2d {shape} to {out}", "adaptive_max_pool2d", {"output_size": list(out)},
         {"x": rnd(*shape)}, lambda i, out=out: F.adaptive_max_pool2d(i["x"], out, return_indices=True))
case("adaptive_max_pool1d (2, 3, 10) to 4", "adaptive_max_pool1d", {"output_size": 4}, {"x": rnd(2, 3, 10)},
     lambda i: F.adaptive_max_pool1d(i["x"], 4, return_indices=True))
case("adaptive_avg_pool1d (2, 3, 10) to 4", "adaptive_avg_pool1d", {"output_size": 4}, {"x": rnd(2, 3, 10)},
     lambda i: F.adaptive_avg_pool1d(i["x"], 4))

# ---- pixel shuffle
case("pixel_shuffle (2, 8, 3, 4) r 2", "pixel_shuffle", {"factor": 2}, {"x": rnd(2, 8, 3, 4)},
     lambda i: F.pixel_shuffle(i["x"], 2))
case("pixel_shuffle (1, 18, 2, 3) r 3", "pixel_shuffle", {"factor": 3}, {"x": rnd(1, 18, 2, 3)},
     lambda i: F.pixel_shuffle(i["x"], 3))
case("pixel_shuffle 5-d (2, 1, 4, 3, 2) r 2", "pixel_shuffle", {"factor": 2}, {"x": rnd(2, 1, 4, 3, 2)},
     lambda i: F.pixel_shuffle(i["x"], 2))
case("pixel_shuffle unbatched (4, 2, 2) r 2", "pixel_shuffle", {"factor": 2}, {"x": rnd(4, 2, 2)},
     lambda i: F.pixel_shuffle(i["x"], 2))
case("pixel_unshuffle (2, 2, 6, 8) r 2", "pixel_unshuffle", {"factor": 2}, {"x": rnd(2, 2, 6, 8)},
     lambda i: F.pixel_unshuffle(i["x"], 2))
case("pixel_unshuffle (1, 1, 6, 3) r 3", "pixel_unshuffle", {"factor": 3}, {"x": rnd(1, 1, 6, 3)},
     lambda i: F.pixel_unshuffle(i["x"], 3))

# ---- the ConvTranspose2d module: PyTorch's state_dict names and shapes, output of a loaded module
m = torch.nn.ConvTranspose2d(4, 6, 3, stride=2, padding=1, output_padding=1, groups=2, dilation=1).to(DT)
with torch.no_grad():
    for p in m.parameters():
        p.copy_(p.float().to(DT))
x = rnd(2, 4, 5, 5)
y = m(x)
y_sized = m(x, output_size=[9, 10])
module = {"state_dict": {k: tj(v, True) for k, v in m.state_dict().items()}, "x": tj(x, True), "out": tj(y),
          "out_size_9_10": tj(y_sized)}

here = os.path.dirname(os.path.abspath(__file__))
os.makedirs(os.path.join(here, "data", "resize"), exist_ok=True)
with open(os.path.join(here, "data", "resize", "resize.json"), "w") as f:
    json.dump({"torch": torch.__version__, "cases": cases, "module": module}, f, separators=(",", ":"))
print(f"{len(cases)} cases")
