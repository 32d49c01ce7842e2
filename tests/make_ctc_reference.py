# tests/make_ctc_reference.py: writes the PyTorch reference data that tests/test_ctc.cpp checks
# brisk's ctc_loss against: per case the logits (T, N, C) (or (T, C)), targets, lengths and
# options, and PyTorch's loss and gradient with respect to the logits (through log_softmax,
# see Note [CTC as a composite] in nn/ctc.cpp), in float64. Run by hand:
#   /work/venv-torch/bin/python tests/make_ctc_reference.py
# Not here: anything brisk itself runs; this script is never part of the build or the tests.
import json
import os

import torch

torch.set_num_threads(1)
OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data", "ctc")

# name, T, N, C, targets (padded rows, concatenated list, or one list when unbatched), input
# lengths, target lengths, options.
CASES = [
    ("padded mean", 12, 3, 5, [[1, 2, 3, 4], [2, 2, 4, 0], [4, 1, 0, 0]], [12, 10, 7], [4, 3, 2], {}),
    ("padded sum", 12, 3, 5, [[1, 2, 3, 4], [2, 2, 4, 0], [4, 1, 0, 0]], [12, 10, 7], [4, 3, 2],
     {"reduction": "sum"}),
    ("padded none", 9, 2, 4, [[1, 2, 1], [3, 3, 0]], [9, 6], [3, 2], {"reduction": "none"}),
    ("repeated labels", 10, 2, 4, [[1, 1, 2, 2], [3, 3, 3, 1]], [10, 8], [4, 3], {"reduction": "none"}),
    ("impossible, zero_infinity", 6, 3, 4, [[1, 1, 1, 1], [1, 2, 3, 1], [2, 0, 0, 0]], [6, 4, 6], [4, 4, 1],
     {"reduction": "none", "zero_infinity": True}),
    ("impossible, mean, zero_infinity", 6, 2, 4, [[1, 1, 1, 1], [1, 2, 0, 0]], [6, 6], [4, 2],
     {"zero_infinity": True}),
    ("impossible, inf", 6, 2, 4, [[1, 1, 1, 1], [1, 2, 0, 0]], [6, 6], [4, 2], {"reduction": "none"}),
    ("concatenated targets", 8, 3, 6, [5, 1, 1, 2, 3, 4, 4], [8, 7, 8], [3, 1, 3], {}),
    ("blank last", 10, 2, 5, [[0, 1, 2], [3, 3, 0]], [10, 9], [3, 2], {"blank": 4, "reduction": "sum"}),
    ("empty target", 7, 2, 4, [[1, 2], [0, 0]], [7, 5], [2, 0], {"reduction": "none"}),
    ("empty target mean", 7, 2, 4, [[1, 2], [0, 0]], [7, 5], [2, 0], {}),
    ("unbatched", 9, None, 5, [1, 3, 3, 2], [9], [4], {"reduction": "none"}),
    ("unbatched mean", 9, None, 5, [1, 3, 3, 2], [9], [4], {}),
    ("long", 50, 2, 8, [[1, 2, 3, 4, 5, 6, 7, 1, 2, 3], [7, 7, 6, 6, 5, 5, 4, 0, 0, 0]], [50, 41], [10, 7], {}),
]


def main():
    gen = torch.Generator().manual_seed(1234)
    cases = []
    for name, T, N, C, targets, input_lengths, target_lengths, options in CASES:
        shape = (T, C) if N is None else (T, N, C)
        logits = (torch.randn(shape, generator=gen, dtype=torch.float64) * 2).requires_grad_()
        lp = logits.log_softmax(-1)
        tgt = torch.tensor(targets, dtype=torch.long)
        il = torch.tensor(input_lengths if N is not None else input_lengths[0])
        tl = torch.tensor(target_lengths if N is not None else target_lengths[0])
        loss = torch.nn.functional.ctc_loss(lp, tgt, il, tl, **options)
        loss.sum().backward()
        grad = logits.grad.flatten().tolist()
        if any(g != g for g in grad):
            grad = None  # torch's gradient of an infinite loss is NaN: nothing to compare
        cases.append({"name": name, "shape": list(shape), "logits": logits.detach().flatten().tolist(),
                      "targets": targets, "targets_shape": list(tgt.shape), "input_lengths": input_lengths,
                      "target_lengths": target_lengths, "blank": options.get("blank", 0),
                      "reduction": options.get("reduction", "mean"),
                      "zero_infinity": options.get("zero_infinity", False),
                      "loss": [v if v != float("inf") else "inf" for v in loss.detach().flatten().tolist()],
                      "grad_logits": grad})
    os.makedirs(OUT, exist_ok=True)
    path = os.path.join(OUT, "ctc.json")
    with open(path, "w") as f:
        f.write('{"torch_version": ' + json.dumps(torch.__version__) + ', "cases": [\n')
        f.write(",\n".join(json.dumps(c) for c in cases))
        f.write("\n]}\n")
    print("wrote", path, os.path.getsize(path), "bytes")


if __name__ == "__main__":
    main()
