#!/usr/bin/env python3
"""examples/onnx/torch_model.py OUT.onnx: a model made in PyTorch and exported with
torch.onnx.export (the TorchScript exporter, opset 17, dynamic batch; torch 1.13 as Debian's
python3-torch has it, or 2.x), for brisk to import and fine-tune: torchvision's ResNet-18 adapted to 1-channel 28 x 28 inputs and 10 classes when
torchvision is installed, else a small residual network of the same kind written here."""
import sys

import torch
import torch.nn as nn

torch.manual_seed(0)
try:
    import torchvision

    model = torchvision.models.resnet18(num_classes=10)
    model.conv1 = nn.Conv2d(1, 64, 3, 1, 1, bias=False)
    model.maxpool = nn.Identity()
    what = "torchvision resnet18 (1 channel, 10 classes)"
except ImportError:
    class Block(nn.Module):
        def __init__(self, c_in, c_out, stride):
            super().__init__()
            self.conv1 = nn.Conv2d(c_in, c_out, 3, stride, 1, bias=False)
            self.bn1 = nn.BatchNorm2d(c_out)
            self.conv2 = nn.Conv2d(c_out, c_out, 3, 1, 1, bias=False)
            self.bn2 = nn.BatchNorm2d(c_out)
            self.down = None if stride == 1 and c_in == c_out else nn.Sequential(
                nn.Conv2d(c_in, c_out, 1, stride, bias=False), nn.BatchNorm2d(c_out))

        def forward(self, x):
            y = torch.relu(self.bn1(self.conv1(x)))
            y = self.bn2(self.conv2(y))
            return torch.relu(y + (x if self.down is None else self.down(x)))

    model = nn.Sequential(nn.Conv2d(1, 16, 3, 1, 1, bias=False), nn.BatchNorm2d(16), nn.ReLU(),
                          Block(16, 16, 1), Block(16, 32, 2), Block(32, 64, 2),
                          nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(64, 10))
    what = "a small residual network (torchvision is not installed)"
model.eval()
kwargs = dict(input_names=["input"], output_names=["output"], dynamic_axes={"input": {0: "batch"}, "output": {0: "batch"}},
              opset_version=17)
try:  # torch >= 2.9 defaults to the dynamo exporter; the TorchScript one is asked for by name
    torch.onnx.export(model, (torch.randn(2, 1, 28, 28),), sys.argv[1], dynamo=False, **kwargs)
except TypeError:  # torch 1.13 (Debian's python3-torch) has only the TorchScript exporter
    torch.onnx.export(model, (torch.randn(2, 1, 28, 28),), sys.argv[1], **kwargs)
print(f"torch {torch.__version__} exported {what} to {sys.argv[1]}")
