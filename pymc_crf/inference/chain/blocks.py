"""A batch in lane blocks: graphs ordered by length, cut into blocks and parts.

``_block_plan`` fixes, from the batch alone, the blocks and their split into parts of about equal
work; ``_fb_block_range`` runs one part's blocks (in any thread). The chains too long for the
block buffers, and lanes that fail the exactness test, are left to the per-graph kernels
(``parts``, which runs a whole batch so: the lane tier of ``dispatch``).
"""

from __future__ import annotations

import numpy as np

from pymc_crf.allocation import empty_pages
from pymc_crf.inference.chain.lanes import _BLOCK_ELEMS, _TABLE_ELEMS, LANES, _fb_lane_block
from pymc_crf.kernel_cache import njit


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


def _block_plan(node_off, K, per_edge):
    """How a batch runs in lane blocks: graphs in order of length (``order``), ``B`` lanes a
    block, the first ``n_blocked`` graphs in blocks (the rest are too long for the block
    buffers), ``Lbuf`` the longest blocked graph, and ``bounds``: the blocked graphs split into
    parts of whole blocks with about equal work (one part below ``_PARALLEL_WORK``). The split
    depends on the batch alone, not on the number of threads. numpy, O(G): nothing to compile."""
    node_off = np.asarray(node_off)
    G = node_off.shape[0] - 1
    B = min(LANES, 8 * ((G + 7) // 8))
    lengths = np.diff(node_off)
    order = np.argsort(lengths, kind="stable")
    cap = max(1, _BLOCK_ELEMS // (K * B))
    if per_edge:
        cap = max(1, min(cap, _TABLE_ELEMS // (K * K * B)))
    n_blocked = int(np.searchsorted(lengths[order], cap, side="right"))
    Lbuf = int(lengths[order[n_blocked - 1]]) if n_blocked > 0 else 1
    n_blocks = (n_blocked + B - 1) // B
    # cumulative work: a block runs to its longest lane (its last, in order of length)
    last = np.minimum((np.arange(n_blocks) + 1) * B, n_blocked) - 1
    work = np.zeros(n_blocks + 1)
    work[1:] = np.cumsum(lengths[order[last]] * float(B * K * K))
    n_parts = min(n_blocks, _MAX_PARTS) if work[n_blocks] >= _PARALLEL_WORK else 1
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
                    node_m, edge_m, Xe, We, gW, macc, order, lengths, B, Lbuf, first, stop, buf,
                    redo):
    """The blocks of ``B`` graphs ``order[first:stop]`` (``first`` a multiple of ``B``), each
    through ``_fb_lane_block``. A shared table's summed edge marginals go to ``macc``, expected
    edge features to ``gW``: a part run on its own thread gets its own ``macc`` and ``gW``. A
    graph whose lane fails the exactness test is marked in ``redo`` (G,) and left to the
    caller, which redoes it graph by graph (``parts._fb_lane_parts``): the per-graph kernels are not
    linked in here, so a batch that never fails the test never compiles them, and this kernel
    compiles faster. The buffers are carved from ``buf`` (``_block_sizes``), or allocated here
    when it is empty."""
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
            if bad[b]:
                redo[lane_g[b]] = True
            else:
                log_z[lane_g[b]] = lz[b]
