"""Low-rank Gaussian updates for EP on CRF weights (one implementation of each update).

Every EP term touches q(w) = N(m, V) only through a few projections ``y = A_k^T w`` with
``A_k`` of shape (d, n_c) (n_c = K^2 label pairs for an edge term, K for a node term, 1 for a
numerator term), so each update is a rank-n_c change of the precision,

    V_new^{-1} = V^{-1} + A B A^T,        V_new^{-1} m_new = V^{-1} m + A b,

done in O(d^2 n_c) by the Woodbury identity, never an O(d^3) inverse (Qi, Szummer & Minka 2005, eqs.
(31)-(32), (55)-(56); thesis eqs. (5.59)-(5.60), (5.64)-(5.67), (5.73)-(5.74)). ``A_k`` is stored sparsely:
column ``c`` has the entries ``feat[l]`` at rows ``idx[c, l]`` (a feature vector placed in the
weight block of label configuration ``c``, Qi, Szummer & Minka 2005, eq. (29)).

Positive definiteness: with ``S = A^T V A`` the new precision is positive definite iff
``C = I + S^{1/2} B S^{1/2}`` is (Sylvester's determinant identity plus congruence), so each update
checks the eigenvalues of that small (n_c, n_c) matrix and reports failure instead of producing a
non-positive-definite covariance.
"""

from __future__ import annotations

import numpy as np

from pymc_crf.kernel_cache import njit

__all__ = ["project", "sqrt_psd", "low_rank_y", "low_rank_update", "site_from_moments", "PD_TOL"]

#: smallest eigenvalue of ``C = I + S^{1/2} B S^{1/2}`` accepted as positive definite
PD_TOL = 1e-9


@njit(cache=True)
def project(V, m, feat, idx, n_c, L):
    """``P = V A`` (d, n_c), ``S = A^T V A`` (n_c, n_c) and ``my = A^T m`` (n_c,) for a sparse A."""
    d = V.shape[0]
    P = np.zeros((d, n_c))
    my = np.zeros(n_c)
    for c in range(n_c):
        for l in range(L):
            j = idx[c, l]
            x = feat[l]
            if x != 0.0:
                for r in range(d):  # not P[:, c] += ...: see inference.kernels.copy_into
                    P[r, c] += x * V[r, j]
                my[c] += x * m[j]
    S = np.zeros((n_c, n_c))
    for c in range(n_c):
        for l in range(L):
            x = feat[l]
            if x != 0.0:
                row = idx[c, l]
                for r in range(n_c):
                    S[r, c] += x * P[row, r]
    S = 0.5 * (S + S.T)
    return P, S, my


@njit(cache=True)
def sqrt_psd(S):
    """Symmetric square root of a positive semi-definite matrix (negative round-off clipped)."""
    lam, U = np.linalg.eigh(S)
    lam = np.maximum(lam, 0.0)
    return (U * np.sqrt(lam)) @ U.T


@njit(cache=True)
def _pd_after(S, B):
    """Whether ``I + S^{1/2} B S^{1/2}`` is finite and positive definite (beyond ``PD_TOL``): the
    precision ``S^{-1} + B`` of a y-space update is then positive definite."""
    R = sqrt_psd(S)
    C = np.eye(S.shape[0]) + R @ B @ R
    C = 0.5 * (C + C.T)
    lam = np.linalg.eigvalsh(C)
    return bool(lam[0] > PD_TOL) and bool(np.all(np.isfinite(lam)))


@njit(cache=True)
def _solve_eye_plus(B, S, R):
    """``(I + B S)^{-1} R`` for small square matrices, by Gaussian elimination with partial
    pivoting (the algorithm of LAPACK's ``gesv``) written as loops: numba's ``np.linalg.solve``
    takes about 8 s to compile on first use, this about 1 s, and the matrices are n_c x n_c."""
    n = S.shape[0]
    LU = np.eye(n) + B @ S
    X = R.copy()
    m = X.shape[1]
    for k in range(n):
        p = k
        best = abs(LU[k, k])
        for i in range(k + 1, n):
            if abs(LU[i, k]) > best:
                best = abs(LU[i, k])
                p = i
        if p != k:
            for j in range(n):
                LU[k, j], LU[p, j] = LU[p, j], LU[k, j]
            for j in range(m):
                X[k, j], X[p, j] = X[p, j], X[k, j]
        for i in range(k + 1, n):
            f = LU[i, k] / LU[k, k]
            LU[i, k] = f
            for j in range(k + 1, n):
                LU[i, j] -= f * LU[k, j]
            for j in range(m):
                X[i, j] -= f * X[k, j]
    for k in range(n - 1, -1, -1):
        for j in range(m):
            acc = X[k, j]
            for i in range(k + 1, n):
                acc -= LU[k, i] * X[i, j]
            X[k, j] = acc / LU[k, k]
    return X


@njit(cache=True)
def low_rank_y(S, my, B, b):
    """The y-space view of the update ``V^{-1} += A B A^T, V^{-1} m += A b``.

    Returns ``(ok, S_new, my_new, K)`` where ``S_new = A^T V_new A``, ``my_new = A^T m_new`` and
    ``K = (I + B S)^{-1} B`` is the small matrix of the Woodbury form
    ``V_new = V - (V A) K (V A)^T``. ``ok`` is False when the new precision would not be positive
    definite (then the other outputs are meaningless).
    """
    if not _pd_after(S, B):
        return False, S, my, B
    K = _solve_eye_plus(B, S, B)
    K = 0.5 * (K + K.T)
    S_new = S - S @ K @ S
    S_new = 0.5 * (S_new + S_new.T)
    # A^T m_new = my + S_new (b - B my)   (thesis eq. (5.67) with the sign of B folded in)
    my_new = my + S_new @ (b - B @ my)
    return True, S_new, my_new, K


@njit(cache=True)
def low_rank_update(m, V, P, S, my, K, b):
    """Apply ``V^{-1} += A B A^T, V^{-1} m += A b`` in place, given ``K = (I + B S)^{-1} B``.

    ``V_new = V - P K P^T`` and ``m_new = m + P [(I - K S) b - K my]`` with ``P = V A``:
    O(d^2 n_c) (Qi, Szummer & Minka 2005, eqs. (55)-(56) in Woodbury form, valid also when B is singular).
    """
    n = S.shape[0]
    coef = (np.eye(n) - K @ S) @ b - K @ my
    m += P @ coef
    PK = P @ K
    V -= PK @ P.T


@njit(cache=True)
def site_from_moments(S_cav, my_cav, g, M):
    """Natural parameters ``(h, mu)`` of the Gaussian site ``proj[tilted] / cavity`` in y-space.

    The tilted distribution has mean ``my_cav + S_cav g`` and covariance ``S_cav + S_cav M S_cav``
    (see :mod:`.moments`); the site is ``exp(-y^T h y / 2 + mu^T y)`` with
    ``h = (D^{-1} - S_cav)^{-1} = -(I + M S_cav)^{-1} M`` (Qi, Szummer & Minka 2005, eq. (52), thesis eq.
    (5.54), with ``D = -M``, written without ``D^{-1}`` so a singular D is fine) and ``mu = g + h * tilted
    mean`` (Qi, Szummer & Minka 2005, eq. (53), thesis eq. (5.56)). Returns ``(ok, h, mu)``; ``ok`` is False
    if the
    tilted covariance is not positive definite (round-off) or anything is not finite.
    """
    if not _pd_after(S_cav, M):
        return False, M, g
    h = -_solve_eye_plus(M, S_cav, M)
    h = 0.5 * (h + h.T)
    y_tilted = my_cav + S_cav @ g
    mu = g + h @ y_tilted
    ok = np.all(np.isfinite(h)) and np.all(np.isfinite(mu))
    return ok, h, mu
