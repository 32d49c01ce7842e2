#!/usr/bin/env bash
# tests/dist/netns.sh TESTS BRISK_RUN [HOSTS [FAULT_CHILD]]: dist/ across several "hosts" on one machine, as
# ctest runs it (dist_netns2, dist_netns4): HOSTS (2, up to 4) network namespaces joined by a bridge, each
# with its own address on a private /24 and no route anywhere else (nothing leaves them), one
# rank in each; the collectives and DDP cases of the suite (DDP equal to one process, F64 to
# 1e-12) run across them with brisk-run over Gloo and with mpirun (its rsh agent: a script
# that enters the namespace; each "host" also has its own UTS namespace and host name, so Open
# MPI sees separate nodes; `--mca btl tcp,self` selects the TCP transport and excludes shared
# memory, and the run is checked to have used it). The host side of each veth gets `tc netem`
# latency and a bandwidth limit; where the kernel has no netem (this VM's: "qdisc kind is
# unknown") the bandwidth limit is a tbf and no latency is added, which the script says
# (NETNS_LATENCY, NETNS_RATE set them; NETNS_BENCH=bench_dist also prints its allreduce table
# across the hosts). Every
# run checks that its bytes went through the veths. Given FAULT_CHILD (2 hosts), a link is cut
# under a running brisk-run job (host 1's veth taken down): both ranks must fail with the
# group's timeout (3 s) and both launchers exit non-zero (host 1's, cut off from the agents'
# store, within --rdzv-timeout-s 5).
#
# tests/dist/netns.sh --elastic BRISK_RUN ELASTIC_CHILD FAULT_CHILD (ctest dist_netns_elastic): 2 hosts, one
# brisk-run agent in each (Note [Agents across hosts] in dist/run/brisk_run.cpp), one rank each, the
# elastic child of tests/dist/elastic_child.cpp (its checkpoints in a folder both "hosts" see, as
# a shared file system would be): rank 1, on host 1, is killed by SIGKILL while writing step 8's
# checkpoint; with --max-restarts 1 both agents restart their ranks from step 6 and the final
# model is byte-identical to an uninterrupted run's (the timeline is printed); with
# --max-restarts 0 both agents exit non-zero, saying no restarts are left; and with host 1's link
# cut under a running job (--max-restarts 1) host 0's rank fails by the group's timeout and the
# next rendezvous ends with an error naming node 1, host 1's agent with the store lost: neither
# hangs.
#
# A trap removes the namespaces, the bridge and any process left in them, also when a case
# fails or the script is interrupted. Where namespaces cannot be made (not root, no `ip`, a
# container without the capability) it prints SKIP and why, and exits 77 (ctest reports the
# test as skipped).
set -uo pipefail
mode=suite elastic=""
if [ "${1:-}" == --elastic ]; then
  mode=elastic tests="" run=$2 hosts=2 elastic=$3 child=$4
else
  tests=$1 run=$2 hosts=${3:-2} child=${4:-}
fi
latency=${NETNS_LATENCY:-0.5ms} rate=${NETNS_RATE:-1gbit}
[ "$hosts" -ge 2 ] && [ "$hosts" -le 4 ] || { echo "netns.sh: HOSTS must be 2-4, got $hosts" >&2; exit 2; }
skip() { echo "SKIP dist_netns ($mode): $*"; exit 77; }  # ctest: SKIP_RETURN_CODE 77
[ "$(id -u)" -eq 0 ] || skip "needs root to make network namespaces"
command -v ip >/dev/null && command -v tc >/dev/null || skip "needs iproute2 (ip, tc)"
command -v unshare >/dev/null || skip "needs unshare (util-linux)"

id=$(($$ % 100000))
subnet=10.251.$(($$ % 250))
bridge=bkbr$id
ns=() veth=()
for ((i = 0; i < hosts; i++)); do ns+=("bk${id}n$i"); veth+=("bk${id}v$i"); done
work=$(mktemp -d)
cleanup() {
  for n in "${ns[@]}"; do
    if ip netns list 2>/dev/null | grep -qw "$n"; then
      for p in $(ip netns pids "$n" 2>/dev/null); do kill -9 "$p" 2>/dev/null; done
      ip netns del "$n" 2>/dev/null
    fi
  done
  for v in "${veth[@]}"; do ip link del "$v" 2>/dev/null; done
  ip link del "$bridge" 2>/dev/null
  [ -n "${NETNS_KEEP_LOG:-}" ] && cp -r "$work" "$NETNS_KEEP_LOG"; rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

ip netns add "${ns[0]}" 2>"$work/err" || skip "ip netns add failed: $(cat "$work/err")"
ip link add "$bridge" type bridge 2>"$work/err" || skip "cannot make a bridge: $(cat "$work/err")"
ip link set "$bridge" up
for ((i = 0; i < hosts; i++)); do
  n=${ns[$i]} v=${veth[$i]}
  [ $i -gt 0 ] && ip netns add "$n"
  ip link add "$v" type veth peer name "${v}p" || skip "cannot make a veth pair"
  ip link set "${v}p" netns "$n"
  ip link set "$v" master "$bridge" up
  ip -n "$n" link set "${v}p" name eth0
  ip -n "$n" addr add "$subnet.$((i + 1))/24" dev eth0
  ip -n "$n" link set eth0 up
  ip -n "$n" link set lo up
done
# Latency and bandwidth on the host side of every veth (each packet crosses two: out of one
# namespace into the bridge, and into the other).
shaping="netem delay $latency rate $rate"
for v in "${veth[@]}"; do
  if ! tc qdisc add dev "$v" root netem delay "$latency" rate "$rate" 2>"$work/err"; then
    if tc qdisc add dev "$v" root tbf rate "$rate" burst 256kb latency 100ms 2>>"$work/err"; then
      shaping="tbf rate $rate (no netem in this kernel: $(head -1 "$work/err"); no latency added)"
    else
      shaping="none (neither netem nor tbf in this kernel: $(head -1 "$work/err"))"
    fi
  fi
done
# Reachable: a TCP connect from host 1 to a closed port of host 0 is refused (not timed out).
reach=$(ip netns exec "${ns[1]}" timeout 5 bash -c "exec 3<>/dev/tcp/$subnet.1/9" 2>&1)
grep -q "refused" <<<"$reach" ||
  { echo "FAIL dist_netns: ${ns[1]} cannot reach $subnet.1 through the bridge: $reach"; exit 1; }
echo "   $hosts namespaces on $subnet.0/24 through bridge $bridge; shaping: $shaping"

# ---- elastic restart across the 2 hosts: one brisk-run agent in each (--elastic)
# stamp: each line prefixed with t=<ms since the epoch>, unless it has one (the child's lines)
stamp() {
  local l
  while IFS= read -r l; do
    if [[ $l == t=* ]]; then echo "$l"; else echo "t=$((${EPOCHREALTIME/./} / 1000)) $l"; fi
  done
}
# agents NAME PORT ARGS...: brisk-run in both hosts (--nnodes 2, one rank each), waits for both;
# their stamped output in $work/NAME.0 and NAME.1, their statuses in $rc0 and $rc1.
agents() {
  local name=$1 p=$2 i pids=()
  shift 2
  for i in 0 1; do
    ip netns exec "${ns[$i]}" env BRISK_TEST_BACKEND=gloo timeout 50 "$run" --nnodes 2 --node-rank $i --nproc-per-node 1 --master-addr "$subnet.1" \
      --master-port "$p" --grace-s 1 "$@" 2>&1 | stamp >"$work/$name.$i" &
    pids+=($!)
  done
  rc0=0 rc1=0
  wait "${pids[0]}" || rc0=$?
  wait "${pids[1]}" || rc1=$?
}
# shellcheck disable=SC2086
at() { grep -hs -m1 -- "$2" $work/$1 | sed 's/^t=\([0-9]*\) .*/\1/' | sort -n | head -1; }  # a line's first stamp
elastic_cases() {
  local port=$((20000 + $$ % 20000))
  agents straight $port "$elastic" "$work/straight" 20
  local s0=$rc0 s1=$rc1
  agents killed $((port + 2)) --max-restarts 1 "$elastic" "$work/killed" 20 8
  if [ $s0 -eq 0 ] && [ $s1 -eq 0 ] && [ $rc0 -eq 0 ] && [ $rc1 -eq 0 ] &&
     grep -q "rank 1 (pid [0-9]*) was killed by signal 9" "$work/killed.1" &&
     grep -q "node 0: generation 1: all 2 nodes joined; restarting the 1 ranks here (restart 1 of 1)" "$work/killed.0" &&
     grep -q "node 1: generation 1: all 2 nodes joined; restarting the 1 ranks here (restart 1 of 1)" "$work/killed.1" &&
     grep -q "rank 0 attempt 1: resumed from the checkpoint of step 6 (2 ranks)" "$work/killed.0" &&
     grep -q "rank 1 attempt 1: resumed from the checkpoint of step 6 (2 ranks)" "$work/killed.1" &&
     cmp -s "$work/straight/final.safetensors" "$work/killed/final.safetensors"; then
    local k e r0 r1 b
    k=$(at "killed.[01]" "killed (SIGKILL)") e=$(at "killed.[01]" "rank 0 attempt 0: error") r0=$(at killed.0 "generation 1: all 2")
    r1=$(at killed.1 "generation 1: all 2") b=$(at "killed.[01]" "attempt 1: resumed")
    echo "PASS netns elastic restart across 2 hosts: rank 1 killed (SIGKILL, host 1) at step 8's checkpoint;" \
      "host 0's rank's error +$((e - k)) ms; agents restart +$((r0 - k)) / +$((r1 - k)) ms (host 0 / 1);" \
      "both ranks resumed from step 6 +$((b - k)) ms; final model byte-identical to an uninterrupted run"
  else
    echo "FAIL netns elastic restart: uninterrupted $s0 / $s1, killed $rc0 / $rc1"
    tail -n 12 "$work"/straight.* "$work"/killed.*; status=1
  fi
  # --max-restarts 0: both agents end with the job's status (rank 1's SIGKILL: 137) and say why
  agents norestart $((port + 4)) --max-restarts 0 "$elastic" "$work/norestart" 20 8
  local want="generation 0 failed (node 1: rank 1 was killed by signal 9 (Killed)"
  if [ $rc0 -eq 137 ] && [ $rc1 -eq 137 ] && grep -qF "node 0: $want" "$work/norestart.0" &&
     grep -qF "node 1: $want" "$work/norestart.1" && grep -q "no restarts left (--max-restarts 0)" "$work/norestart.0" &&
     grep -q "no restarts left (--max-restarts 0)" "$work/norestart.1" && ! grep -q "attempt 1" "$work"/norestart.*; then
    echo "PASS netns --max-restarts 0 across 2 hosts: both agents exit 137: $(grep -h -o 'node 1: generation 0 failed.*' "$work/norestart.1")"
  else
    echo "FAIL netns --max-restarts 0: agents exit $rc0 / $rc1"; tail -n 8 "$work"/norestart.*; status=1
  fi
  # host 1's link cut under the job (tests/dist/fault_child.cpp link_cut: allreduces with a 3 s
  # timeout): host 0's rank times out and its agent's next rendezvous (3 s) names node 1;
  # host 1's agent loses the store (its replies wait 3 s at most). Neither hangs.
  local cut_at=0
  (
    for _ in $(seq 100); do grep -qs READY "$work/cut.0" && grep -qs READY "$work/cut.1" && break; sleep 0.1; done
    sleep 0.3
    ip link set "${veth[1]}" down
    echo "t=$((${EPOCHREALTIME/./} / 1000)) link cut" >"$work/cut_at"
  ) &
  local cutter=$!
  agents cut $((port + 6)) --max-restarts 1 --rdzv-timeout-s 3 "$child" link_cut
  wait $cutter
  ip link set "${veth[1]}" up
  cut_at=$(sed 's/^t=\([0-9]*\) .*/\1/' "$work/cut_at" 2>/dev/null)
  if [ -n "$cut_at" ] && [ $rc0 -ne 0 ] && [ $rc0 -ne 124 ] && [ $rc1 -ne 0 ] && [ $rc1 -ne 124 ] &&
     grep -q "^t=[0-9]* PASS link_cut (rank 0)" "$work/cut.0" &&
     grep -q "node 0: the rendezvous of generation 1 at $subnet.1:$((port + 7)) timed out after 3 s: node(s) 1 of 2 never joined" "$work/cut.0" &&
     grep -q "node 1: lost the agents' store" "$work/cut.1"; then
    local e0 z0 z1
    e0=$(at cut.0 "PASS link_cut (rank 0)") z0=$(at cut.0 "rendezvous of generation 1") z1=$(at cut.1 "lost the agents' store at")
    echo "PASS netns link cut under agents (--max-restarts 1): host 0's rank fails +$((e0 - cut_at)) ms after the cut," \
      "its rendezvous names node 1 +$((z0 - cut_at)) ms, host 1's agent loses the store +$((z1 - cut_at)) ms; exit $rc0 / $rc1"
  else
    echo "FAIL netns link cut under agents: agents exit $rc0 / $rc1"; tail -n 8 "$work"/cut.*; status=1
  fi
}

bytes() { # total bytes through the host-side veths
  local s=0 v
  for v in "${veth[@]}"; do s=$((s + $(cat /sys/class/net/$v/statistics/tx_bytes) + $(cat /sys/class/net/$v/statistics/rx_bytes))); done
  echo $s
}
if [ "$hosts" -eq 2 ]; then cases='dist: the world*,dist: allreduce*,dist: broadcast*,ddp: 2 ranks*'; else cases='ddp: 2 ranks*'; fi  # the collective cases' values are exact for 2 ranks only
export OMP_NUM_THREADS=1
status=0
if [ "$mode" == elastic ]; then
  elastic_cases
  exit $status
fi

# ---- brisk-run over Gloo: one launcher per "host", rank 0's host serves the rendezvous
before=$(bytes)
port=$((20000 + $$ % 20000))
pids=()
for ((i = 0; i < hosts; i++)); do
  ip netns exec "${ns[$i]}" env BRISK_TEST_BACKEND=gloo timeout 120 "$run" --nnodes "$hosts" --node-rank $i \
    --nproc-per-node 1 --master-addr "$subnet.1" --master-port $port "$tests" -nc -tc="$cases" >"$work/gloo$i" 2>&1 &
  pids+=($!)
done
rcs=""
for p in "${pids[@]}"; do wait "$p"; rcs="$rcs $?"; done
moved=$(($(bytes) - before))
if [ "$rcs" == "$(printf ' 0%.0s' $(seq $hosts))" ] && grep -q "tests on $hosts ranks (gloo): passed" "$work/gloo0" &&
   [ $moved -gt 100000 ]; then
  echo "PASS netns brisk-run (gloo) across $hosts hosts: $(grep -m1 -o '[0-9]* passed' "$work/gloo0") cases; $((moved / 1024)) KiB through the veths"
else
  echo "FAIL netns brisk-run (gloo): statuses$rcs, $moved bytes through the veths"; tail -n 20 "$work"/gloo*; status=1
fi

# ---- mpirun: started in host 0; the other hosts' daemons through an rsh agent that enters their
# namespace (and a UTS namespace with that host's name)
if command -v mpirun >/dev/null; then
  agent=$work/agent.sh
  cat >"$agent" <<AGENT
#!/bin/sh
# Open MPI's rsh agent for the namespaces: \$1 is a host name bkhostI, the rest the command.
host=\$1; shift
i=\${host#bkhost}
exec ip netns exec "bk${id}n\$i" unshare --uts sh -c "hostname \$host; \$*"
AGENT
  chmod +x "$agent"
  hostlist=$(for ((i = 0; i < hosts; i++)); do printf 'bkhost%d:1,' $i; done)
  before=$(bytes)
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
  ip netns exec "${ns[0]}" unshare --uts sh -c "hostname bkhost0; exec timeout 120 mpirun -np $hosts --host ${hostlist%,} \
    --mca plm_rsh_agent $agent --mca btl tcp,self --mca btl_tcp_if_include $subnet.0/24 \
    --mca oob_tcp_if_include $subnet.0/24 --mca btl_base_verbose 30 --bind-to none \
    -x OMP_NUM_THREADS $tests -nc -tc='$cases'" >"$work/mpi" 2>&1
  rc=$?
  moved=$(($(bytes) - before))
  if [ $rc -eq 0 ] && grep -q "tests on $hosts ranks (mpi): passed" "$work/mpi" && [ $moved -gt 100000 ] &&
     grep -q "select: initializing btl component tcp" "$work/mpi" &&
     ! grep -qE "initializing btl component (vader|sm)" "$work/mpi"; then
    echo "PASS netns mpirun (btl tcp, no shared memory) across $hosts hosts: $(grep -m1 -o '[0-9]* passed' "$work/mpi") cases; $((moved / 1024)) KiB through the veths"
  else
    echo "FAIL netns mpirun: status $rc, $moved bytes through the veths"; grep -v "^\s*$" "$work/mpi" | tail -30; status=1
  fi
  # NETNS_BENCH=build/examples/bench/bench_dist: its allreduce table (MPI, Gloo, raw MPI) across
  # the hosts under the shaping above, or what NETNS_BENCH_ARGS asks of it (a measurement, not
  # a test; never set by ctest).
  if [ -n "${NETNS_BENCH:-}" ]; then
    ip netns exec "${ns[0]}" unshare --uts sh -c "hostname bkhost0; exec timeout 300 mpirun -np $hosts \
      --host ${hostlist%,} --mca plm_rsh_agent $agent --mca btl tcp,self --mca btl_tcp_if_include $subnet.0/24 \
      --mca oob_tcp_if_include $subnet.0/24 --bind-to none -x OMP_NUM_THREADS \
      $NETNS_BENCH ${NETNS_BENCH_ARGS:---allreduce-only --max-bytes 16777216}" 2>&1 | grep -v "^\[bkhost"
  fi
else
  echo "SKIP netns mpirun: no mpirun"
fi
# ---- a link cut under a running job: no connection is closed, so the group's timeout must
# end each rank's allreduce (tests/dist/fault_child.cpp, link_cut). Last: the link stays
# disturbed for a while after it comes back up (stale neighbour entries)
if [ -n "$child" ] && [ "$hosts" -eq 2 ]; then
  pids=()
  for ((i = 0; i < 2; i++)); do
    ip netns exec "${ns[$i]}" env BRISK_TEST_BACKEND=gloo timeout 60 "$run" --nnodes 2 --node-rank $i \
      --nproc-per-node 1 --master-addr "$subnet.1" --master-port $((port + 2)) --rdzv-timeout-s 5 "$child" link_cut >"$work/cut$i" 2>&1 &
    pids+=($!)
  done
  for _ in $(seq 100); do
    grep -qs READY "$work/cut0" && grep -qs READY "$work/cut1" && break
    sleep 0.1
  done
  sleep 0.3
  ip link set "${veth[1]}" down
  rc0=0 rc1=0
  wait "${pids[0]}" || rc0=$?
  wait "${pids[1]}" || rc1=$?
  ip link set "${veth[1]}" up
  if [ $rc0 -ne 0 ] && [ $rc0 -ne 124 ] && [ $rc1 -ne 0 ] && [ $rc1 -ne 124 ] &&
     grep -q "^PASS link_cut (rank 0)" "$work/cut0" && grep -q "^PASS link_cut (rank 1)" "$work/cut1"; then
    echo "PASS netns link cut: $(grep -h -o '^PASS link_cut (rank 0): error after [0-9.]* s' "$work/cut0"), launchers exit $rc0 / $rc1"
  else
    echo "FAIL netns link cut: launchers exit $rc0 / $rc1"; tail -n 8 "$work"/cut*; status=1
  fi
fi

exit $status
