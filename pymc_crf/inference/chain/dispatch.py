"""Which kernel runs a batch: numpy (``small``), graph by graph (``per_graph``), lane blocks
(``blocks``) in one thread or in parts on the worker threads (``parts``).

The tier is chosen by the batch's work (positions x K^2), so a small model never compiles the
lane-block kernels (docs/benchmarks.md, "Cold start"). The same choice serves tables given whole
and log-linear tables given as edge features and weights.
"""

from __future__ import annotations

import numpy as np
from numba import njit, objmode

from pymc_crf.allocation import empty_pages, zeros_pages
from pymc_crf.compile_notice import first_use_notice
from pymc_crf.inference.chain.blocks import _fb_blocked
from pymc_crf.inference.chain.features import (
    _OVERFLOW,
    _fb_feature_graphs,
    _forward_backward_features_graphs,
)
from pymc_crf.inference.chain.parts import _fb_blocked_parts, _parts_plan, _splits
from pymc_crf.inference.chain.per_graph import _fb_graphs, _forward_backward_graphs
from pymc_crf.inference.chain.scaling import _edge_tables
from pymc_crf.inference.chain.small import forward_backward_small, is_small


@njit(cache=True)
def _fb_outputs(node, edge, want_marginals):
    """Zeroed node and edge marginal outputs of forward-backward."""
    N, K = node.shape
    node_m = zeros_pages((N, K)) if want_marginals else np.zeros((0, K))
    if edge.shape[0] == 1 or not want_marginals:
        return node_m, np.zeros((1 if want_marginals else 0, K, K))
    # per-edge marginals: every entry is written (each edge lies on one chain), no zero-fill
    return node_m, empty_pages((edge.shape[0], K, K))


@njit(cache=True)
def _forward_backward(node, edge, node_off, edge_off, want_marginals, gw):
    """Scaled forward-backward over the batch. Returns log Z (G,), node (N, K) and edge marginals
    ((E, K, K), or (1, K, K) summed over edges for a shared table).

    With a non-empty ``gw`` (G,), the marginals of graph g are multiplied by ``gw[g]``: this is the
    vector-Jacobian product of log Z, which a shared edge table needs inside the sum over edges.
    """
    G = node_off.shape[0] - 1
    log_z = np.empty(G)
    node_m, edge_m = _fb_outputs(node, edge, want_marginals)
    psi, shift, erange = _edge_tables(edge[:1])  # per-edge tables: made block by block
    if G > 1:
        no_features = np.zeros((0, 0))
        _fb_blocked(node, edge, psi, shift, erange, node_off, edge_off, want_marginals, gw, log_z,
                    node_m, edge_m, no_features, no_features, no_features)
    else:
        _fb_graphs(node, edge, psi, shift, erange, node_off, edge_off, np.arange(G),
                   want_marginals, gw, log_z, node_m, edge_m)
    return log_z, node_m, edge_m


# Batches with less forward-backward work than this (positions x K^2) run graph by graph
# (``_forward_backward_graphs``): they never compile the lane-block kernels, whose compilation
# (about 45 s of CPU) is most of a machine's first fit of a small model (docs/benchmarks.md, "Cold
# start"), while on such batches the lanes save well under a millisecond a pass. The smallest
# batches run in numpy, compiling nothing (``chain_small``).
_LANE_WORK = 1 << 18


def small_batch(n_nodes: int, n_labels: int | None) -> bool:
    """Whether a batch of ``n_nodes`` positions and ``n_labels`` labels runs graph by graph
    (False when the number of labels is not known)."""
    return n_labels is not None and n_nodes * n_labels * n_labels < _LANE_WORK


@njit(cache=True)
def _feature_outputs(node, We, G, want_marginals):
    """Outputs of the feature kernels (log Z, node marginals, expected edge features), and the
    all-zero shared table with its ``_edge_tables`` that the lane kernel is given in place of
    tables (read only by the exactness test's "forbidden" check)."""
    K = node.shape[1]
    node_m = zeros_pages((node.shape[0], K)) if want_marginals else np.zeros((0, K))
    zero = np.zeros((1, K, K))
    psi, shift, erange = _edge_tables(zero)
    return np.empty(G), node_m, np.zeros((We.shape[0], K * K)), zero, psi, shift, erange


@njit(cache=True)
def _forward_backward_features(node, Xe, We, node_off, edge_off, want_marginals, gw):
    """``_forward_backward`` of log-linear edge tables ``Xe @ We`` (Xe (E, Fe), We (Fe, K^2)),
    never formed whole. Returns log Z (G,), the node marginals (N, K) and the expected edge
    features ``sum_e Xe[e, f] mu_e`` (Fe, K^2), the marginals of graph g times ``gw[g]`` when
    ``gw`` is non-empty: the vector-Jacobian product of log Z in the node tables and in ``We``."""
    G = node_off.shape[0] - 1
    K = node.shape[1]
    log_z, node_m, gW, zero, psi, shift, erange = _feature_outputs(node, We, G, want_marginals)
    if G > 1 and Xe.shape[0] > 0:
        _fb_blocked(node, zero, psi, shift, erange, node_off, edge_off, want_marginals, gw,
                    log_z, node_m, np.zeros((0, K, K)), Xe, We, gW)
    else:  # one graph, or no edges (single-node chains): one chain at a time
        _fb_feature_graphs(node, Xe, We, node_off, edge_off, want_marginals, gw, log_z, node_m,
                           gW)
    return log_z, node_m, gW


def forward_backward(node, edge, node_off, edge_off, want_marginals, gw):
    """``_forward_backward``, with a large batch's lane blocks run on the worker threads (a
    small batch graph by graph, the smallest in numpy)."""
    if is_small(node_off, node.shape[1]):
        return forward_backward_small(node, edge, node_off, edge_off, want_marginals, gw)
    if small_batch(node.shape[0], node.shape[1]):
        first_use_notice(_forward_backward_graphs, "the chain engine's kernels")
        return _forward_backward_graphs(node, edge, node_off, edge_off, want_marginals, gw)
    first_use_notice(_forward_backward, "the chain engine's lane kernels")
    plan = _parts_plan(node_off, node.shape[1], edge.shape[0] != 1)
    if plan is None:
        return _forward_backward(node, edge, node_off, edge_off, want_marginals, gw)
    log_z = np.empty(node_off.shape[0] - 1)
    node_m, edge_m = _fb_outputs(node, edge, want_marginals)
    psi, shift, erange = _edge_tables(edge[:1])
    nf = np.zeros((0, 0))
    _fb_blocked_parts(node, edge, psi, shift, erange, node_off, edge_off, want_marginals, gw,
                      log_z, node_m, edge_m, nf, nf, nf, plan)
    return log_z, node_m, edge_m


def forward_backward_features(node, Xe, We, node_off, edge_off, want_marginals, gw):
    """``_forward_backward_features``, with a large batch's lane blocks run on the worker
    threads (a small batch graph by graph)."""
    K = node.shape[1]
    if is_small(node_off, K):
        E = Xe.shape[0]
        edge = (Xe @ We).reshape(E, K, K) if E else np.zeros((0, K, K))
        if not np.isfinite(edge).all():  # as every kernel path refuses them (-inf included)
            raise ValueError(_OVERFLOW)
        log_z, node_m, edge_m = forward_backward_small(node, edge, node_off, edge_off,
                                                       want_marginals, gw)
        gW = (Xe.T @ edge_m.reshape(E, K * K) if want_marginals and E
              else np.zeros((We.shape[0], K * K)))
        return log_z, node_m, np.ascontiguousarray(gW)
    if small_batch(node.shape[0], K):
        first_use_notice(_forward_backward_features_graphs, "the chain engine's kernels")
        return _forward_backward_features_graphs(node, Xe, We, node_off, edge_off, want_marginals,
                                                 gw)
    first_use_notice(_forward_backward_features, "the chain engine's lane kernels")
    plan = _parts_plan(node_off, K, True) if Xe.shape[0] > 0 else None
    if plan is None:
        return _forward_backward_features(node, Xe, We, node_off, edge_off, want_marginals, gw)
    log_z, node_m, gW, zero, psi, shift, erange = _feature_outputs(
        node, We, node_off.shape[0] - 1, want_marginals)
    _fb_blocked_parts(node, zero, psi, shift, erange, node_off, edge_off, want_marginals, gw,
                      log_z, node_m, np.zeros((0, K, K)), Xe, We, gW, plan)
    return log_z, node_m, gW


# Compiled PyTensor functions call the kernels from numba: a batch that splits into parts goes
# to the Python drivers above through object mode (a hand-off of microseconds, against the
# milliseconds of such a batch), the others stay in compiled code.
@njit(cache=True)
def _fb_any(node, edge, node_off, edge_off, want_marginals, gw):
    """``forward_backward`` from compiled code."""
    if _splits(node_off, node.shape[1], edge.shape[0] != 1):
        with objmode(lz="float64[::1]", nm="float64[:, ::1]", em="float64[:, :, ::1]"):
            lz, nm, em = forward_backward(node, edge, node_off, edge_off, want_marginals, gw)
        return lz, nm, em
    return _forward_backward(node, edge, node_off, edge_off, want_marginals, gw)


@njit(cache=True)
def _fb_features_any(node, Xe, We, node_off, edge_off, want_marginals, gw):
    """``forward_backward_features`` from compiled code."""
    if Xe.shape[0] > 0 and _splits(node_off, node.shape[1], True):
        with objmode(lz="float64[::1]", nm="float64[:, ::1]", gW="float64[:, ::1]"):
            lz, nm, gW = forward_backward_features(node, Xe, We, node_off, edge_off,
                                                   want_marginals, gw)
        return lz, nm, gW
    return _forward_backward_features(node, Xe, We, node_off, edge_off, want_marginals, gw)
