"""Log-linear edge tables given as edge features and weights, one chain at a time.

The table of edge e is ``sum_f Xe[e, f] We[f]``; the gradient in the weights is the expected edge
features ``sum_e Xe[e, f] mu_e``. Here a chain's tables are formed with one BLAS product and run
through the per-graph kernel; the lane blocks form them block by block instead
(``lanes._lane_feature_tables``). With finite features and weights a table entry is -inf or NaN
only by overflow, which every path refuses (``_check_finite_tables``).
"""

from __future__ import annotations

import numpy as np

from pymc_crf.allocation import empty_pages, zeros_pages
from pymc_crf.inference.chain.log_space import _fb_log_one
from pymc_crf.inference.chain.per_graph import _fb_graphs
from pymc_crf.inference.chain.scaling import _edge_tables
from pymc_crf.kernel_cache import njit

_OVERFLOW = ("log Z: the edge log-potentials Xe @ We are not finite (the product of the edge "
             "features and weights overflows)")


@njit(cache=True)
def _check_finite_tables(flat, rows, cols):
    """Raise unless the (rows, cols) block ``flat[:rows * cols]`` (edge log-potentials made from
    features) is all finite. One accumulator per column, so the column loop vectorises without
    fast-math flags, which this test must not have: under them LLVM folds ``v * 0`` to 0 and
    inf and NaN would pass. Every path of the feature kernels refuses -inf too: finite features
    and weights give -inf only by overflow, not as a forbidden transition."""
    acc = np.zeros(cols)
    for r in range(rows):
        for c in range(cols):
            acc[c] += flat[r * cols + c] * 0.0  # NaN for an inf or NaN entry
    for c in range(cols):
        if not acc[c] == 0.0:
            raise ValueError(_OVERFLOW)


@njit(cache=True)
def _fb_feature_one(node, Xe, We, lo, n, elo, want_marginals, w, node_m, gW):
    """Forward-backward of one chain whose edge tables come from edge features: its tables
    ``Xe[elo:elo+n-1] @ We`` (one BLAS product) are formed into an array of the chain's size,
    ``_fb_graphs`` runs on them (scaled; in log space when the exactness test fails) and the
    chain's expected edge features (times ``w``) are added to ``gW`` (a second product). Returns
    log Z. For the chains the lane kernel leaves to the caller: longer than its block buffers
    (so these tables are formed, one chain at a time), alone in the batch, or failing the test
    there."""
    K = node.shape[1]
    KK = K * K
    m = n - 1
    if m > 0 and Xe.shape[1] > 0:
        flat = empty_pages((m, KK))  # large for long chains: advised huge pages
        np.dot(np.ascontiguousarray(Xe[elo:elo + m]), We, flat)
        _check_finite_tables(flat.reshape(-1), m, KK)
        tab = flat.reshape(m, K, K)
    else:
        tab = np.zeros((max(m, 1), K, K))
    node_off = np.array([lo, lo + n])
    edge_off = np.array([0, m])
    # with one edge (or none) the (1, K, K) array reads as a shared table: that table is the
    # chain's own, so the summed edge marginals are that edge's
    psi, shift, erange = _edge_tables(tab[:1])
    lz = np.empty(1)
    em = zeros_pages((tab.shape[0], K, K))
    redo = np.zeros(1, np.bool_)
    if _fb_graphs(node, tab, psi, shift, erange, node_off, edge_off, np.zeros(1, np.int64),
                  want_marginals, np.full(1, w), lz, node_m, em, redo):
        _fb_log_one(node, tab, tab.shape[0] == 1, lo, 0, n, lz, node_m, em, want_marginals, w)
    if want_marginals and m > 0 and Xe.shape[1] > 0:
        gW += np.dot(np.ascontiguousarray(Xe[elo:elo + m].T), em[:m].reshape(m, KK))
    return lz[0]


@njit(cache=True)
def _feature_outputs(node, We, G, want_marginals):
    """Outputs of the feature kernels: log Z (G,), zeroed node marginals (N, K) and expected
    edge features (Fe, K^2)."""
    K = node.shape[1]
    node_m = zeros_pages((node.shape[0], K)) if want_marginals else np.zeros((0, K))
    return np.empty(G), node_m, np.zeros((We.shape[0], K * K))


@njit(cache=True, nogil=True)
def _fb_feature_graphs(node, Xe, We, node_off, edge_off, ids, want_marginals, gw, log_z, node_m,
                       gW):
    """``_fb_feature_one`` for the graphs ``ids``, into ``log_z``, ``node_m`` and ``gW``."""
    for g in ids:
        log_z[g] = _fb_feature_one(node, Xe, We, node_off[g], node_off[g + 1] - node_off[g],
                                   edge_off[g], want_marginals,
                                   gw[g] if gw.shape[0] > 0 else 1.0, node_m, gW)


@njit(cache=True, nogil=True)
def _forward_backward_features_graphs(node, Xe, We, node_off, edge_off, want_marginals, gw):
    """Forward-backward of log-linear edge tables ``Xe @ We`` (Xe (E, Fe), We (Fe, K^2)), one
    graph at a time (``_fb_feature_one``). Returns log Z (G,), the node marginals (N, K) and the
    expected edge features ``sum_e Xe[e, f] mu_e`` (Fe, K^2), the marginals of graph g times
    ``gw[g]`` when ``gw`` is non-empty: the vector-Jacobian product of log Z in the node tables
    and in ``We``."""
    G = node_off.shape[0] - 1
    log_z, node_m, gW = _feature_outputs(node, We, G, want_marginals)
    _fb_feature_graphs(node, Xe, We, node_off, edge_off, np.arange(G), want_marginals, gw, log_z,
                       node_m, gW)
    return log_z, node_m, gW
