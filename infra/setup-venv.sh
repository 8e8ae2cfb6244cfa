#!/usr/bin/env bash
# Create or refresh the project virtualenv (.venv) with ffjobs and its dependencies.
# Idempotent: returns at once when pyproject.toml has not changed since the last install.
set -euo pipefail
cd "$(dirname "$0")/.."

venv=${FFJOBS_VENV:-.venv}
python=${PYTHON:-python3}
torch_pin=${FFJOBS_TORCH:-torch==2.14.1}
torchvision_pin=${FFJOBS_TORCHVISION:-torchvision==0.29.1}

"$python" - <<'PY' || { echo "ffjobs needs Python >= 3.11 (set PYTHON=/path/to/python3.11)" >&2; exit 2; }
import sys; sys.exit(sys.version_info < (3, 11))
PY

stamp="$venv/.ffjobs-installed"
want="$(cat pyproject.toml infra/setup-venv.sh | sha256sum | cut -c1-16)"
if [[ -f "$stamp" && "$(cat "$stamp")" == "$want" ]]; then
  exit 0
fi

echo "ffjobs: setting up $venv (torch, Airflow, MLflow, submitit; a few minutes the first time)" >&2
[[ -x "$venv/bin/python" ]] || "$python" -m venv "$venv"
"$venv/bin/python" -m pip install -q --upgrade pip
# torch first and pinned, so that no resolver later swaps in another build.
"$venv/bin/python" -m pip install -q "$torch_pin" "$torchvision_pin"
"$venv/bin/python" -m pip install -q -e ".[dev]" "$torch_pin" "$torchvision_pin"
echo "$want" > "$stamp"
