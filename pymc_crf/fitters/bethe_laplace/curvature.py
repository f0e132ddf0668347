"""Curvature of the log-likelihood in the flat weights: the feature covariance C and, for probit
potentials, the extra terms of the potential's second derivative.

With linear scores ``a = x w`` and log-potentials ``phi(a)`` the log-likelihood is
``sum_t s_t phi(a_t) - log Z(phi(a))`` (``s`` the observed statistics), so its negative Hessian is

    A_lik = J^T C J - sum_t (s_t - mu_t) phi''(a_t) (da_t/dw)(da_t/dw)^T,

where ``J = dphi/dw`` (``pushforward``), ``C`` the covariance of the sufficient statistics (the
Hessian of log Z in the tables; Welling & Parise 2006 eqs. (6), (12)) and ``mu`` the marginals.
For log-linear potentials ``phi'' = 0`` and ``A_lik = J^T C J``, the CRF Fisher matrix
``sum_n C_{x_n}`` of Welling & Parise 2006 eq. (12) in weight space. ``C`` comes from
``engine.covariance_vector_product``: exact for exact engines, linear response on the BP fixed
point for ``BeliefPropagation`` (Welling & Parise 2006 eqs. (8)-(10); Parise & Welling 2006 eq. (9)).
"""

from __future__ import annotations

import numpy as np

from pymc_crf.feature_products import features_dot, weighted_gram
from pymc_crf.fitters.bethe_laplace.hessian import exact_fisher_matrix
from pymc_crf.inference.base import Engine
from pymc_crf.inference.bethe import bethe_covariance_products
from pymc_crf.inference.bp import BeliefPropagation, BPState
from pymc_crf.inference.linear_response import linear_response_vector_product
from pymc_crf.potentials import get_potential

__all__ = ["fisher_matrix", "fisher_vector_product", "potential_curvature", "covariance_product"]


def covariance_product(lik, w: np.ndarray, engine: Engine, state: BPState | None = None):
    """``v -> C v`` in table space at ``w`` on ``engine`` (the BP fixed point computed once)."""
    node, edge = lik.log_potentials(w)
    batch = lik.batch
    if isinstance(engine, BeliefPropagation):
        st = state if state is not None else engine.run(batch, node, edge)

        def prod(vn, ve):
            return linear_response_vector_product(batch, node, edge, vn, ve, bp=engine, state=st)
    else:
        def prod(vn, ve):
            return engine.covariance_vector_product(batch, node, edge, vn, ve)
    return prod


def fisher_vector_product(lik, w: np.ndarray, engine: Engine, state: BPState | None = None):
    """``v -> J^T C J v`` at ``w`` without forming the (d, d) matrix (times ``n_samples`` for an
    MRF likelihood, as :func:`fisher_matrix`): the log-likelihood's negative Hessian for
    log-linear potentials, for matrix-free solves with many weights."""
    prod = covariance_product(lik, w, engine, state)
    scale = float(getattr(lik, "n_samples", 1))

    def fvp(v: np.ndarray) -> np.ndarray:
        vn, ve = lik.pushforward(w, v)
        cn, ce = prod(vn, ve)
        return scale * lik.pullback(w, cn, ce)

    return fvp


def _linear_response_columns(lik, w: np.ndarray, engine: BeliefPropagation,
                           state: BPState | None, directions: np.ndarray) -> np.ndarray:
    """``J^T C_LR J`` columns for all ``directions`` (d, d) with one sparse LU of the
    linearised BP message equations (:func:`~pymc_crf.inference.bethe.bethe_covariance_products`)."""
    node, edge = lik.log_potentials(w)
    pushed = [lik.pushforward(w, directions[j]) for j in range(directions.shape[0])]
    tangents = bethe_covariance_products(lik.batch, node, edge, pushed, engine, state=state)
    out = np.empty((w.size, len(pushed)))
    for j, (dbn, dbe) in enumerate(tangents):
        out[:, j] = lik.pullback(w, dbn, dbe)
    return out


def fisher_matrix(lik, w: np.ndarray, engine: Engine, state: BPState | None = None) -> np.ndarray:
    """Dense ``J^T C J`` (d, d) at ``w``. ``lik`` is a CRF likelihood (its batch holds every
    observed graph, so C is already summed over them, eq. (12)) or an MRF likelihood (one graph
    observed ``n_samples`` times: ``N C``, eq. (7)). An exact engine assembles it from blocks of
    directions (:func:`~pymc_crf.fitters.bethe_laplace.hessian.exact_fisher_matrix`: on chains
    one forward-backward pass and batched linear recursions); with BP the linear-response
    system is factorised once for all d directions; other engines take d covariance-vector
    products."""
    w = np.asarray(w, dtype=np.float64)
    d = w.size
    if getattr(engine, "exact", False) and not isinstance(engine, BeliefPropagation):
        return exact_fisher_matrix(lik, w, engine)
    eye = np.eye(d)
    if isinstance(engine, BeliefPropagation) and lik.batch.n_edges:
        F = _linear_response_columns(lik, w, engine, state, eye)
        F *= float(getattr(lik, "n_samples", 1))
    else:
        fvp = fisher_vector_product(lik, w, engine, state)
        F = np.empty((d, d))
        for j in range(d):
            F[:, j] = fvp(eye[j])
    return 0.5 * (F + F.T)


def _d2log(score, potential, epsilon):
    return get_potential(potential).d2log(score, epsilon)


def potential_curvature(lik, w: np.ndarray, node_marg: np.ndarray, edge_marg: np.ndarray
                        ) -> np.ndarray | None:
    """``sum_t (s_t - mu_t) phi''(a_t) (da_t/dw)(da_t/dw)^T`` (d, d) for a CRF likelihood with
    probit potentials (None for log-linear ones, where it vanishes).

    ``node_marg`` (N, K) and ``edge_marg`` ((E, K, K), or (1, K, K) summed for a shared table)
    are the marginals at ``w``; the fitter passes those of the MAP search's engine, whose
    residuals balance the prior at the MAP.
    """
    if getattr(lik, "potential", "loglinear") == "loglinear":
        return None
    spec = lik.spec
    parts = spec.unflatten(np.asarray(w, dtype=np.float64))
    obs_node, obs_edge = lik.observed_statistics()
    K = lik.K
    blocks = []
    if spec.node_weights is not None:
        a = features_dot(lik.X, parts[spec.node_weights.name])
        c = (obs_node - node_marg) * _d2log(a, lik.potential, lik.epsilon)  # (N, K)
        F = lik.X.shape[1]
        H = np.zeros((F, K, F, K))
        for k in range(K):
            H[:, k, :, k] = weighted_gram(lik.X, c[:, k])
        blocks.append(H.reshape(F * K, F * K))
    if spec.edge_weights is not None:
        Wt = parts[spec.edge_weights.name]
        if lik.Xe is None:  # one shared table: diagonal in its K*K entries
            c = (obs_edge - edge_marg).sum(axis=0) * _d2log(Wt, lik.potential,
                                                                      lik.epsilon)
            blocks.append(np.diag(c.ravel()))
        else:
            a = features_dot(lik.Xe, Wt)  # (E, K, K)
            c = (obs_edge - edge_marg) * _d2log(a, lik.potential, lik.epsilon)
            Fe = lik.Xe.shape[1]
            H = np.zeros((Fe, K * K, Fe, K * K))
            cf = c.reshape(c.shape[0], K * K)
            for j in range(K * K):
                H[:, j, :, j] = weighted_gram(lik.Xe, cf[:, j])
            blocks.append(H.reshape(Fe * K * K, Fe * K * K))
    d = sum(b.shape[0] for b in blocks)
    out = np.zeros((d, d))
    i = 0
    for b in blocks:
        out[i:i + b.shape[0], i:i + b.shape[0]] = b
        i += b.shape[0]
    return out
