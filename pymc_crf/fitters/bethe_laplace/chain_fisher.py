"""The node-weight block of a chain CRF's exact Fisher matrix from the label covariances of
all pairs of positions, with the features entering through matrix products.

For node scores ``a_t = x_t W`` (weights ``W`` (F, K)) and log-potentials ``phi(a)`` the
log-likelihood's curvature in ``W`` is the covariance of the node statistics pulled back
through the features (Welling & Parise 2006 eq. (12) in weight space):

    H[(f, a), (g, b)] = sum_graphs sum_{t, s} x_tf c_ta Cov(1[y_t = a], 1[y_s = b]) c_sb x_sg,

``c = phi'(a)`` (1 for log-linear potentials). On a chain the posterior is a Markov chain with
forward conditionals ``P_t(i, j) = p(y_t = j | y_{t-1} = i) = xi_t(i, j) / mu_{t-1}(i)``, so for
``s = t + L`` the pairwise marginal is ``mu_t(a) R_ts(a, b)`` with ``R_ts = P_{t+1} ... P_s``
(the transfer products of forward-backward, Rabiner 1989), and

    Cov(1[y_t = a], 1[y_s = b]) = mu_t(a) (R_ts(a, b) - mu_s(b))

(``R_tt = I`` gives the same-position term ``mu_t(a) (delta_ab - mu_t(b))``). A chain of
``n`` positions has ``n^2`` such (K, K) blocks, built lag by lag in ``n`` batched products for
all chains of that length at once. The sum over ``s`` is then a batched product with the
chain's feature rows, and the sum over ``t`` one BLAS product per label ``a`` over all
positions: ``(F, N) @ (N, K F)``. Against ``d = F K`` Hessian-vector products through
forward-backward recursions this does the same ``2 N (F K)^2`` flops of the feature products
but as a few large matrix products, and the covariance itself in ``sum_g n_g^2 K^3``.
"""

from __future__ import annotations

import numpy as np

__all__ = ["chain_pair_covariance", "add_node_block"]


def chain_pair_covariance(mu: np.ndarray, P: np.ndarray) -> np.ndarray:
    """Label covariances of all position pairs of G chains of equal length n.

    Parameters
    ----------
    mu : ndarray, shape (G, n, K)
        Node marginals.
    P : ndarray, shape (G, n - 1, K, K)
        Forward conditionals: ``P[g, t - 1, i, j] = p(y_t = j | y_{t-1} = i)``.

    Returns
    -------
    ndarray, shape (G, K, K, n, n)
        ``C[g, a, b, t, s] = Cov(1[y_t = a], 1[y_s = b])`` in chain ``g`` (laid out so that the
        labels ``b >= a`` of a label ``a`` are one ((K - a) n, n) matrix per chain for the
        product with the features).
    """
    G, n, K = mu.shape
    if P.shape != (G, max(n - 1, 0), K, K):
        raise ValueError(f"forward conditionals must have shape {(G, max(n - 1, 0), K, K)}; "
                         f"got {P.shape}")
    C = np.empty((G, K, K, n, n))
    R = np.broadcast_to(np.eye(K), (G, n, K, K))
    for L in range(n):
        if L:  # R_{i, i+L} = R_{i, i+L-1} P_{i+L} for every start i
            R = np.matmul(R[:, :n - L], P[:, L - 1:])
        c = mu[:, :n - L, :, None] * (R - mu[:, L:, None, :])  # (G, n - L, a, b)
        i = np.arange(n - L)
        C[:, :, :, i, i + L] = c.transpose(0, 2, 3, 1)
        if L:
            C[:, :, :, i + L, i] = c.transpose(0, 3, 2, 1)
    return C


def add_node_block(H: np.ndarray, groups: list[tuple[np.ndarray, np.ndarray]],
                   scale: list[np.ndarray] | None = None) -> None:
    """Add the node-weight curvature of groups of chains into the label pairs ``b >= a`` of
    ``H`` (the others are its transposes: :func:`symmetric_node_block`).

    Parameters
    ----------
    H : ndarray, shape (F, K, K, F)
        Accumulator, ``H[f, a, b, g]`` the entry ``((f, a), (g, b))`` of the curvature.
    groups : list of (C, X)
        Per group of G chains of one length n: ``C`` (G, K, K, n, n) from
        :func:`chain_pair_covariance` (scaled in place when ``scale`` is given) and the chains'
        dense feature rows ``X`` (G, n, F).
    scale : list of ndarray (G, n, K), optional
        Per group, the potential derivatives ``phi'(a_t)`` (None for log-linear potentials).
    """
    F, K = H.shape[0], H.shape[1]
    if scale is not None:
        for (C, _), sc in zip(groups, scale, strict=True):
            s = sc.transpose(0, 2, 1)  # (G, a, t)
            C *= s[:, :, None, :, None]
            C *= s[:, None, :, None, :]
    sizes = [X.shape[0] * X.shape[1] for _, X in groups]
    ends = np.cumsum(sizes)
    rows = np.concatenate([X.reshape(-1, F) for _, X in groups])  # (positions, F)
    work = np.empty(rows.shape[0] * K * F)
    for a in range(K):
        k = K - a
        M = work[:rows.shape[0] * k * F].reshape(-1, k, F)
        # M[t, b, :] = sum_s C[a, b, t, s] x_s chain by chain, then sum_t x_t M_t in one product
        for (C, X), end, size in zip(groups, ends, sizes, strict=True):
            G, n = X.shape[:2]
            prod = np.matmul(C[:, a, a:].reshape(G, k * n, n), X).reshape(G, k, n, F)
            M[end - size:end].reshape(G, n, k, F)[...] = prod.transpose(0, 2, 1, 3)
        H[:, a, a:] += (rows.T @ M.reshape(-1, k * F)).reshape(F, k, F)


def symmetric_node_block(H: np.ndarray) -> None:
    """Fill the label pairs ``b < a`` of :func:`add_node_block`'s accumulator from their
    transposes and symmetrise its diagonal label blocks, in place."""
    K = H.shape[1]
    for a in range(K):
        H[:, a, a] = 0.5 * (H[:, a, a] + H[:, a, a].T)
        for b in range(a):
            H[:, a, b] = H[:, b, a].T
