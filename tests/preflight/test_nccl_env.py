from ffjobs.preflight.findings import verdict_of
from ffjobs.preflight.nccl_env import check_environment, list_interfaces
from ffjobs.preflight.selectors import Selector

IFACES = ["docker0", "eth0", "eth1", "ib0", "lo"]


def _check(**env):
    return check_environment(env, IFACES, "node1", allow_nvls=env.pop("allow", True))


def test_selector_rules_follow_nccl():
    assert Selector.parse("eth").selects("eth1")
    assert not Selector.parse("=eth").selects("eth1")
    assert Selector.parse("=eth0,eth1").selects("eth1") and not Selector.parse(
        "=eth0,eth1"
    ).selects("eth10")
    assert not Selector.parse("^docker,lo").selects("docker0")
    assert Selector.parse("^=docker").selects("docker0")
    hca = Selector.parse("mlx5_0:1")
    assert hca.selects("mlx5_0", 1) and not hca.selects("mlx5_0", 2)


def test_missing_socket_interface_fails_in_one_line():
    (finding,) = _check(NCCL_SOCKET_IFNAME="doesnotexist0")
    assert finding.level == "FAIL" and finding.node == "node1"
    assert "NCCL_SOCKET_IFNAME=doesnotexist0 matches no network interface" in finding.line()
    assert "\n" not in finding.line()


def test_socket_prefix_exact_and_exclusion():
    assert _check(NCCL_SOCKET_IFNAME="eth") == []
    assert verdict_of(_check(NCCL_SOCKET_IFNAME="=eth")) == "FAIL"
    assert verdict_of(_check(NCCL_SOCKET_IFNAME="^docker,lo,eth,ib")) == "FAIL"
    assert _check(NCCL_SOCKET_IFNAME="^docker,lo") == []
    partly = _check(NCCL_SOCKET_IFNAME="eth0,bond0")
    assert verdict_of(partly) == "WARN" and "'bond0'" in partly[0].message


def test_gloo_interface_must_exist():
    assert _check(GLOO_SOCKET_IFNAME="eth0") == []
    assert verdict_of(_check(GLOO_SOCKET_IFNAME="eth9")) == "FAIL"


def test_ib_timeout_range():
    assert _check(NCCL_IB_TIMEOUT="22") == []
    for bad in ("0", "32", "abc"):
        (finding,) = _check(NCCL_IB_TIMEOUT=bad)
        assert finding.level == "FAIL" and "1..31" in finding.message


def test_nvls_warns_only_where_forbidden():
    assert _check() == []
    assert verdict_of(_check(allow=False)) == "WARN"
    assert verdict_of(_check(allow=False, NCCL_NVLS_ENABLE="1")) == "WARN"
    assert _check(allow=False, NCCL_NVLS_ENABLE="0") == []


def test_interfaces_from_fake_sysfs(tmp_path):
    for name in ("eth0", "lo"):
        (tmp_path / "class" / "net" / name).mkdir(parents=True)
    assert list_interfaces(tmp_path) == ["eth0", "lo"]
    assert "lo" in list_interfaces(tmp_path / "absent")  # falls back to the kernel's list
