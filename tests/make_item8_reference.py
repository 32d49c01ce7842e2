# tests/make_item8_reference.py: writes the PyTorch reference data of tests/test_losses_nd.cpp
# (class-weighted and N-d cross-entropy with ignore_index and label_smoothing) and
# tests/test_mha_parity.cpp (nn.MultiheadAttention with its weights, masks, outputs, attention
# weights and gradients) and tests/test_module_containers.cpp (the parameter and state_dict
# names and order of a model built from ModuleList and ModuleDict). Run by hand:
#   /work/venv-torch/bin/python tests/make_item8_reference.py
# Everything in float64; inputs, weights and results are stored flat, row-major.
# Not here: anything brisk itself runs; this script is never part of the build or the tests.
import json
import os

import torch

torch.set_num_threads(1)
OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data", "item8")
D = torch.float64


def flat(t):
    return t.detach().flatten().tolist()


# ---- cross-entropy: name, logits shape, class weights?, ignore_index, label_smoothing,
# reduction, probability targets?
CE_CASES = [
    ("weighted 2d mean", (6, 4), True, -100, 0.0, "mean", False),
    ("weighted 2d ignore mean", (6, 4), True, 2, 0.0, "mean", False),
    ("weighted 2d sum smoothing", (6, 4), True, -100, 0.2, "sum", False),
    ("nd mean", (2, 4, 3, 2), False, -100, 0.0, "mean", False),
    ("nd none", (2, 4, 3, 2), False, -100, 0.0, "none", False),
    ("nd ignore mean", (2, 4, 3, 2), False, 1, 0.0, "mean", False),
    ("nd weighted ignore smoothing mean", (2, 4, 3, 2), True, 3, 0.1, "mean", False),
    ("nd weighted ignore smoothing none", (2, 4, 3, 2), True, 3, 0.1, "none", False),
    ("3d weighted smoothing sum", (3, 5, 4), True, -100, 0.3, "sum", False),
    ("nd ignore -100 present", (2, 3, 2, 2), True, -100, 0.1, "mean", False),
    ("nd probability targets weighted smoothing", (2, 4, 3), True, -100, 0.1, "mean", True),
]


def ce_data(gen):
    cases = []
    for name, shape, weighted, ignore, smoothing, reduction, soft in CE_CASES:
        logits = (torch.randn(shape, generator=gen, dtype=D) * 1.5).requires_grad_()
        C = shape[1]
        tshape = (shape[0],) + tuple(shape[2:])
        if soft:
            target = torch.softmax(torch.randn(shape, generator=gen, dtype=D), 1)
        else:
            target = torch.randint(0, C, tshape, generator=gen)
            flat_t = target.view(-1)
            flat_t[1] = ignore if ignore >= 0 else flat_t[1]
            if name == "nd ignore -100 present":
                flat_t[0] = -100
                flat_t[3] = -100
        weight = torch.rand(C, generator=gen, dtype=D) + 0.5 if weighted else None
        loss = torch.nn.functional.cross_entropy(logits, target, weight=weight, ignore_index=ignore,
                                                 reduction=reduction, label_smoothing=smoothing)
        upstream = torch.randn(loss.shape, generator=gen, dtype=D)
        (loss * upstream).sum().backward()
        cases.append({"name": name, "shape": list(shape), "logits": flat(logits),
                      "target": flat(target), "target_shape": list(target.shape), "soft": soft,
                      "weight": flat(weight) if weighted else None, "ignore_index": ignore,
                      "label_smoothing": smoothing, "reduction": reduction, "loss": flat(loss),
                      "upstream": flat(upstream), "grad_logits": flat(logits.grad)})
    return cases


# ---- MultiheadAttention: name, batch_first, self-attention?, bias, key_padding_mask?,
# attn_mask kind (None, "2d" (T, S), "3d" (B * H, T, S)), average_attn_weights
E, H, B, T, S = 8, 2, 2, 3, 4
MHA_CASES = [
    ("self batch_first", True, True, True, False, None, True),
    ("self seq_first", False, True, True, False, None, True),
    ("cross batch_first key_padding_mask", True, False, True, True, None, True),
    ("cross seq_first key_padding_mask attn_mask 2d", False, False, True, True, "2d", False),
    ("cross batch_first attn_mask 3d per head", True, False, True, False, "3d", False),
    ("self batch_first no bias attn_mask 2d", True, True, False, False, "2d", True),
]


def mha_data(gen):
    cases = []
    for name, batch_first, self_attn, bias, use_kpm, mask_kind, average in MHA_CASES:
        torch.manual_seed(len(cases) + 7)
        mha = torch.nn.MultiheadAttention(E, H, bias=bias, batch_first=batch_first, dtype=D)
        with torch.no_grad():  # non-zero biases, so their gradients mean something
            if bias:
                mha.in_proj_bias.copy_(torch.randn(3 * E, generator=gen, dtype=D) * 0.1)
                mha.out_proj.bias.copy_(torch.randn(E, generator=gen, dtype=D) * 0.1)
        s_len = T if self_attn else S

        def seq(n):
            x = torch.randn((B, n, E) if batch_first else (n, B, E), generator=gen, dtype=D)
            return x.requires_grad_()

        q = seq(T)
        k = q if self_attn else seq(s_len)
        v = q if self_attn else seq(s_len)
        kpm = None
        if use_kpm:
            kpm = torch.zeros(B, s_len, dtype=torch.bool)
            kpm[0, -1] = True
            kpm[1, 0] = True
            kpm[1, 2] = True
        attn_mask = None
        if mask_kind == "2d":
            attn_mask = torch.zeros(T, s_len, dtype=torch.bool)
            attn_mask[0, 1] = True
            attn_mask[2, 0] = True
        elif mask_kind == "3d":
            attn_mask = torch.rand(B * H, T, s_len, generator=gen) < 0.3
            attn_mask[:, :, 0] = False  # every row keeps a key
        out, weights = mha(q, k, v, key_padding_mask=kpm, need_weights=True, attn_mask=attn_mask,
                           average_attn_weights=average)
        r_out = torch.randn(out.shape, generator=gen, dtype=D)
        r_w = torch.randn(weights.shape, generator=gen, dtype=D)
        ((out * r_out).sum() + (weights * r_w).sum()).backward()
        params = {n: flat(p) for n, p in mha.named_parameters()}
        grads = {n: flat(p.grad) for n, p in mha.named_parameters()}
        case = {"name": name, "batch_first": batch_first, "self_attention": self_attn, "bias": bias,
                "average_attn_weights": average, "E": E, "H": H, "B": B, "T": T, "S": s_len,
                "params": params, "query": flat(q), "out": flat(out), "out_shape": list(out.shape),
                "weights": flat(weights), "weights_shape": list(weights.shape), "r_out": flat(r_out),
                "r_weights": flat(r_w), "grad_params": grads, "grad_query": flat(q.grad),
                "key_padding_mask": [int(b) for b in kpm.flatten().tolist()] if kpm is not None else None,
                "attn_mask": [int(b) for b in attn_mask.flatten().tolist()] if attn_mask is not None else None,
                "attn_mask_shape": list(attn_mask.shape) if attn_mask is not None else None}
        if not self_attn:
            case.update({"key": flat(k), "value": flat(v), "grad_key": flat(k.grad), "grad_value": flat(v.grad)})
        cases.append(case)
    return cases


class ContainerNet(torch.nn.Module):
    # stem, a ModuleList of blocks (one of them a nested ModuleList), a ModuleDict of heads
    # inserted out of alphabetical order (PyTorch keeps insertion order).
    def __init__(self):
        super().__init__()
        self.stem = torch.nn.Linear(3, 4)
        self.blocks = torch.nn.ModuleList([torch.nn.Linear(4, 4), torch.nn.ReLU(), torch.nn.BatchNorm1d(4),
                                           torch.nn.ModuleList([torch.nn.Linear(4, 4, bias=False)])])
        self.heads = torch.nn.ModuleDict({"cls": torch.nn.Linear(4, 2), "aux": torch.nn.Linear(4, 1)})

    def forward(self, x):
        x = self.stem(x)
        for b in self.blocks[:3]:
            x = b(x)
        x = self.blocks[3][0](x)
        return self.heads["cls"](x), self.heads["aux"](x)


def containers_data():
    net = ContainerNet().double()
    x = torch.randn(5, 3, dtype=D, generator=torch.Generator().manual_seed(3))
    cls, aux = net(x)
    (cls.sum() + 2 * aux.sum()).backward()
    return [{"named_parameters": [[n, list(p.shape)] for n, p in net.named_parameters()],
             "state_dict": list(net.state_dict().keys()),
             "named_modules": [n for n, _ in net.named_modules()],
             "params": {n: flat(p) for n, p in net.named_parameters()},
             "x": flat(x), "cls": flat(cls), "aux": flat(aux),
             "grads": {n: flat(p.grad) for n, p in net.named_parameters()}}]


def write(name, data):
    os.makedirs(OUT, exist_ok=True)
    path = os.path.join(OUT, name)
    with open(path, "w") as f:
        f.write('{"torch_version": ' + json.dumps(torch.__version__) + ', "cases": [\n')
        f.write(",\n".join(json.dumps(c) for c in data))
        f.write("\n]}\n")
    print("wrote", path, os.path.getsize(path), "bytes")


if __name__ == "__main__":
    gen = torch.Generator().manual_seed(2024)
    write("cross_entropy.json", ce_data(gen))
    write("mha.json", mha_data(gen))
    write("containers.json", containers_data())
