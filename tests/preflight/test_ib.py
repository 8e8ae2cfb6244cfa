"""InfiniBand port checks on sysfs trees built in a temporary directory."""

from pathlib import Path

from ffjobs.preflight.findings import verdict_of
from ffjobs.preflight.ib import check_ib_ports, read_ib_ports


def make_port(
    root: Path,
    device: str,
    port: int = 1,
    state: str = "4: ACTIVE",
    phys: str = "5: LinkUp",
    rate: str = "400 Gb/sec (4X NDR)",
    layer: str = "InfiniBand",
) -> None:
    path = root / "class" / "infiniband" / device / "ports" / str(port)
    path.mkdir(parents=True)
    for name, text in (
        ("state", state),
        ("phys_state", phys),
        ("rate", rate),
        ("link_layer", layer),
    ):
        (path / name).write_text(text + "\n")


def test_reads_ports_from_sysfs(tmp_path):
    make_port(tmp_path, "mlx5_0")
    make_port(tmp_path, "mlx5_1", state="1: DOWN", phys="3: Disabled", rate="10 Gb/sec (4X SDR)")
    ports = read_ib_ports(tmp_path)
    assert [(p.name, p.state, p.phys_state, p.rate_gbps) for p in ports] == [
        ("mlx5_0:1", "ACTIVE", "LinkUp", 400.0),
        ("mlx5_1:1", "DOWN", "Disabled", 10.0),
    ]
    assert read_ib_ports(tmp_path / "nothing") == []


def test_active_ports_at_expected_rate_pass(tmp_path):
    for dev in ("mlx5_0", "mlx5_1"):
        make_port(tmp_path, dev)
    findings = check_ib_ports(read_ib_ports(tmp_path), "=mlx5_0:1,mlx5_1:1", 400, "node7")
    assert findings == []


def test_down_port_fails_naming_device_and_node(tmp_path):
    make_port(tmp_path, "mlx5_0")
    make_port(tmp_path, "mlx5_1", state="1: DOWN", phys="2: Polling")
    findings = check_ib_ports(read_ib_ports(tmp_path), None, 400, "node7")
    assert verdict_of(findings) == "FAIL"
    assert len(findings) == 1
    assert findings[0].node == "node7" and "mlx5_1:1 is DOWN/Polling" in findings[0].message


def test_port_trained_at_lower_rate_fails(tmp_path):
    make_port(tmp_path, "mlx5_0", rate="200 Gb/sec (4X HDR)")
    (finding,) = check_ib_ports(read_ib_ports(tmp_path), "mlx5", 400, "node3")
    assert finding.level == "FAIL" and finding.node == "node3"
    assert "mlx5_0:1 trained at 200 Gb/s, expected 400 Gb/s" in finding.message


def test_hca_naming_a_missing_device_fails(tmp_path):
    make_port(tmp_path, "mlx5_0")
    findings = check_ib_ports(read_ib_ports(tmp_path), "=mlx5_0:1,mlx5_9:1", 400, "node2")
    assert verdict_of(findings) == "FAIL"
    assert any("'mlx5_9:1'" in f.message and f.node == "node2" for f in findings)


def test_excluded_down_port_is_ignored(tmp_path):
    make_port(tmp_path, "mlx5_0")
    make_port(tmp_path, "mlx5_bond", state="1: DOWN")
    assert check_ib_ports(read_ib_ports(tmp_path), "^mlx5_bond", 400, "n1") == []


def test_down_port_only_warns_when_profile_does_not_expect_ib(tmp_path):
    make_port(tmp_path, "mlx5_0", state="1: DOWN")
    assert verdict_of(check_ib_ports(read_ib_ports(tmp_path), None, None, "n1")) == "WARN"
