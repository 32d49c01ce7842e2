#!/usr/bin/env bash
# tests/fuzz.sh: builds the libFuzzer targets of tests/fuzz (clang, ASan+UBSan, in build-asan/,
# the sanitizer build tests/run.sh's ASan suite also uses; cmake/setup.sh) and runs each on a scratch copy of its seed corpus, then prints one line per target: runs,
# exec/s, findings (crash / timeout / OOM / leak files libFuzzer wrote to
# build-fuzz/findings/<target>/ during this run), peak RSS and wall time. Exits non-zero when
# anything was found. Not the unit tests (tests/run.sh) and never writes to tests/fuzz/corpus.
#
#   tests/fuzz.sh                     every target, 1000000 runs each
#   tests/fuzz.sh --runs N            N runs per target
#   tests/fuzz.sh --only csv[,idx]    some targets (safetensors checkpoint idx idx_gz csv torch_file image)
#   tests/fuzz.sh --brief             CI: each target at most 20000 runs or 20 s
#   tests/fuzz.sh --keep-going        do not stop at the first finding (libFuzzer's fork mode:
#                                     the inputs run in a child; crashes, OOMs, timeouts are
#                                     saved and fuzzing goes on)
#   tests/fuzz.sh --no-build          use the targets already built
#   JOBS=... FUZZ_TIME=S              build parallelism; a time limit per target (seconds)
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
OUT=$ROOT/build-fuzz
BUILD=$ROOT/build-asan

RUNS=1000000
MAX_TIME=${FUZZ_TIME:-0}
ONLY=""
BUILD_STEP=1
KEEP_GOING=0
while [ $# -gt 0 ]; do
  case "$1" in
    --runs) RUNS=$2; shift ;;
    --only) ONLY=$2; shift ;;
    --brief) RUNS=20000; MAX_TIME=20 ;;
    --no-build) BUILD_STEP=0 ;;
    --keep-going) KEEP_GOING=1 ;;
    *) echo "tests/fuzz.sh: unknown option $1" >&2; exit 2 ;;
  esac
  shift
done

ALL_TARGETS=(safetensors checkpoint idx idx_gz csv torch_file image)
TARGETS=("${ALL_TARGETS[@]}")
[ -n "$ONLY" ] && IFS=, read -r -a TARGETS <<<"$ONLY"

mkdir -p "$OUT/logs"
if [ "$BUILD_STEP" = 1 ]; then
  # clang, its runtimes (libFuzzer, sanitizers: only recommended by clang) and libomp.
  source cmake/setup.sh
  brisk_install "${BRISK_PACKAGES[@]}" "${BRISK_TEST_PACKAGES[@]}"
  brisk_configure_asan "$BUILD"
  brisk_build "$BUILD" fuzz_all
fi

# libFuzzer reports through the sanitizers: stop at the first error, with stacks; one OpenMP
# thread (the readers do not need more, and libomp's idle threads only cost time here).
export OMP_NUM_THREADS=1
export ASAN_OPTIONS=${ASAN_OPTIONS:-abort_on_error=1:detect_leaks=1:symbolize=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}

rows=()
found=0
for t in "${TARGETS[@]}"; do
  exe=$BUILD/tests/fuzz/fuzz_$t
  if [ ! -x "$exe" ]; then
    echo "tests/fuzz.sh: no $exe (unknown target, or built without libstb-dev)" >&2
    found=1; continue
  fi
  work=$OUT/work/$t findings=$OUT/findings/$t log=$OUT/logs/$t.log
  rm -rf "$work" && mkdir -p "$work" "$findings"
  cp -r "$ROOT/tests/fuzz/corpus/$t" "$work/corpus"
  touch "$work/start"
  args=(-runs="$RUNS" -rss_limit_mb=2048 -timeout=10 -print_final_stats=1 -artifact_prefix="$findings/")
  [ "$MAX_TIME" != 0 ] && args+=(-max_total_time="$MAX_TIME")
  [ "$KEEP_GOING" = 1 ] && args+=(-fork=1 -ignore_crashes=1 -ignore_ooms=1 -ignore_timeouts=1)
  limit="$RUNS runs"; [ "$MAX_TIME" != 0 ] && limit="$limit or $MAX_TIME s"
  echo "== fuzz $t ($limit; log ${log#"$ROOT"/})"
  t0=$(date +%s.%N)
  rc=0
  # Peak RSS: GNU time's maximum over the process tree (fork mode runs inputs in children),
  # else libFuzzer's own final figure.
  timer=(); [ -x /usr/bin/time ] && timer=(/usr/bin/time -f %M -o "$work/maxrss_kb")
  "${timer[@]}" "$exe" "${args[@]}" "$work/corpus" >"$log" 2>&1 || rc=$?
  wall=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }')
  runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
  # Fork mode: the parent's final stats are its own (0 runs); its last progress line counts.
  [ "${runs:-0}" = 0 ] && runs=$(sed -n 's/^#\([0-9]*\)[:\t ].*/\1/p' "$log" | tail -1)
  rss=$(sed -n 's/^stat::peak_rss_mb: *//p' "$log" | tail -1)
  if [ -s "$work/maxrss_kb" ]; then
    rss=$(awk -v a="${rss:-0}" '/^[0-9]+$/ { m = int($1 / 1024); print (m > a ? m : a); exit }' "$work/maxrss_kb")
  fi
  count() { find "$findings" -maxdepth 1 -name "$1-*" -newer "$work/start" | wc -l; }
  crash=$(count crash) timeout=$(count timeout) oom=$(count oom) leak=$(count leak)
  n=$((crash + timeout + oom + leak))
  if [ "$n" -gt 0 ] || [ "$rc" -ne 0 ]; then
    found=1
    grep -E "^==[0-9]+== ?ERROR|runtime error|FUZZ FINDING|ERROR: libFuzzer" "$log" | sort | uniq -c | head -5 |
      sed "s/^/   $t: /" || true
  fi
  eps=$(awk -v n="${runs:-0}" -v w="$wall" 'BEGIN { printf "%d", n / (w + 0.001) }')
  rows+=("$(printf '%-12s %10s %8s %6s %8s %5s %5s %5s %8s %8.1f' "$t" "${runs:-?}" "$eps" "$crash" "$timeout" "$oom" \
    "$leak" "$rc" "${rss:-?}" "$wall")")
done

# Scratch files of inputs that crashed (a process that dies cannot remove its own).
rm -rf /dev/shm/brisk-fuzz-* "${TMPDIR:-/tmp}"/brisk-fuzz-* 2>/dev/null || true

echo
printf '%-12s %10s %8s %6s %8s %5s %5s %5s %8s %8s\n' target runs exec/s crash timeout oom leak rc rss_mb wall_s
for r in "${rows[@]}"; do echo "$r"; done
if [ "$found" -ne 0 ]; then
  echo "tests/fuzz.sh: FINDINGS (inputs in $OUT/findings/<target>/, logs in $OUT/logs/)"
  exit 1
fi
echo "tests/fuzz.sh: nothing found"
