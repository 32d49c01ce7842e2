# examples/bench/bench_gpt2.py: the PyTorch half of examples/bench/bench_gpt2.cpp: GPT-2 124M
# (bench_models.py's GPT2 class: nanoGPT's block with fused scaled_dot_product_attention, GELU
# tanh, lm head tied to wte) with vocab 50257, 1024 positions, d 768, 12 layers, 12 heads and
# dropout 0, its weights read from the safetensors file brisk wrote (Hugging Face's names, Conv1D
# weights (in, out), transposed here into nn.Linear's (out, in)) with a small reader of our own
# (the safetensors package need not be installed), the batch from the llm.c-format token file
# (inputs tokens[0, BT), targets tokens[1, BT]). A step: zero_grad, forward, cross-entropy,
# backward, AdamW (lr 1e-4, weight decay 0, as llm.c). Prints
# "RESULT ms=.. loss0=.. loss_last=.. rss_mb=.." (median of STEPS steps after WARMUP).
# Usage: python bench_gpt2.py DIR B T THREADS STEPS WARMUP [LAYERS]
import json
import os
import resource
import sys
import time

import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_models import GPT2  # noqa: E402


def torch_name(key):
    """brisk's (Hugging Face's) key -> (bench_models.GPT2's parameter name, transpose?)."""
    k = key[len("transformer."):] if key.startswith("transformer.") else key
    for hf, ours in (("attn.c_attn.", "c_attn."), ("attn.c_proj.", "c_proj."), ("mlp.c_fc.", "c_fc."),
                     ("mlp.c_proj.", "mlp_proj.")):
        if hf in k:
            k = k.replace(hf, ours)
            return k, k.endswith(".weight")
    return k, False


def load_safetensors(model, path):
    params = dict(model.named_parameters())
    done = set()
    with open(path, "rb") as f:
        n = int.from_bytes(f.read(8), "little")
        header = json.loads(f.read(n))
        base = 8 + n
        for key, entry in header.items():
            if key == "__metadata__":
                continue
            assert entry["dtype"] == "F32", (key, entry["dtype"])
            name, transpose = torch_name(key)
            p = params[name]
            begin, end = entry["data_offsets"]
            shape = tuple(entry["shape"])
            f.seek(base + begin)
            with torch.no_grad():
                if transpose:
                    buf = np.empty(shape, np.float32)
                    assert f.readinto(memoryview(buf).cast("B")) == end - begin
                    p.copy_(torch.from_numpy(buf).t())
                else:  # straight into the parameter, no second copy
                    assert tuple(p.shape) == shape, (key, p.shape, shape)
                    assert f.readinto(memoryview(p.detach().numpy()).cast("B")) == end - begin
            done.add(name)
    missing = set(params) - done
    assert not missing, f"not in {path}: {sorted(missing)}"


def read_tokens(path):
    header = np.fromfile(path, dtype=np.int32, count=256)
    assert header[0] == 20240520 and header[1] == 1, f"bad token file {path}"
    tokens = np.fromfile(path, dtype=np.uint16, offset=256 * 4)
    assert len(tokens) == header[2]
    return tokens.astype(np.int64)


def main():
    d, B, T, threads, steps, warmup = sys.argv[1], *map(int, sys.argv[2:7])
    layers = int(sys.argv[7]) if len(sys.argv) > 7 else 12
    torch.set_num_threads(threads)
    with torch.device("meta"):  # no init: every weight is loaded
        model = GPT2(vocab=50257, positions=1024, d=768, layers=layers, heads=12, dropout=0.0)
    model = model.to_empty(device="cpu")
    load_safetensors(model, os.path.join(d, "gpt2.safetensors"))
    model.train()
    tokens = torch.from_numpy(read_tokens(os.path.join(d, f"tokens_{B}x{T}.bin")))
    assert tokens.numel() == B * T + 1
    x, y = tokens[:B * T].view(B, T), tokens[1:]
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=0.0)

    def step():
        opt.zero_grad()
        logits = model(x)
        loss = F.cross_entropy(logits.view(-1, logits.size(-1)), y)
        loss.backward()
        opt.step()
        return loss.item()

    times, losses = [], []
    for i in range(warmup + steps):
        t0 = time.perf_counter()
        losses.append(step())
        if i >= warmup:
            times.append(time.perf_counter() - t0)
    times.sort()
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024
    print(f"RESULT ms={times[len(times) // 2] * 1e3:.3f} loss0={losses[0]:.7f} loss_last={losses[-1]:.7f} "
          f"rss_mb={rss}")


if __name__ == "__main__":
    main()
