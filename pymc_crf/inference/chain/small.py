"""Forward-backward of small chain batches in numpy, with nothing to compile.

The chain engine's numba kernels take seconds to compile on a machine's first use (the per-graph
kernel, then the lane-block kernels: docs/benchmarks.md, "Cold start"), while a batch of a few
hundred positions needs little work a pass. Such batches (fewer
than ``SMALL_WORK`` positions x K^2 and chains of at most ``SMALL_LENGTH`` positions) run here:
the log-space recursion (Rabiner 1989, eqs. (19)-(25) in log form) over all chains at once, the
chains padded to the longest and each step one broadcast over (graphs, K, K). The cost is a few
numpy calls per position of the longest chain, so longer chains go to the kernels.

The results equal the kernels' to rounding (tests/inference/test_chain_small.py compares them with the
kernels and with brute force, -inf entries included).
"""

from __future__ import annotations

import numpy as np

__all__ = ["SMALL_LENGTH", "SMALL_WORK", "forward_backward_small", "is_small"]

#: at most this many positions x K^2 in the batch ...
SMALL_WORK = 1 << 13
#: ... and chains of at most this many positions
SMALL_LENGTH = 64


def is_small(node_off: np.ndarray, n_labels: int) -> bool:
    """Whether a chain batch (node offsets, K labels) runs in numpy."""
    if node_off.shape[0] < 2:
        return False
    longest = int(np.max(np.diff(node_off)))
    return int(node_off[-1]) * n_labels * n_labels < SMALL_WORK and longest <= SMALL_LENGTH


def _logsumexp(a: np.ndarray, axis: int) -> np.ndarray:
    """log sum exp along ``axis``, -inf where every entry is -inf (no NaN, no warning)."""
    m = np.max(a, axis=axis, keepdims=True)
    m = np.where(np.isfinite(m), m, 0.0)
    with np.errstate(divide="ignore"):
        return np.log(np.sum(np.exp(a - m), axis=axis)) + np.squeeze(m, axis=axis)


def forward_backward_small(node, edge, node_off, edge_off, want_marginals, gw):
    """Log Z (G,), node marginals (N, K) and edge marginals ((E, K, K), or (1, K, K) summed over
    edges for a shared table) of a chain batch, as ``parts._forward_backward_lanes`` returns them
    (empty marginal arrays when ``want_marginals`` is False; marginals of graph g times
    ``gw[g]`` when ``gw`` is non-empty)."""
    G = node_off.shape[0] - 1
    N, K = node.shape
    shared = edge.shape[0] == 1
    lengths = np.diff(node_off)
    L = int(lengths.max()) if G else 0
    t = np.arange(L)
    valid = t[None, :] < lengths[:, None]                        # (G, L)
    nidx = np.where(valid, node_off[:-1, None] + t[None, :], 0)
    phi = node[nidx]                                             # (G, L, K); padding unread

    def table(s):
        """The (G, K, K) tables of the edges into position s >= 1 (padding: zeros)."""
        if shared:
            return np.broadcast_to(edge[0], (G, K, K))
        ok = valid[:, s]
        e = np.where(ok, edge_off[:-1] + s - 1, 0)
        return np.where(ok[:, None, None], edge[e], 0.0)

    la = np.empty((G, L, K))                                     # forward log-messages
    la[:, 0] = phi[:, 0]
    for s in range(1, L):
        step = _logsumexp(la[:, s - 1, :, None] + table(s), axis=1) + phi[:, s]
        la[:, s] = np.where(valid[:, s, None], step, la[:, s - 1])  # finished chains carry on
    log_z = _logsumexp(la[:, L - 1], axis=1) if G else np.empty(0)
    n_edge_m = 0 if not want_marginals else (1 if shared else edge.shape[0])
    if not want_marginals:
        return log_z, np.zeros((0, K)), np.zeros((0, K, K))

    lb = np.zeros((G, L, K))                                     # backward log-messages
    for s in range(L - 2, -1, -1):
        nxt = valid[:, s + 1]
        step = _logsumexp(table(s + 1) + (phi[:, s + 1] + lb[:, s + 1])[:, None, :], axis=2)
        lb[:, s] = np.where(nxt[:, None], step, 0.0)
    w = gw if gw.shape[0] > 0 else np.ones(G)
    finite = np.isfinite(log_z)
    lz = np.where(finite, log_z, 0.0)
    with np.errstate(invalid="ignore"):
        pn = np.exp(la + lb - lz[:, None, None]) * (w * finite)[:, None, None]  # padding: <= 1
    node_m = np.zeros((N, K))
    node_m[nidx[valid]] = pn[valid]
    edge_m = np.zeros((n_edge_m, K, K))
    scale = w * finite
    for s in range(1, L):
        g = np.flatnonzero(valid[:, s])  # chains that reach position s (no padding read)
        if g.size == 0:
            break
        with np.errstate(invalid="ignore"):
            pe = np.exp(la[g, s - 1, :, None] + table(s)[g] + (phi[g, s] + lb[g, s])[:, None, :]
                        - lz[g, None, None]) * scale[g, None, None]
        if shared:
            edge_m[0] += pe.sum(axis=0)
        else:
            edge_m[edge_off[g] + s - 1] = pe
    return log_z, node_m, edge_m
