#!/usr/bin/env python3
"""examples/compress/distill_pytorch.py: the distillation stages of examples/compress in PyTorch.

The same teacher (SmallCNN), student (TinyCNN, width 8), data, normalization and recipe (Adam +
OneCycle at 3e-3, batch 128, T 4, alpha 0.9), so that brisk's distillation numbers can be told
apart from a property of the recipe: if PyTorch's distilled student lands where brisk's does,
the loss is not at fault. A reference tool, never a dependency of brisk.

Usage: distill_pytorch.py [--epochs N] [--student-epochs N] [--temperature T] [--alpha A]
                          [--width W] [--seed S] [--threads N] [--shift P] [--data DIR]
--labels N: the students have the labels of the first N training images only (the teacher,
trained before, had all). The student alone trains on those N for as many steps as the
distilled student, which learns the teacher's soft targets on all 60000 images and the labels
where it has them (semi-supervised distillation: the teacher labels the unlabeled images).
--shift P: random translations of up to P pixels (zero padded), the same view for the teacher
and the student in each step (consistent teaching), and for the student alone.
"""
import argparse
import gzip
import os
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

MEAN, STD = 0.2860, 0.3530


def read_idx(path):
    with gzip.open(path, "rb") as f:
        data = f.read()
    ndim = data[3]
    dims = [int.from_bytes(data[4 + 4 * i: 8 + 4 * i], "big") for i in range(ndim)]
    return np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * ndim).reshape(dims)


def load(root, split):
    prefix = "train" if split == "train" else "t10k"
    x = read_idx(os.path.join(root, f"{prefix}-images-idx3-ubyte.gz")).astype(np.float32) / 255.0
    y = read_idx(os.path.join(root, f"{prefix}-labels-idx1-ubyte.gz")).astype(np.int64)
    x = (x - MEAN) / STD
    return torch.from_numpy(x).unsqueeze(1), torch.from_numpy(y)


class SmallCNN(nn.Module):
    def __init__(self, dropout=0.25):
        super().__init__()
        self.features = nn.Sequential(nn.Conv2d(1, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                                      nn.Conv2d(32, 64, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2))
        self.classifier = nn.Sequential(nn.Linear(64 * 49, 128), nn.ReLU(), nn.Dropout(dropout),
                                        nn.Linear(128, 10))

    def forward(self, x):
        return self.classifier(self.features(x).flatten(1))


class TinyCNN(nn.Module):
    def __init__(self, w):
        super().__init__()
        self.features = nn.Sequential(nn.Conv2d(1, w, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                                      nn.Conv2d(w, 2 * w, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2))
        self.classifier = nn.Sequential(nn.Linear(2 * w * 49, 32), nn.ReLU(), nn.Linear(32, 10))

    def forward(self, x):
        return self.classifier(self.features(x).flatten(1))


def shift(x, p, gen):
    """Random translation of each image by up to p pixels, zero padded (the normalized zero)."""
    if p == 0:
        return x
    n = x.shape[0]
    pad = F.pad(x, (p, p, p, p), value=-MEAN / STD)
    dx = torch.randint(0, 2 * p + 1, (n,), generator=gen)
    dy = torch.randint(0, 2 * p + 1, (n,), generator=gen)
    out = torch.empty_like(x)
    for i in range(n):
        out[i] = pad[i, :, dy[i]:dy[i] + 28, dx[i]:dx[i] + 28]
    return out


def accuracy(model, x, y):
    model.eval()
    with torch.no_grad():
        correct = sum((model(x[i:i + 1000]).argmax(1) == y[i:i + 1000]).sum().item() for i in range(0, len(x), 1000))
    model.train()
    return correct / len(x)


def train(label, model, x, y, xt, yt, epochs, lr, seed, loss_of, p):
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    steps = (len(x) + 127) // 128
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=lr, epochs=epochs, steps_per_epoch=steps)
    every = max(1, epochs // 8)  # print at most ~8 epochs
    gen = torch.Generator().manual_seed(seed)  # the same batches and views for every model
    model.train()
    for epoch in range(epochs):
        perm = torch.randperm(len(x), generator=gen)
        total, t0 = 0.0, time.time()
        for i in range(steps):
            idx = perm[i * 128:(i + 1) * 128]
            xb = shift(x[idx], p, gen)
            loss = loss_of(model, xb, y[idx])
            opt.zero_grad()
            loss.backward()
            opt.step()
            sched.step()
            total += loss.item() * len(idx)
        if (epoch + 1) % every == 0 or epoch + 1 == epochs:
            print(f"{label} epoch {epoch + 1}: loss {total / len(x):.4f}, test {100 * accuracy(model, xt, yt):.2f}%, "
                  f"{time.time() - t0:.1f} s", flush=True)
    return accuracy(model, xt, yt)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--epochs", type=int, default=4)
    ap.add_argument("--student-epochs", type=int, default=0)
    ap.add_argument("--temperature", type=float, default=4.0)
    ap.add_argument("--alpha", type=float, default=0.9)
    ap.add_argument("--width", type=int, default=8)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--shift", type=int, default=0)
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--labels", type=int, default=0)
    ap.add_argument("--teacher", default="", help="load/save the teacher's state_dict here")
    ap.add_argument("--data", default="/usr/share/datasets/fashion-mnist")
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    se = a.student_epochs or a.epochs
    x, y = load(a.data, "train")
    xt, yt = load(a.data, "test")

    def ce(model, xb, yb):
        return F.cross_entropy(model(xb), yb)

    torch.manual_seed(a.seed)
    teacher = SmallCNN()
    if a.teacher and os.path.exists(a.teacher):
        teacher.load_state_dict(torch.load(a.teacher))
        acc_t = accuracy(teacher, xt, yt)
    else:
        acc_t = train("teacher", teacher, x, y, xt, yt, a.epochs, a.lr, a.seed, ce, a.shift)
        if a.teacher:
            torch.save(teacher.state_dict(), a.teacher)
    teacher.eval()

    torch.manual_seed(a.seed + 1)
    alone = TinyCNN(a.width)
    init = {k: v.clone() for k, v in alone.state_dict().items()}
    n = a.labels if 0 < a.labels < len(x) else len(x)
    steps_all = (len(x) + 127) // 128
    alone_epochs = se if n == len(x) else (se * steps_all + (n + 127) // 128 - 1) // ((n + 127) // 128)
    acc_s = train("student", alone, x[:n], y[:n], xt, yt, alone_epochs, a.lr, a.seed + 1, ce, a.shift)
    yk = y.clone()
    yk[n:] = -100  # unlabeled for the students

    T, alpha = a.temperature, a.alpha

    def kd(model, xb, yb):
        s = model(xb)
        with torch.no_grad():
            t = teacher(xb)
        soft = F.kl_div(F.log_softmax(s / T, 1), F.log_softmax(t / T, 1), reduction="batchmean",
                        log_target=True) * T * T
        if (yb != -100).any():
            return alpha * soft + (1 - alpha) * F.cross_entropy(s, yb, ignore_index=-100)
        return alpha * soft

    student = TinyCNN(a.width)
    student.load_state_dict(init)
    acc_d = train("distilled", student, x, yk, xt, yt, se, a.lr, a.seed + 1, kd, a.shift)
    gap = acc_t - acc_s
    print(f"torch {torch.__version__}: teacher {100 * acc_t:.2f}%, student alone {100 * acc_s:.2f}%, "
          f"distilled {100 * acc_d:.2f}% (T {T:g}, alpha {alpha:g}, width {a.width}, student epochs {se}, "
          f"shift {a.shift}, labels {n}, student alone {alone_epochs} epochs): recovered {100 * (acc_d - acc_s):.2f} of {100 * gap:.2f} points "
          f"({100 * (acc_d - acc_s) / gap if gap > 0 else 0:.0f}%)")


if __name__ == "__main__":
    main()
