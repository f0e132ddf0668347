"""The BP-HCRF data term in one compiled pass: every (class, sequence) pair is a homogeneous chain.

In the expected potentials of Luo, Sun & Zhao, eq. (14) (see :mod:`.likelihood`) the transition
table of pair ``(c, n)``, ``We[:, :, c] * E[z_n z_n^T]``, is the same at every edge of sequence
``n``. So each pair's table is exponentiated once (S^2 exps, not S^2 per edge), the node rows
are formed from ``U = X @ Wx`` as the chain is swept, and the edge marginals are summed over the
chain as they are formed: no (C * N, S) node or (C * E, S, S) edge tables are materialised, and
the gradient's weighting by ``[c = y_n] - p(c | n)`` and its sums per sequence happen in the same
pass, sequence by sequence (the C chains of a sequence first, then their weights).

Forward-backward with per-step scaling (Rabiner 1989, eqs. (91)-(92)): node rows and the table
are exponentiated after subtracting their maxima (by the chain engine's vectorisable
``_exp_nonpos``, which flushes arguments below -708 to 0), forward messages are renormalised at
every step. A step is accepted when every unnormalised message entry is at least ``S * 1e-291``
(all potentials here are finite): the exactness argument of
:mod:`pymc_crf.inference.chain.scaling` (above ``_threshold``, its threshold for tables with
flushed entries) then makes log Z and the marginals equal the log-space recursion to rounding.
A chain that fails the test is recomputed in log space. The node rows of a pair factor as
``exp(rho_k U[t, k]) exp(rho_k Wy[k, c])``, so the first factor is exponentiated once per
sequence for all C classes.
"""

from __future__ import annotations

import numpy as np

from pymc_crf.inference.chain.scaling import _exp_nonpos
from pymc_crf.inference.kernels import SUM, log_backward, log_forward, logsumexp_1d, unused_arrays
from pymc_crf.kernel_cache import njit

__all__ = ["pair_chain_terms"]

_THR = 1e-291


@njit(cache=True)
def _scaled_chain(EU, ey, M, T, S, want, E, alpha, cs, m_out, xi_out):
    """Scaled forward-backward of one chain whose exponentiated node rows are ``EU[t] * ey``
    (each factor exponentiated after subtracting its maximum, the maxima added by the caller)
    and whose table exponentiated after its maximum is ``M`` (S, S). Returns (log Z without the
    shifts, ok); with ``want`` the node marginals into ``m_out[:T]`` and the edge marginals
    summed over the chain into ``xi_out``. ``ok`` False: a step failed the exactness test
    (outputs unusable). ``E``, ``alpha`` (T, S) and ``cs`` (T,): scratch."""
    thr = S * _THR
    lz = 0.0
    for t in range(T):
        for k in range(S):
            E[t, k] = EU[t, k] * ey[k]
    for k in range(S):
        alpha[0, k] = E[0, k]
    s = 0.0
    for k in range(S):
        s += alpha[0, k]
    if not s >= thr:
        return 0.0, False
    cs[0] = s
    for k in range(S):
        alpha[0, k] /= s
    lz += np.log(s)
    prod = 1.0
    for t in range(1, T):
        for k in range(S):
            alpha[t, k] = 0.0
        for j in range(S):
            a = alpha[t - 1, j]
            for k in range(S):
                alpha[t, k] += a * M[j, k]
        s = 0.0
        for k in range(S):
            v = alpha[t, k] * E[t, k]
            if not v >= thr:
                return 0.0, False
            alpha[t, k] = v
            s += v
        cs[t] = s
        for k in range(S):
            alpha[t, k] /= s
        # log Z sums log s_t: the s_t multiplied up and their logarithm taken when the product
        # leaves [1e-200, 1e200] (one log per several steps instead of one per step)
        if s < 1e-100:
            lz += np.log(s)
        else:
            prod *= s
            if prod < 1e-200 or prod > 1e200:
                lz += np.log(prod)
                prod = 1.0
    lz += np.log(prod)
    if not want:
        return lz, True
    beta = np.ones(S)
    nb = np.empty(S)
    tmp = np.empty(S)
    for k in range(S):
        m_out[T - 1, k] = alpha[T - 1, k]
    for j in range(S):
        for k in range(S):
            xi_out[j, k] = 0.0
    for t in range(T - 2, -1, -1):
        inv = 1.0 / cs[t + 1]
        for k in range(S):
            tmp[k] = E[t + 1, k] * beta[k] * inv
        for j in range(S):
            acc = 0.0
            a = alpha[t, j]
            for k in range(S):
                p = M[j, k] * tmp[k]
                acc += p
                xi_out[j, k] += a * p
            nb[j] = acc
        for j in range(S):
            beta[j] = nb[j]
            m_out[t, j] = alpha[t, j] * nb[j]
    return lz, True


@njit(cache=True)
def _log_chain(node, trans, T, S, want, m_out, xi_out):
    """The log-space recursion of one chain (the fallback of :func:`_scaled_chain`): log Z with
    the table unshifted, and with ``want`` the node and summed edge marginals. The messages are
    the shared log-space recursion of :mod:`pymc_crf.inference.kernels`."""
    edge = trans.reshape((1, S, S))
    back, vn, ve = unused_arrays()
    la = np.empty((T, S))
    for k in range(S):
        la[0, k] = node[0, k]
    log_forward(node, 0, T, edge, 0, True, SUM, la, back, vn, ve, vn)
    lz = logsumexp_1d(la[T - 1])
    if not want:
        return lz
    lb = np.zeros((T, S))
    log_backward(node, 0, T, edge, 0, True, SUM, lb, vn, ve, vn)
    for t in range(T):
        for k in range(S):
            m_out[t, k] = np.exp(la[t, k] + lb[t, k] - lz)
    for j in range(S):
        for k in range(S):
            acc = 0.0
            for t in range(T - 1):
                acc += np.exp(la[t, j] + trans[j, k] + node[t + 1, k] + lb[t + 1, k] - lz)
            xi_out[j, k] = acc
    return lz


@njit(cache=True)
def pair_chain_terms(U, wy, we, rho, node_off, labels, want_grad, seqs):
    """log Z of every (class, sequence) pair and, with ``want_grad``, the pieces of the data
    term's gradient (see :func:`.likelihood.data_term`).

    Parameters: ``U = X @ Wx`` (N, S), ``Wy`` (S, C), ``We`` (S, S, C), ``rho`` (G, S), the
    sequences' node offsets (G + 1,), ``labels`` (G,) (read only with ``want_grad``), ``seqs``
    the sequences to compute (int64; every sequence when empty). Each sequence's numbers are
    computed on their own, so a subset gets exactly the values the whole batch gives it.

    Returns ``log_z`` (G, C; the rows of sequences not in ``seqs`` zero) and, with
    ``want_grad`` (else empty arrays): ``A`` (N, S), the node marginals summed over classes with
    weights ``w_nc = [c = y_n] - p(c | n)``; ``g_wy`` (S, C); ``g_we`` (S, S, C); ``g_rho``
    (G, S).
    """
    N, S = U.shape
    C = wy.shape[1]
    G = node_off.shape[0] - 1
    log_z = np.zeros((G, C))
    if want_grad:
        A = np.zeros((N, S))
        g_wy = np.zeros((S, C))
        g_we = np.zeros((S, S, C))
        g_rho = np.zeros((G, S))
    else:
        A = np.zeros((0, S))
        g_wy = np.zeros((0, C))
        g_we = np.zeros((0, S, C))
        g_rho = np.zeros((0, S))
    Tmax = 1
    for g in range(G):
        Tmax = max(Tmax, node_off[g + 1] - node_off[g])
    node = np.empty((Tmax, S))
    EU = np.empty((Tmax, S))
    ushift = np.empty(Tmax * S)
    ukbuf = np.empty(Tmax * S)
    E = np.empty((Tmax, S))
    ey = np.empty(S)
    alpha = np.empty((Tmax, S))
    cs = np.empty(Tmax)
    ezz = np.empty((S, S))
    trans = np.empty((S, S))
    M = np.empty((S, S))
    shifted = np.empty(S * S)
    kbuf = np.empty(S * S)
    m_c = np.empty((C, Tmax, S))
    xi_c = np.empty((C, S, S))
    w = np.empty(C)
    n_seqs = seqs.shape[0] if seqs.shape[0] > 0 else G
    for gi in range(n_seqs):
        g = seqs[gi] if seqs.shape[0] > 0 else gi
        lo = node_off[g]
        T = node_off[g + 1] - lo
        if T == 0:
            for c in range(C):
                log_z[g, c] = 0.0
            continue
        r = rho[g]
        for j in range(S):
            for k in range(S):
                ezz[j, k] = r[j] * r[k]
            ezz[j, j] = r[j]
        # node[t, k] = r_k U[t, k] + r_k Wy[k, c]: exp(r U) once per sequence, exp(r Wy[:, c])
        # per class, each after its maximum
        su = 0.0
        for t in range(T):
            mx = r[0] * U[lo + t, 0]
            for k in range(1, S):
                mx = max(mx, r[k] * U[lo + t, k])
            for k in range(S):
                ushift[t * S + k] = r[k] * U[lo + t, k] - mx
            su += mx
        _exp_nonpos(ushift, EU.reshape(-1), ukbuf, T * S)
        for c in range(C):
            my = r[0] * wy[0, c]
            for k in range(1, S):
                my = max(my, r[k] * wy[k, c])
            for k in range(S):
                shifted[k] = r[k] * wy[k, c] - my
            _exp_nonpos(shifted, ey, kbuf, S)
            mt = -np.inf
            for j in range(S):
                for k in range(S):
                    v = we[j, k, c] * ezz[j, k]
                    trans[j, k] = v
                    if v > mt:
                        mt = v
            for j in range(S):
                for k in range(S):
                    shifted[j * S + k] = trans[j, k] - mt
            _exp_nonpos(shifted, M.reshape(-1), kbuf, S * S)
            lz, ok = _scaled_chain(EU, ey, M, T, S, want_grad, E, alpha, cs, m_c[c], xi_c[c])
            if ok:
                log_z[g, c] = lz + su + T * my + (T - 1) * mt
            else:
                for t in range(T):
                    for k in range(S):
                        node[t, k] = r[k] * (U[lo + t, k] + wy[k, c])
                log_z[g, c] = _log_chain(node, trans, T, S, want_grad, m_c[c], xi_c[c])
        if not want_grad:
            continue
        # w_c = [c = y] - p(c | n)
        mx = log_z[g, 0]
        for c in range(1, C):
            mx = max(mx, log_z[g, c])
        tot = 0.0
        for c in range(C):
            tot += np.exp(log_z[g, c] - mx)
        for c in range(C):
            w[c] = -np.exp(log_z[g, c] - mx) / tot
        w[labels[g]] += 1.0
        for t in range(T):
            n = lo + t
            for k in range(S):
                a = 0.0
                nv = 0.0
                for c in range(C):
                    d = w[c] * m_c[c, t, k]
                    a += d
                    nv += d * wy[k, c]
                    g_wy[k, c] += d * r[k]
                A[n, k] = a
                g_rho[g, k] += a * U[n, k] + nv
        if T > 1:
            for i in range(S):
                for j in range(S):
                    b = 0.0
                    for c in range(C):
                        d = w[c] * xi_c[c, i, j]
                        g_we[i, j, c] += d * ezz[i, j]
                        b += d * we[i, j, c]
                    # d E[z_i z_j] / d rho_k: rho_j at k = i, rho_i at k = j (i != j); 1 at i = j
                    if i == j:
                        g_rho[g, i] += b
                    else:
                        g_rho[g, i] += b * r[j]
                        g_rho[g, j] += b * r[i]
    return log_z, A, g_wy, g_we, g_rho
