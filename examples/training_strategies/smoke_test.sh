#!/usr/bin/env bash
# examples/training_strategies/smoke_test.sh: the ctest check of the training_strategies example
# (registered in examples/CMakeLists.txt): every strategy for 1 epoch on 512 samples must exit 0
# and write a complete SVG, CSV and JSON; a bad flag must fail with a clear message. Exits 77
# (ctest's SKIP_RETURN_CODE) when the Fashion-MNIST data is not installed.
#   smoke_test.sh <training_strategies binary> <data dir> <output dir>
set -euo pipefail
BIN=$1 DATA=$2 OUT=$3

if [ ! -f "$DATA/train-images-idx3-ubyte.gz" ] && [ ! -f "$DATA/train-images-idx3-ubyte" ]; then
  echo "SKIP: no Fashion-MNIST in $DATA (apt-get install dataset-fashion-mnist)"
  exit 77
fi
export OMP_WAIT_POLICY="${OMP_WAIT_POLICY:-passive}"  # see docs/DECISIONS.md
rm -rf "$OUT"

fail() { echo "FAIL: $*" >&2; exit 1; }

# A bad flag: exit code 1 and a message naming it, not a crash.
if "$BIN" --epochs zero >"$OUT.bad.log" 2>&1; then fail "--epochs zero was accepted"; fi
grep -q -- "--epochs: expected an integer" "$OUT.bad.log" ||
  fail "no clear message for --epochs zero: $(cat "$OUT.bad.log")"
if "$BIN" --only nosuch >"$OUT.bad.log" 2>&1; then fail "--only nosuch was accepted"; fi
grep -q "no strategy named 'nosuch'" "$OUT.bad.log" || fail "no clear message for --only nosuch: $(cat "$OUT.bad.log")"

"$BIN" --epochs 1 --train-size 512 --val-size 256 --test-size 256 --batch-size 64 --data "$DATA" --out "$OUT" \
  >"$OUT.log" 2>&1 || { cat "$OUT.log"; fail "training_strategies exited with $?"; }

n=$("$BIN" --list | wc -l)
[ "$n" -ge 10 ] || fail "--list shows $n strategies"
svg="$OUT/lr_curves.svg"
[ -s "$svg" ] || fail "no $svg"
head -c 4 "$svg" | grep -q "<svg" || fail "$svg does not start with <svg"
tail -n 1 "$svg" | grep -q "</svg>" || fail "$svg is not closed"
[ "$(grep -c "<polyline" "$svg")" -eq $((2 * n)) ] || fail "$svg: expected $((2 * n)) polylines (2 panels x $n)"
[ "$(wc -l <"$OUT/results.csv")" -eq $((n + 1)) ] || fail "results.csv: expected $((n + 1)) lines"
grep -q '"strategies"' "$OUT/results.json" || fail "results.json has no strategies"
grep -q "adam-unfused vs adam: final weights bit-identical" "$OUT.log" ||
  fail "fused and unfused Adam differ: $(grep 'adam-unfused vs' "$OUT.log")"
if ls "$OUT"/*.tmp >/dev/null 2>&1; then fail "temp files left in $OUT"; fi
echo "OK: $n strategies, $svg"
