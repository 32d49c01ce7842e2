#!/usr/bin/env bash
# tests/dist/run.sh TESTS FAULT_CHILD [DDP_EXAMPLE]: the distributed tests, as ctest runs them:
# the 2-rank suite (tests/dist/test_*.cpp) and its `groups:*` cases on 4 ranks, then the fault cases (tests/dist/fault_child.cpp):
# a rank killed by SIGKILL, a collective mismatch under the debug check and a pipeline stage
# killed mid-training; then, given the examples/ddp binary and the Fashion-MNIST data, a 2-rank
# run stopped after one epoch and resumed must write the same best model as an uninterrupted
# one, byte for byte. Open MPI needs --oversubscribe on 2 cores and the two ALLOW_RUN_AS_ROOT
# variables as root. The fault cases run with the launch line docs/distributed.md recommends,
# `--mca orte_abort_on_non_zero_status 0`: survivors of a dead rank report their error and
# mpirun's status is still non-zero (checked for `kill`, whose rank 0 returns 0 from main and
# must exit with dist::kBrokenGroupExitStatus all the same; dist/mpi_group.cpp, Note [Faults]).
set -uo pipefail
tests=$1 child=$2 example=${3:-}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1
MPIRUN=(mpirun --oversubscribe --bind-to none -np 2)
status=0
timeout 600 "${MPIRUN[@]}" "$tests" || status=1
# Sub-groups, data x pipeline parallelism (tests/dist/test_groups.cpp), ZeRO-2 and FSDP on 4 ranks.
timeout 300 mpirun --oversubscribe --bind-to none -np 4 "$tests" -tc='groups:*,zero: ZeRO-2*,zero: a sharded*,fsdp:*' || status=1
for what in kill mismatch pipeline_kill; do
  out=$(timeout 120 "${MPIRUN[@]}" --mca orte_abort_on_non_zero_status 0 "$child" "$what" 2>&1)
  rc=$?
  line=$(printf '%s\n' "$out" | grep -E "^(PASS|FAIL) $what" | head -1)
  if [[ "$what" == kill ]] && { [ $rc -eq 0 ] || [ $rc -eq 124 ] ||
       ! printf '%s\n' "$out" | grep -q "^PASS kill, later call" ||
       ! printf '%s\n' "$out" | grep -q "brisk::dist: exiting with status 3 because a process group broke"; }; then
    echo "dist fault case 'kill': mpirun's status $rc (want non-zero, no timeout), the later call's and the exit's messages:"
    printf '%s\n' "$out" | tail -20; status=1
  elif [[ "$line" == PASS* ]]; then
    echo "$line"
  else
    echo "dist fault case '$what' failed:"; printf '%s\n' "$out" | tail -20; status=1
  fi
done
data=/usr/share/datasets/fashion-mnist
if [ -n "$example" ] && [ -d "$data" ]; then
  work=$(mktemp -d)
  run=("${MPIRUN[@]}" "$example" --model mlp --limit 2000 --data "$data")
  if timeout 300 "${run[@]}" --epochs 2 --out "$work/a" >"$work/log" 2>&1 &&
     timeout 300 "${run[@]}" --epochs 1 --out "$work/b" >>"$work/log" 2>&1 &&
     timeout 300 "${run[@]}" --epochs 2 --out "$work/b" --resume >>"$work/log" 2>&1 &&
     cmp -s "$work/a/best.safetensors" "$work/b/best.safetensors"; then
    echo "PASS ddp resume: the resumed 2-rank run wrote the same best model"
  else
    echo "ddp resume check failed:"; tail -20 "$work/log"; status=1
  fi
  rm -rf "$work"
fi
exit $status
