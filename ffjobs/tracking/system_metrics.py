"""System metrics of a training node: CPU, memory and (with pynvml) each GPU, sampled by the
node's first rank into the run as ``system/<node>/<name>``, through its :class:`RunLogger`
(so they spool through outages like every other metric).

MLflow's own ``SystemMetricsMonitor`` is not used: it logs through a client of its own, not the
spool, and counts its steps from 0 in every process, which a retried attempt would repeat. Here
a sample's step is the training step it was taken at (the logger keeps one sample per step).
"""

from __future__ import annotations

import socket
import threading
from collections.abc import Callable
from typing import Any

from ffjobs.tracking.mlflow_logger import RunLogger


def node_name() -> str:
    return socket.gethostname().split(".")[0] or "node"


class SystemSampler:
    """Samples every ``interval_s`` in a daemon thread until :meth:`stop`; ``step()`` says the
    training step the sample belongs to."""

    def __init__(
        self, logger: RunLogger, interval_s: float, step: Callable[[], int], node: str = ""
    ):
        self.logger, self.interval_s, self.step = logger, interval_s, step
        self.prefix = f"system/{node or node_name()}/"
        self._stopped = threading.Event()
        self._thread: threading.Thread | None = None
        self._gpus = _nvml_handles()

    def start(self) -> SystemSampler:
        if self.interval_s > 0 and self.logger.active:
            import psutil

            psutil.cpu_percent()  # the first call only starts psutil's CPU time window
            self._thread = threading.Thread(target=self._loop, name="ffjobs-system", daemon=True)
            self._thread.start()
        return self

    def stop(self) -> None:
        self._stopped.set()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def sample(self) -> dict[str, float]:
        """One sample: CPU and memory of the node, then each GPU's utilization and memory."""
        import psutil

        memory = psutil.virtual_memory()
        values = {
            "cpu_percent": psutil.cpu_percent(),
            "memory_used_gb": (memory.total - memory.available) / 1e9,
            "memory_percent": memory.percent,
        }
        for index, handle in enumerate(self._gpus):
            values.update(_gpu_sample(index, handle))
        return {self.prefix + key: float(value) for key, value in values.items()}

    def _loop(self) -> None:
        while not self._stopped.wait(self.interval_s):
            try:
                self.logger.log_metrics(self.sample(), self.step())
            except Exception:  # a failed sample is not worth a training run
                continue


def _nvml_handles() -> list[Any]:
    """One NVML handle per GPU; none when pynvml is missing or there is no driver."""
    try:
        import pynvml

        pynvml.nvmlInit()
        return [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(pynvml.nvmlDeviceGetCount())]
    except Exception:
        return []


def _gpu_sample(index: int, handle: Any) -> dict[str, float]:
    import pynvml

    utilization = pynvml.nvmlDeviceGetUtilizationRates(handle)
    memory = pynvml.nvmlDeviceGetMemoryInfo(handle)
    return {
        f"gpu{index}_utilization_percent": utilization.gpu,
        f"gpu{index}_memory_used_gb": memory.used / 1e9,
        f"gpu{index}_memory_percent": 100.0 * memory.used / max(memory.total, 1),
        f"gpu{index}_power_w": pynvml.nvmlDeviceGetPowerUsage(handle) / 1000.0,
    }
