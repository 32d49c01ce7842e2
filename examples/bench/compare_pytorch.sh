#!/usr/bin/env bash
# examples/bench/compare_pytorch.sh: brisk against PyTorch on Fashion-MNIST training: the MLP
# (784-256-128-10) and the small CNN, Adam 1e-3, batch 128, one epoch, at 1 and 2 threads each.
# Prints a table of seconds per epoch, samples/s, test accuracy and peak RSS, with brisk/PyTorch
# ratios (time and memory: < 1 means brisk is better). brisk runs bench_train (built here in
# $BUILD, default build/); PyTorch runs train_pytorch.py with OPENBLAS_CORETYPE and
# OPENBLAS_L2_SIZE unset (they slow its GEMM down; brisk does not use them). The interpreter:
# $TORCH_PYTHON if set, else the first of venv/bin/python, ../venv/bin/python (a current PyTorch
# from PyPI: `python3 -m venv venv && venv/bin/pip install torch numpy`), else Debian's
# /usr/bin/python3 (PyTorch 1.13, which runs 10-20x slow on some CPUs; the output says which).
# Usage: examples/bench/compare_pytorch.sh [epochs]. Not a test: it asserts nothing.
set -euo pipefail
cd "$(dirname "$0")/../.."
EPOCHS="${1:-1}"
BUILD="${BUILD:-build}"
DATA="${DATA:-/usr/share/datasets/fashion-mnist}"
# Both sides use libgomp. Its default active spin-waiting made 2-thread runs up to 40x slower on
# this shared, loaded 2-vCPU machine (a descheduled thread stalls every barrier); passive
# waiting is the measured choice here, for both engines. Override by exporting OMP_WAIT_POLICY.
export OMP_WAIT_POLICY="${OMP_WAIT_POLICY:-passive}"

if [ ! -x "$BUILD/examples/bench/bench_train" ]; then
  [ -f "$BUILD/CMakeCache.txt" ] || cmake -S . -B "$BUILD" -G Ninja -DBRISK_TESTS=OFF >/dev/null
  cmake --build "$BUILD" --target bench_train >/dev/null
fi
if [ -z "${TORCH_PYTHON:-}" ]; then
  for py in venv/bin/python ../venv/bin/python /usr/bin/python3; do
    if [ -x "$py" ] && "$py" -c 'import torch' 2>/dev/null; then TORCH_PYTHON="$py" && break; fi
  done
fi
HAVE_TORCH=1
[ -n "${TORCH_PYTHON:-}" ] && "$TORCH_PYTHON" -c 'import torch' 2>/dev/null || HAVE_TORCH=0

echo "Fashion-MNIST, Adam 1e-3, batch 128, $EPOCHS epoch(s); $(nproc) cores; machine load: $(cut -d' ' -f1-3 /proc/loadavg); OMP_WAIT_POLICY=$OMP_WAIT_POLICY for both"
if [ "$HAVE_TORCH" = 1 ]; then
  echo "PyTorch $("$TORCH_PYTHON" -c 'import torch; print(torch.__version__)') ($TORCH_PYTHON) runs with OPENBLAS_CORETYPE and OPENBLAS_L2_SIZE unset"
else
  echo "PyTorch not importable (make a venv with torch, or apt install python3-torch): its columns are n/a"
fi

declare -A R  # "impl model threads field" -> value
field() { sed -n "s/.* $1=\([^ ]*\).*/\1/p" <<<"$2"; }
record() {
  local line="$1"
  local key
  key="$(field impl "$line") $(field model "$line") $(field threads "$line")"
  for f in sec_per_epoch cpu_per_epoch samples_per_s test_acc peak_rss_mb; do R["$key $f"]="$(field "$f" "$line")"; done
}

for model in mlp cnn; do
  for threads in 1 2; do
    echo "  running brisk   $model, $threads thread(s)..." >&2
    line="$("$BUILD/examples/bench/bench_train" --model "$model" --threads "$threads" --epochs "$EPOCHS" --data "$DATA" | grep '^RESULT')"
    record "$line"
    if [ "$HAVE_TORCH" = 1 ]; then
      echo "  running PyTorch $model, $threads thread(s)..." >&2
      line="$(env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE OMP_NUM_THREADS="$threads" \
        "$TORCH_PYTHON" examples/bench/train_pytorch.py --model "$model" --threads "$threads" --epochs "$EPOCHS" --data "$DATA" | grep '^RESULT')"
      record "$line"
    fi
  done
done

ratio() { if [ -n "${1:-}" ] && [ -n "${2:-}" ]; then awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f", a / b }'; else echo n/a; fi; }
row() { printf '%-5s %3s | %8s %8s %5s | %8s %8s %5s | %8s %8s | %7s %7s | %6s %6s %5s\n' "$@"; }
echo
row model thr "brisk s" "torch s" ratio "brisk cpu" "torch cpu" ratio "brisk sps" "torch sps" "b acc" "t acc" "b MB" "t MB" ratio
for model in mlp cnn; do
  for threads in 1 2; do
    b="brisk $model $threads"
    p="pytorch $model $threads"
    row "$model" "$threads" \
      "${R[$b sec_per_epoch]}" "${R[$p sec_per_epoch]:-n/a}" "$(ratio "${R[$b sec_per_epoch]}" "${R[$p sec_per_epoch]:-}")" \
      "${R[$b cpu_per_epoch]}" "${R[$p cpu_per_epoch]:-n/a}" "$(ratio "${R[$b cpu_per_epoch]}" "${R[$p cpu_per_epoch]:-}")" \
      "${R[$b samples_per_s]}" "${R[$p samples_per_s]:-n/a}" \
      "${R[$b test_acc]}" "${R[$p test_acc]:-n/a}" \
      "${R[$b peak_rss_mb]}" "${R[$p peak_rss_mb]:-n/a}" "$(ratio "${R[$b peak_rss_mb]}" "${R[$p peak_rss_mb]:-}")"
  done
done
echo "(s: wall seconds per training epoch; cpu: process CPU seconds per epoch, all threads, steadier than wall"
echo " time on a loaded machine but it counts OpenMP spin-waiting; sps: samples/s (wall); acc: test accuracy"
echo " after $EPOCHS epoch(s); MB: peak RSS. Ratios are brisk/PyTorch, < 1 is better for brisk. The machine has"
echo " 2 shared vCPUs: wall times move 10-30% between runs, far more when it is loaded.)"
