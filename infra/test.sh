#!/usr/bin/env bash
# The test command: install everything, start the local stack, lint, run every test, tear down.
# Fails when pytest collects no test (exit code 5), so an empty run never passes.
set -euo pipefail
cd "$(dirname "$0")/.."

bash infra/setup-venv.sh
export PATH="$PWD/.venv/bin:$PATH"

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

# Headless Chromium for the browser tests (tests/integration/browser.py): Debian's chromium and
# its chromedriver, one source package so their versions match, and a font to render text in
# the screenshots. Nothing downloads a browser at run time.
install_browser() {
  local missing=()
  command -v chromium >/dev/null || missing+=(chromium)
  command -v chromedriver >/dev/null || missing+=(chromium-driver)
  dpkg -s fonts-dejavu-core >/dev/null 2>&1 || missing+=(fonts-dejavu-core)
  [[ ${#missing[@]} -eq 0 ]] && return
  if [[ $(id -u) -ne 0 ]]; then
    echo "ffjobs: browser tests need ${missing[*]}: sudo apt-get install ${missing[*]}" >&2
    return
  fi
  echo "== installing ${missing[*]} (apt-get)" >&2
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -q >/dev/null
  apt-get install -y -q --no-install-recommends "${missing[@]}" >/dev/null
}
install_browser

echo "== lint" >&2
ruff check .
ruff format --check .

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
