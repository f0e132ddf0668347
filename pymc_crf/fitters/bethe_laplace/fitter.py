"""``method="bethe_laplace"``: the Gaussian posterior N(lambda_MP, Sigma) of Welling & Parise 2006.

Reads the CRF or MRF likelihood and its fixed Normal weight prior out of the model, runs
:func:`~pymc_crf.fitters.bethe_laplace.laplace.laplace_fit` and returns the contract ``DataTree``:
draws from the Gaussian in the model's dims, a ``fit`` group (``mean_vector``,
``covariance_matrix``), diagnostics (optimiser and BP convergence at the MAP), the per-graph
(per-sample for MRFs) log-likelihood of the draws and the Laplace evidence as
``attrs["log_marginal_likelihood"]``.
"""

from __future__ import annotations

import os
import time
from typing import TYPE_CHECKING

import numpy as np
import pymc as pm
import xarray as xr

from pymc_crf.fitters.bethe_laplace.batched import pointwise_log_likelihood
from pymc_crf.fitters.bethe_laplace.laplace import (
    COVARIANCE_MODES,
    MAP_MODES,
    laplace_fit,
    laplace_log_evidence,
)
from pymc_crf.fitters.bethe_laplace.problem import exact_engine, weight_problem
from pymc_crf.fitters.bethe_laplace.scales import (
    LearnedScales,
    laplace_point,
    learn_scales,
    warn_unconverged_scales,
)
from pymc_crf.fitters.progress import progress_flag
from pymc_crf.fitters.registry import register
from pymc_crf.inference.base import warn_at_caller
from pymc_crf.inference.bp import BeliefPropagation
from pymc_crf.model.results import build_result, gaussian_fit_group
from pymc_crf.validation import flag, generator, whole_number

if TYPE_CHECKING:
    from numpy.typing import ArrayLike
    from pymc.util import RandomGenerator

__all__ = ["fit_bethe_laplace", "fit_laplace"]

#: draws in the ``posterior`` group when ``draws`` is not given, unless they would take more
#: than ``DRAW_MEMORY`` bytes: 1000 draws of a text CRF's 2.4 million weights are 19 GB
DEFAULT_DRAWS = 1000
DRAW_MEMORY = 2**30


def _n_draws(draws: int | None, n_chains: int, d: int, method: str) -> int:
    """``draws``, or by default ``DEFAULT_DRAWS`` cut to what fits ``DRAW_MEMORY`` (warned)."""
    if draws is not None:
        return whole_number(draws, "draws")
    fits = max(1, DRAW_MEMORY // (8 * d * n_chains))
    if fits >= DEFAULT_DRAWS:
        return DEFAULT_DRAWS
    warn_at_caller(f"pmc.fit(method={method!r}): {DEFAULT_DRAWS} draws of {d:,} weights would "
                   f"take {8 * d * n_chains * DEFAULT_DRAWS / 2**30:.1f} GiB; the posterior "
                   f"group holds {fits} (1 GiB of draws); pass draws= to choose (the fit "
                   "group's mean and sds describe the whole Gaussian)", UserWarning)
    return fits


@register("bethe_laplace")
def fit_bethe_laplace(model: pm.Model, *, map: str = "exact", covariance: str = "bp",
                      bp: BeliefPropagation | None = None, maxiter: int = 2000,
                      gtol: float = 1e-8, draws: int | None = None, chains: int = 1,
                      random_seed: RandomGenerator = None, log_likelihood: bool = True,
                      progressbar: bool = True, hyperprior: bool = True,
                      integrate_scales: str | None = None, scale_init: float | ArrayLike = 1.0,
                      scale_tol: float = 1e-6, scale_maxiter: int = 200,
                      refine: bool | None = None) -> xr.DataTree:
    """Bethe-Laplace posterior of the weights of a CRF or MRF with a Gaussian prior.

    The posterior is ``N(lambda_MP, Sigma)`` with ``Sigma^{-1} = sum_n C_n + Lambda^{-1}``
    (Welling & Parise 2006 eq. (7); CRF version eqs. (11)-(12)): ``C`` the covariance of the
    sufficient statistics at the MAP, here pulled back to the model's weights.

    Weight prior sds that are free scale variables (``s = pm.HalfNormal("s", 1, shape=G)``,
    ``w = pm.Normal("w", 0, s[idx], ...)``: any grouping by integer indexing) are learned by
    maximising the Laplace evidence over them (type-II ML / MAP, MacKay 1992; see
    :mod:`~pymc_crf.fitters.bethe_laplace.scales` and docs/bethe_laplace.md), or integrated out
    on a grid (``integrate_scales="grid"``).

    Parameters
    ----------
    model : pm.Model
        One observed ``pmc.CRF`` (or ``pmc.MRF``) whose weights are free ``pm.Normal`` variables
        with constant mean and a constant sd or a learned scale, and nothing else free. HCRFs
        (hidden variables, eqs. 17-22) are refused.
    map : {"exact", "bp"}
        ``"exact"`` (BL-MP): MAP by exact gradients (chain or junction tree engine);
        ``"bp"`` (BL-BP): pseudo-moment-matching start (MRFs), then L-BFGS on the penalised
        Bethe log-likelihood, BP beliefs as the expectations (Welling & Parise 2006 sec. 7).
    covariance : {"bp", "exact", "diagonal", "implicit"}
        ``"bp"``: C by linear response on the BP fixed point at the MAP (eqs. (8)-(10));
        ``"exact"``: the exact covariance (Laplace-exact); ``"diagonal"``: the diagonal Laplace
        approximation (``diagonal_laplace_sd``, log-linear CRFs with an exact engine; the
        ``fit`` group then holds ``sd_vector`` instead of ``covariance_matrix``);
        ``"implicit"``: the exact covariance as an operator, for models too large to form it
        (see ``method="laplace"``; exact engine, log-linear potentials).
    bp : BeliefPropagation, optional
        BP engine for the Bethe parts (default damping 0.5, tol 1e-11, max_iter 5000). When it
        does not converge at the MAP a ``ConvergenceWarning`` is issued and
        ``diagnostics["bp_converged"]`` is False; where its Bethe log Z there is below the score
        of a single labelling (BP's bound check), ``diagnostics["bp_bound_ok"]`` is False.
    maxiter, gtol
        L-BFGS iteration cap and gradient tolerance.
    draws, chains, random_seed
        Draws from the Gaussian for the ``posterior`` group, per chain. Default: 1000, or as
        many as fit in 1 GiB where 1000 would not (a ``UserWarning`` says so; a text CRF of
        10^5-10^6 weights).
    log_likelihood : bool
        Add the per-graph log-likelihood of the draws.
    progressbar : bool
        Show a progress bar (PyMC's; ``False`` silences it): of the MAP search for fixed priors
        with the dense covariance, and of MacKay's steps with learned scales (the search of one
        scale with ``covariance="implicit"`` and the MAPs of the large covariances have
        none).
    hyperprior : bool
        Learned scales: add their prior's log density to the evidence (type-II MAP); ``False``:
        type-II maximum likelihood.
    integrate_scales : {None, "grid"}
        Learned scales: ``"grid"`` integrates them out (at most 3 scale entries; INLA-style grid,
        Rue, Martino & Chopin 2009): the posterior is the evidence-weighted mixture of the
        Laplace Gaussians at the grid points.
    scale_init, scale_tol, scale_maxiter, refine
        Learned scales: start (one value or one per scale entry), MacKay iterations' tolerance
        on ``log s`` and cap, and the final exact-gradient ascent of the Laplace evidence
        (default: with dense exact curvature, up to 2000 weights and 50 scales, and with
        ``covariance="implicit"`` and one scale entry).

    Notes
    -----
    Probit potentials are handled exactly: their log-likelihood Hessian has the extra term
    ``-sum_t (s_t - mu_t) phi''(a_t) x_t x_t^T`` of the potential's second derivative
    (:func:`~pymc_crf.fitters.bethe_laplace.curvature.potential_curvature`), with the residuals
    ``s_t - mu_t`` from the marginals of the MAP search's engine, so that they balance the prior
    at the MAP.

    Returns
    -------
    xarray.DataTree
        ``posterior``, ``fit`` (``mean_vector``, ``covariance_matrix``), ``diagnostics``
        (L-BFGS record, ``bp_converged``, ``bp_bound_ok``, ``bp_iterations``,
        ``bp_max_change``), ``log_likelihood``; attrs ``method``, ``settings``, ``wall_time``,
        ``log_marginal_likelihood`` (the Laplace evidence, stored only there).
    """
    t0 = time.perf_counter()
    n_chains = whole_number(chains, "chains")
    problem = weight_problem(model, "bethe_laplace", learn_scales=True)
    n_draws = _n_draws(draws, n_chains, problem.size, "bethe_laplace")
    return _fit(problem, "bethe_laplace", t0, map=map, covariance=covariance, bp=bp,
                maxiter=maxiter, gtol=gtol, n_draws=n_draws, n_chains=n_chains, seed=random_seed,
                log_likelihood=log_likelihood, progressbar=progressbar, hyperprior=hyperprior,
                integrate_scales=integrate_scales, scale_init=scale_init, scale_tol=scale_tol,
                scale_maxiter=scale_maxiter, refine=refine)


def _fit(problem, method: str, t0: float, *, map, covariance, bp, maxiter, gtol, n_draws,
         n_chains, seed, log_likelihood, progressbar, hyperprior, integrate_scales, scale_init,
         scale_tol, scale_maxiter, refine) -> xr.DataTree:
    """The result of ``method`` (``"bethe_laplace"`` or ``"laplace"``) on the weight problem
    its fitter read: learned scales or a large covariance go to :func:`_fit_learned_scales`,
    fixed priors to one Laplace fit here."""
    if map not in MAP_MODES:
        raise ValueError(f"map must be one of {MAP_MODES}; got {map!r}")
    # checked here, where every model passes: a fixed-prior model does not read them
    hyperprior = flag(hyperprior, "hyperprior")
    refine = None if refine is None else flag(refine, "refine")
    if covariance not in (*COVARIANCE_MODES, *LARGE_COVARIANCES):
        raise ValueError(f"covariance must be one of {(*COVARIANCE_MODES, *LARGE_COVARIANCES)}; "
                         f"got {covariance!r}")
    if covariance in LARGE_COVARIANCES and map != "exact":
        raise ValueError(f"covariance={covariance!r} is built at the exact MAP (exact engines, "
                         f"log-linear potentials); map={map!r} is for Bethe's dense covariance "
                         "(covariance='bp' or 'exact')")
    if covariance not in LARGE_COVARIANCES:
        _require_dense_fits(problem.size, method, covariance)
    if problem.n_scales or covariance in LARGE_COVARIANCES:
        return _fit_learned_scales(
            problem, method, t0, map=map, covariance=covariance, bp=bp, maxiter=maxiter,
            gtol=gtol, n_draws=n_draws, n_chains=n_chains, seed=seed,
            log_likelihood=log_likelihood, progressbar=progressbar, hyperprior=hyperprior,
            integrate_scales=integrate_scales, scale_init=scale_init, scale_tol=scale_tol,
            scale_maxiter=scale_maxiter, refine=refine)
    if integrate_scales is not None:
        raise ValueError("integrate_scales needs learned prior scales; this model's weight "
                         "priors all have fixed sds")
    fit = laplace_fit(problem, map=map, covariance=covariance, bp=bp, maxiter=maxiter, gtol=gtol,
                      progressbar=progressbar)
    log_ev = laplace_log_evidence(fit)
    rng = generator(seed, "random_seed")
    flat = fit.gaussian().sample(n_chains * n_draws, rng).reshape(n_chains, n_draws, -1)
    spec = problem.spec
    draws = spec.unflatten(flat)
    pointwise = None
    if log_likelihood:
        pointwise = {spec.observed_name: pointwise_log_likelihood(problem, flat)}
    rep = fit.bp_report
    diagnostics = {**fit.optimizer,
                   "bp_converged": np.bool_(fit.bp_converged),
                   "bp_bound_ok": np.bool_(fit.bp_bound_ok),
                   "bp_iterations": np.int64(-1 if rep is None else rep["iterations"].max()),
                   "bp_max_change": np.float64(np.nan if rep is None else rep["max_change"].max()),
                   "log_likelihood_at_map": np.float64(fit.log_likelihood),
                   "log_prior_at_map": np.float64(fit.log_prior)}
    settings = {"map": map, "covariance": covariance, "bp": None if bp is None else repr(bp),
                "maxiter": int(maxiter), "gtol": gtol, "draws": n_draws, "chains": n_chains,
                "random_seed": seed}
    return build_result(problem.model, draws, method, settings, time.perf_counter() - t0,
                        mean_vector=fit.mean, covariance_matrix=fit.covariance,
                        param_names=spec.param_names(), diagnostics=diagnostics,
                        log_marginal_likelihood=log_ev, log_likelihood=False,
                        pointwise_log_likelihood=pointwise, spec=spec)


def _require_dense_fits(d: int, method: str, covariance: str) -> None:
    """Refuse a dense covariance whose few (d, d) float64 matrices (Hessian, its Cholesky
    factor, the covariance) would not fit in this machine's memory, before any work."""
    need = 3 * 8 * float(d) ** 2
    try:
        have = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (AttributeError, ValueError, OSError):  # no sysconf (Windows): no check
        return
    if need > have:
        raise ValueError(f"method={method!r} with covariance={covariance!r} keeps dense "
                         f"({d}, {d}) matrices of the {d} weights: about {need / 2**30:.0f} GiB, "
                         f"more than this machine's {have / 2**30:.0f} GiB of memory. Use "
                         "method='laplace' with covariance='diagonal' or 'implicit' (exact "
                         "engines, log-linear potentials), or method='map'")


#: the largest number of weights for which method="laplace" forms the dense exact covariance
DENSE_LIMIT = 3000
#: covariances for models too large for the dense one (exact engines, log-linear potentials)
LARGE_COVARIANCES = ("diagonal", "implicit")


@register("laplace")
def fit_laplace(model: pm.Model, *, covariance: str = "auto", maxiter: int = 2000,
                gtol: float = 1e-8, draws: int | None = None, chains: int = 1,
                random_seed: RandomGenerator = None,
                log_likelihood: bool = True, progressbar: bool = True, hyperprior: bool = True,
                integrate_scales: str | None = None, scale_init: float | ArrayLike = 1.0,
                scale_tol: float = 1e-6, scale_maxiter: int = 200, refine: bool | None = None) -> xr.DataTree:
    """The Laplace approximation of a CRF or MRF weight posterior with exact inference (the name
    pymc-extras users know): ``method="bethe_laplace"`` with ``map="exact"`` and exact
    curvature, including learned prior scales (see :func:`fit_bethe_laplace`).

    Parameters
    ----------
    model : pm.Model
        As for ``bethe_laplace``; the graph must allow exact inference (chains, trees, narrow
        junction trees), else use ``method="bethe_laplace"``.
    covariance : {"auto", "exact", "diagonal", "implicit"}
        ``"exact"``: the dense exact Hessian (d x d); ``"diagonal"``: the diagonal Laplace
        approximation (log-linear CRFs); ``"implicit"``: the exact covariance never formed,
        draws by perturbation-optimisation with conjugate gradients on Hessian-vector
        products and the evidence's ``log det`` by stochastic Lanczos quadrature
        (:class:`~pymc_crf.fitters.covariance.ImplicitGaussian`; log-linear potentials; its
        sds in ``fit.sd_vector`` are Monte Carlo estimates from 16 draws); ``"auto"``:
        ``"exact"`` up to 3000 weights (``DENSE_LIMIT``), ``"diagonal"`` above.
    maxiter, gtol, draws, chains, random_seed, log_likelihood, progressbar
        As for ``bethe_laplace``.
    hyperprior, integrate_scales, scale_init, scale_tol, scale_maxiter, refine
        As for ``bethe_laplace``.
    """
    t0 = time.perf_counter()
    problem = weight_problem(model, "laplace", learn_scales=True)
    exact_engine(problem, "use method='bethe_laplace' (BP for the log partition function)")
    if covariance == "auto":
        covariance = "exact" if problem.size <= DENSE_LIMIT else "diagonal"
    if covariance not in ("exact", *LARGE_COVARIANCES):
        raise ValueError(f"covariance must be 'auto', 'exact', 'diagonal' or 'implicit' for "
                         f"method='laplace'; got {covariance!r}")
    n_chains = whole_number(chains, "chains")
    n_draws = _n_draws(draws, n_chains, problem.size, "laplace")
    return _fit(problem, "laplace", t0, map="exact", covariance=covariance, bp=None,
                maxiter=maxiter, gtol=gtol, n_draws=n_draws, n_chains=n_chains, seed=random_seed,
                log_likelihood=log_likelihood, progressbar=progressbar, hyperprior=hyperprior,
                integrate_scales=integrate_scales, scale_init=scale_init, scale_tol=scale_tol,
                scale_maxiter=scale_maxiter, refine=refine)


def _fit_learned_scales(problem, method: str, t0: float, *, map, covariance, bp, maxiter, gtol,
                        n_draws, n_chains, seed, log_likelihood, progressbar, hyperprior,
                        integrate_scales, scale_init, scale_tol, scale_maxiter,
                        refine) -> xr.DataTree:
    """The result of a fit with learned scales (or the diagonal covariance): draws of the weights
    (and scales) from the Gaussian at the learned scales or from the grid mixture."""
    if covariance == "diagonal" and (problem.kind != "crf" or problem.potential != "loglinear"):
        raise ValueError("covariance='diagonal' takes log-linear CRFs (diagonal_laplace_sd); use "
                         "covariance='exact' or 'bp'")
    if covariance == "implicit" and problem.potential != "loglinear":
        raise ValueError("covariance='implicit' takes log-linear potentials (its curvature is "
                         "the covariance of the sufficient statistics); use covariance='exact'")
    progressbar = progress_flag(progressbar)
    rng = generator(seed, "random_seed")
    spec = problem.spec
    if problem.n_scales:
        learned = learn_scales(problem, map=map, covariance=covariance, bp=bp, maxiter=maxiter,
                               gtol=gtol, hyperprior=hyperprior, scale_init=scale_init,
                               scale_tol=scale_tol, scale_maxiter=scale_maxiter, refine=refine,
                               integrate_scales=integrate_scales, progressbar=progressbar)
        if not learned.converged:
            warn_unconverged_scales(method, scale_maxiter)
    else:
        if integrate_scales is not None:
            raise ValueError("integrate_scales needs learned prior scales; this model's weight "
                             "priors all have fixed sds")
        pt = laplace_point(problem, np.zeros(0), None, map=map, covariance=covariance, bp=bp,
                           maxiter=maxiter, gtol=gtol, hyperprior=None)
        learned = LearnedScales(pt, {}, True)
    pt = learned.point
    points = learned.points or [pt]
    weights = learned.weights if learned.weights is not None else np.ones(1)
    comp = rng.choice(len(points), size=(n_chains, n_draws), p=weights)
    d = problem.size
    flat = np.empty((n_chains, n_draws, d))
    scale_draws = np.empty((n_chains, n_draws, problem.n_scales))
    for k, q in enumerate(points):
        sel = comp == k
        m = int(sel.sum())
        if not m:
            continue
        if q.gaussian is not None:
            flat[sel] = q.gaussian.sample(m, rng)
        elif q.fit is None:
            flat[sel] = q.mean + np.sqrt(q.variances()) * rng.standard_normal((m, d))
        else:
            flat[sel] = q.fit.gaussian().sample(m, rng)
        scale_draws[sel] = q.scales
    post = spec.unflatten(flat)
    for v in problem.scales:
        post[v.name] = scale_draws[..., v.offset:v.offset + v.size].reshape(
            n_chains, n_draws, *v.shape)
    # the mixture's mean and covariance (one component at a point estimate)
    mean = sum(w * q.mean for w, q in zip(weights, points, strict=True))
    dense = pt.fit is not None
    if dense:
        cov = sum(w * (q.covariance + np.outer(q.mean - mean, q.mean - mean))
                  for w, q in zip(weights, points, strict=True))
    else:
        var = sum(w * (q.variances() + (q.mean - mean) ** 2)
                  for w, q in zip(weights, points, strict=True))
    log_ev = (learned.log_marginal_likelihood if learned.log_marginal_likelihood is not None
              else pt.log_evidence)
    pointwise = ({spec.observed_name: pointwise_log_likelihood(problem, flat)}
                 if log_likelihood else None)
    settings = {"map": map, "covariance": covariance, "bp": None if bp is None else repr(bp),
                "maxiter": int(maxiter), "gtol": gtol, "draws": n_draws, "chains": n_chains,
                "random_seed": seed,
                "hyperprior": hyperprior, "integrate_scales": integrate_scales,
                "scale_tol": scale_tol, "scale_maxiter": scale_maxiter, "refine": refine}
    names = [n for v in problem.scales for n in v.entry_names()]
    if dense:
        fit_group = gaussian_fit_group(mean, cov, spec.param_names())
    else:
        fit_group = xr.Dataset({"mean_vector": (("rows",), mean),
                                "sd_vector": (("rows",), np.sqrt(var))},
                               coords={"rows": spec.param_names()})
    fit_group["log_evidence_at_scales"] = ((), float(pt.log_evidence))
    if names:
        fit_group["scales"] = (("scale_entry",), pt.scales)
        fit_group = fit_group.assign_coords(scale_entry=names)
    return build_result(problem.model, post, method, settings, time.perf_counter() - t0,
                        log_marginal_likelihood=log_ev, log_likelihood=False,
                        pointwise_log_likelihood=pointwise, spec=spec,
                        extra_groups={"fit": fit_group,
                                      "diagnostics": _diagnostics(pt, learned, names)})


def _diagnostics(pt, learned, names) -> xr.Dataset:
    """The final MAP's optimiser record (over ``iteration``) and the outer iterations' trace of
    the scales and evidence (over ``outer_iteration``), with the grid when there is one."""
    data = {}
    for k, v in pt.optimizer.items():
        a = np.asarray(v)
        data[k] = (("iteration",) if a.ndim == 1 else ()), a
    data["log_likelihood_at_map"] = ((), np.float64(pt.log_likelihood))
    data["log_prior_at_map"] = ((), np.float64(pt.log_prior))
    data["scales_converged"] = ((), np.bool_(learned.converged))
    tr = learned.trace
    if tr:
        data["log_evidence"] = (("outer_iteration",), tr["outer_log_evidence"])
        data["scale_objective"] = (("outer_iteration",), tr["outer_objective"])
        data["scale_step"] = (("outer_iteration",), tr["outer_step"])
        data["scale_trace"] = (("outer_iteration", "scale_entry"), tr["outer_scales"])
    if learned.points:
        data["grid_scales"] = (("grid_point", "scale_entry"),
                               np.stack([q.scales for q in learned.points]))
        data["grid_weights"] = (("grid_point",), learned.weights)
        data["grid_log_evidence"] = (("grid_point",),
                                     np.array([q.log_evidence for q in learned.points]))
    ds = xr.Dataset(data)
    if names:
        ds = ds.assign_coords(scale_entry=names)
    return ds
