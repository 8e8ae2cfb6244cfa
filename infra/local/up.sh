#!/usr/bin/env bash
# Start the local stack: munge, MariaDB + slurmdbd, slurmctld and an MLflow tracking server on the
# host, and three slurmd (node1..node3), each in its own network namespace joined to the host by a
# bridge (netns.sh). Idempotent: daemons already running are left alone. Everything lives under
# the state directory; nothing is installed as a system service.
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
# shellcheck source=infra/local/common.sh
source "$repo/infra/local/common.sh"

log() { printf 'up.sh: %s\n' "$*" >&2; }
die() { printf 'up.sh: error: %s\n' "$*" >&2; exit 1; }

install_packages() {
  local missing=()
  command -v munged >/dev/null || missing+=(munge)
  command -v mariadbd >/dev/null || missing+=(mariadb-server)
  command -v slurmdbd >/dev/null || missing+=(slurmdbd)
  command -v slurmctld >/dev/null || missing+=(slurm-wlm)
  command -v curl >/dev/null || missing+=(curl)
  { command -v ip && command -v tc; } >/dev/null || missing+=(iproute2)
  command -v nsenter >/dev/null || missing+=(util-linux)
  [[ ${#missing[@]} -eq 0 ]] && return
  [[ $(id -u) -eq 0 ]] || die "missing packages ${missing[*]}; run: sudo apt-get install ${missing[*]}"
  log "installing ${missing[*]} (apt-get)"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -q >"$LOG_DIR/apt.log" 2>&1
  # policy-rc.d exit 101 keeps the packages' init scripts from starting system-wide daemons.
  local policy=/usr/sbin/policy-rc.d created_policy=0
  if [[ ! -e $policy ]]; then
    printf '#!/bin/sh\nexit 101\n' >"$policy" && chmod 755 "$policy" && created_policy=1
  fi
  apt-get install -y -q --no-install-recommends "${missing[@]}" procps >>"$LOG_DIR/apt.log" 2>&1 \
    || die "apt-get install failed; see $LOG_DIR/apt.log"
  if [[ $created_policy -eq 1 ]]; then rm -f "$policy"; fi
}

# Run "$@" detached (own session, so it outlives this shell) and record its pid.
start_detached() {
  local name=$1; shift
  setsid nohup "$@" >>"$LOG_DIR/$name.out" 2>&1 </dev/null 9>&- &
  echo $! >"$RUN_DIR/$name.pid"
}

wait_for() {  # wait_for SECONDS DESCRIPTION COMMAND...
  local deadline=$((SECONDS + $1)) what=$2; shift 2
  until "$@" >/dev/null 2>&1; do
    ((SECONDS < deadline)) || die "timed out waiting for $what; logs: $LOG_DIR"
    sleep 0.5
  done
}

start_munge() {
  if is_running munged && munge -n -S "$MUNGE_SOCKET" >/dev/null 2>&1; then
    return
  fi
  # munged unlinks its pid file and socket on exit, even when a newer munged owns them by then, so
  # an instance of this state directory may run without pid file or socket: stop all of them.
  local stray
  for stray in $(munged_pids); do
    log "stopping munged $stray of this state directory (lost its pid file or socket)"
    kill "$stray" 2>/dev/null || true
  done
  local deadline=$((SECONDS + 10))
  while [[ -n $(munged_pids) ]]; do
    ((SECONDS < deadline)) || die "munged of this state directory did not exit; logs: $LOG_DIR"
    sleep 0.2
  done
  # Slurm's clients only use the stock socket, so there is one munged per host: never clobber one
  # that belongs to the system or to another state directory.
  if [[ -S $MUNGE_SOCKET ]] && munge -n -S "$MUNGE_SOCKET" >/dev/null 2>&1; then
    die "a munged not started from $STATE_DIR already listens on $MUNGE_SOCKET; stop it (or the stack of its state directory) first"
  fi
  mkdir -p "$STATE_DIR/munge" "$(dirname "$MUNGE_SOCKET")" && chmod 700 "$STATE_DIR/munge"
  if [[ ! -s $MUNGE_KEY ]]; then
    dd if=/dev/urandom of="$MUNGE_KEY" bs=1024 count=1 status=none
  fi
  chmod 400 "$MUNGE_KEY"
  rm -f "$MUNGE_SOCKET" "$MUNGE_SOCKET.lock"
  # --force: munged refuses to run as root without it.
  munged 9>&- --force --key-file="$MUNGE_KEY" --socket="$MUNGE_SOCKET" \
    --pid-file="$RUN_DIR/munged.pid" --log-file="$LOG_DIR/munged.log" \
    --seed-file="$STATE_DIR/munge/munged.seed"
  wait_for 10 munged test -S "$MUNGE_SOCKET"
}

start_mariadb() {
  is_running mariadbd && return
  if [[ ! -d $DB_DIR/mysql ]]; then
    log "initialising MariaDB in $DB_DIR"
    mkdir -p "$DB_DIR"
    mariadb-install-db --no-defaults --user="$(id -un)" --datadir="$DB_DIR" \
      --auth-root-authentication-method=socket >"$LOG_DIR/mariadb-install.log" 2>&1 \
      || die "mariadb-install-db failed; see $LOG_DIR/mariadb-install.log"
  fi
  start_detached mariadbd mariadbd --no-defaults --user="$(id -un)" --datadir="$DB_DIR" \
    --socket="$DB_SOCKET" --port="$DB_PORT" --bind-address=127.0.0.1 \
    --pid-file="$RUN_DIR/mariadbd.pid" --log-error="$LOG_DIR/mariadb.log" \
    --innodb-buffer-pool-size=64M --skip-name-resolve
  wait_for 60 MariaDB mariadb --no-defaults --socket="$DB_SOCKET" -e 'SELECT 1'
  mariadb --no-defaults --socket="$DB_SOCKET" <<SQL
CREATE DATABASE IF NOT EXISTS slurm_acct_db;
CREATE USER IF NOT EXISTS 'slurm'@'127.0.0.1' IDENTIFIED BY '$DB_PASSWORD';
GRANT ALL ON slurm_acct_db.* TO 'slurm'@'127.0.0.1';
SQL
}

write_slurm_configs() {
  local host real_mem
  host=$(hostname -s)
  # Each node claims the whole machine's memory and two CPUs: over-subscribed on purpose, so a
  # small host still runs multi-node jobs.
  real_mem=$(awk '/MemTotal/ {print int($2 / 1024)}' /proc/meminfo)
  mkdir -p "$ETC_DIR" "$STATE_DIR/slurmctld" "$STATE_DIR/slurmd"
  cat >"$SLURM_CONF.new" <<EOF
# Generated by infra/local/up.sh; edits are overwritten on the next start.
ClusterName=$CLUSTER_NAME
SlurmctldHost=$host($BRIDGE_ADDR)
SlurmctldPort=$SLURMCTLD_PORT
SlurmUser=$(id -un)
SlurmdUser=$(id -un)
AuthType=auth/munge
CredType=cred/munge
StateSaveLocation=$STATE_DIR/slurmctld
SlurmdSpoolDir=$STATE_DIR/slurmd/%n
SlurmctldPidFile=$RUN_DIR/slurmctld.pid
SlurmdPidFile=$RUN_DIR/slurmd-%n.pid
SlurmctldLogFile=$LOG_DIR/slurmctld.log
SlurmdLogFile=$LOG_DIR/slurmd-%n.log
SlurmctldDebug=info
SlurmdDebug=info
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
MpiDefault=none
SwitchType=switch/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SlurmdParameters=config_overrides
ReturnToService=2
SchedulerType=sched/backfill
SchedulerParameters=sched_interval=2
InactiveLimit=0
KillWait=5
MinJobAge=300
SlurmctldTimeout=60
SlurmdTimeout=30
JobAcctGatherType=jobacct_gather/none
JobCompType=jobcomp/none
AccountingStorageType=accounting_storage/slurmdbd
AccountingStorageHost=$BRIDGE_ADDR
AccountingStoragePort=$SLURMDBD_PORT
EOF
  local node
  for node in "${NODES[@]}"; do
    printf 'NodeName=%s NodeHostname=%s NodeAddr=%s Port=%d CPUs=2 RealMemory=%d State=UNKNOWN\n' \
      "$node" "$host" "$(node_addr "$node")" $((SLURMD_PORT_BASE + ${node#node})) "$real_mem"
  done >>"$SLURM_CONF.new"
  echo "PartitionName=debug Nodes=node[1-3] Default=YES MaxTime=INFINITE State=UP" >>"$SLURM_CONF.new"
  # Running daemons keep the configuration they started with: restart them when it changed (a
  # stack of the former loopback-only layout, another FFJOBS_SUBNET).
  if [[ -s $SLURM_CONF ]] && ! cmp -s "$SLURM_CONF" "$SLURM_CONF.new"; then
    local daemon
    for daemon in "${NODES[@]/#/slurmd-}" slurmctld; do
      if is_running "$daemon"; then
        log "slurm.conf changed; restarting $daemon"
        stop_daemon "$daemon"
      fi
    done
  fi
  mv "$SLURM_CONF.new" "$SLURM_CONF"
  cat >"$ETC_DIR/slurmdbd.conf" <<EOF
# Generated by infra/local/up.sh.
AuthType=auth/munge
DbdHost=localhost
DbdAddr=$BRIDGE_ADDR
DbdPort=$SLURMDBD_PORT
SlurmUser=$(id -un)
LogFile=$LOG_DIR/slurmdbd.log
PidFile=$RUN_DIR/slurmdbd.pid
StorageType=accounting_storage/mysql
StorageHost=127.0.0.1
StoragePort=$DB_PORT
StorageUser=slurm
StoragePass=$DB_PASSWORD
StorageLoc=slurm_acct_db
EOF
  chmod 600 "$ETC_DIR/slurmdbd.conf"
  # Read only by cgroup plugins, which this stack does not load (no cgroups on these hosts).
  cat >"$ETC_DIR/cgroup.conf" <<EOF
CgroupPlugin=autodetect
ConstrainCores=no
ConstrainRAMSpace=no
EOF
}

start_slurmdbd() {
  is_running slurmdbd && return
  slurmdbd 9>&-
  wait_for 30 slurmdbd sacctmgr -n list cluster
  if [[ -z $(sacctmgr -n -P list cluster format=Cluster "where" "cluster=$CLUSTER_NAME") ]]; then
    sacctmgr -i add cluster "$CLUSTER_NAME" >/dev/null
  fi
}

start_slurmctld() {
  is_running slurmctld && return
  started_slurm=1
  slurmctld 9>&-
  wait_for 30 slurmctld scontrol ping
}

start_slurmd() {
  local node=$1 ns
  ns=$(netns_of "$node")
  if is_running "slurmd-$node"; then
    # A slurmd outside its namespace (started by an older up.sh) talks over the wrong network.
    [[ $(ip netns identify "$(<"$RUN_DIR/slurmd-$node.pid")") == "$ns" ]] && return
    log "slurmd-$node runs outside $ns; restarting it there"
    stop_daemon "slurmd-$node"
  fi
  started_slurm=1
  local sysfs=$RUN_DIR/sysfs-$node
  mkdir -p "$sysfs"
  # nsenter --net switches only the network: `ip netns exec` would remount all of /sys, and slurmd
  # then finds no /sys/fs/cgroup and exits. But /sys/class/net would still list the host's
  # interfaces, so in a private mount namespace a sysfs of the node's network replaces just the
  # net class (tasks inherit it; the host sees an empty folder).
  nsenter --net="/var/run/netns/$ns" unshare --mount --propagation slave sh -c '
    mount -t sysfs sysfs "$1" &&
      mount --bind "$1/class/net" /sys/class/net &&
      mount --bind "$1/devices/virtual/net" /sys/devices/virtual/net &&
      exec slurmd -N "$2"' sh "$sysfs" "$node" 9>&-
}

all_nodes_up() {
  # idle on a fresh start; mix/alloc/comp when the stack already runs other callers' jobs.
  # A trailing "*" (not responding), down, drain or unk do not count.
  local states
  states=$(sinfo -h -N -o '%N %t' | sort -u)
  [[ $(grep -c -E ' (idle|mix|alloc|comp)$' <<<"$states") -eq 3 ]]
}

resume_down_nodes() {
  # After a restart, a node the saved state still marks down or drained (an unclean stop) would
  # never take jobs; only called when this run started SLURM daemons, so a node that a running
  # test drains on purpose is left alone.
  local node
  for node in $(sinfo -h -N -t down,drain -o '%N' | sort -u); do
    scontrol update NodeName="$node" State=RESUME >/dev/null 2>&1 || true
  done
}

start_mlflow() {
  is_running mlflow && return
  [[ -x $MLFLOW_BIN ]] || die "$MLFLOW_BIN not found; create the venv (pip install -e .) or set FFJOBS_VENV"
  mkdir -p "$STATE_DIR/mlflow/artifacts"
  # Loopback for host-side clients, the bridge for jobs on the nodes, and no other address: gunicorn
  # binds several, uvicorn only one. The server's background job runner is not needed here.
  local gunicorn_opts="--bind 127.0.0.1:$MLFLOW_PORT"
  # gunicorn >= 26 would otherwise leave a control socket under $HOME/.gunicorn.
  if "$VENV/bin/python" -m gunicorn --help 2>/dev/null | grep -q -- --no-control-socket; then
    gunicorn_opts+=" --no-control-socket"
  fi
  MLFLOW_SERVER_ENABLE_JOB_EXECUTION=false start_detached mlflow "$MLFLOW_BIN" server \
    --host "$BRIDGE_ADDR" --port "$MLFLOW_PORT" --gunicorn-opts "$gunicorn_opts" \
    --backend-store-uri "sqlite:///$STATE_DIR/mlflow/mlflow.db" \
    --artifacts-destination "$STATE_DIR/mlflow/artifacts" --serve-artifacts --workers 1
}

node_addrs() {  # "node1=10.213.7.11 node2=10.213.7.12 ..."
  local node out=()
  for node in "${NODES[@]}"; do out+=("$node=$(node_addr "$node")"); done
  printf '%s\n' "${out[*]}"
}

write_env_file() {
  cat >"$ENV_FILE" <<EOF
# Generated by infra/local/up.sh: source it to talk to the local stack.
export FFJOBS_STATE_DIR=$(printf '%q' "$STATE_DIR")
export SLURM_CONF=$(printf '%q' "$SLURM_CONF")
export MLFLOW_TRACKING_URI=http://127.0.0.1:$MLFLOW_PORT
# Jobs on the nodes use this one: loopback inside a node's namespace is the node's own.
export FFJOBS_NODE_TRACKING_URI=http://$BRIDGE_ADDR:$MLFLOW_PORT
export FFJOBS_BRIDGE=$BRIDGE
export FFJOBS_BRIDGE_ADDR=$BRIDGE_ADDR
export FFJOBS_NODE_IFNAME=$NODE_IFNAME
export FFJOBS_NODE_ADDRS=$(printf '%q' "$(node_addrs)")
# Cuts, restores and throttles a node's link (the recovery drills, ffjobs bench recovery).
export FFJOBS_LINK_SCRIPT=$(printf '%q' "$repo/infra/local/link.sh")
EOF
}

main() {
  mkdir -p "$STATE_DIR" "$LOG_DIR" "$RUN_DIR"
  take_stack_lock up.sh  # concurrent callers wait here, then find everything running
  local started=$SECONDS
  started_slurm=0
  install_packages
  bash "$repo/infra/local/netns.sh" up
  export SLURM_CONF
  write_slurm_configs
  start_munge
  start_mariadb
  start_slurmdbd
  start_slurmctld
  for node in "${NODES[@]}"; do start_slurmd "$node"; done
  start_mlflow  # starts in the background while SLURM settles
  if [[ $started_slurm -eq 1 ]]; then resume_down_nodes; fi
  wait_for 60 "all three nodes up (sinfo)" all_nodes_up
  wait_for 30 "sacct" sacct -n -X -S now-1minutes
  wait_for 90 "MLflow on port $MLFLOW_PORT" curl -fsS "http://127.0.0.1:$MLFLOW_PORT/health"
  wait_for 10 "MLflow on $BRIDGE_ADDR:$MLFLOW_PORT" curl -fsS "http://$BRIDGE_ADDR:$MLFLOW_PORT/health"
  write_env_file
  cat <<EOF
Local stack is up ($((SECONDS - started)) s): SLURM cluster '$CLUSTER_NAME' (node1..node3, partition debug),
nodes on bridge $BRIDGE: $(node_addrs),
MLflow at http://127.0.0.1:$MLFLOW_PORT (host) and http://$BRIDGE_ADDR:$MLFLOW_PORT (nodes).
  logs:  $LOG_DIR
  env:   source $ENV_FILE
         export SLURM_CONF=$SLURM_CONF
         export MLFLOW_TRACKING_URI=http://127.0.0.1:$MLFLOW_PORT
  drill: infra/local/link.sh cut|restore|unthrottle NODE, link.sh throttle RATE NODE
  stop:  infra/local/down.sh (--purge also deletes the namespaces and the bridge)
EOF
}

main "$@"
