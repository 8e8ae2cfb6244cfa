#!/usr/bin/env bash
# The nodes' network: a bridge on the host and one network namespace per node, each joined to the
# bridge by a veth pair. `netns.sh up` creates what is missing and heals cut or throttled links;
# `netns.sh down` deletes the namespaces and the bridge (stop the slurmd first: down.sh --purge).
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
# shellcheck source=infra/local/common.sh
source "$repo/infra/local/common.sh"

die() { printf 'netns.sh: error: %s\n' "$*" >&2; exit 1; }

ensure_bridge() {
  if ! ip link show "$BRIDGE" >/dev/null 2>&1; then
    ip link add "$BRIDGE" type bridge
  fi
  # Daemons keep their sockets on the old addresses: a new subnet needs a clean start.
  local have
  have=$(ip -4 -o addr show dev "$BRIDGE" | awk '{print $4}' | grep -vx "$BRIDGE_ADDR/24" || true)
  [[ -z $have ]] || die "$BRIDGE has $have, not $BRIDGE_ADDR/24 (FFJOBS_SUBNET changed?); run down.sh --purge first"
  ip addr replace "$BRIDGE_ADDR/24" dev "$BRIDGE"
  ip link set "$BRIDGE" up
}

ensure_node() {  # ensure_node NODE: namespace, veth pair, addresses, links up, no throttle
  local node=$1 ns veth
  ns=$(netns_of "$node")
  veth=$(host_veth_of "$node")
  [[ -e /var/run/netns/$ns ]] || ip netns add "$ns"
  # A host end whose peer is not in the namespace (the namespace was deleted while a process kept
  # the old one alive) is stale: replace the pair.
  if ! ip -n "$ns" link show "$NODE_IFNAME" >/dev/null 2>&1; then
    ip link del "$veth" 2>/dev/null || true
    ip link add "$veth" type veth peer name "$NODE_IFNAME" netns "$ns"
  fi
  ip link set "$veth" master "$BRIDGE"
  ip link set "$veth" up
  ip -n "$ns" link set lo up
  ip -n "$ns" addr replace "$(node_addr "$node")/24" dev "$NODE_IFNAME"
  ip -n "$ns" link set "$NODE_IFNAME" up
  # A drill that died before restoring leaves a throttle behind; the stack is healed on up.
  if tc qdisc show dev "$veth" | grep -q '^qdisc tbf '; then tc qdisc del dev "$veth" root; fi
  if tc -n "$ns" qdisc show dev "$NODE_IFNAME" | grep -q '^qdisc tbf '; then
    tc -n "$ns" qdisc del dev "$NODE_IFNAME" root
  fi
}

net_up() {
  ensure_bridge
  local node
  for node in "${NODES[@]}"; do ensure_node "$node"; done
}

net_down() {
  local node
  for node in "${NODES[@]}"; do
    if is_running "slurmd-$node"; then
      die "slurmd-$node still runs in $(netns_of "$node"); stop the stack first (down.sh --purge)"
    fi
  done
  for node in "${NODES[@]}"; do
    if [[ -e /var/run/netns/$(netns_of "$node") ]]; then ip netns del "$(netns_of "$node")"; fi
    ip link del "$(host_veth_of "$node")" 2>/dev/null || true  # gone with the namespace, usually
  done
  if ip link show "$BRIDGE" >/dev/null 2>&1; then ip link del "$BRIDGE"; fi
}

[[ $(id -u) -eq 0 ]] || die "network namespaces need root"
command -v ip >/dev/null || die "ip not found; install iproute2 (up.sh does)"
case ${1:-} in
  up) net_up ;;
  down) net_down ;;
  *) die "usage: netns.sh up|down" ;;
esac
