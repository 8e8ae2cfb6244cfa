# Shared settings of up.sh and down.sh: paths and ports of the local stack (sourced, not run).
# Every value can be overridden from the environment.
# shellcheck disable=SC2034  # used by the scripts that source this file

STATE_DIR=${FFJOBS_STATE_DIR:-$repo/.state/local-stack}
VENV=${FFJOBS_VENV:-$repo/.venv}
MLFLOW_BIN=$VENV/bin/mlflow
MLFLOW_PORT=${FFJOBS_MLFLOW_PORT:-5050}
SLURMCTLD_PORT=${FFJOBS_SLURMCTLD_PORT:-6817}
SLURMDBD_PORT=${FFJOBS_SLURMDBD_PORT:-6819}
SLURMD_PORT_BASE=${FFJOBS_SLURMD_PORT_BASE:-6820}  # node<i> listens on base + i
DB_PORT=${FFJOBS_MARIADB_PORT:-3316}
CLUSTER_NAME=${FFJOBS_CLUSTER_NAME:-ffjobs}
DB_PASSWORD=ffjobs-local  # loopback-only database of a throw-away test cluster

# The nodes' network: one private /24 used only here. The host's end of the bridge is .1, node<i>
# is .1<i>, each in its own network namespace ffjobs-node<i> (see README.md).
SUBNET=${FFJOBS_SUBNET:-10.213.7.0/24}
BRIDGE=${FFJOBS_BRIDGE:-ffjobs-br0}
NODES=(node1 node2 node3)
NODE_IFNAME=ffjobs0  # the node's end of its veth pair, inside its namespace (same name on every node)

LOG_DIR=$STATE_DIR/log
RUN_DIR=$STATE_DIR/run
ETC_DIR=$STATE_DIR/etc
DB_DIR=$STATE_DIR/mariadb
DB_SOCKET=$STATE_DIR/run/mariadb.sock
MUNGE_KEY=$STATE_DIR/munge/munge.key
# Slurm 22.05 client commands ignore AuthInfo=socket= when talking to slurmdbd, so munged
# listens on the stock socket path (one munged per host).
MUNGE_SOCKET=/run/munge/munge.socket.2
SLURM_CONF=$ETC_DIR/slurm.conf
ENV_FILE=$STATE_DIR/env.sh

# is_running NAME: true if $RUN_DIR/NAME.pid names a live process whose command line mentions NAME
# (without a "-suffix"), so a stale pid file reused by another process does not count.
is_running() {
  local pid_file=$RUN_DIR/$1.pid pid
  [[ -s $pid_file ]] || return 1
  pid=$(<"$pid_file")
  [[ -r /proc/$pid/cmdline ]] || return 1
  tr '\0' ' ' <"/proc/$pid/cmdline" | grep -q -- "${1%%-*}"
}

# stop_daemon NAME: TERM the process of $RUN_DIR/NAME.pid, wait up to 15 s, then KILL.
stop_daemon() {
  local name=$1 pid
  if ! is_running "$name"; then
    rm -f "$RUN_DIR/$name.pid"
    return
  fi
  pid=$(<"$RUN_DIR/$name.pid")
  # Detached services lead their own process group (setsid); signal the group to reach workers.
  if [[ $(ps -o pgid= -p "$pid" | tr -d ' ') == "$pid" ]]; then
    kill -TERM -- "-$pid" 2>/dev/null || true
  else
    kill -TERM "$pid" 2>/dev/null || true
  fi
  for _ in $(seq 150); do  # 15 s
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.1
  done
  if kill -0 "$pid" 2>/dev/null; then
    printf '%s: %s (pid %s) ignored TERM; killing\n' "${0##*/}" "$name" "$pid" >&2
    kill -KILL "$pid" 2>/dev/null || true
  fi
  rm -f "$RUN_DIR/$name.pid"
  printf '%s: stopped %s\n' "${0##*/}" "$name" >&2
}

# munged_pids: every munged running with this state directory's key, tracked by its pid file or not.
munged_pids() {
  pgrep -f -- "[m]unged .*--key-file=$MUNGE_KEY" || true  # [m]: never match a shell quoting this
}

# take_stack_lock WHO: serialise up.sh/down.sh callers on fd 9. Daemons are started with 9>&- so
# they never inherit (and hold) the lock.
take_stack_lock() {
  mkdir -p "$STATE_DIR"
  exec 9>"$STATE_DIR/.lock"
  flock -w 300 9 || { printf '%s: another up.sh/down.sh held %s for 300 s\n' "$1" "$STATE_DIR/.lock" >&2; exit 1; }
}

# subnet_prefix: the first three octets of $SUBNET, or one error line if it is not a private /24.
subnet_prefix() {
  local prefix=${SUBNET%.0/24}
  if [[ ! $SUBNET =~ ^[0-9]+\.[0-9]+\.[0-9]+\.0/24$ ]] \
    || [[ ! $prefix =~ ^(10\.|192\.168\.|172\.(1[6-9]|2[0-9]|3[01])\.) ]]; then
    printf 'FFJOBS_SUBNET=%s: want a private /24 such as 10.213.7.0/24\n' "$SUBNET" >&2
    return 1
  fi
  printf '%s\n' "$prefix"
}

netns_of() { printf 'ffjobs-%s\n' "$1"; }        # netns_of node2 -> ffjobs-node2
host_veth_of() { printf 'ffjobs-v%s\n' "$1"; }   # the bridge's end of node2's link: ffjobs-vnode2
node_addr() { printf '%s.%d\n' "$NET_PREFIX" $((10 + ${1#node})); }  # node2 -> <prefix>.12

NET_PREFIX=$(subnet_prefix) || exit 2
BRIDGE_ADDR=$NET_PREFIX.1  # the host's address on the bridge: slurmctld, slurmdbd, MLflow
