"""The parts of a large batch (``blocks._block_plan``) on the worker threads.

Each part sums its shared-table and edge-feature terms apart and the parts' sums are added in
part order, so the numbers do not depend on the number of threads; blocks are the same as in one
thread, so log Z and the marginals are bit for bit those of the one-thread kernel. The default is
one thread (why, and when more pay: ``pymc_crf.threads``).
"""

from __future__ import annotations

import threading

import numpy as np
from numba import njit

from pymc_crf.inference.chain.blocks import (
    _block_plan,
    _block_sizes,
    _fb_after_blocks,
    _fb_block_range,
)
from pymc_crf.inference.chain.features import _feature_outputs
from pymc_crf.inference.chain.per_graph import _fb_outputs
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


def _fb_blocked_threads(node, edge, node_off, edge_off, want_marginals, gw, log_z, node_m, edge_m,
                        Xe, We, gW, plan):
    """``_fb_blocked`` with the blocks in the parts of ``plan`` (``_block_plan``), run on the
    worker threads (``pymc_crf.threads``). Each part adds its shared-table and edge-feature
    sums into arrays of its own, added up here in part order. Each worker's lane buffers come
    from the ones kept from earlier calls (``_take_buffers``)."""
    order, lengths, B, n_blocked, Lbuf, bounds = plan
    K = node.shape[1]
    psi, shift, erange = _edge_tables(edge[:1])
    n_parts = len(bounds) - 1
    workers = min(get_num_threads(), n_parts)
    shared = edge.shape[0] == 1 and Xe.shape[0] == 0
    bufs = _take_buffers(workers, _block_sizes(K, B, Lbuf, shared)[1])
    maccs = np.zeros((n_parts, K, K))
    gWs = np.zeros((n_parts, *gW.shape))
    shared_sum = shared and want_marginals  # summed edge marginals: one array per part
    ems = np.zeros((n_parts, 1, K, K)) if shared_sum else None

    def part(p, w):
        _fb_block_range(node, edge, psi, shift, erange, node_off, edge_off, want_marginals, gw,
                        log_z, node_m, ems[p] if shared_sum else edge_m, Xe, We, gWs[p], maccs[p],
                        order, lengths, B, Lbuf, bounds[p], bounds[p + 1], bufs[w])

    try:
        run_parts(part, n_parts, workers)
    finally:
        _keep_buffers(bufs)
    macc = maccs[0]
    for p in range(1, n_parts):
        macc += maccs[p]
    for p in range(n_parts):
        gW += gWs[p]
        if shared_sum:
            edge_m += ems[p]
    _fb_after_blocks(node, edge, psi, shift, erange, node_off, edge_off, want_marginals, gw, log_z,
                     node_m, edge_m, Xe, We, gW, macc, order, lengths, n_blocked)


def _forward_backward_threads(node, edge, node_off, edge_off, want_marginals, gw, plan):
    """``blocks._forward_backward_lanes`` with the parts of ``plan`` on the worker threads."""
    log_z = np.empty(node_off.shape[0] - 1)
    node_m, edge_m = _fb_outputs(node, edge, want_marginals)
    nf = np.zeros((0, 0))
    _fb_blocked_threads(node, edge, node_off, edge_off, want_marginals, gw, log_z, node_m, edge_m,
                        nf, nf, nf, plan)
    return log_z, node_m, edge_m


def _forward_backward_features_threads(node, Xe, We, node_off, edge_off, want_marginals, gw, plan):
    """``blocks._forward_backward_features_lanes`` with the parts of ``plan`` on the worker
    threads."""
    K = node.shape[1]
    log_z, node_m, gW = _feature_outputs(node, We, node_off.shape[0] - 1, want_marginals)
    _fb_blocked_threads(node, np.zeros((1, K, K)), node_off, edge_off, want_marginals, gw, log_z,
                        node_m, np.zeros((0, K, K)), Xe, We, gW, plan)
    return log_z, node_m, gW


@njit(cache=True)
def _splits(node_off, K, per_edge):
    """Whether ``_block_plan`` splits the batch's blocks into several parts (never for one
    graph, which ``_forward_backward_lanes`` runs by itself)."""
    return node_off.shape[0] > 2 and _block_plan(node_off, K, per_edge)[5].shape[0] > 2


def _parts_plan(node_off, K, per_edge):
    """``_block_plan`` of a batch whose blocks split into several parts, else None."""
    return _block_plan(node_off, K, per_edge) if _splits(node_off, K, per_edge) else None
