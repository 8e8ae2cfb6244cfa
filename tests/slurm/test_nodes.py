"""SLURM node lists expand as ``scontrol show hostnames`` does; node names map to addresses."""

from __future__ import annotations

import socket
import subprocess

import pytest

from ffjobs.slurm import nodes
from ffjobs.slurm.nodes import NodeListError, expand_nodelist, first_node, node_address


@pytest.mark.parametrize(
    ("text", "names"),
    [
        ("single", ["single"]),
        ("gpu1,gpu2", ["gpu1", "gpu2"]),
        ("node[1-3]", ["node1", "node2", "node3"]),
        ("node[1-3,7],gpu-a[01-02]", ["node1", "node2", "node3", "node7", "gpu-a01", "gpu-a02"]),
        ("gpu[08-10],login", ["gpu08", "gpu09", "gpu10", "login"]),
        ("rack1-n[010-012]", ["rack1-n010", "rack1-n011", "rack1-n012"]),
        ("n[8-10]", ["n8", "n9", "n10"]),  # no padding unless written
        ("a[1,3-4],b7", ["a1", "a3", "a4", "b7"]),
        ("node[5]", ["node5"]),
        ("node[1-2]-ib", ["node1-ib", "node2-ib"]),
        ("rack[1-2]-gpu[07-08]", ["rack1-gpu07", "rack1-gpu08", "rack2-gpu07", "rack2-gpu08"]),
        ("r[1-2]n[1,3]-ib,login", ["r1n1-ib", "r1n3-ib", "r2n1-ib", "r2n3-ib", "login"]),
        ("dgx-h200-[001-002].cluster", ["dgx-h200-001.cluster", "dgx-h200-002.cluster"]),
        (" node[1-2] ", ["node1", "node2"]),
        ("", []),
    ],
)
def test_expand_nodelist_golden(text, names):
    assert expand_nodelist(text) == names


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ("node[1-3", r"'\[' without '\]'"),
        ("node1-3]", r"'\]' without '\['"),
        ("node[3-1]", "runs backwards"),
        ("node[a-b]", "bad range 'a-b'"),
        ("node[1-]", "bad range '1-'"),
        ("node[[1]]", "nested"),
    ],
)
def test_malformed_nodelist_names_the_list_and_the_fault(text, why):
    with pytest.raises(NodeListError, match=why) as info:
        expand_nodelist(text)
    assert repr(text) in str(info.value)


def test_first_node_is_the_rendezvous_host():
    assert first_node("gpu[07-08],login") == "gpu07"
    with pytest.raises(NodeListError, match="names no node"):
        first_node("")


def test_node_address_keeps_a_resolvable_name(monkeypatch):
    monkeypatch.setattr(nodes.socket, "gethostbyname", lambda name: "10.0.0.7")
    monkeypatch.setattr(nodes.subprocess, "run", _fail_if_called)
    assert node_address("gpu07") == "gpu07"


def test_node_address_falls_back_to_slurm_node_addr(monkeypatch):
    calls = []

    def scontrol(argv, **kwargs):
        calls.append(argv)
        line = "NodeName=c1 Arch=x86_64 NodeAddr=10.1.2.3 NodeHostName=c1 State=IDLE\n"
        return subprocess.CompletedProcess(argv, 0, stdout=line)

    monkeypatch.setattr(nodes.socket, "gethostbyname", _unresolvable)
    monkeypatch.setattr(nodes.subprocess, "run", scontrol)
    assert node_address("c1") == "10.1.2.3"
    assert calls == [["scontrol", "show", "node", "c1", "-o"]]


def test_node_address_without_scontrol_is_the_name(monkeypatch):
    def missing(*args, **kwargs):
        raise FileNotFoundError("scontrol")

    monkeypatch.setattr(nodes.socket, "gethostbyname", _unresolvable)
    monkeypatch.setattr(nodes.subprocess, "run", missing)
    assert node_address("c1") == "c1"


def _unresolvable(name):
    raise socket.gaierror(f"unknown host {name}")


def _fail_if_called(*args, **kwargs):
    raise AssertionError("scontrol must not run for a resolvable name")


@pytest.mark.parametrize("job_id", ["0", "19699", "39699", "123456789", "4711_3", "987654321012"])
def test_a_jobs_rendezvous_port_is_never_one_the_kernel_hands_out(job_id):
    # srun took 39700 for its own connection on the first node of the job that meant to listen
    # there; Linux hands out local ports from 32768 up by default
    low, high = nodes.RENDEZVOUS_PORTS
    assert low <= nodes.job_port(job_id) < high <= 32768
    assert nodes.job_port(job_id) == nodes.job_port(job_id)  # every node derives the same one


def test_jobs_next_to_each_other_meet_on_different_ports():
    ports = {nodes.job_port(job) for job in range(1000, 1100)} | {nodes.job_port("1000_1")}
    assert len(ports) == 101
