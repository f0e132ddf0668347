"""Unbounded L-BFGS whose own work is O(m d) per iteration, for MAP fits with millions of weights.

scipy's L-BFGS-B handles bounds through a generalised Cauchy point whose cost per iteration is far
above the O(m d) of the plain two-loop recursion: with 10^5 weights and more, its own work
(``setulb``) costs more per iteration than the CRF objective (docs/benchmarks.md, "Real data:
CoNLL-2000"). The weights of a CRF are
unbounded, so the plain method does: the two-loop recursion for the search direction (Nocedal &
Wright 2006, Numerical Optimization, Alg. 7.4, with the initial scaling ``s'y / y'y`` of their
eq. (7.20)) and a backtracking line search on the Armijo condition (their Alg. 3.1, c1 = 1e-4)
from the unit step. A pair with ``s'y <= 0`` (possible only for a non-convex objective) is not
stored, so the implied inverse Hessian stays positive definite.

Stopping rules are scipy's: the relative decrease ``(f_k - f_{k+1}) / max(|f_k|, |f_{k+1}|, 1)``
at most ``ftol``, or the largest gradient entry at most ``gtol``, or ``maxiter`` iterations.

:func:`polish` continues from a point where a line search on ``f`` has stalled in rounding: near
a minimum ``f`` changes by ``O(|g|^2)``, below the rounding of ``f`` long before ``g`` is at its
own rounding level, so the Armijo test (and scipy's ``ftol``) stops with a gradient near
``sqrt(eps |f| curvature)``. Its steps are found from the directional derivative alone (a secant
step on ``phi'(a) = g(x + a d)' d``), which keeps resolving the minimum down to the rounding of
the gradient.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from pymc_crf.kernel_cache import njit

__all__ = ["LBFGSResult", "lbfgs", "polish"]


@dataclass
class LBFGSResult:
    """The fields of scipy's ``OptimizeResult`` that the MAP fitter reads."""

    x: np.ndarray
    fun: float
    jac: np.ndarray
    nit: int
    nfev: int
    success: bool
    message: str
    trace: list[float] = field(default_factory=list)


def lbfgs(fun: Callable[[np.ndarray], tuple[float, np.ndarray]], x0: np.ndarray, *,
          maxiter: int = 2000, ftol: float = 1e-12, gtol: float = 1e-6, memory: int = 10,
          max_backtracks: int = 40,
          callback: Callable[[float], None] | None = None,
          stop: Callable[[np.ndarray, float, np.ndarray], bool] | None = None) -> LBFGSResult:
    """Minimise ``fun`` (returning value and gradient) from ``x0`` by L-BFGS.

    Parameters
    ----------
    fun : callable
        ``x -> (f, grad)``; an infinite ``f`` makes the line search step back.
    maxiter, ftol, gtol
        Stopping rules (module docstring).
    memory : int
        Number of stored ``(s, y)`` pairs.
    max_backtracks : int
        Halvings of the step before the line search gives up.
    callback : callable, optional
        Called with the objective value after every iteration (progress bars).
    stop : callable, optional
        Called as ``stop(x, f, g)`` after every iteration (after ``callback``): a true value ends
        the run as converged (another stopping rule, :func:`.optimise.find_map`'s ``"delta"``).
    """
    x = np.array(x0, dtype=np.float64)
    f, g = fun(x)
    nfev = 1
    if not np.isfinite(f):
        raise ValueError("the objective is not finite at the starting point")
    pairs: deque[tuple[np.ndarray, np.ndarray, float]] = deque(maxlen=memory)
    trace: list[float] = []
    message, success = "STOP: TOTAL NO. OF ITERATIONS REACHED LIMIT", False
    nit = 0
    while nit < maxiter:
        if np.max(np.abs(g)) <= gtol:
            message, success = "CONVERGENCE: NORM OF PROJECTED GRADIENT <= PGTOL", True
            break
        d = _direction(g, pairs)
        slope = float(g @ d)
        if slope >= 0:  # not a descent direction (rounding): restart from steepest descent
            pairs.clear()
            d, slope = -g, -float(g @ g)
        step = 1.0 if pairs else min(1.0, 1.0 / max(np.sqrt(-slope), 1e-300))
        for _ in range(max_backtracks):
            x_new = x + step * d
            f_new, g_new = fun(x_new)
            nfev += 1
            if np.isfinite(f_new) and f_new <= f + 1e-4 * step * slope:
                break
            step *= 0.5
        else:
            message = "ABNORMAL_TERMINATION_IN_LNSRCH"
            break
        s, y = x_new - x, g_new - g
        sy = float(s @ y)
        if sy > 0:
            pairs.append((s, y, 1.0 / sy))
        decrease = (f - f_new) / max(abs(f), abs(f_new), 1.0)
        x, f, g = x_new, f_new, g_new
        nit += 1
        trace.append(float(f))
        if callback is not None:
            callback(float(f))
        if stop is not None and stop(x, float(f), g):
            message, success = "CONVERGENCE: STOPPING RULE", True
            break
        if decrease <= ftol:
            message, success = "CONVERGENCE: RELATIVE REDUCTION OF F <= FACTR*EPSMCH", True
            break
    return LBFGSResult(x, float(f), g, nit, nfev, success, message, trace)


# The recursion's dot products and axpys are numba loops, not BLAS: numpy's ``@`` and scipy's
# ``daxpy`` call two different OpenBLAS libraries, and each one's worker threads, spinning after
# a call, take the cores from the other's next call (docs/benchmarks.md, "Real data:
# CoNLL-2000"). Single-threaded loops make one pass over memory each, as the BLAS calls do.
@njit(cache=True, fastmath={"reassoc", "contract"})
def _dot(a: np.ndarray, b: np.ndarray) -> float:
    s = 0.0
    for i in range(a.shape[0]):
        s += a[i] * b[i]
    return s


@njit(cache=True, fastmath={"contract"})
def _axpy(a: float, x: np.ndarray, y: np.ndarray) -> None:
    """``y += a x`` in place."""
    for i in range(x.shape[0]):
        y[i] += a * x[i]


def _direction(g: np.ndarray, pairs) -> np.ndarray:
    """``-H g`` by the two-loop recursion (Nocedal & Wright 2006, Alg. 7.4)."""
    q = np.array(g, dtype=np.float64)  # a contiguous copy, updated in place
    alphas = []
    for s, y, rho in reversed(pairs):
        a = rho * _dot(s, q)
        _axpy(-a, y, q)
        alphas.append(a)
    if pairs:
        s, y, _ = pairs[-1]
        q *= _dot(s, y) / _dot(y, y)
    for (s, y, rho), a in zip(pairs, reversed(alphas), strict=True):
        b = rho * _dot(y, q)
        _axpy(a - b, s, q)
    return -q


def polish(fun: Callable[[np.ndarray], tuple[float, np.ndarray]], x: np.ndarray, f: float,
           g: np.ndarray, *, gtol: float, maxiter: int = 100, memory: int = 10,
           patience: int = 10) -> tuple[np.ndarray, float, np.ndarray, list[float]]:
    """Gradient-only L-BFGS steps from ``(x, f, g)`` near a minimum (module docstring) until the
    largest gradient entry is at most ``gtol``, ``maxiter`` steps, or ``patience`` steps without
    a smaller gradient. Each step takes the two-loop direction ``d`` and the unit step, or, when
    ``phi'(1) > 0`` (the step overshoots the minimum along ``d``), the secant step
    ``phi'(0) / (phi'(0) - phi'(1))``; a point whose ``f`` rises above the rounding level of
    ``f`` (``1e3 eps max(|f|, 1)``) or is not finite ends the polish. Returns the point with the
    smallest largest gradient entry seen, its ``f`` and gradient, and ``f`` after every step.
    """
    x, g = np.array(x, dtype=np.float64), np.asarray(g, dtype=np.float64)
    best = (x, float(f), g, float(np.max(np.abs(g))))
    slack = 1e3 * np.finfo(np.float64).eps * max(abs(float(f)), 1.0)
    pairs: deque[tuple[np.ndarray, np.ndarray, float]] = deque(maxlen=memory)
    trace: list[float] = []
    since = 0
    for _ in range(maxiter):
        if best[3] <= gtol or since >= patience:
            break
        d = _direction(g, pairs)
        slope = float(g @ d)
        if slope >= 0:
            pairs.clear()
            d, slope = -g, -float(g @ g)
        step = 1.0 if pairs else min(1.0, 1.0 / max(np.sqrt(-slope), 1e-300))
        f_new, g_new = fun(x + step * d)
        slope_new = float(g_new @ d)
        if np.isfinite(f_new) and slope_new > 0:
            step *= slope / (slope - slope_new)
            f_new, g_new = fun(x + step * d)
        if not np.isfinite(f_new) or f_new > best[1] + slack:
            break
        x_new = x + step * d
        s, y = x_new - x, g_new - g
        sy = float(s @ y)
        if sy > 0:
            pairs.append((s, y, 1.0 / sy))
        x, f, g = x_new, float(f_new), np.asarray(g_new, dtype=np.float64)
        trace.append(f)
        g_max = float(np.max(np.abs(g)))
        if g_max < best[3]:
            best, since = (x, f, g, g_max), 0
        else:
            since += 1
    return best[0], best[1], best[2], trace
