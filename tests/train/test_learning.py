"""The trainer learns on the synthetic faces: on held-out identities, identity similarity of
the fused face to the source rises and same-identity reconstruction error falls vs step 0."""

from __future__ import annotations

import pytest
import torch

from ffjobs.data.dataset import FacePairDataset, to_model_images
from ffjobs.data.index import index_from_config, split_identities
from ffjobs.data.synth import generate_dataset
from ffjobs.models import build
from ffjobs.models.identity_pretrain import train_identity_encoder
from ffjobs.models.losses import identity_cosine
from ffjobs.train.launch import launch_local
from ffjobs.train.trainer import seed_everything

from .helpers import final_weights, tiny_config


@torch.no_grad()
def _probe(models, batch) -> tuple[float, float]:
    """(mean identity cosine of fused vs source, mean L1 of fused vs target on same-identity)."""
    source, target = to_model_images(batch["source"]), to_model_images(batch["target"])
    same = batch["same_identity"]
    source_embedding = models.identity_encoder(source)
    fused = models.generator.eval()(target, source_embedding)
    cosine = identity_cosine(models.identity_encoder(fused), source_embedding).mean().item()
    l1 = (fused - target).abs().mean(dim=(1, 2, 3))[same].mean().item()
    return cosine, l1


@pytest.mark.slow
def test_training_improves_identity_and_reconstruction_on_heldout_identities(tmp_path):
    data = generate_dataset(tmp_path / "data", identities=20, per_identity=6, size=64, seed=0)
    config = tiny_config(
        tmp_path,
        f"data.source={data}",
        "data.val_fraction=0.2",
        "model.width=16",
        "model.max_width=64",
        "model.residual_blocks=2",
        "model.identity_dim=128",
        f"model.identity_weights={tmp_path / 'identity.pt'}",
        "train.steps=60",
        "train.batch_size=8",
        "train.lr=1e-3",
        # the setting this test's margins were calibrated on, before the embedded default's
        # recipe changed (which moves identity faster and reconstructs more slowly)
        "model.generator_norm=instance",
        "model.losses.identity=10",
        "train.lr_discriminator=2e-4",
        "train.ema_decay=null",
        "train.checkpoint_every=60",
        "train.deterministic=false",
    )
    pretrain = train_identity_encoder(config.model, data, tmp_path / "identity.pt", steps=60)
    assert pretrain.heldout_same_identity_cosine > pretrain.heldout_other_identity_cosine

    result = launch_local(config, 2, quiet_stdout=True)
    assert result["final_step"] == 60

    _, heldout = split_identities(
        index_from_config(config.data), config.data.val_fraction, config.data.synth.seed
    )
    pairs = FacePairDataset(heldout, image_size=64, same_identity_prob=0.5, seed=1)
    batch = torch.utils.data.default_collate([pairs[i] for i in range(len(pairs))])
    assert batch["same_identity"].any() and (~batch["same_identity"]).any()

    seed_everything(config.train.seed)  # the trainer's initial weights
    models = build(config.model)
    cosine_0, l1_0 = _probe(models, batch)
    models.generator.load_state_dict(final_weights(tmp_path / "ckpt")["generator"])
    cosine_n, l1_n = _probe(models, batch)
    assert cosine_n > cosine_0 + 0.05, (cosine_0, cosine_n)
    assert l1_n < 0.8 * l1_0, (l1_0, l1_n)
