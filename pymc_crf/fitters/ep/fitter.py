"""``method="ep"``: Bayesian CRF by flattened power EP / transformed EP (Qi, Szummer & Minka 2005, thesis
ch. 5).

Reads the CRF likelihood and its fixed diagonal Gaussian weight prior out of the PyMC model, runs
:func:`pymc_crf.fitters.ep.core.run_ep`, and returns the contract ``DataTree`` with draws from
q(w) = N(m, V) in the model's dims.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

import numpy as np
import pymc as pm

from pymc_crf.distributions.crf import CRFRV
from pymc_crf.feature_products import dense_features
from pymc_crf.fitters.ep.core import (
    DEFAULT_MAX_STEP,
    MAX_SKIPPED_SHARE,
    SKIP_NAMES,
    run_ep,
    variant_transform,
)
from pymc_crf.fitters.ep.terms import build_terms
from pymc_crf.fitters.registry import register
from pymc_crf.inference.base import ConvergenceWarning, warn_at_caller
from pymc_crf.model.results import build_result, draws_from_gaussian
from pymc_crf.model.spec import (
    CRFSpec,
    extract_crf,
    observes,
    refuse_free_scales,
    require_all_labels,
    require_gaussian_prior,
    require_sole_likelihood,
)
from pymc_crf.validation import flag, generator, real_number, whole_number

if TYPE_CHECKING:
    from pymc.util import RandomGenerator
    from xarray import DataTree

__all__ = ["DEFAULT_MAX_STEP", "MAX_EP_BYTES", "fit_ep", "ep_inputs", "ep_memory"]


def _check_unit_interval(name: str, value) -> float:
    v = real_number(value, name)
    if not (0.0 < v <= 1.0):
        raise ValueError(f"{name} must lie in (0, 1] (thesis eqs. (5.57)-(5.62)); got {value}")
    return v


def _spec_for_ep(model: pm.Model, method: str = "ep") -> CRFSpec:
    if not observes(model, CRFRV):
        kinds = [f"{rv.name} ({type(rv.owner.op).__name__.removesuffix('RV')})"
                 for rv in model.observed_RVs]
        raise ValueError(f"method={method!r} fits the weights of a pmc.CRF likelihood with a Gaussian "
                         f"prior; it does not handle HCRFs (hidden states) or other likelihoods "
                         f"(this model observes {kinds or 'nothing'}). Use method='nuts' or 'map'; "
                         "for HCRFs also 'bp_hcrf_vi', for MRFs 'bethe_laplace'.")
    # the CRF's own errors (labels out of range, several CRFs) are the ones to report
    spec = extract_crf(model)
    refuse_free_scales(spec, method)  # learned prior scales: laplace / bethe_laplace
    require_gaussian_prior(spec, method)
    require_all_labels(spec, method)
    require_sole_likelihood(spec, method)
    return spec


def _label_beliefs_locked(run, labels: np.ndarray, prior_var: np.ndarray) -> bool:
    """Whether EP stopped at the degenerate fixed point of TEP: every label belief on the observed
    label (> 0.999) and every weight's variance still that of the prior (> 0.99 of it)."""
    if run.state.logq.shape[0] != labels.size:  # nodes without factors have no belief
        return False
    q = np.exp(run.state.logq[np.arange(labels.size), labels])
    free = prior_var > 0
    return bool(q.min() > 0.999 and (np.diag(run.cov)[free] > 0.99 * prior_var[free]).all())


#: largest memory EP's arrays may take: the dense (d, d) covariance, held three times during a sweep
#: (q's, the sweep's starting copy and the Cholesky check), the factor arrays of :mod:`.terms`
#: (n_factors x K^2 x max(F, Fe) indices) and the densified features. A larger model is refused
#: before anything is allocated.
MAX_EP_BYTES = 4 * 2**30


def ep_memory(spec: CRFSpec) -> tuple[int, int]:
    """``(d, bytes)``: the number of weights of ``spec`` and the memory EP's arrays take for it
    (:data:`MAX_EP_BYTES`)."""
    K, N, E = spec.n_labels, spec.batch.n_total_nodes, spec.batch.n_edges
    F = spec.node_features.shape[1] if spec.node_weights is not None else 0
    Fe = 0
    if spec.edge_weights is not None:
        Fe = 1 if spec.shared_edge_table else spec.edge_features.shape[1]
    d = F * K + Fe * K * K
    n_fac = (N if F else 0) + (E if Fe else 0)
    return d, 8 * (3 * d * d + n_fac * (K * K + 1) * max(F, Fe, 1) + N * F + E * Fe)


def _check_ep_memory(spec: CRFSpec, method: str) -> None:
    # EP keeps a dense (d, d) covariance and densifies the features; each term update costs
    # O(d^2 n_c) (Qi, Szummer & Minka 2005, eqs. (55)-(56)). With sparse text features d is in the
    # tens of thousands: 10 CoNLL-2000 sentences give d = 18150 and 8.3 GiB of arrays, and even one
    # sentence (d = 3280) takes 36 s a sweep.
    d, need = ep_memory(spec)
    if need > MAX_EP_BYTES:
        raise ValueError(f"method={method!r} keeps a dense covariance of the {d} weights and dense "
                         f"per-factor feature rows: {need / 2**30:.1f} GiB for this model, above "
                         f"pymc_crf.fitters.ep.fitter.MAX_EP_BYTES ({MAX_EP_BYTES / 2**30:.0f} "
                         "GiB), and O(d^2) time per factor per sweep. EP is for models with few "
                         "features; use method='map', 'laplace' or 'randomized_map' for sparse "
                         "text features, or fewer features")




def ep_inputs(spec: CRFSpec, node_features=None, edge_features=None, n_edges: int | None = None):
    """Node and edge feature arrays in the flat weight layout of :mod:`.terms` for a spec.

    A shared (K, K) edge table becomes one constant edge feature. Features default to the spec's own
    (training) features; pass others (and ``n_edges``) for test graphs. Sparse features are
    densified here: EP's factor rows (:mod:`.terms`) and its (d, d) covariance are dense per
    feature, so EP is meant for models with few features.
    """
    xn = xe = None
    if spec.node_weights is not None:
        xn = dense_features(spec.node_features if node_features is None else node_features)
    if spec.edge_weights is not None:
        if spec.shared_edge_table:
            E = spec.batch.n_edges if n_edges is None else n_edges
            xe = np.ones((E, 1))
        else:
            xe = dense_features(spec.edge_features if edge_features is None else edge_features)
    return xn, xe


@register("ep")
def fit_ep(model: pm.Model, *, variant: str = "pep", transform: float | None = None,
           step_size: float = 0.5, damping: float | None = None, tol: float = 1e-4,
           max_iter: int = 2000, backoff: bool = True, min_step: float = 0.05,
           schedule: str | None = None, max_step: float | None = None,
           draws: int = 1000, chains: int = 1, random_seed: RandomGenerator = None,
           log_likelihood: bool = True, progressbar: bool = True) -> DataTree:
    """Gaussian posterior over CRF weights by flattened power EP or transformed EP.

    Parameters
    ----------
    model : pm.Model
        A model whose only free variables are the CRF weights, each with a ``pm.Normal`` prior of
        constant mean and sd, and one observed ``pmc.CRF`` (probit or log-linear potentials).
    variant : {"pep", "tep"}
        Power EP with n_k = -1 for the 1/Z terms (Qi, Szummer & Minka 2005, sec. 3), or transformed EP (m_k =
        0, thesis sec. 5.3.1).
    transform : float in [0, 1], optional
        m_k of transformed power EP (thesis eq. (5.16)); overrides ``variant`` (1 = PEP, 0 = TEP).
    step_size : float in (0, 1]
        lambda, damping of the weight sites (thesis eqs. (5.57)-(5.58)); the paper uses 0.8, which
        often diverges or oscillates with power EP on our data, so the default is 0.5.
    damping : float in (0, 1], optional
        xi, the step size of the inner label beliefs (thesis eq. (5.62)); default ``step_size``
        with the adaptive schedule, ``step_size / 2`` with the others.
    tol, max_iter
        Convergence when the max change of the mean and of the covariance in a sweep < ``tol``.
        With the adaptive schedule the README's models converged in 16-213 sweeps on 60 data
        sets (bench/bench_ep_convergence.py; the back-off schedule took up to 1424).
    schedule : {"adaptive", "backoff", "fixed"}, optional
        Step schedule (:func:`pymc_crf.fitters.ep.core.run_ep`). Default ``"adaptive"``: every
        factor has its own lambda for both of its sites, halved when a site's update reverses
        direction between sweeps and grown by 1.2 per sweep up to ``max_step`` (0.5) otherwise, and
        halved when an update would not be positive definite; each factor's label messages use
        xi = lambda; from sweep 10 on a
        factor whose numerator cavity is improper is skipped whole (docs/ep.md).
        ``"backoff"``: a global back-off (every lambda and xi halved when the sweep's
        change grows). ``"fixed"``: the thesis's fixed step.
    backoff, min_step, max_step
        ``backoff=False`` without ``schedule`` means ``"fixed"``; ``min_step`` is the floor of a
        backed-off lambda and ``max_step`` the ceiling of the adaptive one (default
        ``max(0.5, step_size, min_step)``, :data:`DEFAULT_MAX_STEP`).
    draws, chains, random_seed
        Draws from q(w) for the ``posterior`` group (PyMC's names).
    log_likelihood : bool
        Compute the per-graph log-likelihood of the draws.
    progressbar : bool
        Show a progress bar of the EP sweeps (PyMC's; ``False`` silences it).

    Returns
    -------
    xarray.DataTree
        ``posterior`` (draws of q), ``fit`` (``mean_vector``, ``covariance_matrix``),
        ``diagnostics`` (``change_mean`` / ``change_cov`` / ``skipped`` per sweep, ``iterations``,
        ``converged``, skip counts by kind, ``sweep_time``), ``log_likelihood`` per graph, attrs.
    """
    t0 = time.perf_counter()
    step_size = _check_unit_interval("step_size", step_size)
    min_step = _check_unit_interval("min_step", min_step)
    if max_step is None:
        max_step = max(DEFAULT_MAX_STEP, step_size, min_step)
    max_step = _check_unit_interval("max_step", max_step)
    if schedule is None:
        schedule = "adaptive" if flag(backoff, "backoff") else "fixed"
    elif not flag(backoff, "backoff") and schedule != "fixed":
        raise ValueError(f"backoff=False asks for the fixed schedule, schedule={schedule!r} for "
                         "another: give one of them")
    if min_step > max_step:
        raise ValueError(f"min_step ({min_step}) is the floor and max_step ({max_step}) the "
                         "ceiling of the step: min_step must be <= max_step")
    low, high = min_step, (max_step if schedule == "adaptive" else 1.0)
    if schedule in ("adaptive", "backoff") and not low <= step_size <= high:
        raise ValueError(f"step_size={step_size} is outside [{low}, {high}], the range the "
                         f"{schedule} schedule keeps the steps in (min_step"
                         f"{', max_step' if schedule == 'adaptive' else ''})")
    if damping is not None:
        damping = _check_unit_interval("damping", damping)
    m_k = variant_transform(variant, transform)
    if transform is not None:
        variant = "pep" if m_k == 1.0 else ("tep" if m_k == 0.0 else "tpep")
    draws, chains = whole_number(draws, "draws"), whole_number(chains, "chains")
    spec = _spec_for_ep(model)
    _check_ep_memory(spec, "ep")
    xn, xe = ep_inputs(spec)
    terms = build_terms(spec.batch, spec.n_labels, spec.labels, xn, xe,
                        use_node=xn is not None, use_edge=xe is not None)
    prior_mean = np.concatenate([w.prior_mean.ravel() for w in spec.weights])
    prior_var = np.concatenate([w.prior_sd.ravel() ** 2 for w in spec.weights])
    run = run_ep(terms, prior_mean, prior_var, potential=spec.potential, epsilon=spec.epsilon,
                 transform=m_k, step_size=step_size, damping=damping, tol=tol,
                 max_iter=max_iter, backoff=flag(backoff, "backoff"), min_step=min_step,
                 schedule=schedule, max_step=max_step, progressbar=progressbar)
    # A fixed point reached by skipping many terms has dropped that much of the data: the Gaussian
    # is then not an approximation of this posterior, and run_ep reports it unconverged.
    n_terms = run.n_terms
    last_skipped = int(run.skips[-1].sum()) if len(run.skips) else 0
    if n_terms and last_skipped > MAX_SKIPPED_SHARE * n_terms:
        warn_at_caller(f"EP did not converge: its last sweep (of {run.iterations}) skipped "
                       f"{last_skipped} of {n_terms} term updates (their cavity or update was not "
                       "positive definite), so the result ignores that much of the data (largest "
                       f"variance {np.diag(run.cov).max():.3g}, the prior's at most "
                       f"{prior_var.max():.3g}); try a smaller step_size, variant='tep' or a "
                       "smaller prior sd", ConvergenceWarning)
    elif not run.converged:
        warn_at_caller(f"EP did not converge in {run.iterations} sweeps (last change of the mean "
                       f"{run.change_mean[-1]:.3g}, tol {tol}); power EP can oscillate (thesis "
                       f"figs. 5-6, 5-7): try a smaller step_size (e.g. 0.3), variant='tep', or "
                       f"more max_iter", ConvergenceWarning)
    if m_k < 1.0 and _label_beliefs_locked(run, spec.labels, prior_var):
        warn_at_caller("transformed EP stopped where its label beliefs equal the observed labels at "
                       "every node, so the 1/Z sites cancel the data terms and q(w) is the prior "
                       "(a fixed point of TEP under wide priors, docs/ep.md); use variant='pep' or "
                       "a smaller prior sd", ConvergenceWarning)
    rng = generator(random_seed, "random_seed")
    flat = draws_from_gaussian(run.mean, run.cov, draws, chains, rng)
    posterior = spec.unflatten(flat)
    skips = run.skips
    diagnostics = {
        "change_mean": run.change_mean, "change_cov": run.change_cov,
        "skipped": skips.sum(1), "sweep_time": run.sweep_times, "step_size": run.step_sizes,
        "iterations": np.int64(run.iterations), "converged": np.bool_(run.converged),
        "not_pd_sweeps": np.int64(run.not_pd_sweeps),
        **{f"skipped_{n}": np.int64(skips[:, i].sum()) for i, n in enumerate(SKIP_NAMES)},
    }
    if damping is None:
        damping = step_size if schedule == "adaptive" else 0.5 * step_size
    settings = {"variant": variant, "transform": m_k, "step_size": step_size,
                "damping": damping, "tol": tol, "schedule": schedule, "max_step": float(max_step),
                "max_iter": int(max_iter), "backoff": bool(backoff), "min_step": float(min_step),
                "draws": draws, "chains": chains,
                "random_seed": random_seed, "potential": spec.potential, "epsilon": spec.epsilon,
                "n_labels": spec.n_labels}
    wall = time.perf_counter() - t0
    return build_result(model, posterior, "ep", settings, wall, mean_vector=run.mean,
                        covariance_matrix=run.cov, param_names=spec.param_names(),
                        diagnostics=diagnostics, log_likelihood=log_likelihood, spec=spec)
