#!/usr/bin/env bash
# examples/onnx/demo.sh [OUT_DIR]: the ONNX round trip end to end (after examples/run.sh or
# tests/run.sh built build/): brisk trains the CNN and exports it, ONNX Runtime checks it; PyTorch
# exports a model, brisk imports it, fine-tunes it and exports it again, ONNX Runtime checks that.
# PYTHON: a Python with torch, onnx, onnxruntime, safetensors and numpy (default /work/venv).
set -euo pipefail
cd "$(dirname "$0")/../.."
out=${1:-onnx_out}
py=${PYTHON:-/work/venv/bin/python}
bin=build/examples/onnx_demo
mkdir -p "$out"
"$bin" export --out "$out"
"$py" examples/onnx/ort_check.py "$out/cnn.onnx" "$out/cnn_io.safetensors"
"$py" examples/onnx/torch_model.py "$out/torch_model.onnx" 2>/dev/null
"$bin" finetune "$out/torch_model.onnx" --out "$out" --steps 200
"$py" examples/onnx/ort_check.py "$out/finetuned.onnx" "$out/finetuned_io.safetensors"
