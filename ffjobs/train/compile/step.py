"""The compilation of one rank's training step, as the trainer holds it: the mode, and the run's
compile cache around it (loaded before the step is traced, its region captures offered to the
compiled regions, published once the first step is done).

Without the run's signing key (``train.compile_cache`` off, or an eager run) nothing is read
from or written to the checkpoint store: the job compiles cold.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import Any

from ffjobs.config import Config
from ffjobs.train.checkpoint.storage import CheckpointStore
from ffjobs.train.compile import cache, regions
from ffjobs.train.compile.regions import CompiledRegion


class StepCompilation:
    """``mode`` (``None``: eager), the cache report, and the calls the trainer makes."""

    def __init__(
        self,
        config: Config,
        store: CheckpointStore,
        rank: int,
        device: object,
        signing_key: bytes | None,
    ):
        tc = config.train
        self.store, self.rank = store, rank
        self.mode = tc.compile_mode if tc.compile else None
        self.report = cache.CacheReport()
        self.device_name = cache.device_name(device)  # whose region captures
        self.key = signing_key if tc.compile and tc.compile_cache else None
        self.fingerprint = ""  # of the region captures: only with the compile cache
        self.regions: list[CompiledRegion] = []
        if self.key is not None:
            settings = {
                "model": config.to_dict()["model"],
                "precision": tc.precision,
                "channels_last": tc.channels_last,
                "compile_mode": self.mode,
            }
            self.fingerprint = regions.fingerprint(settings)
            cache.load(store, self.report, rank, self.fingerprint, self.device_name, key=self.key)

    def offer(
        self, wrapped: list[Any], autocast: Callable[[], AbstractContextManager[Any]]
    ) -> None:
        """Keep the compiled ones of ``wrapped``, in the order a step first calls them; their
        saved captures load in the background, in this order, under the step's autocast."""
        self.regions = [region for region in wrapped if isinstance(region, CompiledRegion)]
        regions.offer_all(self.regions, self.report.regions, self.report.regions_from, autocast)

    def first_step_done(self) -> None:
        """Publish what the first step compiled: every rank its device's captures, rank 0 the
        compiler's caches (signed)."""
        cache.first_step_done(self.store, self.report)
        if self.key is None:
            return
        captures = regions.save_all(self.regions)
        cache.save_regions(
            self.store, self.report, captures, self.fingerprint, self.device_name, key=self.key
        )
        if self.rank == 0:
            cache.save(self.store, self.report, key=self.key)

    def summary(self) -> str:
        """``compile cache: N entries loaded, M saved; <regions>, K regions saved``."""
        report = self.report
        return (
            f"compile cache: {report.loaded_entries} entries loaded, {report.saved_entries} "
            f"saved; {regions.summary(self.regions)}, {report.saved_regions} regions saved"
        )
