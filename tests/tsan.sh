#!/usr/bin/env bash
# tests/tsan.sh: builds the library with ThreadSanitizer (GCC, BRISK_TSAN=ON, in build-tsan/) and
# brisk_tsan_tests (tests/CMakeLists.txt: brisk_tests' files with threads of brisk's own, the
# data loader's workers, the caching allocator, tests/test_threads.cpp) and runs those cases.
# Exits non-zero on any TSan report.
# OpenMP runs with one thread (libgomp is not instrumented; see tests/tsan.supp). Not the
# whole suite under TSan: the rest is single-threaded or OpenMP, and the cases that force two
# OpenMP threads give only libgomp's false reports.
#
#   tests/tsan.sh                    build + run the threaded cases
#   tests/tsan.sh --no-build         run what is built
#   TSAN_CASES='data:*' JOBS=...     another doctest -tc filter; build parallelism
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
OUT=$ROOT/build-tsan
BUILD_STEP=1
for arg in "$@"; do
  case "$arg" in
    --no-build) BUILD_STEP=0 ;;
    *) echo "tests/tsan.sh: unknown option $arg" >&2; exit 2 ;;
  esac
done
CASES=${TSAN_CASES:-data:*,allocator:*,threads:*}

mkdir -p "$OUT"
if [ "$BUILD_STEP" = 1 ]; then
  LAUNCHER=()
  command -v ccache >/dev/null 2>&1 && LAUNCHER=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
  cmake -S "$ROOT" -B "$OUT/build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo "${LAUNCHER[@]}" -DBRISK_TSAN=ON \
    -DBRISK_CUDA=OFF -DBRISK_EXAMPLES=OFF -DBRISK_TESTS=ON >"$OUT/configure.log" 2>&1 || {
    cat "$OUT/configure.log"; exit 1; }
  cmake --build "$OUT/build" -j "${JOBS:-$(nproc)}" --target brisk_tsan_tests >"$OUT/build.log" 2>&1 || {
    tail -40 "$OUT/build.log"; echo "tests/tsan.sh: build failed (log: $OUT/build.log)"; exit 1; }
fi

export OMP_NUM_THREADS=1 OMP_WAIT_POLICY=passive
export TSAN_OPTIONS="suppressions=$ROOT/tests/tsan.supp halt_on_error=1 exitcode=66 second_deadlock_stack=1 ${TSAN_OPTIONS:-}"
log=$OUT/test.log
echo "== tsan: brisk_tsan_tests -tc=\"$CASES\" (log ${log#"$ROOT"/})"
rc=0
"$OUT/build/tests/brisk_tsan_tests" --no-intro=true -tc="$CASES" >"$log" 2>&1 || rc=$?
if grep -q "WARNING: ThreadSanitizer" "$log" || [ "$rc" -ne 0 ]; then
  grep -m3 -A30 "WARNING: ThreadSanitizer" "$log" || tail -30 "$log"
  echo "tests/tsan.sh: FAILED (exit $rc; log $log)"
  exit 1
fi
grep -E "^\[doctest\] (test cases|assertions)" "$log" || true
echo "tests/tsan.sh: no data races"
