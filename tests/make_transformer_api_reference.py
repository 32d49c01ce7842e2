#!/usr/bin/env python3
# tests/make_transformer_api_reference.py: PyTorch reference values for
# tests/test_transformer_api.cpp: floating (additive) attention and key padding masks through
# nn.TransformerEncoderLayer and nn.MultiheadAttention (also mixed with a Bool key padding
# mask), and the PyTorch-form nn.TransformerEncoder(layer, num_layers, norm) called with
# generate_square_subsequent_mask and is_causal=True.
#   unset OPENBLAS_CORETYPE OPENBLAS_L2_SIZE; /work/venv/bin/python tests/make_transformer_api_reference.py
#   -> tests/data/transformer_api/reference.json
# JSON has no infinities, so each floating mask is stored as its finite part ("*_bias") and
# where it is -inf (a Bool "*_neg_inf"); the C++ side adds them back together. Values are drawn
# in F32 and the modules run in F64; outputs and the gradients of sum(out * r) (fixed random r)
# w.r.t. the inputs and every parameter are stored.
import json
import os

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "data", "transformer_api")
nn = torch.nn


def enc(t):
    t = t.detach().to(torch.float64)
    return {"shape": list(t.shape), "data": [float(v) for v in t.flatten().tolist()]}


def enc_bool(t):
    return {"shape": list(t.shape), "data": [bool(v) for v in t.flatten().tolist()]}


def rand(*shape):
    return torch.randn(*shape, dtype=torch.float32).to(torch.float64)


def randomize(module):
    with torch.no_grad():
        for p in module.parameters():
            p.copy_((0.5 * torch.randn(p.shape, dtype=torch.float32)).to(torch.float64))


def float_mask(bias, neg_inf):
    return bias.masked_fill(neg_inf, float("-inf"))


def run_case(name, module, inputs, masks, call, config):
    """masks: name -> (finite bias or None, Bool -inf positions or None); None bias = a Bool mask."""
    module.eval()
    module.zero_grad()
    for t in inputs.values():
        t.requires_grad_(True)
    built = {}
    for k, (bias, where) in masks.items():
        built[k] = where if bias is None else float_mask(bias, where)
    outs = call(module, inputs, built)
    weights = {k: rand(*v.shape) for k, v in outs.items()}
    sum((outs[k] * weights[k]).sum() for k in outs).backward()
    case = {
        "name": name,
        "config": config,
        "params": {k: enc(v) for k, v in module.state_dict().items()},
        "inputs": {k: enc(v) for k, v in inputs.items()},
        "masks": {},
        "outputs": {k: enc(v) for k, v in outs.items()},
        "loss_weights": {k: enc(v) for k, v in weights.items()},
        "grads": {},
    }
    for k, (bias, where) in masks.items():
        case["masks"][k] = {"bias": None if bias is None else enc(bias), "neg_inf": enc_bool(where)}
    for k, v in inputs.items():
        case["grads"]["input." + k] = enc(v.grad)
    for k, p in module.named_parameters():
        case["grads"]["param." + k] = enc(p.grad)
    return case


def cases():
    out = []
    d_model, nhead, ff = 8, 2, 16
    b, t, s = 2, 5, 4

    # Encoder layer, (T, B, E): a float src_mask (causal -inf plus a finite bias, as ALiBi) and
    # a float key padding mask (finite values, -inf on the last two keys of the second sequence).
    torch.manual_seed(1)
    layer = nn.TransformerEncoderLayer(d_model, nhead, ff, dropout=0.0).double()
    randomize(layer)
    pad = torch.zeros(b, t, dtype=torch.bool)
    pad[1, -2:] = True
    masks = {
        "src_mask": (0.5 * rand(t, t), torch.triu(torch.ones(t, t, dtype=torch.bool), diagonal=1)),
        "src_key_padding_mask": (0.5 * rand(b, t), pad),
    }
    out.append(run_case("encoder_layer_float_masks", layer, {"src": rand(t, b, d_model)}, masks,
                        lambda m, x, k: {"output": m(x["src"], src_mask=k["src_mask"],
                                                     src_key_padding_mask=k["src_key_padding_mask"])},
                        {"d_model": d_model, "nhead": nhead, "dim_feedforward": ff, "batch_first": False}))

    # MultiheadAttention, (T, B, E), cross-attention: a per-head float attn_mask (B * H, T, S)
    # and a float key padding mask; weights per head.
    torch.manual_seed(2)
    mha = nn.MultiheadAttention(d_model, nhead).double()
    randomize(mha)
    kpad = torch.zeros(b, s, dtype=torch.bool)
    kpad[0, -1] = True
    masks = {
        "attn_mask": (0.5 * rand(b * nhead, t, s), torch.zeros(b * nhead, t, s, dtype=torch.bool)),
        "key_padding_mask": (0.5 * rand(b, s), kpad),
    }

    def mha_call(m, x, k):
        o, w = m(x["query"], x["key"], x["value"], key_padding_mask=k["key_padding_mask"], need_weights=True,
                 attn_mask=k["attn_mask"], average_attn_weights=False)
        return {"output": o, "weights": w}

    inputs = {"query": rand(t, b, d_model), "key": rand(s, b, d_model), "value": rand(s, b, d_model)}
    out.append(run_case("mha_float_masks", mha, inputs, masks, mha_call, {"d_model": d_model, "nhead": nhead}))

    # The same module with a Bool key padding mask beside a float (T, S) attn_mask (PyTorch
    # turns the Bool one into -inf and adds them; it warns that mixing is deprecated).
    masks = {
        "attn_mask": (0.5 * rand(t, s), torch.zeros(t, s, dtype=torch.bool)),
        "key_padding_mask": (None, kpad),
    }
    inputs = {"query": rand(t, b, d_model), "key": rand(s, b, d_model), "value": rand(s, b, d_model)}
    out.append(run_case("mha_bool_padding_float_attn", mha, inputs, masks, mha_call,
                        {"d_model": d_model, "nhead": nhead}))

    # PyTorch's form of the stack: 3 copies of one layer and a final LayerNorm, batch first,
    # called as a GPT-style decoder is: the square subsequent mask, is_causal=True and padding.
    torch.manual_seed(3)
    layer = nn.TransformerEncoderLayer(d_model, nhead, ff, dropout=0.0, batch_first=True)
    stack = nn.TransformerEncoder(layer, 3, norm=nn.LayerNorm(d_model), enable_nested_tensor=False).double()
    randomize(stack)
    causal = nn.Transformer.generate_square_subsequent_mask(t, dtype=torch.float64)
    masks = {"mask": (torch.zeros(t, t, dtype=torch.float64), torch.isinf(causal)),
             "src_key_padding_mask": (None, pad)}
    out.append(run_case("encoder_stack_causal", stack, {"src": rand(b, t, d_model)}, masks,
                        lambda m, x, k: {"output": m(x["src"], mask=k["mask"],
                                                     src_key_padding_mask=k["src_key_padding_mask"],
                                                     is_causal=True)},
                        {"d_model": d_model, "nhead": nhead, "dim_feedforward": ff, "num_layers": 3,
                         "batch_first": True, "state_dict_keys": list(stack.state_dict().keys())}))
    return out


def main():
    os.makedirs(OUT, exist_ok=True)
    c = cases()
    with open(os.path.join(OUT, "reference.json"), "w") as f:
        json.dump({"torch": torch.__version__, "cases": c}, f, separators=(",", ":"))
        f.write("\n")
    print("reference.json", len(c), "cases")


if __name__ == "__main__":
    main()
