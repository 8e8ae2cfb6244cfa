"""Make the local demo self-contained: the synthetic dataset (:mod:`ffjobs.data.demo`) and the
identity encoders pre-trained on it, on demand.

An encoder ffjobs pre-trains learns the training identities only (the held-out ones, on which
a model is evaluated, stay unseen by every recogniser), and a record beside it,
``<weights>.json``, says what made it: the training identities' fingerprint and the encoder's
settings. A file whose record no longer matches (the dataset, its split or the settings
changed) is pre-trained again, with a line saying why; a file without a record is the user's
and is used as it is, except at the embedded default's own paths
(:data:`ffjobs.config.model.PROJECT_ENCODERS`), which only ffjobs writes.
"""

from __future__ import annotations

import dataclasses
import json
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from ffjobs.config import Config
from ffjobs.config.model import PROJECT_ENCODERS, ModelConfig
from ffjobs.data.demo import ensure_demo_dataset, ensure_identity_dataset
from ffjobs.shared_inputs import held_lock, leftovers, temporary_sibling

if TYPE_CHECKING:
    from ffjobs.models.identity_pretrain import IdentityPretrainResult

DEFAULT_PRETRAIN_STEPS = 300


def training_identities(config: Config) -> tuple[list[str], str]:
    """The identities training learns from (``data.val_fraction``'s held-out ones left out,
    split as the trainer splits) and their fingerprint."""
    from ffjobs.data.index import index_from_config, split_identities

    index = index_from_config(config.data, s3=config.s3)
    train, _ = split_identities(index, config.data.val_fraction, config.data.synth.seed)
    return train.identities, train.fingerprint


def encoder_record(path: str | Path) -> Path:
    """The record of what made the encoder at ``path``: ``<path>.json`` beside it."""
    path = Path(path)
    return path.with_name(path.name + ".json")


def _read_record(path: Path) -> dict | None:
    try:
        record = json.loads(encoder_record(path).read_text())
    except (OSError, ValueError):
        return None
    return record if isinstance(record, dict) else None


def ensure_pretrained_encoder(
    config: Config,
    settings: ModelConfig,
    *,
    seed: int,
    what: str,
    steps: int = DEFAULT_PRETRAIN_STEPS,
    on_step: Callable[[int, float], None] | None = None,
) -> IdentityPretrainResult | None:
    """Pre-train ``settings``' identity encoder into ``settings.identity_weights`` on the
    training identities of ``data.source``, unless a file made from the same identities and
    settings is there (see the module docstring). Made once however many processes ask at
    the same time: the others wait for it. Returns the result, or ``None`` when nothing was
    made."""
    weights = Path(settings.identity_weights or "")
    if not settings.identity_weights:
        return None
    if weights.exists() and _read_record(weights) is None and str(weights) not in PROJECT_ENCODERS:
        return None  # the user's file
    ensure_demo_dataset(config)
    names, fingerprint = training_identities(config)
    wanted = {
        "training_identities": len(names),
        "fingerprint": fingerprint,
        "arch": settings.identity_arch,
        "width": settings.identity_width,
        "input_size": settings.identity_input_size,
        "dim": settings.identity_dim,
        "steps": steps,
        "seed": seed,
    }
    if weights.exists() and _read_record(weights) == wanted:
        return None
    with held_lock(weights, what):
        found = _read_record(weights) if weights.exists() else None
        if found == wanted:  # the process we waited for made it
            return None
        for left in [*leftovers(weights), *leftovers(encoder_record(weights))]:
            left.unlink(missing_ok=True)  # a killed maker's temporaries: nobody makes them now
        data = ensure_identity_dataset(config)  # pre-training reads a local folder
        if weights.exists():
            why = (
                "no record of what made it"
                if found is None
                else f"made from {found.get('training_identities')} identities with fingerprint "
                f"{found.get('fingerprint')}, {found.get('arch')} {found.get('input_size')} px, "
                f"{found.get('steps')} steps"
            )
            print(
                f"{what}: {weights} is stale ({why}); this run trains on {len(names)} "
                f"identities of {data} (fingerprint {fingerprint}): pre-training it again",
                file=sys.stderr,
                flush=True,
            )
        print(
            f"pre-training {what} into {weights} ({len(names)} training identities)",
            file=sys.stderr,
            flush=True,
        )
        # torch only when there is an encoder to make: a run whose encoders are there starts
        # its ranks from a launcher that never imports it
        from ffjobs.models.identity_pretrain import train_identity_encoder

        temporary = temporary_sibling(weights)
        record = temporary_sibling(encoder_record(weights))
        try:
            result = train_identity_encoder(
                settings, data, temporary, steps=steps, seed=seed, identities=set(names),
                on_step=on_step,
            )  # fmt: skip
            record.write_text(json.dumps(wanted, indent=1) + "\n")
            # the weights first: a crash between the two renames leaves new weights beside
            # an old record, which does not match, so they are made again (never reused)
            os.replace(temporary, weights)
            os.replace(record, encoder_record(weights))
        finally:
            temporary.unlink(missing_ok=True)
            record.unlink(missing_ok=True)
    return dataclasses.replace(result, out=str(weights))


def ensure_identity_weights(
    config: Config,
    *,
    steps: int = DEFAULT_PRETRAIN_STEPS,
    on_step: Callable[[int, float], None] | None = None,
) -> IdentityPretrainResult | None:
    """The training loss's encoder at ``model.identity_weights``, pre-trained when missing or
    stale (:func:`ensure_pretrained_encoder`)."""
    return ensure_pretrained_encoder(
        config,
        config.model,
        seed=config.train.seed,
        what="the identity encoder",
        steps=steps,
        on_step=on_step,
    )


def ensure_demo_inputs(config: Config) -> None:
    """What training on the embedded default needs: the synthetic dataset (see
    :func:`ffjobs.data.demo.ensure_demo_dataset`) and the identity encoder pre-trained into
    ``model.identity_weights`` when that file is missing or stale (nothing is downloaded)."""
    ensure_demo_dataset(config)
    ensure_identity_weights(config)
