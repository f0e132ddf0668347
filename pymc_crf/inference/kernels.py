"""Small numba kernels shared by several engines (one implementation each)."""

from __future__ import annotations

import numpy as np

from pymc_crf.kernel_cache import njit

__all__ = ["MAX", "SUM", "TANGENT", "copy_into", "log_backward", "log_forward", "log_message", "logsumexp_1d",
           "record_sweep", "unused_arrays", "writeable"]


def writeable(a: np.ndarray) -> np.ndarray:
    """``a`` itself where it is writeable, else a copy.

    numba compiles a kernel once per signature, and whether an array is read-only is part of the
    signature: a constant, a ``np.broadcast_to`` view or an input PyTensor marks read-only would
    compile every kernel it reaches a second time (the chain's lane kernels take about a minute).
    The engines hand their kernels writeable arrays only, so each kernel compiles once per
    machine whatever the caller passes. (In numba code ``np.ascontiguousarray`` already types
    its result writeable, but hands a read-only buffer to object mode as it came.)
    """
    return a if a.flags.writeable else a.copy()


@njit(cache=True, inline="always")
def copy_into(dst, src):
    """``dst[:] = src`` for 1-d arrays, element by element.

    numba checks a slice assignment from an array against the source's shape, and the check's
    error message (``raise_with_shape_context``) is formatted by string code that numba compiles
    on the first such assignment in a process: 1-2.5 s for a 1-d, 2-3 s for a 2-d assignment. The
    kernels copy arrays element by element (with this, or with loops for 2-d blocks) instead.
    """
    for a in range(src.shape[0]):
        dst[a] = src[a]


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


# ---------------------------------------------------------------- log-space chain recursion
# One recursion serves every log-space pass over a chain: forward and backward messages, in the
# sum-product semiring (logsumexp: log Z, marginals, sampling), the max-product semiring (Viterbi,
# with back-pointers) and the sum-product semiring with its forward-mode derivative (tangent: the
# exact Hessian-vector product of log Z). The semiring is a run-time constant; the branches on it
# sit outside the inner loops, so one compiled specialisation serves all three.
SUM = 0
MAX = 1
TANGENT = 2


@njit(cache=True)
def unused_arrays():
    """Placeholders for the arrays a semiring of ``log_forward`` / ``log_backward`` does not read
    (back-pointers (2-d int); directions and derivatives (2-d, 3-d))."""
    return np.zeros((0, 0), np.int64), np.zeros((0, 0)), np.zeros((0, 0, 0))


@njit(cache=True)
def log_message(src, M, trans, mode, out, col, arg, dsrc, dM, dout):
    """One log-space message: ``out[j] = (+)_i src[i] + M[i, j]`` (``M[j, i]`` when ``trans``).

    ``(+)`` is logsumexp (``mode`` SUM or TANGENT) or max (MAX, the maximising ``i`` into
    ``arg[j]``). TANGENT also propagates a direction: with the posterior weights
    ``w_ij = exp(src[i] + M[i, j] - out[j])``, ``dout[j] = sum_i w_ij (dsrc[i] + dM[i, j])``,
    the derivative of ``out`` along (dsrc, dM). ``col`` is a scratch vector of length K.
    """
    K = out.shape[0]
    for j in range(K):
        m = -np.inf
        a = 0
        for i in range(K):
            v = src[i] + (M[j, i] if trans else M[i, j])
            col[i] = v
            if v > m:
                m = v
                a = i
        if mode == MAX:
            out[j] = m
            arg[j] = a
            continue
        if m == -np.inf:
            out[j] = -np.inf
            if mode == TANGENT:
                dout[j] = 0.0
            continue
        s = 0.0
        for i in range(K):
            s += np.exp(col[i] - m)
        lz = m + np.log(s)
        out[j] = lz
        if mode == TANGENT:
            d = 0.0
            for i in range(K):
                d += np.exp(col[i] - lz) * (dsrc[i] + (dM[j, i] if trans else dM[i, j]))
            dout[j] = d


@njit(cache=True)
def log_forward(node, lo, n, edge, elo, shared, mode, la, back, vn, ve, da):
    """Forward messages of the chain with node rows ``node[lo:lo+n]`` and edge tables
    ``edge[elo + t - 1]`` (``edge[0]`` when ``shared``) between positions t-1 and t:
    ``la[t, j] = node[lo + t, j] + (+)_i la[t-1, i] + edge[e_t, i, j]`` for t = 1..n-1.

    The caller sets ``la[0]`` (``node[lo]`` for the plain chain, a clamped row when
    conditioning). MAX writes back-pointers ``back[t, j]``; TANGENT writes the derivatives
    ``da`` (``da[0]`` set by the caller) along node / edge directions ``vn``, ``ve`` (same
    indexing as node / edge). Arrays a mode does not use are never read.
    """
    K = la.shape[1]
    tg = mode == TANGENT
    col = np.empty(K)
    z1 = np.zeros(K)
    z2 = np.zeros((K, K))
    zi = np.zeros(K, np.int64)
    for t in range(1, n):
        e = 0 if shared else elo + t - 1
        log_message(la[t - 1], edge[e], False, mode, la[t], col, back[t] if mode == MAX else zi,
                    da[t - 1] if tg else z1, ve[e] if tg else z2, da[t] if tg else z1)
        for j in range(K):
            la[t, j] += node[lo + t, j]
            if tg:
                da[t, j] += vn[lo + t, j]


@njit(cache=True)
def log_backward(node, lo, n, edge, elo, shared, mode, lb, vn, ve, db):
    """Backward messages of the chain of ``log_forward``:
    ``lb[t, i] = (+)_j edge[e_{t+1}, i, j] + node[lo + t + 1, j] + lb[t + 1, j]`` for
    t = n-2..0; the caller sets ``lb[n - 1]`` (zeros, or a boundary factor). TANGENT writes
    ``db`` (``db[n - 1]`` set by the caller) as in ``log_forward``."""
    K = lb.shape[1]
    tg = mode == TANGENT
    col = np.empty(K)
    src = np.empty(K)
    dsrc = np.zeros(K)
    z1 = np.zeros(K)
    z2 = np.zeros((K, K))
    zi = np.zeros(K, np.int64)
    for t in range(n - 2, -1, -1):
        e = 0 if shared else elo + t
        for j in range(K):
            src[j] = node[lo + t + 1, j] + lb[t + 1, j]
            if tg:
                dsrc[j] = vn[lo + t + 1, j] + db[t + 1, j]
        log_message(src, edge[e], True, mode, lb[t], col, zi, dsrc, ve[e] if tg else z2,
                    db[t] if tg else z1)
