"""Small numba kernels shared by several engines (one implementation each)."""

from __future__ import annotations

import numpy as np
from numba import njit

__all__ = ["logsumexp_1d"]


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
