#!/usr/bin/env bash
# examples/bench/overhead.sh: per-op overhead, brisk beside LibTorch, in the same run.
# Needs a built tree (BUILD_DIR, default build/) and, for the reference, libtorch-dev
# (apt-get install --no-install-recommends libtorch-dev). Both sides run one thread.
set -euo pipefail
cd "$(dirname "$0")/../.."
BUILD_DIR=${BUILD_DIR:-build}
BRISK=$BUILD_DIR/examples/bench/bench_overhead
[ -x "$BRISK" ] || { echo "overhead.sh: build first (cmake --build $BUILD_DIR)"; exit 1; }
REF=$BUILD_DIR/overhead_libtorch
if [ ! -x "$REF" ] && [ -f /usr/include/torch/csrc/api/include/torch/torch.h ]; then
  echo "building the LibTorch reference..."
  g++ -O2 -std=c++17 -I. -I/usr/include/torch/csrc/api/include examples/bench/reference/overhead_libtorch.cpp \
    -o "$REF" -ltorch -ltorch_cpu -lc10
fi
export OMP_NUM_THREADS=1
# The OpenBLAS variables slow LibTorch's BLAS (see shared ENVIRONMENT.md); unset for both runs.
unset OPENBLAS_CORETYPE OPENBLAS_L2_SIZE
b=$("$BRISK")
if [ -x "$REF" ]; then t=$("$REF"); else t=""; fi
printf "%-24s %12s %12s %8s\n" "case (us per iter)" "brisk" "libtorch" "ratio"
while read -r name val; do
  ref=$(echo "$t" | awk -v n="$name" '$1==n {print $2}')
  if [ -n "$ref" ]; then
    printf "%-24s %12.3f %12.3f %8.2f\n" "$name" "$val" "$ref" "$(echo "$val / $ref" | bc -l)"
  else
    printf "%-24s %12.3f %12s %8s\n" "$name" "$val" "n/a" "n/a"
  fi
done <<< "$b"
