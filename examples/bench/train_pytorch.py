#!/usr/bin/python3
# examples/bench/train_pytorch.py: the PyTorch half of examples/bench/compare_pytorch.sh: the
# same MLP (784-256-128-10) or small CNN as brisk's bench_train, Adam 1e-3, batch 128, inputs
# normalized with mean 0.2860 / std 0.3530, read from the same IDX files (gzip + numpy). Batches
# are sliced from in-memory tensors with a fresh permutation per epoch (PyTorch's fastest
# idiomatic path; no torch DataLoader). Prints one line in bench_train's RESULT format.
# Runs under any PyTorch from 1.13 on (compare_pytorch.sh picks the interpreter). Not a test: it asserts nothing.
import argparse
import gzip
import resource
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F


def read_idx(path):
    with gzip.open(path, "rb") as f:
        raw = f.read()
    ndim = raw[3]
    dims = [int.from_bytes(raw[4 + 4 * i:8 + 4 * i], "big") for i in range(ndim)]
    return np.frombuffer(raw, dtype=np.uint8, offset=4 + 4 * ndim).reshape(dims)


def load(root, split):
    x = read_idx(f"{root}/{split}-images-idx3-ubyte.gz").astype(np.float32) / 255.0
    y = read_idx(f"{root}/{split}-labels-idx1-ubyte.gz").astype(np.int64)
    x = (torch.from_numpy(x).unsqueeze(1) - 0.2860) / 0.3530
    return x, torch.from_numpy(y)


def make_model(name):
    if name == "mlp":
        return nn.Sequential(nn.Flatten(), nn.Linear(784, 256), nn.ReLU(), nn.Linear(256, 128), nn.ReLU(),
                             nn.Linear(128, 10))
    return nn.Sequential(nn.Conv2d(1, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                         nn.Conv2d(32, 64, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(),
                         nn.Linear(64 * 7 * 7, 128), nn.ReLU(), nn.Dropout(0.25), nn.Linear(128, 10))


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--model", choices=["mlp", "cnn"], default="mlp")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--epochs", type=int, default=1)
    p.add_argument("--data", default="/usr/share/datasets/fashion-mnist")
    a = p.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    x, y = load(a.data, "train")
    xt, yt = load(a.data, "t10k")
    model = make_model(a.model)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    total, cpu, samples = 0.0, 0.0, 0
    for _ in range(a.epochs):
        t0, c0 = time.perf_counter(), time.process_time()
        perm = torch.randperm(len(x))
        for i in range(0, len(x), 128):
            idx = perm[i:i + 128]
            loss = F.cross_entropy(model(x[idx]), y[idx])
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            samples += len(idx)
        total += time.perf_counter() - t0
        cpu += time.process_time() - c0
    model.eval()
    with torch.no_grad():
        # batches of 128 as in training (and bench_train), so peak RSS measures training
        correct = sum(int((model(xt[i:i + 128]).argmax(1) == yt[i:i + 128]).sum()) for i in range(0, len(xt), 128))
    rss_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0
    print(f"RESULT impl=pytorch model={a.model} threads={a.threads} epochs={a.epochs} "
          f"sec_per_epoch={total / a.epochs:.3f} cpu_per_epoch={cpu / a.epochs:.3f} samples_per_s={samples / total:.0f} "
          f"test_acc={correct / len(xt):.4f} peak_rss_mb={rss_mb:.0f}", flush=True)


if __name__ == "__main__":
    main()
