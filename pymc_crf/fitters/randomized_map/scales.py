"""Learned prior scales for the randomized MAP: Monte Carlo EM on ``log s`` with Louis's curvature.

A model ``s ~ p(s)``, ``w_i ~ N(mu_i, s_{g(i)}^2)`` (``spec.free_scales``) has the type-II MAP
scales (the maximiser of ``log p(D | s) + log p(s)``, density in ``s``) where, by Fisher's
identity, for every group ``g`` of ``n_g`` weights

    d/d log s_g [log p(D | s) + log p(s)] = E[R_g | D, s] / s_g^2 - n_g + h_g = 0,
    R_g = sum_{i in g} (w_i - mu_i)^2,  h_g = d log p(s) / d log s_g

(Dempster, Laird & Rubin 1977; the expectation over the posterior of the weights at ``s``). The
expectation is estimated from randomized-MAP draws (``draws.py``), which follow the posterior's
one-sided shape where a Gaussian at the mode does not, which is why this finds the scales the
exact posterior puts mass on where the Laplace evidence (``bethe_laplace/scales.py``) prunes
them (docs/randomized_map.md).

Each iteration redraws at the current scales with the **same seeds** (common random numbers:
the same standard-normal anchors and labelling uniforms), each draw warm-started at its
predecessor, so the iteration is a deterministic map whose fixed point is the stationarity
condition above for that sample of perturbations (a sample-average approximation), and a draw
moves little when the scales do. The step in ``log s_g`` is Newton's, with Louis's observed
information (Louis 1982)

    -d^2/d(log s_g)^2 = 2 E[R_g] / s_g^2 - Var[R_g] / s_g^4 - d h_g / d log s_g,

``Var[R_g]`` estimated as the sum of the per-weight variances across draws, and the fraction of
missing information ``Var[R_g] / (2 E[R_g] s_g^2)`` capped at 0.9: plain EM's step
(``0.5 log(E[R_g] / (n_g s_g^2))`` without a hyperprior) is Newton's with that fraction 0, and
is slow exactly where the data say little about a group. From the second iteration on, a
group's curvature is the secant of its gradient between the last two iterations where that is
concave (a one-dimensional quasi-Newton step per group; the common random numbers make the
gradient a smooth function of the scales, up to the MAPs' stopping tolerance). A group's step
is capped by a trust radius that halves whenever its gradient changes sign and doubles (up to
4 in ``log s``) while its steps are capped in one direction (a group pruned towards the lower
bound ``SCALE_BOUNDS``, or one growing, gets there in a few iterations).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from pymc_crf.fitters.bethe_laplace.problem import WeightProblem
from pymc_crf.fitters.bethe_laplace.scales import SCALE_BOUNDS, ScaleHyperprior, group_sums
from pymc_crf.fitters.diagonal_laplace import search_scale
from pymc_crf.fitters.randomized_map.draws import (
    Centre,
    DrawRunner,
    map_at,
)

__all__ = ["DrawnScales", "learn_scales_by_draws", "MISSING_INFORMATION_CAP"]

#: largest fraction of missing information in the Newton step (at most 1 / (1 - cap) = 10
#: times EM's step)
MISSING_INFORMATION_CAP = 0.9
#: the first trust radius in log s, its largest value, and the factor it shrinks by on a sign
#: change
MAX_STEP = 1.0
MAX_RADIUS = 4.0
SHRINK = 0.5


@dataclass
class DrawnScales:
    """The learned scales, what the draws there share (``centre``: the MAP, ...) and the MAP's
    optimiser record, the draws at those scales (``draws`` with their L-BFGS ``iterations``,
    ``success`` and HMC acceptance ``rates``), the iterations' ``trace`` and whether they
    ``converged``."""

    scales: np.ndarray
    centre: Centre
    map_diagnostics: object
    draws: np.ndarray
    iterations: np.ndarray
    success: np.ndarray
    rates: np.ndarray
    trace: dict
    converged: bool


def _hyperprior_slope(fn: ScaleHyperprior | None, u: np.ndarray,
                      eps: float = 1e-4) -> tuple[np.ndarray, np.ndarray]:
    """``h = d log p(s) / d log s`` and its derivative (central differences; exact for scales
    with independent priors, a step-size guide otherwise); zeros without a hyperprior."""
    if fn is None:
        return np.zeros_like(u), np.zeros_like(u)
    h = fn(u)[1]
    dh = (fn(u + eps)[1] - fn(u - eps)[1]) / (2.0 * eps)
    return h, dh


def learn_scales_by_draws(problem: WeightProblem, runner: DrawRunner, jobs: list, *,
                          hyperprior: bool, scale_init: np.ndarray, scale_tol: float,
                          scale_maxiter: int, rule: str, gtol: float, maxiter: int,
                          progressbar: bool) -> DrawnScales:
    """Type-II MAP (or with ``hyperprior=False`` ML) scales by the module docstring's Monte
    Carlo EM, from ``scale_init``, with the draws of ``jobs`` (their seeds fixed across
    iterations). Stops when no ``log s`` would move by more than ``scale_tol`` (the draws
    returned are at the returned scales, the last step not taken) or after ``scale_maxiter``
    iterations."""
    index = np.asarray(problem.scale_index)
    G = problem.n_scales
    n = np.bincount(index[index >= 0], minlength=G).astype(np.float64)
    fn = ScaleHyperprior(problem.model, problem.scales) if hyperprior else None
    lo, hi = np.log(SCALE_BOUNDS[0]), np.log(SCALE_BOUNDS[1])
    u = np.log(np.asarray(scale_init, dtype=np.float64))
    radius = np.full(G, MAX_STEP)
    grad_before = u_before = None
    capped = np.zeros(G, dtype=bool)
    w_map, starts = None, None
    centre: Centre | None = None
    trace = {k: [] for k in ("scales", "gradient", "step", "map_iterations", "draw_iterations")}
    converged = False
    for it in range(scale_maxiter):
        p = problem.at_scales(np.exp(u))
        mu, sd = p.prior.mean, p.prior.sd
        # searched in the coordinates of the Laplace sds the last centre predicts here
        search = None if centre is None else search_scale(sd, centre.laplace_sd, centre.sd)
        w_map, map_diag = map_at(runner.lik, mu, sd, mu.copy() if w_map is None else w_map,
                                 rule, gtol, maxiter,
                                 "randomized_map: the MAP at the current scales", scale=search)
        centre = runner.centre(mu, sd, w_map)
        last = "" if not it else f" (last step {np.max(np.abs(trace['step'][-1])):.3f} in log s)"
        out = runner.run(centre, jobs, starts,
                         label=f"randomized MAP scales, iteration {it + 1}{last}",
                         progressbar=progressbar)
        W = np.stack([o[0] for o in out])
        iters = np.array([o[1] for o in out], dtype=np.int64)
        ok = np.array([o[2] for o in out], dtype=bool)
        rates = np.array([o[3] for o in out])
        dev2 = (W - mu) ** 2
        R = group_sums(index, dev2.mean(axis=0), G)
        var_R = group_sums(index, dev2.var(axis=0, ddof=1), G) if len(jobs) > 1 \
            else np.zeros(G)
        s2 = np.exp(2.0 * u)
        h, dh = _hyperprior_slope(fn, u)
        grad = R / s2 - n + h  # Fisher's identity
        missing = np.clip(var_R / np.maximum(2.0 * R * s2, 1e-300), 0.0,
                          MISSING_INFORMATION_CAP)
        information = 2.0 * R / s2 * (1.0 - missing) - np.minimum(dh, 0.0)  # Louis 1982
        if grad_before is not None:
            # the secant of the gradient between the last two iterations, where it is concave
            moved = np.abs(u - u_before) > 1e-8
            secant = np.where(moved, (grad_before - grad) / np.where(moved, u - u_before, 1.0),
                              0.0)
            information = np.where(secant > 0.0, secant, information)
            # a trust radius per group: halved when its gradient changes sign, doubled (up to
            # MAX_RADIUS) when its last step was capped and the gradient kept its sign
            radius = np.where(grad * grad_before < 0, radius * SHRINK,
                              np.where(capped, np.minimum(2.0 * radius, MAX_RADIUS), radius))
        step = grad / np.maximum(information, 1e-12)
        capped = np.abs(step) >= radius
        step = np.clip(step, -radius, radius)
        step = np.clip(u + step, lo, hi) - u
        grad_before, u_before = grad, u
        trace["scales"].append(np.exp(u))
        trace["gradient"].append(grad)
        trace["step"].append(step)
        trace["map_iterations"].append(int(map_diag.n_iterations))
        trace["draw_iterations"].append(int(iters.sum()))
        if np.max(np.abs(step)) < scale_tol:
            converged = True
        if converged or it == scale_maxiter - 1:  # the draws are at the scales returned
            break
        u = u + step
        starts = list(W)
    return DrawnScales(np.exp(u), centre, map_diag, W, iters, ok, rates,
                       {k: np.asarray(v) for k, v in trace.items()}, converged)
