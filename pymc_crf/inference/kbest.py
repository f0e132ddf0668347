"""The k most probable labellings of chain CRFs: list Viterbi.

List Viterbi (Seshadri & Sundberg 1994, the parallel list Viterbi algorithm) keeps, at every
position ``t`` and label ``j``, the ``k`` best scores of labellings of positions ``0..t`` ending in
``j`` and, for each, the label and rank at ``t - 1`` it extends. The ``k`` best extensions of
``(t, j)`` are among the ``K k`` candidates ``delta_{t-1}(i, r) + psi_t(i, j) + phi_t(j)``, and
the ``k`` best labellings of the chain are the ``k`` best of the ``K k`` entries at its last
position, read back through the pointers.
Distinct ``(label, rank)`` pointers give distinct prefixes, so the ``k`` labellings are distinct;
with ``k = 1`` this is Viterbi. Each ``(t, j)`` list is the ``k``-way merge of the ``K`` sorted
lists of ``t - 1`` shifted by ``psi_t(i, j)``: ``O(K^2 k)`` per position (one numba kernel).

Scores are unnormalised log scores (the sum of node and edge log-potentials); minus log Z they are
log-probabilities. A chain with fewer than ``k`` labellings of finite score (``K^n < k``, or
forbidden transitions) is padded with labels -1 and score ``-inf``.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from pymc_crf.graphs.batch import GraphBatch
from pymc_crf.inference.base import check_potentials
from pymc_crf.inference.chain import ChainEngine
from pymc_crf.inference.spans import check_chain_batch
from pymc_crf.kernel_cache import njit
from pymc_crf.validation import whole_number

__all__ = ["KBest", "kbest_labellings"]


class KBest(NamedTuple):
    """The ``k`` best labellings of every chain: ``labels`` (k, N) (row ``r``: the labelling of
    rank ``r`` of every graph; -1 where a graph has fewer), ``score`` (k, G) their unnormalised
    log scores and ``log_prob`` (k, G) their log-probabilities (``-inf`` for padding)."""

    labels: np.ndarray
    score: np.ndarray
    log_prob: np.ndarray


@njit(cache=True)
def _kbest_kernel(node, edge, node_off, edge_off, k):
    """Labels (k, N) and scores (k, G) of the k best labellings of every chain (list Viterbi;
    each (position, label) list is the k-way merge of its predecessors' sorted lists)."""
    N, K = node.shape
    G = node_off.shape[0] - 1
    shared = edge.shape[0] == 1
    delta = np.full((N, K, k), -np.inf)   # k best scores ending at (node, label), best first
    back = np.zeros((N, K, k), np.int64)  # their predecessors: label * k + rank
    labels = np.full((k, N), -1, np.int64)
    score = np.full((k, G), -np.inf)
    ptr = np.zeros(K, np.int64)
    for g in range(G):
        lo = node_off[g]
        n = node_off[g + 1] - lo
        for j in range(K):
            delta[lo, j, 0] = node[lo, j]
        for t in range(1, n):
            et = 0 if shared else edge_off[g] + t - 1
            v = lo + t
            for j in range(K):
                ptr[:] = 0
                for r in range(k):
                    best, bi = -np.inf, -1
                    for i in range(K):
                        if ptr[i] < k:
                            c = delta[v - 1, i, ptr[i]] + edge[et, i, j]
                            if c > best:
                                best, bi = c, i
                    if bi < 0:
                        break
                    delta[v, j, r] = best + node[v, j]
                    back[v, j, r] = bi * k + ptr[bi]
                    ptr[bi] += 1
        last = lo + n - 1
        ptr[:] = 0
        for r in range(k):  # merge the K lists of the last position
            best, bj = -np.inf, -1
            for j in range(K):
                if ptr[j] < k and delta[last, j, ptr[j]] > best:
                    best, bj = delta[last, j, ptr[j]], j
            if bj < 0:
                break
            score[r, g] = best
            j, q = bj, ptr[bj]
            ptr[bj] += 1
            for t in range(n - 1, -1, -1):
                labels[r, lo + t] = j
                p = back[lo + t, j, q]
                j, q = p // k, p % k
    return labels, score


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
    labels, score = _kbest_kernel(node, edge, np.ascontiguousarray(batch.node_offsets, np.int64),
                                  np.ascontiguousarray(batch.edge_offsets, np.int64), k)
    log_z = ChainEngine().log_partition(batch, node, edge)
    return KBest(labels, score, np.where(np.isfinite(score), score - log_z[None, :], -np.inf))
