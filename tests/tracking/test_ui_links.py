"""MLflow UI links: real links into the model-training view for a server, plain text naming the
store for one without a UI, a password never shown."""

from __future__ import annotations

from ffjobs.config.tracking import TrackingConfig
from ffjobs.tracking.ui_links import (
    experiment_link,
    is_link,
    model_version_link,
    run_link,
)

SERVER = TrackingConfig(tracking_uri="http://mlflow.example:5000/")
STORE = TrackingConfig(tracking_uri="sqlite:///runs/mlflow.db")


def test_a_server_gets_links_that_open_the_model_training_view():
    assert run_link(SERVER, "abc", experiment_id="7") == (
        "http://mlflow.example:5000/#/experiments/7/runs/abc?workflowType=machine_learning"
    )
    assert experiment_link(SERVER, "7") == (
        "http://mlflow.example:5000/#/experiments/7/runs?workflowType=machine_learning"
    )
    assert model_version_link(SERVER, "face swap", 3) == (
        "http://mlflow.example:5000/#/models/face%20swap/versions/3"
    )
    assert is_link(run_link(SERVER, "abc", experiment_id="7"))


def test_a_store_without_a_ui_gets_text_that_is_not_a_link():
    for text in (
        run_link(STORE, "abc"),
        experiment_link(STORE, "7"),
        model_version_link(STORE, "m", 1),
    ):
        assert text.startswith("sqlite:///runs/mlflow.db (") and not is_link(text)
    assert run_link(STORE, "abc") == "sqlite:///runs/mlflow.db (run abc)"
    assert run_link(STORE, None) is None
    assert run_link(TrackingConfig(enabled=False, tracking_uri=STORE.tracking_uri), "abc") is None


def test_a_password_in_the_tracking_uri_is_never_in_a_link():
    tracking = TrackingConfig(tracking_uri="https://me:hunter2secret@mlflow.example")
    for text in (
        run_link(tracking, "abc", experiment_id="1"),
        model_version_link(tracking, "m", 1),
    ):
        assert "hunter2secret" not in text and text.startswith("https://")
