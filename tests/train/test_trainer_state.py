"""The checkpoint layout of a trainer: plain weights by network name, one entry per network."""

from __future__ import annotations

import pytest
import torch
from torch.nn.parallel import DistributedDataParallel as DDP

from ffjobs.errors import UserError
from ffjobs.train.data import RandomPairs
from ffjobs.train.distributed import DistEnv
from ffjobs.train.trainer import Trainer

from .helpers import tiny_config

SINGLE = DistEnv(0, 1, 0, "127.0.0.1", 0, "single")


def _trainer(tmp_path) -> Trainer:
    config = tiny_config(tmp_path, "train.deterministic=false")
    dataset = RandomPairs(16, config.model.resolution, seed=0)
    return Trainer(config, SINGLE, torch.device("cpu"), dataset)


def test_state_dict_holds_plain_weights_and_each_networks_optimizer_state(tmp_path):
    trainer = _trainer(tmp_path)
    state = trainer.state_dict()
    assert trainer.g_module is trainer.generator.module
    assert not isinstance(trainer.g_module, DDP)
    assert state["generator"].keys() == trainer.g_module.state_dict().keys()
    assert state["discriminator"].keys() == trainer.d_module.state_dict().keys()
    assert state["ema"].keys() == state["generator"].keys()
    assert set(state["optimizer_state"]) == {"generator", "discriminator"}
    for entry in state["optimizer_state"].values():
        assert set(entry) == {"optimizer", "scheduler", "scaler"}
    assert state["world_size"] == 1 and "config" in state
    assert "mlflow_run_id" not in state  # the run owns its MLflow run, not the checkpoint


def test_resume_restores_every_network_from_a_saved_step(tmp_path):
    trainer = _trainer(tmp_path)
    list(trainer.run_steps(2))  # checkpoint_every=2 in the tiny config
    again = _trainer(tmp_path)
    assert again.resume() == 2
    for before, after in zip(trainer.networks, again.networks, strict=True):
        for key, value in before.module.state_dict().items():
            assert torch.equal(value, after.module.state_dict()[key]), (before.name, key)
        assert after.scheduler.last_epoch == before.scheduler.last_epoch == 2
        assert (
            after.optimizer.state_dict()["state"].keys()
            == before.optimizer.state_dict()["state"].keys()
        )


def test_a_checkpoint_in_the_older_layout_is_a_one_line_error(tmp_path):
    trainer = _trainer(tmp_path)
    state = trainer.state_dict()
    del state["optimizer_state"]  # the layout with opt_g/opt_d/sched_g/... keys
    trainer.checkpointer.save(2, state, trainer.rank_state())
    with pytest.raises(UserError, match=r"step-00000002\.pt: older checkpoint layout") as err:
        _trainer(tmp_path).resume()
    assert "\n" not in str(err.value)
