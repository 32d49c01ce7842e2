#!/usr/bin/env bash
# tests/run.sh: THE test command (README, CI). Installs what is missing (apt), configures,
# builds in Release and runs every test through ctest. The CUDA backend is compiled whenever
# nvcc is present; its tests skip themselves without a GPU.
#
#   tests/run.sh            build + all tests, then the ASan/UBSan pass, a brief fuzz pass and
#                           the TSan pass (below)
#   tests/run.sh --asan     only the ASan+UBSan build and its test run
#   tests/run.sh --fuzz     only the fuzz targets, briefly on their seeds (tests/fuzz.sh --brief)
#   tests/run.sh --tsan     only the ThreadSanitizer build of the threaded cases (tests/tsan.sh)
#   tests/run.sh --no-asan / --no-fuzz / --no-tsan   skip that pass (options combine)
#   BUILD_DIR=... JOBS=...  override the build folder and parallelism
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD

RUN_MAIN=1 RUN_ASAN=1 RUN_FUZZ=1 RUN_TSAN=1
ONLY=""
for arg in "$@"; do
  case "$arg" in
    --asan | --fuzz | --tsan) ONLY="$ONLY ${arg#--}" ;;
    --no-asan) RUN_ASAN=0 ;;
    --no-fuzz) RUN_FUZZ=0 ;;
    --no-tsan) RUN_TSAN=0 ;;
    *) echo "tests/run.sh: unknown option $arg" >&2; exit 2 ;;
  esac
done
if [ -n "$ONLY" ]; then
  RUN_MAIN=0 RUN_ASAN=0 RUN_FUZZ=0 RUN_TSAN=0
  for m in $ONLY; do
    case "$m" in asan) RUN_ASAN=1 ;; fuzz) RUN_FUZZ=1 ;; tsan) RUN_TSAN=1 ;; esac
  done
fi

# ---- dependencies (Debian packages, only what is missing)
PKGS=(cmake ninja-build g++ libeigen3-dev doctest-dev nlohmann-json3-dev zlib1g-dev libstb-dev libjpeg-dev python3 python3-venv
      clang-format ccache dataset-fashion-mnist libopenmpi-dev openmpi-bin)
# The fuzz pass: clang with its runtimes (libFuzzer, sanitizers) and LLVM's OpenMP.
[ "$RUN_FUZZ" = 1 ] && PKGS+=(clang libclang-rt-dev libomp-dev)
missing=()
for p in "${PKGS[@]}"; do dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p"); done
if [ ${#missing[@]} -gt 0 ]; then
  echo "== installing: ${missing[*]}"
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO=sudo
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

JOBS=${JOBS:-$(nproc)}
# ccache when present (rebuilds of the same checkout; tests/fuzz.sh and tests/tsan.sh use it
# too). No CCACHE_BASEDIR: relative paths would change __FILE__, which the tests use to find
# tests/data.
LAUNCHER=()
if command -v ccache >/dev/null 2>&1; then
  LAUNCHER=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_CUDA_COMPILER_LAUNCHER=ccache)
fi
CUDA_FLAG=()
if ! command -v nvcc >/dev/null 2>&1 && [ -x /usr/local/cuda/bin/nvcc ]; then
  CUDA_FLAG=(-DCMAKE_CUDA_COMPILER=/usr/local/cuda/bin/nvcc)
fi

build_and_test() {  # dir, extra cmake args...
  local dir=$1; shift
  echo "== configure $dir"
  cmake -S "$ROOT" -B "$dir" -G Ninja "${CUDA_FLAG[@]}" "${LAUNCHER[@]}" "$@" >"$dir.configure.log" 2>&1 || {
    cat "$dir.configure.log"; return 1; }
  grep -E "brisk:" "$dir.configure.log" || true
  echo "== build $dir"
  cmake --build "$dir" -j "$JOBS"
  echo "== test $dir"
  (cd "$dir" && ctest --output-on-failure -j 1)
}

timed() {  # name, command...: runs it and notes its wall time for the summary
  local name=$1 t0=$SECONDS; shift
  "$@"
  TIMES="$TIMES $name $((SECONDS - t0))s"
}
TIMES=""
mkdir -p "$ROOT/build-tests"
if [ "$RUN_MAIN" = 1 ]; then
  timed format tests/check_format.sh
  timed release build_and_test "${BUILD_DIR:-$ROOT/build-tests/release}" -DCMAKE_BUILD_TYPE=Release
fi
if [ "$RUN_ASAN" = 1 ]; then
  # Sanitizers: CPU-only (nvcc objects are not instrumented), Debug-ish optimization.
  timed asan build_and_test "$ROOT/build-tests/asan" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DBRISK_SANITIZE=ON \
    -DBRISK_CUDA=OFF -DBRISK_EXAMPLES=OFF
fi
if [ "$RUN_FUZZ" = 1 ]; then
  # libFuzzer targets of the file readers, each briefly on its committed seeds (build-fuzz/).
  echo "== fuzz (brief; build log build-fuzz/build.log)"
  timed fuzz env JOBS="$JOBS" tests/fuzz.sh --brief
fi
if [ "$RUN_TSAN" = 1 ]; then
  # ThreadSanitizer on the loader workers and the allocator (build-tsan/).
  echo "== tsan (build log build-tsan/build.log)"
  timed tsan env JOBS="$JOBS" tests/tsan.sh
fi
echo "== tests/run.sh: all passed (${TIMES# })"
