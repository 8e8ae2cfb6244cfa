#!/usr/bin/env bash
# Stop every daemon infra/local/up.sh started (by its pid file). Idempotent; state is kept, so the
# next up.sh reuses the database, job ids and MLflow runs. Delete the state directory to start over.
# --purge: also delete the nodes' network namespaces and the bridge (netns.sh down).
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
# shellcheck source=infra/local/common.sh
source "$repo/infra/local/common.sh"

purge=0
case ${1:-} in
  "") ;;
  --purge) purge=1 ;;
  *) printf 'down.sh: error: usage: down.sh [--purge]\n' >&2; exit 2 ;;
esac

if [[ ! -d $RUN_DIR ]]; then
  if [[ $purge -eq 1 ]]; then bash "$repo/infra/local/netns.sh" down; fi
  exit 0
fi
mkdir -p "$STATE_DIR"
take_stack_lock down.sh
# In tiers, the daemons of a tier at once: each takes a second or more to exit, and a daemon
# goes only after those that talk to it (slurmctld reports to slurmdbd, slurmdbd writes to
# MariaDB and checks credentials with munged). MLflow (its own SQLite store) talks to none of
# them: it stops beside all the tiers. A stop that fails has said so; the next tier still goes.
stop_tier() {
  local name pids=()
  for name in "$@"; do
    stop_daemon "$name" &
    pids+=($!)
  done
  wait "${pids[@]}" || true
}
stop_daemon mlflow &
mlflow_stop=$!
stop_tier slurmd-node3 slurmd-node2 slurmd-node1
stop_tier slurmctld
stop_tier slurmdbd
stop_tier mariadbd munged
wait "$mlflow_stop" || true
# A munged that lost its pid file (see start_munge in up.sh) still belongs to this state directory.
for pid in $(munged_pids); do
  kill "$pid" 2>/dev/null || true
  printf 'down.sh: stopped munged %s (had no pid file)\n' "$pid" >&2
done
if [[ $purge -eq 1 ]]; then
  bash "$repo/infra/local/netns.sh" down
  printf 'down.sh: deleted the namespaces %s and the bridge %s\n' \
    "$(for node in "${NODES[@]}"; do netns_of "$node"; done | paste -sd, -)" "$BRIDGE" >&2
fi
