# Simulated hosts for multi-host tests, sourced by a test script after tests/cli/common.sh.
#
# hosts_up N makes N hosts h1..hN: each a network namespace with one veth port on a bridge of
# their own (a switch namespace), an address 10.213.0.i/24, its own hostname (a UTS namespace per
# command) and its own disk: $WORK/hosts/disk$i, seen by that host's processes at $HOST_DISK and
# by no other. $HOST_SHARED is one directory every host sees (a shared filesystem).
# hosts_mpirun runs mpirun on h1 over a hostfile of the N hosts, starting the remote daemons
# through tests/hosts/rsh (Open MPI's remote-start agent) and moving every byte between hosts over
# TCP on the bridge. hosts_down (run on exit, pass or fail) kills every process left in the
# namespaces and deletes them. Where namespaces cannot be made, hosts_up skips the test (77).
#
# Traffic stays on the addresses assigned here: nothing is routed out of the bridge.
HOSTS_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
HOSTS_TAG=k3h$$            # namespace names: ${HOSTS_TAG}sw, ${HOSTS_TAG}h1, ...
HOSTS_SUBNET=10.213.0.0/24
HOST_DISK=$WORK/disk       # each host's own disk, at the same path on every host
HOST_SHARED=$WORK/shared   # a directory every host sees
HOSTS_N=0

# The namespaces of the run whose tag is TAG (default: this one's).
hosts_namespaces() {
  ip netns list 2>/dev/null | awk '{print $1}' | grep -E "^${1:-$HOSTS_TAG}(sw|h[0-9]+)$" || true
}

hosts_remove() {  # NAMESPACE...: their processes killed, the namespaces deleted
  local ns
  for ns in "$@"; do
    ip netns pids "$ns" 2>/dev/null | xargs -r kill -9 2>/dev/null || true
    ip netns del "$ns" 2>/dev/null || true
    rm -rf "/etc/netns/$ns"
  done
}

hosts_down() { hosts_remove $(hosts_namespaces); }

# What a run killed before its trap ran (a test timeout) left: namespaces of tags whose shell is gone.
hosts_remove_stale() {
  local ns pid
  for ns in $(ip netns list 2>/dev/null | awk '{print $1}' | grep -E '^k3h[0-9]+(sw|h[0-9]+)$' || true); do
    pid=${ns#k3h}
    pid=${pid%%[sh]*}
    kill -0 "$pid" 2>/dev/null || hosts_remove "$ns"
  done
}

hosts_up() {
  local n=$1 i
  HOSTS_N=$n
  trap hosts_down EXIT
  hosts_remove_stale
  mkdir -p "$HOST_DISK" "$HOST_SHARED" "$WORK/hosts/probe"
  # Everything a host needs, tried once: a namespace, a bridge and a veth port in it, and a
  # command there under its own hostname with a directory mounted over another.
  if ! { ip netns add "${HOSTS_TAG}sw" && ip -n "${HOSTS_TAG}sw" link add br0 type bridge &&
         ip -n "${HOSTS_TAG}sw" link set br0 up &&
         ip -n "${HOSTS_TAG}sw" link add probe0 type veth peer name probe1 &&
         ip -n "${HOSTS_TAG}sw" link del probe0 &&
         ip netns exec "${HOSTS_TAG}sw" unshare --uts /bin/sh -c \
           "hostname probe && mount --bind '$WORK/hosts/probe' '$HOST_DISK'"; } 2>/dev/null; then
    echo "skipped: cannot simulate hosts here (network namespaces, veth, a bridge, unshare and mount, as root)"
    exit 77
  fi
  for i in $(seq 1 "$n"); do
    ip netns add "${HOSTS_TAG}h$i"
    ip link add eth0 netns "${HOSTS_TAG}h$i" type veth peer name "p$i" netns "${HOSTS_TAG}sw"
    ip -n "${HOSTS_TAG}sw" link set "p$i" master br0 up
    ip -n "${HOSTS_TAG}h$i" addr add "10.213.0.$i/24" dev eth0
    ip -n "${HOSTS_TAG}h$i" link set eth0 up
    ip -n "${HOSTS_TAG}h$i" link set lo up
    mkdir -p "/etc/netns/${HOSTS_TAG}h$i" "$WORK/hosts/disk$i"
    # ip netns exec mounts /etc/netns/NS/hosts over /etc/hosts: the host names resolve there.
    { echo "127.0.0.1 localhost"; for j in $(seq 1 "$n"); do echo "10.213.0.$j h$j"; done; } \
      > "/etc/netns/${HOSTS_TAG}h$i/hosts"
  done
  printf 'h%s slots=8\n' $(seq 1 "$n") > "$WORK/hostfile"
}

# hosts_run I COMMAND...: COMMAND on host I, with its hostname and its disk.
hosts_run() {
  local i=$1; shift
  HOSTS_TAG=$HOSTS_TAG HOST_DISK=$HOST_DISK HOSTS_WORK=$WORK "$HOSTS_DIR/rsh" "h$i" "$(printf '%q ' "$@")"
}

# hosts_mpirun [mpirun options...] -- COMMAND...: mpirun on h1 across the hosts (all of them, or
# those the options name with --host), TCP between them. The daemons' keepalive makes a host that
# stops answering lost within 5 s (2 s idle, then 3 probes a second apart).
hosts_mpirun() {
  local opts=()
  while [ "$1" != "--" ]; do opts+=("$1"); shift; done
  shift
  [[ " ${opts[*]} " == *" --host "* ]] || opts+=(--hostfile "$WORK/hostfile")
  hosts_run 1 mpirun --allow-run-as-root --oversubscribe -q \
    --mca plm_rsh_agent "$HOSTS_DIR/rsh" --mca plm_rsh_no_tree_spawn 1 \
    --mca btl tcp,self --mca btl_tcp_if_include "$HOSTS_SUBNET" \
    --mca oob_tcp_if_include "$HOSTS_SUBNET" --mca oob_tcp_keepalive_time 2 \
    --mca oob_tcp_keepalive_intvl 1 --mca oob_tcp_keepalive_probes 3 \
    -x OMP_NUM_THREADS -x HOSTS_TAG -x HOST_DISK \
    "${opts[@]}" "$@"
}

# The namespaces of this run still there (none after hosts_down).
hosts_left() { hosts_namespaces; }
