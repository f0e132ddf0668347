"""Log-space forward-backward of one chain, and its tangent.

The scaled kernels recompute here, in log space, any chain whose messages fail their exactness
test (``scaling``); the tangent recursion gives the chain engine's exact covariance-vector
products (Hessian-vector products of log Z). Both run the shared recursions ``log_forward`` /
``log_backward`` of :mod:`pymc_crf.inference.kernels` in the sum-product and tangent semirings.
"""

from __future__ import annotations

import numpy as np

from pymc_crf.allocation import zeros_pages
from pymc_crf.inference.kernels import (
    SUM,
    TANGENT,
    log_backward,
    log_forward,
    logsumexp_1d,
    unused_arrays,
)
from pymc_crf.kernel_cache import njit


@njit(cache=True, inline="always")
def _eidx(e, shared):
    return 0 if shared else e


@njit(cache=True)
def _log_messages(node, edge, shared, lo, elo, n):
    """Log-space forward and backward messages (n, K) of one chain (``log_forward`` /
    ``log_backward`` in the sum-product semiring)."""
    K = node.shape[1]
    noi, no2, no3 = unused_arrays()
    la = np.empty((n, K))
    lb = np.zeros((n, K))
    for j in range(K):
        la[0, j] = node[lo, j]
    log_forward(node, lo, n, edge, elo, shared, SUM, la, noi, no2, no3, no2)
    log_backward(node, lo, n, edge, elo, shared, SUM, lb, no2, no3, no2)
    return la, lb


@njit(cache=True)
def _fb_log_one(node, edge, shared, lo, elo, n, log_z, node_m, edge_m, want_marginals, w):
    """Log-space forward-backward for one chain (fallback path); writes into the outputs."""
    K = node.shape[1]
    la, lb = _log_messages(node, edge, shared, lo, elo, n)
    lz = logsumexp_1d(la[n - 1])
    log_z[0] = lz
    if not want_marginals:
        return
    for t in range(n):
        for j in range(K):
            node_m[lo + t, j] = w * np.exp(la[t, j] + lb[t, j] - lz) if lz > -np.inf else np.nan
    for t in range(1, n):
        e = elo + t - 1
        et = _eidx(e, shared)
        for i in range(K):
            for j in range(K):
                v = w * np.exp(la[t - 1, i] + edge[et, i, j] + node[lo + t, j] + lb[t, j] - lz)
                if shared:
                    edge_m[0, i, j] += v
                else:
                    edge_m[e, i, j] = v


@njit(cache=True, nogil=True)
def _fb_log_graphs(node, edge, shared, node_off, edge_off, ids, want_marginals, gw, log_z, node_m,
                   edge_m):
    """``_fb_log_one`` for the graphs ``ids`` (a shared table's edge marginals added to
    ``edge_m[0]``), into ``log_z``, ``node_m`` and ``edge_m``."""
    lz1 = np.empty(1)
    for g in ids:
        _fb_log_one(node, edge, shared, node_off[g], edge_off[g], node_off[g + 1] - node_off[g],
                    lz1, node_m, edge_m, want_marginals, gw[g] if gw.shape[0] > 0 else 1.0)
        log_z[g] = lz1[0]


@njit(cache=True)
def _covariance_vector_product(node, edge, node_off, edge_off, vn, ve):
    """Directional derivative of the marginals along (vn, ve): exact Hessian-vector product of
    log Z.

    Forward-mode differentiation of the log-space recursions (``log_forward`` / ``log_backward``
    in the tangent semiring): with A_t = log alpha_t and B_t = log beta_t,
    dA_t(j) = vn_t(j) + sum_i w_ij (dA_{t-1}(i) + ve(i,j)) where w_ij is the backward-looking
    posterior p(t_{t-1}=i | t_t=j, past); likewise for dB. Then dmu_t = mu_t (dA_t + dB_t - dlogZ)
    and dxi = xi (dA + ve + vn + dB - dlogZ).
    """
    N, K = node.shape
    shared = edge.shape[0] == 1
    out_n = zeros_pages((N, K))
    out_e = zeros_pages((1 if shared else edge.shape[0], K, K))
    noi = unused_arrays()[0]
    for g in range(node_off.shape[0] - 1):
        lo = node_off[g]
        n = node_off[g + 1] - lo
        elo = edge_off[g]
        la = np.empty((n, K))
        lb = np.zeros((n, K))
        da = np.zeros((n, K))
        db = np.zeros((n, K))
        for j in range(K):
            la[0, j] = node[lo, j]
            da[0, j] = vn[lo, j]
        log_forward(node, lo, n, edge, elo, shared, TANGENT, la, noi, vn, ve, da)
        log_backward(node, lo, n, edge, elo, shared, TANGENT, lb, vn, ve, db)
        lz = logsumexp_1d(la[n - 1])
        dlz = 0.0
        for j in range(K):
            dlz += np.exp(la[n - 1, j] - lz) * da[n - 1, j]
        for t in range(n):
            for j in range(K):
                mu = np.exp(la[t, j] + lb[t, j] - lz)
                out_n[lo + t, j] = mu * (da[t, j] + db[t, j] - dlz)
        for t in range(1, n):
            e = elo + t - 1
            et = _eidx(e, shared)
            eo = 0 if shared else e
            for i in range(K):
                for j in range(K):
                    xi = np.exp(la[t - 1, i] + edge[et, i, j] + node[lo + t, j] + lb[t, j] - lz)
                    out_e[eo, i, j] += xi * (da[t - 1, i] + ve[et, i, j] + vn[lo + t, j]
                                             + db[t, j] - dlz)
    return out_n, out_e
