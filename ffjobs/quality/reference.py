"""The most a swap can score on a synthetic evaluation set: the ground-truth swap.

The synthetic renderer (:mod:`ffjobs.data.faces`) draws image ``j`` of identity ``i`` from two
seeded draws: the person (``Identity``, seed ``[seed, i]``) and the picture's pose, expression,
lighting and background (``Variation``, seed ``[seed, i, j]``). So for each evaluation pair it
can draw the source's person in the target's variation, which is what a perfect face swap
returns. The recogniser's scores on those images are the reference a model's scores are read
against: retrieval of 0.6 where the ground truth reaches 0.95 is another model than 0.6 where
it reaches 0.65 (a recogniser that cannot tell the held-out identities apart).

Only for a set the synthetic generator made (its completion marker, with the arguments, at
``data.source``); any other set has no ground truth, and the report says so.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import torch
from torch import Tensor

from ffjobs.config import Config
from ffjobs.quality.evalset import EvaluationSet

_SYNTH_FILE = re.compile(r"^id_(\d+)/(\d+)\.(jpg|png)$")


def ground_truth_swaps(config: Config, evalset: EvaluationSet) -> Tensor | str:
    """The ground-truth swap of each pair of ``evalset`` (``(pairs, 3, S, S)`` in [-1, 1], made
    as the set's own images are: rendered, encoded as its files are, decoded and resized), or
    why there is none."""
    from ffjobs.data.dataset import face_transform, to_model_images
    from ffjobs.data.decode import decode_rgb
    from ffjobs.data.synth import COMPLETE_MARKER, synthetic_image, synthetic_person

    marker = Path(config.data.source) / COMPLETE_MARKER
    try:
        made = json.loads(marker.read_text())
        seed, size = int(made["seed"]), int(made["size"])
    except (OSError, ValueError, KeyError, TypeError):
        return f"no ground truth: {config.data.source} is not a set the synthetic generator made"
    where = [_SYNTH_FILE.match(path) for path in evalset.paths]
    if not evalset.paths or not all(where):
        return (
            f"no ground truth: {config.data.source} has files the synthetic generator does not name"
        )
    transform = face_transform(config.model.resolution)
    swaps = []
    for source, target in zip(evalset.sources.tolist(), evalset.targets.tolist(), strict=True):
        person = synthetic_person(seed, int(where[source].group(1)))
        i, j, kind = where[target].groups()
        image = synthetic_image(person, seed, int(i), int(j), size, kind)  # as the set's files
        swaps.append(transform(decode_rgb(image)))
    return to_model_images(torch.stack(swaps))
