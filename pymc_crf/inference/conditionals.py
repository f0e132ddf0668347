"""Numba helpers for the full conditional of one node given its neighbours.

Gibbs sampling conditions on the neighbours' labels, mean field on their marginals; both read a
neighbour's edge table through the directed slot entering the node
(:func:`pymc_crf.graphs.adjacency.message_layout`) and turn the node's log weights into
probabilities the same way.
"""

from __future__ import annotations

import numpy as np

from pymc_crf.kernel_cache import njit

__all__ = ["exp_normalise", "keep_least_forbidden", "slot_entry"]


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


@njit(cache=True, inline="always")
def keep_least_forbidden(p, forbidden):
    """In place: keep the log weights ``p`` (finite parts) of the labels with the least weight on
    forbidden (-inf) entries, -inf for the others; all 0 when every label's node entry is -inf
    (``forbidden`` inf: an impossible model, uniform).

    Labels with some forbidden weight are dropped when another label has none: exactly the
    conditional with -inf entries. When every label has some (neighbour labels or marginals that
    the constraints rule out: a Gibbs chain started there, mean field from a start that mixes
    incompatible labels) the conditional would be 0 / 0; the label with the least forbidden
    weight (ties: the largest finite part, then the first) is kept alone, the limit of the
    conditional as each -inf entry goes to -M, M -> infinity, with ties broken so that a
    symmetric start tends towards a labelling the constraints allow. It is a heuristic: a state
    where every label of every node has some forbidden weight stays where it is (mean field then
    warns).
    """
    K = p.shape[0]
    least = np.inf
    for k in range(K):
        if forbidden[k] < least:
            least = forbidden[k]
    if least == np.inf:
        for k in range(K):
            p[k] = 0.0
        return
    if least == 0.0:
        for k in range(K):
            if forbidden[k] > 0.0:
                p[k] = -np.inf
        return
    best = -1
    for k in range(K):
        if forbidden[k] <= least * (1.0 + 1e-12) and (best < 0 or p[k] > p[best]):
            best = k
    for k in range(K):
        if k != best:
            p[k] = -np.inf
