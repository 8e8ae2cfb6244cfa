"""Each redaction rule on its own: URL userinfo in any scheme, credential assignments, values
remembered from the resolved config and read from the environment, replaced wherever they
appear; and what is left alone."""

from __future__ import annotations

import time

import pytest

from ffjobs.config import load_config
from ffjobs.tracking.known_secrets import environment_secrets, forget_secrets, known_secrets
from ffjobs.tracking.redact import (
    REDACTED,
    redact_document,
    redact_mapping,
    redact_text,
    remember_config_secrets,
    remember_secret,
)


@pytest.fixture(autouse=True)
def _no_remembered_secrets():
    forget_secrets()
    yield
    forget_secrets()


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("http://user:pw0rd@host:5000/x", "http://user:***@host:5000/x"),
        ("see https://u:p@ss@host/#/runs here", "see https://u:***@host/#/runs here"),
        ("s3://key:S3CRET@bucket/faces", "s3://key:***@bucket/faces"),
        ("postgresql+psycopg://ml:db-pass@db:5432/mlflow", "postgresql+psycopg://ml:***@db:5432/mlflow"),
        ("mysql://root:x@127.0.0.1/db", "mysql://root:***@127.0.0.1/db"),
        ("https://ghp_tokentoken@github.com/o/r", "https://***@github.com/o/r"),
        ('{"uri": "http://a:b@h"}, "x@y"', '{"uri": "http://a:***@h"}, "x@y"'),
    ],
)  # fmt: skip
def test_url_userinfo_is_redacted_in_any_scheme(text, expected):
    assert redact_text(text) == expected


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("export AWS_SECRET_ACCESS_KEY=abc123XYZ", "export AWS_SECRET_ACCESS_KEY=***"),
        ("MLFLOW_TRACKING_PASSWORD='hunter 22' ./x", "MLFLOW_TRACKING_PASSWORD=*** ./x"),
        ('TOKEN="a b c"; echo ok', "TOKEN=***; echo ok"),
        ("login --password s3cr3t --user bob", "login --password *** --user bob"),
        ("login --api-key=s3cr3t", "login --api-key=***"),
        ("GET /x?api_key=abcd&page=2", "GET /x?api_key=***&page=2"),
    ],
)  # fmt: skip
def test_credential_assignments_lose_their_value(text, expected):
    assert redact_text(text) == expected


@pytest.mark.parametrize(
    "text",
    [
        "train.lr=0.0002 data.source=runs/data author=Ada",
        "the token bucket refills",  # prose: a word after a credential-like word is not a value
        "s3://bucket/faces/id@2x.png",  # an @ after the path is no userinfo
        "mail ada@example.org",
    ],
)
def test_ordinary_text_is_left_alone(text):
    assert redact_text(text) == text


def test_a_remembered_value_is_replaced_wherever_it_appears():
    remember_secret("Pl41nS1ght")
    assert redact_text("error: host said Pl41nS1ght twice: Pl41nS1ght") == (
        "error: host said *** twice: ***"
    )
    remember_secret("abc")  # too short to replace inside text: it would blank out words
    remember_secret("true")  # a flag's value says nothing secret
    assert redact_text("abc is true") == "abc is true"


def test_the_config_secrets_are_remembered_from_every_field():
    config = load_config(
        "local",
        [
            "tracking.tracking_uri=http://user:S3CRETPW1@127.0.0.1:5050",
            "s3.endpoint_url=http://key:S3CRETPW2@127.0.0.1:9000",
            'slurm.setup=["module load cuda", "export AWS_SECRET_ACCESS_KEY=S3CRETPW3"]',
            'slurm.env={"MY_TOKEN": "S3CRETPW4", "NCCL_SOCKET_IFNAME": "eth0"}',
        ],
    )
    remember_config_secrets(config)
    assert {f"S3CRETPW{i}" for i in range(1, 5)} <= set(known_secrets())
    # later, each is redacted without its key: in an error message, a traceback
    assert redact_text("denied for S3CRETPW1, S3CRETPW2, S3CRETPW3 and S3CRETPW4") == (
        "denied for ***, ***, *** and ***"
    )
    assert "eth0" not in known_secrets() and redact_text("eth0") == "eth0"


def test_a_percent_encoded_url_password_is_remembered_decoded_too():
    remember_config_secrets({"tracking": {"tracking_uri": "http://u:p%40ss%2Fw0rd@host"}})
    assert redact_text("bad password p@ss/w0rd") == "bad password ***"


def test_the_environment_secrets_are_redacted(monkeypatch):
    monkeypatch.setenv("MLFLOW_TRACKING_PASSWORD", "S3CRETPW5")
    monkeypatch.setenv("MLFLOW_TRACKING_TOKEN", "tok-S3CRETPW6")
    monkeypatch.setenv("MY_SERVICE_API_KEY", "S3CRETPW7")
    monkeypatch.setenv("AIRFLOW__DATABASE__SQL_ALCHEMY_CONN", "postgresql://af:S3CRETPW8@db/af")
    monkeypatch.setenv("FFJOBS_PLAIN", "S3CRETPW9-not-secret")
    found = environment_secrets()
    assert {"S3CRETPW5", "tok-S3CRETPW6", "S3CRETPW7", "S3CRETPW8"} <= found
    assert "S3CRETPW9-not-secret" not in found
    text = "S3CRETPW5 tok-S3CRETPW6 S3CRETPW7 S3CRETPW8"
    assert redact_text(text) == "*** *** *** ***"


def test_params_and_documents_redact_by_value_as_well_as_by_key():
    remember_secret("S3CRETPW4")
    params = {
        "tracking.tracking_uri": "http://user:S3CRETPW1@h:1",
        "slurm.setup": "['export AWS_SECRET_ACCESS_KEY=S3CRETPW3']",
        "slurm.env.MY_TOKEN": "S3CRETPW4",
        "note": "with S3CRETPW4",
    }
    assert redact_mapping(params) == {
        "tracking.tracking_uri": "http://user:***@h:1",
        "slurm.setup": "['export AWS_SECRET_ACCESS_KEY=***']",
        "slurm.env.MY_TOKEN": REDACTED,
        "note": "with ***",
    }
    doc = {"slurm": {"setup": ["export TOKEN=S3CRETPW3"], "env": {"MY_TOKEN": "x"}}, "n": 3}
    assert redact_document(doc) == {
        "slurm": {"setup": ["export TOKEN=***"], "env": {"MY_TOKEN": REDACTED}},
        "n": 3,
    }


def test_redaction_is_linear_in_the_text():
    """A megabyte of text that nearly matches every rule is redacted in well under a second on
    any machine (a quadratic rule would take minutes); the bound is generous for a busy one."""
    remember_secret("S3CRETPW1")
    text = ("a.b.c.d" * 50_000) + " --token " + ("x" * 300_000) + (" http://" + "u" * 300_000)
    started = time.perf_counter()
    redact_text(text)
    assert time.perf_counter() - started < 10
