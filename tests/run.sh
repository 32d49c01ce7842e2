#!/usr/bin/env bash
# tests/run.sh: THE test command (README, CI). Installs what is missing (apt), configures,
# builds in Release and runs every test through ctest. The CUDA backend is compiled whenever
# nvcc is present; its tests skip themselves without a GPU.
#
#   tests/run.sh            build + all tests (and the ASan/UBSan pass, see below)
#   tests/run.sh --asan     only the ASan+UBSan build and its test run
#   tests/run.sh --no-asan  skip the sanitizer pass
#   BUILD_DIR=... JOBS=...  override the build folder and parallelism
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD

MODE=all
for arg in "$@"; do
  case "$arg" in
    --asan) MODE=asan ;;
    --no-asan) MODE=main ;;
    *) echo "tests/run.sh: unknown option $arg" >&2; exit 2 ;;
  esac
done

# ---- dependencies (Debian packages, only what is missing)
PKGS=(cmake ninja-build g++ libeigen3-dev doctest-dev nlohmann-json3-dev zlib1g-dev libstb-dev dataset-fashion-mnist)
missing=()
for p in "${PKGS[@]}"; do dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p"); done
if [ ${#missing[@]} -gt 0 ]; then
  echo "== installing: ${missing[*]}"
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO=sudo
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

JOBS=${JOBS:-$(nproc)}
CUDA_FLAG=()
if ! command -v nvcc >/dev/null 2>&1 && [ -x /usr/local/cuda/bin/nvcc ]; then
  CUDA_FLAG=(-DCMAKE_CUDA_COMPILER=/usr/local/cuda/bin/nvcc)
fi

build_and_test() {  # dir, extra cmake args...
  local dir=$1; shift
  echo "== configure $dir"
  cmake -S "$ROOT" -B "$dir" -G Ninja "${CUDA_FLAG[@]}" "$@" >"$dir.configure.log" 2>&1 || {
    cat "$dir.configure.log"; return 1; }
  grep -E "brisk:" "$dir.configure.log" || true
  echo "== build $dir"
  cmake --build "$dir" -j "$JOBS"
  echo "== test $dir"
  (cd "$dir" && ctest --output-on-failure -j 1)
}

mkdir -p "$ROOT/build-tests"
if [ "$MODE" != asan ]; then
  build_and_test "${BUILD_DIR:-$ROOT/build-tests/release}" -DCMAKE_BUILD_TYPE=Release
fi
if [ "$MODE" != main ]; then
  # Sanitizers: CPU-only (nvcc objects are not instrumented), Debug-ish optimization.
  build_and_test "$ROOT/build-tests/asan" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DBRISK_SANITIZE=ON \
    -DBRISK_CUDA=OFF -DBRISK_EXAMPLES=OFF
fi
echo "== tests/run.sh: all passed"
