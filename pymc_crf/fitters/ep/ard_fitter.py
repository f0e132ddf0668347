"""``method="predictive_ard"``: feature selection for Bayesian CRFs by predictive ARD with EP
(Qi 2005, thesis ch. 4; the path and estimates are in :mod:`.ard`).

The model's Normal prior on the CRF weights is the widest ARD prior allowed: each input feature's
group of weights gets its own precision, tuned by sequential evidence maximisation with EP, and
the step of the path with the best leave-one-graph-out estimate is returned (``criterion``).
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

import numpy as np
import pymc as pm
import xarray as xr

from pymc_crf.fitters.ep.ard import CRITERIA, feature_groups, run_ard
from pymc_crf.fitters.ep.core import variant_transform
from pymc_crf.fitters.ep.fitter import (
    _check_ep_memory,
    _check_unit_interval,
    _spec_for_ep,
    ep_inputs,
)
from pymc_crf.fitters.ep.terms import build_terms
from pymc_crf.fitters.progress import fit_progress
from pymc_crf.fitters.registry import register
from pymc_crf.model.results import build_result, draws_from_gaussian
from pymc_crf.model.spec import refuse_free_scales
from pymc_crf.validation import flag, generator, positive_number, whole_number

if TYPE_CHECKING:
    from pymc.util import RandomGenerator

__all__ = ["fit_predictive_ard"]


def _group_prior_variances(prior_mean: np.ndarray, prior_var: np.ndarray,
                           groups: list[np.ndarray], names: list[str]) -> np.ndarray:
    if np.any(prior_mean != 0):
        raise ValueError("method='predictive_ard' needs zero prior means on the CRF weights (ARD "
                         "shrinks each feature's weights towards 0); this model's prior means "
                         "are not all 0")
    out = np.empty(len(groups))
    for g, idx in enumerate(groups):
        v = prior_var[idx]
        if not np.allclose(v, v[0]):
            raise ValueError(f"method='predictive_ard' needs one prior sd per feature group; the "
                             f"weights of {names[g]} have prior variances {np.unique(v)}")
        out[g] = v[0]
    return out


@register("predictive_ard")
def fit_predictive_ard(model: pm.Model, *, criterion: str = "loo", tol: float = 1e-3,
                       max_steps: int | None = None, variant: str = "pep",
                       step_size: float = 0.5, damping: float | None = None,
                       ep_tol: float = 1e-4, max_iter: int = 2000, backoff: bool = True,
                       min_step: float = 0.05, draws: int = 1000, chains: int = 1,
                       random_seed: RandomGenerator = None, log_likelihood: bool = True,
                       keep_path: bool = False,
                       warm_start: bool = False, progressbar: bool = True) -> xr.DataTree:
    """Predictive ARD by EP: prune and shrink a Bayesian CRF's input features, keeping the model
    with the best estimated leave-one-graph-out performance.

    Parameters
    ----------
    model : pm.Model
        As for ``method="ep"``: the CRF weights are the only free variables, each with a
        ``pm.Normal(0, sd)`` prior, the same sd within a feature's weights; that sd is the widest
        prior ARD may give the feature (ARD only shrinks or removes).
    criterion : {"loo", "loo_prob", "evidence"}
        Which model of the path to keep: the smallest leave-one-out error estimate (predictive ARD,
        thesis eq. (4.12)), the smallest mean leave-one-out wrong-label probability (thesis
        eq. (4.13), predictive_Prob-ARD), or the end of the path (evidence-ARD).
    tol : float
        The path ends when no single update raises the evidence (EP sites fixed) by ``tol`` nats.
    max_steps : int, optional
        Bound on the updates (default 10 per feature).
    variant, step_size, damping, ep_tol, max_iter, backoff, min_step
        EP settings, as ``method="ep"`` (``ep_tol`` is its ``tol``).
    draws, chains, random_seed
        Draws from the chosen q(w) for the ``posterior`` group.
    log_likelihood : bool
        Compute the per-graph log-likelihood of the draws.
    keep_path : bool
        Also store every step's Gaussian in the ``ard`` group (``path_mean`` (step, param),
        ``path_covariance`` (step, param, param)), to compare the criteria on one path.
    warm_start : bool
        Start each step's EP from the previous step's sites (faster; by default every step
        starts from scratch, as a warm start from sites fitted under another prior sometimes led
        EP to a far-off state in our runs, see docs/ep.md).
    progressbar : bool
        Show a progress bar of the ARD steps.

    Returns
    -------
    xarray.DataTree
        ``posterior`` (draws of the chosen q; removed features' weights are exactly 0), ``fit``
        (its ``mean_vector`` and ``covariance_matrix``), ``ard`` (per step of the path:
        ``loo_error``, ``loo_probability``, ``loo_not_pd``, ``site_evidence``, ``n_features``,
        ``ep_iterations``, ``ep_converged``, ``action``, ``prior_variance`` per feature group
        (0 = removed); ``chosen_step``, ``features_kept``), ``diagnostics`` (the numeric
        per-step traces of ``ard`` over ``iteration``, ``chosen_step``, ``path_converged``:
        what ``plots.plot_convergence`` shows), ``log_likelihood``, attrs.

    Examples
    --------
    >>> import pymc as pm
    >>> import pymc_crf as pmc
    >>> train, test = pmc.datasets.bcrf_synthetic("loop", n_train=20, seed=0, n_irrelevant=10)
    >>> with pm.Model(coords=train.coords) as model:
    ...     w = pm.Normal("w", 0.0, 5 ** 0.5, dims=("edge_feature", "label_i", "label_j"))
    ...     t = pmc.CRF("t", graphs=train.graphs, edge_features=train.edge_features,
    ...                 edge_weights=w, potential="probit", observed=train.labels)
    >>> res = pmc.fit(model, method="predictive_ard")   # doctest: +SKIP
    >>> res["ard"]["features_kept"].values               # doctest: +SKIP
    """
    refuse_free_scales(model, "predictive_ard")  # learned prior scales: laplace / bethe_laplace
    t0 = time.perf_counter()
    if criterion not in CRITERIA:
        raise ValueError(f"criterion must be one of {CRITERIA}; got {criterion!r}")
    step_size = _check_unit_interval("step_size", step_size)
    min_step = _check_unit_interval("min_step", min_step)
    if damping is not None:
        damping = _check_unit_interval("damping", damping)
    tol = positive_number(tol, "tol")
    warm_start, keep_path = flag(warm_start, "warm_start"), flag(keep_path, "keep_path")
    if max_steps is not None:
        max_steps = whole_number(max_steps, "max_steps")
    draws, chains = whole_number(draws, "draws"), whole_number(chains, "chains")
    m_k = variant_transform(variant)
    spec = _spec_for_ep(model, "predictive_ard")
    _check_ep_memory(spec, "predictive_ard")
    xn, xe = ep_inputs(spec)
    K = spec.n_labels
    F = 0 if xn is None else xn.shape[1]
    Fe = 0 if xe is None else xe.shape[1]
    groups = feature_groups(F, Fe, K)
    names = [f"node feature {f}" for f in range(F)]
    names += (["edge table"] if spec.shared_edge_table
              else [f"edge feature {f}" for f in range(Fe)])
    prior_mean = np.concatenate([w.prior_mean.ravel() for w in spec.weights])
    prior_var = np.concatenate([w.prior_sd.ravel() ** 2 for w in spec.weights])
    var0 = _group_prior_variances(prior_mean, prior_var, groups, names)
    terms = build_terms(spec.batch, K, spec.labels, xn, xe, use_node=xn is not None,
                        use_edge=xe is not None)
    n_steps = 10 * len(groups) if max_steps is None else max_steps
    ep_options = dict(transform=m_k, step_size=step_size, damping=damping, tol=ep_tol,
                      max_iter=max_iter, backoff=flag(backoff, "backoff"), min_step=min_step)
    with fit_progress("ARD steps", n_steps + 1, progressbar) as bar:
        path = run_ard(terms, spec.batch, spec.labels, xn, xe, groups, 1.0 / var0,
                       potential=spec.potential, epsilon=spec.epsilon, tol=tol,
                       max_steps=n_steps, ep_options=ep_options, warm_start=warm_start,
                       progress=lambda step, state: bar.advance())
    chosen = path.choose(criterion)
    best = path.steps[chosen]
    rng = generator(random_seed, "random_seed")
    flat = draws_from_gaussian(best.mean, best.cov, draws, chains, rng)
    flat[..., np.diag(best.cov) == 0] = 0.0
    steps = path.steps
    kept = [names[g] for g in range(len(groups)) if np.isfinite(best.alpha[g])]
    ard = xr.Dataset(
        {"loo_error": ("step", [s.loo_error for s in steps]),
         "loo_probability": ("step", [s.loo_probability for s in steps]),
         "loo_not_pd": ("step", [s.loo_not_pd for s in steps]),
         "site_evidence": ("step", [s.site_evidence for s in steps]),
         "n_features": ("step", [int(np.isfinite(s.alpha).sum()) for s in steps]),
         "ep_iterations": ("step", [s.ep_iterations for s in steps]),
         "ep_converged": ("step", [s.ep_converged for s in steps]),
         "action": ("step", [s.action for s in steps]),
         "prior_variance": (("step", "feature_group"),
                            np.array([np.where(np.isfinite(s.alpha), 1.0 / s.alpha, 0.0)
                                      for s in steps])),
         "chosen_step": ((), chosen),
         "path_converged": ((), path.converged),
         "features_kept": ("kept", kept)},
        coords={"step": np.arange(len(steps)), "feature_group": names})
    if keep_path:
        pn = spec.param_names()
        ard["path_mean"] = (("step", "param"), np.array([s.mean for s in steps]))
        ard["path_covariance"] = (("step", "param", "param_bis"),
                                  np.array([s.cov for s in steps]))
        ard = ard.assign_coords(param=pn, param_bis=pn)
    settings = {"criterion": criterion, "tol": tol, "max_steps": n_steps, "variant": variant,
                "warm_start": bool(warm_start),
                "step_size": step_size, "damping": damping, "ep_tol": ep_tol,
                "max_iter": int(max_iter), "backoff": bool(backoff), "min_step": min_step,
                "draws": draws, "chains": chains, "random_seed": random_seed,
                "potential": spec.potential, "epsilon": spec.epsilon, "n_labels": K}
    return build_result(model, spec.unflatten(flat), "predictive_ard", settings,
                        time.perf_counter() - t0, mean_vector=best.mean,
                        covariance_matrix=best.cov, param_names=spec.param_names(),
                        log_likelihood=log_likelihood, extra_groups={"ard": ard},
                        # the path's steps are the iterations of this fitter (fit_contract.md)
                        diagnostics={k: ard[k].values for k in
                                     ("loo_error", "site_evidence", "n_features",
                                      "ep_iterations", "ep_converged")}
                        | {"chosen_step": np.int64(chosen),
                           "path_converged": np.bool_(path.converged)})
