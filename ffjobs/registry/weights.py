"""A registered face-swap model on disk: its weights and its recorded config, nothing that runs.

A model folder holds ``weights.pt``, the :class:`~ffjobs.models.swap.FaceSwap` state dict
(tensors only, read back with ``torch.load(weights_only=True)``), and ``model_config.json``,
the ``model`` section of the config that built it. Loading reads the JSON as data, builds the
module with ffjobs' own code and loads the tensors into it: a file planted in a registry or a
bucket can be refused, never executed.
"""

from __future__ import annotations

import dataclasses
import json
import pickle
import warnings
from pathlib import Path
from typing import Any

from ffjobs.config.model import ModelConfig
from ffjobs.errors import UserError

WEIGHTS_FILE = "weights.pt"
CONFIG_FILE = "model_config.json"
FLAVOR = "ffjobs_face_swap"
"""The MLmodel flavor naming this layout; no MLflow loader claims it, so none unpickles it."""


class UnsafeModelFile(UserError):
    """A model file that is missing, not data, or does not fit the model it describes."""


def save_face_swap(model: Any, model_config: ModelConfig, folder: Path) -> None:
    """Write ``model`` (a FaceSwap) and ``model_config`` into ``folder`` in the layout above."""
    import torch

    from ffjobs.tracking.redact import redact_text

    folder.mkdir(parents=True, exist_ok=True)
    # contiguous clones: a view would drag its whole storage (and a shared one twice) along
    state = {key: value.detach().cpu().clone() for key, value in model.state_dict().items()}
    torch.save(state, folder / WEIGHTS_FILE)
    text = json.dumps(dataclasses.asdict(model_config), indent=2, sort_keys=True)
    (folder / CONFIG_FILE).write_text(redact_text(text) + "\n")


def read_face_swap(folder: Path, where: str) -> Any:
    """The FaceSwap stored in ``folder``, on the CPU; ``where`` names the folder in errors
    (a model URI). Every problem is one :class:`UnsafeModelFile` line naming the file."""
    import torch

    from ffjobs.models.swap import build_face_swap

    model_config = _read_config(folder / CONFIG_FILE, f"{where} {CONFIG_FILE}")
    state = _read_weights(folder / WEIGHTS_FILE, f"{where} {WEIGHTS_FILE}")
    with torch.random.fork_rng(devices=[]):  # its initial weights are overwritten: loading
        model = build_face_swap(model_config)  # must not move the caller's random stream
    expected = model.state_dict()
    missing = sorted(set(expected) - set(state))
    unexpected = sorted(set(state) - set(expected))
    wrong_shape = sorted(
        k for k in set(state) & set(expected) if state[k].shape != expected[k].shape
    )
    if missing or unexpected or wrong_shape:
        problem = (
            f"missing {missing[0]}" if missing
            else f"unexpected {unexpected[0]}" if unexpected
            else f"shape of {wrong_shape[0]} {tuple(state[wrong_shape[0]].shape)}, "
            f"the config builds {tuple(expected[wrong_shape[0]].shape)}"
        )  # fmt: skip
        raise UnsafeModelFile(
            f"{where} {WEIGHTS_FILE}: does not fit the model its {CONFIG_FILE} describes "
            f"({problem})"
        )
    with torch.no_grad():
        model.load_state_dict(state, strict=True)
    return model


def _read_config(path: Path, name: str) -> ModelConfig:
    from ffjobs.config import config_from_dict

    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        raise UnsafeModelFile(
            f"{name}: missing; not a model ffjobs registered as weights (register it again)"
        ) from None
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise UnsafeModelFile(f"{name}: not a JSON document ({_first_line(exc)})") from None
    if not isinstance(data, dict):
        raise UnsafeModelFile(f"{name}: expected a JSON object, got {type(data).__name__}")
    # the typed config checks every key and range, as for a config file
    return config_from_dict({"model": data}, source=name).model


def _read_weights(path: Path, name: str) -> dict[str, Any]:
    import torch

    try:
        with warnings.catch_warnings():  # "Detected pickle protocol 4": the refusal says it all
            warnings.simplefilter("ignore")
            state = torch.load(path, map_location="cpu", weights_only=True)
    except FileNotFoundError:
        raise UnsafeModelFile(
            f"{name}: missing; not a model ffjobs registered as weights (register it again)"
        ) from None
    except (pickle.UnpicklingError, RuntimeError, EOFError, OSError, ValueError) as exc:
        raise UnsafeModelFile(
            f"{name}: refused, not plain tensors ({_unpickler_reason(exc)}); a registered model "
            "is loaded with torch.load(weights_only=True) only"
        ) from None
    if not isinstance(state, dict) or not all(isinstance(v, torch.Tensor) for v in state.values()):
        raise UnsafeModelFile(
            f"{name}: expected a state dict (names to tensors), got {type(state).__name__}"
        )
    return state


def _unpickler_reason(exc: Exception) -> str:
    """The line of torch's refusal that says what was found, without its advice to load the
    file with ``weights_only=False`` (the very thing that would run a planted pickle)."""
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    found = [line for line in lines if "nsupported" in line and "weights_only" not in line]
    if found:
        return found[0][:200]
    if lines and "weights_only" not in lines[0] and "Weights only" not in lines[0]:
        return lines[0][:200]
    return type(exc).__name__


def _first_line(exc: Exception) -> str:
    text = str(exc).strip()
    line = text.splitlines()[0] if text else type(exc).__name__
    return line[:200]
