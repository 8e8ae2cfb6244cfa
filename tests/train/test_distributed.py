"""Where rank, world size and rendezvous come from; backend choice; the two-step group join."""

from __future__ import annotations

import socket
import subprocess

import pytest
import torch.distributed as dist

from ffjobs.errors import UserError
from ffjobs.local_ranks import free_loopback_port
from ffjobs.slurm import nodes
from ffjobs.train import distributed
from ffjobs.train.distributed import (
    DistEnv,
    compute_init,
    detect_env,
    join_process_group,
    pick_device,
    rendezvous,
)

SLURM_TASK = {
    "SLURM_PROCID": "5",
    "SLURM_NTASKS": "16",
    "SLURM_LOCALID": "5",
    "SLURM_JOB_NODELIST": "gpu[07-08]",
    "SLURM_JOB_ID": "4242",
}


def test_torchrun_environment():
    env = detect_env(
        {
            "RANK": "3",
            "WORLD_SIZE": "8",
            "LOCAL_RANK": "1",
            "MASTER_ADDR": "10.0.0.1",
            "MASTER_PORT": "1234",
        }
    )
    assert (env.rank, env.world_size, env.local_rank, env.source) == (3, 8, 1, "torchrun")
    assert (env.master_addr, env.master_port) == ("10.0.0.1", 1234)


def test_slurm_environment_uses_first_node_and_job_port(monkeypatch):
    monkeypatch.setattr(nodes.socket, "gethostbyname", lambda name: "10.0.0.7")
    env = detect_env(SLURM_TASK)
    assert (env.rank, env.world_size, env.local_rank, env.source) == (5, 16, 5, "slurm")
    assert env.master_addr == "gpu07"
    assert env.master_port == 20000 + 4242


def test_slurm_rendezvous_host_is_the_first_node_of_a_multi_group_list(monkeypatch):
    monkeypatch.setattr(nodes.socket, "gethostbyname", lambda name: "10.0.0.7")
    env = detect_env({**SLURM_TASK, "SLURM_JOB_NODELIST": "rack[2-3]-gpu[010-011]-ib,login"})
    assert env.master_addr == "rack2-gpu010-ib"


def test_slurm_node_that_does_not_resolve_is_reached_at_its_node_addr(monkeypatch):
    def unresolvable(name):
        raise socket.gaierror(name)

    def scontrol(argv, **kwargs):
        assert argv[:4] == ["scontrol", "show", "node", "gpu07"]
        return subprocess.CompletedProcess(argv, 0, stdout="NodeName=gpu07 NodeAddr=10.9.8.7\n")

    monkeypatch.setattr(nodes.socket, "gethostbyname", unresolvable)
    monkeypatch.setattr(nodes.subprocess, "run", scontrol)
    assert detect_env(SLURM_TASK).master_addr == "10.9.8.7"


def test_malformed_slurm_nodelist_is_one_line_naming_the_variable():
    with pytest.raises(UserError, match=r"^SLURM_JOB_NODELIST: node list 'gpu\[07-08'"):
        detect_env({**SLURM_TASK, "SLURM_JOB_NODELIST": "gpu[07-08"})


def test_single_process_without_environment():
    env = detect_env({})
    assert (env.rank, env.world_size, env.is_distributed) == (0, 1, False)


def _single_process(monkeypatch):
    for name in ("RANK", "WORLD_SIZE", "SLURM_PROCID", "SLURM_NTASKS", "SUBMITIT_EXECUTOR"):
        monkeypatch.delenv(name, raising=False)


def test_compute_init_picks_the_backend_from_the_gpu_count(monkeypatch):
    _single_process(monkeypatch)
    monkeypatch.setattr(distributed.torch.cuda, "device_count", lambda: 0)
    env, device = compute_init("auto")
    assert (env.source, device.type) == ("single", "cpu")
    with pytest.raises(UserError, match=r"^train\.backend: nccl needs GPUs and none is visible"):
        compute_init("nccl")


def test_gloo_device_is_the_cpu():
    assert pick_device(DistEnv(0, 1, 0, "127.0.0.1", 1, "single"), "gloo").type == "cpu"


def test_rendezvous_store_carries_agreement_before_the_group_forms(monkeypatch):
    # register the variable so the test restores its absence afterwards
    monkeypatch.setenv("TORCH_NCCL_ASYNC_ERROR_HANDLING", "unset")
    monkeypatch.delenv("TORCH_NCCL_ASYNC_ERROR_HANDLING")
    env = DistEnv(0, 1, 0, "127.0.0.1", free_loopback_port(), "torchrun")
    store = rendezvous(env, timeout_s=10)
    store.set("agree/0", "ok")
    assert store.get("agree/0") == b"ok" and not dist.is_initialized()
    join_process_group(store, env, "gloo", pick_device(env, "gloo"), collective_timeout_s=30)
    try:
        assert dist.is_initialized() and dist.get_backend() == "gloo"
        assert dist.get_world_size() == 1
    finally:
        dist.destroy_process_group()
    # NCCL errors must kill the rank rather than hang it, for every caller of the join
    assert distributed.os.environ["TORCH_NCCL_ASYNC_ERROR_HANDLING"] == "3"


def test_join_keeps_a_profile_chosen_error_handling(monkeypatch):
    monkeypatch.setenv("TORCH_NCCL_ASYNC_ERROR_HANDLING", "1")
    env = DistEnv(0, 1, 0, "127.0.0.1", free_loopback_port(), "torchrun")
    join_process_group(rendezvous(env, 10), env, "gloo", pick_device(env, "gloo"), 30)
    dist.destroy_process_group()
    assert distributed.os.environ["TORCH_NCCL_ASYNC_ERROR_HANDLING"] == "1"


def test_torchrun_shared_store_with_restarts_is_flagged():
    hazard = distributed.shared_store_restart_hazard
    shared = {"TORCHELASTIC_USE_AGENT_STORE": "True", "TORCHELASTIC_MAX_RESTARTS": "1"}
    assert "TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1" in hazard(shared)
    assert hazard({**shared, "TORCHELASTIC_MAX_RESTARTS": "0"}) is None
    assert hazard({**shared, "TORCHELASTIC_USE_AGENT_STORE": "False"}) is None
    assert hazard({}) is None
