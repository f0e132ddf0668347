"""A one-line notice before a numba kernel compiles on a machine's first use.

numba compiles a kernel on its first call and keeps the machine code in its disk cache (beside
the source, or under ``NUMBA_CACHE_DIR``): later processes load it in well under a second. The
first compilation of the larger kernels takes from seconds to about a minute, which a user would
otherwise read as a hang; ``pymc-crf warm-up`` compiles them all ahead of time.
"""

from __future__ import annotations

import logging
import os

__all__ = ["first_use_notice", "logger"]

logger = logging.getLogger("pymc_crf")
if not logging.root.handlers and not logger.handlers:  # as PyMC sets up its own logger
    _handler = logging.StreamHandler()
    _handler.setFormatter(logging.Formatter("%(message)s"))
    logger.addHandler(_handler)
    logger.setLevel(logging.INFO)
    logger.propagate = False

_announced: set[str] = set()


def _compiled_on_disk(dispatcher) -> bool:
    """Whether numba's disk cache holds a compiled version of ``dispatcher`` (any signature)."""
    cache = getattr(dispatcher, "_cache", None)
    cache_file = getattr(cache, "_cache_file", None)
    index = getattr(cache_file, "_index_path", None)
    return index is None or os.path.exists(index)


def first_use_notice(dispatcher, what: str) -> None:
    """Log once per process and ``what`` that ``what`` is being compiled, when ``dispatcher`` (a numba
    ``njit`` function) has neither a compiled signature in this process nor one on disk."""
    if dispatcher.signatures or what in _announced:
        return
    _announced.add(what)
    if not _compiled_on_disk(dispatcher):
        logger.info("pymc_crf: compiling %s (first use on this machine only; "
                    "`pymc-crf warm-up` compiles every kernel ahead of time) ...", what)
