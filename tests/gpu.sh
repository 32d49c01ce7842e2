#!/usr/bin/env bash
# tests/gpu.sh: THE command for a machine WITH an NVIDIA GPU (no apt, no internet needed).
# Builds Release for sm_90 (ARCH=... to change), runs the CUDA tests, then bench_cuda, writes
# the full log to $LOG (default build-gpu/gpu.log) and prints a short summary table last.
# Eigen, doctest, nlohmann-json and zlib come from the system or from third_party/ (fill it
# with tests/vendor_deps.sh on a machine that has them, and carry it along). On a machine without
# a GPU it stops at once with a clear message and exit code 1.
#
#   tests/gpu.sh            build + CUDA tests + benchmark (~5 minutes on 16 cores)
#   tests/gpu.sh --all      also the whole CPU suite
#   BUILD_DIR=... JOBS=... ARCH=... LOG=...   overrides
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
ALL=0
for arg in "$@"; do
  case "$arg" in
    --all) ALL=1 ;;
    *) echo "tests/gpu.sh: unknown option $arg" >&2; exit 2 ;;
  esac
done
BUILD=${BUILD_DIR:-$ROOT/build-gpu}
LOG=${LOG:-$BUILD/gpu.log}
JOBS=${JOBS:-$(nproc)}
ARCH=${ARCH:-90}
mkdir -p "$BUILD"
exec > >(tee "$LOG") 2>&1
START=$(date +%s)
summary=()
finish() {  # exit code
  echo
  echo "== tests/gpu.sh summary ($(( $(date +%s) - START )) s; full log: $LOG)"
  for line in "${summary[@]}"; do echo "  $line"; done
  [ -n "${BENCH_TABLE:-}" ] && echo "$BENCH_TABLE"
  exit "$1"
}
fail() { summary+=("FAILED: $*"); finish 1; }

# ---- 1. a GPU at all? (before spending minutes on a build)
if command -v nvidia-smi >/dev/null 2>&1; then
  if ! GPUS=$(nvidia-smi -L 2>&1); then
    echo "tests/gpu.sh: nvidia-smi finds no usable GPU on this machine: $GPUS"
    echo "tests/gpu.sh: run tests/run.sh here instead (the CUDA tests skip themselves without a GPU)."
    exit 1
  fi
  echo "$GPUS"
  summary+=("device: $(echo "$GPUS" | head -1)")
elif ! ls /dev/nvidia[0-9]* >/dev/null 2>&1; then
  echo "tests/gpu.sh: no NVIDIA GPU on this machine (no nvidia-smi, no /dev/nvidia* device)."
  echo "tests/gpu.sh: run tests/run.sh here instead (the CUDA tests skip themselves without a GPU)."
  exit 1
fi

# ---- 2. toolchain and dependencies
NVCC=$(command -v nvcc || true)
[ -z "$NVCC" ] && [ -x /usr/local/cuda/bin/nvcc ] && NVCC=/usr/local/cuda/bin/nvcc
[ -n "$NVCC" ] || fail "nvcc not found (PATH or /usr/local/cuda/bin)"
command -v cmake >/dev/null || fail "cmake not found"
GEN=(-G Ninja)
command -v ninja >/dev/null || GEN=()
PREFIX=()
[ -d "$ROOT/third_party/include" ] && PREFIX=(-DCMAKE_PREFIX_PATH="$ROOT/third_party")
echo "== nvcc: $("$NVCC" --version | tail -1); deps: ${PREFIX[*]:-system}"

# ---- 3. configure + build
T0=$(date +%s)
cmake -S "$ROOT" -B "$BUILD" "${GEN[@]}" -DCMAKE_BUILD_TYPE=Release -DBRISK_CUDA=ON \
  -DCMAKE_CUDA_COMPILER="$NVCC" -DCMAKE_CUDA_ARCHITECTURES="$ARCH" "${PREFIX[@]}" >"$BUILD/configure.log" 2>&1 ||
  { cat "$BUILD/configure.log"; fail "configure (see $BUILD/configure.log)"; }
grep "brisk:" "$BUILD/configure.log"
grep -q "through cuDNN" "$BUILD/configure.log" ||
  summary+=("WARNING: no cuDNN (set CUDNN_ROOT): conv2d and batch_norm are not tested on CUDA")
TARGETS=(brisk_tests bench_cuda bench_optim)
cmake --build "$BUILD" -j "$JOBS" --target "${TARGETS[@]}" || fail "build"
summary+=("build: Release, sm_$ARCH, $(( $(date +%s) - T0 )) s")

# ---- 4. the GPU must be visible to CUDA, else the tests would only skip
"$BUILD/examples/bench/bench_cuda" --probe || fail "CUDA sees no device (driver/runtime mismatch?)"

# ---- 5. tests
T0=$(date +%s)
FILTER=(-tc="cuda:*,cuda fused optim:*")
[ "$ALL" = 1 ] && FILTER=()
"$BUILD/tests/brisk_tests" --no-intro=true "${FILTER[@]}" 2>&1 | tee "$BUILD/tests.log"
TEST_RC=${PIPESTATUS[0]}
TEST_LINE=$(grep -E "^\[doctest\] (test cases|assertions)" "$BUILD/tests.log" | tr -s ' ' | paste -sd ';' -)
if [ "$TEST_RC" = 0 ]; then
  summary+=("tests: passed ($(( $(date +%s) - T0 )) s) $TEST_LINE")
else
  summary+=("tests: FAILED (exit $TEST_RC) $TEST_LINE")
fi

# ---- 6. benchmark (never fails the run on speed)
"$BUILD/examples/bench/bench_cuda" 2>&1 | tee "$BUILD/bench.log"
BENCH_RC=${PIPESTATUS[0]}
BENCH_TABLE=$(sed -n '/^bench_cuda (device/,$p' "$BUILD/bench.log")
[ "$BENCH_RC" = 0 ] || summary+=("bench_cuda: exit $BENCH_RC")
# The fused optimizer steps against their reference step (its CUDA section).
"$BUILD/examples/bench/bench_optim" 2>&1 | tee "$BUILD/bench_optim.log"
[ "${PIPESTATUS[0]}" = 0 ] || { summary+=("bench_optim: failed"); BENCH_RC=1; }

[ "$TEST_RC" = 0 ] && [ "$BENCH_RC" = 0 ] && finish 0
finish 1
