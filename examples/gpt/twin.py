#!/usr/bin/env python3
"""examples/gpt/twin.py OUT_DIR [--threads N]: the PyTorch twin of examples/gpt. It reads what
the brisk run wrote in OUT_DIR (config.json, init.safetensors, train.bin / val.bin, order.txt,
run.json) and trains Hugging Face transformers' GPT2LMHeadModel from the same initial weights
on the same windows in the same order, with the same AdamW (decay on matrices only), warm-up +
cosine schedule, clipping, accumulation and BF16 autocast setting; it evaluates the same
validation windows at the same steps and writes OUT_DIR/twin_log.jsonl (step, train_loss,
val_loss, val_perplexity, tokens_per_s). Needs torch, transformers, safetensors and numpy:
  env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE /work/venv/bin/python examples/gpt/twin.py gpt_out
"""
import argparse
import json
import math
import os
import time

import numpy as np
import torch
import torch.nn.functional as F
from safetensors.torch import load_file
from transformers import GPT2Config, GPT2LMHeadModel

ap = argparse.ArgumentParser()
ap.add_argument("out")
ap.add_argument("--threads", type=int, default=0)
args = ap.parse_args()
if args.threads > 0:
    torch.set_num_threads(args.threads)
out = args.out
run = json.load(open(os.path.join(out, "run.json")))
steps, batch, accum, T = run["steps"], run["batch"], run["accum"], run["block"]
bf16 = bool(run["bf16"])


def tokens(path):
    header = np.fromfile(path, dtype="<i4", count=256)
    assert header[0] in (20240520, 20240801), f"{path}: not an llm.c token file"
    dtype = "<u2" if header[0] == 20240520 else "<u4"
    ids = np.fromfile(path, dtype=dtype, offset=1024)
    assert len(ids) == header[2]
    return torch.from_numpy(ids.astype(np.int64))


train, val = tokens(os.path.join(out, "train.bin")), tokens(os.path.join(out, "val.bin"))
order = [[int(x) for x in line.split()] for line in open(os.path.join(out, "order.txt"))]
assert len(order) >= steps * accum, "order.txt is shorter than steps * accum"


def windows(data, idx):
    w = torch.stack([data[i * T:i * T + T + 1] for i in idx])
    return w[:, :-1], w[:, 1:]


config = GPT2Config.from_json_file(os.path.join(out, "config.json"))
model = GPT2LMHeadModel(config)
missing, unexpected = model.load_state_dict(load_file(os.path.join(out, "init.safetensors")), strict=False)
assert not unexpected and all(k == "lm_head.weight" for k in missing), (missing, unexpected)
model.tie_weights()
model.train()

decay = [p for p in model.parameters() if p.dim() >= 2]
no_decay = [p for p in model.parameters() if p.dim() < 2]
opt = torch.optim.AdamW([{"params": decay, "weight_decay": run["weight_decay"]},
                         {"params": no_decay, "weight_decay": 0.0}], lr=run["lr"], betas=(0.9, 0.95), eps=1e-8)
warm = run["warmup"]
sched = torch.optim.lr_scheduler.SequentialLR(opt, [
    torch.optim.lr_scheduler.LinearLR(opt, 1.0 / warm, 1.0, warm),
    torch.optim.lr_scheduler.CosineAnnealingLR(opt, max(1, steps - warm), run["lr"] * run["min_lr_ratio"]),
], [warm])


def loss_of(x, y):
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
        logits = model(x).logits
    return F.cross_entropy(logits.reshape(-1, logits.size(-1)).float(), y.reshape(-1))


def evaluate():
    model.eval()
    n = min(run["eval_windows"], (len(val) - T - 1) // T + 1)
    micro = batch // run["world"]
    total = 0.0
    with torch.no_grad():
        for at in range(0, n, micro):
            idx = list(range(at, min(n, at + micro)))
            x, y = windows(val, idx)
            total += loss_of(x, y).item() * len(idx)
    model.train()
    return total / n


log = []
t0 = time.perf_counter()
for step in range(1, steps + 1):
    opt.zero_grad(set_to_none=True)
    step_loss = 0.0
    for m in range(accum):
        x, y = windows(train, order[(step - 1) * accum + m])
        loss = loss_of(x, y)
        (loss / accum).backward()
        step_loss += loss.item() / accum
    torch.nn.utils.clip_grad_norm_(model.parameters(), run["clip"])
    opt.step()
    sched.step()
    if step % run["eval_every"] == 0 or step == steps:
        train_time = time.perf_counter() - t0
        vl = evaluate()
        tps = step * batch * accum * T / train_time
        rec = {"step": step, "train_loss": step_loss, "val_loss": vl, "val_perplexity": math.exp(vl), "tokens_per_s": tps}
        log.append(json.dumps(rec))
        print(f"twin step {step}: train loss {step_loss:.4f}, val loss {vl:.4f}, perplexity {math.exp(vl):.2f}, "
              f"{tps:.0f} tokens/s", flush=True)
        t0 += time.perf_counter() - t0 - train_time  # evaluation time is not training time
with open(os.path.join(out, "twin_log.jsonl"), "w") as f:
    f.write("\n".join(log) + "\n")
