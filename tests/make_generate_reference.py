#!/usr/bin/env python3
"""Writes tests/data/generate/: a small GPT-2 with random weights as Hugging Face saves it
(config.json, model.safetensors) and what transformers' GPT2LMHeadModel gives for it
(expected.json: generate()'s ids; logits.safetensors: the logits of a fixed batch), for
tests/test_generate.cpp.

The weights are drawn wider than GPT-2's init (initializer_range 0.3) so that the logits are
far from ties and greedy decoding does not hinge on the last bit. Cases (greedy, as HF's
generate with do_sample=False):
  single      one prompt of 7 tokens, 40 new tokens
  padded      three prompts of 5, 9 and 1 tokens, left padded, with attention_mask
  stop        the same with eos_token_id = a token each row emits at its own step: rows stop
              one by one (then pad) and generation ends early
  penalty     single's prompt with repetition_penalty 1.3
Run with the venv that has torch, transformers and safetensors:
  env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE /work/venv/bin/python tests/make_generate_reference.py
"""
import json
import os

import torch
from safetensors.torch import save_file
from transformers import GPT2Config, GPT2LMHeadModel

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data", "generate")
os.makedirs(OUT, exist_ok=True)
torch.manual_seed(0)

config = GPT2Config(vocab_size=211, n_positions=64, n_embd=48, n_layer=2, n_head=4, resid_pdrop=0.0,
                    embd_pdrop=0.0, attn_pdrop=0.0, initializer_range=0.3, bos_token_id=1, eos_token_id=1)
model = GPT2LMHeadModel(config).eval()
# LayerNorm weights away from 1 and biases away from 0, so that loading them matters.
with torch.no_grad():
    for name, p in model.named_parameters():
        if name.endswith(("ln_1.weight", "ln_2.weight", "ln_f.weight")):
            p.copy_(1 + 0.2 * torch.randn_like(p))
        elif name.endswith(".bias"):
            p.copy_(0.1 * torch.randn_like(p))

state = {k: v.detach().contiguous().clone() for k, v in model.state_dict().items() if k != "lm_head.weight"}
save_file(state, os.path.join(OUT, "model.safetensors"), metadata={"format": "pt"})
config.to_json_file(os.path.join(OUT, "config.json"))

PAD = 0
prompts = [[5, 17, 42, 99, 3], [7, 7, 150, 2, 64, 31, 200, 11, 9], [123]]
single = [[12, 57, 3, 190, 44, 8, 101]]


def left_pad(rows):
    t = max(len(r) for r in rows)
    ids = [[PAD] * (t - len(r)) + r for r in rows]
    mask = [[0] * (t - len(r)) + [1] * len(r) for r in rows]
    return torch.tensor(ids), torch.tensor(mask)


def gen(rows, **kw):
    ids, mask = left_pad(rows)
    with torch.no_grad():
        out = model.generate(ids, attention_mask=mask, do_sample=False, pad_token_id=PAD, **kw)
    return out.tolist()


expected = {"pad_token_id": PAD, "prompts": prompts, "single_prompt": single[0]}
expected["single"] = gen(single, max_new_tokens=40, eos_token_id=None)
expected["padded"] = gen(prompts, max_new_tokens=20, eos_token_id=None)
# A stop token every row emits, at different steps: the most frequent new token.
new = [t for row in expected["padded"] for t in row[len(row) - 20:]]
stop = max(set(new), key=new.count)
expected["stop_token"] = stop
expected["stop"] = gen(prompts, max_new_tokens=20, eos_token_id=stop)
expected["penalty"] = gen(single, max_new_tokens=40, eos_token_id=None, repetition_penalty=1.3)

# Logits of a fixed batch (no padding), the whole sequence.
g = torch.Generator().manual_seed(1)
ids = torch.randint(0, config.vocab_size, (2, 23), generator=g)
with torch.no_grad():
    logits = model(ids).logits
save_file({"ids": ids, "logits": logits.contiguous()}, os.path.join(OUT, "logits.safetensors"))

with open(os.path.join(OUT, "expected.json"), "w") as f:
    json.dump(expected, f, indent=1)
    f.write("\n")
print("wrote", OUT, "stop token", stop)
