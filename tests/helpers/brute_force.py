"""Brute-force references by enumerating every labelling: the ground truth of the chain and HCRF
tests (exponential in the graph size, so for a handful of nodes only)."""

import itertools

import numpy as np
from scipy.special import logsumexp


def chain_labellings(batch, node: np.ndarray, edge: np.ndarray, g: int):
    """Every labelling of chain ``g`` of ``batch`` and its log-probability under the tables.

    ``edge`` is one shared (1, K, K) table or one per edge (n_edges, K, K).

    Returns
    -------
    tuple
        ``(configs, log_prob)``: the labellings (K^n, n) in ``itertools.product`` order and their
        log-probabilities (K^n,).
    """
    lo, n = int(batch.node_offsets[g]), int(batch.n_nodes[g])
    configs = np.array(list(itertools.product(range(node.shape[1]), repeat=n)))
    score = node[lo + np.arange(n), configs].sum(axis=1)
    for t in range(1, n):
        tab = edge[0] if edge.shape[0] == 1 else edge[batch.edge_offsets[g] + t - 1]
        score = score + tab[configs[:, t - 1], configs[:, t]]
    return configs, score - logsumexp(score)


def hcrf_class_log_probs(batch, X: np.ndarray, tx: np.ndarray, ty: np.ndarray, te: np.ndarray):
    """log p(c | X_g) of an HCRF (Quattoni et al. 2007) by enumerating every class and every
    hidden-state assignment of every graph.

    Parameters
    ----------
    batch : GraphBatch
        The graphs.
    X : numpy.ndarray
        Dense node features (n_total_nodes, F).
    tx, ty, te : numpy.ndarray
        The weights theta_x (F, S), theta_y (S, C) and theta_e (S, S, C).

    Returns
    -------
    numpy.ndarray
        (n_graphs, C) log class probabilities.
    """
    S, C = ty.shape
    out = np.empty((batch.n_graphs, C))
    for g in range(batch.n_graphs):
        lo, hi = batch.node_offsets[g], batch.node_offsets[g + 1]
        edges = batch.local_edges(g)
        n = hi - lo
        for c in range(C):
            scores = []
            for s in itertools.product(range(S), repeat=int(n)):
                s = np.array(s)
                sc = sum(X[lo + t] @ tx[:, s[t]] + ty[s[t], c] for t in range(n))
                sc += sum(te[s[u], s[v], c] for u, v in edges)
                scores.append(sc)
            out[g, c] = logsumexp(scores)
        out[g] -= logsumexp(out[g])
    return out
