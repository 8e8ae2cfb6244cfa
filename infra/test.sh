#!/usr/bin/env bash
# The test command: install everything, start the local stack, lint, run every test, tear down.
# Fails when pytest collects no test (exit code 5), so an empty run never passes.
set -euo pipefail
cd "$(dirname "$0")/.."

# A run writes about 1 GB (datasets, checkpoints, Airflow homes, the mini-cluster's state) under
# the temp folder and .state/. With less free, tests fail one by one late in the run with errors
# that do not say why: refuse before starting.
need_mb=2048
for dir in "${TMPDIR:-/tmp}" "$PWD"; do
  free_mb=$(df -Pm "$dir" | awk 'NR == 2 {print $4}')
  if [[ $free_mb -lt $need_mb ]]; then
    echo "ffjobs: only $free_mb MB free on the file system of $dir; the tests need about" \
      "$need_mb MB there: free some space first" >&2
    exit 1
  fi
done

# The Debian packages (the local stack's, and Chromium for the browser tests: infra/packages.sh)
# install while the venv is made: the one waits on the network and dpkg, the other on uv. A
# failure before they are waited for still waits for them, never leaving dpkg half done.
packages_log=$(mktemp "${TMPDIR:-/tmp}/ffjobs-packages.XXXXXX")
bash infra/packages.sh stack browser >"$packages_log" 2>&1 &
packages=$!
packages_done() {
  [[ -n $packages ]] || return 0
  local status=0
  wait "$packages" || status=$?
  packages=
  cat "$packages_log" >&2
  rm -f "$packages_log"
  return "$status"
}
trap 'packages_done || true' EXIT

bash infra/setup-venv.sh
export PATH="$PWD/.venv/bin:$PATH"

echo "== lint" >&2
ruff check .
ruff format --check .

packages_done
echo "== local stack (SLURM mini-cluster, MLflow server)" >&2
bash infra/local/up.sh
trap 'bash infra/local/down.sh >/dev/null 2>&1 || true' EXIT
# shellcheck disable=SC1091
source "${FFJOBS_STATE_DIR:-.state/local-stack}/env.sh"

echo "== tests" >&2
# One worker more than the cores, at most three (FFJOBS_TEST_WORKERS=N sets it, 0: one process):
# the mini-cluster's drills and the Airflow runs spend much of their time waiting, which a third
# worker fills (dev/README.md: a third pytest worker). The tests that share a stack component or
# a module's fixture run on one worker, one at a time (tests/group_end.py).
cores=$(nproc)
workers=${FFJOBS_TEST_WORKERS:-$((cores < 2 ? cores + 1 : 3))}
parallel=()
[[ $workers -gt 0 ]] && parallel=(-n "$workers" --dist loadgroup)
set +e
pytest "${parallel[@]}" "$@"
rc=$?
set -e
echo "ffjobs: browser screenshots in ${FFJOBS_TEST_ARTIFACTS:-.state/test-artifacts}/browser" >&2
if [[ $rc -eq 5 ]]; then
  echo "ffjobs: pytest collected no tests; failing on purpose" >&2
  exit 1
fi
exit $rc
