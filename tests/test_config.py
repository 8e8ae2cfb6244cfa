"""The config loader: presets, overrides, round-trips, and one-line errors that say where."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from ffjobs.config import (
    Config,
    ConfigError,
    config_from_dict,
    load_config,
    parse_override,
)
from ffjobs.config.schema import param_schema

REPO = Path(__file__).resolve().parents[1]


def write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def test_defaults_are_the_local_preset():
    assert load_config(None) == load_config("local")


def test_every_shipped_preset_loads():
    presets = sorted((REPO / "configs").rglob("*.yaml"))
    assert len(presets) >= 3
    for preset in presets:
        assert isinstance(load_config(preset), Config), preset


def test_extends_merges_over_parent(tmp_path):
    write(tmp_path, "base.yaml", "train:\n  steps: 7\n  lr: 0.1\n")
    child = write(tmp_path, "child.yaml", "extends: base.yaml\ntrain:\n  lr: 0.2\n")
    cfg = load_config(child)
    assert (cfg.train.steps, cfg.train.lr) == (7, 0.2)


def test_cluster_profile_extends_presets():
    cfg = load_config("clusters/h200-ib")
    assert cfg.slurm.executor == "slurm"
    assert cfg.slurm.gpus_per_node == 8
    assert cfg.model.resolution == 256  # from train-256.yaml
    assert cfg.slurm.env["NCCL_IB_HCA"].startswith("=mlx5_0")


def test_override_applies_and_types_are_parsed():
    cfg = load_config(None, ["train.lr=3e-4", "slurm.exclude=[node1, node2]", "train.compile=true"])
    assert cfg.train.lr == pytest.approx(3e-4)
    assert cfg.slurm.exclude == ["node1", "node2"]
    assert cfg.train.compile is True


def test_round_trip_yaml_and_json(tmp_path):
    cfg = load_config("clusters/h200-ib", ["train.lr=1e-3"])
    dumped = write(tmp_path, "dumped.yaml", cfg.dump("yaml"))
    assert load_config(dumped) == cfg
    assert config_from_dict(json.loads(cfg.dump("json"))) == cfg


def test_extends_cycle_is_an_error(tmp_path):
    write(tmp_path, "a.yaml", "extends: b.yaml\n")
    write(tmp_path, "b.yaml", "extends: a.yaml\n")
    with pytest.raises(ConfigError, match="cycle"):
        load_config(tmp_path / "a.yaml")


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("train:\n  lrr: 1\n", r"bad\.yaml:2: train\.lrr: unknown key; allowed here: .*\blr\b"),
        ("train:\n  steps: many\n", r"bad\.yaml:2: train\.steps: expected an integer, got 'many'"),
        ("train:\n  lr: -1\n", r"bad\.yaml:2: train\.lr: must be > 0\.0, got -1"),
        ("train:\n  precision: fp8\n", r"bad\.yaml:2: train\.precision: expected one of 'fp32'"),
        ("model:\n  resolution: 1024\n", r"bad\.yaml:2: model\.resolution: must be <= 512"),
        ("train: [\n", r"bad\.yaml:2: YAML syntax error"),
        ("x: !!python/object/apply:os.system [echo]\n", r"bad\.yaml:1: unsafe YAML tag .*python"),
        ("- a\n- b\n", r"bad\.yaml:1: top level must be a mapping"),
        (
            "train:\n  faults: {kill_rank: 1}\n",
            r"bad\.yaml:2: train\.faults\.kill_rank: .*together",
        ),
    ],
)
def test_bad_files_name_file_line_and_key(tmp_path, text, expected):
    path = write(tmp_path, "bad.yaml", text)
    with pytest.raises(ConfigError, match=expected) as info:
        load_config(path)
    assert "\n" not in str(info.value)


def test_unsafe_tag_is_never_executed(tmp_path):
    marker = tmp_path / "pwned"
    path = write(tmp_path, "bad.yaml", f"x: !!python/object/apply:os.system ['touch {marker}']\n")
    with pytest.raises(ConfigError):
        load_config(path)
    assert not marker.exists()


def test_missing_file_names_the_path(tmp_path):
    with pytest.raises(ConfigError, match=r"nope\.yaml: file not found"):
        load_config(tmp_path / "nope.yaml")


def test_unknown_override_key_is_an_error():
    with pytest.raises(ConfigError, match=r"--set: train\.nope: unknown key"):
        load_config(None, ["train.nope=1"])
    with pytest.raises(ConfigError, match=r"must look like key\.path=value"):
        load_config(None, ["train.lr"])


def test_override_error_points_at_the_override():
    with pytest.raises(ConfigError, match=r"^--set: train\.steps: must be >= 1"):
        load_config("local", ["train.steps=0"])


def run_cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "ffjobs.cli", *args], capture_output=True, text=True, cwd=REPO
    )


def test_cli_config_show_json_with_override():
    result = run_cli("config", "show", "--set", "train.lr=3e-4", "--format", "json")
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["train"]["lr"] == pytest.approx(3e-4)


def test_cli_config_show_yaml_round_trips():
    result = run_cli("config", "show", "--config", "clusters/h200-ib")
    assert result.returncode == 0, result.stderr
    assert config_from_dict(yaml.safe_load(result.stdout)) == load_config("clusters/h200-ib")


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (("--set", "train.nope=1"), "train.nope: unknown key"),
        (("--config", "does-not-exist.yaml"), "does-not-exist.yaml: file not found"),
    ],
)
def test_cli_config_errors_exit_2_without_traceback(args, needle):
    result = run_cli("config", "show", *args)
    assert result.returncode == 2
    assert needle in result.stderr
    assert "Traceback" not in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


def test_cli_version_and_help():
    from ffjobs import __version__

    assert run_cli("--version").stdout.strip() == f"ffjobs {__version__}"
    assert "config" in run_cli("--help").stdout


# --------------------------------------------------------------------------- YAML 1.2 floats

FLOAT_LITERALS = ["3e-4", "1e6", "2.5E-5", "-1.5e+3", "1.5e3", "+2E2", ".5e1", "1.e-2"]


@pytest.mark.parametrize("literal", FLOAT_LITERALS)
def test_exponent_floats_in_a_file_are_numbers(tmp_path, literal):
    # a float mapping value without a range, so negative literals load too
    path = write(tmp_path, "f.yaml", f'preflight:\n  min_busbw_gbps: {{"1": {literal}}}\n')
    value = load_config(path).preflight.min_busbw_gbps["1"]
    assert isinstance(value, float)
    assert value == float(literal)


@pytest.mark.parametrize("literal", FLOAT_LITERALS)
def test_files_and_set_read_numbers_by_the_same_rule(literal):
    from ffjobs.config.loader import _parse_yaml

    (value,) = _parse_yaml(f"x: {literal}\n")[0].values()
    assert parse_override(f"train.lr={literal}") == ("train.lr", value)
    assert value == float(literal)


def test_lr_3e_4_in_a_preset_loads(tmp_path):
    path = write(tmp_path, "p.yaml", "extends: local\ntrain:\n  lr: 3e-4\n  adam_eps: 1e-8\n")
    cfg = load_config(path)
    assert (cfg.train.lr, cfg.train.adam_eps) == (3e-4, 1e-8)


def test_exponent_floats_inside_lists_and_mappings(tmp_path):
    text = 'preflight:\n  sizes_mib: [1e0, 1.6e1]\n  min_busbw_gbps: {"16": 2e2}\n'
    cfg = load_config(write(tmp_path, "f.yaml", text))
    assert cfg.preflight.sizes_mib == [1.0, 16.0]
    assert cfg.preflight.min_busbw_gbps == {"16": 200.0}


def test_an_integer_field_rejects_an_exponent_float(tmp_path):
    # 1e6 is a float in YAML 1.2; an int field does not truncate or round it.
    path = write(tmp_path, "bad.yaml", "train:\n  steps: 1e6\n")
    with pytest.raises(ConfigError, match=r"bad\.yaml:2: train\.steps: expected an integer"):
        load_config(path)


def test_other_scalars_resolve_as_before(tmp_path):
    text = 'name: "1e3"\ntrain:\n  steps: 1_000\n  seed: 0x10\n  compile: yes\n'
    cfg = load_config(write(tmp_path, "f.yaml", text))
    assert (cfg.name, cfg.train.steps, cfg.train.seed, cfg.train.compile) == ("1e3", 1000, 16, True)
    assert parse_override("data.source=runs/e5") == ("data.source", "runs/e5")
    assert parse_override("name=1.2.3") == ("name", "1.2.3")


def test_unsafe_tag_in_an_override_stays_a_string():
    key, value = parse_override("name=!!python/object/apply:os.getcwd []")
    assert value == "!!python/object/apply:os.getcwd []"


# --------------------------------------------------------------------------- duplicate keys


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("name: a\nname: b\n", r"^\S*bad\.yaml:2: name: duplicate key \(first at line 1\)$"),
        (
            "train:\n  lr: 0.1\n  steps: 3\n  lr: 0.2\n",
            r"bad\.yaml:4: train\.lr: duplicate key \(first at line 2\)$",
        ),
        (
            "train:\n  faults:\n    kill_rank: 0\n    'kill_rank': 1\n",
            r"bad\.yaml:4: train\.faults\.kill_rank: duplicate key \(first at line 3\)$",
        ),
        (
            "slurm:\n  env: {A: x, B: y, A: z}\n",
            r"bad\.yaml:2: slurm\.env\.A: duplicate key \(first at line 2\)$",
        ),
        (
            "slurm:\n  setup:\n    - {a: 1, a: 2}\n",
            r"bad\.yaml:3: slurm\.setup\[0\]\.a: duplicate key \(first at line 3\)$",
        ),
        ("train:\n  lr: 0.1\ntrain:\n  steps: 3\n", r"bad\.yaml:3: train: duplicate key"),
    ],
)
def test_duplicate_keys_are_errors_naming_file_line_and_key(tmp_path, text, expected):
    path = write(tmp_path, "bad.yaml", text)
    with pytest.raises(ConfigError, match=expected):
        load_config(path)


def test_duplicate_key_in_a_parent_preset_names_the_parent(tmp_path):
    write(tmp_path, "base.yaml", "train:\n  steps: 1\n  steps: 2\n")
    child = write(tmp_path, "child.yaml", "extends: base.yaml\n")
    with pytest.raises(ConfigError, match=r"base\.yaml:3: train\.steps: duplicate key"):
        load_config(child)


def test_same_key_in_parent_and_child_is_an_override_not_a_duplicate(tmp_path):
    write(tmp_path, "base.yaml", "train:\n  steps: 1\n")
    child = write(tmp_path, "child.yaml", "extends: base.yaml\ntrain:\n  steps: 2\n")
    assert load_config(child).train.steps == 2


def test_merge_key_overrides_are_not_duplicates(tmp_path):
    text = 'slurm:\n  env:\n    <<: {A: "1", B: "2"}\n    A: "3"\n'
    cfg = load_config(write(tmp_path, "f.yaml", text))
    assert cfg.slurm.env == {"A": "3", "B": "2"}


def test_duplicate_key_in_an_override_is_an_error():
    with pytest.raises(ConfigError, match=r"^--set: slurm\.env\.A: duplicate key$"):
        load_config(None, ["slurm.env={A: x, A: y}"])


def test_cli_duplicate_key_exits_2_with_one_line(tmp_path):
    path = write(tmp_path, "bad.yaml", "extends: local\ntrain:\n  lr: 0.1\n  lr: 0.2\n")
    result = run_cli("config", "show", "-c", str(path))
    assert result.returncode == 2
    assert result.stderr.strip().endswith("bad.yaml:4: train.lr: duplicate key (first at line 3)")
    assert len(result.stderr.strip().splitlines()) == 1
    assert "Traceback" not in result.stderr


# --------------------------------------------------------------------------- JSON schema


def _metadata(cls: type, name: str) -> dict:
    return dict(next(f for f in dataclasses.fields(cls) if f.name == name).metadata)


@pytest.mark.parametrize(
    ("key", "nullable", "expected"),
    [
        ("train.steps", False, {"type": "integer", "minimum": 1}),
        ("train.steps", True, {"type": ["null", "integer"], "minimum": 1}),
        ("train.lr", False, {"type": "number", "exclusiveMinimum": 0.0, "maximum": 1.0}),
        ("data.val_fraction", False, {"type": "number", "minimum": 0.0, "exclusiveMaximum": 1.0}),
        (
            "train.ema_decay",
            False,
            {"type": ["null", "number"], "exclusiveMinimum": 0.0, "exclusiveMaximum": 1.0},
        ),
        ("train.precision", False, {"type": "string", "enum": ["fp32", "bf16", "fp16"]}),
        ("slurm.executor", True, {"type": ["null", "string"], "enum": [None, "local", "slurm"]}),
        ("train.compile", False, {"type": "boolean"}),
        ("data.manifest", False, {"type": ["null", "string"]}),
        ("preflight.sizes_mib", False, {"type": "array"}),
        ("slurm.env", False, {"type": "object"}),
        ("model.losses", False, {"type": "object"}),
        ("train", False, {"type": "object"}),
        ("model.losses.identity", False, {"type": "number", "minimum": 0.0}),
    ],
)
def test_param_schema_turns_types_and_metadata_into_json_schema(key, nullable, expected):
    assert param_schema(key, nullable=nullable) == expected


def test_param_schema_bounds_are_the_fields_own():
    from ffjobs.config.slurm import SlurmConfig
    from ffjobs.config.train import TrainConfig

    assert param_schema("train.steps")["minimum"] == _metadata(TrainConfig, "steps")["ge"]
    lr = _metadata(TrainConfig, "lr")
    assert param_schema("train.lr")["exclusiveMinimum"] == lr["gt"]
    assert param_schema("train.lr")["maximum"] == lr["le"]
    assert param_schema("slurm.nodes")["minimum"] == _metadata(SlurmConfig, "nodes")["ge"]


def test_param_schema_choices_metadata_becomes_an_enum(monkeypatch):
    from ffjobs.config.train import TrainConfig

    steps = next(f for f in dataclasses.fields(TrainConfig) if f.name == "steps")
    monkeypatch.setattr(steps, "metadata", {"choices": (100, 200)})
    assert param_schema("train.steps", nullable=True) == {
        "type": ["null", "integer"],
        "enum": [None, 100, 200],
    }


@pytest.mark.parametrize("key", ["train.nope", "nope", "train.steps.sub"])
def test_param_schema_unknown_key_raises(key):
    with pytest.raises(KeyError, match="no config field"):
        param_schema(key)


# --------------------------------------------------------------------------- bounded cost


def billion_laughs(levels: int) -> str:
    """Each level is a list of nine aliases to the level below: 9**levels strings expanded."""
    lines = ['l0: &l0 ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]']
    for level in range(1, levels + 1):
        below = ", ".join([f"*l{level - 1}"] * 9)
        lines.append(f"l{level}: &l{level} [{below}]")
    return "\n".join(lines) + "\n"


def merge_laughs(levels: int) -> str:
    """The same with merge keys: each level merges the one below nine times."""
    lines = ["m0: &m0 {a: 1, b: 2, c: 3}"]
    for level in range(1, levels + 1):
        below = ", ".join([f"*m{level - 1}"] * 9)
        lines.append(f"m{level}: &m{level} {{<<: [{below}], k{level}: 1}}")
    return "\n".join(lines) + "\n"


LOAD_AND_MEASURE = """
import json, resource, sys, time
from ffjobs.config import ConfigError, load_config
baseline = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
start = time.monotonic()
try:
    load_config(sys.argv[1])
    message = None
except ConfigError as exc:
    message = str(exc)
seconds = time.monotonic() - start
grown_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - baseline
print(json.dumps({"seconds": seconds, "grown_mib": grown_kib / 1024, "message": message}))
"""


def load_in_a_fresh_process(path: Path) -> dict:
    """Load ``path`` in a new interpreter: its time and peak-RSS growth over the import baseline
    (ru_maxrss is a peak, so the growth counts only what loading the config added)."""
    result = subprocess.run(
        [sys.executable, "-c", LOAD_AND_MEASURE, str(path)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    return json.loads(result.stdout)


def fifty_megabytes(tmp_path: Path) -> Path:
    path = tmp_path / "huge.yaml"
    line = "# " + "x" * 97 + "\n"  # 100 bytes a line: a comment YAML would read to the end
    with path.open("w") as out:
        out.write("name: huge\n")
        out.write(line * (50 * 1024 * 1024 // len(line)))
    return path


@pytest.mark.parametrize(
    "make, needle",
    [
        (lambda tmp: write(tmp, "laughs.yaml", billion_laughs(9)), "expands to more than"),
        (lambda tmp: write(tmp, "merges.yaml", merge_laughs(9)), "expands to more than"),
        (fifty_megabytes, "over the 1024 KiB limit"),
    ],
    ids=["billion-laughs-9", "merge-keys-9", "50-MB"],
)
def test_hostile_configs_are_refused_fast_and_small(tmp_path, make, needle):
    path = make(tmp_path)
    measured = load_in_a_fresh_process(path)
    assert measured["message"] is not None and needle in measured["message"]
    assert str(path) in measured["message"]
    # The acceptance bound is 2 s; refusing takes milliseconds (the laughs expand nothing, the
    # big file is refused after reading 1 MiB), so 2 s also holds on a loaded machine.
    assert measured["seconds"] < 2.0, measured
    # Acceptance bound 100 MB above the interpreter and imports; the refusal reads at most
    # 1 MiB and composes a few hundred nodes.
    assert measured["grown_mib"] < 100, measured


@pytest.mark.parametrize("levels", [9])
def test_cli_refuses_a_billion_laughs_in_one_short_line(tmp_path, levels):
    path = write(tmp_path, "laughs.yaml", billion_laughs(levels))
    result = subprocess.run(
        [sys.executable, "-m", "ffjobs.cli", "config", "show", "--config", str(path)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 2
    assert result.stdout == ""
    assert len(result.stderr.splitlines()) == 1
    assert len(result.stderr) < 300 + len(str(path))
    assert "Traceback" not in result.stderr


def test_cli_refuses_a_50_mb_config_in_one_short_line(tmp_path):
    path = fifty_megabytes(tmp_path)
    result = subprocess.run(
        [sys.executable, "-m", "ffjobs.cli", "config", "show", "--config", str(path)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 2
    assert result.stderr.strip() == (
        f"ffjobs: error: {path}: file is {path.stat().st_size} bytes, "
        "over the 1024 KiB limit for a config"
    )


def test_a_config_at_the_size_limit_still_loads(tmp_path):
    from ffjobs.config.loader import MAX_CONFIG_BYTES

    head = "name: edge\n"
    path = write(tmp_path, "edge.yaml", head + "#" * (MAX_CONFIG_BYTES - len(head) - 1) + "\n")
    assert path.stat().st_size == MAX_CONFIG_BYTES
    assert load_config(path).name == "edge"


def test_a_few_aliases_still_load_and_index_lines(tmp_path):
    path = write(
        tmp_path,
        "anchors.yaml",
        "data: &d\n  source: runs/x\ntrain:\n  steps: 3\n  steps: 4\n",
    )
    with pytest.raises(ConfigError) as info:
        load_config(path)
    assert info.value.key == "train.steps" and info.value.line == 5
    shared = write(tmp_path, "shared.yaml", "slurm:\n  exclude: &nodes [a, b]\n")
    assert load_config(shared).slurm.exclude == ["a", "b"]


def test_line_tracking_is_linear_in_aliases(tmp_path):
    # 7 levels took 31 s when the line index walked every alias path; now the expansion check
    # refuses at once; 5 levels (59 049 values) is under the limit and must load quickly.
    five = billion_laughs(5).replace("l0:", "x0:").splitlines()
    text = "slurm:\n  exclude: []\n" + "\n".join("# " + line for line in five) + "\n"
    path = write(tmp_path, "five.yaml", text)
    assert load_config(path).slurm.exclude == []


def test_a_recursive_alias_is_refused(tmp_path):
    path = write(tmp_path, "loop.yaml", "slurm:\n  exclude: &a [x, *a]\n")
    with pytest.raises(ConfigError, match="recursive alias"):
        load_config(path)


def test_deep_nesting_is_one_line_not_a_recursion_traceback(tmp_path):
    path = write(tmp_path, "deep.yaml", "name: " + "[" * 50_000 + "]" * 50_000 + "\n")
    with pytest.raises(ConfigError, match="nested too deeply|expands to more than"):
        load_config(path)


def test_errors_quote_at_most_a_short_prefix_of_a_value(tmp_path):
    secret = "S3CRETLINE" + "y" * 5000
    path = write(tmp_path, "long.yaml", f"name: [{secret}]\n")
    with pytest.raises(ConfigError) as info:
        load_config(path)
    assert "S3CRETLINE" in str(info.value)  # a short prefix, to recognise the value
    assert "y" * 100 not in str(info.value)
    assert len(str(info.value)) < 300 + len(str(path))


def test_errors_quote_at_most_a_short_prefix_of_a_key(tmp_path):
    path = write(tmp_path, "key.yaml", "K" * 5000 + ": 1\n")
    with pytest.raises(ConfigError) as info:
        load_config(path)
    assert "K" * 100 not in str(info.value)


@pytest.mark.parametrize(
    "content",
    [
        "root:$6$abcdefgh$MARKERhash:19000:0:99999:7:::\n",  # a shadow line: a plain scalar
        "MARKER first line\nsecond line\n",
        "- MARKER\n- list\n",
    ],
)
def test_a_file_that_is_not_a_mapping_is_not_quoted(tmp_path, content):
    path = write(tmp_path, "notconfig", content)
    with pytest.raises(ConfigError) as info:
        load_config(path)
    assert "MARKER" not in str(info.value)
    assert str(info.value).startswith(f"{path}:1: ")


def test_a_long_override_value_is_cut_in_the_error():
    with pytest.raises(ConfigError) as info:
        load_config(None, ["train.steps=" + "9" * 40 + "z" * 5000])
    assert "z" * 100 not in str(info.value)
