#!/usr/bin/env python3
# tests/make_recurrent_reference.py: PyTorch reference values for tests/test_recurrent.cpp and
# tests/test_transformer.cpp: RNN / LSTM / GRU (multi-layer, bidirectional, batch_first, with
# and without initial states), their cells, TransformerEncoderLayer / DecoderLayer /
# TransformerEncoder (norm_first, relu / gelu, masks), RMSNorm, InstanceNorm2d and PReLU.
# Needs PyTorch >= 2.4 (RMSNorm), so run it with the venv's PyTorch:
#   /work/venv-torch/bin/python tests/make_recurrent_reference.py
#   -> tests/data/recurrent/{recurrent,transformer}.json
# Each case holds the module's state_dict (by PyTorch's names, so the C++ side loads weights by
# name), the inputs, the outputs, and the gradients of loss = sum_k sum(out_k * r_k) (fixed
# random r_k per output) w.r.t. every input and parameter. Values are drawn in F32 and the
# module runs in F64, so the data is the exact answer for F32-representable inputs; the C++
# tests compare their F32 run (1e-5 / 1e-4) and their F64 run (1e-12) against it.
import json
import os

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "data", "recurrent")


def enc(t):
    t = t.detach().to(torch.float64)
    return {"shape": list(t.shape), "data": [float(v) for v in t.flatten().tolist()]}


def enc_bool(t):
    return {"shape": list(t.shape), "data": [bool(v) for v in t.flatten().tolist()]}


def rand(*shape):
    return torch.randn(*shape, dtype=torch.float32).to(torch.float64)


def randomize(module):
    # Draw every parameter again in F32 (so brisk's F32 copy is exact), scale 0.5.
    with torch.no_grad():
        for p in module.parameters():
            p.copy_((0.5 * torch.randn(p.shape, dtype=torch.float32)).to(torch.float64))


def run_case(name, module, inputs, call, bool_inputs=None, config=None, train=False):
    """inputs: name -> F64 tensor (requires grad); call(module, inputs) -> dict of outputs."""
    module.train(train)
    for t in inputs.values():
        t.requires_grad_(True)
    outs = call(module, inputs)
    weights = {k: rand(*v.shape) for k, v in outs.items()}
    loss = sum((outs[k] * weights[k]).sum() for k in outs)
    loss.backward()
    case = {
        "name": name,
        "config": config or {},
        "params": {k: enc(v) for k, v in module.state_dict().items()},
        "inputs": {k: enc(v) for k, v in inputs.items()},
        "bool_inputs": {k: enc_bool(v) for k, v in (bool_inputs or {}).items()},
        "outputs": {k: enc(v) for k, v in outs.items()},
        "loss_weights": {k: enc(v) for k, v in weights.items()},
        "grads": {},
    }
    for k, v in inputs.items():
        case["grads"]["input." + k] = enc(v.grad)
    for k, p in module.named_parameters():
        case["grads"]["param." + k] = enc(p.grad)
    return case


def recurrent_cases():
    cases = []

    def rnn_call(kind):
        def call(m, x):
            if kind == "lstm":
                state = (x["h0"], x["c0"]) if "h0" in x else None
                out, (h, c) = m(x["input"], state)
                return {"output": out, "h_n": h, "c_n": c}
            out, h = m(x["input"], x.get("h0"))
            return {"output": out, "h_n": h}

        return call

    def add(name, cls, kind, input_size, hidden, cfg, seq, batch, with_h0):
        torch.manual_seed(len(cases) + 1)
        m = cls(input_size, hidden, **cfg).double()
        randomize(m)
        d = 2 if cfg.get("bidirectional", False) else 1
        layers = cfg.get("num_layers", 1)
        bf = cfg.get("batch_first", False)
        if batch is None:
            x = {"input": rand(seq, input_size)}
            state_shape = (layers * d, hidden)
            h_shape = (layers * d, cfg.get("proj_size", 0) or hidden)
        else:
            x = {"input": rand(batch, seq, input_size) if bf else rand(seq, batch, input_size)}
            state_shape = (layers * d, batch, hidden)
            h_shape = (layers * d, batch, cfg.get("proj_size", 0) or hidden)
        if with_h0:
            x["h0"] = rand(*h_shape)
            if kind == "lstm":
                x["c0"] = rand(*state_shape)
        config = dict(cfg, kind=kind, input_size=input_size, hidden_size=hidden)
        cases.append(run_case(name, m, x, rnn_call(kind), config=config))

    nn = torch.nn
    add("lstm_2layer_bidirectional_batch_first", nn.LSTM, "lstm", 3, 4,
        {"num_layers": 2, "bidirectional": True, "batch_first": True}, 5, 2, True)
    add("lstm_default_state", nn.LSTM, "lstm", 3, 4, {"num_layers": 2}, 4, 3, False)
    add("lstm_proj_bidirectional", nn.LSTM, "lstm", 3, 5,
        {"proj_size": 2, "bidirectional": True, "num_layers": 2}, 4, 2, True)
    add("lstm_unbatched", nn.LSTM, "lstm", 3, 4, {"bidirectional": True}, 4, None, True)
    add("gru_2layer_bidirectional", nn.GRU, "gru", 3, 4, {"num_layers": 2, "bidirectional": True}, 5, 2, True)
    add("gru_batch_first_no_bias", nn.GRU, "gru", 3, 4, {"batch_first": True, "bias": False}, 4, 2, False)
    add("rnn_tanh_2layer", nn.RNN, "rnn", 3, 4, {"num_layers": 2}, 5, 2, True)
    add("rnn_relu_bidirectional_batch_first", nn.RNN, "rnn", 3, 4,
        {"nonlinearity": "relu", "bidirectional": True, "batch_first": True}, 4, 2, False)

    # Cells: one step.
    def cell(name, cls, kind, with_state, batch=2):
        torch.manual_seed(100 + len(cases))
        m = cls(3, 4).double()
        randomize(m)
        x = {"input": rand(batch, 3) if batch else rand(3)}
        hs = (batch, 4) if batch else (4,)
        if with_state:
            x["h0"] = rand(*hs)
            if kind == "lstm":
                x["c0"] = rand(*hs)

        def call(m, x):
            if kind == "lstm":
                h, c = m(x["input"], (x["h0"], x["c0"]) if "h0" in x else None)
                return {"h": h, "c": c}
            return {"h": m(x["input"], x.get("h0"))}

        cases.append(run_case(name, m, x, call, config={"kind": kind + "_cell"}))

    cell("lstm_cell", nn.LSTMCell, "lstm", True)
    cell("lstm_cell_default_state", nn.LSTMCell, "lstm", False)
    cell("gru_cell", nn.GRUCell, "gru", True)
    cell("gru_cell_unbatched", nn.GRUCell, "gru", True, batch=None)
    cell("rnn_cell", nn.RNNCell, "rnn", True)
    return cases


def transformer_cases():
    cases = []
    nn = torch.nn
    d_model, nhead, ff = 8, 2, 16

    def encoder(name, cfg, batch_first, train, masks):
        torch.manual_seed(200 + len(cases))
        m = nn.TransformerEncoderLayer(d_model, nhead, ff, dropout=0.0, batch_first=batch_first, **cfg).double()
        randomize(m)
        b, t = 2, 5
        x = {"src": rand(b, t, d_model) if batch_first else rand(t, b, d_model)}
        bools = {}
        if "causal" in masks:
            bools["src_mask"] = torch.triu(torch.ones(t, t, dtype=torch.bool), diagonal=1)
        if "padding" in masks:
            pad = torch.zeros(b, t, dtype=torch.bool)
            pad[1, -2:] = True
            bools["src_key_padding_mask"] = pad

        def call(m, x):
            return {"output": m(x["src"], src_mask=bools.get("src_mask"),
                                src_key_padding_mask=bools.get("src_key_padding_mask"))}

        config = dict(cfg, d_model=d_model, nhead=nhead, dim_feedforward=ff, batch_first=batch_first, train=train)
        cases.append(run_case(name, m, x, call, bool_inputs=bools, config=config, train=train))

    encoder("encoder_post_norm_relu_eval", {}, True, False, [])
    encoder("encoder_post_norm_relu_train_masks", {}, False, True, ["causal", "padding"])
    encoder("encoder_pre_norm_gelu_eval_masks", {"norm_first": True, "activation": "gelu"}, True, False,
            ["causal", "padding"])
    encoder("encoder_pre_norm_relu_train", {"norm_first": True, "layer_norm_eps": 1e-3}, False, True, [])

    def decoder(name, cfg, batch_first, train):
        torch.manual_seed(300 + len(cases))
        m = nn.TransformerDecoderLayer(d_model, nhead, ff, dropout=0.0, batch_first=batch_first, **cfg).double()
        randomize(m)
        b, t, s = 2, 4, 5
        x = {
            "tgt": rand(b, t, d_model) if batch_first else rand(t, b, d_model),
            "memory": rand(b, s, d_model) if batch_first else rand(s, b, d_model),
        }
        mpad = torch.zeros(b, s, dtype=torch.bool)
        mpad[0, -1] = True
        bools = {"tgt_mask": torch.triu(torch.ones(t, t, dtype=torch.bool), diagonal=1),
                 "memory_key_padding_mask": mpad}

        def call(m, x):
            return {"output": m(x["tgt"], x["memory"], tgt_mask=bools["tgt_mask"],
                                memory_key_padding_mask=bools["memory_key_padding_mask"])}

        config = dict(cfg, d_model=d_model, nhead=nhead, dim_feedforward=ff, batch_first=batch_first, train=train)
        cases.append(run_case(name, m, x, call, bool_inputs=bools, config=config, train=train))

    decoder("decoder_post_norm_relu_eval", {}, True, False)
    decoder("decoder_pre_norm_gelu_train", {"norm_first": True, "activation": "gelu"}, False, True)

    # A 2-layer encoder stack with a final LayerNorm (enable_nested_tensor off: the nested
    # fast path zeroes padded positions; brisk computes them as the plain path does).
    torch.manual_seed(400)
    layer = nn.TransformerEncoderLayer(d_model, nhead, ff, dropout=0.0, batch_first=True)
    m = nn.TransformerEncoder(layer, 2, norm=nn.LayerNorm(d_model), enable_nested_tensor=False).double()
    randomize(m)
    x = {"src": rand(2, 5, d_model)}
    cases.append(run_case("encoder_stack_2_layers_final_norm", m, x, lambda m, x: {"output": m(x["src"])},
                          config={"d_model": d_model, "nhead": nhead, "dim_feedforward": ff, "num_layers": 2,
                                  "batch_first": True, "train": False}))

    # Small layers.
    def small(name, m, x, config, train=True):
        torch.manual_seed(500 + len(cases))
        m = m.double()
        randomize(m)
        cases.append(run_case(name, m, x, lambda m, x: {"output": m(x["input"])}, config=config, train=train))

    torch.manual_seed(600)
    small("rms_norm_default_eps", nn.RMSNorm(6), {"input": rand(2, 3, 6)}, {"shape": [6]})
    small("rms_norm_2d_eps", nn.RMSNorm((3, 6), eps=1e-2), {"input": 0.1 * rand(2, 3, 6)}, {"shape": [3, 6], "eps": 1e-2})
    small("rms_norm_no_affine", nn.RMSNorm(6, elementwise_affine=False), {"input": rand(4, 6)},
          {"shape": [6], "affine": False})
    small("instance_norm_default", nn.InstanceNorm2d(3), {"input": rand(2, 3, 4, 5)}, {"C": 3})
    small("instance_norm_affine", nn.InstanceNorm2d(3, affine=True), {"input": rand(2, 3, 4, 5)},
          {"C": 3, "affine": True})
    small("instance_norm_unbatched", nn.InstanceNorm2d(3, affine=True), {"input": rand(3, 4, 5)},
          {"C": 3, "affine": True})
    small("prelu_single", nn.PReLU(), {"input": rand(2, 3, 4, 4)}, {"num_parameters": 1})
    small("prelu_channels", nn.PReLU(3), {"input": rand(2, 3, 4, 4)}, {"num_parameters": 3})

    # InstanceNorm2d with running statistics: two training steps, then eval.
    torch.manual_seed(700)
    m = nn.InstanceNorm2d(3, affine=True, track_running_stats=True, momentum=0.2).double()
    randomize(m)
    x1, x2, x3 = rand(2, 3, 4, 5), rand(2, 3, 4, 5), rand(2, 3, 4, 5)
    init = {k: enc(v) for k, v in m.state_dict().items()}
    m.train()
    m(x1)
    m(x2)
    stats = {k: enc(v) for k, v in m.state_dict().items()}
    m.eval()
    y = m(x3)
    cases.append({"name": "instance_norm_running_stats", "config": {"C": 3, "momentum": 0.2}, "params": init,
                  "inputs": {"x1": enc(x1), "x2": enc(x2), "x3": enc(x3)}, "after_train": stats,
                  "outputs": {"eval_output": enc(y)}})
    return cases


def main():
    os.makedirs(OUT, exist_ok=True)
    for fname, cases in (("recurrent.json", recurrent_cases()), ("transformer.json", transformer_cases())):
        with open(os.path.join(OUT, fname), "w") as f:
            json.dump({"torch": torch.__version__, "cases": cases}, f, separators=(",", ":"))
            f.write("\n")
        print(fname, len(cases), "cases")


if __name__ == "__main__":
    main()
