"""The Dask worker plugin that warms the numba and PyTensor caches once per worker."""

from __future__ import annotations

from typing import Any

from distributed.diagnostics.plugin import WorkerPlugin

from pymc_crf.reproduce.runner import run_warm_up

__all__ = ["WarmUp"]


class WarmUp(WorkerPlugin):
    """Run the first quick trial of an experiment when a worker starts.

    Loading the numba kernels from their disk cache and compiling the PyTensor functions happens on
    first use in each process; doing it here, once per worker, keeps it out of the timed trials.
    """

    name = "pymc-crf-reproduce-warm-up"

    def __init__(self, experiment: str) -> None:
        self.experiment = experiment

    def setup(self, worker: Any) -> None:
        run_warm_up(self.experiment)
