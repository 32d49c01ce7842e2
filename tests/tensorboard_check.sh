#!/usr/bin/env bash
# tests/tensorboard_check.sh BRISK_TESTS VENV_DIR: the TensorBoard round trip. Installs the
# `tensorboard` Python package into VENV_DIR (once; pip from PyPI), has brisk_tests write the
# sample event file (case "tensorboard: sample run") and reads it back with TensorBoard's reader
# (tests/tensorboard_check.py). Without network access for pip it reports a skip (exit 77).
set -euo pipefail
tests=$1 venv=$2
here=$(cd "$(dirname "$0")" && pwd)
if ! "$venv/bin/python" -c "import tensorboard" 2>/dev/null; then
  rm -rf "$venv"
  if ! { python3 -m venv "$venv" && "$venv/bin/pip" install -q --disable-pip-version-check tensorboard; } \
      >"$venv.log" 2>&1; then
    echo "tensorboard_check: SKIPPED: could not install the tensorboard package (see $venv.log)"
    exit 77
  fi
fi
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
BRISK_TB_SAMPLE_DIR=$out "$tests" --no-intro=true -tc='tensorboard: sample run' >/dev/null
"$venv/bin/python" "$here/tensorboard_check.py" "$out"
