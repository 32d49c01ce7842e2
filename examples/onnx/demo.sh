#!/usr/bin/env bash
# examples/onnx/demo.sh [OUT_DIR]: the ONNX round trip end to end (after examples/run.sh or
# tests/run.sh built build/): brisk trains the CNN and exports it, ONNX Runtime checks it; PyTorch
# exports a model, brisk imports it, fine-tunes it and exports it again, ONNX Runtime checks that.
# PYTHON: a Python with onnxruntime, safetensors and numpy (default /work/venv); TORCH_PYTHON: the
# one that runs torch.onnx.export (default: Debian's python3 when it has torch and torchvision,
# apt install python3-torch python3-torchvision, else PYTHON).
set -euo pipefail
cd "$(dirname "$0")/../.."
out=${1:-onnx_out}
py=${PYTHON:-/work/venv/bin/python}
torch_py=${TORCH_PYTHON:-}
if [ -z "$torch_py" ]; then
  if /usr/bin/python3 -c "import torch, torchvision" 2>/dev/null; then torch_py=/usr/bin/python3; else torch_py=$py; fi
fi
bin=build/examples/onnx_demo
mkdir -p "$out"
"$bin" export --out "$out"
"$py" examples/onnx/ort_check.py "$out/cnn.onnx" "$out/cnn_io.safetensors"
"$torch_py" examples/onnx/torch_model.py "$out/torch_model.onnx" 2>/dev/null
"$bin" finetune "$out/torch_model.onnx" --out "$out" --steps 200
"$py" examples/onnx/ort_check.py "$out/finetuned.onnx" "$out/finetuned_io.safetensors"
