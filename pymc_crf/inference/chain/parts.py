"""A batch in lane blocks, in parts (``blocks._block_plan``) on one or more worker threads: the
lane tier of ``dispatch``.

Each part sums its shared-table and edge-feature terms apart and the parts' sums are added in
part order, so the numbers do not depend on the number of threads. The default is one thread
(why, and when more pay: ``pymc_crf.threads``). The driver is Python: it calls the lane kernel
(``blocks._fb_block_range``) once a part, and the per-graph kernels only for the graphs that need
them, so each is compiled on its own and only when used.
"""

from __future__ import annotations

import threading

import numpy as np

from pymc_crf.compile_notice import first_use_notice
from pymc_crf.inference.chain.blocks import _block_plan, _block_sizes, _fb_block_range
from pymc_crf.inference.chain.features import (
    _fb_feature_graphs,
    _feature_outputs,
    _forward_backward_features_graphs,
)
from pymc_crf.inference.chain.log_space import _fb_log_graphs
from pymc_crf.inference.chain.per_graph import _fb_graphs, _fb_outputs, _forward_backward_graphs
from pymc_crf.inference.chain.scaling import _edge_tables
from pymc_crf.threads import get_num_threads, run_parts

# Lane buffers of finished threaded calls, kept for the next: a fresh few-MB buffer is faulted
# in page by page on every call, and two threads faulting at once contend for the process's
# page-table lock (the per-edge objective of bench/bench_chain_paths.py took longer in two
# threads than in one that way). Each call takes its own buffers from here (concurrent callers
# never share one) and puts them back; at most _KEPT_BUFFERS are kept (each at most about 12 MB:
# the block caps bound it).
_kept_buffers: list[np.ndarray] = []
_kept_lock = threading.Lock()
_KEPT_BUFFERS = 4


def _take_buffers(n: int, length: int) -> list[np.ndarray]:
    with _kept_lock:
        taken = [_kept_buffers.pop() for _ in range(min(n, len(_kept_buffers)))]
    bufs = [b for b in taken if b.shape[0] >= length]
    return bufs + [np.empty(length) for _ in range(n - len(bufs))]


def _keep_buffers(bufs: list[np.ndarray]) -> None:
    with _kept_lock:
        _kept_buffers.extend(bufs)
        del _kept_buffers[:-_KEPT_BUFFERS]


def _fb_lane_parts(node, edge, node_off, edge_off, want_marginals, gw, log_z, node_m, edge_m, Xe,
                   We, gW, plan):
    """Forward-backward of a batch in lane blocks, into the outputs: the blocks in the parts of
    ``plan`` (``_block_plan``) on the worker threads (``pymc_crf.threads``; one part, or one
    thread, runs in the calling thread), then graph by graph the chains too long for the blocks
    and those whose lane failed the exactness test. With edge features (``Xe`` non-empty; see
    ``lanes._fb_lane_block``) ``edge`` is a (1, K, K) table of zeros and the expected edge
    features go to ``gW`` instead of edge marginals to ``edge_m``.

    Each part adds its shared-table and edge-feature sums into arrays of its own, added up here
    in part order, so the numbers do not depend on the number of threads. Each worker's lane
    buffers come from the ones kept from earlier calls (``_take_buffers``). The per-graph
    kernels are called only for graphs that need them, so a batch whose chains all fit the
    blocks and pass the test never compiles them."""
    order, lengths, B, n_blocked, Lbuf, bounds = plan
    K = node.shape[1]
    feat = Xe.shape[0] > 0
    shared = edge.shape[0] == 1 and not feat
    psi, shift, erange = _edge_tables(edge[:1])
    redo = np.zeros(node_off.shape[0] - 1, np.bool_)
    if n_blocked > 0:
        first_use_notice(_fb_block_range, "the chain engine's lane kernels")
        n_parts = len(bounds) - 1
        workers = min(get_num_threads(), n_parts)
        bufs = _take_buffers(workers, _block_sizes(K, B, Lbuf, shared)[1])
        maccs = np.zeros((n_parts, K, K))
        gWs = np.zeros((n_parts, *gW.shape))

        def part(p, w):
            _fb_block_range(node, edge, psi, shift, erange, node_off, edge_off, want_marginals,
                            gw, log_z, node_m, edge_m, Xe, We, gWs[p], maccs[p], order, lengths, B,
                            Lbuf, bounds[p], bounds[p + 1], bufs[w], redo)

        try:
            run_parts(part, n_parts, workers)
        finally:
            _keep_buffers(bufs)
        macc = maccs[0]
        for p in range(1, n_parts):
            macc += maccs[p]
        for p in range(n_parts):
            gW += gWs[p]
        if shared and want_marginals:
            # the lanes summed alpha_{t-1}(i) (phi beta / s)_t(j) over t and lanes; psi is
            # constant, so it multiplies once here
            edge_m[0] += psi[0] * macc
    blocked = order[:n_blocked]
    failed = blocked[redo[blocked]]
    long = order[n_blocked:]
    if feat:
        ids = np.concatenate([failed, long])
        if ids.shape[0]:
            _fb_feature_graphs(node, Xe, We, node_off, edge_off, ids, want_marginals, gw, log_z,
                               node_m, gW)
        return
    if failed.shape[0]:  # the scaled recursion failed its test: in log space at once
        _fb_log_graphs(node, edge, shared, node_off, edge_off, failed, want_marginals, gw, log_z,
                       node_m, edge_m)
    if long.shape[0] and _fb_graphs(node, edge, psi, shift, erange, node_off, edge_off, long,
                                    want_marginals, gw, log_z, node_m, edge_m, redo):
        _fb_log_graphs(node, edge, shared, node_off, edge_off, long[redo[long]], want_marginals,
                       gw, log_z, node_m, edge_m)


def _forward_backward_lanes(node, edge, node_off, edge_off, want_marginals, gw):
    """``_forward_backward_graphs`` with the graphs in lane blocks (``_fb_lane_parts``); a batch
    of one graph runs by itself."""
    G = node_off.shape[0] - 1
    if G < 2:
        return _forward_backward_graphs(node, edge, node_off, edge_off, want_marginals, gw)
    log_z = np.empty(G)
    node_m, edge_m = _fb_outputs(node, edge, want_marginals)
    nf = np.zeros((0, 0))
    _fb_lane_parts(node, edge, node_off, edge_off, want_marginals, gw, log_z, node_m, edge_m,
                   nf, nf, nf, _block_plan(node_off, node.shape[1], edge.shape[0] != 1))
    return log_z, node_m, edge_m


def _forward_backward_features_lanes(node, Xe, We, node_off, edge_off, want_marginals, gw):
    """``_forward_backward_features_graphs`` with the graphs in lane blocks, which form the
    tables ``Xe @ We`` block by block (never whole); one graph, or a batch without edges
    (single-node chains), runs one chain at a time."""
    G = node_off.shape[0] - 1
    if G < 2 or Xe.shape[0] == 0:
        first_use_notice(_forward_backward_features_graphs, "the chain engine's kernels")
        return _forward_backward_features_graphs(node, Xe, We, node_off, edge_off,
                                                 want_marginals, gw)
    K = node.shape[1]
    log_z, node_m, gW = _feature_outputs(node, We, G, want_marginals)
    _fb_lane_parts(node, np.zeros((1, K, K)), node_off, edge_off, want_marginals, gw, log_z,
                   node_m, np.zeros((0, K, K)), Xe, We, gW, _block_plan(node_off, K, True))
    return log_z, node_m, gW


def _splits(node_off, K, per_edge):
    """Whether ``_block_plan`` splits the batch's blocks into several parts (never for one
    graph, which ``_forward_backward_lanes`` runs by itself)."""
    return node_off.shape[0] > 2 and _block_plan(node_off, K, per_edge)[5].shape[0] > 2
