"""Where rank, world size and rendezvous come from; backend choice."""

from __future__ import annotations

from ffjobs.train import distributed
from ffjobs.train.distributed import detect_env, expand_first_host, pick_backend


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
    monkeypatch.setattr(distributed.subprocess, "run", _no_scontrol)
    env = detect_env(
        {
            "SLURM_PROCID": "5",
            "SLURM_NTASKS": "16",
            "SLURM_LOCALID": "5",
            "SLURM_JOB_NODELIST": "gpu[07-08]",
            "SLURM_JOB_ID": "4242",
        }
    )
    assert (env.rank, env.world_size, env.local_rank, env.source) == (5, 16, 5, "slurm")
    assert env.master_addr == "gpu07"
    assert env.master_port == 20000 + 4242


def test_single_process_without_environment():
    env = detect_env({})
    assert (env.rank, env.world_size, env.is_distributed) == (0, 1, False)


def _no_scontrol(*args, **kwargs):
    raise FileNotFoundError("scontrol")


def test_nodelist_parser_without_scontrol(monkeypatch):
    monkeypatch.setattr(distributed.subprocess, "run", _no_scontrol)
    assert expand_first_host("node[3-5,7],gpu1") == "node3"
    assert expand_first_host("gpu1,gpu2") == "gpu1"
    assert expand_first_host("rack1-n[010-012]") == "rack1-n010"
    assert expand_first_host("single") == "single"


def test_backend_auto_is_gloo_without_cuda(monkeypatch):
    monkeypatch.setattr(distributed.torch.cuda, "is_available", lambda: False)
    assert pick_backend("auto") == "gloo"
    assert pick_backend("nccl") == "nccl"


def test_torchrun_shared_store_with_restarts_is_flagged():
    hazard = distributed.shared_store_restart_hazard
    shared = {"TORCHELASTIC_USE_AGENT_STORE": "True", "TORCHELASTIC_MAX_RESTARTS": "1"}
    assert "TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1" in hazard(shared)
    assert hazard({**shared, "TORCHELASTIC_MAX_RESTARTS": "0"}) is None
    assert hazard({**shared, "TORCHELASTIC_USE_AGENT_STORE": "False"}) is None
    assert hazard({}) is None
