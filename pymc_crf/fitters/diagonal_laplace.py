"""A diagonal Laplace approximation around the MAP, for CRFs with millions of weights.

The full Laplace approximation (``method="bethe_laplace"``, Welling & Parise 2006) needs the d x d
Hessian, out of reach for a text CRF with d ~ 10^6 weights. Its diagonal is cheap: the negative
Hessian of the log-likelihood of log-linear node weights ``W[f, k]`` is the covariance of their
feature counts, ``sum_ij x_if x_jf Cov(1[y_i = k], 1[y_j = k])``. Keeping only the ``i = j`` terms
gives ``sum_i x_if^2 mu_ik (1 - mu_ik)`` (the per-token Fisher information, one sparse product),
exact when positions are independent and an approximation along a chain; per-edge weights get the
same form from the edge marginals. The approximate posterior is then
``N(w_MAP, diag(1 / (1 / sigma^2 + fisher)))``, independently per weight. A shared (K, K)
transition table, whose K^2 weights are each pinned by the counts of all edges, is kept at its MAP
(standard deviation 0).

:func:`posterior_averaged_marginals` averages the exact node marginals of new data over draws of
that approximation (Monte Carlo model averaging, as ``pmc.predict(method="average")`` does with
stored draws), one draw at a time, so the (draws, F, K) array is never formed.
"""

from __future__ import annotations

import numpy as np

from pymc_crf.feature_products import as_feature_matrix, features_tdot
from pymc_crf.inference.select import get_engine
from pymc_crf.model.objective import CRFLogLikelihood, GaussianLogPrior
from pymc_crf.model.spec import CRFSpec, require_all_labels, require_gaussian_prior
from pymc_crf.potentials import log_potential_tables
from pymc_crf.validation import generator

__all__ = ["diagonal_laplace_sd", "posterior_averaged_marginals"]


def _squared(x):
    x = as_feature_matrix(x)
    return x.multiply(x).tocsr() if hasattr(x, "multiply") else x * x


def diagonal_laplace_sd(spec: CRFSpec, w_map: np.ndarray) -> np.ndarray:
    """Posterior standard deviations (flat weight order) of the diagonal Laplace approximation at
    ``w_map`` (module docstring); log-linear potentials and fixed Normal priors only."""
    require_gaussian_prior(spec, "diagonal Laplace")
    # missing labels would need the clamped marginals' covariance subtracted; refused instead
    require_all_labels(spec, "diagonal Laplace")
    if spec.potential != "loglinear":
        raise ValueError("the diagonal Laplace approximation takes log-linear potentials; got "
                         f"{spec.potential!r}")
    lik, prior = CRFLogLikelihood(spec), GaussianLogPrior(spec)
    node, edge = lik.log_potentials(w_map)
    m = lik.engine.marginals(spec.batch, node, edge)
    precision = 1.0 / prior.sd**2
    fisher = []
    if lik.X is not None:
        fisher.append(features_tdot(_squared(lik.X), m.node * (1.0 - m.node)).ravel())
    if spec.edge_weights is not None:
        if lik.Xe is None:
            fisher.append(np.full(spec.n_labels**2, np.inf))  # shared table: kept at its MAP
        else:
            fisher.append(features_tdot(_squared(lik.Xe), m.edge * (1.0 - m.edge)).ravel())
    return 1.0 / np.sqrt(precision + np.concatenate(fisher))


def posterior_averaged_marginals(spec: CRFSpec, mean: np.ndarray, sd: np.ndarray, data,
                                 draws: int = 30, random_seed: int | None = None) -> np.ndarray:
    """Node marginals (N, K) of ``data`` (a ``CRFData``) averaged over ``draws`` weight draws from
    ``N(mean, diag(sd^2))`` in the flat weight order of ``spec``."""
    rng = generator(random_seed, "random_seed")
    engine = get_engine("auto", data.graphs)
    nw, ew = spec.node_weights, spec.edge_weights
    total = np.zeros((data.graphs.n_total_nodes, spec.n_labels))
    for _ in range(int(draws)):
        parts = spec.unflatten(mean + sd * rng.standard_normal(mean.size))
        node, edge, _, _ = log_potential_tables(
            spec.potential, spec.epsilon, data.graphs.n_total_nodes, spec.n_labels,
            data.node_features, None if nw is None else parts[nw.name],
            None if spec.shared_edge_table else data.edge_features,
            None if ew is None else parts[ew.name])
        total += engine.marginals(data.graphs, node, edge).node
    return total / int(draws)
