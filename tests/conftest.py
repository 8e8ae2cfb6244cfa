"""Fixtures shared across components: every test in its own working directory, a real
S3-compatible server and a real MLflow tracking server on loopback."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import group_end  # tests/ is on sys.path (rootdir conftest)
import pytest

from ffjobs.local_ranks import free_loopback_port

RUN_FOLDER = "FFJOBS_TEST_RUN_DIR"
"""The environment variable naming this test run's folder of inputs made once and shared by
every test (:func:`train.helpers.tiny_identity_weights`): set before any test runs, so that
pytest-xdist's workers, started later, inherit it."""
_MADE_RUN_FOLDER = pytest.StashKey[str]()


def pytest_configure(config: pytest.Config) -> None:
    _refuse_lost_groups(config)
    _scalar_compiled_kernels()
    _keep_freed_memory()
    _share_cores_between_workers()
    if RUN_FOLDER not in os.environ:  # a worker inherits its controller's
        os.environ[RUN_FOLDER] = tempfile.mkdtemp(prefix="ffjobs-test-run-")
        config.stash[_MADE_RUN_FOLDER] = os.environ[RUN_FOLDER]


def _refuse_lost_groups(config: pytest.Config) -> None:
    """Tests of one group on two workers at once cut each other's links and fight over the
    mini-cluster's nodes. pytest-xdist 3.8 groups by a suffix of the node id that pytest 9.2
    no longer reads (pytest-dev/pytest-xdist#1386): it would spread them without a word."""
    grouping = config.pluginmanager.hasplugin("xdist") and config.getoption("dist") == "loadgroup"
    if grouping and pytest.version_tuple[:2] >= (9, 2):
        raise pytest.UsageError(
            f"--dist loadgroup does not group tests under pytest {pytest.__version__} "
            "(pytest-dev/pytest-xdist#1386): install the pytest that pyproject.toml pins"
        )


def _scalar_compiled_kernels() -> None:
    """Inductor's C++ kernels (the CPU stand-in for the GPU's Triton ones) without SIMD, in this
    process and every one it starts: the compiled-training tests check what the trainer does
    with the compiler (regions, caches, DDP), not the CPU's vector code, and scalar kernels
    build in far less ``g++`` time (dev/README.md: scalar compiled kernels in the tests). The
    kernels are then the same on every CPU, whatever vector unit it has. Inductor reads this
    when its config is first imported: set before any test imports torch."""
    os.environ.setdefault("TORCHINDUCTOR_VEC_ISA_OK", "0")


MALLOC_SETTINGS = {
    "MALLOC_MMAP_THRESHOLD_": str(64 << 20),
    "MALLOC_TRIM_THRESHOLD_": str(128 << 20),
    "MALLOC_TOP_PAD_": str(64 << 20),
}
"""glibc's allocator in the processes the tests start (pytest-xdist's workers, started after
this, included): a buffer under 64 MB from the heap, not a fresh ``mmap``, and up to 128 MB
freed kept for the next use. The tests' models and batches are far smaller, so a training
step reuses memory instead of faulting in new zeroed pages: less system time, the same
arithmetic and bits (dev/README.md: glibc's allocator keeping freed memory in the tests)."""


def _keep_freed_memory() -> None:
    for name, value in MALLOC_SETTINGS.items():
        os.environ.setdefault(name, value)


def _share_cores_between_workers() -> None:
    """Under pytest-xdist, each worker's torch (and the trainers it starts, which inherit
    ``OMP_NUM_THREADS``) gets its share of the cores: two workers each running one thread per
    core would be four busy-waiting threads on two cores, slower than one worker."""
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    if workers < 2 or "OMP_NUM_THREADS" in os.environ:
        return
    threads = max(1, (os.cpu_count() or 1) // workers)
    os.environ["OMP_NUM_THREADS"] = str(threads)
    import torch  # noqa: PLC0415 - the variable alone is read at torch's import, maybe done

    torch.set_num_threads(threads)


def pytest_unconfigure(config: pytest.Config) -> None:
    made = config.stash.get(_MADE_RUN_FOLDER, None)
    if made:
        shutil.rmtree(made, ignore_errors=True)
        del os.environ[RUN_FOLDER]


@pytest.hookimpl(tryfirst=True)  # before xdist's own, which reads the marks into node ids
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if config.pluginmanager.hasplugin("xdist"):
        group_end.mark_groups(items)


def pytest_runtest_setup(item: pytest.Item) -> None:
    group_end.before_test(item)


@pytest.hookimpl(trylast=True)
def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None) -> None:
    group_end.after_test(item, nextitem)


@pytest.fixture(autouse=True)
def _own_working_directory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Relative defaults (runs/data, runs/models, runs/checkpoints) land in the test's temp dir,
    never in the checkout: a stale file there would change what the next run does."""
    monkeypatch.chdir(tmp_path)


@pytest.fixture(scope="session")
def s3_endpoint(tmp_path_factory: pytest.TempPathFactory):
    """A moto S3 server (a subprocess on 127.0.0.1) for the whole session; yields its URL."""
    executable = shutil.which("moto_server") or str(Path(sys.executable).parent / "moto_server")
    if not Path(executable).exists():
        pytest.skip("moto_server not installed (pip install 'moto[server]')")
    endpoint = f"http://127.0.0.1:{free_loopback_port()}"
    log = (tmp_path_factory.mktemp("moto") / "moto.log").open("w")
    process = subprocess.Popen(
        [executable, "-H", "127.0.0.1", "-p", endpoint.rsplit(":", 1)[1]],
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    deadline = time.monotonic() + 30
    while True:
        try:
            urllib.request.urlopen(endpoint, timeout=1)  # noqa: S310 - loopback only
            break
        except OSError:
            if process.poll() is not None or time.monotonic() > deadline:
                process.kill()
                pytest.fail(f"moto_server did not start on {endpoint}; see {log.name}")
            time.sleep(0.1)

    def stop() -> None:
        process.terminate()
        process.wait(timeout=10)

    group_end.stop_when_unused("s3_endpoint", stop)
    yield endpoint
    stop()


@pytest.fixture
def s3_env(s3_endpoint: str, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    """This test's environment pointed at the loopback server, with dummy credentials."""
    monkeypatch.setenv("AWS_ENDPOINT_URL", s3_endpoint)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    return dict(os.environ)


@pytest.fixture(scope="session")
def mlflow_server(tmp_path_factory: pytest.TempPathFactory):
    """A real ``mlflow server`` (sqlite store, proxied artifacts) for the session; yields its
    :class:`mlflow_server.MlflowServer` (``.uri``). Tests that stop it make their own."""
    from mlflow_server import MlflowServer  # tests/ is on sys.path (rootdir conftest)

    server = MlflowServer(tmp_path_factory.mktemp("mlflow")).start()
    group_end.stop_when_unused("mlflow_server", server.stop)
    yield server
    server.stop()
