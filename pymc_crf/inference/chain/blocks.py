"""A batch through the lane-block kernel: graphs ordered by length, cut into blocks and parts.

``_block_plan`` fixes, from the batch alone, the blocks and their split into parts of about equal
work; ``_fb_block_range`` runs one part's blocks (in any thread) and ``_fb_after_blocks`` what
follows them. The chains too long for the block buffers, and lanes that fail the exactness test,
go to the per-graph kernels. ``_forward_backward_lanes`` and ``_forward_backward_features_lanes``
run a whole batch so in one thread: the lane tier of ``dispatch``.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from pymc_crf.allocation import empty_pages
from pymc_crf.inference.chain.features import (
    _fb_feature_one,
    _feature_outputs,
    _forward_backward_features_graphs,
)
from pymc_crf.inference.chain.lanes import _BLOCK_ELEMS, _TABLE_ELEMS, LANES, _fb_lane_block
from pymc_crf.inference.chain.log_space import _fb_log_one
from pymc_crf.inference.chain.per_graph import (
    _fb_graphs,
    _fb_outputs,
    _forward_backward_graphs,
)
from pymc_crf.inference.chain.scaling import _edge_tables


@njit(cache=True)
def _workspace_layout(sizes):
    """Where ``_workspace`` starts each buffer, and the length of the array it needs (room
    for moving the first buffer to a 4 KiB boundary included)."""
    starts = []
    pos = 0
    for k in range(len(sizes)):
        pos = ((pos + 511) // 512) * 512 + 80 * (k % 6)
        starts.append(pos)
        pos += sizes[k]
    return starts, pos + 512


@njit(cache=True)
def _workspace(sizes, buf):
    """Buffers of the given sizes carved from ``buf``, or from one new allocation when ``buf``
    is too small (empty), each starting at a different offset modulo 4 KiB (multiples of 640
    bytes). Separately allocated large buffers tend to be page-aligned alike, and a load at the
    same address modulo 4 KiB as an earlier store stalls ("4K aliasing"), which slowed the lane
    kernels in about half of all processes (docs/benchmarks.md, "Chain engine")."""
    starts, length = _workspace_layout(sizes)
    if buf.shape[0] < length:
        buf = empty_pages(length)
    base = ((4096 - buf.ctypes.data % 4096) % 4096) // 8  # the first buffer 4 KiB-aligned
    return [buf[base + starts[k]: base + starts[k] + sizes[k]] for k in range(len(sizes))]


@njit(cache=True)
def _block_sizes(K, B, Lbuf, shared):
    """The sizes of ``_fb_block_range``' buffers, and the length of one array that holds them all
    (``_workspace``)."""
    Lt = 0 if shared else Lbuf
    KKB = 0 if shared else K * K * B
    sizes = (Lbuf * K * B, Lbuf * K * B, Lbuf * K * B, Lbuf * K * B, Lbuf * B, K * B, K * B,
             Lt * KKB, Lt * B, KKB, KKB)
    return sizes, _workspace_layout(sizes)[1]


# Batches with at least this much lane-block work (positions x lanes x K^2, summed over blocks)
# are split into parts for the worker threads (``pymc_crf.threads``); below it a thread hand-off
# (tens of microseconds) would cost more than it saves.
_PARALLEL_WORK = 1 << 18
_MAX_PARTS = 8


@njit(cache=True)
def _block_plan(node_off, K, per_edge):
    """How ``_fb_blocked`` runs a batch: graphs in order of length (``order``), ``B`` lanes a
    block, the first ``n_blocked`` graphs in blocks (the rest are too long for the block
    buffers), ``Lbuf`` the longest blocked graph, and ``bounds``: the blocked graphs split into
    parts of whole blocks with about equal work (one part below ``_PARALLEL_WORK``). The split
    depends on the batch alone, not on the number of threads."""
    G = node_off.shape[0] - 1
    B = min(LANES, 8 * ((G + 7) // 8))
    lengths = node_off[1:] - node_off[:-1]
    order = np.argsort(lengths, kind="mergesort")
    cap = max(1, _BLOCK_ELEMS // (K * B))
    if per_edge:
        cap = max(1, min(cap, _TABLE_ELEMS // (K * K * B)))
    n_blocked = np.searchsorted(lengths[order], cap, side="right")
    Lbuf = 1
    if n_blocked > 0:
        Lbuf = lengths[order[n_blocked - 1]]
    n_blocks = (n_blocked + B - 1) // B
    work = np.zeros(n_blocks + 1)  # cumulative work: a block runs to its longest lane
    for k in range(n_blocks):
        work[k + 1] = work[k] + lengths[order[min((k + 1) * B, n_blocked) - 1]] * B * K * K
    n_parts = 1
    if work[n_blocks] >= _PARALLEL_WORK:
        n_parts = min(n_blocks, _MAX_PARTS)
    first = np.zeros(n_parts + 1, np.int64)  # each part's first block
    k = 0
    for p in range(1, n_parts):
        while k < n_blocks and work[k] < work[n_blocks] * p / n_parts:
            k += 1
        first[p] = min(max(k, first[p - 1] + 1), n_blocks - (n_parts - p))
    bounds = first * B
    bounds[n_parts] = n_blocked
    return order, lengths, B, n_blocked, Lbuf, bounds


@njit(cache=True, nogil=True)
def _fb_block_range(node, edge, psi, shift, erange, node_off, edge_off, want_marginals, gw, log_z,
                    node_m, edge_m, Xe, We, gW, macc, order, lengths, B, Lbuf, first, stop, buf):
    """The blocks of ``B`` graphs ``order[first:stop]`` (``first`` a multiple of ``B``) of
    ``_fb_blocked``, each through ``_fb_lane_block``; lanes that fail the exactness test are redone
    by the per-graph kernels. A shared table's summed edge marginals go to ``macc`` (and a
    redone lane's to ``edge_m[0]``), expected edge features to ``gW``: a part run on its own
    thread gets its own ``macc``, ``gW`` and, for a shared table, ``edge_m``. The buffers are
    carved from ``buf`` (``_block_sizes``), or allocated here when it is empty."""
    K = node.shape[1]
    feat = Xe.shape[0] > 0
    shared = edge.shape[0] == 1 and not feat
    ws = _workspace(_block_sizes(K, B, Lbuf, shared)[0], buf)
    phi, alpha, xb, kb, inv, beta, tmp, P, lshift, xs, ks = ws
    lane_lo = np.zeros(B, np.int64)
    lane_elo = np.zeros(B, np.int64)
    lane_n = np.zeros(B, np.int64)
    lane_w = np.ones(B)
    lane_g = np.zeros(B, np.int64)
    lz = np.empty(B)
    bad = np.zeros(B, np.bool_)
    lz1 = np.empty(1)
    for start in range(first, stop, B):
        for b in range(B):
            if start + b < stop:
                g = order[start + b]
                lane_g[b] = g
                lane_lo[b] = node_off[g]
                lane_elo[b] = edge_off[g]
                lane_n[b] = lengths[g]
                lane_w[b] = gw[g] if gw.shape[0] > 0 else 1.0
            else:
                lane_n[b] = 0
        _fb_lane_block(node, edge, shared, psi, shift, erange, lane_lo, lane_elo, lane_n, lane_w,
                       want_marginals, phi, alpha, inv, xb, kb, beta, tmp, P, lshift, xs, ks, macc,
                       node_m, edge_m, lz, bad, Xe, We, gW)
        for b in range(B):
            if lane_n[b] == 0:
                continue
            g = lane_g[b]
            if bad[b] and feat:
                log_z[g] = _fb_feature_one(node, Xe, We, lane_lo[b], lane_n[b], lane_elo[b],
                                           want_marginals, lane_w[b], node_m, gW)
            elif bad[b]:
                _fb_log_one(node, edge, shared, lane_lo[b], lane_elo[b], lane_n[b], lz1, node_m,
                            edge_m, want_marginals, lane_w[b])
                log_z[g] = lz1[0]
            else:
                log_z[g] = lz[b]


@njit(cache=True, nogil=True)
def _fb_after_blocks(node, edge, psi, shift, erange, node_off, edge_off, want_marginals, gw, log_z,
                     node_m, edge_m, Xe, We, gW, macc, order, lengths, n_blocked):
    """What ``_fb_blocked`` does after the blocks: a shared table's summed edge marginals
    ``psi * macc`` into ``edge_m[0]``, and the graphs too long for the blocks."""
    K = node.shape[1]
    feat = Xe.shape[0] > 0
    shared = edge.shape[0] == 1 and not feat
    G = node_off.shape[0] - 1
    if shared and want_marginals:
        for i in range(K):
            for j in range(K):
                edge_m[0, i, j] += psi[0, i, j] * macc[i, j]
    if n_blocked < G and feat:
        for g in order[n_blocked:]:
            log_z[g] = _fb_feature_one(node, Xe, We, node_off[g], lengths[g], edge_off[g],
                                       want_marginals, gw[g] if gw.shape[0] > 0 else 1.0,
                                       node_m, gW)
    elif n_blocked < G:
        _fb_graphs(node, edge, psi, shift, erange, node_off, edge_off, order[n_blocked:],
                   want_marginals, gw, log_z, node_m, edge_m)


@njit(cache=True)
def _fb_blocked(node, edge, node_off, edge_off, want_marginals, gw, log_z, node_m, edge_m, Xe, We,
                gW):
    """Forward-backward of a batch, up to LANES graphs at a time (graphs in order of length; any
    too long for the block buffers, or failing the exactness test, go through the per-graph
    kernels), in this thread, into the outputs. With edge features (``Xe`` non-empty; see
    ``_fb_lane_block``) ``edge`` is a (1, K, K) table of zeros and the expected edge features go
    to ``gW`` instead of edge marginals to ``edge_m``."""
    K = node.shape[1]
    psi, shift, erange = _edge_tables(edge[:1])  # per-edge tables: made block by block
    per_edge = Xe.shape[0] > 0 or edge.shape[0] != 1
    order, lengths, B, n_blocked, Lbuf, _ = _block_plan(node_off, K, per_edge)
    macc = np.zeros((K, K))
    # np.int64(0), not 0: a literal argument makes numba compile the kernel once more, for
    # Literal[int](0), beside the int64 version the threaded parts call.
    _fb_block_range(node, edge, psi, shift, erange, node_off, edge_off, want_marginals, gw, log_z,
                    node_m, edge_m, Xe, We, gW, macc, order, lengths, B, Lbuf, np.int64(0),
                    n_blocked, np.empty(0))
    _fb_after_blocks(node, edge, psi, shift, erange, node_off, edge_off, want_marginals, gw, log_z,
                     node_m, edge_m, Xe, We, gW, macc, order, lengths, n_blocked)


@njit(cache=True, nogil=True)
def _forward_backward_lanes(node, edge, node_off, edge_off, want_marginals, gw):
    """``_forward_backward_graphs`` with the graphs in lane blocks (``_fb_blocked``); a batch of
    one graph runs by itself."""
    G = node_off.shape[0] - 1
    if G < 2:
        return _forward_backward_graphs(node, edge, node_off, edge_off, want_marginals, gw)
    log_z = np.empty(G)
    node_m, edge_m = _fb_outputs(node, edge, want_marginals)
    nf = np.zeros((0, 0))
    _fb_blocked(node, edge, node_off, edge_off, want_marginals, gw, log_z, node_m, edge_m, nf, nf,
                nf)
    return log_z, node_m, edge_m


@njit(cache=True, nogil=True)
def _forward_backward_features_lanes(node, Xe, We, node_off, edge_off, want_marginals, gw):
    """``_forward_backward_features_graphs`` with the graphs in lane blocks, which form the
    tables ``Xe @ We`` block by block (never whole); one graph, or a batch without edges
    (single-node chains), runs one chain at a time."""
    G = node_off.shape[0] - 1
    if G < 2 or Xe.shape[0] == 0:
        return _forward_backward_features_graphs(node, Xe, We, node_off, edge_off,
                                                 want_marginals, gw)
    K = node.shape[1]
    log_z, node_m, gW = _feature_outputs(node, We, G, want_marginals)
    _fb_blocked(node, np.zeros((1, K, K)), node_off, edge_off, want_marginals, gw, log_z, node_m,
                np.zeros((0, K, K)), Xe, We, gW)
    return log_z, node_m, gW
