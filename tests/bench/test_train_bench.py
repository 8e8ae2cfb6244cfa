"""``ffjobs bench train``: the plain baseline's settings and the last line of ratios."""

from __future__ import annotations

from ffjobs.bench.train import plain_path, ratio_summary, run_compiler_cache
from ffjobs.config import load_config


def test_plain_path_turns_off_every_speed_up_and_leaves_the_preset_alone():
    preset = load_config("train-256", [])
    plain = plain_path(preset, "/tmp/plain")
    tc = plain.train
    assert (tc.precision, tc.channels_last, tc.compile) == ("fp32", False, False)
    assert (tc.fused_adam, tc.async_checkpoint, tc.checkpoint_dir) == (False, False, "/tmp/plain")
    assert plain.model == preset.model and tc.batch_size == preset.train.batch_size
    assert (preset.train.precision, preset.train.compile) == ("bf16", True)
    assert preset.train.async_checkpoint


def test_ratio_summary_reports_ratio_mfu_data_wait_checkpoint_and_first_step():
    report = {
        "images_per_s": 700.0,
        "mfu_vs_measured_peak": 0.331,
        "data_wait_fraction": 0.012,
        "checkpoint_blocked_fraction": 0.004,
        "first_step_s": 8.25,
        "compile_cache_loaded_entries": 40,
        "baseline": {"images_per_s": 250.0},
    }
    assert ratio_summary(report) == (
        "ratio: preset/plain 2.80x img/s; MFU 33.1% of measured peak; data wait 1.2%; "
        "checkpoint blocked 0.4%; first step 8.2 s (warm)"
    )
    assert ratio_summary({"images_per_s": 1.0}).startswith("ratio: MFU - of measured peak")


def test_every_launch_on_one_checkpoint_folder_compiles_in_one_local_cache_path(tmp_path):
    # the blob's kernels name their files in the folder they were compiled in: a warm launch
    # elsewhere would tune every kernel again, which a restart with Inductor's default does not
    run = tmp_path / "run"
    assert run_compiler_cache(str(run)) == run_compiler_cache(str(tmp_path / "." / "run"))
    assert run_compiler_cache(str(run)) != run_compiler_cache(str(tmp_path / "other"))
    assert run_compiler_cache("s3://bucket/run") != run_compiler_cache("s3://bucket/other")
