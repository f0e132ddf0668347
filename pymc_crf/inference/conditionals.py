"""Numba helpers for the full conditional of one node given its neighbours.

Gibbs sampling conditions on the neighbours' labels, mean field on their marginals; both read a
neighbour's edge table through the directed slot entering the node
(:func:`pymc_crf.graphs.adjacency.message_layout`) and turn the node's log weights into
probabilities the same way.
"""

from __future__ import annotations

import numpy as np
from numba import njit

__all__ = ["exp_normalise", "slot_entry"]


@njit(cache=True, inline="always")
def slot_entry(edge, shared, edge_of, flip, d, k, y):
    """Edge log-potential of label ``k`` at the node slot ``d`` enters and label ``y`` at the
    neighbour it comes from (``flip[d]``: the node is ``edges[e, 0]``, the table is read
    ``[k, y]``)."""
    tab = 0 if shared else edge_of[d]
    return edge[tab, k, y] if flip[d] else edge[tab, y, k]


@njit(cache=True, inline="always")
def exp_normalise(p):
    """In place: log weights to weights scaled to max 1 (0 for -inf); returns their sum."""
    K = p.shape[0]
    m = -np.inf
    for k in range(K):
        if p[k] > m:
            m = p[k]
    tot = 0.0
    for k in range(K):
        p[k] = np.exp(p[k] - m) if p[k] > -np.inf else 0.0
        tot += p[k]
    return tot
