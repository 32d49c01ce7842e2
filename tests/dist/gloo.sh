#!/usr/bin/env bash
# tests/dist/gloo.sh TESTS FAULT_CHILD BRISK_RUN ELASTIC_CHILD: dist/ without mpirun, as ctest runs it
# (dist_gloo): the 2-rank suite (tests/dist/test_*.cpp) over Gloo started by brisk-run, once as
# one node of 2 ranks and once as 2 "nodes" of 1 rank (two launchers, --nnodes 2), and its
# `groups:*` cases on 4 ranks (sub-groups, data x pipeline parallelism); the fault
# cases over Gloo (a rank killed by SIGKILL, a collective mismatch, a pipeline stage killed),
# where brisk-run must exit non-zero and name the dead rank; init_from_env's errors; and the
# launcher itself with small shell programs: the environment it sets, a failing rank stopping
# the others, a signal passed on to every rank, ranks ending with a launcher killed by SIGKILL,
# --max-restarts (on one node and across two agents), bad arguments, an agent of --nnodes 2 left alone (its clear error after
# --rdzv-timeout-s); and an elastic
# restart (tests/dist/elastic_child.cpp): a rank killed while writing a checkpoint, the job
# restarted by `brisk-run --max-restarts 1` from the last complete checkpoint, ending with a
# model byte-identical to an uninterrupted run's (the timeline is printed); and with
# --min-ranks 1 the job continuing on the one rank left, within 1e-12 of the 2-rank run.
set -uo pipefail
tests=$1 child=$2 run=$3 elastic=$4
export OMP_NUM_THREADS=1
unset OMPI_COMM_WORLD_RANK OMPI_COMM_WORLD_SIZE MASTER_ADDR MASTER_PORT RANK WORLD_SIZE LOCAL_RANK
# A port nobody listens on now, with the next one free too (brisk-run's agents serve their store
# on --master-port + 1; the machine is shared with other test runs, whose sockets take ports
# from the same range).
free_port() {
  python3 -c '
import socket
while True:
    s = socket.socket(); s.bind(("", 0)); p = s.getsockname()[1]
    t = socket.socket()
    try:
        t.bind(("", p + 1)); break
    except (OSError, OverflowError):
        pass
    finally:
        t.close(); s.close()
print(p)'
}
status=0
fail() { echo "FAIL $1"; shift; [ $# -gt 0 ] && printf '%s\n' "$@" | tail -20; status=1; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# ---- the suite over Gloo: one node of 2, then 2 nodes of 1 (two launchers, one rendezvous)
if BRISK_TEST_BACKEND=gloo timeout 300 "$run" --nproc-per-node 2 --master-port $(free_port) "$tests" >"$work/suite" 2>&1 &&
   grep -q "dist tests on 2 ranks (gloo): passed" "$work/suite"; then
  echo "PASS gloo suite: $(grep -m1 'test cases:' "$work/suite" | tr -s ' ')"
else
  fail "gloo suite (brisk-run --nproc-per-node 2)" "$(cat "$work/suite")"
fi
export BRISK_TEST_BACKEND=gloo
if timeout 300 "$run" --nproc-per-node 4 --master-port $(free_port) "$tests" -tc='groups:*,zero: ZeRO-2*,zero: a sharded*,fsdp:*' >"$work/groups" 2>&1 &&
   grep -q "dist tests on 4 ranks (gloo): passed" "$work/groups"; then
  echo "PASS gloo on 4 ranks: sub-groups, the mesh, data x pipeline parallelism equal to one process, ZeRO-2, FSDP"
else
  fail "gloo groups on 4 ranks" "$(cat "$work/groups")"
fi
shared_port=$(free_port)  # the two launchers' one rendezvous
timeout 300 "$run" --nnodes 2 --node-rank 1 --nproc-per-node 1 --master-port $shared_port "$tests" \
  -tc='dist:*,ddp:*' >"$work/node1" 2>&1 &
node1=$!
timeout 300 "$run" --nnodes 2 --node-rank 0 --nproc-per-node 1 --master-port $shared_port "$tests" \
  -tc='dist:*,ddp:*' >"$work/node0" 2>&1
rc0=$?
wait $node1
rc1=$?
if [ $rc0 -eq 0 ] && [ $rc1 -eq 0 ] && grep -q "dist tests on 2 ranks (gloo): passed" "$work/node0"; then
  echo "PASS gloo across 2 launchers (--nnodes 2): collectives and DDP equal to one process"
else
  fail "gloo across 2 launchers: status $rc0 / $rc1" "$(cat "$work/node0" "$work/node1")"
fi

# ---- fault cases over Gloo: brisk-run exits non-zero when a rank is killed
for what in kill mismatch pipeline_kill; do
  out=$(timeout 60 "$run" --nproc-per-node 2 --master-port $(free_port) "$child" "$what" 2>&1)
  rc=$?
  if [[ "$what" != mismatch ]] &&
     { [ $rc -eq 0 ] || [ $rc -eq 124 ] || ! grep -q "brisk-run: rank 1 (pid [0-9]*) was killed by signal 9" <<<"$out"; }; then
    fail "gloo fault '$what': brisk-run's status $rc (want non-zero, naming rank 1)" "$out"
  elif grep -q "^PASS $what" <<<"$out" && ! grep -q "^FAIL" <<<"$out"; then
    grep "^PASS" <<<"$out" | sed 's/^PASS /PASS gloo /' | cut -c1-200
  else
    fail "gloo fault '$what'" "$out"
  fi
done
unset BRISK_TEST_BACKEND
if out=$(timeout 60 "$child" env_errors 2>&1) && grep -q "^PASS env_errors" <<<"$out"; then
  echo "PASS init_from_env errors (missing and bad variables, a rank that never comes)"
else
  fail "init_from_env errors" "$out"
fi

# ---- the launcher with shell programs
env_port=$(free_port)
out=$(timeout 30 "$run" --nproc-per-node 3 --master-addr 127.0.0.1 --master-port $env_port -- \
  sh -c 'echo "$RANK $LOCAL_RANK $WORLD_SIZE $LOCAL_WORLD_SIZE $MASTER_ADDR $MASTER_PORT $BRISK_RESTART_COUNT"' | sort)
want=$(for r in 0 1 2; do echo "$r $r 3 3 127.0.0.1 $env_port 0"; done)
[ "$out" == "$want" ] && echo "PASS brisk-run sets torchrun's environment" || fail "brisk-run environment" "$out"
# Several nodes: each brisk-run is an agent, and node 1's starts its ranks once node 0's is there.
node_port=$(free_port)
timeout 30 "$run" --nnodes 2 --node-rank 0 --nproc-per-node 2 --master-port $node_port true >/dev/null 2>&1 &
out=$(timeout 30 "$run" --nnodes 2 --node-rank 1 --nproc-per-node 2 --master-port $node_port \
  sh -c 'echo "$RANK $LOCAL_RANK $WORLD_SIZE $GROUP_RANK"' | sort)
wait $!
[ "$out" == $'2 0 4 1\n3 1 4 1' ] && echo "PASS brisk-run --node-rank 1 numbers its ranks 2 and 3" ||
  fail "brisk-run --node-rank" "$out"
# An agent alone: node 0's rendezvous names the node that never joined; node 1's finds no store.
out=$(timeout 30 "$run" --nnodes 2 --node-rank 0 --master-port "$(free_port)" --rdzv-timeout-s 1 true 2>&1)
rc=$?
[ $rc -eq 1 ] && grep -q "node 0: the rendezvous of generation 0 at .* timed out after 1 s: node(s) 1 of 2 never joined" <<<"$out" &&
  echo "PASS brisk-run node 0 alone: the rendezvous names node 1 after --rdzv-timeout-s" || fail "node 0 alone: $rc" "$out"
out=$(timeout 30 "$run" --nnodes 2 --node-rank 1 --master-port "$(free_port)" --rdzv-timeout-s 1 true 2>&1)
rc=$?
[ $rc -eq 1 ] && grep -q "node 1: cannot reach the agents' store at .* within 1 s (is node 0's brisk-run running" <<<"$out" &&
  echo "PASS brisk-run node 1 alone: no agents' store after --rdzv-timeout-s" || fail "node 1 alone: $rc" "$out"

# A rank that fails stops the others (which would sleep 60 s) with its status.
start=$SECONDS
out=$(timeout 30 "$run" --nproc-per-node 3 --grace-s 1 sh -c '[ "$RANK" = 1 ] && exit 7; exec sleep 60' 2>&1)
rc=$?
if [ $rc -eq 7 ] && grep -q "rank 1 (pid [0-9]*) exited with status 7" <<<"$out" && [ $((SECONDS - start)) -lt 20 ]; then
  echo "PASS brisk-run: a rank exiting 7 stops the others, status 7"
else
  fail "brisk-run failing rank: status $rc" "$out"
fi
# SIGTERM to the launcher reaches every rank (each writes a file from its trap).
timeout 30 "$run" --nproc-per-node 2 sh -c "trap 'touch $work/term.\$RANK; exit 0' TERM; sleep 60 & wait" \
  >/dev/null 2>&1 &
launcher=$!
for _ in $(seq 50); do [ "$(pgrep -c -P $launcher)" -ge 1 ] 2>/dev/null && break; sleep 0.1; done
sleep 0.5
kill -TERM $launcher 2>/dev/null
wait $launcher
rc=$?
if [ $rc -eq 143 ] && [ -e "$work/term.0" ] && [ -e "$work/term.1" ]; then
  echo "PASS brisk-run passes SIGTERM to every rank and exits 143"
else
  fail "brisk-run signal forwarding: status $rc, $(ls "$work")"
fi
# A launcher killed by SIGKILL (it cannot pass anything on) takes its ranks with it: each was
# started with a parent-death signal. The ranks write their pids, then sleep.
"$run" --nproc-per-node 2 sh -c "echo \$\$ > $work/orphan.\$RANK; exec sleep 60" >/dev/null 2>&1 &
launcher=$!
for _ in $(seq 50); do [ -s "$work/orphan.0" ] && [ -s "$work/orphan.1" ] && break; sleep 0.1; done
kill -KILL $launcher 2>/dev/null
wait $launcher 2>/dev/null
sleep 1
left=""
for r in 0 1; do  # alive: exists and is not a zombie (an orphan waits for whoever adopted it to reap it)
  p=$(cat "$work/orphan.$r" 2>/dev/null)
  [ -n "$p" ] && [ -e "/proc/$p" ] && [ "$(awk '{print $3}' "/proc/$p/stat" 2>/dev/null)" != Z ] && left="$left $p"
done
if [ -s "$work/orphan.0" ] && [ -z "$left" ]; then
  echo "PASS brisk-run killed by SIGKILL: its ranks end too (parent-death signal)"
else
  fail "brisk-run killed by SIGKILL left ranks running:$left"
  for p in $left; do kill -KILL "$p" 2>/dev/null; done
fi
# --max-restarts: rank 1 fails in the first attempt only.
prog='[ "$BRISK_RESTART_COUNT" = 0 ] && [ "$RANK" = 1 ] && exit 9; echo "attempt $BRISK_RESTART_COUNT rank $RANK"'
out=$(timeout 30 "$run" --nproc-per-node 2 --grace-s 1 --max-restarts 1 sh -c "$prog" 2>&1)
rc=$?
if [ $rc -eq 0 ] && grep -q "restarting all 2 ranks (restart 1 of 1) after rank 1 failed" <<<"$out" &&
   [ "$(grep -c '^attempt 1 rank' <<<"$out")" -eq 2 ]; then
  echo "PASS brisk-run --max-restarts 1 restarts every rank once"
else
  fail "brisk-run --max-restarts: status $rc" "$out"
fi
# The same across two agents (--nnodes 2, one rank each): rank 1 fails on node 1 while rank 0
# would sleep 60 s on node 0, whose agent must stop it; both agents restart their rank.
prog2='[ "$BRISK_RESTART_COUNT" = 0 ] && { [ "$RANK" = 1 ] && exit 9; exec sleep 60; }; echo "attempt $BRISK_RESTART_COUNT rank $RANK"'
agents_port=$(free_port)
timeout 30 "$run" --nnodes 2 --node-rank 0 --master-port $agents_port --grace-s 1 --max-restarts 1 sh -c "$prog2" \
  >"$work/agent0" 2>&1 &
out=$(timeout 30 "$run" --nnodes 2 --node-rank 1 --master-port $agents_port --grace-s 1 --max-restarts 1 sh -c "$prog2" 2>&1)
rc=$?
wait $!
rc0=$?
if [ $rc -eq 0 ] && [ $rc0 -eq 0 ] && grep -q "node 0: a rank on another node failed; stopping the 1 ranks here" "$work/agent0" &&
   grep -q "^attempt 1 rank 0" "$work/agent0" && grep -q "^attempt 1 rank 1" <<<"$out" &&
   grep -q "node 1: generation 1: all 2 nodes joined; restarting the 1 ranks here (restart 1 of 1)" <<<"$out"; then
  echo "PASS brisk-run agents (--nnodes 2 --max-restarts 1): a failure on node 1 stops node 0's rank, both restart"
else
  fail "brisk-run agents --max-restarts: statuses $rc0 / $rc" "$(cat "$work/agent0")" "$out"
fi
out=$(timeout 30 "$run" --nproc-per-node 2 --grace-s 1 sh -c "$prog" 2>&1)
[ $? -eq 9 ] && echo "PASS brisk-run without restarts exits with the rank's status 9" || fail "no restarts" "$out"
# Bad arguments and a program that does not exist.
for bad in "--nproc-per-node 0 true|--nproc-per-node '0' is not a number in [1, 4096]" \
           "--nproc-per-node 2|no program to run" \
           "--nnodes 2 --node-rank 2 true|--node-rank 2 is not below --nnodes 2" \
           "--nproc-per-node 2 --min-ranks 3 true|--min-ranks 3 is above --nproc-per-node 2" \
           "--nnodes 2 --nproc-per-node 2 --min-ranks 1 true|--min-ranks needs --nnodes 1" \
           "--frobnicate true|unknown option --frobnicate"; do
  args=${bad%%|*} want=${bad#*|}
  # shellcheck disable=SC2086
  out=$("$run" $args 2>&1)
  rc=$?
  if [ $rc -eq 2 ] && grep -qF -- "$want" <<<"$out"; then echo "PASS brisk-run $args: $want"; else fail "brisk-run $args: $rc" "$out"; fi
done
out=$(timeout 30 "$run" --nproc-per-node 2 /nonexistent/program 2>&1)
rc=$?
[ $rc -eq 127 ] && grep -q "cannot start '/nonexistent/program'" <<<"$out" &&
  echo "PASS brisk-run: a program that cannot start is status 127, named" || fail "missing program: $rc" "$out"

# ---- elastic restart: rank 1 killed while writing the checkpoint of step 8 (of 20). The
# program links brisk::dist_core alone: no MPI library in it (it runs without MPI installed).
if ldd "$elastic" | grep -qi "libmpi"; then
  fail "elastic_child (brisk::dist_core) depends on MPI" "$(ldd "$elastic")"
else
  echo "PASS a program on brisk::dist_core has no MPI among its libraries (ldd)"
fi
# ---- elastic restart: rank 1 killed while writing the checkpoint of step 8 (of 20)
timeout 120 "$run" --nproc-per-node 2 --master-port $(free_port) "$elastic" "$work/straight" 20 >"$work/e1" 2>&1
rc1=$?
timeout 120 "$run" --nproc-per-node 2 --master-port $(free_port) --max-restarts 1 "$elastic" "$work/killed" 20 8 \
  >"$work/e2" 2>&1
rc2=$?
e2=$(cat "$work/e2")
if [ $rc1 -eq 0 ] && [ $rc2 -eq 0 ] && grep -q "rank 1 (pid [0-9]*) was killed by signal 9" <<<"$e2" &&
   grep -q "restarting all 2 ranks (restart 1 of 1)" <<<"$e2" &&
   [ "$(grep -c "attempt 1: resumed from the checkpoint of step 6" <<<"$e2")" -eq 2 ] &&
   cmp -s "$work/straight/final.safetensors" "$work/killed/final.safetensors"; then
  t() { grep -m1 "$1" <<<"$e2" | sed 's/^t=\([0-9]*\) .*/\1/'; }
  k=$(t "killed (SIGKILL)") err=$(t "rank 0 attempt 0: error") back=$(t "attempt 1: resumed")
  echo "PASS elastic restart: killed at step 8's checkpoint, rank 0's error +$((err - k)) ms, restarted +$((back - k)) ms, resumed from step 6, final model byte-identical to an uninterrupted run"
else
  fail "elastic restart: statuses $rc1 / $rc2" "$(cat "$work/e1")" "$e2"
fi
# ---- the same kill with --min-ranks 1: the job continues on the one rank left, its batches
# re-split, and ends within 1e-12 of the uninterrupted 2-rank run (not bit for bit: the sums
# are no longer the same sums)
out=$(timeout 120 "$run" --nproc-per-node 2 --master-port $(free_port) --max-restarts 1 --min-ranks 1 "$elastic" \
  "$work/shrunk" 20 8 "$work/straight/final.safetensors" 2>&1)
rc=$?
diff=$(sed -n 's/.*max difference to the reference: \([0-9.e+-]*\).*/\1/p' <<<"$out")
if [ $rc -eq 0 ] && grep -q "restarting all 1 ranks (restart 1 of 1) after rank 1 failed" <<<"$out" &&
   grep -q "rank 0 attempt 1: resumed from the checkpoint of step 6 (1 ranks)" <<<"$out" &&
   [ -n "$diff" ] && python3 -c "import sys; sys.exit(0 if float('$diff') < 1e-12 else 1)"; then
  echo "PASS elastic restart at fewer ranks (--min-ranks 1): resumed on 1 rank from step 6, final weights within $diff of the 2-rank run"
else
  fail "elastic restart at fewer ranks: status $rc" "$out"
fi
exit $status
