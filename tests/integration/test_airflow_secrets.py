"""The ``ffjobs_pipeline`` DAG (``dag.test()``, real Airflow metadata database, real MLflow
server) with secrets in the deployment's config (tracking URI, S3 endpoint, ``slurm.setup``,
``slurm.env``: the keys a DAG run's conf may not set) and in the task environment: no XCom value
and no line of the task output holds one."""

from __future__ import annotations

import json

import pytest
from integration.test_airflow_dag import (  # noqa: F401 - a fixture
    ONE_DAG_RUN_LIMIT_S,
    TINY,
    airflow_env,
    dag_test,
)
from tracking.test_secrets_acceptance import SECRETS, secret_environment

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def deployment_config(tmp_path, tracking_host: str) -> str:
    """S3CRETPW1..4 in the deployment's own config, each the way an operator would write it."""
    host = tracking_host.removeprefix("http://")
    (tmp_path / "configs").mkdir()
    (tmp_path / "configs" / "secrets.yaml").write_text(
        "extends: local\n"
        f"tracking:\n  tracking_uri: http://user:S3CRETPW1@{host}\n"
        "  experiment: airflow-secrets\n"
        "s3:\n  endpoint_url: http://key:S3CRETPW2@127.0.0.1:9\n"  # never called: local data
        "slurm:\n"
        '  setup: ["module load cuda", "export AWS_SECRET_ACCESS_KEY=S3CRETPW3"]\n'
        "  env: {MY_TOKEN: S3CRETPW4, NCCL_DEBUG: WARN}\n"
    )
    return "secrets"


@pytest.mark.timeout(ONE_DAG_RUN_LIMIT_S)
def test_no_secret_in_xcom_or_the_task_log(airflow_env, tmp_path, mlflow_server):  # noqa: F811
    conf = {
        "config": deployment_config(tmp_path, mlflow_server.uri),
        "train_steps": 4,
        "overrides": TINY,
    }
    env = {**secret_environment(), **airflow_env}
    result, log = dag_test(env, tmp_path, conf)
    assert result["state"] == "success", log[-4000:]
    xcom = json.dumps(result["xcom"])
    assert [secret for secret in SECRETS if secret in xcom] == [], xcom
    assert [secret for secret in SECRETS if secret in log] == [], log[-4000:]
    assert "[ passed] validate" in log  # the task output was captured: the grep saw it
