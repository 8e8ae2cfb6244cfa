"""The report and verdict from per-rank result files and NCCL logs, as a finished run leaves them."""

import json
import shutil
from pathlib import Path

from PIL import Image

from ffjobs.preflight.report import build_report, summary_markdown, write_report
from ffjobs.preflight.verdict import check_bandwidth, check_versions, suspect_nodes

from .conftest import DATA

GIB = 2**30
# Reference torch.distributed figures on the 2xH200 machine (measurements.md).
GOOD_SWEEP = [
    {"size_bytes": 2**20, "iters": 200, "time_s": 3.1e-5, "algbw_gbps": 34.0, "busbw_gbps": 34.0},
    {"size_bytes": GIB, "iters": 90, "time_s": 3.3e-3, "algbw_gbps": 321.0, "busbw_gbps": 321.0},
    {
        "size_bytes": 8 * GIB,
        "iters": 12,
        "time_s": 2.5e-2,
        "algbw_gbps": 349.0,
        "busbw_gbps": 349.0,
    },
]
SHM_SWEEP = [dict(row, busbw_gbps=28.5, algbw_gbps=28.5) for row in GOOD_SWEEP]


def fake_run(tmp_path: Path, sweep, log: str | None, env_findings=()) -> Path:
    run_dir = tmp_path / "run"
    (run_dir / "ranks").mkdir(parents=True)
    for rank in (0, 1):
        record = {
            "rank": rank,
            "local_rank": rank,
            "node": "vm",
            "status": "ok",
            "probe": {
                "node": "vm",
                "torch": "2.11.0",
                "cuda": "13.0",
                "nccl": "2.28.9",
                "driver": "580.159.04",
                "ib_ports": [],
            },
            "env_findings": list(env_findings),
            "group_checks": {},
            "world": {"size": 2, "nodes": ["vm", "vm"], "dtype": "bfloat16"},
        }
        if rank == 0:
            record["sweep"] = sweep
        (run_dir / "ranks" / f"rank-{rank:05d}.json").write_text(json.dumps(record))
    if log:
        (run_dir / "nccl").mkdir()
        shutil.copy(log, run_dir / "nccl" / "rank-00000.vm.1.log")
    return run_dir


def test_nvlink_run_passes(tmp_path, nvlink_profile):
    run_dir = fake_run(tmp_path, GOOD_SWEEP, DATA / "nccl-p2p-excerpt.log")
    report = build_report(run_dir, nvlink_profile, 2, "nccl")
    assert report["verdict"] == "PASS", report["reasons"]
    assert report["nccl"]["transports"]["intra"] == {"P2P": ["P2P/CUMEM"]}


def test_shm_fallback_fails_naming_shm_and_low_busbw(tmp_path, nvlink_profile):
    run_dir = fake_run(tmp_path, SHM_SWEEP, DATA / "nccl-shm-excerpt.log")
    report = build_report(run_dir, nvlink_profile, 2, "nccl")
    assert report["verdict"] == "FAIL"
    assert "channels use SHM" in report["reasons"][0]
    assert any(
        "busbw at 1024 MiB is 28.5 GB/s, below the profile minimum 250" in r
        for r in report["reasons"]
    )


def test_socket_fallback_fails_naming_socket(tmp_path, nvlink_profile):
    run_dir = fake_run(tmp_path, SHM_SWEEP, DATA / "nccl-socket-excerpt.log")
    report = build_report(run_dir, nvlink_profile, 2, "nccl")
    assert report["verdict"] == "FAIL" and "channels use NET/Socket" in report["reasons"][0]


def test_real_fixture_logs_reach_the_right_verdicts(tmp_path, shared_fixtures, nvlink_profile):
    cases = {
        "nvlink-p2p": (GOOD_SWEEP, "PASS"),
        "p2p-disabled-shm": (SHM_SWEEP, "FAIL"),
        "socket-only": (SHM_SWEEP, "FAIL"),
    }
    for case, (sweep, verdict) in cases.items():
        run_dir = fake_run(tmp_path / case, sweep, shared_fixtures / f"nccl-info-{case}.log")
        assert build_report(run_dir, nvlink_profile, 2, "nccl")["verdict"] == verdict, case


def test_missing_rank_and_aborted_environment(tmp_path, nvlink_profile):
    env_fail = {
        "level": "FAIL",
        "check": "env",
        "node": "vm",
        "message": "NCCL_SOCKET_IFNAME=doesnotexist0 matches no network interface",
    }
    run_dir = fake_run(tmp_path, [], None, env_findings=[env_fail])
    report = build_report(run_dir, nvlink_profile, 3, "nccl")
    assert report["verdict"] == "FAIL"
    assert report["reasons"][0] == (
        "FAIL env [vm]: NCCL_SOCKET_IFNAME=doesnotexist0 matches no network interface"
    )
    assert any("no result from rank(s) 2" in r for r in report["reasons"])


def test_writes_json_markdown_and_png(tmp_path, nvlink_profile):
    run_dir = fake_run(tmp_path, GOOD_SWEEP, DATA / "nccl-p2p-excerpt.log")
    report = build_report(run_dir, nvlink_profile, 2, "nccl")
    paths = write_report(report, run_dir)
    assert json.loads(Path(paths["json"]).read_text())["verdict"] == "PASS"
    markdown = Path(paths["markdown"]).read_text()
    assert "# Preflight: PASS" in markdown and "| 1 GiB | 90 |" in markdown
    image = Image.open(paths["plot"]).convert("RGB")
    assert image.size == (800, 480)
    colors = {color for _, color in image.getcolors(maxcolors=100000)}
    assert (214, 39, 40) in colors and (31, 119, 180) in colors  # threshold and busbw line


def test_bandwidth_thresholds(nvlink_profile):
    assert check_bandwidth(GOOD_SWEEP, nvlink_profile) == []
    low = [dict(row, busbw_gbps=260.0) for row in GOOD_SWEEP]
    (finding,) = check_bandwidth(low, nvlink_profile)
    assert finding.level == "FAIL" and "8192 MiB is 260.0 GB/s" in finding.message


def test_slow_node_and_slow_link_become_suspects():
    checks = {f"node:n{i}": {"busbw_gbps": 300.0} for i in range(4)}
    checks["node:n2"] = {"busbw_gbps": 90.0}
    pairs = {"n0+n1": 40.0, "n1+n2": 41.0, "n2+n3": 39.0, "n3+n4": 12.0, "n4+n0": 11.0}
    checks |= {f"pair:{k}": {"busbw_gbps": v} for k, v in pairs.items()}
    suspects, findings = suspect_nodes(checks, 0.7)
    assert suspects == ["n2", "n4"]
    assert {f.check for f in findings} == {"slow-node", "slow-link"}


def test_one_bad_link_of_three_nodes_is_found_against_the_best_pair():
    """Three nodes, node3's link throttled: two of three pairs are slow, so the median is a slow
    pair; against the best pair node3 stands out."""
    pairs = {"node1+node2": 2.0, "node1+node3": 0.01, "node2+node3": 0.011}
    checks = {f"pair:{k}": {"busbw_gbps": v} for k, v in pairs.items()}
    suspects, (finding,) = suspect_nodes(checks, 0.7)
    assert suspects == ["node3"] and finding.node == "node3"
    assert "best pair 2.0" in finding.message


def test_version_skew_names_the_odd_node():
    probes = {
        n: {"torch": "2.11.0", "cuda": "13.0", "nccl": "2.28.9", "driver": "580"}
        for n in ("a", "b", "c")
    }
    probes["c"] = dict(probes["c"], nccl="2.27.3", driver="575")
    findings = check_versions(probes)
    assert {(f.level, f.node) for f in findings} == {("FAIL", "c"), ("WARN", "c")}


def test_summary_lists_suspects(tmp_path, nvlink_profile):
    run_dir = fake_run(tmp_path, GOOD_SWEEP, None)
    report = build_report(run_dir, nvlink_profile, 2, "nccl")
    report["suspect_nodes"] = ["node9"]
    assert "**Suspect nodes** (exclude from training): node9" in summary_markdown(report)
