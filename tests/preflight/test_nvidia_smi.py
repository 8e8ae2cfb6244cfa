from ffjobs.preflight.nvidia_smi import gpu_links, parse_topo_matrix
from ffjobs.preflight.probe import driver_version

from .conftest import DATA


def test_topo_matrix_reports_nvlink_between_the_two_gpus():
    matrix = parse_topo_matrix((DATA / "nvidia-smi-topo-m.txt").read_text())
    assert matrix == {"GPU0": {"GPU1": "NV18"}, "GPU1": {"GPU0": "NV18"}}
    assert gpu_links(matrix) == {"NV18"}


def test_driver_version_from_proc(tmp_path):
    (tmp_path / "driver" / "nvidia").mkdir(parents=True)
    (tmp_path / "driver" / "nvidia" / "version").write_text(
        "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  580.159.04  Release Build\n"
    )
    assert driver_version(tmp_path) == "580.159.04"
    assert driver_version(tmp_path / "absent") is None
