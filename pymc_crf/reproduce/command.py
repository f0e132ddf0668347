"""``pymc-crf reproduce NAME``: run one paper reproduction and write its table and figure."""

from __future__ import annotations

import argparse
import json
import shlex
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pymc_crf.reproduce.cache import TrialCache, code_fingerprint, environment_fingerprint
from pymc_crf.reproduce.registry import Report, TrialResult, available, get
from pymc_crf.reproduce.report import write_report
from pymc_crf.reproduce.runner import (
    DaskUnavailable,
    RunStats,
    SchedulerUnreachable,
    run_trials,
)
from pymc_crf.validation import int_at_least

__all__ = ["OutputError", "ReproduceRun", "add_arguments", "parse_overrides", "run",
           "run_experiment"]


class OutputError(OSError):
    """The ``out`` folder cannot hold the report or the trial cache (a path through a file, a
    folder without write permission)."""


def _check_writable(*folders: Path) -> None:
    """Create ``folders`` and write a probe file in each, so an output folder that cannot be
    written fails before any trial runs (the cache is written after the first trial, the
    report after the last)."""
    import tempfile

    for folder in folders:
        try:
            folder.mkdir(parents=True, exist_ok=True)
            with tempfile.TemporaryFile(dir=folder):
                pass
        except OSError as err:
            raise OutputError(f"cannot write to --out: {folder}: "
                              f"{err.strerror or err}") from err


@dataclass
class ReproduceRun:
    """The outcome of :func:`run_experiment`: trial results (grid order), the report, the written
    paths, cache statistics, and ``skipped`` (the reason, when the experiment cannot run here)."""

    results: list[TrialResult]
    report: Report | None
    paths: dict[str, Path]
    stats: RunStats
    params: dict[str, Any]
    skipped: str | None = None


def parse_overrides(items: list[str] | None) -> dict[str, Any]:
    """``["trials=3", "train=[10, 30]"]`` -> ``{"trials": 3, "train": [10, 30]}`` (values are read
    as JSON, falling back to the plain string)."""
    out = {}
    for item in items or []:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise ValueError(f"--set expects KEY=VALUE, got {item!r}")
        try:
            out[key.strip()] = json.loads(value)
        except json.JSONDecodeError:
            out[key.strip()] = value
    return out


def run_experiment(name: str, *, quick: bool = False, overrides: dict[str, Any] | None = None,
                   out: str | Path = "reproduce_out", scheduler: str | None = None,
                   n_workers: int | None = None, serial: bool = False, cache: bool = True,
                   warm_up: bool = True, command: str | None = None) -> ReproduceRun:
    """Run the experiment ``name`` and write its report under ``out / name``.

    Parameters
    ----------
    name : str
        A registered experiment (see ``pymc-crf reproduce --list``).
    quick : bool
        The smoke-test size instead of the paper's grid.
    overrides : dict, optional
        Parameter values replacing the size preset's (unknown names are an error).
    out : path
        Output folder; finished trials are cached under ``out / "cache"``.
    scheduler, n_workers, serial :
        Where trials run (see :func:`pymc_crf.reproduce.runner.run_trials`).
    cache : bool
        Read and write the trial cache.
    warm_up : bool
        Run one quick trial first wherever trials run, to keep compilation out of the timings.
    command : str, optional
        The command line recorded in the report.

    Returns
    -------
    ReproduceRun

    Raises
    ------
    OutputError
        ``out`` cannot be written (checked before any trial runs).
    pymc_crf.reproduce.runner.SchedulerUnreachable
        No scheduler answers at ``scheduler``.
    pymc_crf.reproduce.runner.DaskUnavailable
        A run on Dask without ``dask[distributed]`` installed.
    """
    import pymc_crf

    exp = get(name)
    params = exp.params("quick" if quick else "full", overrides)
    reason = exp.unavailable()
    if reason is not None:
        return ReproduceRun([], None, {}, RunStats(), params, skipped=reason)
    _check_writable(Path(out) / name, *([Path(out) / "cache" / name] if cache else []))
    trial_cache = None
    if cache:
        version = (f"{pymc_crf.__version__}+{code_fingerprint(exp.sources)[:16]}"
                   f"+{environment_fingerprint()[:16]}")
        trial_cache = TrialCache(Path(out) / "cache", name, version)
    results, stats = run_trials(name, exp.trials(params), trial_cache, scheduler=scheduler,
                                n_workers=n_workers, serial=serial, warm_up=warm_up)
    report = exp.report(results, params)
    if command is None:
        command = f"pymc-crf reproduce {name}" + (" --quick" if quick else "") + "".join(
            f" --set {shlex.quote(f'{k}={json.dumps(v)}')}" for k, v in (overrides or {}).items())
    paths = write_report(out, name, report, results, params, command)
    return ReproduceRun(results, report, paths, stats, params)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Add the ``reproduce`` options to ``parser``."""
    parser.add_argument("name", nargs="?", help="experiment to run (see --list)")
    parser.add_argument("--list", action="store_true", help="list the experiments and exit")
    parser.add_argument("--quick", action="store_true",
                        help="a tiny smoke-test size (seconds per trial) instead of the paper's")
    parser.add_argument("--set", action="append", metavar="KEY=VALUE", dest="overrides",
                        help="override a parameter of the size preset (value read as JSON), "
                             "e.g. --set trials=3 --set 'train=[10,30]'")
    parser.add_argument("--out", default="reproduce_out",
                        help="output folder (report in OUT/NAME, trial cache in OUT/cache)")
    where = parser.add_mutually_exclusive_group()
    where.add_argument("--scheduler", metavar="ADDRESS",
                       help="address of a running Dask scheduler (default: a LocalCluster)")
    where.add_argument("--serial", action="store_true", help="run the trials in this process")
    parser.add_argument("--workers", type=int_at_least(1), default=None,
                        help="LocalCluster worker processes (default: the number of CPUs)")
    parser.add_argument("--no-cache", action="store_true",
                        help="neither read nor write the trial cache")
    parser.add_argument("--show-params", action="store_true",
                        help="print the parameters of the chosen size and exit")


def run(args: argparse.Namespace) -> int:
    """Run the ``reproduce`` command from parsed arguments; returns the exit status."""
    out = sys.stdout
    if args.list:
        experiments = available()
        width = max(map(len, experiments))
        for name, exp in experiments.items():
            print(f"{name:<{width}}  {exp.description}", file=out)
        return 0
    if args.name is None:
        print("pymc-crf reproduce: give an experiment NAME or --list", file=sys.stderr)
        return 2
    try:
        exp = get(args.name)
        overrides = parse_overrides(args.overrides)
        params = exp.params("quick" if args.quick else "full", overrides)
    except ValueError as err:
        print(f"pymc-crf reproduce: {err}", file=sys.stderr)
        return 2
    if args.show_params:
        print(json.dumps(params, indent=1, sort_keys=True), file=out)
        return 0
    t0 = time.perf_counter()
    try:
        res = run_experiment(args.name, quick=args.quick, overrides=overrides, out=args.out,
                             scheduler=args.scheduler, n_workers=args.workers,
                             serial=args.serial, cache=not args.no_cache)
    except (OutputError, SchedulerUnreachable, DaskUnavailable) as err:
        # raised before any trial runs; the message names the option to change
        print(f"pymc-crf reproduce: {err}", file=sys.stderr)
        return 2
    if res.skipped is not None:
        print(f"{args.name}: SKIPPED, {res.skipped}", file=out)
        return 0
    print(res.report.tables, file=out)
    print(f"\n{args.name}: {res.stats.computed} trials computed, {res.stats.cached} from the "
          f"cache, {time.perf_counter() - t0:.1f} s; report in {res.paths['markdown']}", file=out)
    return 0
