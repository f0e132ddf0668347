"""Worker threads for the batch kernels: how many, and running a kernel's parts on them.

A kernel that splits its batch into parts (``ChainEngine``'s forward-backward splits its lane
blocks) hands the parts to :func:`run_parts`. The calling thread and ``n - 1`` helper threads
take the parts in turn; the parts are numba functions compiled with ``nogil=True``, so they run
in parallel. Python threads rather than numba's ``parallel=True``: the kernels are also called
from compiled PyTensor functions that nutpie runs in several threads at once, which numba's
default ``workqueue`` threading layer does not allow (it aborts the process).

A helper stays for the next call (an optimiser calls the kernels many times a second, and a
thread started per call would add its start-up to every call) and exits after a second without
work, so a process that forks later
(``multiprocessing``) mostly forks a single-threaded Python; a forked child starts with no
helpers.

How a batch is split depends on the batch only, never on the number of threads, and the parts'
sums are added in a fixed order: results are the same bit for bit with any number of threads.

The number of threads is :func:`set_num_threads`, else the environment variable
``PYMC_CRF_NUM_THREADS``, else 1. One by default because OpenBLAS, as numpy and scipy ship it,
keeps a worker thread spinning on every other core for about 2^28 cycles after each product,
and the kernels run right after one (the node table ``X @ W``), so a second kernel thread finds
its core taken. Where the BLAS workers sleep at once (``OPENBLAS_THREAD_TIMEOUT=4`` in the
environment before numpy loads) or do not exist (``OPENBLAS_NUM_THREADS=1``), more threads pay
(docs/benchmarks.md, "Chain paths", threads). Sampler processes already run one chain per
core. A call made while another call's helpers are running runs its parts in the calling
thread alone, so concurrent callers (nutpie's chains) do not oversubscribe the cores.
"""

from __future__ import annotations

import numbers
import os
import threading
from collections.abc import Callable

__all__ = ["get_num_threads", "run_parts", "set_num_threads"]

_ENV = "PYMC_CRF_NUM_THREADS"
_IDLE_SECONDS = 1.0  # a helper exits after this long without work
_busy = threading.Lock()  # held while one call's parts run on helpers
_setting: int | None = None


class _Helper:
    """One helper thread: runs the job posted to it, waits for the next, and exits after
    ``_IDLE_SECONDS`` without one (a later post starts a new thread). Jobs are posted only
    under ``_busy`` and each is waited for, so at most one is pending."""

    def __init__(self, name: str):
        self.name = name
        self.cv = threading.Condition()
        self.job: Callable[[], None] | None = None
        self.alive = False  # a thread is running _loop (guarded by cv)

    def post(self, job: Callable[[], None]) -> None:
        with self.cv:
            self.job = job
            if self.alive:
                self.cv.notify()
            else:
                self.alive = True
                threading.Thread(target=self._loop, name=self.name, daemon=True).start()

    def _loop(self) -> None:
        with self.cv:
            while True:
                if self.job is None:
                    self.cv.wait(_IDLE_SECONDS)
                    if self.job is None:  # idle (or woken without a job): exit
                        self.alive = False
                        return
                job, self.job = self.job, None
                self.cv.release()
                try:
                    job()
                finally:
                    self.cv.acquire()


_helpers: list[_Helper] = []


def _after_fork_in_child() -> None:
    """A forked child has none of the parent's helper threads, and a lock another thread of
    the parent held at the fork stays held: start with fresh ones."""
    global _busy, _helpers
    _busy = threading.Lock()
    _helpers = []


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


def _positive(n: object, what: str) -> int:
    # numbers.Integral: numpy's integers too (a count computed with numpy is no Python int)
    if isinstance(n, bool) or not isinstance(n, numbers.Integral | str):
        raise TypeError(f"{what} must be a whole number >= 1, got {n!r}")
    try:
        v = int(n)
    except ValueError:
        raise ValueError(f"{what} must be a whole number >= 1, got {n!r}") from None
    if v < 1:
        raise ValueError(f"{what} must be a whole number >= 1, got {n!r}")
    return v


def get_num_threads() -> int:
    """The number of threads the batch kernels use (see the module notes for the default).

    Returns
    -------
    int
        At least 1.

    Raises
    ------
    ValueError
        If ``PYMC_CRF_NUM_THREADS`` is set to anything but a whole number >= 1.
    """
    if _setting is not None:
        return _setting
    env = os.environ.get(_ENV)
    if env is not None and env.strip():
        return _positive(env.strip(), _ENV)
    return 1


def set_num_threads(n: int | None) -> None:
    """Set the number of threads of the batch kernels for this process.

    Parameters
    ----------
    n : int or None
        A whole number >= 1, or None to go back to the default (``PYMC_CRF_NUM_THREADS``, else
        1; see the module notes for when more threads pay).

    Notes
    -----
    Results do not depend on the number of threads: a batch is split the same way for any
    number, and the parts' sums are added in a fixed order.

    Examples
    --------
    >>> import pymc_crf as pmc
    >>> pmc.set_num_threads(2)
    >>> pmc.get_num_threads()
    2
    >>> pmc.set_num_threads(None)
    """
    global _setting
    _setting = None if n is None else _positive(n, "the number of threads")


def run_parts(part: Callable[[int, int], None], n_parts: int, workers: int) -> None:
    """Call ``part(p, w)`` for p = 0, ..., n_parts - 1, on up to ``workers`` threads.

    Parameters
    ----------
    part : callable
        ``part(p, w)`` runs part ``p`` on worker ``w`` (``0 <= w < workers``; no two parts run
        on one worker at once, so ``w`` may index per-worker buffers). Parts must write to
        disjoint outputs (or per-part ones the caller then adds up in order). Long parts should
        release the GIL (numba ``nogil=True``).
    n_parts : int
        The number of parts.
    workers : int
        At most this many threads: the calling thread (worker 0) and helper threads started
        for the call. Usually ``min(get_num_threads(), n_parts)``.

    Notes
    -----
    The workers take the parts in order. Returns only after every part has finished, also when
    one raises; the first exception (in part order) is then raised again here. While another
    call's parts run on the helpers, every part of this call runs on the calling thread as
    worker 0.
    """
    threads = min(workers, n_parts)
    if threads <= 1 or not _busy.acquire(blocking=False):
        for p in range(n_parts):
            part(p, 0)
        return
    try:
        taken = threading.Lock()
        next_part = [0]
        errors: list[BaseException | None] = [None] * n_parts

        def work(w: int) -> None:
            while True:
                with taken:
                    p = next_part[0]
                    next_part[0] += 1
                if p >= n_parts:
                    return
                try:
                    part(p, w)
                except BaseException as e:  # re-raised by the caller after every part ends
                    errors[p] = e

        done = [threading.Event() for _ in range(threads - 1)]

        def job(w: int) -> Callable[[], None]:
            def run() -> None:
                try:
                    work(w)
                finally:
                    done[w - 1].set()
            return run

        while len(_helpers) < threads - 1:
            _helpers.append(_Helper(f"pymc_crf-{len(_helpers) + 1}"))
        for w in range(1, threads):
            _helpers[w - 1].post(job(w))
        work(0)
        for d in done:
            d.wait()
    finally:
        _busy.release()
    for e in errors:
        if e is not None:
            raise e
