"""Numba implementations of the package's random variables (``CRFRV``, ``HCRFRV``, ``MRFRV``).

Their draws run the inference engine's exact sampler, which is not numba code, so the compiled
function calls the Op's ``rng_fn`` from object mode with a seed taken from the numba generator. The
object-mode block cannot hold the Op itself, so it names it by a content key (graph structure,
engine settings and the Op's own settings) in a per-process registry: the key is also the numba
cache key, so a compiled model is reused across processes.
"""

from __future__ import annotations

import numba
import numpy as np

__all__ = ["objmode_random_fn"]

_REGISTRY: dict[int, object] = {}

#: part of every cache key: bump it when the compiled draw function changes, so functions cached
#: by an older version (which name other Python helpers) are not loaded
_VERSION = 3


def _draw_registered(key, seed, params):
    op = _REGISTRY[key]
    out = op.rng_fn(np.random.default_rng(int(seed)), *params, None)
    return np.ascontiguousarray(out, dtype=np.int64)


def objmode_random_fn(op, key: int, ndim: int):
    """``(random_fn, cache_key)`` for ``numba_core_rv_funcify``: draws of ``op`` (int64 arrays of
    ``ndim`` dimensions) through its ``rng_fn`` in object mode, registered under ``key`` (the Op's
    content key) combined with this module's version."""
    key = (int(key) * 1_000_003 + _VERSION) & (2**63 - 1)
    out_type = numba.types.Array(numba.int64, ndim, "C")
    _REGISTRY[key] = op

    @numba.njit
    def random_fn(rng, *params):
        seed = rng.integers(0, 2**62)
        with numba.objmode(out=out_type):
            out = _draw_registered(key, seed, params)
        return out

    return random_fn, key
