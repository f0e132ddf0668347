"""Running an experiment's trials: in-process, or on Dask (a local cluster or a scheduler address).

Every trial is a pure function of its settings and seed, run with one BLAS / numba thread, so a
trial returns the same numbers wherever it runs and the tables of a serial run and a Dask run are
identical. Finished trials go to the disk cache as they arrive, so an interrupted run resumes with
only the missing trials.
"""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from pymc_crf.reproduce.cache import TrialCache
from pymc_crf.reproduce.registry import Trial, TrialResult, get

__all__ = ["DaskUnavailable", "RunStats", "SchedulerUnreachable", "execute_trial", "run_trials"]


class DaskUnavailable(ImportError):
    """A run on Dask without ``dask[distributed]`` installed (``--serial`` needs none)."""


class SchedulerUnreachable(ConnectionError):
    """No Dask scheduler answers at the ``scheduler`` address given (a stopped scheduler, a
    wrong port, an address that is not one)."""


@dataclass
class RunStats:
    """How many trials of a run came from the cache and how many were computed."""

    cached: int = 0
    computed: int = 0


def execute_trial(experiment: str, settings: dict[str, Any], seed: int) -> dict[str, float]:
    """Run one trial of the registered ``experiment`` with a single BLAS and numba thread.

    Looked up by name so that a Dask worker needs only ``pymc_crf`` installed. Values are returned
    as Python floats (exactly what the JSON cache stores and reads back).
    """
    import numba
    from threadpoolctl import threadpool_limits

    exp = get(experiment)
    threads = numba.get_num_threads()
    numba.set_num_threads(1)
    try:
        with threadpool_limits(1):
            values = exp.run_trial(settings, seed)
    finally:
        numba.set_num_threads(threads)
    return {str(k): float(v) for k, v in values.items()}


def run_warm_up(experiment: str) -> None:
    """Run the experiment's first quick trial and drop it: numba kernels load (or compile) and
    PyTensor functions compile on first use, which would otherwise land in the first timed trial."""
    exp = get(experiment)
    if exp.unavailable() is None:
        trials = exp.trials(exp.params("quick"))
        if trials:
            execute_trial(experiment, trials[0].settings, trials[0].seed)


def _default_workers() -> int:
    return max(1, os.cpu_count() or 1)


def _run_dask(experiment: str, todo: list[tuple[int, Trial]], store: Callable,
              scheduler: str | None, n_workers: int | None, warm_up: bool) -> None:
    try:
        from distributed import Client, LocalCluster, as_completed
    except ImportError as err:
        raise DaskUnavailable("running trials on Dask needs dask[distributed] (pip install "
                              "'pymc_crf[reproduce]'); pass serial=True / --serial to run them "
                              "in-process") from err

    from pymc_crf.reproduce.warm_up import WarmUp

    # The nanny's shutdown chatter ("worker process still alive ... killing") is not a failure.
    logging.getLogger("distributed").setLevel(logging.ERROR)
    cluster = None
    if scheduler is None:
        # Processes with one thread each: the trials are CPU-bound Python / numba.
        cluster = LocalCluster(n_workers=n_workers or _default_workers(), threads_per_worker=1,
                               processes=True, dashboard_address=None)
        client = Client(cluster)
    else:
        try:
            client = Client(scheduler)
        except (OSError, ValueError, TypeError) as err:
            # distributed's own errors (a connect timeout after its 30 s, "missing port
            # number") surface with a traceback through its comm layer; this names the option
            raise SchedulerUnreachable(
                f"cannot reach a Dask scheduler at --scheduler {scheduler!r} ({err}); start one "
                "with `dask scheduler`, or drop --scheduler to run on a LocalCluster") from err
        if not client.scheduler_info().get("workers"):
            # the trials wait for a worker to join; without this line the command sits silent
            print(f"pymc-crf reproduce: the scheduler at {scheduler} has no workers yet; the "
                  f"trials wait until one joins (`dask worker {scheduler} --nthreads 1`)",
                  file=sys.stderr, flush=True)
    try:
        if warm_up:
            client.register_plugin(WarmUp(experiment))
        futures = {client.submit(execute_trial, experiment, trial.settings, trial.seed,
                                 pure=False): i for i, trial in todo}
        try:
            for future in as_completed(futures):
                store(futures[future], future.result())
        except BaseException:
            client.cancel(list(futures))
            raise
    finally:
        client.close()
        if cluster is not None:
            cluster.close()


def run_trials(experiment: str, trials: Sequence[Trial], cache: TrialCache | None = None,
               scheduler: str | None = None, n_workers: int | None = None,
               serial: bool = False, warm_up: bool = True
               ) -> tuple[list[TrialResult], RunStats]:
    """Run ``trials`` of ``experiment``, taking finished ones from ``cache``.

    Parameters
    ----------
    experiment : str
        A registered experiment name.
    trials : sequence of Trial
    cache : TrialCache, optional
        Finished trials are read from it and every newly finished trial is written to it at once.
    scheduler : str, optional
        Address of a running Dask scheduler; by default a ``LocalCluster`` of ``n_workers``
        processes (the number of CPUs) with one thread each.
    n_workers : int, optional
    serial : bool
        Run in this process instead of on Dask.
    warm_up : bool
        Run one quick trial first (in this process, or on every Dask worker when it starts by
        ``pymc_crf.reproduce.warm_up.WarmUp``), so compilation stays out of the timed trials.

    Returns
    -------
    results : list of TrialResult
        In the order of ``trials``.
    stats : RunStats
    """
    values: list[dict[str, float] | None] = [None] * len(trials)
    stats = RunStats()
    todo = []
    for i, trial in enumerate(trials):
        hit = cache.load(trial.settings, trial.seed) if cache is not None else None
        if hit is None:
            todo.append((i, trial))
        else:
            values[i] = hit
            stats.cached += 1

    def store(i: int, result: dict[str, float]) -> None:
        values[i] = result
        stats.computed += 1
        if cache is not None:
            cache.store(trials[i].settings, trials[i].seed, result)

    if todo:
        if serial:
            if warm_up:
                run_warm_up(experiment)
            for i, trial in todo:
                store(i, execute_trial(experiment, trial.settings, trial.seed))
        else:
            _run_dask(experiment, todo, store, scheduler, n_workers, warm_up)
    return [TrialResult(t.settings, t.seed, v) for t, v in zip(trials, values, strict=True)], stats
