"""Small numba kernels shared by several engines (one implementation each)."""

from __future__ import annotations

import numpy as np
from numba import njit

__all__ = ["logsumexp_1d", "record_sweep"]


@njit(cache=True)
def logsumexp_1d(x):
    """log(sum(exp(x))) of a 1-d array, with the max subtracted; -inf for an all -inf input."""
    m = -np.inf
    for v in x:
        if v > m:
            m = v
    if m == -np.inf:
        return -np.inf
    s = 0.0
    for v in x:
        s += np.exp(v - m)
    return m + np.log(s)


@njit(cache=True)
def record_sweep(it, step, tol, active, iters, changes, converged):
    """Per-graph convergence bookkeeping after sweep ``it`` of an iterative method (BP, mean
    field): every active graph records the sweep count and its largest change ``step[g]``, and
    stops (inactive, converged) once that change is below ``tol``."""
    for g in range(step.shape[0]):
        if active[g]:
            iters[g] = it + 1
            changes[g] = step[g]
            if step[g] < tol:
                active[g] = False
                converged[g] = True
