"""Viterbi decoding and exact sampling of chains (forward filtering, backward sampling), both
in log space through the shared recursion ``log_forward`` (max-product and sum-product)."""

from __future__ import annotations

import numpy as np

from pymc_crf.inference.chain.log_space import _eidx
from pymc_crf.inference.kernels import MAX, SUM, log_forward, unused_arrays
from pymc_crf.kernel_cache import njit


@njit(cache=True)
def _viterbi(node, edge, node_off, edge_off):
    """MAP labels (N,) and their scores (G,) of every chain (``log_forward`` in the max-product
    semiring, then the back-pointers)."""
    N, K = node.shape
    G = node_off.shape[0] - 1
    shared = edge.shape[0] == 1
    labels = np.empty(N, np.int64)
    score = np.empty(G)
    L = 1
    for g in range(G):
        L = max(L, node_off[g + 1] - node_off[g])
    delta = np.empty((L, K))
    back = np.zeros((L, K), np.int64)
    _, no2, no3 = unused_arrays()
    for g in range(G):
        lo = node_off[g]
        n = node_off[g + 1] - lo
        for j in range(K):
            delta[0, j] = node[lo, j]
        log_forward(node, lo, n, edge, edge_off[g], shared, MAX, delta, back, no2, no3, no2)
        arg = np.argmax(delta[n - 1])
        score[g] = delta[n - 1, arg]
        labels[lo + n - 1] = arg
        for t in range(n - 1, 0, -1):
            arg = back[t, arg]
            labels[lo + t - 1] = arg
    return labels, score


@njit(cache=True)
def _log_forward_messages(node, edge, node_off, edge_off):
    """Log-space forward messages (N, K) for sampling (robust to any table range)."""
    N, K = node.shape
    shared = edge.shape[0] == 1
    la = np.empty((N, K))
    noi, no2, no3 = unused_arrays()
    for g in range(node_off.shape[0] - 1):
        lo = node_off[g]
        n = node_off[g + 1] - lo
        la_g = np.empty((n, K))
        for j in range(K):
            la_g[0, j] = node[lo, j]
        log_forward(node, lo, n, edge, edge_off[g], shared, SUM, la_g, noi, no2, no3,
                    no2)
        # element by element: a slice assignment compiles numba's shape-mismatch error path
        # (about 3 s on a machine's first use) for shapes that always match here
        for t in range(n):
            for j in range(K):
                la[lo + t, j] = la_g[t, j]
    return la


@njit(cache=True)
def _draw(logw, u):
    """Index drawn from unnormalised log-weights with one uniform number."""
    K = logw.shape[0]
    m = logw.max()
    total = 0.0
    for k in range(K):
        total += np.exp(logw[k] - m)
    target = u * total
    c = 0.0
    for k in range(K):
        c += np.exp(logw[k] - m)
        if target < c:
            return k
    for k in range(K - 1, -1, -1):  # u*total rounding past the end: last positive weight
        if logw[k] > -np.inf:
            return k
    return K - 1


@njit(cache=True)
def _ffbs(la, edge, node_off, edge_off, uniforms):
    """Forward-filtering backward-sampling: exact joint draws, one uniform per node per sample."""
    S, N = uniforms.shape
    K = la.shape[1]
    shared = edge.shape[0] == 1
    out = np.empty((S, N), np.int64)
    w = np.empty(K)
    for s in range(S):
        for g in range(node_off.shape[0] - 1):
            lo = node_off[g]
            n = node_off[g + 1] - lo
            elo = edge_off[g]
            cur = _draw(la[lo + n - 1], uniforms[s, lo + n - 1])
            out[s, lo + n - 1] = cur
            for t in range(n - 1, 0, -1):
                e = _eidx(elo + t - 1, shared)
                for i in range(K):
                    w[i] = la[lo + t - 1, i] + edge[e, i, cur]
                cur = _draw(w, uniforms[s, lo + t - 1])
                out[s, lo + t - 1] = cur
    return out
