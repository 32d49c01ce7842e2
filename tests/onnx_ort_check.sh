#!/usr/bin/env bash
# tests/onnx_ort_check.sh BRISK_TESTS VENV_DIR: ONNX Runtime runs what brisk exported. Installs
# `onnxruntime`, `onnx` (for its checker with full_check) and `numpy` into VENV_DIR (once; pip from PyPI), has brisk_tests export the zoo
# (case "onnx export: sample models": each model at batch 2, with its inputs and brisk's outputs
# at batch 2 and 5) and runs tests/onnx_ort_check.py on them; then the same for ONNX's node cases
# that brisk imports and exports again (case "onnx conformance: node cases exported again ..."). Without network access for pip
# it reports a skip (exit 77).
set -euo pipefail
tests=$1 venv=$2
here=$(cd "$(dirname "$0")" && pwd)
if ! "$venv/bin/python" -c "import onnxruntime, onnx, numpy" 2>/dev/null; then
  rm -rf "$venv"
  if ! { python3 -m venv "$venv" && "$venv/bin/pip" install -q --disable-pip-version-check onnxruntime onnx numpy; } \
      >"$venv.log" 2>&1; then
    echo "onnx_ort_check: SKIPPED: could not install onnxruntime (see $venv.log)"
    exit 77
  fi
fi
out=$(mktemp -d) rt=$(mktemp -d)
trap 'rm -rf "$out" "$rt"' EXIT
BRISK_ONNX_SAMPLE_DIR=$out "$tests" --no-intro=true -tc='onnx export: sample models' >/dev/null
"$venv/bin/python" "$here/onnx_ort_check.py" "$out"
# ONNX's node cases, imported and exported again by brisk (needs libonnx-testdata; else none).
BRISK_ONNX_ROUNDTRIP_DIR=$rt "$tests" --no-intro=true -tc='onnx conformance: node cases exported again*' >/dev/null
"$venv/bin/python" "$here/onnx_ort_check.py" --roundtrip "$rt"
