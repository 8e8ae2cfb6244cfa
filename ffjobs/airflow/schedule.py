"""When ``ffjobs_pipeline`` runs by itself: the deployment's ``configs/schedule.yaml``.

The file names a cron expression, a dataset Asset (its URI), or both ("at 03:00, or as soon
as the dataset is updated"), and the preset a scheduled run trains with. No file, or an empty
one, means no schedule: the DAG runs only when triggered by hand. The DAG reads the file when
it is parsed; a mistake in it is the DAG's import error, naming the file, line and key.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ffjobs.airflow.trigger_conf import CONFIGS_FOLDER, SCHEDULE_FILE, config_choices
from ffjobs.config import DEFAULT_PRESET, ConfigError, load_dataclass


@dataclass
class ScheduleConfig:
    """The deployment's schedule of ``ffjobs_pipeline``."""

    cron: str | None = None
    """A cron expression (``0 3 * * *``, ``@daily``) in UTC: a run at each of its times."""
    dataset: str | None = None
    """The URI of the dataset's Airflow Asset (``s3://faces/train``): a run each time it is
    updated (an Asset event: a producer task's outlet, or ``POST /api/v2/assets/events``)."""
    config: str = DEFAULT_PRESET
    """The preset a scheduled run trains with: one of the trigger form's choices (also the
    form's default)."""
    force: bool = False
    """Train on every scheduled run, even when the inputs equal those of the champion or the
    challenger (the ``force`` Param's default)."""

    def __post_init__(self) -> None:
        if self.cron is not None:
            from croniter import croniter

            if not croniter.is_valid(self.cron):
                raise ValueError(
                    f"cron: not a cron expression: {self.cron!r} (five fields, such as "
                    "'0 3 * * *', or a preset such as '@daily')"
                )
        if self.dataset is not None:
            from airflow.sdk import Asset

            try:
                Asset(self.dataset)
            except (ValueError, TypeError) as exc:
                raise ValueError(f"dataset: not an Asset URI: {exc}") from None

    @property
    def enabled(self) -> bool:
        return self.cron is not None or self.dataset is not None


def load_schedule(workdir: Path | None = None) -> ScheduleConfig:
    """The schedule in ``workdir/configs/schedule.yaml`` (default: the current folder); a
    missing file is no schedule. A preset the trigger form does not offer is an error."""
    workdir = (workdir or Path.cwd()).resolve()
    path = workdir / CONFIGS_FOLDER / SCHEDULE_FILE
    if not path.exists():
        return ScheduleConfig()
    schedule = load_dataclass(ScheduleConfig, path)
    choices = config_choices(workdir)
    if schedule.config not in choices:
        raise ConfigError(
            f"no such preset {schedule.config!r}; choose one the trigger form offers: "
            f"{', '.join(choices)}",
            source=str(path),
            key="config",
        )
    if not schedule.enabled and path.read_text().strip():
        raise ConfigError(
            "set cron, dataset or both (or remove the file: no schedule)",
            source=str(path),
        )
    return schedule


def dag_schedule(schedule: ScheduleConfig) -> Any:
    """The DAG's ``schedule=``: ``None``, a cron timetable, the dataset's Asset, or either."""
    from airflow.sdk import Asset, AssetOrTimeSchedule, CronTriggerTimetable

    cron = CronTriggerTimetable(schedule.cron, timezone="UTC") if schedule.cron else None
    asset = Asset(schedule.dataset) if schedule.dataset else None
    if cron and asset:
        return AssetOrTimeSchedule(timetable=cron, assets=asset)
    if asset:
        return [asset]
    return cron
