#!/usr/bin/env python3
"""Writes tests/data/quantize/reference.json: PyTorch's quantization numerics on small fixed
data, for tests/test_quantize.cpp: observer qparams (MinMax, PerChannelMinMax, MovingAverage
(PerChannel)MinMax, Histogram with its L2 search), quantize_per_tensor / per_channel int values
and dequantized values, fake_quantize_per_tensor_affine / per_channel_affine forward and
backward, torch._choose_qparams_per_tensor (fbgemm's ChooseQuantizationParams), and
torch.ao.nn.quantized.dynamic.Linear (per-channel int8 weights) outputs, quantize_dynamic with
PyTorch's default qconfig (per-tensor weights), and static eager-mode PTQ of a small MLP with
default_qconfig and get_default_qconfig("fbgemm").
The percentile clipping is brisk's own (PyTorch has none): its reference here is written
independently from its definition on torch.histc's histogram.

Run with the current PyTorch (made with 2.15):
  /work/venv/bin/python tests/make_quantize_reference.py
"""
import json
import os

import torch
import torch.ao.nn.quantized.dynamic as nnqd
from torch.ao.quantization import (HistogramObserver, MinMaxObserver,
                                   MovingAverageMinMaxObserver,
                                   MovingAveragePerChannelMinMaxObserver,
                                   PerChannelMinMaxObserver,
                                   per_channel_dynamic_qconfig)

torch.manual_seed(0)
torch.backends.quantized.engine = "fbgemm"


def flat(t):
    return [float(v) for v in t.detach().reshape(-1).tolist()]


def ints(t):
    return [int(v) for v in t.detach().reshape(-1).tolist()]


def tensor(t):
    return {"shape": list(t.shape), "values": flat(t)}


# Observer data: three batches with a few outliers, shape (3, 4, 5).
batches = []
for i in range(3):
    x = torch.randn(3, 4, 5) * (1.0 + 0.5 * i) + 0.3 * i
    x[0, 0, 0] = 9.0 - i
    x[2, 3, 4] = -7.0 + i
    batches.append(x)

DT = {"quint8": torch.quint8, "qint8": torch.qint8}
QS = {
    "per_tensor_affine": torch.per_tensor_affine,
    "per_tensor_symmetric": torch.per_tensor_symmetric,
    "per_channel_affine": torch.per_channel_affine,
    "per_channel_symmetric": torch.per_channel_symmetric,
}

observer_cases = []


def add_observer(name, cls, kind, nb, dtype, qscheme, **kw):
    args = dict(dtype=DT[dtype], qscheme=QS[qscheme])
    for k in ("reduce_range", "quant_min", "quant_max", "ch_axis", "averaging_constant", "bins"):
        if k in kw:
            args[k] = kw[k]
    obs = cls(**args)
    for b in batches[:nb]:
        obs(b)
    scale, zp = obs.calculate_qparams()
    case = {"name": name, "kind": kind, "batches": nb, "dtype": dtype, "qscheme": qscheme,
            "reduce_range": kw.get("reduce_range", False), "scale": flat(scale), "zero_point": ints(zp)}
    for k in ("quant_min", "quant_max", "ch_axis", "averaging_constant", "bins"):
        if k in kw:
            case[k] = kw[k]
    observer_cases.append(case)


for dtype in ("quint8", "qint8"):
    for qs in ("per_tensor_affine", "per_tensor_symmetric"):
        for rr in (False, True):
            if rr and dtype == "quint8" and qs == "per_tensor_symmetric":
                continue  # PyTorch refuses it (brisk too: tested as an error)
            add_observer(f"minmax_{dtype}_{qs}_rr{int(rr)}", MinMaxObserver, "minmax", 3, dtype, qs, reduce_range=rr)
add_observer("minmax_custom_range", MinMaxObserver, "minmax", 2, "quint8", "per_tensor_affine", quant_min=0,
             quant_max=15)
add_observer("minmax_custom_range_symmetric", MinMaxObserver, "minmax", 2, "quint8", "per_tensor_symmetric",
             quant_min=0, quant_max=15)
for axis in (0, 1, 2):
    add_observer(f"perchannel_sym_axis{axis}", PerChannelMinMaxObserver, "minmax", 2, "qint8",
                 "per_channel_symmetric", ch_axis=axis)
    add_observer(f"perchannel_affine_axis{axis}", PerChannelMinMaxObserver, "minmax", 2, "quint8",
                 "per_channel_affine", ch_axis=axis)
for c in (0.01, 0.5):
    add_observer(f"moving_average_c{c}", MovingAverageMinMaxObserver, "moving_average", 3, "quint8",
                 "per_tensor_affine", averaging_constant=c)
    add_observer(f"moving_average_sym_c{c}", MovingAverageMinMaxObserver, "moving_average", 3, "qint8",
                 "per_tensor_symmetric", averaging_constant=c, reduce_range=True)
add_observer("moving_average_perchannel", MovingAveragePerChannelMinMaxObserver, "moving_average", 3, "qint8",
             "per_channel_symmetric", averaging_constant=0.1, ch_axis=1)

# Histogram: one batch of 2000 values with a heavy tail (the L2 search clips it), and a second
# batch inside the first one's range (added to the histogram as is).
hx = torch.cat([torch.randn(1990), torch.tensor([12.0, -9.0, 15.0, 8.0, -11.0, 20.0, 7.5, -6.5, 9.5, 10.0])])
hx2 = torch.randn(500) * 0.5
hist_data = [hx, hx2]
histogram_cases = []
for name, dtype, qs, rr, nb, bins in [
    ("histogram_quint8", "quint8", "per_tensor_affine", False, 1, 2048),
    ("histogram_quint8_rr", "quint8", "per_tensor_affine", True, 1, 2048),
    ("histogram_qint8_sym", "qint8", "per_tensor_symmetric", False, 1, 2048),
    ("histogram_two_batches", "quint8", "per_tensor_affine", False, 2, 2048),
    ("histogram_256_bins", "quint8", "per_tensor_affine", False, 1, 256),
]:
    obs = HistogramObserver(bins=bins, dtype=DT[dtype], qscheme=QS[qs], reduce_range=rr)
    for b in hist_data[:nb]:
        obs(b)
    new_min, new_max = obs._non_linear_param_search()
    scale, zp = obs.calculate_qparams()
    case = {"name": name, "dtype": dtype, "qscheme": qs, "reduce_range": rr, "batches": nb, "bins": bins,
            "search_min": float(new_min), "search_max": float(new_max), "scale": flat(scale), "zero_point": ints(zp)}
    if name in ("histogram_quint8", "histogram_two_batches", "histogram_256_bins"):  # the counts, for torch.histc
        case["histogram"] = flat(obs.histogram)
    histogram_cases.append(case)

# Percentile (brisk's definition): the q and 1 - q quantiles of the histogram mass, linear
# inside the bin where the cumulative count reaches q * total.
percentile_cases = []
for p in (0.99, 0.999):
    bins = 2048
    lo, hi = float(hx.min()), float(hx.max())
    h = torch.histc(hx, bins, min=lo, max=hi).double()
    total = float(h.sum())
    width = (hi - lo) / bins

    def quantile(q):
        target = q * total
        cum = 0.0
        for b in range(bins):
            c = float(h[b])
            if c > 0 and cum + c >= target:
                return lo + (b + (target - cum) / c) * width
            cum += c
        return hi

    percentile_cases.append({"percentile": p, "min": quantile(1 - p), "max": quantile(p)})

# quantize / dequantize
qx = torch.randn(2, 3, 4) * 3
qx[0, 0, 0] = 1e6
qx[1, 2, 3] = -1e6
qx[0, 1, 1] = 0.25  # a tie for scale 0.1 (2.5 -> 2, half to even)
quantize_cases = []
for dtype, scale, zp in (("quint8", 0.1, 128), ("quint8", 0.037, 3), ("qint8", 0.05, 0), ("qint8", 0.02, -7)):
    q = torch.quantize_per_tensor(qx, scale, zp, DT[dtype])
    quantize_cases.append({"dtype": dtype, "scale": scale, "zero_point": zp, "int_repr": ints(q.int_repr()),
                           "dequantized": flat(q.dequantize())})
pc_scales = torch.tensor([0.05, 0.1, 0.2], dtype=torch.float64)
pc_zps = torch.tensor([0, 5, -3])
qpc = torch.quantize_per_channel(qx, pc_scales, pc_zps, 1, torch.qint8)
per_channel_case = {"axis": 1, "dtype": "qint8", "scales": flat(pc_scales), "zero_points": ints(pc_zps),
                    "int_repr": ints(qpc.int_repr()), "dequantized": flat(qpc.dequantize())}

# fake quantization forward and backward
fx = (torch.randn(2, 3, 4) * 8).requires_grad_()
fg = torch.randn(2, 3, 4)
fy = torch.fake_quantize_per_tensor_affine(fx, 0.1, 10, 0, 127)
fy.backward(fg)
fake_per_tensor = {"scale": 0.1, "zero_point": 10, "quant_min": 0, "quant_max": 127, "y": flat(fy),
                   "grad": flat(fx.grad)}
fx.grad = None
fs = torch.tensor([0.05, 0.1, 0.3])
fz = torch.tensor([0, 3, -4], dtype=torch.int32)
fy2 = torch.fake_quantize_per_channel_affine(fx, fs, fz, 1, -128, 127)
fy2.backward(fg)
fake_per_channel = {"axis": 1, "scales": flat(fs), "zero_points": ints(fz), "quant_min": -128, "quant_max": 127,
                    "y": flat(fy2), "grad": flat(fx.grad)}

# choose_qparams (fbgemm) on a few ranges
choose_cases = []
for t in (torch.randn(50) * 2 + 0.5, torch.rand(50) * 3, -torch.rand(50), torch.full((5,), 1e-7),
          torch.randn(50) * 100):
    for rr in (False, True):
        s, z = torch._choose_qparams_per_tensor(t, rr)
        choose_cases.append({"min": float(t.min()), "max": float(t.max()), "reduce_range": rr, "scale": float(s),
                             "zero_point": int(z)})

# dynamic quantized Linear with per-channel weights
lin = torch.nn.Linear(33, 20)
lin.qconfig = per_channel_dynamic_qconfig
dq = nnqd.Linear.from_float(lin)
dx = torch.randn(7, 33) * 1.5
dx[0, 0] = 6.0
dy = dq(dx)
wq = dq.weight()
dynamic_linear = {"x": tensor(dx), "weight": tensor(lin.weight), "bias": flat(lin.bias), "y": tensor(dy),
                  "weight_int": ints(wq.int_repr()), "weight_scales": flat(wq.q_per_channel_scales()),
                  "weight_zero_points": ints(wq.q_per_channel_zero_points())}
xs, xz = torch._choose_qparams_per_tensor(dx, True)
dynamic_linear["x_scale"] = float(xs)
dynamic_linear["x_zero_point"] = int(xz)

# quantize_dynamic with PyTorch's default (no qconfig: default_dynamic_qconfig, per-tensor
# symmetric weights), on a model of two Linears (one nested).
dyn_model = torch.nn.Sequential(torch.nn.Linear(24, 16), torch.nn.ReLU(),
                                torch.nn.Sequential(torch.nn.Linear(16, 6)))
dyn_x = torch.randn(5, 24) * 2.0
dyn_float = [tensor(p) for p in dyn_model.state_dict().values()]
dyn_names = list(dyn_model.state_dict().keys())
dq_model = torch.ao.quantization.quantize_dynamic(dyn_model, dtype=torch.qint8)
dyn_layers = []
for lin in (dq_model[0], dq_model[2][0]):
    w = lin.weight()
    assert w.qscheme() == torch.per_tensor_affine  # symmetric qparams stored as affine, zero point 0
    dyn_layers.append({"weight_int": ints(w.int_repr()), "weight_scale": float(w.q_scale()),
                       "weight_zero_point": int(w.q_zero_point())})
dynamic_default = {"names": dyn_names, "params": dyn_float, "x": tensor(dyn_x), "y": tensor(dq_model(dyn_x)),
                   "layers": dyn_layers}


# Static post-training quantization in eager mode: QuantStub, Linear + ReLU (fused), Linear,
# DeQuantStub, with torch's default_qconfig and get_default_qconfig("fbgemm").
class StaticNet(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.quant = torch.ao.quantization.QuantStub()
        self.fc1 = torch.nn.Linear(16, 12)
        self.relu = torch.nn.ReLU()
        self.fc2 = torch.nn.Linear(12, 5)
        self.dequant = torch.ao.quantization.DeQuantStub()

    def forward(self, x):
        return self.dequant(self.fc2(self.relu(self.fc1(self.quant(x)))))


static_float = StaticNet()
static_params = {k: tensor(v) for k, v in static_float.state_dict().items()}
static_calib = [torch.randn(8, 16) * (1.0 + 0.25 * i) for i in range(4)]
static_x = torch.randn(6, 16) * 1.2
static_cases = []
for name, qc in (("default_qconfig", torch.ao.quantization.default_qconfig),
                 ("fbgemm", torch.ao.quantization.get_default_qconfig("fbgemm"))):
    m = StaticNet()
    m.load_state_dict(static_float.state_dict())
    m.eval()
    m.qconfig = qc
    torch.ao.quantization.fuse_modules(m, [["fc1", "relu"]], inplace=True)
    torch.ao.quantization.prepare(m, inplace=True)
    with torch.no_grad():
        for b in static_calib:
            m(b)
    torch.ao.quantization.convert(m, inplace=True)

    def wq(lin):
        w = lin.weight()
        if w.qscheme() in (torch.per_channel_affine, torch.per_channel_symmetric):
            return {"weight_int": ints(w.int_repr()), "weight_scale": flat(w.q_per_channel_scales())}
        return {"weight_int": ints(w.int_repr()), "weight_scale": [float(w.q_scale())]}

    static_cases.append({"qconfig": name,
                         "input_scale": [float(m.quant.scale), float(m.fc1.scale)],
                         "input_zero_point": [int(m.quant.zero_point), int(m.fc1.zero_point)],
                         "output_scale": float(m.fc2.scale), "fc1": wq(m.fc1), "fc2": wq(m.fc2),
                         "y": tensor(m(static_x))})
static_ptq = {"params": static_params, "calibration": [tensor(b) for b in static_calib], "x": tensor(static_x),
              "cases": static_cases}

out = {
    "torch_version": torch.__version__,
    "observer_batches": [tensor(b) for b in batches],
    "observers": observer_cases,
    "histogram_data": [tensor(b) for b in hist_data],
    "histograms": histogram_cases,
    "percentiles": percentile_cases,
    "quantize_x": tensor(qx),
    "quantize": quantize_cases,
    "quantize_per_channel": per_channel_case,
    "fake_x": tensor(fx),
    "fake_grad_out": tensor(fg),
    "fake_per_tensor": fake_per_tensor,
    "fake_per_channel": fake_per_channel,
    "choose_qparams": choose_cases,
    "dynamic_linear": dynamic_linear,
    "dynamic_default": dynamic_default,
    "static_ptq": static_ptq,
}
path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data", "quantize", "reference.json")
os.makedirs(os.path.dirname(path), exist_ok=True)
with open(path, "w") as f:
    json.dump(out, f)
print("wrote", path, os.path.getsize(path), "bytes")
