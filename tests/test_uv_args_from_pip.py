"""``infra/setup-venv.sh`` installs with uv from where pip is configured to install from:
``infra/uv_args_from_pip.py`` turns pip's settings into uv's options."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[1] / "infra" / "uv_args_from_pip.py"
_spec = importlib.util.spec_from_file_location("uv_args_from_pip", SCRIPT)
uv_args_from_pip = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(uv_args_from_pip)

# what `pip config list` prints: the files' settings by section, then the PIP_* variables
LISTED = """\
global.cert='/ca.pem'
global.extra-index-url='file:///a/simple file:///b/simple'
global.find-links='/old'
global.index-url='https://mirror.example/simple'
install.constraint='/pins.txt'
global.trusted-host='mirror.example'
:env:.disable-pip-version-check='1'
:env:.find-links='/wheels'
"""


def test_indexes_wheels_constraints_and_certificate_carry_over_the_environment_winning(capsys):
    args = uv_args_from_pip.uv_arguments(uv_args_from_pip.parse(LISTED))
    assert "SSL_CERT_FILE=/ca.pem" in args
    options = [x for x in args if not x.startswith("SSL_CERT_FILE=")]
    assert sorted(zip(options[::2], options[1::2], strict=True)) == [
        ("--constraint", "/pins.txt"),
        ("--extra-index-url", "file:///a/simple"),
        ("--extra-index-url", "file:///b/simple"),
        ("--find-links", "/wheels"),  # the variable's, not the file's
        ("--index-url", "https://mirror.example/simple"),
    ]
    assert "pip's setting 'trusted-host' is not passed to uv" in capsys.readouterr().err


def test_the_script_reads_what_pip_itself_is_configured_with():
    env = {k: v for k, v in os.environ.items() if not k.startswith("PIP_")}
    env.update(PIP_CONFIG_FILE=os.devnull, PIP_FIND_LINKS="/wheels", PIP_NO_INDEX="1")
    done = subprocess.run(
        [sys.executable, str(SCRIPT), sys.executable],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )  # with PIP_CONFIG_FILE=/dev/null pip reads no file: the variables only
    assert sorted(done.stdout.split("\n")[:-1]) == ["--find-links", "--no-index", "/wheels"]
