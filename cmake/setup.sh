# cmake/setup.sh: the set-up both README commands share (sourced by examples/run.sh and
# tests/run.sh, not run on its own): the Debian packages, ccache's settings, and the one
# configure line of the Release build folder, so that the main job and the test suite compile
# the library once, into the same folder (Note [One build folder] in docs/DECISIONS.md).
# Not here: what each command then builds and runs.

# What both commands need; BRISK_TEST_PACKAGES only the sanitizer and fuzz builds (clang with
# libFuzzer and its runtimes, LLVM's OpenMP). Always --no-install-recommends.
BRISK_PACKAGES=(cmake ninja-build g++ ccache libeigen3-dev doctest-dev nlohmann-json3-dev zlib1g-dev libzip-dev zipcmp zipmerge ziptool libonnx-dev libprotobuf-dev libstb-dev
  libjpeg-dev python3 python3-venv libopenmpi-dev openmpi-bin libgloo-dev dataset-fashion-mnist)
BRISK_TEST_PACKAGES=(clang-format clang libclang-rt-dev libomp-dev libonnx-testdata fortunes python3-torch
  python3-torchvision)

# brisk_install PACKAGE...: installs those that are missing (apt).
brisk_install() {
  local missing=() p
  for p in "$@"; do dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p"); done
  [ ${#missing[@]} -eq 0 ] && return 0
  echo "== installing: ${missing[*]}" >&2
  local sudo=""
  [ "$(id -u)" -ne 0 ] && sudo=sudo
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
}

# ccache, when present, for every build of both commands. CCACHE_BASEDIR makes the paths of
# this checkout relative, so another clone of the same commit (CI's) finds the same entries;
# NOHASHDIR does the same for the builds with line tables. pch_defines and time_macros let
# ccache cache the files compiled against the tests' precompiled header.
BRISK_LAUNCHER=()
if command -v ccache >/dev/null 2>&1; then
  export CCACHE_BASEDIR="${CCACHE_BASEDIR:-$ROOT}"
  export CCACHE_NOHASHDIR="${CCACHE_NOHASHDIR:-1}"
  export CCACHE_SLOPPINESS="${CCACHE_SLOPPINESS:-pch_defines,time_macros}"
  BRISK_LAUNCHER=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_CUDA_COMPILER_LAUNCHER=ccache)
fi

# The CUDA backend compiles wherever nvcc is, for one architecture (sm_90, the GPU machines';
# BRISK_CUDA_ARCHS overrides; a release install may build more: CMakeLists.txt's default).
BRISK_CUDA_ARGS=()
if command -v nvcc >/dev/null 2>&1 || [ -x /usr/local/cuda/bin/nvcc ]; then
  command -v nvcc >/dev/null 2>&1 || BRISK_CUDA_ARGS=(-DCMAKE_CUDA_COMPILER=/usr/local/cuda/bin/nvcc)
  BRISK_CUDA_ARGS+=("-DCMAKE_CUDA_ARCHITECTURES=${BRISK_CUDA_ARCHS:-90}")
fi

# brisk_configure DIR [CMAKE_ARG...]: configures DIR with Ninja and ccache; the log goes to
# DIR/configure.log, shown only when configuring fails. Running it again with the same
# arguments changes nothing, so nothing is recompiled.
brisk_configure() {
  local dir=$1
  shift
  mkdir -p "$dir"
  cmake -S "$ROOT" -B "$dir" -G Ninja "${BRISK_LAUNCHER[@]}" "$@" >"$dir/configure.log" 2>&1 || {
    cat "$dir/configure.log" >&2
    return 1
  }
}

# brisk_configure_release DIR: THE Release build folder of both README commands (build/ by
# default): the library, the examples and the tests, the CUDA backend where nvcc is.
brisk_configure_release() {
  brisk_configure "$1" -DCMAKE_BUILD_TYPE=Release -DBRISK_TESTS=ON -DBRISK_EXAMPLES=ON "${BRISK_CUDA_ARGS[@]}"
}

# brisk_configure_asan DIR: the sanitizer build (build-asan/ for tests/run.sh and tests/fuzz.sh):
# clang with ASan + UBSan and libFuzzer's coverage (BRISK_FUZZ), the whole suite and the fuzz
# targets of the readers from one library. -O1 with line tables only: a sanitizer build's
# compile time is in the optimizer and the debug info (Note [Test build speed]).
brisk_configure_asan() {
  brisk_configure "$1" -DCMAKE_CXX_COMPILER=clang++ -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O1 -g1 -DNDEBUG" -DBRISK_FUZZ=ON -DBRISK_TESTS=ON -DBRISK_CUDA=OFF \
    -DBRISK_NATIVE=OFF \
    -DBRISK_EXAMPLES=OFF
}

# brisk_build DIR TARGET...: builds with the output in DIR/build.log, its tail shown on failure.
brisk_build() {
  local dir=$1
  shift
  local targets=()
  [ $# -gt 0 ] && targets=(--target "$@")
  cmake --build "$dir" -j "${JOBS:-$(nproc)}" "${targets[@]}" >"$dir/build.log" 2>&1 || {
    { grep -E "error|FAILED" "$dir/build.log" || true; } | head -20 >&2
    tail -30 "$dir/build.log" >&2
    echo "build failed (log: $dir/build.log)" >&2
    return 1
  }
  # Warnings from our own code are defects (the README's promise of a quiet build).
  if grep -q "warning:" "$dir/build.log"; then
    { grep -B2 -A6 -m5 "warning:" "$dir/build.log" || true; } >&2
    echo "build of $dir has compiler warnings (log: $dir/build.log)" >&2
    return 1
  fi
}
