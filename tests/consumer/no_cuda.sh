#!/usr/bin/env bash
# tests/consumer/no_cuda.sh CUDA_ROOT SRC PREFIX MAIN WORK: configures, builds and runs the
# CPU-only consumer (tests/consumer, the README example MAIN) against the brisk install in PREFIX
# with the CUDA toolkit's folder CUDA_ROOT hidden: an empty folder is mounted over it in a
# private mount namespace, so neither CMake, the compiler, the linker nor the loader can see a
# CUDA file. Exits 77 when this machine does not allow the namespace (not root, no unshare).
# Called by tests/consumer/check.cmake.
set -euo pipefail
cuda_root=$1 src=$2 prefix=$3 main=$4 work=$5
rm -rf "$work" && mkdir -p "$work/empty"
if ! command -v unshare >/dev/null || ! unshare -m true 2>/dev/null; then
  echo "no private mount namespace here (unshare -m)"; exit 77
fi
unshare -m bash -euo pipefail -c '
  mount --bind "$1" "$2"
  if [ -n "$(ls -A "$2")" ]; then echo "could not hide $2"; exit 1; fi
  cmake -S "$3/tests/consumer" -B "$6/build" -G Ninja -DCMAKE_PREFIX_PATH="$4" -DCONSUMER_MAIN="$5" \
        -DCMAKE_BUILD_TYPE=Release >"$6/configure.log" 2>&1 || { cat "$6/configure.log"; exit 1; }
  cmake --build "$6/build" >"$6/build.log" 2>&1 || { cat "$6/build.log"; exit 1; }
  cd "$6" && ./build/consumer >run.log 2>&1 || { cat run.log; exit 1; }
  ./build/backends
  echo "no-cuda: the CPU-only consumer built and ran with $2 hidden"
' no_cuda "$work/empty" "$cuda_root" "$src" "$prefix" "$main" "$work"
