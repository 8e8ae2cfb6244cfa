"""Presets: where the ones that ship with ffjobs live, how a name finds its file, and
``extends:`` chains (a file merged over the preset it extends, recursively)."""

from __future__ import annotations

import importlib.resources
from pathlib import Path

from ffjobs.config.loader import ConfigError, read_yaml, short

REPO_CONFIG_DIR = Path(__file__).resolve().parents[2] / "configs"
"""The presets in a source checkout (also what an editable install sees)."""
PRESETS_PACKAGE_DIR = "presets"
"""Where a wheel puts ``configs/`` inside the ``ffjobs`` package (``ffjobs.presets``)."""
DEFAULT_PRESET = "local"


def embedded_preset_dirs() -> list[Path]:
    """The presets that ship with ffjobs: the installed package's, else the source tree's."""
    dirs = []
    packaged = importlib.resources.files("ffjobs") / PRESETS_PACKAGE_DIR
    if isinstance(packaged, Path) and packaged.is_dir():  # a zipped install has no real path
        dirs.append(packaged)
    if REPO_CONFIG_DIR.is_dir():
        dirs.append(REPO_CONFIG_DIR)
    return dirs


def resolve_preset(name_or_path: str | Path, relative_to: Path | None = None) -> Path:
    """Find a config file: an existing path, else ``<name>.yaml`` in ``./configs``, then in the
    presets that ship with ffjobs (:func:`embedded_preset_dirs`)."""
    candidate = Path(name_or_path)
    if relative_to is not None and not candidate.is_absolute():
        beside = relative_to.parent / candidate
        if beside.exists() or beside.with_suffix(".yaml").exists():
            candidate = beside
    if candidate.exists():
        return candidate
    if candidate.suffix == "" and candidate.with_suffix(".yaml").exists():
        return candidate.with_suffix(".yaml")
    for directory in (Path.cwd() / "configs", *embedded_preset_dirs()):
        for stem in (str(name_or_path), f"clusters/{name_or_path}"):
            found = directory / f"{stem}.yaml"
            if found.exists():
                return found
    return candidate  # reading it reports "file not found" with the path the user gave


def load_layers(path: Path, seen: tuple[Path, ...] = ()) -> list[tuple[str, dict, dict]]:
    """Return ``[(source, data, lines), ...]`` from the most basic preset to ``path``."""
    resolved = path.resolve()
    if resolved in seen:
        chain = " -> ".join(str(p) for p in (*seen, resolved))
        raise ConfigError(f"'extends' forms a cycle: {chain}", source=str(path), key="extends")
    data, lines = read_yaml(path)
    parent = data.pop("extends", None)
    layers: list[tuple[str, dict, dict]] = []
    if parent is not None:
        if not isinstance(parent, str):
            raise ConfigError(
                "must be a preset name or a path (string)",
                source=str(path),
                key="extends",
                line=lines.get("extends"),
            )
        parent_path = resolve_preset(parent, relative_to=path)
        if not parent_path.exists():
            raise ConfigError(
                f"preset {short(parent)} not found (looked beside this file and in configs/)",
                source=str(path),
                key="extends",
                line=lines.get("extends"),
            )
        layers = load_layers(parent_path, (*seen, resolved))
    layers.append((str(path), data, lines))
    return layers


# --------------------------------------------------------------------------- building dataclasses


def embedded_default() -> Path:
    for directory in embedded_preset_dirs():
        if (directory / f"{DEFAULT_PRESET}.yaml").is_file():
            return directory / f"{DEFAULT_PRESET}.yaml"
    raise ConfigError(
        "the embedded default preset is missing from this installation; reinstall ffjobs",
        source=f"{PRESETS_PACKAGE_DIR}/{DEFAULT_PRESET}.yaml",
    )
