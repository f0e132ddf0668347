"""Scaled forward-backward one chain at a time: the per-graph tier of the chain engine.

Batches with less work than ``dispatch._LANE_WORK`` run here alone, so they never compile the
lane-block kernels (``lanes``); the lane tier runs here the chains too long for its blocks.
"""

from __future__ import annotations

import numpy as np

from pymc_crf.allocation import empty_pages, zeros_pages
from pymc_crf.compile_notice import first_use_notice
from pymc_crf.inference.chain.log_space import _fb_log_graphs
from pymc_crf.inference.chain.scaling import (
    _FAST,
    _MIN_SCALE,
    _edge_tables,
    _exp_nonpos,
    _impossible,
    _tables_into,
    _threshold,
)
from pymc_crf.kernel_cache import njit


@njit(cache=True, fastmath=_FAST)
def _forward_one(node, edge, lo, n, elo, psi, shift, erange, shared, phi, alpha, inv, xb, kb):
    """Scaled forward pass of one chain (Rabiner 1989, eqs. (91)-(92)); ``psi, shift, erange``
    hold the chain's own tables (``psi[t - 1]``) or the shared one.

    Fills ``phi`` (n*K, exp of each node row minus its maximum), ``alpha`` (n*K, normalised
    forward messages) and ``inv`` (n, reciprocal scales). Returns log Z, or NaN when a step
    fails the exactness test above (the caller then recomputes the graph in log space).
    """
    K = node.shape[1]
    m = n * K
    acc = 0.0
    for t in range(n):
        c = -np.inf
        for j in range(K):
            c = max(c, node[lo + t, j])
        if c == -np.inf:
            return np.nan
        acc += c
        for j in range(K):
            xb[t * K + j] = node[lo + t, j] - c
    _exp_nonpos(xb, phi, kb, m)
    # log Z = sum of row maxima + edge shifts + log of the product of the scales; the product is
    # flushed into the log only when it leaves [1e-200, 1e200], so about one log per chain.
    prod = 1.0
    for t in range(n):
        s = 0.0
        small = np.inf
        et = 0
        if t == 0:
            for j in range(K):
                alpha[j] = phi[j]
                s += phi[j]
                small = min(small, phi[j])
            thr = _threshold(K, 0.0)
        else:
            et = 0 if shared else t - 1
            acc += shift[et]
            thr = _threshold(K, erange[et])
            b0 = t * K
            for j in range(K):
                alpha[b0 + j] = 0.0
            for i in range(K):
                a = alpha[b0 - K + i]
                for j in range(K):
                    alpha[b0 + j] += a * psi[et, i, j]
            for j in range(K):
                v = alpha[b0 + j] * phi[b0 + j]
                alpha[b0 + j] = v
                s += v
                small = min(small, v)
        if small < thr:
            e = 0 if shared else elo + t - 1
            for j in range(K):
                v = alpha[t * K + j]
                if v < thr and not (v == 0.0 and _impossible(node, lo + t, edge, e, alpha,
                                                             (t - 1) * K, np.int64(1), t, j)):
                    return np.nan
        if not (s >= _MIN_SCALE):
            return np.nan
        r = 1.0 / s
        inv[t] = r
        for j in range(K):
            alpha[t * K + j] *= r
        if s < 1e-100:
            acc += np.log(s)
        else:
            prod *= s
            if prod < 1e-200 or prod > 1e200:
                acc += np.log(prod)
                prod = 1.0
    return acc + np.log(prod)


@njit(cache=True, fastmath=_FAST)
def _backward_one(lo, n, elo, psi, shared, wg, phi, alpha, inv, beta, bp, macc, node_m, edge_m):
    """Scaled backward pass of one chain: node marginals alpha*beta and edge marginals
    alpha_{t-1}(i) psi(i,j) phi_t(j) beta_t(j) / s_t, all times ``wg``. With a shared table the
    products alpha_{t-1}(i) (phi beta / s)_t(j) are summed into ``macc`` and multiplied by psi once
    at the end (psi does not depend on t). Impossible states (alpha = 0) carry beta = 0."""
    K = psi.shape[1]
    for j in range(K):
        beta[j] = 1.0
        node_m[lo + n - 1, j] = wg * alpha[(n - 1) * K + j]
    for t in range(n - 1, 0, -1):
        e = elo + t - 1
        et = 0 if shared else t - 1
        r = inv[t]
        for j in range(K):
            bp[j] = phi[t * K + j] * beta[j] * r if alpha[t * K + j] > 0.0 else 0.0
        for i in range(K):
            b = 0.0
            for j in range(K):
                b += psi[et, i, j] * bp[j]
            beta[i] = b
        a0 = (t - 1) * K
        if shared:
            for i in range(K):
                a = alpha[a0 + i] * wg
                for j in range(K):
                    macc[i, j] += a * bp[j]
        else:
            for i in range(K):
                a = alpha[a0 + i] * wg
                for j in range(K):
                    edge_m[e, i, j] = a * psi[et, i, j] * bp[j]
        for i in range(K):
            node_m[lo + t - 1, i] = wg * alpha[a0 + i] * beta[i]


@njit(cache=True)
def _fb_graphs(node, edge, psi, shift, erange, node_off, edge_off, ids, want_marginals, gw, log_z,
               node_m, edge_m, redo):
    """Scaled forward-backward of the graphs ``ids``, one at a time, written into ``log_z``,
    ``node_m`` and ``edge_m`` (a shared table's summed edge marginals are added to ``edge_m[0]``).
    A shared table's ``psi, shift, erange`` come from ``_edge_tables``; per-edge tables are
    exponentiated graph by graph into small buffers (the arguments are then not read), so no
    temporary of the size of all the tables is made. A graph that fails the exactness test is
    marked in ``redo`` (its outputs are not written) for the caller to redo in log space
    (``log_space._fb_log_graphs``): the log-space kernels are then compiled only when a batch
    needs them. Returns the number of graphs marked."""
    K = node.shape[1]
    shared = edge.shape[0] == 1
    L = 1
    for g in ids:
        L = max(L, node_off[g + 1] - node_off[g])
    phi = np.empty(L * K)
    alpha = np.empty(L * K)
    xb = np.empty(L * K)
    kb = np.empty(L * K)
    inv = np.empty(L)
    beta = np.empty(K)
    bp = np.empty(K)
    macc = np.zeros((K, K))
    n_redo = 0
    Lt = 1 if shared else L
    psi_g = psi if shared else np.empty((Lt, K, K))
    shift_g = shift if shared else np.empty(Lt)
    erange_g = erange if shared else np.empty(Lt)
    xt = np.empty(Lt * K * K)
    kt = np.empty(Lt * K * K)
    for g in ids:
        lo = node_off[g]
        n = node_off[g + 1] - lo
        elo = edge_off[g]
        wg = gw[g] if gw.shape[0] > 0 else 1.0
        if not shared:
            _tables_into(edge, elo, n - 1, psi_g, shift_g, erange_g, xt, kt)
        lz = _forward_one(node, edge, lo, n, elo, psi_g, shift_g, erange_g, shared, phi, alpha,
                          inv, xb, kb)
        if np.isnan(lz):
            redo[g] = True
            n_redo += 1
            continue
        log_z[g] = lz
        if want_marginals:
            _backward_one(lo, n, elo, psi_g, shared, wg, phi, alpha, inv, beta, bp, macc, node_m,
                          edge_m)
    if shared and want_marginals:
        for i in range(K):
            for j in range(K):
                edge_m[0, i, j] += psi[0, i, j] * macc[i, j]
    return n_redo


@njit(cache=True)
def _fb_outputs(node, edge, want_marginals):
    """Zeroed node and edge marginal outputs of forward-backward."""
    N, K = node.shape
    node_m = zeros_pages((N, K)) if want_marginals else np.zeros((0, K))
    if edge.shape[0] == 1 or not want_marginals:
        return node_m, np.zeros((1 if want_marginals else 0, K, K))
    # per-edge marginals: every entry is written (each edge lies on one chain), no zero-fill
    return node_m, empty_pages((edge.shape[0], K, K))


@njit(cache=True, nogil=True)
def _fb_scaled_graphs(node, edge, node_off, edge_off, want_marginals, gw):
    """``_fb_graphs`` of the whole batch into new outputs: log Z, node and edge marginals, the
    mask of the graphs left to redo in log space, and their number."""
    G = node_off.shape[0] - 1
    log_z = np.empty(G)
    node_m, edge_m = _fb_outputs(node, edge, want_marginals)
    psi, shift, erange = _edge_tables(edge[:1])
    redo = np.zeros(G, np.bool_)
    n_redo = _fb_graphs(node, edge, psi, shift, erange, node_off, edge_off, np.arange(G),
                        want_marginals, gw, log_z, node_m, edge_m, redo)
    return log_z, node_m, edge_m, redo, n_redo


def _forward_backward_graphs(node, edge, node_off, edge_off, want_marginals, gw):
    """Scaled forward-backward over the batch, one graph at a time (``_fb_graphs``; a graph that
    fails the exactness test in log space). Returns log Z (G,), node (N, K) and edge marginals
    ((E, K, K), or (1, K, K) summed over edges for a shared table).

    With a non-empty ``gw`` (G,), the marginals of graph g are multiplied by ``gw[g]``: this is the
    vector-Jacobian product of log Z, which a shared edge table needs inside the sum over edges.
    """
    first_use_notice(_fb_scaled_graphs, "the chain engine's kernels")
    log_z, node_m, edge_m, redo, n_redo = _fb_scaled_graphs(node, edge, node_off, edge_off,
                                                            want_marginals, gw)
    if n_redo:
        _fb_log_graphs(node, edge, edge.shape[0] == 1, node_off, edge_off, np.flatnonzero(redo),
                       want_marginals, gw, log_z, node_m, edge_m)
    return log_z, node_m, edge_m
