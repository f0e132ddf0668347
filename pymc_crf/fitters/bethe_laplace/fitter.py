"""``method="bethe_laplace"``: the Gaussian posterior N(lambda_MP, Sigma) of Welling & Parise 2006.

Reads the CRF or MRF likelihood and its fixed Normal weight prior out of the model, runs
:func:`~pymc_crf.fitters.bethe_laplace.laplace.laplace_fit` and returns the contract ``DataTree``:
draws from the Gaussian in the model's dims, a ``fit`` group (``mean_vector``,
``covariance_matrix``, ``log_marginal_likelihood``), diagnostics (optimiser and BP convergence
at the MAP) and the per-graph (per-sample for MRFs) log-likelihood of the draws.
"""

from __future__ import annotations

import time

import numpy as np
import pymc as pm
import xarray as xr

from pymc_crf.fitters.bethe_laplace.batched import BatchedLikelihood
from pymc_crf.fitters.bethe_laplace.laplace import laplace_fit, laplace_log_evidence
from pymc_crf.fitters.bethe_laplace.problem import weight_problem
from pymc_crf.fitters.options import renamed
from pymc_crf.fitters.registry import register
from pymc_crf.fitters.results import build_result, draws_from_gaussian
from pymc_crf.inference.bp import BeliefPropagation
from pymc_crf.validation import generator, whole_number

__all__ = ["fit_bethe_laplace"]


@register("bethe_laplace")
def fit_bethe_laplace(model: pm.Model, *, map: str = "exact", covariance: str = "bp",
                      bp: BeliefPropagation | None = None, maxiter: int = 2000,
                      gtol: float = 1e-8, draws: int = 1000, chains: int = 1, random_seed=None,
                      log_likelihood: bool = True, n_draws: int | None = None,
                      n_chains: int | None = None, seed=None,
                      progressbar: bool = True) -> xr.DataTree:
    """Bethe-Laplace posterior of the weights of a CRF or MRF with a Gaussian prior.

    The posterior is ``N(lambda_MP, Sigma)`` with ``Sigma^{-1} = sum_n C_n + Lambda^{-1}``
    (Welling & Parise 2006 eq. (7); CRF version eqs. (11)-(12)): ``C`` the covariance of the
    sufficient statistics at the MAP, here pulled back to the model's weights.

    Parameters
    ----------
    model : pm.Model
        One observed ``pmc.CRF`` (or ``pmc.MRF``) whose weights are free ``pm.Normal`` variables
        with constant mean and sd, and nothing else free. HCRFs (hidden variables, eqs. 17-22) are
        refused.
    map : {"exact", "bp"}
        ``"exact"`` (BL-MP): MAP by exact gradients (chain or junction tree engine);
        ``"bp"`` (BL-BP): pseudo-moment-matching start (MRFs), then L-BFGS on the penalised
        Bethe log-likelihood, BP beliefs as the expectations (Welling & Parise 2006 sec. 7).
    covariance : {"bp", "exact"}
        ``"bp"``: C by linear response on the BP fixed point at the MAP (eqs. (8)-(10));
        ``"exact"``: the exact covariance (Laplace-exact).
    bp : BeliefPropagation, optional
        BP engine for the Bethe parts (default damping 0.5, tol 1e-11, max_iter 5000). When it
        does not converge at the MAP a ``ConvergenceWarning`` is issued and
        ``diagnostics["bp_converged"]`` is False; where its Bethe log Z there is below the score
        of a single labelling (BP's bound check), ``diagnostics["bp_bound_ok"]`` is False.
    maxiter, gtol
        L-BFGS iteration cap and gradient tolerance.
    draws, chains, random_seed
        Draws from the Gaussian for the ``posterior`` group.
    log_likelihood : bool
        Add the per-graph log-likelihood of the draws.
    n_draws, n_chains, seed
        Deprecated names of ``draws``, ``chains``, ``random_seed`` (FutureWarning).
    progressbar : bool
        Show a progress bar of the MAP search (PyMC's; ``False`` silences it).

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
        ``posterior``, ``fit`` (``mean_vector``, ``covariance_matrix``,
        ``log_marginal_likelihood``), ``diagnostics`` (L-BFGS record, ``bp_converged``,
        ``bp_bound_ok``, ``bp_iterations``, ``bp_max_change``), ``log_likelihood``; attrs ``method``,
        ``settings``, ``wall_time``, ``log_marginal_likelihood``.
    """
    t0 = time.perf_counter()
    n_draws = renamed(draws, n_draws, "n_draws", "draws", default=1000)
    n_chains = renamed(chains, n_chains, "n_chains", "chains", default=1)
    seed = renamed(random_seed, seed, "seed", "random_seed", default=None)
    n_draws, n_chains = whole_number(n_draws, "draws"), whole_number(n_chains, "chains")
    problem = weight_problem(model, "bethe_laplace")
    fit = laplace_fit(problem, map=map, covariance=covariance, bp=bp, maxiter=maxiter, gtol=gtol,
                      progressbar=progressbar)
    log_ev = laplace_log_evidence(fit)
    rng = generator(seed, "random_seed")
    flat = draws_from_gaussian(fit.mean, fit.covariance, n_draws, n_chains, rng)
    spec = problem.spec
    draws = spec.unflatten(flat)
    pointwise = None
    if log_likelihood:
        pointwise = {spec.observed_name: _pointwise(problem, flat)}
    rep = fit.bp_report
    diagnostics = {**fit.optimizer,
                   "bp_converged": np.bool_(fit.bp_converged),
                   "bp_bound_ok": np.bool_(fit.bp_bound_ok),
                   "bp_iterations": np.int64(-1 if rep is None else rep["iterations"].max()),
                   "bp_max_change": np.float64(np.nan if rep is None else rep["max_change"].max()),
                   "log_likelihood_at_map": np.float64(fit.log_likelihood),
                   "log_prior_at_map": np.float64(fit.log_prior)}
    settings = {"map": map, "covariance": covariance, "bp": repr(bp), "maxiter": int(maxiter),
                "gtol": gtol, "draws": n_draws, "chains": n_chains, "random_seed": seed}
    result = build_result(model, draws, "bethe_laplace", settings, time.perf_counter() - t0,
                          mean_vector=fit.mean, covariance_matrix=fit.covariance,
                          param_names=spec.param_names(), diagnostics=diagnostics,
                          log_marginal_likelihood=log_ev, log_likelihood=False,
                          pointwise_log_likelihood=pointwise)
    fit_group = result["fit"].to_dataset()
    fit_group["log_marginal_likelihood"] = ((), float(log_ev))
    result["fit"] = fit_group
    return result


def _pointwise(problem, flat: np.ndarray, chunk: int = 500) -> np.ndarray:
    """Per-graph (CRF) or per-row (MRF) log-likelihood of the draws (chains, draws, d), many
    draws per engine call for log-linear tables."""
    lik = problem.make_likelihood()
    C, S, d = flat.shape
    draws = flat.reshape(C * S, d)
    if problem.potential != "loglinear":
        out = np.stack([lik.pointwise(w) for w in draws])
    else:
        n = min(chunk, draws.shape[0])
        batched = BatchedLikelihood(lik, n)  # one replicated batch, reused for every block
        parts = []
        for i in range(0, draws.shape[0], n):
            block = draws[i:i + n]
            pad = n - block.shape[0]
            full = np.concatenate([block, np.repeat(block[-1:], pad, axis=0)]) if pad else block
            parts.append(batched.pointwise(full)[:block.shape[0]])
        out = np.concatenate(parts)
    return out.reshape(C, S, -1)
