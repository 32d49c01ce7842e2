#!/usr/bin/env bash
# tests/check_format.sh: checks that every C++/CUDA source the repository tracks is formatted by
# the checked-in .clang-format (clang-format 14, Debian's); prints the files that are not and
# exits 1. `tests/check_format.sh --fix` formats them in place. Hand-aligned tables opt out with
# `// clang-format off` / `// clang-format on`. Not here: Python, shell or CMake files.
set -euo pipefail
cd "$(dirname "$0")/.."
FIX=0
[ "${1:-}" = --fix ] && FIX=1
command -v clang-format >/dev/null || { echo "check_format: clang-format not installed" >&2; exit 2; }
mapfile -t files < <(git ls-files --cached --others --exclude-standard '*.h' '*.cpp' '*.cu' '*.cuh' | grep -v '^tests/fuzz/corpus/')
if [ "$FIX" = 1 ]; then
  clang-format -i "${files[@]}"
  echo "check_format: formatted ${#files[@]} files"
  exit 0
fi
# Batches of 40 files per clang-format, one batch per core; a file that is not formatted is
# named in clang-format's own error lines (each batch filters its own output, so the names of
# two batches do not interleave).
# shellcheck disable=SC2016
mapfile -t bad < <(printf '%s\0' "${files[@]}" | xargs -0 -n 40 -P "$(nproc)" sh -c \
  'clang-format --dry-run --Werror "$@" 2>&1 | sed -n "s/^\(.*\):[0-9]*:[0-9]*: error: .*clang-format-violations.*/\1/p"' _ |
  sort -u)
if [ ${#bad[@]} -gt 0 ]; then
  printf 'not formatted (run tests/check_format.sh --fix): %s\n' "${bad[@]}"
  exit 1
fi
echo "check_format: ${#files[@]} files formatted"
