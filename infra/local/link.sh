#!/usr/bin/env bash
# Fault drills on one node's link to the bridge:
#   link.sh cut NODE | restore NODE          take the link down / up (both directions); restore
#                                            also waits until SLURM hears from the node again
#   link.sh throttle RATE NODE | unthrottle NODE   tbf at RATE (e.g. 8mbit) both ways / remove it
#   link.sh show NODE                        link state and queueing discipline
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
# shellcheck source=infra/local/common.sh
source "$repo/infra/local/common.sh"

die() { printf 'link.sh: error: %s\n' "$*" >&2; exit 2; }
usage="usage: link.sh cut|restore|unthrottle|show NODE, or link.sh throttle RATE NODE"

check_node() {
  local node
  for node in "${NODES[@]}"; do [[ $1 == "$node" ]] && return; done
  die "unknown node '$1' (nodes: ${NODES[*]})"
}

# Traffic to the node leaves the bridge through the host end; traffic from it leaves through the
# node's end: shaping both makes the throttle symmetric.
throttle() {  # throttle RATE NODE
  local rate=$1 node=$2 ns
  [[ $rate =~ ^[0-9]+[kmg]?bit$ ]] || die "rate '$rate': want e.g. 8mbit, 500kbit"
  ns=$(netns_of "$node")
  tc qdisc replace dev "$(host_veth_of "$node")" root tbf rate "$rate" burst 32kbit latency 400ms
  tc -n "$ns" qdisc replace dev "$NODE_IFNAME" root tbf rate "$rate" burst 32kbit latency 400ms
}

unthrottle() {  # unthrottle NODE: idempotent
  local node=$1 ns veth
  ns=$(netns_of "$node")
  veth=$(host_veth_of "$node")
  if tc qdisc show dev "$veth" | grep -q '^qdisc tbf '; then tc qdisc del dev "$veth" root; fi
  if tc -n "$ns" qdisc show dev "$NODE_IFNAME" | grep -q '^qdisc tbf '; then
    tc -n "$ns" qdisc del dev "$NODE_IFNAME" root
  fi
}

# A node SLURM lost touch with while its link was down is marked not responding ("*"), and DOWN
# once SlurmdTimeout has passed; SLURM asks a DOWN node to register again only every few
# minutes, and pings a not-responding one at its own pace. With the link back, the node's
# slurmd is told to register now (SIGHUP: it reloads its configuration and registers, as after
# an operator's restart; its jobs run on), and ReturnToService=2 returns a node that was DOWN
# for not responding to service. Returns once SLURM has heard from the node (RESUME if it was
# marked DOWN meanwhile); a node down for any other reason is left as it is.
RETURN_WAIT_S=30
return_to_service() {  # return_to_service NODE
  local state deadline=$((SECONDS + RETURN_WAIT_S))
  if is_running "slurmd-$1"; then kill -HUP "$(<"$RUN_DIR/slurmd-$1.pid")" 2>/dev/null || true; fi
  while ((SECONDS < deadline)); do
    state=$(SLURM_CONF=$SLURM_CONF sinfo -h -n "$1" -o '%t|%E' 2>/dev/null) || return 0
    case $state in
      down*'|Not responding')
        SLURM_CONF=$SLURM_CONF scontrol update NodeName="$1" State=RESUME >/dev/null 2>&1 || true
        ;;
      down* | drain* | drng* | fail*) return 0 ;;
      *'*|'*) ;;
      *) return 0 ;;
    esac
    sleep 1
  done
  echo "link.sh: SLURM has not heard from $1 ${RETURN_WAIT_S} s after its link came back" >&2
}

[[ $(id -u) -eq 0 ]] || die "changing links needs root"
action=${1:-}
case $action in
  throttle) [[ $# -eq 3 ]] || die "$usage"; node=$3 ;;
  cut | restore | unthrottle | show) [[ $# -eq 2 ]] || die "$usage"; node=$2 ;;
  *) die "$usage" ;;
esac
check_node "$node"
ip link show "$(host_veth_of "$node")" >/dev/null 2>&1 \
  || die "$node has no link $(host_veth_of "$node"); start the stack (up.sh)"
case $action in
  cut) ip link set "$(host_veth_of "$node")" down ;;
  restore) ip link set "$(host_veth_of "$node")" up; return_to_service "$node" ;;
  throttle) throttle "$2" "$node" ;;
  unthrottle) unthrottle "$node" ;;
  show)
    ip -br link show "$(host_veth_of "$node")"
    tc qdisc show dev "$(host_veth_of "$node")"
    tc -n "$(netns_of "$node")" qdisc show dev "$NODE_IFNAME"
    ;;
esac
