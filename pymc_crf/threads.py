"""Worker threads for the batch kernels: how many, and running a kernel's parts on them.

A kernel that splits its batch into parts (``ChainEngine``'s forward-backward splits its lane
blocks) hands the parts to :func:`run_parts`, which runs them on a process-wide pool of Python
threads; the parts are numba functions compiled with ``nogil=True``, so they run in parallel.
Python threads rather than numba's ``parallel=True`` because the kernels are also called from
compiled PyTensor functions that nutpie runs in several threads at once, which numba's default
``workqueue`` threading layer does not allow (it aborts the process), and from processes forked
after the pool was made (the pool is remade in a new process).

How a batch is split depends on the batch only, never on the number of threads, and the parts'
sums are added in a fixed order: results are the same bit for bit with any number of threads.

The number of threads is, in order of precedence: :func:`set_num_threads`; the environment
variable ``PYMC_CRF_NUM_THREADS``; 1 in a ``multiprocessing`` child process (PyMC's sampler
processes, which already run one chain per core); otherwise the number of cores this process
may run on. A call made while another call's parts occupy the pool runs its parts in the
calling thread, so concurrent callers (nutpie's chains) do not oversubscribe the cores.
"""

from __future__ import annotations

import multiprocessing
import os
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

__all__ = ["get_num_threads", "run_parts", "set_num_threads"]

_ENV = "PYMC_CRF_NUM_THREADS"
_state_lock = threading.Lock()
_busy = threading.Lock()  # held while one call's parts are on the pool
_setting: int | None = None
_pool: ThreadPoolExecutor | None = None
_pool_key: tuple[int, int] | None = None  # (process id, size) the pool was made for


def _positive(n: object, what: str) -> int:
    if isinstance(n, bool) or not isinstance(n, int | str):
        raise TypeError(f"{what} must be a whole number >= 1, got {n!r}")
    try:
        v = int(n)
    except ValueError:
        raise ValueError(f"{what} must be a whole number >= 1, got {n!r}") from None
    if v < 1:
        raise ValueError(f"{what} must be a whole number >= 1, got {n!r}")
    return v


def _usable_cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


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
    if multiprocessing.parent_process() is not None:
        return 1
    return _usable_cores()


def set_num_threads(n: int | None) -> None:
    """Set the number of threads of the batch kernels for this process.

    Parameters
    ----------
    n : int or None
        A whole number >= 1, or None to go back to the default (``PYMC_CRF_NUM_THREADS``, else
        1 in a ``multiprocessing`` child process, else the usable cores).

    Notes
    -----
    Results do not depend on the number of threads: a batch is split the same way for any
    number, and the parts' sums are added in a fixed order.

    Examples
    --------
    >>> import pymc_crf as pmc
    >>> pmc.set_num_threads(1)
    >>> pmc.get_num_threads()
    1
    >>> pmc.set_num_threads(None)
    """
    global _setting
    _setting = None if n is None else _positive(n, "the number of threads")


def _get_pool(size: int) -> ThreadPoolExecutor:
    global _pool, _pool_key
    key = (os.getpid(), size)
    with _state_lock:
        if _pool_key != key:
            old = _pool if _pool_key is not None and _pool_key[0] == key[0] else None
            _pool = ThreadPoolExecutor(size, thread_name_prefix="pymc_crf")
            _pool_key = key
            if old is not None:  # a resize in this process; a forked child has no workers
                old.shutdown(wait=False)
        return _pool


def run_parts(part: Callable[[int], None], n_parts: int) -> None:
    """Call ``part(0), ..., part(n_parts - 1)``, on the worker threads when there are several.

    Parameters
    ----------
    part : callable
        Runs one part; parts must write to disjoint outputs (or per-part ones the caller then
        adds up in order). Long parts should release the GIL (numba ``nogil=True``).
    n_parts : int
        The number of parts.

    Notes
    -----
    Returns only after every part has finished, also when one raises; the first exception (in
    part order) is then raised again here.
    """
    threads = get_num_threads()
    if min(threads, n_parts) <= 1 or not _busy.acquire(blocking=False):
        for p in range(n_parts):
            part(p)
        return
    try:
        futures = [_get_pool(threads).submit(part, p) for p in range(n_parts)]
        errors = [f.exception() for f in futures]  # waits for every part
    finally:
        _busy.release()
    for e in errors:
        if e is not None:
            raise e
