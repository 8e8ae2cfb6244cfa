"""The mini-cluster's nodes talk over real links: tasks of one job on node1 and node2, driven
through files in a shared folder, while the test cuts and throttles node2's link.

The task on node2 listens on its own address; the task on node1 runs the probes the test writes
(``cmd-<i>.json``) and answers each in ``result-<i>.json``. Traffic stays between the nodes'
addresses and the host's bridge address.
"""

from __future__ import annotations

import json
import os
import socket
import sys
import time
import urllib.request
from pathlib import Path

import cloudpickle
import pytest

from ffjobs.config import load_config
from ffjobs.slurm.drills import cut_link, throttled_link
from ffjobs.slurm.executor import make_executor

pytestmark = pytest.mark.integration

cloudpickle.register_pickle_by_value(sys.modules[__name__])

SERVER_NODE, CLIENT_NODE = "node2", "node1"
BULK_BYTES = 2 * 2**20  # 2 s at 8 Mbit/s, milliseconds unthrottled
TASK_LIFETIME_S = 300.0  # the tasks give up on their own if the test never says stop


def write_atomically(path: Path, text: str) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(text)
    tmp.rename(path)


def own_address(bridge_addr: str) -> str:
    """The source address this node uses towards the bridge (a UDP connect sends nothing)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        sock.connect((bridge_addr, 9))
        return sock.getsockname()[0]


def read_line(conn: socket.socket) -> bytes:
    line = b""
    while not line.endswith(b"\n"):
        chunk = conn.recv(1)
        if not chunk:
            raise ConnectionError("peer closed")
        line += chunk
    return line


def serve(wire: Path, address: str, deadline: float) -> None:
    """node2: answer ``ping`` with ``pong`` and ``bulk N`` (then N bytes) with ``ok N``."""
    with socket.create_server((address, 0)) as server:
        server.settimeout(0.5)
        write_atomically(wire / "port", str(server.getsockname()[1]))
        while not (wire / "stop").exists() and time.monotonic() < deadline:
            try:
                conn, _ = server.accept()
            except TimeoutError:
                continue
            with conn:
                conn.settimeout(30)
                try:
                    request = read_line(conn).split()
                    if request[0] == b"ping":
                        conn.sendall(b"pong\n")
                    elif request[0] == b"bulk":
                        left = int(request[1])
                        while left > 0:
                            chunk = conn.recv(min(left, 65536))
                            if not chunk:
                                raise ConnectionError("peer closed mid-transfer")
                            left -= len(chunk)
                        conn.sendall(b"ok %d\n" % int(request[1]))
                except (OSError, IndexError, ValueError):
                    continue  # a probe that failed on purpose (cut link) must not stop the server


def probe(command: dict, server: tuple[str, int]) -> dict:
    """node1: one probe; ``ok`` and the error say what happened, ``seconds`` how long it took."""
    started = time.monotonic()
    try:
        if command["op"] == "http":
            with urllib.request.urlopen(command["url"], timeout=command["timeout"]) as response:
                ok = response.status == 200
        else:
            with socket.create_connection(server, timeout=command["timeout"]) as conn:
                if command["op"] == "ping":
                    conn.sendall(b"ping\n")
                    ok = read_line(conn) == b"pong\n"
                else:
                    conn.sendall(b"bulk %d\n" % command["bytes"])
                    conn.sendall(b"\0" * command["bytes"])
                    ok = read_line(conn) == b"ok %d\n" % command["bytes"]
        error = ""
    except OSError as exc:
        ok, error = False, f"{type(exc).__name__}: {exc}"
    return {"ok": ok, "error": error, "seconds": time.monotonic() - started}


def run_probes(wire: Path, deadline: float) -> None:
    while not (wire / "port").exists():
        if time.monotonic() > deadline:
            return
        time.sleep(0.05)
    server = ((wire / f"addr-{SERVER_NODE}").read_text(), int((wire / "port").read_text()))
    index = 0
    while not (wire / "stop").exists() and time.monotonic() < deadline:
        command_file = wire / f"cmd-{index}.json"
        if not command_file.exists():
            time.sleep(0.05)
            continue
        result = probe(json.loads(command_file.read_text()), server)
        write_atomically(wire / f"result-{index}.json", json.dumps(result))
        index += 1


def drill_task(wire_dir: str, bridge_addr: str) -> dict:
    """Each task of the job: publish this node's address, then serve (node2) or probe (node1)."""
    wire = Path(wire_dir)
    node = os.environ["SLURMD_NODENAME"]
    address = own_address(bridge_addr)
    write_atomically(wire / f"addr-{node}", address)
    deadline = time.monotonic() + TASK_LIFETIME_S
    if node == SERVER_NODE:
        serve(wire, address, deadline)
    else:
        run_probes(wire, deadline)
    return {"node": node, "address": address}


class Wire:
    """The test's side of the shared folder: numbered probes for the task on node1."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.next_index = 0

    def wait_for(self, name: str, timeout_s: float) -> Path:
        path = self.folder / name
        deadline = time.monotonic() + timeout_s
        while not path.exists():
            assert time.monotonic() < deadline, f"no {name} from the job within {timeout_s:g} s"
            time.sleep(0.1)
        return path

    def probe(self, op: str, timeout_s: float = 5.0, **fields) -> dict:
        index = self.next_index
        self.next_index += 1
        command = {"op": op, "timeout": timeout_s, **fields}
        write_atomically(self.folder / f"cmd-{index}.json", json.dumps(command))
        # Probes time out on their own; the margin covers a slow-polling task on a busy host.
        return json.loads(self.wait_for(f"result-{index}.json", timeout_s + 30).read_text())

    def ping_until_ok(self, attempts: int = 10) -> dict:
        for _ in range(attempts):
            result = self.probe("ping", timeout_s=2.0)
            if result["ok"]:
                return result
            time.sleep(0.5)
        raise AssertionError(f"node1 still cannot reach node2 after {attempts} pings: {result}")


@pytest.fixture(scope="module")
def drill(tmp_path_factory, local_stack):
    """One job on node1 and node2 running ``drill_task``; yields (wire, job, stack env)."""
    folder = tmp_path_factory.mktemp("network-drill")
    wire = Wire(folder / "wire")
    wire.folder.mkdir()
    cfg = load_config(None, [
        "slurm.executor=slurm", "slurm.partition=debug", "slurm.nodes=2",
        "slurm.tasks_per_node=1", "slurm.cpus_per_task=1", "slurm.mem_gb=0.5",
        "slurm.time_min=10", f"slurm.folder={folder / 'submitit'}", "slurm.exclude=[node3]",
    ])  # fmt: skip
    job = make_executor(cfg, run_id="it-network", attempt=0).submit(
        drill_task, str(wire.folder), local_stack["FFJOBS_BRIDGE_ADDR"]
    )
    try:
        wire.wait_for("port", timeout_s=120)
        wire.wait_for(f"addr-{CLIENT_NODE}", timeout_s=30)
        yield wire, job, local_stack
    finally:
        (wire.folder / "stop").touch()
        deadline = time.monotonic() + 60
        while not job.done() and time.monotonic() < deadline:
            time.sleep(0.5)
        if not job.done():
            job.cancel(check=False)


def node_addrs(stack: dict[str, str]) -> dict[str, str]:
    return dict(pair.split("=", 1) for pair in stack["FFJOBS_NODE_ADDRS"].split())


def test_tasks_on_two_nodes_see_their_own_addresses(drill):
    wire, _, stack = drill
    seen = {node: (wire.folder / f"addr-{node}").read_text() for node in (CLIENT_NODE, SERVER_NODE)}
    assert seen[CLIENT_NODE] != seen[SERVER_NODE]
    expected = node_addrs(stack)
    assert seen == {node: expected[node] for node in seen}


def test_task_on_node1_reaches_node2_and_the_tracking_server(drill):
    wire, _, stack = drill
    assert wire.probe("ping")["ok"]
    health = wire.probe("http", url=f"{stack['FFJOBS_NODE_TRACKING_URI']}/health")
    assert health["ok"], health["error"]


def test_cut_link_fails_connections_until_restored(drill):
    wire, _, _ = drill
    wire.ping_until_ok()
    with cut_link(SERVER_NODE):
        started = time.monotonic()
        result = wire.probe("ping", timeout_s=3.0)
        assert not result["ok"], "node2 answered through a cut link"
        assert result["seconds"] < 10 and time.monotonic() - started < 20
    assert wire.ping_until_ok()["ok"]


def test_throttled_link_slows_a_bulk_transfer(drill):
    wire, _, _ = drill
    wire.ping_until_ok()
    fast = wire.probe("bulk", timeout_s=20.0, bytes=BULK_BYTES)
    assert fast["ok"], fast["error"]
    with throttled_link(SERVER_NODE, "8mbit"):
        slow = wire.probe("bulk", timeout_s=20.0, bytes=BULK_BYTES)
    assert slow["ok"], slow["error"]
    # 2 MiB at 8 Mbit/s takes about 2.1 s; unthrottled, a few milliseconds.
    assert slow["seconds"] > 1.5, slow
    assert slow["seconds"] > 5 * fast["seconds"], (fast, slow)
    after = wire.probe("bulk", timeout_s=20.0, bytes=BULK_BYTES)
    assert after["ok"] and after["seconds"] < slow["seconds"] / 3, (after, slow)


def test_job_ends_cleanly_when_told_to_stop(drill):
    wire, job, stack = drill
    (wire.folder / "stop").touch()
    deadline = time.monotonic() + 60
    while not job.done():
        assert time.monotonic() < deadline, f"job {job.job_id} still {job.state} after stop"
        time.sleep(0.5)
    results = job.results()
    expected = node_addrs(stack)
    assert sorted((r["node"], r["address"]) for r in results) == sorted(
        (node, expected[node]) for node in (CLIENT_NODE, SERVER_NODE)
    )
