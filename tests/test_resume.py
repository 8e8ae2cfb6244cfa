"""``--resume`` with ``--set``: a change takes effect (a new learning rate reaches the optimizer,
MLflow records it with the step) or is refused with nothing changed; ``config.json`` stays the
config the run was started with and each resume's changes are recorded beside it."""

from __future__ import annotations

import dataclasses
import json
import typing
from pathlib import Path

import pytest
from train.helpers import TINY_MODEL  # tests/ is on sys.path (rootdir conftest)

from ffjobs.cli import main
from ffjobs.config import Config, load_config
from ffjobs.errors import UserError
from ffjobs.runs.resume_rules import ON_RESUME, config_fields, rule_for
from ffjobs.runs.run import create_run, finish_run, load_record, resume_run, resumed_config


def _sections(cls: type, prefix: str = "") -> set[str]:
    """Every section of the config (a dataclass field), by dotted path."""
    out = set()
    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        if dataclasses.is_dataclass(hints[f.name]):
            out.add(prefix + f.name)
            out |= _sections(hints[f.name], f"{prefix}{f.name}.")
    return out


def test_every_config_field_has_a_rule_and_every_rule_names_a_field_or_section():
    fields = config_fields(Config())
    unlisted = [key for key in fields if rule_for(key) is rule_for("no_such_key")]
    assert unlisted == []
    stale = set(ON_RESUME) - set(fields) - _sections(Config)
    assert stale == set()
    assert rule_for("train.lr").takes_effect and not rule_for("train.seed").takes_effect
    assert (
        not rule_for("model.width").takes_effect and rule_for("model.losses.identity").takes_effect
    )


def _config() -> Config:
    """The embedded default without tracking: its runs go to ``runs/`` of the test's folder,
    where ``resumed_config`` and the Airflow task look for them."""
    return load_config(None, ["tracking.enabled=false"])


def _files(run_dir: Path) -> tuple[bytes, bytes]:
    return (run_dir / "config.json").read_bytes(), (run_dir / "run.json").read_bytes()


def test_resumes_are_recorded_beside_the_original_config_and_make_the_run_config():
    run = create_run(_config(), key="tuned", echo=lambda line: None)
    finish_run(run, "FINISHED")
    original = (run.dir / "config.json").read_bytes()

    lines: list[str] = []
    config = resumed_config("tuned", ["train.lr=3e-3", "train.steps=400"])
    resume_run("tuned", config, echo=lines.append)
    config = resumed_config("tuned", ["train.lr=5e-4"])
    resume_run("tuned", config, echo=lines.append)
    config = resumed_config("tuned", [])
    resume_run("tuned", config, echo=lines.append)  # nothing changed: no resume recorded

    assert (run.dir / "config.json").read_bytes() == original
    record, effective = load_record(run.dir)
    assert [(r["pass"], r["overrides"], r["step"]) for r in record["resumes"]] == [
        (2, {"train.lr": 0.003, "train.steps": 400}, None),
        (3, {"train.lr": 0.0005}, None),
    ]
    assert record["passes"] == 4
    assert (effective.train.lr, effective.train.steps) == (0.0005, 400)
    assert resumed_config("tuned", []).train.lr == 0.0005
    assert lines == [
        "run tuned resumed with train.steps=400, train.lr=0.003 (pass 2)",
        "run tuned resumed with train.lr=0.0005 (pass 3)",
    ]


@pytest.mark.parametrize(
    ("override", "says"),
    [
        ("train.seed=3", "train.seed is 3 but the run was started with 0; the data order"),
        ("train.batch_size=16", "train.batch_size is 16 but the run was started with 8"),
        ("model.width=48", "model.width is 48 but the run was started with 32; its checkpoints"),
        ("train.checkpoint_dir=elsewhere", "train.checkpoint_dir is 'elsewhere' but"),
    ],
)
def test_a_change_that_cannot_take_effect_is_refused_with_nothing_changed(tmp_path, override, says):
    run = create_run(_config(), key="fixed", echo=lambda line: None)
    finish_run(run, "FINISHED")
    before = _files(run.dir)
    config = resumed_config("fixed", ["train.lr=1e-3", override])
    with pytest.raises(UserError) as refused:
        resume_run("fixed", config, echo=lambda line: None)
    message = str(refused.value)
    assert says in message and "cannot change on resume" in message, message
    assert "\n" not in message and "train.lr" not in message  # the change that may, unnamed
    assert _files(run.dir) == before


def test_the_airflow_resume_param_is_refused_by_the_same_rules(tmp_path):
    from airflow.sdk.exceptions import AirflowFailException

    from ffjobs.airflow import tasks

    run = create_run(_config(), key="dag-run", echo=lambda line: None)
    finish_run(run, "FINISHED")
    before = _files(run.dir)
    params = {"config": "local", "resume": "dag-run"}
    assert tasks.config_from_params({**params, "train_lr": 1e-3}).train.lr == 0.001
    with pytest.raises(AirflowFailException, match=r"run: --resume dag-run: train\.seed is 3"):
        tasks.validate({**params, "train_lr": 1e-3, "overrides": ["train.seed=3"]})
    assert _files(run.dir) == before


@pytest.mark.slow  # two launches of two ranks: about 50 s on a busy 2-core machine
def test_a_new_learning_rate_reaches_the_optimizer_and_mlflow_with_its_step(tmp_path, capsys):
    """The acceptance: a real 2-rank CPU run, resumed with ``--set train.lr``."""
    from mlflow.tracking import MlflowClient

    from ffjobs.train.checkpoint import Checkpointer

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    sets = [
        *TINY_MODEL,
        "train.batch_size=2",
        "train.steps=4",
        "train.log_every=2",
        "train.checkpoint_every=2",
        "train.lr_schedule=constant",  # the optimizer's rate at step 6 is the rate set
        "train.progress=false",
        "model.identity_weights=null",
        f"tracking.tracking_uri={uri}",
        "tracking.system_metrics_interval_s=0",
    ]
    args = [arg for override in sets for arg in ("--set", override)]
    assert main(["train", "--nproc", "2", "--data", "memory", "--json", *args]) == 0
    key = json.loads(capsys.readouterr().out)["run_key"]
    run_dir = tmp_path / "runs" / key
    before = _files(run_dir)

    # refused: exit 2, one line naming the field and why, nothing changed
    resume = ["run", "--resume", key, "--stages", "train"]
    assert main([*resume, "--set", "train.lr=3e-3", "--set", "train.seed=3"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "train.seed is 3 but the run was started with 0" in err, err
    assert _files(run_dir) == before

    assert main([*resume, "--json", "--set", "train.lr=3e-3", "--set", "train.steps=6"]) == 0
    train = json.loads(capsys.readouterr().out)["stages"][-1]
    assert train["status"] == "passed" and "steps 4 -> 6" in train["summary"], train
    assert (run_dir / "config.json").read_bytes() == before[0]  # the original config stays
    record, config = load_record(run_dir)
    assert [(r["pass"], r["overrides"], r["step"]) for r in record["resumes"]] == [
        (2, {"train.lr": 0.003, "train.steps": 6}, 4)
    ]
    assert (config.train.lr, config.train.steps) == (0.003, 6)

    # the optimizer trained at the new rate: its state in the step-6 checkpoint says so
    ref, state = Checkpointer(str(tmp_path / "runs" / "checkpoints" / key)).load_latest()
    assert ref.step == 6
    generator = state["optimizer_state"]["generator"]
    assert [g["lr"] for g in generator["optimizer"]["param_groups"]] == [0.003]
    assert generator["scheduler"]["base_lrs"] == [0.003]
    discriminator = state["optimizer_state"]["discriminator"]["optimizer"]
    assert [g["lr"] for g in discriminator["param_groups"]] == [0.001]  # not changed

    client = MlflowClient(uri)
    tracked = client.get_run(record["mlflow_run_id"])
    assert tracked.data.params["train.lr"] == "0.001"  # what the run was started with
    assert tracked.data.params["resume.2.train.lr"] == "0.003"
    assert tracked.data.params["resume.2.train.steps"] == "6"
    assert tracked.data.tags["ffjobs.resume.2.step"] == "4"
    lr = [(m.step, m.value) for m in client.get_metric_history(tracked.info.run_id, "lr")]
    assert lr == [(2, 0.001), (4, 0.001), (6, 0.003)]

    assert main(["runs", "show", key]) == 0
    shown = capsys.readouterr().out
    assert "pass 2: train.steps=6, train.lr=0.003 (in effect from step 4)" in shown
