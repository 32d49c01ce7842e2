#!/usr/bin/env bash
# tests/run.sh: THE test command (README, CI). Installs what is missing (apt), builds and runs
# every test, one line per stage and its time; build and test output go to logs, shown when
# something fails. Tiers (Note [Test tiers] in docs/DECISIONS.md):
#
#   tests/run.sh            CI's gate: format, the Release suite (build/, shared with
#                           examples/run.sh), the ASan+UBSan suite, a brief fuzz of the readers
#                           (both from one clang build, build-asan/) and TSan on the threaded
#                           cases (build-tsan/)
#   tests/run.sh --quick    the Release suite only (the edit-build-test loop)
#   tests/run.sh --full     the gate, then the long fuzz runs (10^6 inputs per reader) and the
#                           examples that have no smoke test (the main job for one epoch, ...)
#   tests/run.sh --asan | --fuzz | --tsan     only that stage (they combine)
#   tests/run.sh --no-asan | --no-fuzz | --no-tsan   skip that stage
#   BUILD_DIR=... JOBS=...  the Release build folder (build/) and the parallelism (nproc)
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
source cmake/setup.sh

RUN_FORMAT=1 RUN_MAIN=1 RUN_ASAN=1 RUN_FUZZ=1 RUN_TSAN=1 RUN_FULL=0
ONLY=""
for arg in "$@"; do
  case "$arg" in
    --quick) RUN_FORMAT=0 RUN_ASAN=0 RUN_FUZZ=0 RUN_TSAN=0 ;;
    --full) RUN_FULL=1 ;;
    --asan | --fuzz | --tsan) ONLY="$ONLY ${arg#--}" ;;
    --no-asan) RUN_ASAN=0 ;;
    --no-fuzz) RUN_FUZZ=0 ;;
    --no-tsan) RUN_TSAN=0 ;;
    *) echo "tests/run.sh: unknown option $arg" >&2; exit 2 ;;
  esac
done
if [ -n "$ONLY" ]; then
  RUN_FORMAT=0 RUN_MAIN=0 RUN_ASAN=0 RUN_FUZZ=0 RUN_TSAN=0
  for m in $ONLY; do
    case "$m" in asan) RUN_ASAN=1 ;; fuzz) RUN_FUZZ=1 ;; tsan) RUN_TSAN=1 ;; esac
  done
fi

PKGS=("${BRISK_PACKAGES[@]}")
[ $((RUN_FORMAT + RUN_ASAN + RUN_FUZZ)) -gt 0 ] && PKGS+=("${BRISK_TEST_PACKAGES[@]}")
brisk_install "${PKGS[@]}"
export JOBS=${JOBS:-$(nproc)}
RELEASE=${BUILD_DIR:-$ROOT/build}
ASAN=$ROOT/build-asan

# run_ctest DIR: every ctest test of DIR, JOBS at a time; prints the totals (ctest's tests and
# the doctest cases inside them) or, on failure, the failing tests' output.
run_ctest() {
  local dir=$1 log=$1/ctest.log rc=0
  (cd "$dir" && ctest -j "$JOBS" --output-on-failure -V) >"$log" 2>&1 || rc=$?
  local cases
  cases=$(sed -n 's/.*\[doctest\] test cases: *\([0-9]*\) |.*/\1/p' "$log" | awk '{ s += $1 } END { print s + 0 }')
  if [ "$rc" -ne 0 ]; then
    sed -n '/The following tests FAILED/,$p' "$log"
    echo "tests failed (log: $log)"
    return 1
  fi
  echo "   $(grep -E '^[0-9]+% tests passed' "$log"); $cases doctest cases (log: ${log#"$ROOT"/})"
}

# stage NAME COMMAND...: one line before, one after with the wall time; the times add up to
# the summary line at the end.
TIMES=""
stage() {
  local name=$1 t0=$SECONDS
  shift
  echo "== $name"
  "$@"
  echo "   $name: $((SECONDS - t0)) s"
  TIMES="$TIMES $name $((SECONDS - t0))s"
}

release_suite() {
  brisk_configure_release "$RELEASE"
  brisk_build "$RELEASE"
  run_ctest "$RELEASE"
}

# build-asan/: one clang build with ASan + UBSan and libFuzzer's coverage for the whole suite
# and the fuzz targets (cmake/setup.sh).
asan_suite() {
  brisk_configure_asan "$ASAN"
  brisk_build "$ASAN"
  run_ctest "$ASAN"
}

if [ "$RUN_FORMAT" = 1 ]; then stage format tests/check_format.sh; fi
if [ "$RUN_MAIN" = 1 ]; then stage release release_suite; fi
if [ "$RUN_ASAN" = 1 ]; then stage asan asan_suite; fi
if [ "$RUN_FUZZ" = 1 ]; then stage fuzz tests/fuzz.sh --brief; fi
if [ "$RUN_TSAN" = 1 ]; then stage tsan tests/tsan.sh; fi
if [ "$RUN_FULL" = 1 ]; then
  stage fuzz-long tests/fuzz.sh
  stage examples tests/examples.sh "$RELEASE"
fi
echo "== tests/run.sh: all passed (${TIMES# })"
