"""The k most probable labellings of chain CRFs: list Viterbi.

List Viterbi (Seshadri & Sundberg 1994, the parallel list Viterbi algorithm) keeps, at every
position ``t`` and label ``j``, the ``k`` best scores of labellings of positions ``0..t`` ending in
``j`` and, for each, the label and rank at ``t - 1`` it extends. The ``k`` best extensions of
``(t, j)`` are among the ``K k`` candidates ``delta_{t-1}(i, r) + psi_t(i, j)``, so the
recursion costs ``O(K^2 k log(K k))`` per position and the ``k`` best labellings of the chain are
the ``k`` best of the ``K k`` entries at its last position, read back through the pointers.
Distinct ``(label, rank)`` pointers give distinct prefixes, so the ``k`` labellings are distinct;
with ``k = 1`` this is Viterbi. All chains of a batch run in lockstep (numpy over chains).

Scores are unnormalised log scores (the sum of node and edge log-potentials); minus log Z they are
log-probabilities. A chain with fewer than ``k`` labellings of finite score (``K^n < k``, or
forbidden transitions) is padded with labels -1 and score ``-inf``.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from pymc_crf.graphs.batch import GraphBatch
from pymc_crf.inference.base import check_potentials
from pymc_crf.inference.spans import chain_log_messages, check_chain_batch
from pymc_crf.validation import whole_number

__all__ = ["KBest", "kbest_labellings"]


class KBest(NamedTuple):
    """The ``k`` best labellings of every chain: ``labels`` (k, N) (row ``r``: the labelling of
    rank ``r`` of every graph; -1 where a graph has fewer), ``score`` (k, G) their unnormalised
    log scores and ``log_prob`` (k, G) their log-probabilities (``-inf`` for padding)."""

    labels: np.ndarray
    score: np.ndarray
    log_prob: np.ndarray


def _top(cand: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Indices and values of the ``k`` largest entries along the last axis, best first (ties:
    lower index first)."""
    order = np.argsort(-cand, axis=-1, kind="stable")[..., :k]
    return order, np.take_along_axis(cand, order, axis=-1)


def kbest_labellings(batch: GraphBatch, node: np.ndarray, edge: np.ndarray, k: int) -> KBest:
    """The ``k`` most probable labellings of every chain of ``batch``, best first (module
    docstring), with their scores and log-probabilities.

    Parameters
    ----------
    batch : GraphBatch
        Chains only.
    node, edge : ndarray
        Log-potentials (N, K) and (E, K, K) or (1, K, K).
    k : int
        How many labellings per chain.
    """
    check_chain_batch(batch, "k-best labellings")
    node, edge = check_potentials(batch, node, edge)
    k = whole_number(k, "k", minimum=1)
    N, K = node.shape
    lo, n, elo = batch.node_offsets[:-1], batch.n_nodes, batch.edge_offsets[:-1]
    G = batch.n_graphs
    # delta[v, j, r]: r-th best score of a labelling ending at node v with label j;
    # back[v, j, r]: i * k + r' of its predecessor (label i, rank r' at node v - 1)
    delta = np.full((N, K, k), -np.inf)
    delta[:, :, 0] = node
    back = np.zeros((N, K, k), np.int64)
    shared = edge.shape[0] == 1
    for t in range(1, int(n.max(initial=0))):
        g = np.flatnonzero(n > t)
        cur = lo[g] + t
        tab = np.broadcast_to(edge[0], (g.size, K, K)) if shared else edge[elo[g] + t - 1]
        # candidates (graph, j, i * k + r) = delta[cur - 1, i, r] + psi(i, j)
        cand = (delta[cur - 1][:, :, None, :] + tab[:, :, :, None]).transpose(0, 2, 1, 3)
        idx, val = _top(cand.reshape(g.size, K, K * k), k)
        delta[cur] = val + node[cur][:, :, None]
        back[cur] = idx
    last = lo + n - 1
    idx, score = _top(delta[last].reshape(G, K * k), k)  # (G, k): j * k + r
    labels = np.full((k, N), -1, np.int64)
    j, r = idx // k, idx % k
    for s in range(int(n.max(initial=0))):  # s steps from each chain's end, all chains at once
        g = np.flatnonzero(n > s)
        v = lo[g] + n[g] - 1 - s
        labels[:, v] = j[g].T
        p = back[v[:, None], j[g], r[g]]
        j[g], r[g] = p // k, p % k
    finite = np.isfinite(score.T)  # (k, G)
    labels[~finite[:, batch.node_graph]] = -1
    log_z = chain_log_messages(batch, node, edge)[2]
    return KBest(labels, score.T.copy(), np.where(finite, score.T - log_z[None, :], -np.inf))
