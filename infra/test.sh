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
# install while the venv is made and the first tests run: the one waits on the network and dpkg,
# the others on uv and the CPU. A test that needs them waits for the install in flight (it holds
# packages.sh's lock): the local stack's up.sh through packages.sh, the browser tests in
# tests/integration/browser.py. However the run ends, the install is waited for (dpkg is never
# left half done) and the stack is stopped.
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
trap 'packages_done || true; bash infra/local/down.sh >/dev/null 2>&1 || true' EXIT

bash infra/setup-venv.sh
export PATH="$PWD/.venv/bin:$PATH"

echo "== lint" >&2
ruff check .
ruff format --check .

echo "== tests" >&2
# The local stack (SLURM mini-cluster, MLflow server) starts in the first test that needs it
# (tests/integration/conftest.py runs infra/local/up.sh and takes its env.sh), while the other
# workers run tests that do not: its daemons' start is mostly waiting.
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
if ! packages_done; then
  echo "ffjobs: installing the Debian packages failed (above)" >&2
  [[ $rc -ne 0 ]] || rc=1
fi
exit $rc
