"""Leave-one-graph-out cross-validation of any fitted result: ``pmc.loo(result)``.

``az.loo`` treats the draws of a result as draws from the exact posterior. For the Gaussian
approximations (``ep``, ``bethe_laplace``: a ``fit`` group with ``mean_vector`` and
``covariance_matrix``) they are draws from ``q = N(m, V)``, and plain PSIS-LOO of them estimates the
predictive density of ``q``'s leave-one-out posteriors, not the model's. :func:`loo` corrects for
the approximation with importance ratios ``p(w_s | y) / q(w_s)`` (Magnusson et al. 2019, sec. 3:
PSIS-LOO for approximate posteriors, ``r_i(w_s) ∝ p(w_s | y) / (q(w_s) p(y_i | w_s))``),
Pareto-smoothed as in Vehtari et al. 2024: ArviZ's ``loo_approximate_posterior`` with ``log_p`` the
exact unnormalised log posterior of each draw (the weights' Normal log prior plus the per-graph
log-likelihood summed over graphs, :mod:`pymc_crf.model.objective`) and ``log_q`` the Gaussian's
log density; for ``pmc.CRF`` and ``pmc.MRF`` (one value per sample row) likelihoods alike.
When ``q`` is too far from the posterior the Pareto k diagnostics of these ratios say so (k
above ArviZ's ``good_k``), and the estimate must not be trusted.

MCMC results (NUTS, the sampler fitters, ``pm.sample``) get plain PSIS-LOO; one-draw results
(``map``) are refused: LOO needs posterior draws. A graph without any observed label has
log-likelihood ``log 1 = 0`` in every draw (its labels are summed out), a constant PSIS cannot
smooth; its leave-one-out term is exactly 0, so it is left out (with a warning) and the estimate
is the one PSIS would give if it could.
"""

from __future__ import annotations

import warnings
from typing import TYPE_CHECKING

import arviz as az
import numpy as np
import pymc as pm
import xarray as xr

from pymc_crf.inference.base import warn_at_caller
from pymc_crf.model.objective import GaussianLogPrior
from pymc_crf.model.predictors import check_result, result_gaussian
from pymc_crf.model.random_field import extract_random_field
from pymc_crf.model.spec import (
    free_scales,
    prior_fingerprint,
    require_gaussian_prior,
    with_scales,
)

if TYPE_CHECKING:
    from arviz_stats.utils import ELPDData

__all__ = ["gaussian_log_density", "is_gaussian_approximation", "loo", "loo_log_densities"]


def is_gaussian_approximation(result: xr.DataTree) -> bool:
    """Whether ``result``'s draws come from the Gaussian of its ``fit`` group (EP,
    Bethe-Laplace and any fitter following ``docs/fit_contract.md``'s Gaussian layout)."""
    return result_gaussian(result) is not None


def gaussian_log_density(w: np.ndarray, mean: np.ndarray, cov: np.ndarray) -> np.ndarray:
    """Log density of ``N(mean, cov)`` at the rows of ``w`` (S, d); a 1-d ``cov`` is the
    variances of a diagonal Gaussian.

    Through the eigendecomposition of ``cov``, as the fitters draw from it
    (:func:`pymc_crf.model.results.draws_from_gaussian`); a singular ``cov`` (eigenvalues at
    or below ``1e-12`` times the largest) gives the density on its support (pseudo-determinant),
    where every draw lies.
    """
    w = np.atleast_2d(np.asarray(w, dtype=np.float64))
    if np.ndim(cov) == 1:  # the variances of a diagonal Gaussian
        z = (w - mean) / np.sqrt(cov)
        return -0.5 * np.sum(z * z, axis=1) - 0.5 * float(np.sum(np.log(2.0 * np.pi * cov)))
    vals, vecs = np.linalg.eigh(0.5 * (cov + cov.T))
    keep = vals > 1e-12 * max(float(vals.max()), 0.0)
    vals, vecs = vals[keep], vecs[:, keep]
    z = (w - mean) @ vecs / np.sqrt(vals)
    return -0.5 * np.sum(z * z, axis=1) - 0.5 * float(np.sum(np.log(2.0 * np.pi * vals)))


# The fewest draws ArviZ's PSIS takes: below 225 draws its tail is a fifth of them, and a
# Pareto fit needs 5 (the tail size of Vehtari et al. 2024).
_MIN_DRAWS = 25


def _draws_first(da: xr.DataArray) -> np.ndarray:
    """``da``'s values with its chain and draw axes first. By axis position: xarray's
    ``transpose("chain", "draw", ...)`` refuses a variable whose dims repeat a name
    (``dims=("lab", "lab")`` for a K x K transition table)."""
    dims = list(da.dims)
    return np.moveaxis(da.values, [dims.index("chain"), dims.index("draw")], [0, 1])


def _weight_matrix(result: xr.DataTree, spec) -> np.ndarray:
    """The posterior draws as (S, d) in the flat order of ``spec`` (the ``fit`` group's rows)."""
    post = result["posterior"]
    missing = [w.name for w in spec.weights if w.name not in post.data_vars]
    if missing:
        raise ValueError(f"the result's posterior has no {missing}, the model's weights: "
                         "pass the model the result was fitted to")
    cols = []
    for w in spec.weights:
        vals = _draws_first(post[w.name])
        if tuple(vals.shape[2:]) != tuple(w.shape):
            raise ValueError(f"posterior {w.name!r} has shape {vals.shape[2:]}, the model's "
                             f"{w.shape}: pass the model the result was fitted to")
        cols.append(vals.reshape(vals.shape[0] * vals.shape[1], -1))
    return np.concatenate(cols, axis=1)


def loo_log_densities(result: xr.DataTree, model: pm.Model | None = None,
                      var_name: str | None = None) -> tuple[xr.DataArray, xr.DataArray]:
    """``log_p`` (exact unnormalised log posterior) and ``log_q`` (the Gaussian's log density) of
    each draw of a Gaussian-approximation result, as (chain, draw) DataArrays for
    ``arviz.loo_approximate_posterior``.

    ``log_p = log N(w_s; prior) + sum_i log p(y_i | w_s)``, the per-graph log-likelihood taken
    from the result's ``log_likelihood`` group (computed by ``build_result`` with the model's
    engine; exact when ``attrs["log_z"]`` is ``"exact"``).
    """
    try:
        model = pm.modelcontext(model)
    except TypeError as err:
        raise ValueError("pmc.loo of a Gaussian approximation (a result with a 'fit' group) "
                         "needs the model, for the exact log posterior of each draw: pass "
                         "model= or call it inside the model's context") from err
    spec = extract_random_field(model)  # a pmc.CRF or pmc.MRF likelihood
    fitted_prior = result.attrs.get("weight_prior")
    if fitted_prior is not None and fitted_prior != prior_fingerprint(spec):
        # log_p below is this model's prior density: another prior gives another answer
        raise ValueError("pmc.loo: the model's weight prior (its means, sds or scale grouping) "
                         "is not the one the result was fitted with, and the correction "
                         "computes each draw's log posterior under the model's: pass the model "
                         "the result was fitted to")
    scales, _ = free_scales(spec)
    if scales:  # learned by the evidence: the posterior the Gaussian approximates is at them
        spec = with_scales(spec, _point_scales(result, scales))
    require_gaussian_prior(spec, "pmc.loo")
    gauss = result_gaussian(result)
    if gauss is None:
        raise ValueError("pmc.loo's correction needs a Gaussian result (a 'fit' group with "
                         "mean_vector and covariance_matrix or sd_vector)")
    mean = gauss.mean
    if mean.size != spec.flat_size:
        raise ValueError(f"the result's fit group has {mean.size} parameters, the model's "
                         f"weights {spec.flat_size}: pass the model the result was fitted to")
    if gauss.names and gauss.names != spec.param_names():
        raise ValueError("the result's fit group names other parameters than the model's "
                         "weights: pass the model the result was fitted to")
    w = _weight_matrix(result, spec)
    ll = result["log_likelihood"][var_name or spec.observed_name]
    ll_values = _draws_first(ll)
    n_chains, n_draws = ll_values.shape[:2]
    log_lik = ll_values.reshape(n_chains * n_draws, -1).sum(axis=1)
    prior = GaussianLogPrior(spec)
    log_prior = np.array([prior(row)[0] for row in w])
    dims = ("chain", "draw")
    coords = {d: ll.coords[d].values for d in dims if d in ll.coords}
    log_p = xr.DataArray((log_prior + log_lik).reshape(n_chains, n_draws), dims=dims,
                         coords=coords)
    # a diagonal Gaussian (Laplace's diagonal or implicit covariance) keeps its marginal sds
    cov = gauss.cov if gauss.cov is not None else gauss.var
    log_q = xr.DataArray(gaussian_log_density(w, mean, cov).reshape(n_chains, n_draws),
                         dims=dims, coords=coords)
    return log_p, log_q


def _point_scales(result: xr.DataTree, scales) -> np.ndarray:
    """The flat vector of the learned prior scales every draw of ``result`` carries (a
    type-II maximum-likelihood / MAP point estimate); a clear error where the draws carry
    different scales (``integrate_scales="grid"``, a mixture of Gaussians)."""
    post = result["posterior"]
    parts = []
    for v in scales:
        if v.name not in post.data_vars:
            raise ValueError(f"the result's posterior has no {v.name!r}, the model's prior "
                             "scale: pass the model the result was fitted to")
        vals = _draws_first(post[v.name])
        parts.append(vals.reshape(vals.shape[0] * vals.shape[1], -1))
    flat = np.concatenate(parts, axis=1)
    if not np.all(flat == flat[0]):
        raise ValueError("pmc.loo: this result's draws carry different prior scales (scales "
                         "integrated over, integrate_scales='grid': a mixture of Gaussians, "
                         "whose density the correction does not compute); compare it on "
                         "held-out data (pmc.compare(results, test=...)), or fit with the "
                         "scales' point estimate (integrate_scales=None) for LOO")
    return flat[0]


def loo(result: xr.DataTree, model: pm.Model | None = None, *, pointwise: bool = True,
        var_name: str | None = None) -> ELPDData:
    """PSIS-LOO over graphs, corrected for the approximation where the draws are not from the
    posterior.

    Parameters
    ----------
    result : DataTree
        A fitted result with a ``log_likelihood`` group (every fitter's, ``pm.sample``'s) and
        more than one draw.
    model : pm.Model, optional
        The fitted model (or the context's); needed for Gaussian approximations, whose
        correction evaluates the exact log prior of each draw.
    pointwise : bool
        Keep the per-graph ``elpd_i`` and ``pareto_k`` (``az.compare`` needs them).
    var_name : str, optional
        The observed variable (default: the result's only one).

    Returns
    -------
    ELPDData
        ArviZ's LOO result: ``elpd``, ``se``, ``p``, ``pareto_k`` and ``good_k``; ``warning``
        is True when some Pareto k exceeds ``good_k`` (then the estimate cannot be trusted).
        For Gaussian approximations it comes from ``arviz.loo_approximate_posterior``
        (``approx_posterior`` True).

    Raises
    ------
    ValueError
        For one-draw results (``map``): LOO needs posterior draws (at least 25: PSIS fits a
        Pareto tail to the largest fifth of the ratios); for results without a
        ``log_likelihood`` group; for a Gaussian approximation without its model; for
        ``bp_hcrf_vi`` results (variational draws without a density); for learned scales
        integrated over on a grid (``integrate_scales="grid"``: a mixture of Gaussians).
    """
    check_result(result, "pmc.loo: result")
    if "log_likelihood" not in result.children:
        raise ValueError("pmc.loo needs the result's log_likelihood group (fit with "
                         "log_likelihood=True, or pm.compute_log_likelihood for pm.sample)")
    post = result["posterior"]
    n = int(post.sizes.get("chain", 1) * post.sizes.get("draw", 1))
    if n < 2:
        raise ValueError(f"pmc.loo needs posterior draws; this "
                         f"{result.attrs.get('method', 'fitted')!r} result has {n} (a point "
                         "estimate): fit with method='nuts', 'ep' or 'bethe_laplace' (whose "
                         "Gaussian draws pmc.loo corrects), or compare point estimates on "
                         "held-out data with pmc.compare(results, test=...)")
    if n < _MIN_DRAWS:  # ArviZ fails deep inside with "n_draws_tail must be at least 5"
        raise ValueError(f"pmc.loo needs at least {_MIN_DRAWS} posterior draws (PSIS fits a "
                         "Pareto tail to the largest fifth of the importance ratios, at least "
                         f"5 of them); this result has {n}: fit with more draws")
    if result.attrs.get("method") == "bp_hcrf_vi":
        raise ValueError("pmc.loo: the draws of method='bp_hcrf_vi' come from its variational "
                         "posterior, which PSIS-LOO would take for the posterior (no exact "
                         "density to correct them by): its elpd_loo would not estimate the "
                         "model's. Compare hidden CRFs on held-out data (pmc.compare(results, "
                         "test=...)) or fit with method='nuts' for LOO")
    if result.attrs.get("method") == "randomized_map":
        warn_at_caller("pmc.loo: the draws of method='randomized_map' are MAPs of perturbed "
                       "objectives, exact posterior draws only for a quadratic log-likelihood, "
                       "and have no density to correct them by: their PSIS-LOO estimates the "
                       "leave-one-out fit of their own distribution (refine= brings it closer "
                       "to the posterior's; method='nuts' gives the model's)", UserWarning)
    result = _without_unlabelled_graphs(result, var_name)
    if not is_gaussian_approximation(result):
        return az.loo(result, pointwise=pointwise, var_name=var_name)
    if "approximate" in str(result.attrs.get("log_z", "")):
        warn_at_caller(f"pmc.loo: this result's log-likelihood uses {result.attrs['log_z']} "
                       "log Z, so the corrected LOO targets that approximate posterior",
                       UserWarning)
    log_p, log_q = loo_log_densities(result, model, var_name)
    return az.loo_approximate_posterior(result, log_p, log_q, pointwise=pointwise,
                                        var_name=var_name)


def _without_unlabelled_graphs(result: xr.DataTree, var_name: str | None) -> xr.DataTree:
    """``result`` without the graphs whose log-likelihood is 0 in every draw (no observed
    label: their leave-one-out term is exactly 0), with a warning naming them."""
    ll = result["log_likelihood"].to_dataset()
    names = list(ll.data_vars)
    name = var_name if var_name is not None else (names[0] if len(names) == 1 else None)
    if name is None or name not in names:
        return result
    da = ll[name]
    obs_dims = [d for d in da.dims if d not in ("chain", "draw")]
    if len(obs_dims) != 1:  # one value per graph is the package's layout
        return result
    [dim] = obs_dims
    empty = np.asarray((da == 0).all(("chain", "draw")))
    if not empty.any():
        return result
    if empty.all():
        raise ValueError("pmc.loo: no graph has an observed label (every log-likelihood is 0): "
                         "there is nothing to cross-validate")
    warnings.warn(f"pmc.loo: graphs {np.flatnonzero(empty).tolist()} (positions along {dim!r}) "
                  "have no observed label: their log-likelihood is 0 in every draw and their "
                  "leave-one-out term exactly 0, so they are left out of PSIS, which cannot "
                  "smooth a constant", UserWarning, stacklevel=3)
    kept = result.copy()
    kept["log_likelihood"] = ll.isel({dim: np.flatnonzero(~empty)})
    return kept
