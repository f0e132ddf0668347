"""Pseudo-moment matching: the closed-form maximiser of the Bethe likelihood of an MRF.

For a fully observed pairwise MRF the log-potentials ``node_i = log p_i`` and
``edge_ij = log p_ij - log p_i - log p_j`` built from the empirical node and pairwise marginals
have a BP fixed point whose beliefs are those marginals (Wainwright, Jaakkola & Willsky 2003), so
the BP gradient (observed minus believed statistics) vanishes there: it is the maximum of the
Bethe likelihood without prior, the start of BL-BP (Welling & Parise 2006 sec. 7; Parise &
Welling 2006 sec. 2.1).

The model's weights need not be one free table per node and edge (a Boltzmann machine has one
weight per node and edge), so the tables are mapped to weights by least squares after removing
the gauge freedom of pairwise tables (constants and edge-to-node transfers leave the distribution
unchanged): both sides are brought to the canonical form that is zero at label 0. The weights
reproduce the tables exactly whenever the model can express them.
"""

from __future__ import annotations

import numpy as np

from pymc_crf.graphs.batch import GraphBatch

__all__ = ["canonical_tables", "empirical_marginals", "pmm_tables", "pmm_start"]


def canonical_tables(batch: GraphBatch, node: np.ndarray, edge: np.ndarray) -> np.ndarray:
    """The gauge-free form of pairwise log-potential tables, flat (N*K + E*K*K,).

    ``edge'(a, b) = edge(a, b) - edge(a, 0) - edge(0, b) + edge(0, 0)`` and
    ``node'_i(a) = node_i(a) - node_i(0) + sum_e [edge_e(a, 0) - edge_e(0, 0)]`` over the edges
    of ``i`` (read in ``i``'s orientation): two sets of tables give the same distribution iff
    their canonical forms agree.
    """
    node = np.asarray(node, dtype=np.float64)
    E = batch.n_edges
    edge = np.broadcast_to(np.asarray(edge, dtype=np.float64), (E, *node.shape[1:], node.shape[1]))
    ec = edge - edge[:, :, :1] - edge[:, :1, :] + edge[:, :1, :1]
    nc = node - node[:, :1]
    u, v = batch.edges[:, 0], batch.edges[:, 1]
    np.add.at(nc, u, edge[:, :, 0] - edge[:, :1, 0])
    np.add.at(nc, v, edge[:, 0, :] - edge[:, :1, 0])
    return np.concatenate([nc.ravel(), ec.ravel()])


def empirical_marginals(batch: GraphBatch, samples: np.ndarray, K: int, pseudo_count: float = 1.0):
    """Smoothed node (N, K) and pairwise (E, K, K) frequencies of labellings (S, N).

    A Dirichlet pseudo-count keeps every frequency positive (empty cells would give infinite
    log-potentials) and the pairwise tables consistent with the node ones.
    """
    samples = np.asarray(samples, dtype=np.int64)
    S, N = samples.shape
    node = np.zeros((N, K))
    np.add.at(node, (np.broadcast_to(np.arange(N), (S, N)), samples), 1.0)
    u, v = batch.edges[:, 0], batch.edges[:, 1]
    E = batch.n_edges
    pair = np.zeros((E, K, K))
    np.add.at(pair, (np.broadcast_to(np.arange(E), (S, E)), samples[:, u], samples[:, v]), 1.0)
    a = float(pseudo_count)
    denom = S + K * a
    return (node + a) / denom, (pair + a / K) / denom


def pmm_tables(batch: GraphBatch, p_node: np.ndarray, p_edge: np.ndarray):
    """Pseudo-moment-matching log-potentials from node and pairwise marginals."""
    ln, le = np.log(p_node), np.log(p_edge)
    u, v = batch.edges[:, 0], batch.edges[:, 1]
    return ln, le - ln[u][:, :, None] - ln[v][:, None, :]


def pmm_start(lik, samples: np.ndarray, pseudo_count: float = 1.0) -> np.ndarray:
    """Flat weights (d,) whose tables best match (in canonical form, least squares) the
    pseudo-moment-matching tables of the labellings ``samples`` (S, N) of ``lik.batch``."""
    batch, K, d = lik.batch, lik.K, lik.size
    target = canonical_tables(batch, *pmm_tables(batch, *empirical_marginals(
        batch, samples, K, pseudo_count)))
    w0 = np.zeros(d)
    cols = np.empty((target.size, d))
    for j in range(d):
        e = np.zeros(d)
        e[j] = 1.0
        cols[:, j] = canonical_tables(batch, *lik.pushforward(w0, e))
    return np.linalg.lstsq(cols, target, rcond=None)[0]
