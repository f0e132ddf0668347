"""Paper reproductions as grids of independent trials, run serially or on Dask.

``pymc-crf reproduce --list`` names the experiments; ``pymc-crf reproduce NAME`` runs one on a
local Dask cluster (``--scheduler ADDRESS`` for an existing one, ``--serial`` in-process) and writes
a markdown table with the paper's numbers beside ours and a figure to ``--out`` (default
``./reproduce_out``). Finished trials are cached on disk, so an interrupted run resumes.
"""

from pymc_crf.reproduce.command import (
    OutputError,
    ReproduceRun,
    add_arguments,
    parse_overrides,
    run,
    run_experiment,
)
from pymc_crf.reproduce.registry import (
    Experiment,
    Report,
    Trial,
    TrialResult,
    available,
    get,
    register,
)
from pymc_crf.reproduce.runner import (
    DaskUnavailable,
    RunStats,
    SchedulerUnreachable,
    execute_trial,
    run_trials,
)

__all__ = [
    "DaskUnavailable",
    "Experiment",
    "OutputError",
    "Report",
    "ReproduceRun",
    "RunStats",
    "SchedulerUnreachable",
    "Trial",
    "TrialResult",
    "add_arguments",
    "available",
    "execute_trial",
    "get",
    "parse_overrides",
    "register",
    "run",
    "run_experiment",
    "run_trials",
]
