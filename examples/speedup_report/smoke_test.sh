#!/usr/bin/env bash
# examples/speedup_report/smoke_test.sh: the ctest check of the speedup report (registered in
# examples/speedup_report/CMakeLists.txt): --tiny (512 images x 1 epoch, every row) must exit 0
# and write a complete table, CSV, JSON and SVG; GPU rows must say "not run (no GPU)" on a
# machine without one; a bad flag must fail with a clear message. Exits 77 (ctest's
# SKIP_RETURN_CODE) when the Fashion-MNIST data is not installed.
#   smoke_test.sh <speedup_report binary> <data dir> <output dir>
set -euo pipefail
BIN=$1 DATA=$2 OUT=$3

if [ ! -f "$DATA/train-images-idx3-ubyte.gz" ] && [ ! -f "$DATA/train-images-idx3-ubyte" ]; then
  echo "SKIP: no Fashion-MNIST in $DATA (apt-get install dataset-fashion-mnist)"
  exit 77
fi
export OMP_WAIT_POLICY="${OMP_WAIT_POLICY:-passive}"
rm -rf "$OUT"
mkdir -p "$(dirname "$OUT")"
fail() { echo "FAIL: $*" >&2; exit 1; }

if "$BIN" --epochs zero >"$OUT.bad.log" 2>&1; then fail "--epochs zero was accepted"; fi
grep -q -- "--epochs: expected an integer" "$OUT.bad.log" || fail "no clear message for --epochs zero: $(cat "$OUT.bad.log")"

"$BIN" --tiny --data "$DATA" --out "$OUT" >"$OUT.log" 2>&1 || { cat "$OUT.log"; fail "speedup_report exited with $?"; }

for f in report.md results.csv results.json speedup.svg env.txt; do [ -s "$OUT/$f" ] || fail "no $OUT/$f"; done
rows=$(($(wc -l <"$OUT/results.csv") - 1))
[ "$rows" -ge 40 ] || fail "results.csv has $rows rows"
[ "$(grep -c '^| cnn \|^| mlp ' "$OUT/report.md")" -eq "$rows" ] || fail "report.md and results.csv disagree"
grep -q '"rows"' "$OUT/results.json" || fail "results.json has no rows"
head -c 4 "$OUT/speedup.svg" | grep -q "<svg" || fail "speedup.svg does not start with <svg"
tail -n 1 "$OUT/speedup.svg" | grep -q "</svg>" || fail "speedup.svg is not closed"
[ "$(grep -c "<rect" "$OUT/speedup.svg")" -ge 20 ] || fail "speedup.svg has too few bars"
for r in "cnn,baseline,baseline" "cnn,data loading,2 workers" "cnn,optimizer,fused step" "cnn,best combination" \
  "cnn,compression,int8" "mlp,baseline,baseline"; do
  grep -q "^$r,.*,ok," "$OUT/results.csv" || fail "row $r missing or not ok: $(grep "^$r" "$OUT/results.csv")"
done
if ! grep -q "failed" "$OUT/results.csv"; then :; else fail "failed rows: $(grep failed "$OUT/results.csv")"; fi
if [ "$(grep -c "CUDA" "$OUT/report.md")" -gt 0 ] && ! grep -q "cuda,ok," "$OUT/results.csv"; then
  grep -q "not run (no GPU)" "$OUT/results.csv" || fail "GPU rows neither run nor marked not run"
fi
grep -q "^## Environment" "$OUT/report.md" || fail "report.md has no environment report"
echo "OK: $rows rows, $OUT/speedup.svg"
