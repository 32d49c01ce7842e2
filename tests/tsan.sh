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
  # -O1 with line tables (stacks with lines) and only the target it runs: compile time is most
  # of this pass (Note [Test build speed] in docs/DECISIONS.md).
  source cmake/setup.sh
  brisk_configure "$OUT/build" -DCMAKE_BUILD_TYPE=RelWithDebInfo "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O1 -g1 -DNDEBUG" \
    -DBRISK_TSAN=ON -DBRISK_CUDA=OFF -DBRISK_EXAMPLES=OFF -DBRISK_TESTS=ON -DBRISK_NATIVE=OFF
  brisk_build "$OUT/build" brisk_tsan_tests
fi

export OMP_NUM_THREADS=1 OMP_WAIT_POLICY=passive
export TSAN_OPTIONS="suppressions=$ROOT/tests/tsan.supp halt_on_error=1 exitcode=66 second_deadlock_stack=1 ${TSAN_OPTIONS:-}"
log=$OUT/test.log
echo "   brisk_tsan_tests -tc=\"$CASES\" (log ${log#"$ROOT"/})"
rc=0
"$OUT/build/tests/brisk_tsan_tests" --no-intro=true -tc="$CASES" >"$log" 2>&1 || rc=$?
if grep -q "WARNING: ThreadSanitizer" "$log" || [ "$rc" -ne 0 ]; then
  grep -m3 -A30 "WARNING: ThreadSanitizer" "$log" || tail -30 "$log"
  echo "tests/tsan.sh: FAILED (exit $rc; log $log)"
  exit 1
fi
grep -E "^\[doctest\] (test cases|assertions)" "$log" | sed "s/^/   /" || true
echo "tests/tsan.sh: no data races"
