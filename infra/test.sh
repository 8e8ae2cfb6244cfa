#!/usr/bin/env bash
# The test command: install everything, start the local stack, lint, run every test, tear down.
# Fails when pytest collects no test (exit code 5), so an empty run never passes.
set -euo pipefail
cd "$(dirname "$0")/.."

bash infra/setup-venv.sh
export PATH="$PWD/.venv/bin:$PATH"

echo "== lint" >&2
ruff check .
ruff format --check .

echo "== local stack (SLURM mini-cluster, MLflow server)" >&2
bash infra/local/up.sh
trap 'bash infra/local/down.sh >/dev/null 2>&1 || true' EXIT
# shellcheck disable=SC1091
source "${FFJOBS_STATE_DIR:-.state/local-stack}/env.sh"

echo "== tests" >&2
set +e
pytest "$@"
rc=$?
set -e
if [[ $rc -eq 5 ]]; then
  echo "ffjobs: pytest collected no tests; failing on purpose" >&2
  exit 1
fi
exit $rc
