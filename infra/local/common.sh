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
