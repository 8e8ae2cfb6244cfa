#!/usr/bin/env bash
# Create or refresh the project virtualenv (.venv) with ffjobs and its dependencies.
# Idempotent: returns at once when pyproject.toml has not changed since the last install.
set -euo pipefail
cd "$(dirname "$0")/.."

venv=${FFJOBS_VENV:-.venv}

# The interpreter of a new venv: $PYTHON, else the distribution's own python3 where it is 3.11
# or newer, can make a venv and has its C headers (Inductor compiles against them), else
# python3 on the PATH. Debian builds its python3 with profile-guided and link-time
# optimisation: imports, Airflow, MLflow and the tests' own Python take about a tenth less CPU
# than on a plain source build such as pyenv's (dev/README.md). An existing venv keeps the
# interpreter it was made with.
pick_python() {
  local system=/usr/bin/python3
  if [[ -x $system ]] && "$system" -c '
import ensurepip, os, sys, sysconfig, venv
headers = os.path.join(sysconfig.get_paths()["include"], "Python.h")
sys.exit(sys.version_info < (3, 11) or not os.path.exists(headers))' 2>/dev/null; then
    echo "$system"
  else
    echo python3
  fi
}
python=${PYTHON:-$(pick_python)}
torch_pin=${FFJOBS_TORCH:-torch==2.14.1}
torchvision_pin=${FFJOBS_TORCHVISION:-torchvision==0.29.1}

"$python" - <<'PY' || { echo "ffjobs needs Python >= 3.11 (set PYTHON=/path/to/python3.11)" >&2; exit 2; }
import sys; sys.exit(sys.version_info < (3, 11))
PY

# ffjobs' own modules as bytecode, made now: pip compiles what it installs, not an editable
# source tree, and with PYTHONDONTWRITEBYTECODE set every process (ranks, tasks, jobs) would
# compile them again at each start. Only what changed is compiled on a later call.
compile_sources() {
  "$venv/bin/python" -m compileall -q -j 0 ffjobs dags >/dev/null
}

stamp="$venv/.ffjobs-installed"
want="$(cat pyproject.toml infra/setup-venv.sh | sha256sum | cut -c1-16)"
if [[ -f "$stamp" && "$(cat "$stamp")" == "$want" ]]; then
  compile_sources
  exit 0
fi

echo "ffjobs: setting up $venv (torch, Airflow, MLflow, submitit; about a minute the first time)" >&2
[[ -x "$venv/bin/python" ]] || "$python" -m venv "$venv"
# uv installs what pip would, from where pip is configured to install from (uv_args_from_pip.py),
# unpacking and compiling to bytecode on every core, where pip uses one (dev/README.md: uv).
# torch is pinned in the same call, so that no resolver swaps in another build.
"$venv/bin/python" -m pip install -q uv
uv_args=()
while IFS= read -r arg; do
  case $arg in
    SSL_CERT_FILE=*) export "${arg?}" ;;
    ?*) uv_args+=("$arg") ;;
  esac
done < <("$venv/bin/python" infra/uv_args_from_pip.py "$venv/bin/python")
"$venv/bin/uv" pip install -q --python "$venv/bin/python" --compile-bytecode \
  --index-strategy unsafe-best-match "${uv_args[@]}" -e ".[dev]" "$torch_pin" "$torchvision_pin"
echo "$want" > "$stamp"
compile_sources
