"""The exact Fisher matrix of a chain CRF's node weights and shared edge table from the label
covariances of all pairs of positions, with the features entering through matrix products.

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
positions, ``(F, N) @ (N, (K - a) F)`` for the labels ``b >= a`` (the rest by symmetry):
``N (F K)^2`` flops in a few large matrix products, where ``d = F K`` Hessian-vector products
through forward-backward recursions need twice that in feature products plus ``d`` batched
recursions. The covariances with the transition counts of a shared edge table follow from the
same pair covariances by the Markov property (:func:`chain_transition_covariances`).
"""

from __future__ import annotations

import numpy as np

__all__ = ["add_node_block", "chain_pair_covariance", "chain_transition_covariances",
           "symmetric_node_block"]


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
    H : ndarray, shape (F, K, F, K)
        Accumulator, ``H[f, a, g, b]`` the entry ``((f, a), (g, b))`` of the curvature (a view
        of the (F K, F K) block of the Hessian).
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
        M = work[:rows.shape[0] * F * k].reshape(-1, F, k)
        # M[t, :, b] = sum_s C[a, b, t, s] x_s chain by chain, then sum_t x_t M_t in one product
        for (C, X), end, size in zip(groups, ends, sizes, strict=True):
            G, n = X.shape[:2]
            prod = np.matmul(C[:, a, a:].reshape(G, k * n, n), X).reshape(G, k, n, F)
            M[end - size:end].reshape(G, n, F, k)[...] = prod.transpose(0, 2, 3, 1)
        H[:, a, :, a:] += (rows.T @ M.reshape(-1, F * k)).reshape(F, F, k)


def symmetric_node_block(H: np.ndarray) -> None:
    """Fill the label pairs ``b < a`` of :func:`add_node_block`'s accumulator from their
    transposes and symmetrise its diagonal label blocks, in place."""
    K = H.shape[1]
    for a in range(K):
        H[:, a, :, a] = 0.5 * (H[:, a, :, a] + H[:, a, :, a].T)
        for b in range(a):
            H[:, a, :, b] = H[:, b, :, a].T


def chain_transition_covariances(C: np.ndarray, mu: np.ndarray, P: np.ndarray
                                 ) -> tuple[np.ndarray, np.ndarray]:
    """Covariances with the transition counts ``S_ij = sum_s 1[y_{s-1} = i, y_s = j]`` of G
    chains of equal length n, from their label covariances.

    With ``xi_s(i, j) = mu_{s-1}(i) P_s(i, j)`` and the backward conditionals
    ``B_s(i, j) = xi_s(i, j) / mu_s(j)``, the Markov property gives for a position t and an edge
    ``(s - 1, s)``

        Cov(1[y_t = a], 1[y_{s-1} = i, y_s = j]) = C_{t, s-1}(a, i) P_s(i, j)    (t <= s - 1)
                                                  = C_{t, s}(a, j) B_s(i, j)      (t >= s)

    (the mean products cancel against ``mu P = xi``), and for edges ``s < s'``

        Cov(1[e_s = ij], 1[e_s' = kl]) = B_s(i, j) C_{s, s'-1}(j, k) P_s'(k, l).

    Parameters
    ----------
    C : ndarray, shape (G, K, K, n, n)
        :func:`chain_pair_covariance` of the chains (unscaled).
    mu, P : ndarray
        Their node marginals (G, n, K) and forward conditionals (G, n - 1, K, K).

    Returns
    -------
    Q : ndarray, shape (G, n, K, K * K)
        ``Q[g, t, a, i K + j] = Cov(1[y_t = a], S_ij)``.
    D : ndarray, shape (K * K, K * K)
        ``Cov(S_ij, S_kl)`` summed over the chains.
    """
    G, K, _, n, _ = C.shape
    K2 = K * K
    if n < 2:
        return np.zeros((G, n, K, K2)), np.zeros((K2, K2))
    xi = mu[:, :-1, :, None] * P  # (G, n - 1, i, j), edge into position s at s - 1
    Bk = np.divide(xi, mu[:, 1:, None, :], out=np.zeros_like(xi), where=mu[:, 1:, None, :] > 0)
    t, u = np.arange(n)[:, None], np.arange(n - 1)[None, :]
    Cb = np.ascontiguousarray(C.transpose(0, 2, 1, 3, 4))  # (G, b, a, t, s): batched over b
    # forward part Q1[g, i, a, t, j]: sum over edges u + 1 with u >= t of C[a, i, t, u] P_{u+1}
    Q1 = np.matmul((Cb[..., :n - 1] * (u >= t)).reshape(G, K, K * n, n - 1),
                   P.transpose(0, 2, 1, 3)).reshape(G, K, K, n, K)
    # backward part Q2[g, j, a, t, i]: sum over edges u + 1 <= t of C[a, j, t, u + 1] B_{u+1}
    Q2 = np.matmul((Cb[..., 1:] * (u < t)).reshape(G, K, K * n, n - 1),
                   Bk.transpose(0, 3, 1, 2)).reshape(G, K, K, n, K)
    Q = np.add(Q1.transpose(0, 3, 2, 1, 4), Q2.transpose(0, 3, 2, 4, 1),
               out=np.empty((G, n, K, K, K)))
    flat = xi.reshape(-1, K2)
    D = np.diag(flat.sum(axis=0)) - flat.T @ flat  # same edge
    # edges s < s': sum_s B_s(i, j) Q1[s, j, k, l] (Q1 at t = s is the sum over s' > s),
    # batched over j
    left = Bk.transpose(3, 2, 0, 1).reshape(K, K, G * (n - 1))            # (j, i, gu)
    right = Q1[:, :, :, 1:].transpose(2, 0, 3, 1, 4).reshape(K, G * (n - 1), K2)  # (j, gu, kl)
    up = np.matmul(left, right).transpose(1, 0, 2).reshape(K2, K2)
    D += up
    D += up.T
    return Q.reshape(G, n, K, K2), D
