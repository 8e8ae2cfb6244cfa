"""The face-swap model a training run made: :class:`~ffjobs.models.swap.FaceSwap` from the
latest verified checkpoint of a run's checkpoint folder."""

from __future__ import annotations

from ffjobs.config import Config
from ffjobs.errors import UserError
from ffjobs.models.factory import build_generator
from ffjobs.models.identity import build_identity_encoder
from ffjobs.models.swap import FaceSwap
from ffjobs.train.checkpoint import open_checkpoints


def face_swap_from_checkpoint(config: Config, location: str) -> tuple[FaceSwap, int]:
    """``(model, step)`` from the latest verified checkpoint in ``location`` (EMA weights, or
    the generator's own when the run kept no average)."""
    found = open_checkpoints(config, location).load_latest()
    if found is None:  # each file refused was named in a warning as it was passed
        raise UserError(
            f"{location}: no verified checkpoint that loads safely to build a model from; "
            "train first (ffjobs train, or ffjobs run)"
        )
    ref, state = found
    generator = build_generator(config.model)
    # a run trained with train.ema_decay=null has no average: its generator is what it made
    generator.load_state_dict(state["ema"] if state.get("ema") is not None else state["generator"])
    encoder = build_identity_encoder(config.model, load_weights=True)
    return FaceSwap(generator, encoder, config.model.resolution), ref.step
