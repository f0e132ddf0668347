"""Approximate model averaging for prediction with q(w) = N(m, V) (Qi, Szummer & Minka 2005, eqs. (57)-(63)).

A test graph carries no label information about w, so q(w) is unchanged and only the label beliefs
are updated (Qi, Szummer & Minka 2005, sec. 7). Each potential table entry is replaced by its exact
expectation under q: with ``y = phi^T w ~ N(phi^T m, phi^T V phi)``,

* robust probit: ``E[eps + (1-2eps) Phi(y)] = eps + (1-2eps) Phi(phi^T m / sqrt(phi^T V phi + 1))``
  (Qi, Szummer & Minka 2005, eqs. (59)-(60), thesis eqs. (5.83)-(5.84));
* log-linear: ``E[exp(y)] = exp(phi^T m + phi^T V phi / 2)`` (lognormal mean).

Qi, Szummer & Minka 2005, eqs. (61)-(63) then run fully factorised EP over the labels with these averaged
tables, which is loopy belief propagation on them; here the averaged tables go to any inference engine
(``inference="bp"`` reproduces the paper's factorised updates, ``"auto"`` gives exact marginals
where the graph allows it).
"""

from __future__ import annotations

import numpy as np

from pymc_crf.feature_products import features_dot, row_quadratic_forms
from pymc_crf.inference.base import predictive_marginals
from pymc_crf.inference.select import get_engine
from pymc_crf.potentials import get_potential

__all__ = ["averaged_log_potentials", "averaged_node_marginals", "score_moments"]


def score_moments(mean: np.ndarray, cov: np.ndarray, K: int, node_features, edge_features):
    """Means and variances under q of every node score (N, K) and edge score (E, K, K).

    ``node_features`` (N, F) or None, ``edge_features`` (E, Fe) or None, in the flat weight layout
    of :mod:`.terms` (node weights ``(F, K)`` first, then edge weights ``(Fe, K, K)``).
    Cost O((N F^2 + E Fe^2) K^2) -- no d x d work beyond reading V's diagonal label blocks.
    """
    F = 0 if node_features is None else node_features.shape[1]
    out = []
    if node_features is not None:
        mn = mean[:F * K].reshape(F, K)
        Vn = cov[:F * K, :F * K].reshape(F, K, F, K)
        Vd = np.einsum("faga->afg", Vn)  # covariance of the weights of label a
        mu = features_dot(node_features, mn)
        var = np.stack([row_quadratic_forms(node_features, v) for v in Vd], axis=1)
        out.append((mu, var))
    else:
        out.append(None)
    if edge_features is not None:
        Fe = edge_features.shape[1]
        off = F * K
        me = mean[off:off + Fe * K * K].reshape(Fe, K * K)
        Ve = cov[off:, off:].reshape(Fe, K * K, Fe, K * K)
        Vd = np.einsum("fcgc->cfg", Ve)
        E = edge_features.shape[0]
        mu = features_dot(edge_features, me).reshape(E, K, K)
        var = np.stack([row_quadratic_forms(edge_features, v) for v in Vd],
                       axis=1).reshape(E, K, K)
        out.append((mu, var))
    else:
        out.append(None)
    return out


def averaged_log_potentials(mean, cov, K: int, n_nodes: int, node_features=None,
                            edge_features=None, potential: str = "probit", epsilon: float = 0.0):
    """Log of the q-averaged potential tables: node (N, K) (zeros without node potentials) and
    edge (E, K, K) (or (1, K, K) zeros without edge potentials)."""
    mean = np.asarray(mean, float)
    cov = np.asarray(cov, float)
    node_m, edge_m = score_moments(mean, cov, K, node_features, edge_features)
    pot = get_potential(potential)
    node = np.zeros((n_nodes, K)) if node_m is None else pot.log_expected(*node_m, epsilon)
    edge = np.zeros((1, K, K)) if edge_m is None else pot.log_expected(*edge_m, epsilon)
    return node, edge


def averaged_node_marginals(mean, cov, K: int, batch, node_features=None, edge_features=None,
                            potential: str = "probit", epsilon: float = 0.0,
                            inference: str = "auto") -> np.ndarray:
    """Node marginals (N, K) of the q-averaged CRF of ``batch`` (approximate model averaging,
    Qi, Szummer & Minka 2005, eqs. (57)-(63)) by the engine ``inference``. A zero ``cov`` gives
    the CRF at ``mean``."""
    node, edge = averaged_log_potentials(mean, cov, K, batch.n_total_nodes, node_features,
                                         edge_features, potential, epsilon)
    return predictive_marginals(get_engine(inference, batch), batch, node, edge)
