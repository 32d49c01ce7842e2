# examples/bench/bench_models.py: the PyTorch half of examples/bench/bench_models.cpp: the same
# models, shapes, losses and optimizers, written out in plain torch.nn (torchvision's ResNet,
# VGG and MobileNetV2 architectures, so torchvision is not needed), timed the same way (median
# of `steps` steps after `warmup`). Prints "RESULT ms=.. rss_mb=..".
# Usage: python bench_models.py MODEL MODE(train|infer) THREADS STEPS WARMUP
import resource
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F


# ---- torchvision's ResNet
class BasicBlock(nn.Module):
    expansion = 1

    def __init__(self, inp, planes, stride, down):
        super().__init__()
        self.conv1 = nn.Conv2d(inp, planes, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(planes)
        self.relu = nn.ReLU(inplace=True)
        self.conv2 = nn.Conv2d(planes, planes, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(planes)
        self.downsample = down

    def forward(self, x):
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        identity = self.downsample(x) if self.downsample is not None else x
        return self.relu(out + identity)


class Bottleneck(nn.Module):
    expansion = 4

    def __init__(self, inp, planes, stride, down):
        super().__init__()
        self.conv1 = nn.Conv2d(inp, planes, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(planes)
        self.conv2 = nn.Conv2d(planes, planes, 3, stride, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(planes)
        self.conv3 = nn.Conv2d(planes, planes * 4, 1, bias=False)
        self.bn3 = nn.BatchNorm2d(planes * 4)
        self.relu = nn.ReLU(inplace=True)
        self.downsample = down

    def forward(self, x):
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.relu(self.bn2(self.conv2(out)))
        out = self.bn3(self.conv3(out))
        identity = self.downsample(x) if self.downsample is not None else x
        return self.relu(out + identity)


class ResNet(nn.Module):
    def __init__(self, block, layers, num_classes):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 64, 7, 2, 3, bias=False)
        self.bn1 = nn.BatchNorm2d(64)
        self.relu = nn.ReLU(inplace=True)
        self.maxpool = nn.MaxPool2d(3, 2, 1)
        inp = 64
        stages = []
        for i, (planes, n) in enumerate(zip([64, 128, 256, 512], layers)):
            blocks = []
            for b in range(n):
                stride = 2 if (b == 0 and i > 0) else 1
                down = None
                if b == 0 and (stride != 1 or inp != planes * block.expansion):
                    down = nn.Sequential(nn.Conv2d(inp, planes * block.expansion, 1, stride, bias=False),
                                         nn.BatchNorm2d(planes * block.expansion))
                blocks.append(block(inp, planes, stride, down))
                inp = planes * block.expansion
            stages.append(nn.Sequential(*blocks))
        self.layer1, self.layer2, self.layer3, self.layer4 = stages
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(512 * block.expansion, num_classes)
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")

    def forward(self, x):
        x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
        x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
        return self.fc(torch.flatten(self.avgpool(x), 1))


# ---- torchvision's VGG-11 (no batch norm)
class VGG(nn.Module):
    def __init__(self, cfg, num_classes):
        super().__init__()
        layers, inp = [], 3
        for c in cfg:
            if c == 0:
                layers.append(nn.MaxPool2d(2, 2))
            else:
                layers += [nn.Conv2d(inp, c, 3, padding=1), nn.ReLU(inplace=True)]
                inp = c
        self.features = nn.Sequential(*layers)
        self.avgpool = nn.AdaptiveAvgPool2d(7)
        self.classifier = nn.Sequential(nn.Linear(512 * 49, 4096), nn.ReLU(True), nn.Dropout(0.5),
                                        nn.Linear(4096, 4096), nn.ReLU(True), nn.Dropout(0.5),
                                        nn.Linear(4096, num_classes))

    def forward(self, x):
        return self.classifier(torch.flatten(self.avgpool(self.features(x)), 1))


# ---- torchvision's MobileNetV2
def conv_bn_relu6(inp, out, k, stride, groups):
    return nn.Sequential(nn.Conv2d(inp, out, k, stride, (k - 1) // 2, groups=groups, bias=False),
                         nn.BatchNorm2d(out), nn.ReLU6(inplace=True))


class InvertedResidual(nn.Module):
    def __init__(self, inp, out, stride, expand):
        super().__init__()
        hidden = inp * expand
        self.use_res = stride == 1 and inp == out
        layers = []
        if expand != 1:
            layers.append(conv_bn_relu6(inp, hidden, 1, 1, 1))
        layers += [conv_bn_relu6(hidden, hidden, 3, stride, hidden), nn.Conv2d(hidden, out, 1, bias=False),
                   nn.BatchNorm2d(out)]
        self.conv = nn.Sequential(*layers)

    def forward(self, x):
        return x + self.conv(x) if self.use_res else self.conv(x)


class MobileNetV2(nn.Module):
    def __init__(self, num_classes):
        super().__init__()
        settings = [(1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2), (6, 96, 3, 1), (6, 160, 3, 2),
                    (6, 320, 1, 1)]
        feats, inp = [conv_bn_relu6(3, 32, 3, 2, 1)], 32
        for t, c, n, s in settings:
            for i in range(n):
                feats.append(InvertedResidual(inp, c, s if i == 0 else 1, t))
                inp = c
        feats.append(conv_bn_relu6(inp, 1280, 1, 1, 1))
        self.features = nn.Sequential(*feats)
        self.classifier = nn.Sequential(nn.Dropout(0.2), nn.Linear(1280, num_classes))

    def forward(self, x):
        x = F.adaptive_avg_pool2d(self.features(x), 1)
        return self.classifier(torch.flatten(x, 1))


# ---- language models
class RecurrentLM(nn.Module):
    def __init__(self, lstm):
        super().__init__()
        self.embed = nn.Embedding(96, 256)
        self.rnn = (nn.LSTM if lstm else nn.GRU)(256, 512, num_layers=2, batch_first=True)
        self.head = nn.Linear(512, 96)

    def forward(self, idx):
        return self.head(self.rnn(self.embed(idx))[0])


class EncoderLM(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(1000, 256)
        layer = nn.TransformerEncoderLayer(256, 4, 1024, batch_first=True)
        self.encoder = nn.TransformerEncoder(layer, 4, enable_nested_tensor=False)
        self.head = nn.Linear(256, 1000)

    def forward(self, idx):
        return self.head(self.encoder(self.embed(idx)))


class GPT2Block(nn.Module):  # as nanoGPT: fused scaled_dot_product_attention, GELU (tanh)
    def __init__(self, d, heads, dropout):
        super().__init__()
        self.heads, self.dropout = heads, dropout
        self.ln_1, self.ln_2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.c_attn, self.c_proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.c_fc, self.mlp_proj = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)
        self.drop = nn.Dropout(dropout)

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = self.c_attn(self.ln_1(x)).split(C, dim=2)
        q, k, v = (t.view(B, T, self.heads, C // self.heads).transpose(1, 2) for t in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True, dropout_p=self.dropout if self.training else 0)
        x = x + self.drop(self.c_proj(y.transpose(1, 2).contiguous().view(B, T, C)))
        return x + self.drop(self.mlp_proj(F.gelu(self.c_fc(self.ln_2(x)), approximate="tanh")))


class GPT2(nn.Module):
    def __init__(self, vocab=50257, positions=128, d=256, layers=4, heads=4, dropout=0.1):
        super().__init__()
        self.wte, self.wpe = nn.Embedding(vocab, d), nn.Embedding(positions, d)
        self.drop = nn.Dropout(dropout)
        self.h = nn.ModuleList(GPT2Block(d, heads, dropout) for _ in range(layers))
        self.ln_f = nn.LayerNorm(d)

    def forward(self, idx):
        pos = torch.arange(idx.size(1))
        x = self.drop(self.wte(idx) + self.wpe(pos))
        for block in self.h:
            x = block(x)
        return self.ln_f(x) @ self.wte.weight.t()


class LayersGPT(nn.Module):  # the same decoder from nn.TransformerEncoderLayer, as users write it
    def __init__(self, vocab=50257, positions=128, d=256, layers=4, heads=4, dropout=0.1):
        super().__init__()
        self.wte, self.wpe = nn.Embedding(vocab, d), nn.Embedding(positions, d)
        nn.init.normal_(self.wte.weight, std=0.02)  # GPT-2's, as brisk's twin (see bench_models.cpp)
        self.drop = nn.Dropout(dropout)
        layer = nn.TransformerEncoderLayer(d, heads, 4 * d, dropout, activation="gelu", batch_first=True,
                                           norm_first=True)
        self.encoder = nn.TransformerEncoder(layer, layers, norm=nn.LayerNorm(d), enable_nested_tensor=False)

    def forward(self, idx):
        T = idx.size(1)
        x = self.drop(self.wte(idx) + self.wpe(torch.arange(T)))
        mask = nn.Transformer.generate_square_subsequent_mask(T)
        return self.encoder(x, mask=mask, is_causal=True) @ self.wte.weight.t()


VGG11 = [64, 0, 128, 0, 256, 256, 0, 512, 512, 0, 512, 512, 0]
ZOO = {  # name: (constructor, input (image side or None, vocab, T), train batch, infer batch)
    "resnet18_32": (lambda: ResNet(BasicBlock, [2, 2, 2, 2], 10), (32, 10), 32, 64),
    "resnet18_224": (lambda: ResNet(BasicBlock, [2, 2, 2, 2], 1000), (224, 1000), 4, 8),
    "resnet50_32": (lambda: ResNet(Bottleneck, [3, 4, 6, 3], 10), (32, 10), 16, 32),
    "resnet50_224": (lambda: ResNet(Bottleneck, [3, 4, 6, 3], 1000), (224, 1000), 2, 4),
    "vgg11_32": (lambda: VGG(VGG11, 10), (32, 10), 16, 32),
    "mobilenet_v2_32": (lambda: MobileNetV2(10), (32, 10), 32, 64),
    "mobilenet_v2_224": (lambda: MobileNetV2(1000), (224, 1000), 4, 8),
    "lstm_lm": (lambda: RecurrentLM(True), (None, 96, 64), 32, 32),
    "gru_lm": (lambda: RecurrentLM(False), (None, 96, 64), 32, 32),
    "transformer": (lambda: EncoderLM(), (None, 1000, 128), 16, 16),
    "gpt2": (lambda: GPT2(), (None, 50257, 128), 16, 16),
    "gpt_layers": (lambda: LayersGPT(), (None, 50257, 128), 16, 16),
}


def main():
    name, mode, threads, steps, warmup = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
    torch.set_num_threads(threads)
    torch.manual_seed(0)
    make, shape, train_batch, infer_batch = ZOO[name]
    train = mode == "train"
    batch = train_batch if train else infer_batch
    model = make()
    model.train(train)
    if shape[0] is not None:
        x, target, tokens = torch.randn(batch, 3, shape[0], shape[0]), torch.randint(0, shape[1], (batch,)), False
    else:
        x = torch.randint(0, shape[1], (batch, shape[2]))
        target, tokens = torch.randint(0, shape[1], (batch, shape[2])), True
    if name.startswith(("resnet", "vgg", "mobilenet")):
        opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    elif name in ("gpt2", "gpt_layers"):
        opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    else:
        opt = torch.optim.Adam(model.parameters(), lr=1e-3)

    def step():
        if train:
            opt.zero_grad()
            out = model(x)
            loss = F.cross_entropy(out.reshape(-1, out.size(-1)), target.reshape(-1)) if tokens \
                else F.cross_entropy(out, target)
            loss.backward()
            opt.step()
            loss.item()
        else:
            with torch.no_grad():
                model(x)

    for _ in range(warmup):
        step()
    times = []
    for _ in range(steps):
        t0 = time.perf_counter()
        step()
        times.append(time.perf_counter() - t0)
    times.sort()
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024
    print(f"RESULT ms={times[len(times) // 2] * 1e3:.3f} rss_mb={rss}")


if __name__ == "__main__":
    main()
