"""Progress bars for the iterative fitters, drawn by PyMC's own progress backend.

``pm.sample`` and ``pm.sample_posterior_predictive`` draw their bars with
:func:`pymc.progress_bar.create_simple_progress` (rich in a terminal and in Jupyter, marimo's widget in
marimo, nothing for ``progressbar=False``); the fitters here use the same backend, so a CRF fit looks
and is silenced like a PyMC one. Every fitter takes ``progressbar: bool = True``.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from contextlib import contextmanager

from pymc.progress_bar import create_simple_progress

from pymc_crf.validation import flag

__all__ = ["PYMC_LAYOUTS", "FitProgress", "fit_progress", "progress_flag", "track"]


class FitProgress:
    """One progress task: ``advance()`` after every iteration; ``completed`` counts them.

    ``total`` is the iteration limit; a loop that stops early (converged) still ends at 100 %, as
    the bar is closed by :func:`fit_progress`.
    """

    def __init__(self, backend, task: int, total: int):
        self._backend = backend
        self._task = task
        self.total = int(total)
        self.completed = 0

    def advance(self, n: int = 1) -> None:
        """Record ``n`` more finished iterations."""
        self.completed += n
        self._backend.advance(self._task, n)


#: the progress-bar layouts pm.sample takes besides True / False (each means "show" here)
PYMC_LAYOUTS = ("combined", "split", "combined+stats", "stats+combined", "split+stats",
                "stats+split")


def progress_flag(progressbar, name: str = "progressbar") -> bool:
    """``progressbar`` as a bool: True / False (as :func:`~pymc_crf.validation.flag` reads
    them) or one of ``pm.sample``'s layouts (shown); anything else, such as ``"no"``, a
    ValueError naming ``name``."""
    if isinstance(progressbar, str) and progressbar in PYMC_LAYOUTS:
        return True
    try:
        return flag(progressbar, name)
    except ValueError:
        raise ValueError(f"{name} must be True, False or one of pm.sample's layouts "
                         f"{PYMC_LAYOUTS}; got {progressbar!r}") from None


@contextmanager
def fit_progress(description: str, total: int, progressbar: bool = True) -> Iterator[FitProgress]:
    """A progress bar for ``total`` iterations of a fit, shown while the ``with`` block runs.

    Parameters
    ----------
    description : str
        The bar's label, e.g. ``"EP sweeps"``.
    total : int
        The number of iterations (the iteration limit for loops that may stop early).
    progressbar : bool
        False draws nothing (the bar still counts ``completed``).

    Yields
    ------
    FitProgress
        Call ``advance()`` once per iteration.
    """
    backend = create_simple_progress(progressbar=progress_flag(progressbar))
    with backend:
        task = backend.add_task(description, completed=0, total=int(total))
        bar = FitProgress(backend, task, total)
        try:
            yield bar
        finally:
            backend.update(task, refresh=True, completed=int(total))


def track[T](iterable: Iterable[T], description: str, total: int | None = None,
          progressbar: bool = True) -> Iterator[T]:
    """Iterate over ``iterable`` with a progress bar advancing once per item (as ``rich.track``).

    Breaking out of the loop early (a converged fit) closes the bar at 100 %.

    Parameters
    ----------
    iterable : iterable
        The iterations, e.g. ``range(max_iter)``.
    description : str
        The bar's label.
    total : int, optional
        Number of items (default ``len(iterable)``).
    progressbar : bool
        False draws nothing.
    """
    n = len(iterable) if total is None else int(total)  # type: ignore[arg-type]
    with fit_progress(description, n, progressbar) as bar:
        for item in iterable:
            yield item
            bar.advance()
