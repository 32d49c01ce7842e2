#!/usr/bin/env python3
# tests/make_parity_reference.py: the PyTorch side of brisk's model parity tests
# (tests/test_parity.cpp). Writes tests/data/parity/ with PyTorch's weights, inputs, outputs and
# gradients for three models, and checks the reverse direction: a file brisk writes loads into
# PyTorch. Not run by CI: it needs torch, torchvision, safetensors and transformers; the files it
# makes are committed. Run it with the OpenBLAS overrides of the build machines unset:
#
#   env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE /usr/bin/python3 tests/make_parity_reference.py
#   ... tests/make_parity_reference.py --check   # write nothing; recompute and verify the files
#
# Models (all F32, CPU):
#   cnn       the Fashion-MNIST CNN (brisk's nn::models::SmallCNN, written here as nn.Sequential
#             with the same names). Seeded random weights in cnn.safetensors (PyTorch's names);
#             cnn_io.safetensors: a (4, 1, 28, 28) batch, targets, eval-mode logits, the
#             cross-entropy loss and the gradients of every weight and of the input, in eval
#             mode. Train mode is not compared: its dropout draws from each framework's own RNG.
#   resnet18  torchvision.models.resnet18(num_classes=10). Every parameter and buffer is filled
#             from the formula below (no weights stored; brisk computes the same values).
#             resnet18_io.safetensors: a (2, 3, 96, 96) input, targets, logits, loss and
#             gradients (seven named parameters and the input) in eval mode (running statistics)
#             AND in train mode (batch statistics, deterministic), plus the running statistics
#             of a few BatchNorm layers after that one train-mode forward. 96x96 rather than
#             64x64: layer4's batch statistics then average 18 values, not 8, which halves F32's
#             own error in train mode (PyTorch F32 vs F64: 2e-6 instead of 4e-6 on the logits).
#   gpt2      Hugging Face GPT2LMHeadModel (transformers), tiny config (2 layers, 2 heads, 64
#             wide, vocab 101, 32 positions, dropout 0 so train = eval), seeded weights in
#             gpt2.safetensors with Hugging Face's names (Conv1D weights (in, out), lm_head tied
#             to wte and left out of the file, as save_pretrained does); gpt2_io.safetensors:
#             (2, 16) token ids, logits, the LM loss (labels = ids, shifted as HF does) and the
#             gradient of every weight (wte's includes the tied lm_head's share).
# Reverse direction: brisk_gpt2.safetensors is the tiny GPT-2 with weights drawn by brisk's
# seeded uniform_, written by brisk (test_parity.cpp re-writes it and checks the bytes), and
# brisk_gpt2_logits.safetensors holds brisk's logits for gpt2_io's token ids. This script reads
# the weights with safetensors.torch.load_file, loads them into transformers' GPT2LMHeadModel
# with load_state_dict(strict=True) (on model.transformer: the file, like save_pretrained's,
# has no lm_head, which is tied to wte) and checks PyTorch's logits match brisk's (1e-5
# relative). GPT-2 rather than the CNN keeps the data small (0.4 MB, not 1.7 MB) and is the
# export users make (brisk -> Hugging Face).
#
# Note [ResNet formula]: tensor number k (its index in torchvision's state_dict order, which
# brisk's ResNet18 shares) has n elements; element i (row-major) is
#     x = (i + 1) * 0x9E3779B97F4A7C15 + (k + 1) * 0xD1B54A32D192ED03      (mod 2^64)
#     x ^= x >> 31; x *= 0xBF58476D1CE4E5B9; x ^= x >> 29; x *= 0x94D049BB133111EB; x ^= x >> 32
#     u = (x >> 11) * 2^-53                                               (a double in [0, 1))
#     value = float32(center + scale * (2 u - 1))                         (in float64, one cast)
# with (center, scale) by kind: conv/linear weight (0, sqrt(3 / fan_in)) (variance 1/fan_in),
# linear bias (0, 0.1), BN weight (1, 0.25), BN bias (0, 0.1), running_mean (0, 0.1),
# running_var (1, 0.5) (so in [0.5, 1.5]), num_batches_tracked 0. Integer arithmetic, then a
# float64 multiply and add each rounded on its own (no fma), round identically everywhere, so
# both sides get the same bits (the test also compares the per-tensor sums stored here).
import json
import math
import os
import sys

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
import torchvision
from safetensors import safe_open
from safetensors.torch import load_file, save_file

HERE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data", "parity")
CHECK_ONLY = "--check" in sys.argv[1:]
RTOL_OUT = 1e-5  # brisk's logits vs PyTorch's (reverse direction)
RTOL_REGEN = 1e-6  # --check: recomputed floats vs the committed ones


def rel_err(a, b):
    """max|a - b| / max(max|b|, 1e-30): the relative error test_parity.cpp uses."""
    a = a.detach().double()
    b = b.detach().double()
    return ((a - b).abs().max() / max(b.abs().max().item(), 1e-30)).item()


# ------------------------------------------------------------------------------------ writing

def save(name, tensors, metadata=None, exact=False):
    """Writes (or, with --check, verifies) tests/data/parity/<name>.

    --check: names, dtypes and shapes must be identical; integer tensors, inputs and `exact`
    files (seeded weights) bit for bit, computed floats to RTOL_REGEN (PyTorch's kernels may
    round differently on another machine)."""
    path = os.path.join(HERE, name)
    tensors = {k: v.detach().contiguous().clone() for k, v in tensors.items()}
    meta = {"format": "pt", "writer": "torch " + torch.__version__}
    meta.update(metadata or {})
    if not CHECK_ONLY:
        save_file(tensors, path, metadata=meta)
        print(f"wrote {path} ({os.path.getsize(path)} bytes, {len(tensors)} tensors)")
        return
    got = load_file(path)
    assert sorted(got) == sorted(tensors), f"{path}: names differ: {sorted(set(got) ^ set(tensors))}"
    worst = 0.0
    for k, want in tensors.items():
        t = got[k]
        assert t.dtype == want.dtype and t.shape == want.shape, f"{path}: {k}: {t.dtype} {tuple(t.shape)}"
        if exact or not want.is_floating_point() or k == "input":
            assert torch.equal(t, want), f"{path}: {k}: values differ"
        else:
            e = rel_err(t, want)
            worst = max(worst, e)
            assert e <= RTOL_REGEN, f"{path}: {k}: relative error {e:.3g} > {RTOL_REGEN}"
    with safe_open(path, framework="pt") as f:
        stored = f.metadata()
    for k, v in (metadata or {}).items():
        assert stored.get(k) == v, f"{path}: metadata {k} differs"
    print(f"ok: {path} ({len(tensors)} tensors, max relative error of computed floats {worst:.3g})")


def grads(model, prefix="grad."):
    return {prefix + n: p.grad for n, p in model.named_parameters()}


# ---------------------------------------------------------------------------------------- cnn

def small_cnn():
    """brisk's nn::models::SmallCNN with the same names (features.{0,3}, classifier.{0,3})."""
    features = nn.Sequential(nn.Conv2d(1, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                             nn.Conv2d(32, 64, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2))
    classifier = nn.Sequential(nn.Linear(64 * 7 * 7, 128), nn.ReLU(), nn.Dropout(0.25), nn.Linear(128, 10))

    class SmallCNN(nn.Module):
        def __init__(self):
            super().__init__()
            self.features = features
            self.classifier = classifier

        def forward(self, x):
            return self.classifier(torch.flatten(self.features(x), 1))

    return SmallCNN()


def make_cnn():
    torch.manual_seed(1234)
    model = small_cnn()
    with torch.no_grad():  # biases larger than PyTorch's default so a bias mix-up shows
        for n, p in model.named_parameters():
            if n.endswith("bias"):
                p.copy_(torch.randn_like(p) * 0.1)
    x = torch.randn(4, 1, 28, 28)
    target = torch.tensor([3, 0, 9, 5])
    model.eval()
    x.requires_grad_(True)
    logits = model(x)
    loss = F.cross_entropy(logits, target)
    loss.backward()
    save("cnn.safetensors", model.state_dict(), exact=True)
    io = {"input": x, "target": target, "logits_eval": logits, "loss_eval": loss, "grad.input": x.grad}
    io.update(grads(model))
    save("cnn_io.safetensors", io)
    print(f"cnn: |logits| max {logits.abs().max().item():.3g}, loss {loss.item():.6g}")


# ----------------------------------------------------------------------------------- resnet18

M64 = (1 << 64) - 1


def formula_values(k, n, center, scale):
    """Note [ResNet formula] (tests/test_parity.cpp: formula_tensor)."""
    with np.errstate(over="ignore"):
        i = np.arange(1, n + 1, dtype=np.uint64)
        x = i * np.uint64(0x9E3779B97F4A7C15) + np.uint64(((k + 1) * 0xD1B54A32D192ED03) & M64)
        x ^= x >> np.uint64(31)
        x *= np.uint64(0xBF58476D1CE4E5B9)
        x ^= x >> np.uint64(29)
        x *= np.uint64(0x94D049BB133111EB)
        x ^= x >> np.uint64(32)
    u = (x >> np.uint64(11)).astype(np.float64) * (2.0 ** -53)
    return (center + scale * (2.0 * u - 1.0)).astype(np.float32)


def formula_kind(name, t):
    """(center, scale) of Note [ResNet formula]; None for num_batches_tracked."""
    if name.endswith("num_batches_tracked"):
        return None
    if name.endswith("running_mean"):
        return 0.0, 0.1
    if name.endswith("running_var"):
        return 1.0, 0.5
    if t.dim() > 1:  # conv or linear weight: fan_in = numel / out
        return 0.0, math.sqrt(3.0 / (t.numel() // t.shape[0]))
    if name.startswith("fc."):
        return 0.0, 0.1
    return (1.0, 0.25) if name.endswith("weight") else (0.0, 0.1)  # BatchNorm


def fill_resnet(model):
    sums = []
    with torch.no_grad():
        for k, (name, t) in enumerate(model.state_dict().items()):
            kind = formula_kind(name, t)
            if kind is None:
                t.zero_()
                sums.append(0.0)
                continue
            v = formula_values(k, t.numel(), *kind)
            t.copy_(torch.from_numpy(v).view(t.shape))
            sums.append(float(v.astype(np.float64).sum()))
    return sums


RESNET_GRADS = ["conv1.weight", "bn1.bias", "layer1.0.bn1.weight", "layer3.0.downsample.0.weight",
                "layer4.1.bn2.weight", "fc.weight", "fc.bias"]
RESNET_STATS = ["bn1", "layer1.0.bn1", "layer4.1.bn2", "layer3.0.downsample.1"]


def make_resnet():
    torch.manual_seed(5678)
    x = torch.randn(2, 3, 96, 96)
    target = torch.tensor([3, 7])
    io = {"input": x, "target": target}
    for mode in ("eval", "train"):
        model = torchvision.models.resnet18(num_classes=10)
        sums = fill_resnet(model)
        model.train(mode == "train")
        xi = x.clone().requires_grad_(True)
        logits = model(xi)
        loss = F.cross_entropy(logits, target)
        loss.backward()
        params = dict(model.named_parameters())
        io[f"logits_{mode}"] = logits
        io[f"loss_{mode}"] = loss
        io[f"grad_{mode}.input"] = xi.grad
        for n in RESNET_GRADS:
            io[f"grad_{mode}.{n}"] = params[n].grad
        if mode == "train":
            state = model.state_dict()
            for m in RESNET_STATS:
                io[f"after_train.{m}.running_mean"] = state[m + ".running_mean"]
                io[f"after_train.{m}.running_var"] = state[m + ".running_var"]
        print(f"resnet18 {mode}: |logits| max {logits.abs().max().item():.3g}, loss {loss.item():.6g}")
    io["formula_sums"] = torch.tensor(sums, dtype=torch.float64)
    keys = list(torchvision.models.resnet18(num_classes=10).state_dict().keys())
    save("resnet18_io.safetensors", io, {"state_dict_keys": json.dumps(keys)})


# --------------------------------------------------------------------------------------- gpt2

def tiny_gpt2():
    from transformers import GPT2Config, GPT2LMHeadModel

    cfg = GPT2Config(vocab_size=101, n_positions=32, n_embd=64, n_layer=2, n_head=2, resid_pdrop=0.0,
                     embd_pdrop=0.0, attn_pdrop=0.0, layer_norm_epsilon=1e-5, activation_function="gelu_new")
    return GPT2LMHeadModel(cfg)


def file_state(model):
    """The tensors save_pretrained writes: no tied lm_head, no attention-mask buffers."""
    return {n: t for n, t in model.state_dict().items()
            if not n.startswith("lm_head.") and not n.endswith((".attn.bias", ".attn.masked_bias"))}


def make_gpt2():
    torch.manual_seed(4321)
    model = tiny_gpt2()
    cfg = model.config
    with torch.no_grad():  # larger than HF's init so attention is peaked and every bias matters
        for n, p in model.named_parameters():
            if ".ln_" in n and n.endswith("weight"):
                p.copy_(1 + 0.1 * torch.randn_like(p))
            elif n.endswith("bias"):
                p.copy_(0.05 * torch.randn_like(p))
            else:
                p.mul_(4.0)
    model.eval()  # dropout probabilities are 0: train mode computes the same
    ids = torch.randint(0, cfg.vocab_size, (2, 16))
    out = model(ids, labels=ids)
    out.loss.backward()
    save("gpt2.safetensors", file_state(model), exact=True)
    io = {"input_ids": ids, "logits": out.logits, "loss": out.loss.detach()}
    io.update({"grad." + n: p.grad for n, p in model.named_parameters() if not n.startswith("lm_head.")})
    save("gpt2_io.safetensors", io, {"config": json.dumps(
        {"vocab_size": 101, "n_positions": 32, "n_embd": 64, "n_layer": 2, "n_head": 2})})
    print(f"gpt2 (transformers {__import__('transformers').__version__}): |logits| max "
          f"{out.logits.abs().max().item():.3g}, loss {out.loss.item():.6g}")
    return ids


def check_brisk_gpt2(ids):
    """Reverse direction: brisk's GPT-2 file into transformers, logits against brisk's."""
    weights = os.path.join(HERE, "brisk_gpt2.safetensors")
    logits_file = os.path.join(HERE, "brisk_gpt2_logits.safetensors")
    if not (os.path.exists(weights) and os.path.exists(logits_file)):
        print(f"missing {weights} or {logits_file}: run brisk_tests -tc='parity*' with "
              "BRISK_REGENERATE_PARITY=1 first")
        return False
    with safe_open(weights, framework="pt") as f:
        meta = f.metadata()
    assert meta.get("writer") == "brisk", f"{weights}: metadata {meta}"
    state = load_file(weights)
    model = tiny_gpt2()
    prefix = "transformer."
    assert all(k.startswith(prefix) for k in state), f"{weights}: keys {sorted(state)}"
    # strict: raises on a missing, unexpected or mis-shaped key
    model.transformer.load_state_dict({k[len(prefix):]: v for k, v in state.items()}, strict=True)
    assert model.lm_head.weight is model.transformer.wte.weight  # tied, so loaded too
    model.eval()
    with torch.no_grad():
        logits = model(ids).logits
    brisk = load_file(logits_file)["logits"]
    e = rel_err(logits, brisk)
    assert e <= RTOL_OUT, f"{weights}: PyTorch's logits differ from brisk's by {e:.3g} (relative)"
    # brisk writes in state_dict order: the data offsets follow Hugging Face's key order.
    with open(weights, "rb") as f:
        n = int.from_bytes(f.read(8), "little")
        header = json.loads(f.read(n))
    order = [k for _, k in sorted((v["data_offsets"][0], k) for k, v in header.items() if k != "__metadata__")]
    assert order == list(file_state(model)), f"{weights}: order {order}"
    print(f"ok: {weights} loads into transformers' GPT2LMHeadModel (load_file + "
          f"load_state_dict(strict=True)); logits vs brisk's: relative error {e:.3g}")
    return True


def main():
    torch.set_num_threads(1)
    os.makedirs(HERE, exist_ok=True)
    make_cnn()
    make_resnet()
    ids = make_gpt2()
    ok = check_brisk_gpt2(ids)
    total = sum(os.path.getsize(os.path.join(HERE, f)) for f in os.listdir(HERE))
    print(f"{HERE}: {total} bytes in all")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
