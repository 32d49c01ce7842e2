#!/usr/bin/env bash
# tests/dist/netns.sh TESTS BRISK_RUN [HOSTS [FAULT_CHILD]]: dist/ across several "hosts" on one machine, as
# ctest runs it (dist_netns): HOSTS (2, up to 4) network namespaces joined by a bridge, each
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
# group's timeout (3 s) and both launchers exit non-zero. A trap removes the namespaces, the bridge
# and any process left in them, also when a case fails or the script is interrupted. Where
# namespaces cannot be made (not root, no `ip`, a container without the capability) it prints
# SKIP and why, and exits 77 (ctest reports the test as skipped).
set -uo pipefail
tests=$1 run=$2 hosts=${3:-2} child=${4:-}
latency=${NETNS_LATENCY:-0.5ms} rate=${NETNS_RATE:-1gbit}
[ "$hosts" -ge 2 ] && [ "$hosts" -le 4 ] || { echo "netns.sh: HOSTS must be 2-4, got $hosts" >&2; exit 2; }
skip() { echo "SKIP dist_netns: $*"; exit 77; }  # ctest: SKIP_RETURN_CODE 77
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

bytes() { # total bytes through the host-side veths
  local s=0 v
  for v in "${veth[@]}"; do s=$((s + $(cat /sys/class/net/$v/statistics/tx_bytes) + $(cat /sys/class/net/$v/statistics/rx_bytes))); done
  echo $s
}
if [ "$hosts" -eq 2 ]; then cases='dist: the world*,dist: allreduce*,dist: broadcast*,ddp: 2 ranks*'; else cases='ddp: 2 ranks*'; fi  # the collective cases' values are exact for 2 ranks only
export OMP_NUM_THREADS=1
status=0

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
      --nproc-per-node 1 --master-addr "$subnet.1" --master-port $((port + 1)) "$child" link_cut >"$work/cut$i" 2>&1 &
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
