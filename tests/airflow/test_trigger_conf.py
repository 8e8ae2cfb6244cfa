"""The DAG run conf check (``check_trigger_conf``) and the api-server middleware that applies it:
every refusal names the conf field, quotes at most a short value, and reads no file outside the
configs folder. The real api-server is exercised in ``tests/integration/test_airflow_conf.py``.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route
from starlette.testclient import TestClient

from ffjobs.airflow.plugin import FfjobsPlugin, TriggerConfCheck
from ffjobs.airflow.trigger_conf import (
    CONF_FIELDS,
    check_trigger_conf,
    config_choices,
    preset_names,
)
from ffjobs.config import ConfigError, load_config


@pytest.fixture
def deployment(tmp_path: Path) -> Path:
    """A working folder with its own configs/ and, outside it, a file that must stay unread."""
    (tmp_path / "configs").mkdir()
    (tmp_path / "configs" / "mine.yaml").write_text("extends: local\nname: mine\n")
    (tmp_path / "configs" / "escape.yaml").symlink_to(tmp_path / "outside.yaml")
    (tmp_path / "outside.yaml").write_text("MARKER-OUTSIDE: 1\n")
    return tmp_path


def refusal(conf, workdir: Path) -> ConfigError:
    with pytest.raises(ConfigError) as info:
        check_trigger_conf(conf, workdir)
    assert "MARKER" not in str(info.value)
    assert len(str(info.value)) < 600  # one line: the longest lists a section's allowed keys
    assert "\n" not in str(info.value)
    return info.value


@pytest.mark.parametrize(
    "conf, field, needle",
    [
        ({"config": "/etc/shadow"}, "config", "relative path inside configs/"),
        ({"config": "../outside"}, "config", "relative path inside configs/"),
        ({"config": "escape"}, "config", "no such preset"),  # a symlink leaving configs/
        ({"config": "no-such-preset"}, "config", "no such preset"),
        ({"config": 5}, "config", "got 5"),
        ({"overrides": ["runs_dir=../../x"]}, "overrides[0]", "relative path"),
        ({"overrides": ["train.checkpoint_dir=/tmp/x"]}, "overrides[0]", "relative path"),
        ({"overrides": ["data.source=file:///etc"]}, "overrides[0]", "relative path"),
        ({"data_source": "/etc"}, "data_source", "relative path"),
        ({"overrides": ["data.validation.cache_dir=/tmp/x"]}, "overrides[0]", "relative path"),
        ({"slurm_nodes": 10000}, "slurm_nodes", "must be <= 1024"),
        ({"train_steps": "5"}, "train_steps", "expected an integer"),
        ({"train_steps": True}, "train_steps", "expected an integer"),
        ({"overrides": ["train.lr=5"]}, "overrides[0]", "must be <= 1"),
        ({"overrides": ["train.no_such=1"]}, "overrides[0]", "unknown key"),
        ({"overrides": ["no equals sign"]}, "overrides[0]", "key.path=value"),
        ({"overrides": "train.lr=0.1"}, "overrides", "must be a list"),
        ({"overrides": ["x=1"] * 65}, "overrides", "at most 64"),
        ({"resume": "../run"}, "resume", "must be a run key"),
        ({"force": "yes"}, "force", "must be true or false"),
        ({"slurm_nodes": -1}, "slurm_nodes", "must be >= 1"),
        ({"unknown_key": 1}, "unknown_key", "unknown field"),
        # whoever may trigger may not run commands as the deployment, nor send its data away
        ({"overrides": ["slurm.setup=['curl x | sh']"]}, "overrides[0]", "deployment's config"),
        ({"overrides": ["slurm.env.LD_PRELOAD=/x.so"]}, "overrides[0]", "deployment's config"),
        ({"overrides": ["slurm.python=./evil"]}, "overrides[0]", "deployment's config"),
        ({"overrides": ["tracking.tracking_uri=http://x"]}, "overrides[0]", "deployment's"),
    ],
)
def test_a_bad_conf_is_refused_naming_the_field(deployment, conf, field, needle):
    error = refusal(conf, deployment)
    assert error.key == field
    assert needle in str(error)
    assert str(error).startswith(f"conf: {field}: ")


def test_a_value_is_quoted_only_as_a_short_prefix(deployment):
    error = refusal({"overrides": ["train.steps=" + "z" * 5000]}, deployment)
    assert "z" * 100 not in str(error)


def test_valid_confs_give_the_config_file_and_its_sets(deployment):
    path, sets = check_trigger_conf(
        {
            "config": "mine",
            "train_steps": 7,
            "data_source": "s3://bucket/faces",
            "nproc": None,
            "overrides": ["runs_dir=runs/x", "train.lr=3e-4"],
        },
        deployment,
    )
    assert path == (deployment / "configs" / "mine.yaml").resolve()
    assert sets == [
        "train.steps=7",
        'data.source="s3://bucket/faces"',
        "runs_dir=runs/x",
        "train.lr=3e-4",
    ]
    assert load_config(path, sets).train.steps == 7
    assert check_trigger_conf({}, deployment)[0].name == "local.yaml"
    for name in preset_names():
        assert check_trigger_conf({"config": name}, deployment)[0].is_file()


def test_the_shipped_presets_are_listed():
    assert {"local", "train-256", "clusters/minicluster"} <= set(preset_names())


def test_the_conf_fields_are_the_dags_params():
    from ffjobs.airflow.trigger_conf import PARAM_OVERRIDES

    assert set(CONF_FIELDS) == {"config", "resume", "force", "overrides", *PARAM_OVERRIDES}


def test_the_config_choices_are_the_deployments_files_and_the_presets(deployment):
    (deployment / "configs" / "team").mkdir()
    (deployment / "configs" / "team" / "gpu.yaml").write_text("extends: local\n")
    choices = config_choices(deployment)
    assert list(choices) == sorted({"mine", "team/gpu", *preset_names()})
    assert "escape" not in choices  # its symlink leaves configs/: no conf could use it
    for name, path in choices.items():
        assert check_trigger_conf({"config": name}, deployment)[0] == path
    assert choices["team/gpu"] == (deployment / "configs" / "team" / "gpu.yaml").resolve()
    assert list(config_choices(deployment / "no-configs-here")) == preset_names()


# --------------------------------------------------------------------------- the middleware


def route_app(calls: list) -> Starlette:
    """A stand-in for the api-server's trigger route: records each body it receives."""

    async def trigger(request: Request) -> JSONResponse:
        calls.append(await request.json())
        return JSONResponse({"dag_run_id": "made"}, status_code=200)

    app = Starlette(
        routes=[
            Route("/api/v2/dags/{dag_id}/dagRuns", trigger, methods=["POST"]),
            Route("/api/v2/backfills", trigger, methods=["POST"]),
        ]
    )
    app.add_middleware(TriggerConfCheck)
    return app


AUTH = {"Authorization": "Bearer x"}


def test_middleware_answers_400_before_the_route(deployment, monkeypatch):
    monkeypatch.chdir(deployment)
    calls: list = []
    client = TestClient(route_app(calls))
    body = {"logical_date": None, "conf": {"slurm_nodes": 10000}}
    answer = client.post("/api/v2/dags/ffjobs_pipeline/dagRuns", json=body, headers=AUTH)
    assert answer.status_code == 400
    assert "slurm_nodes" in answer.json()["detail"]
    assert calls == []


def test_middleware_passes_a_valid_conf_with_its_body_intact(deployment, monkeypatch):
    monkeypatch.chdir(deployment)
    calls: list = []
    client = TestClient(route_app(calls))
    body = {"logical_date": None, "conf": {"config": "mine", "train_steps": 3}}
    answer = client.post("/api/v2/dags/ffjobs_pipeline/dagRuns", json=body, headers=AUTH)
    assert answer.status_code == 200
    assert calls == [body]


def test_middleware_leaves_other_dags_and_anonymous_calls_to_the_route(deployment, monkeypatch):
    monkeypatch.chdir(deployment)
    calls: list = []
    client = TestClient(route_app(calls))
    bad = {"logical_date": None, "conf": {"unknown_key": 1}}
    assert client.post("/api/v2/dags/other/dagRuns", json=bad, headers=AUTH).status_code == 200
    assert client.post("/api/v2/dags/ffjobs_pipeline/dagRuns", json=bad).status_code == 200
    assert len(calls) == 2


def test_middleware_checks_a_backfills_run_conf(deployment, monkeypatch):
    monkeypatch.chdir(deployment)
    calls: list = []
    client = TestClient(route_app(calls))
    body = {"dag_id": "ffjobs_pipeline", "dag_run_conf": {"overrides": ["runs_dir=/x"]}}
    answer = client.post("/api/v2/backfills", json=body, headers=AUTH)
    assert answer.status_code == 400
    assert answer.json()["detail"].startswith("conf: overrides[0]: ")
    other = {"dag_id": "other", "dag_run_conf": {"overrides": ["runs_dir=/x"]}}
    assert client.post("/api/v2/backfills", json=other, headers=AUTH).status_code == 200
    assert calls == [other]


def test_middleware_refuses_a_huge_body_unread(deployment, monkeypatch):
    monkeypatch.chdir(deployment)
    calls: list = []
    client = TestClient(route_app(calls))
    huge = json.dumps({"conf": {"overrides": ["x" * (2 << 20)]}})
    answer = client.post(
        "/api/v2/dags/ffjobs_pipeline/dagRuns",
        content=huge,
        headers={**AUTH, "content-type": "application/json"},
    )
    assert answer.status_code == 413
    assert calls == []


def test_the_plugin_registers_the_middleware():
    (entry,) = FfjobsPlugin.fastapi_root_middlewares
    assert entry["middleware"] is TriggerConfCheck
    from importlib.metadata import entry_points

    (point,) = [p for p in entry_points(group="airflow.plugins") if p.name == "ffjobs"]
    assert point.load() is FfjobsPlugin


def test_every_guarded_key_is_a_key_of_the_config():
    """A misspelt key in these lists would leave the real key unguarded."""
    from ffjobs.airflow.trigger_conf import DEPLOYMENT_KEYS, PATH_KEYS
    from ffjobs.config import load_config

    config = load_config("local").to_dict()
    for key in PATH_KEYS | DEPLOYMENT_KEYS:
        node = config
        for part in key.split("."):
            assert isinstance(node, dict) and part in node, f"{key} is not a config key"
            node = node[part]


def test_overrides_that_only_hold_together_are_accepted(deployment):
    """pause_at_step and pause_until_file must be set together: each alone is refused by the
    typed config, both in one conf are fine."""
    from ffjobs.airflow.trigger_conf import check_trigger_conf

    pair = ["train.faults.pause_at_step=2", "train.faults.pause_until_file=never-there"]
    _, sets = check_trigger_conf({"overrides": pair}, deployment)
    assert sets == pair
    error = refusal({"overrides": pair[:1]}, deployment)
    assert error.key == "overrides[0]" and "set together" in str(error)
