"""Learned prior scales: the weights' Normal prior sds chosen by the Laplace evidence.

A model ``s ~ p(s)``, ``w_i ~ N(mu_i, s_{g(i)}^2)`` (``g`` any grouping written by indexing, see
``spec.free_scales``) is fitted by type-II maximum likelihood (empirical Bayes; MacKay 1992) or,
with the hyperprior's log density added, type-II MAP: the scales maximise

    F(s) = log p_Laplace(D | s) [+ log p(s)],
    log p_Laplace(D | s) = log p(D | w*) + log N(w*; mu, S^2) + d/2 log 2 pi - 1/2 log det A,

with ``w*(s)`` the MAP at fixed scales (searched in the prior-whitened coordinates
``(w - mu) / s``, which stay well conditioned when a group's scale is pruned to ~1e-5; with the
diagonal covariance, a MAP at new scales in ``diagonal_laplace.search_scale``'s coordinates from
the last point's Laplace sds) and
``A = H_lik + S^{-2}`` the negative log-posterior
Hessian there (``laplace.laplace_log_evidence``; Welling & Parise 2006 eq. (7), Parise &
Welling 2006 eq. (8)). Two steps, alternated with the MAP at fixed scales (warm-started):

* **MacKay's fixed point** (MacKay 1992, eqs. (4.9)-(4.10) for one group, applied per group):
  with ``Sigma = A^{-1}``, the group's well-determined parameters
  ``gamma_g = sum_{i in g} (1 - Sigma_ii / s_g^2)`` and ``R_g = sum_{i in g} (w*_i - mu_i)^2``,
  ``d F / d log s_g = R_g / s_g^2 - gamma_g + h_g`` when ``H_lik`` is held fixed (``h_g`` the
  hyperprior's ``d log p(s) / d log s_g``), whose root is ``s_g^2 = R_g / (gamma_g - h_g)``.
  Groups being pruned, whose steps barely shrink, are extrapolated to the limit of their steps
  (``_extrapolated_step``). It needs only ``diag(Sigma)``, so it runs with the diagonal
  covariance on large models, and
  with the implicit exact covariance (``covariance="implicit"``, :class:`~pymc_crf.fitters.
  covariance.ImplicitGaussian`): ``diag(Sigma)`` by Hutchinson's estimator (Hutchinson 1990) with
  ``IMPLICIT_PROBES`` probes (unbiased, and nearly exact for the weights the data say little
  about, which most of a text CRF's are) and ``log det A`` by stochastic Lanczos quadrature.
  Those estimates are noisy, so there the fixed-point steps are taken without the evidence
  backtracking and stop when no scale moves by more than ``IMPLICIT_SCALE_TOL`` in ``log s``
  (their Monte Carlo noise). With one scale the evidence itself is maximised instead, without
  MacKay's steps (``_search_one_scale``: MAPs and Lanczos log dets at a few nodes in ``log s``,
  and a model interpolating between them). On CoNLL-2000 (300 sentences, one scale for all
  257,013 weights) MacKay's fixed point with the Lanczos ``gamma`` lies below ``log s = -0.66``,
  the evidence's maximiser near ``log s = 0.4``.
* **exact refinement** (dense, exact curvature): L-BFGS-B on ``F`` in ``log s`` with its exact
  gradient. ``H_lik`` moves with ``w*(s)``, which adds
  ``-1/2 tr(Sigma dH_lik/dw [v_g])``, ``v_g = dw*/dlog s_g = Sigma u_g``,
  ``u_g,i = 2 (w*_i - mu_i) / s_g^2`` for ``i in g`` (implicit function theorem on the MAP
  condition); the directional derivative of ``H_lik`` is a central difference of the exact
  curvature. MacKay's point maximises ``F`` only up to this term; the refined point is the
  maximiser of the Laplace evidence itself.

``integrate_scales`` (INLA-style; Rue, Martino & Chopin 2009, sec. 3.1): the scales are
integrated out on a grid in the standardised coordinates ``z`` of ``theta = log s`` around the
mode (``theta = theta* + V Lambda^{1/2} z``, ``V Lambda V^T`` the inverse negative Hessian of
``F(theta) + sum theta``, the log posterior density of ``log s``), each grid point carrying its
Laplace Gaussian and the weight ``exp(F + sum theta)``; the posterior is the mixture.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field

import numpy as np
import pytensor
from scipy.interpolate import CubicHermiteSpline
from scipy.optimize import minimize

from pymc_crf.fitters.bethe_laplace.curvature import fisher_matrix, potential_curvature
from pymc_crf.fitters.bethe_laplace.hessian import CurvatureOperator
from pymc_crf.fitters.bethe_laplace.laplace import (
    LaplaceFit,
    _Whitened,
    laplace_fit,
    laplace_log_evidence,
    maximise,
)
from pymc_crf.fitters.bethe_laplace.problem import WeightProblem, exact_engine
from pymc_crf.fitters.covariance import ImplicitGaussian, lanczos_quadrature
from pymc_crf.fitters.diagonal_laplace import diagonal_laplace_sd, search_gtol, search_scale
from pymc_crf.fitters.progress import fit_progress, track
from pymc_crf.inference.base import warn_at_caller
from pymc_crf.validation import positive_number, whole_number

__all__ = ["ScaleHyperprior", "ScalePoint", "LearnedScales", "learn_scales", "INTEGRATE_MODES",
           "IMPLICIT_PROBES", "SCALE_BOUNDS", "initial_scales", "group_sums"]

INTEGRATE_MODES = (None, "grid")
#: smallest and largest learned scale (log s is optimised between them)
SCALE_BOUNDS = (1e-5, 1e3)
#: perturbation-optimisation draws (and Lanczos probes) per point of the implicit covariance
IMPLICIT_PROBES = 16
#: the implicit covariance's fixed-point iterations stop below this move in log s
IMPLICIT_SCALE_TOL = 0.02
#: the stopping tolerances of the exact evidence ascent (``refine``): L-BFGS-B's ``gtol`` on
#: ``dF / d log s`` and ``ftol`` on the relative change of ``F``
REFINE_GTOL, REFINE_FTOL = 1e-5, 1e-11
#: the MAP tolerance (largest prior-whitened gradient entry) of MacKay's steps with the
#: diagonal covariance until they stop (then they go on with strict MAPs until they stop
#: again): on 300 CoNLL-2000 sentences (34 scales, 297,660 weights) it moved the evidence by
#: about 5e-4 against the strict MAP's, at half its L-BFGS iterations (prior-whitened MAPs)
OUTER_GTOL = 1e-3
#: the one-scale search (``_search_one_scale``): Lanczos probes (the same at every node),
#: most Lanczos steps, MAP tolerance (largest whitened gradient entry) at its nodes, the move in
#: log s below which it stops, and most nodes
SEARCH_PROBES = 4
SEARCH_STEPS = 80
SEARCH_GTOL = 1e-2
SEARCH_XTOL = 0.05
SEARCH_MAX_NODES = 8


class ScaleHyperprior:
    """``log p(s)`` of the scale variables (their own priors, density in s, no Jacobian; with
    ``jacobian`` the density of ``log s``, ``+ sum log s``) and its gradient in ``log s``,
    compiled once from the model (small graph: PyTensor's Python linker, nothing for numba to
    compile)."""

    def __init__(self, model, scales, jacobian: bool = False):
        self.scales = scales
        self.jacobian = jacobian
        rvs = [model[v.name] for v in scales]
        values = [model.rvs_to_values[rv] for rv in rvs]
        logp = model.logp(vars=rvs, jacobian=False, sum=True)
        grads = pytensor.grad(logp, values)
        mode = pytensor.compile.mode.Mode(linker="py", optimizer="fast_compile")
        # float64 log s into the scales' own dtype (float32 under floatX="float32"), as
        # PyMC's compile_fn allows
        self._fn = pytensor.function(values, [logp, *grads], mode=mode, on_unused_input="ignore",
                                     allow_input_downcast=True)

    def __call__(self, log_s: np.ndarray) -> tuple[float, np.ndarray]:
        parts = [np.asarray(log_s[v.offset:v.offset + v.size]).reshape(v.shape)
                 for v in self.scales]
        out = self._fn(*parts)
        grad = np.concatenate([np.asarray(g, dtype=np.float64).reshape(-1) for g in out[1:]])
        if self.jacobian:  # the density of log s: + sum log s
            return float(out[0]) + float(np.sum(log_s)), grad + 1.0
        return float(out[0]), grad


@dataclass
class ScalePoint:
    """The Laplace approximation at fixed scales: MAP ``mean``, ``sigma_diag`` = diag(A^{-1}),
    the dense fit (None for the diagonal covariance), and the log evidence parts."""

    scales: np.ndarray
    mean: np.ndarray
    sigma_diag: np.ndarray | None
    log_evidence: float
    log_hyperprior: float
    fit: LaplaceFit | None
    optimizer: dict
    log_likelihood: float
    log_prior: float
    gaussian: ImplicitGaussian | None = None

    def variances(self) -> np.ndarray:
        """``diag(Sigma)``; for the implicit covariance estimated on first use (Hutchinson,
        ``IMPLICIT_PROBES`` probes, a fixed seed so estimates at nearby scales share them)."""
        if self.sigma_diag is None:
            self.sigma_diag = self.gaussian.variance_estimate(IMPLICIT_PROBES, rng=0)
        return self.sigma_diag

    @property
    def objective(self) -> float:
        """``F = log p_Laplace(D | s) + log p(s)`` (the hyperprior term is 0 for type-II ML)."""
        return self.log_evidence + self.log_hyperprior

    @property
    def covariance(self) -> np.ndarray | None:
        return None if self.fit is None else self.fit.covariance


@dataclass
class LearnedScales:
    """The learned scales, the Laplace fit there, the outer iterations' trace and, with
    ``integrate_scales``, the grid mixture (``points`` with normalised ``weights``)."""

    point: ScalePoint
    trace: dict
    converged: bool
    points: list[ScalePoint] = field(default_factory=list)
    weights: np.ndarray | None = None
    log_marginal_likelihood: float | None = None
    hessian: np.ndarray | None = None


def warn_unconverged_scales(method: str, scale_maxiter: int) -> None:
    """The warning of a fit whose learned scales stopped at ``scale_maxiter`` steps: they are
    the last step's, not the evidence's (or Monte Carlo EM's) fixed point."""
    warn_at_caller(f"pmc.fit(method={method!r}): the learned prior scales did not converge in "
                   f"scale_maxiter={scale_maxiter} steps; the result holds the last step's "
                   "scales (diagnostics.scales_converged is False, diagnostics.scale_trace "
                   "shows their path). Raise scale_maxiter (or scale_tol)", RuntimeWarning)


def initial_scales(scale_init, n_scales: int) -> np.ndarray:
    """The flat starting scales from ``scale_init`` (one number, or one per scale entry), moved
    into ``SCALE_BOUNDS``, where every fitter keeps the scales, with a clear error for anything
    else. (From a start outside, randomized MAP's Gibbs chains have zero density and cannot move,
    and its EM's first step to the bound spans a gradient change so large that its secant
    curvature stops the iterations there as converged.)"""
    init = np.broadcast_to(np.asarray(scale_init, dtype=np.float64), (n_scales,)).copy() \
        if np.ndim(scale_init) == 0 else np.asarray(scale_init, dtype=np.float64).reshape(-1)
    if init.shape != (n_scales,) or not np.all(np.isfinite(init) & (init > 0)):
        raise ValueError(f"scale_init must be a number > 0 or {n_scales} of them (one per scale "
                         f"entry); got {scale_init!r}")
    return np.clip(init, *SCALE_BOUNDS)


def group_sums(index: np.ndarray, values: np.ndarray, n: int) -> np.ndarray:
    """Sums of ``values`` (one per flat weight) over each scale entry's weights (``index``: the
    weights' scale entries, -1 for a fixed sd)."""
    keep = index >= 0
    return np.bincount(index[keep], weights=values[keep], minlength=n)


def _exact_map(problem: WeightProblem, start, maxiter, gtol, scale=None):
    """The MAP by exact gradients, searched in the coordinates ``(w - mu) / scale`` (default the
    prior sds: prior-whitened), ``gtol`` bounding the largest prior-whitened gradient entry
    (``search_gtol``): ``(w, lik, optimiser record)``."""
    lik = problem.make_likelihood(exact_engine(
        problem, "covariance='diagonal' and 'implicit' need it; Bethe's (BP) covariance is "
                 "method='bethe_laplace' with map='bp' and covariance='bp'"))
    mu, sd = problem.prior.mean, problem.prior.sd
    scale = sd if scale is None else scale
    z, info = maximise(_Whitened(lik, mu, scale), _Whitened(problem.prior, mu, scale),
                       (start - mu) / scale, maxiter=maxiter, gtol=search_gtol(gtol, sd, scale),
                       description="Laplace: MAP by exact gradients")
    return mu + scale * z, lik, info


def _implicit_point(problem: WeightProblem, start, maxiter, gtol, evidence: bool = True):
    """MAP by exact gradients, the implicit exact Gaussian there and (with ``evidence``, else
    NaN) the log evidence with the Lanczos ``log det A``; ``diag(Sigma)`` is left to
    :meth:`ScalePoint.variances`."""
    w, lik, info = _exact_map(problem, start, maxiter, gtol)
    gauss = ImplicitGaussian(CurvatureOperator(lik, w), problem.prior.sd)
    sig = None  # ScalePoint.variances() estimates it when asked
    ll = float(lik(w)[0])
    lp = float(problem.prior(w)[0])
    log_ev = (ll + lp + 0.5 * w.size * np.log(2.0 * np.pi)
              + 0.5 * gauss.logdet(probes=IMPLICIT_PROBES)) if evidence else np.nan
    return w, sig, ll, lp, log_ev, info, gauss


def _diagonal_point(problem: WeightProblem, start, maxiter, gtol, scale=None):
    """MAP by exact gradients (searched in the coordinates ``(w - mu) / scale``, default
    prior-whitened) and the diagonal Laplace sds (``diagonal_laplace_sd``)."""
    w, lik, info = _exact_map(problem, start, maxiter, gtol, scale)
    sd = diagonal_laplace_sd(problem.spec, w, shared_table="fisher")
    ll = float(lik(w)[0])
    lp = float(problem.prior(w)[0])
    log_ev = ll + lp + 0.5 * w.size * np.log(2.0 * np.pi) + float(np.sum(np.log(sd)))
    return w, sd ** 2, ll, lp, log_ev, info


def laplace_point(problem: WeightProblem, scales: np.ndarray,
                  start: ScalePoint | np.ndarray | None, *, map: str, covariance: str, bp,
                  maxiter: int, gtol: float, hyperprior: ScaleHyperprior | None,
                  evidence: bool = True) -> ScalePoint:
    """The Laplace approximation of ``problem`` with its learned scales fixed at ``scales``
    (``evidence=False``: the implicit covariance skips its log evidence, left NaN), its MAP
    searched from ``start``: the prior mean (None), a weight vector, or the :class:`ScalePoint`
    at other scales, whose MAP it starts from; with the diagonal covariance that point's
    Laplace sds, rescaled to ``scales``, also set the search's coordinates (``search_scale``)."""
    p = problem.at_scales(scales)
    near = start if isinstance(start, ScalePoint) else None
    x0 = p.prior.mean.copy() if start is None else (start if near is None else near.mean)
    gauss = None
    if covariance == "diagonal":
        scale = None if near is None else search_scale(
            p.prior.sd, np.sqrt(near.sigma_diag), problem.at_scales(near.scales).prior.sd)
        w, sig, ll, lp, log_ev, info = _diagonal_point(p, x0, maxiter, gtol, scale)
        fit = None
    elif covariance == "implicit":
        w, sig, ll, lp, log_ev, info, gauss = _implicit_point(p, x0, maxiter, gtol, evidence)
        fit = None
    else:
        fit = laplace_fit(p, map=map, covariance=covariance, bp=bp, maxiter=maxiter, gtol=gtol,
                          start=x0, warn=False, whiten=True)
        w, sig, ll, lp, info = (fit.mean, np.diag(fit.covariance).copy(), fit.log_likelihood,
                                fit.log_prior, fit.optimizer)
        log_ev = laplace_log_evidence(fit)
    if not (np.isfinite(log_ev) or (np.isnan(log_ev) and not evidence)):
        raise ValueError(f"the Laplace log evidence is {log_ev} at scales "
                         f"{np.round(scales, 6).tolist()[:10]}: the MAP or curvature failed there")
    lh = 0.0 if hyperprior is None else hyperprior(np.log(scales))[0]
    return ScalePoint(np.asarray(scales, dtype=np.float64).copy(), w, sig, float(log_ev),
                      float(lh), fit, info, float(ll), float(lp), gauss)


#: the longest extrapolated move of a scale in log s (a factor of e^2 ~ 7.4), and the least
#: (the cap is halved after an extrapolation that loses evidence, doubled after one that gains)
EXTRAPOLATION_CAP = 2.0
CAP_FLOOR = 0.125
#: the most iterations without an extrapolation after extrapolations that lost evidence
MAX_PAUSE = 8
#: a scale moving down by at least this in log s, each step within a factor 1.25 of the previous
#: one, is drifting
DRIFT = 0.02


def _extrapolated_step(step: np.ndarray, last: np.ndarray | None, gamma: np.ndarray,
                       down: np.ndarray, tol: float, cap: float) -> np.ndarray | None:
    """MacKay's step with the scales being pruned extrapolated towards the limit of their steps
    (Aitken 1926's delta-squared process), or None where no scale qualifies.

    A group the data do not support drifts towards the lower bound in nearly equal steps of
    ``log s``: MacKay's update shrinks ``s_g^2`` by a factor near 1 each time, so the drift
    takes hundreds of iterations. A scale qualifies where its ``step`` and the previous one
    (``last``, taken in full) both go down, and either its group has fewer than one
    well-determined parameter (``gamma_g < 1``) or it drifts (steps of at least ``DRIFT``,
    ratio ``r = step / last`` in [0.8, 1.25]). Its steps are taken as a geometric series of ratio
    ``r``, whose limit is ``step / (1 - r)`` away: the move is that, at least the step and at
    most ``cap`` (all of it where ``r >= 1``), and not below the lower bound (``down``, its
    offset). The other scales take MacKay's step. The caller keeps the move only where it does
    not lower the evidence."""
    if last is None:
        return None
    falling = (step <= -tol) & (last <= -tol)
    ratio = np.where(falling, step / np.where(falling, last, 1.0), 0.0)
    pruned = falling & ((gamma < 1.0) | ((ratio >= 0.8) & (ratio <= 1.25) & (step <= -DRIFT)))
    if not np.any(pruned):
        return None
    limit = np.where(ratio < 1.0, step / np.maximum(1.0 - ratio, 1e-12), -np.inf)
    move = np.clip(np.maximum(limit, -cap), None, step)
    move = np.where(pruned, np.maximum(move, down), step)
    return None if np.allclose(move, step) else move


def _mackay_gradient(problem: WeightProblem, pt: ScalePoint,
                     hyperprior: ScaleHyperprior | None) -> tuple[np.ndarray, np.ndarray,
                                                                  np.ndarray]:
    """``(R, gamma, h)`` per scale (module docstring)."""
    idx, n = problem.scale_index, problem.n_scales
    s_w = np.where(idx >= 0, pt.scales[np.maximum(idx, 0)], 1.0)
    R = group_sums(idx, (pt.mean - problem.prior.mean) ** 2, n)
    gamma = group_sums(idx, 1.0 - pt.variances() / s_w ** 2, n)
    h = np.zeros(n) if hyperprior is None else hyperprior(np.log(pt.scales))[1]
    return R, gamma, h


def _exact_likelihood_curvature(problem: WeightProblem, w: np.ndarray) -> np.ndarray:
    """``H_lik(w)``: the exact negative Hessian of the log-likelihood at any ``w`` (the Fisher
    matrix, minus the probit potentials' residual-weighted curvature)."""
    engine = exact_engine(problem)
    lik = problem.make_likelihood(engine)
    H = fisher_matrix(lik, w, engine, None)
    if problem.potential != "loglinear":
        node, edge = lik.log_potentials(w)
        m = engine.marginals(problem.batch, node, edge)
        extra = potential_curvature(lik, w, m.node, m.edge)
        if extra is not None:
            H = H - extra
    return H


def exact_gradient(problem: WeightProblem, pt: ScalePoint,
                   hyperprior: ScaleHyperprior | None) -> np.ndarray:
    """``dF / d log s`` at ``pt`` (dense exact fit), the third-derivative term included (module
    docstring)."""
    R, gamma, h = _mackay_gradient(problem, pt, hyperprior)
    s = pt.scales
    grad = R / s ** 2 - gamma + h
    idx = problem.scale_index
    Sigma = pt.fit.covariance
    resid = pt.mean - problem.prior.mean
    s_w = np.where(idx >= 0, s[np.maximum(idx, 0)], 1.0)
    for g in range(problem.n_scales):
        u = np.where(idx == g, 2.0 * resid / s_w ** 2, 0.0)
        v = Sigma @ u
        scale = float(np.max(np.abs(v)))
        if scale == 0.0:
            continue
        eps = 1e-4 / scale
        dH = (_exact_likelihood_curvature(problem, pt.mean + eps * v)
              - _exact_likelihood_curvature(problem, pt.mean - eps * v)) / (2.0 * eps)
        grad[g] -= 0.5 * float(np.sum(Sigma * dH))
    return grad


def _dense_exact(problem: WeightProblem, covariance: str) -> bool:
    return covariance == "exact" or (covariance == "bp" and problem.batch.is_forest)


def learn_scales(problem: WeightProblem, *, map: str = "exact", covariance: str = "exact",
                 bp=None, maxiter: int = 2000, gtol: float = 1e-8, hyperprior: bool = True,
                 scale_init: np.ndarray | float = 1.0, scale_tol: float = 1e-6,
                 scale_maxiter: int = 200, refine: bool | None = None,
                 integrate_scales: str | None = None, grid_step: float = 0.75,
                 grid_radius: float = 3.0, grid_threshold: float = 6.0,
                 finish: bool = True, progressbar: bool = False) -> LearnedScales:
    """Type-II ML / MAP scales of ``problem`` (module docstring) and the Laplace fit there.

    Parameters
    ----------
    problem : WeightProblem
        Built with ``learn_scales=True`` (``problem.n_scales`` > 0).
    map, covariance, bp, maxiter, gtol
        The Laplace fit at fixed scales (``laplace_fit``); ``covariance="diagonal"``: MAP by
        exact gradients and the diagonal Laplace sds (``diagonal_laplace_sd``) for large
        log-linear CRFs (log det A then the sum of the diagonal's logs);
        ``covariance="implicit"``: the exact covariance as an operator (module docstring).
    hyperprior : bool
        Add the scales' own prior's log density (type-II MAP); False: type-II ML.
    scale_init : float or array
        Starting scales (one value, or one per entry of the flat scale vector).
    scale_tol, scale_maxiter
        Stop MacKay's iterations when no ``log s`` moves by more than ``scale_tol``, or when
        ``F`` changes by less than 1e-8 of its size (a group pruned towards 0, where the evidence
        is flat); at most ``scale_maxiter`` of them (and of the exact ascent's iterations).
    refine : bool, optional
        Finish by maximising the Laplace evidence itself: L-BFGS-B with its exact gradient
        (dense exact curvature), or the node search of ``_search_one_scale``
        (``covariance="implicit"`` with one scale). Default: where possible with at most 2000
        weights and 50 scales, and for the implicit covariance with one scale.
    integrate_scales : {None, "grid"}
        ``"grid"``: integrate the scales out on a grid (needs ``hyperprior``; at most 3 scale
        entries), spacing ``grid_step`` standard deviations of ``log s``, out to
        ``grid_radius`` of them along each axis and further (up to twice as far) while the
        density on the axis is within ``grid_threshold`` of the mode's, dropping points whose
        log density is more than ``grid_threshold`` below the mode's.
    finish : bool
        With the search of one shared implicit-covariance scale (``_search_one_scale``):
        refine the MAP at the chosen scale to ``gtol`` and build its implicit Gaussian (for
        draws); False returns the search's own node (MAP to ``SEARCH_GTOL``, no Gaussian), for
        a caller that wants only the scale (``CRFTagger(c2="evidence")``).
    progressbar : bool
        Show a progress bar of MacKay's steps (up to ``scale_maxiter``) and one of the exact
        evidence ascent's evaluations (``refine``).
    """
    if problem.n_scales == 0:
        raise ValueError("the model has no learned prior scales (no Normal weight prior with a "
                         "free sd)")
    if integrate_scales not in INTEGRATE_MODES:
        raise ValueError(f"integrate_scales must be one of {INTEGRATE_MODES}; got "
                         f"{integrate_scales!r}")
    scale_tol = positive_number(scale_tol, "scale_tol")
    scale_maxiter = whole_number(scale_maxiter, "scale_maxiter")
    G = problem.n_scales
    if integrate_scales is not None:
        if not hyperprior:
            raise ValueError("integrate_scales needs the scales' prior (hyperprior=True): the "
                             "integral over the scales is over their posterior")
        improper = [v.name for v in problem.scales
                    if type(problem.model[v.name].owner.op).__name__ in ("HalfFlatRV", "FlatRV")]
        if improper:
            # log p = 0 is no normalised density: the integral over the scales, and so the
            # log marginal likelihood the fit stores, would hold an arbitrary constant
            raise ValueError(f"integrate_scales='grid' integrates the evidence over the scales' "
                             f"prior, so it needs a proper one; {improper} have an improper "
                             "pm.HalfFlat / pm.Flat prior, whose log marginal likelihood is "
                             "defined only up to an arbitrary constant. Give the scales a "
                             "proper prior (pm.HalfNormal, pm.Exponential, pm.InverseGamma, "
                             "...), or learn them by their evidence (integrate_scales=None)")
        if G > 3:
            raise ValueError(f"integrate_scales='grid' takes at most 3 scale entries (a grid of "
                             f"~9^G Laplace fits); this model has {G}. Use the point estimate "
                             "(integrate_scales=None)")
    init = initial_scales(scale_init, G)
    lo, hi = np.log(SCALE_BOUNDS[0]), np.log(SCALE_BOUNDS[1])
    # the grid integrates over log s, so it is centred at the mode of the density of log s
    prior_fn = (ScaleHyperprior(problem.model, problem.scales,
                                jacobian=integrate_scales is not None) if hyperprior else None)
    dense = _dense_exact(problem, covariance)
    implicit = covariance == "implicit"
    if refine is None:
        refine = (dense and problem.size <= 2000 and G <= 50) or (implicit and G == 1)
    elif refine and not (dense or (implicit and G == 1)):
        raise ValueError("refine=True needs the exact dense curvature (covariance='exact', or a "
                         "forest), or covariance='implicit' with one scale")

    def at(theta, start, evidence=True, tol=gtol):
        return laplace_point(problem, np.exp(theta), start, map=map, covariance=covariance,
                             bp=bp, maxiter=maxiter, gtol=tol, hyperprior=prior_fn,
                             evidence=evidence)

    theta = np.log(init)
    if implicit and refine:  # one scale (checked above)
        theta, pt, trace = _search_one_scale(problem, at, theta, lo, hi, prior_fn, maxiter,
                                             finish and integrate_scales is None)
        if integrate_scales == "grid":  # the mode with the grid points' own estimator
            pt = at(theta, pt)
        out = LearnedScales(pt, trace, True)
        if integrate_scales == "grid":
            _grid(problem, out, at, theta, grid_step, grid_radius, grid_threshold)
        return out
    # with the diagonal covariance (large models) MacKay's steps take MAPs to OUTER_GTOL until
    # they stop, then refine the point's MAP to gtol and go on with strict MAPs (tighten)
    outer = max(gtol, OUTER_GTOL) if covariance == "diagonal" else gtol
    pt = at(theta, None, evidence=not implicit, tol=outer)  # implicit log det: left to the end
    trace_F, trace_ev, trace_s, trace_step = [pt.objective], [pt.log_evidence], [pt.scales], [0]
    converged = False
    stochastic = covariance == "implicit"
    tol = max(scale_tol, IMPLICIT_SCALE_TOL) if stochastic else scale_tol
    last_step = None  # MacKay's previous step, where it was taken in full
    cap = EXTRAPOLATION_CAP
    losses = pause = 0  # extrapolations lost in a row; iterations left without trying one

    def record(q: ScalePoint, kind: int) -> None:
        trace_F.append(q.objective)
        trace_ev.append(q.log_evidence)
        trace_s.append(q.scales)
        trace_step.append(kind)

    def tighten() -> bool:
        """At a stop judged on the looser MAPs: refine the point's MAP to ``gtol`` and go on
        with strict MAPs (True); False when the MAPs are strict already."""
        nonlocal outer, pt, last_step
        if outer <= gtol:
            return False
        outer, last_step = gtol, None
        pt = at(theta, pt)
        record(pt, 4)
        return True

    for _ in track(range(scale_maxiter), "Learned scales: MacKay's steps",
                   progressbar=progressbar):  # MacKay, backtracking in log s
        R, gamma, h = _mackay_gradient(problem, pt, prior_fn)
        denom = gamma - h
        target = np.where(denom > 0, 0.5 * np.log(np.maximum(R, 1e-300) / np.where(
            denom > 0, denom, 1.0)), theta + 1.0)
        target = np.clip(target, lo, hi)
        step = target - theta
        if np.max(np.abs(step)) < tol:
            if tighten():
                continue
            converged = True
            break
        mackay = step
        if stochastic:  # noisy evidence: the fixed point's step as it is (module docstring);
            # the Lanczos log det (the costliest part) is left to the final point
            theta, pt = theta + step, at(theta + step, pt, evidence=False)
            record(pt, 1)
            continue
        improved = False
        floor = pt.objective - 1e-9 * max(1.0, abs(pt.objective))
        jump = None
        if pause > 0:
            pause -= 1
        else:
            jump = _extrapolated_step(mackay, last_step, gamma, lo - theta, tol, cap)
        if jump is not None:
            new = at(theta + jump, pt, tol=outer)
            improved = new.objective >= floor
            step = jump
            # a trust region for the extrapolation: doubled after a kept move, halved after a
            # lost one; after the n-th lost one in a row the next 2^(n-1) iterations (at most
            # MAX_PAUSE) do not try one, so moves that keep losing cost few evaluations
            cap = min(2.0 * cap, EXTRAPOLATION_CAP) if improved else max(0.5 * cap, CAP_FLOOR)
            losses = 0 if improved else losses + 1
            pause = 0 if improved else min(2 ** (losses - 1), MAX_PAUSE)
        if not improved:
            step = mackay
            for _half in range(4):
                new = at(theta + step, pt, tol=outer)
                if new.objective >= floor:
                    improved = True
                    break
                step = 0.5 * step
        last_step = mackay if step is mackay else None
        if not improved:
            # MacKay's point (curvature held fixed) is not the evidence's maximiser; near it
            # its steps lose evidence: stop here, the exact ascent (where it runs) goes on
            if tighten():
                continue
            converged = True
            break
        gain = new.objective - pt.objective
        theta, pt = theta + step, new
        record(pt, 3 if step is jump else 1)
        if abs(gain) < 1e-8 * max(1.0, abs(pt.objective)):
            # the evidence no longer moves (a group pruned towards 0, where it is flat, or a
            # bound): stop; the exact ascent below, where it runs, finishes the job
            if tighten():
                continue
            converged = True
            break
    if outer > gtol:  # scale_maxiter reached on the looser MAPs
        pt = at(theta, pt)
        record(pt, 4)
    if implicit:
        pt = _with_evidence(pt)
        trace_ev[-1], trace_F[-1] = pt.log_evidence, pt.objective
    if refine:
        cache: dict[bytes, ScalePoint] = {}
        last = [pt]

        # within 3 of MacKay's point in log s: its line searches would otherwise try scales at
        # the bounds, where MAPs with nearly unpenalised collinear features crawl
        box = [(max(lo, t - 3.0), min(hi, t + 3.0)) for t in theta]
        with fit_progress("Learned scales: exact evidence ascent (evaluations)", scale_maxiter,
                          progressbar) as bar:

            def neg(th):
                key = np.asarray(th).tobytes()
                if key not in cache:
                    cache[key] = at(np.asarray(th), last[0])
                    last[0] = cache[key]
                    record(cache[key], 2)
                    bar.advance()
                q = cache[key]
                return -q.objective, -exact_gradient(problem, q, prior_fn)

            # each evaluation is a MAP and 2 G + 1 exact curvatures (G scales): stop at relative
            # evidence changes of 1e-11 (5e-9 nats at F = -520) or gradients of 1e-5 per unit
            # log s; tighter, L-BFGS-B's line searches run on rounding noise (92 evaluations
            # against 30 on 40 CoNLL-2000 sentences, the same scales to 1e-7)
            res = minimize(neg, theta, jac=True, method="L-BFGS-B", bounds=box,
                           options={"maxiter": scale_maxiter, "maxfun": scale_maxiter,
                                    "gtol": REFINE_GTOL, "ftol": REFINE_FTOL})
        best = cache[np.asarray(res.x).tobytes()] if np.asarray(res.x).tobytes() in cache \
            else at(res.x, pt)
        if best.objective >= pt.objective:
            theta, pt = np.log(best.scales), best
        converged = bool(res.success) or converged
    trace = {"outer_objective": np.asarray(trace_F), "outer_log_evidence": np.asarray(trace_ev),
             "outer_scales": np.asarray(trace_s), "outer_step": np.asarray(trace_step)}
    out = LearnedScales(pt, trace, converged)
    if integrate_scales == "grid":
        _grid(problem, out, at, theta, grid_step, grid_radius, grid_threshold)
    return out


def _with_evidence(pt: ScalePoint) -> ScalePoint:
    """``pt`` with its log evidence (an implicit-covariance point whose Lanczos log det was
    left out)."""
    if np.isnan(pt.log_evidence):
        d = pt.mean.size
        pt.log_evidence = float(pt.log_likelihood + pt.log_prior + 0.5 * d * np.log(2.0 * np.pi)
                                + 0.5 * pt.gaussian.logdet(probes=IMPLICIT_PROBES))
    return pt


def _theta_hessian(at, theta: np.ndarray, pt: ScalePoint, delta: float = 0.1) -> np.ndarray:
    """Hessian of ``F(theta) + sum theta`` (log posterior density of ``log s``: the objective of
    a fit for the grid) by central differences of its values with step ``delta``."""
    G = theta.size

    def f(th):
        return at(th, pt).objective

    f0 = pt.objective
    H = np.zeros((G, G))
    E = np.eye(G) * delta
    for i in range(G):
        H[i, i] = (f(theta + E[i]) - 2.0 * f0 + f(theta - E[i])) / delta ** 2
        for j in range(i):
            H[i, j] = H[j, i] = (f(theta + E[i] + E[j]) - f(theta + E[i] - E[j])
                                 - f(theta - E[i] + E[j]) + f(theta - E[i] - E[j])) / (4 * delta ** 2)
    return H


def _grid(problem, out: LearnedScales, at, theta, step, radius, threshold) -> None:
    """INLA-style grid over ``log s`` (module docstring): fills ``out.points``, ``weights``,
    ``log_marginal_likelihood`` and ``hessian``."""
    H = _theta_hessian(at, theta, out.point)
    vals, vecs = np.linalg.eigh(-0.5 * (H + H.T))
    if not np.all(vals > 0):
        raise ValueError(f"the log posterior of log s is not concave at its mode (Hessian "
                         f"eigenvalues {(-vals).round(4).tolist()}): the grid integration needs "
                         "a proper, peaked posterior of the scales (a proper hyperprior)")
    root = vecs / np.sqrt(vals)  # theta = theta* + root @ z
    n = int(np.floor(radius / step))
    mode = out.point.objective
    cache = {(0.0,) * theta.size: out.point}

    def point(z: tuple) -> ScalePoint | None:
        if z not in cache:
            th = theta + root @ np.asarray(z)
            inside = (np.all(th >= np.log(SCALE_BOUNDS[0]))
                      and np.all(th <= np.log(SCALE_BOUNDS[1])))
            cache[z] = at(th, out.point) if inside else None
        return cache[z]

    # each axis out to ``radius``, and further (up to twice as far) while the density on the
    # axis stays within ``threshold`` of the mode: the posterior of a log scale is skewed, with
    # a long tail towards 0 where the evidence is flat, which a symmetric grid cuts off (Rue,
    # Martino & Chopin 2009, sec. 3.1, explore each axis until the density has fallen)
    axes = []
    for i in range(theta.size):
        sides = []
        for sign in (-1.0, 1.0):
            j = 0
            while j < 2 * n:
                z = np.zeros(theta.size)
                z[i] = sign * step * (j + 1)
                pt = point(tuple(z))
                if j >= n and (pt is None or pt.objective < mode - threshold):
                    break
                j += 1
            sides.append(j)
        axes.append(step * np.arange(-sides[0], sides[1] + 1))
    points, logs = [], []
    for z in itertools.product(*axes):
        pt = point(tuple(float(v) for v in z))
        if pt is None or pt.objective < mode - threshold:
            continue
        points.append(pt)
        logs.append(pt.objective)
    logs = np.asarray(logs)
    top = logs.max()
    w = np.exp(logs - top)
    # log p(D) ~ log sum_k exp(lv_k) + log(cell volume in theta)
    cell = theta.size * np.log(step) + float(np.sum(np.log(1.0 / np.sqrt(vals))))
    out.log_marginal_likelihood = float(top + np.log(w.sum()) + cell)
    out.points, out.weights, out.hessian = points, w / w.sum(), H


@dataclass
class _Node:
    """A node of the one-scale search (``_search_one_scale``): ``theta = log s``, the MAP
    ``w`` there (to ``SEARCH_GTOL``), ``phi`` and its slope ``R / s^2``, and the per-probe
    estimates ``L`` (probes,) of ``log det(I + S H_lik(w) S)``."""

    theta: float
    w: np.ndarray
    phi: float
    dphi: float
    L: np.ndarray
    steps: int
    optimizer: dict
    log_likelihood: float
    log_prior: float


def _search_model(nodes: list[_Node], grid: np.ndarray, d: int, hyper: np.ndarray
                  ) -> np.ndarray:
    """Per-probe model (probes, len(grid)) of ``F(theta)`` (the log evidence, plus ``hyper``)
    from the nodes (``_search_one_scale``): ``phi`` by cubic Hermite through the nodes'
    values and slopes (linear from one node), ``L`` by the Lagrange polynomial through the (up
    to three) nearest nodes."""
    th = np.array([n.theta for n in nodes])
    order = np.argsort(th)
    if len(nodes) == 1:
        phi = nodes[0].phi + nodes[0].dphi * (grid - th[0])
    else:
        phi = CubicHermiteSpline(th[order], [nodes[i].phi for i in order],
                                 [nodes[i].dphi for i in order])(grid)
    Ls = np.stack([n.L for n in nodes])  # (nodes, probes)
    L = np.empty((Ls.shape[1], grid.size))
    for g, t in enumerate(grid):
        near = np.argsort(np.abs(th - t), kind="stable")[:3]
        ell = [np.prod([(t - th[j]) / (th[i] - th[j]) for j in near if j != i]) for i in near]
        L[:, g] = np.tensordot(ell, Ls[near], axes=1)
    return phi[None, :] + 0.5 * d * np.log(2.0 * np.pi) - 0.5 * L + hyper[None, :]


def _search_one_scale(problem: WeightProblem, at, theta0: np.ndarray, lo: float, hi: float,
                      prior_fn, maxiter: int, finish: bool = True):
    """The maximiser of the Laplace evidence (with ``prior_fn``, plus ``log p(s)``) over one
    learned scale, ``theta = log s``, within 3 of ``theta0``: ``(theta, point, trace)``.

    With the prior sds ``S = diag(sd)`` at ``s`` (``s`` for the weights the scale governs),
    ``A = H_lik(w*) + S^{-2}`` and ``log det A = -2 sum log sd + L(theta)``,
    ``L(theta) = log det(I + S H_lik(w*(theta)) S)``; the evidence is
    ``F = phi(theta) + d/2 log 2 pi - 1/2 L(theta)`` with ``phi = log p(D | w*) +
    log N(w*; mu, S^2) + sum log sd``, whose slope is ``R / s^2`` (``R`` the squared distance
    of the governed weights from their prior means; the envelope theorem). At a node
    ``theta_i``: the MAP (to ``SEARCH_GTOL``, warm-started linearly in ``theta`` from the
    nearest nodes), then ``L(theta_i)`` by stochastic Lanczos quadrature of ``S H_lik S``
    (:func:`~pymc_crf.fitters.covariance.lanczos_quadrature`; ``SEARCH_PROBES`` Rademacher
    probes, the same at every node, so differences between nodes share their noise; the steps
    stop when the estimate moves by less than 1 over 5 steps). Between the nodes ``phi`` is
    interpolated by cubic Hermite (values and exact slopes) and ``L`` by the Lagrange
    polynomial through the (up to three) nearest nodes. ``L`` is smooth in ``theta``; a node's
    Lanczos rules are used at its own ``s`` only: at fixed ``w*`` they would give
    ``log det(I + s^2 H_lik)`` at every ``s`` of a scale that governs every weight, but
    ``H_lik(w*(theta'))`` itself shrinks fast as the weights grow and the features saturate
    (on CoNLL-2000, ``log det(I + s^2 H_lik(w*(theta')))`` at fixed ``s`` is strongly convex
    in ``theta'``), so that reuse is no model of ``L`` (the change MacKay's fixed point leaves
    out). The second node is 1 above the first, every later one at the model's maximiser
    between the outer nodes, or 0.5 beyond the outer node where that maximiser is; the search
    stops when, with at least three nodes, the maximiser is within ``SEARCH_XTOL`` of a node,
    which is returned: with ``finish`` its MAP refined to the fit's ``gtol`` with the implicit
    Gaussian there, else as the search left it. The trace's ``search_theta_se`` is the spread
    of the per-probe models' maximisers (their standard deviation over sqrt(probes)): the
    Monte Carlo error of the choice; ``search_log_evidence_se`` the standard error of the
    returned node's log evidence."""
    d = problem.size
    mu = problem.prior.mean
    governed = np.asarray(problem.scale_index) >= 0
    a, b = max(lo, float(theta0[0]) - 3.0), min(hi, float(theta0[0]) + 3.0)
    grid_all = np.linspace(a, b, int(round((b - a) / 0.005)) + 1)

    def hyper(theta: np.ndarray) -> np.ndarray:
        if prior_fn is None:
            return np.zeros(np.size(theta))
        return np.array([prior_fn(np.array([t]))[0] for t in np.atleast_1d(theta)])

    hyper_all = hyper(grid_all)
    nodes: list[_Node] = []

    def node(theta: float, start: np.ndarray) -> _Node:
        p = problem.at_scales(np.array([np.exp(theta)]))
        w, lik, info = _exact_map(p, start, maxiter, SEARCH_GTOL)
        op, sd = CurvatureOperator(lik, w), p.prior.sd[:, None]

        def f(t):
            return np.log1p(np.clip(t, 0.0, None))

        quad = lanczos_quadrature(lambda V: sd * op.matmat(sd * V), d, SEARCH_PROBES,
                                  SEARCH_STEPS, rng=0, check=f, atol=1.0)
        R = float(np.sum((w - mu)[governed] ** 2))
        ll, lp = float(lik(w)[0]), float(p.prior(w)[0])
        return _Node(theta, w, ll + lp + float(np.sum(np.log(p.prior.sd))),
                     R * np.exp(-2.0 * theta), quad.estimates(f), quad.steps, info, ll, lp)

    def start_at(theta: float) -> np.ndarray:
        """The MAP's start: linear in theta through the two nearest nodes; from one node its
        weights times ``s / s_node``; else the prior mean."""
        if not nodes:
            return mu.copy()
        near = sorted(nodes, key=lambda n: abs(n.theta - theta))[:2]
        if len(near) == 1:
            return mu + (near[0].w - mu) * np.exp(theta - near[0].theta)
        n0, n1 = near
        return n0.w + (theta - n0.theta) / (n1.theta - n0.theta) * (n1.w - n0.w)

    theta_next = float(theta0[0])
    theta_hat, se = theta_next, np.nan
    while True:
        nodes.append(node(theta_next, start_at(theta_next)))
        th = np.array([n.theta for n in nodes])
        if len(nodes) == 1:  # the second node: 1 above (1 below at the upper bound)
            theta_next = th[0] + 1.0 if th[0] + 1.0 <= b else th[0] - 1.0
            continue
        keep = (grid_all >= th.min() - 1e-9) & (grid_all <= th.max() + 1e-9)  # between nodes
        grid = grid_all[keep]
        F = _search_model(nodes, grid, d, hyper_all[keep])
        i = int(np.argmax(F.mean(axis=0)))
        theta_hat = float(grid[i])
        per_probe = grid[np.argmax(F, axis=1)]
        se = float(per_probe.std(ddof=1) / np.sqrt(per_probe.size))
        if len(nodes) >= SEARCH_MAX_NODES:
            break
        gap = float(np.min(np.abs(th - theta_hat)))
        if i in (0, grid.size - 1):  # at an outer node: 0.5 beyond it (within the bounds)
            theta_next = float(np.clip(theta_hat + (0.5 if i else -0.5), a, b))
            if np.min(np.abs(th - theta_next)) < 1e-9:
                break  # the maximiser is at a bound of the search
        elif gap >= SEARCH_XTOL:
            theta_next = theta_hat
        elif len(nodes) >= 3:
            break
        else:  # near a node, but the model needs a third one: beside it
            other = th[np.argsort(np.abs(th - theta_hat))[1]]
            theta_next = theta_hat + np.copysign(0.25, theta_hat - other)
    best = min(nodes, key=lambda n: abs(n.theta - theta_hat))
    evid = np.array([float(_search_model([n], np.array([n.theta]), d, np.zeros(1)).mean())
                     for n in nodes])
    lh = hyper(th)
    k = nodes.index(best)
    if finish:
        pt = at(np.array([best.theta]), best.w, evidence=False)  # the MAP to the fit's gtol
    else:
        pt = ScalePoint(np.exp(np.array([best.theta])), best.w, None, np.nan, float(lh[k]),
                        None, best.optimizer, best.log_likelihood, best.log_prior)
    pt.log_evidence = float(evid[k])
    trace = {"outer_objective": evid + lh, "outer_log_evidence": evid,
             "outer_scales": np.exp(th)[:, None], "outer_step": np.full(len(nodes), 2),
             "search_theta": theta_hat, "search_theta_se": se,
             "search_log_evidence_se": float(0.5 * best.L.std(ddof=1) / np.sqrt(best.L.size)),
             "search_lanczos_steps": np.array([n.steps for n in nodes])}
    return np.array([best.theta]), pt, trace
