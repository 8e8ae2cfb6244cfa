"""The Airflow UI in headless Chromium (``browser.py``): what a person sees of ffjobs' trigger
form and, once the pipeline has its review task, of the review page. The checks read the DOM,
never pixels; each page's screenshot is kept under ``$FFJOBS_TEST_ARTIFACTS/browser/`` (the
README shows some of them, copied to ``docs/images/``).
"""

from __future__ import annotations

import fcntl
import threading
import time

import browser
import pytest
from airflow_stack import DAG_ID, DAG_RUN_TIMEOUT_S, START_TIMEOUT_S, AirflowStack
from browser import AirflowPage
from integration.test_airflow_review import (  # noqa: F401 - a fixture
    answer,
    hitl_path,
    review_conf,
    run_until_review,
    tracking_uri,
)

from ffjobs.airflow.form import SECTIONS
from ffjobs.config import load_config

pytestmark = [pytest.mark.integration, pytest.mark.slow]

RUNS = f"/api/v2/dags/{DAG_ID}/dagRuns"
AIRFLOW_OPTIONS = "Advanced Options"  # Airflow's own section of the trigger form (run id, conf)


def dag_params(stack: AirflowStack) -> dict:
    status, details = stack.get(f"/api/v2/dags/{DAG_ID}/details")
    assert status == 200, details
    return details["params"]


def run_ids(stack: AirflowStack) -> list[str]:
    status, body = stack.get(RUNS)
    assert status == 200, body
    return [run["dag_run_id"] for run in body["dag_runs"]]


def slug(title: str) -> str:
    return "-".join("".join(c if c.isalnum() else " " for c in title.lower()).split())


def test_without_chromium_a_browser_test_skips_saying_what_to_install_and_fails_under_ci(
    monkeypatch: pytest.MonkeyPatch,
):
    monkeypatch.setattr(browser.shutil, "which", lambda name: None)
    monkeypatch.delenv("CI", raising=False)
    with pytest.raises(pytest.skip.Exception, match="apt-get install chromium chromium-driver"):
        browser.chromium_paths()
    monkeypatch.setenv("CI", "true")
    with pytest.raises(pytest.fail.Exception, match="need chromium, chromium-driver"):
        browser.chromium_paths()


def test_a_browser_test_waits_for_the_chromium_install_in_flight(monkeypatch, tmp_path):
    """``make test`` installs Chromium beside the first tests: a browser test that comes first
    waits for ``infra/packages.sh`` (which holds its lock while installing), then finds it."""
    lock = tmp_path / "packages.lock"
    monkeypatch.setattr(browser, "PACKAGES_LOCK", lock)
    installed = threading.Event()
    monkeypatch.setattr(
        browser.shutil, "which", lambda name: f"/usr/bin/{name}" if installed.is_set() else None
    )
    with lock.open("w") as held:
        fcntl.flock(held, fcntl.LOCK_EX)  # the install in flight

        def install() -> None:
            time.sleep(0.5)
            installed.set()
            fcntl.flock(held, fcntl.LOCK_UN)

        installing = threading.Thread(target=install)
        installing.start()
        try:
            assert browser.chromium_paths() == ("/usr/bin/chromium", "/usr/bin/chromedriver")
        finally:
            installing.join()
    assert installed.is_set()


# --------------------------------------------------------------------------- the trigger form


def test_the_trigger_form_shows_its_sections_with_each_fields_bounds_and_preset_values(
    airflow_page: AirflowPage,
):
    params = dag_params(airflow_page.stack)
    dialog = airflow_page.open_trigger_form()
    assert airflow_page.section_titles() == [*SECTIONS, AIRFLOW_OPTIONS]
    rows = {}  # what each field's row shows, read while its section is open
    for title in SECTIONS:
        section = airflow_page.open_section(title)
        declared = [name for name, p in params.items() if p["schema"]["section"] == title]
        assert airflow_page.field_names(section) == declared, title
        rows |= {name: airflow_page.row(name) for name in declared}
        airflow_page.screenshot(f"trigger-form-{slug(title)}", dialog)
    for name, row in rows.items():
        assert row["label"] == params[name]["schema"]["title"], name
        assert row["help"] == params[name]["description"], name

    # the preset: a labelled choice, the default preset's label shown
    assert params["config"]["schema"]["values_display"]["local"] in rows["config"]["text"]
    # each number box says its bounds with their unit and the presets' values it keeps if empty
    local = load_config("local")
    assert "1 or more steps" in rows["train_steps"]["help"]
    assert f"{local.train.steps} in local" in rows["train_steps"]["help"]
    assert "1 to 1024 nodes" in rows["slurm_nodes"]["help"]
    assert f"{local.slurm.nodes} in local" in rows["slurm_nodes"]["help"]
    assert "GPUs per node" in rows["nproc"]["help"]
    # what may be left empty is not marked required
    for name in ("data_source", "force", "slurm_nodes", "train_steps", "resume", "overrides"):
        assert not rows[name]["required"], name
    assert rows["config"]["required"]


def test_the_trigger_form_refuses_an_out_of_range_value_naming_it_and_makes_no_run(
    airflow_page: AirflowPage,
):
    stack = airflow_page.stack
    before = run_ids(stack)
    dialog = airflow_page.open_trigger_form()
    airflow_page.open_section("How long")

    # kept as typed (Airflow's number box used to clamp 5 to 1 silently), refused on Trigger
    assert airflow_page.type_into("train_lr", "5") == "5"
    refusal = airflow_page.submit_trigger_form()
    assert "conf: train_lr: " in refusal and "must be <= 1" in refusal, refusal
    airflow_page.screenshot("trigger-form-refused", dialog)
    assert airflow_page.type_into("train_lr", "") == ""
    assert airflow_page.type_into("train_steps", "0") == "0"
    refusal = airflow_page.submit_trigger_form()
    assert "conf: train_steps: " in refusal and "must be >= 1" in refusal, refusal
    assert run_ids(stack) == before

    # a value in range goes through: the run's conf holds it as a number, the rest as the form
    # had them (empty fields as null)
    assert airflow_page.type_into("train_steps", "4") == "4"
    assert airflow_page.submit_trigger_form() == ""
    (made,) = [run for run in run_ids(stack) if run not in before]
    status, run = stack.get(f"{RUNS}/{made}")
    assert status == 200, run
    try:
        assert run["conf"]["train_steps"] == 4
        assert run["conf"]["config"] == "local"
        assert run["conf"]["train_lr"] is None
    finally:
        assert stack.delete(f"{RUNS}/{made}")[0] == 204


# --------------------------------------------------------------------------- the review page


@pytest.mark.timeout(START_TIMEOUT_S + DAG_RUN_TIMEOUT_S)  # the stack's start, one tiny DAG run
def test_the_review_page_offers_approve_and_reject_with_the_evaluation(
    airflow_stack_page: AirflowPage,
    tracking_uri: str,  # noqa: F811 - the fixture
):
    page = airflow_stack_page
    conf, model = review_conf(page.stack, tracking_uri)
    run_id, question = run_until_review(page.stack, conf)
    try:
        # the review's own page, where Required actions and the task's page lead
        page.open(f"/dags/{DAG_ID}/runs/{run_id}/tasks/review/required_actions?map_index=-1")
        for option in ("Approve", "Reject"):
            page.visible(browser.By.XPATH, f"//button[normalize-space()='{option}']", option)
        text = page.wait(
            lambda d: (
                (t := d.find_element(browser.By.TAG_NAME, "body").text) and "metric" in t and t
            ),
            "the question's body",
        )
        assert question["subject"] in text
        assert "this model" in text and "champion" in text  # the evaluation table
        page.screenshot("review-page")
    finally:
        answer(page.stack, run_id, "Reject", "seen in the browser test only")
    assert page.stack.get(hitl_path(run_id))[1]["chosen_options"] == ["Reject"]

    # the version's page in the MLflow UI: its card says what the review decided, and its links
    # lead to the training's MLflow run and to this DAG run in Airflow
    page.driver.get(f"{tracking_uri}/#/models/{model}/versions/1")
    card = page.text_with("Review state: rejected by admin", "seen in the browser test only",
                          what="the model card, rewritten by the review")  # fmt: skip
    run_key = card.split("Run key: ", 1)[1].split()[0]
    page.screenshot("mlflow-model-version")
    hrefs = [a.get_attribute("href") for a in page.driver.find_elements(browser.By.TAG_NAME, "a")]
    mlflow_run = next(h for h in hrefs if h and "/runs/" in h and h.startswith(tracking_uri))
    airflow_run = next(h for h in hrefs if h and h.startswith(f"{page.stack.url}/dags/{DAG_ID}/"))
    assert "workflowType=machine_learning" in mlflow_run
    page.driver.get(mlflow_run)
    page.text_with(run_key, what="the MLflow run the card links to")  # named by the run key
    page.driver.get(airflow_run)
    page.text_with(run_id, what="the Airflow DAG run the card links to")
