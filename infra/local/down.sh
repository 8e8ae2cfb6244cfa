#!/usr/bin/env bash
# Stop every daemon infra/local/up.sh started (by its pid file). Idempotent; state is kept, so the
# next up.sh reuses the database, job ids and MLflow runs. Delete the state directory to start over.
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
# shellcheck source=infra/local/common.sh
source "$repo/infra/local/common.sh"

stop() {  # stop NAME: TERM, wait up to 15 s, then KILL
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
  for _ in $(seq 30); do
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.5
  done
  if kill -0 "$pid" 2>/dev/null; then
    printf 'down.sh: %s (pid %s) ignored TERM; killing\n' "$name" "$pid" >&2
    kill -KILL "$pid" 2>/dev/null || true
  fi
  rm -f "$RUN_DIR/$name.pid"
  printf 'down.sh: stopped %s\n' "$name" >&2
}

[[ -d $RUN_DIR ]] || exit 0
mkdir -p "$STATE_DIR"
take_stack_lock down.sh
for name in mlflow slurmd-node3 slurmd-node2 slurmd-node1 slurmctld slurmdbd mariadbd munged; do
  stop "$name"
done
# A munged that lost its pid file (see start_munge in up.sh) still belongs to this state directory.
for pid in $(munged_pids); do
  kill "$pid" 2>/dev/null || true
  printf 'down.sh: stopped munged %s (had no pid file)\n' "$pid" >&2
done
