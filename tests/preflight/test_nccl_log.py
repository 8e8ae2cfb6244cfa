from ffjobs.preflight.nccl_log import parse_nccl_log, parse_nccl_logs
from ffjobs.preflight.verdict import check_transports

from .conftest import DATA


def _parse(name):
    return parse_nccl_logs([DATA / name])


def test_p2p_excerpt_yields_intra_node_p2p_and_rank_hosts():
    log = _parse("nccl-p2p-excerpt.log")
    assert log.rank_hosts == {0: "vm", 1: "vm"}
    assert log.transports("intra") == {"P2P": {"P2P/CUMEM"}}
    assert log.transports("inter") == {}
    assert log.networks == {"vm": {"Socket"}}
    assert log.versions == {"vm": {"2.28.9+cuda13.0"}}


def test_socket_lines_with_send_receive_markers_are_parsed():
    log = _parse("nccl-socket-excerpt.log")
    assert log.transports("intra") == {"NET/Socket": {"NET/Socket/0"}}


def test_two_node_log_classifies_channels_by_host():
    log = _parse("nccl-two-nodes-ib.log")
    assert log.transports("intra") == {"P2P": {"P2P/CUMEM"}, "SHM": {"SHM/direct/direct"}}
    assert log.transports("inter") == {"NET/IB": {"NET/IB/0/GDRDMA", "NET/IB/1"}}
    assert log.hosts_using("SHM", "intra") == ["gpu-b"]
    assert log.warnings == [("gpu-b", "NET/IB : mlx5_1:1 Got async event : port error")]


def test_warn_lines_are_collected_once():
    lines = ["vm:1:1 [0] bootstrap.cc:114 NCCL WARN Bootstrap : no socket interface found"] * 3
    assert parse_nccl_log(lines).warnings == [("vm", "Bootstrap : no socket interface found")]


def test_two_node_profile_flags_shm_host_and_missing_gdrdma(nvlink_profile):
    nvlink_profile.expected_inter_node = ["NET/IB"]
    nvlink_profile.require_gdrdma = True
    findings = check_transports(_parse("nccl-two-nodes-ib.log"), nvlink_profile, multi_node=True)
    fails = [f for f in findings if f.level == "FAIL"]
    assert any("SHM" in f.message and f.node == "gpu-b" for f in fails)
    assert any("GPUDirect" in f.message and "NET/IB/1" in f.message for f in fails)
    assert any(f.level == "WARN" and "port error" in f.message for f in findings)


def _verdict_lines(log, profile):
    return [f.line() for f in check_transports(log, profile, multi_node=False) if f.level == "FAIL"]


def test_full_fixture_logs_against_nvlink_profile(shared_fixtures, nvlink_profile):
    def load(case):
        return parse_nccl_logs([shared_fixtures / f"nccl-info-{case}.log"])

    assert _verdict_lines(load("nvlink-p2p"), nvlink_profile) == []
    shm = _verdict_lines(load("p2p-disabled-shm"), nvlink_profile)
    assert len(shm) == 1 and "channels use SHM (SHM/direct/direct)" in shm[0] and "[vm]" in shm[0]
    sock = _verdict_lines(load("socket-only"), nvlink_profile)
    assert len(sock) == 1 and "NET/Socket (NET/Socket/0)" in sock[0]
    bad = load("bad-ifname")
    assert bad.channels == set()
    assert bad.warnings == [("vm", "Bootstrap : no socket interface found")]


def test_full_p2p_fixture_has_24_channels_each_way(shared_fixtures):
    log = parse_nccl_logs([shared_fixtures / "nccl-info-nvlink-p2p.log"])
    assert len(log.channels) == 48
