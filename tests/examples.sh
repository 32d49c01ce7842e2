#!/usr/bin/env bash
# tests/examples.sh BUILD: the examples that have no ctest smoke test, each run for real on
# Fashion-MNIST from the Release build folder BUILD (tests/run.sh --full): the main job for one
# epoch with the CNN, the MLP stopped after one of two epochs and resumed, mixed precision, the tabular example,
# explain mode and the environment report. One line per example with its wall time; its output
# goes to BUILD/examples-full/<name>.log, shown when it fails.
# Not here: the examples with smoke tests (examples/*/CMakeLists.txt, run by ctest).
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:?usage: tests/examples.sh BUILD}
OUT=$BUILD/examples-full
rm -rf "$OUT"
mkdir -p "$OUT"
export OMP_WAIT_POLICY=passive

run() {  # name, command...: runs it in OUT with its log; fails showing the log's tail
  local name=$1 t0=$SECONDS
  shift
  if ! (cd "$OUT" && "$@") >"$OUT/$name.log" 2>&1; then
    tail -30 "$OUT/$name.log"
    echo "tests/examples.sh: $name failed (log: $OUT/$name.log)"
    return 1
  fi
  echo "   $name: $((SECONDS - t0)) s, $(grep -v '^\s*$' "$OUT/$name.log" | tail -1 | cut -c1-100)"
}

E=$BUILD/examples
run main-cnn "$E/fashion_mnist" --epochs 1 --out "$OUT/cnn"
run main-mlp "$E/fashion_mnist" --model mlp --epochs 2 --stop-after 1 --out "$OUT/mlp"
run main-mlp-resume "$E/fashion_mnist" --model mlp --epochs 2 --out "$OUT/mlp" --resume
run amp "$E/amp" --epochs 1 --limit 10000
run tabular "$E/tabular" --epochs 2 --out "$OUT/tabular"
run explain "$E/explain" "$OUT"
run env "$E/brisk_env"
echo "tests/examples.sh: all ran"
