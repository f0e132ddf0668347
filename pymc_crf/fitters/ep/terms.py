"""The EP terms of a CRF batch as flat arrays: one (numerator, denominator) pair per factor.

A factor is an edge (label pairs ``c = a*K + b``, ``a`` at ``edges[e, 0]``) or, when node potentials
are present, a node (``c = a``). Its projection matrix ``A_k`` (Qi, Szummer & Minka 2005, eq. (29)) has one
column per configuration: the factor's feature vector placed in that configuration's block of the flat weight
vector. The flat weight order is node weights ``W (F, K)`` ravelled, then edge weights
``W_e (Fe, K, K)`` ravelled, i.e. node weight ``(f, a)`` sits at ``f*K + a`` and edge weight
``(f, a, b)`` at ``F*K + f*K*K + a*K + b``.

Terms are listed graph by graph, nodes before edges; the sweep processes each factor's numerator
term and then its denominator term (the paired order of thesis sec. 5.3.4).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from pymc_crf.graphs.batch import GraphBatch

__all__ = ["EPTerms", "build_terms"]


@dataclass
class EPTerms:
    """Flat description of all factors (see module docstring). ``n_fac`` factors, ``d`` weights."""

    nodes: np.ndarray  # (n_fac, 2) int64, global node ids, -1 for the second slot of a node factor
    n_cfg: np.ndarray  # (n_fac,) int64, K or K*K
    n_feat: np.ndarray  # (n_fac,) int64, F or Fe
    feat: np.ndarray  # (n_fac, Lmax) float64
    idx: np.ndarray  # (n_fac, K*K, Lmax) int64, flat weight index of column c, feature l
    obs_cfg: np.ndarray  # (n_fac,) int64, observed configuration (-1 when unlabelled)
    order: np.ndarray  # (n_fac,) int64, processing order
    d: int
    K: int


def build_terms(batch: GraphBatch, K: int, labels: np.ndarray | None,
                node_features: np.ndarray | None, edge_features: np.ndarray | None,
                use_node: bool, use_edge: bool) -> EPTerms:
    """Build the factor arrays for a batch.

    Parameters
    ----------
    batch : GraphBatch
    K : int
        Number of labels.
    labels : (N,) int array or None
        Observed labels (None for test graphs: only the structure is needed).
    node_features : (N, F) array or None
        Node features; used when ``use_node``.
    edge_features : (E, Fe) array or None
        Edge features; used when ``use_edge``.
    """
    N, E = batch.n_total_nodes, batch.n_edges
    F = node_features.shape[1] if use_node else 0
    Fe = edge_features.shape[1] if use_edge else 0
    d = F * K + Fe * K * K
    Lmax = max(F, Fe, 1)
    n_node_fac = N if use_node else 0
    n_edge_fac = E if use_edge else 0
    n_fac = n_node_fac + n_edge_fac
    nodes = -np.ones((n_fac, 2), np.int64)
    n_cfg = np.zeros(n_fac, np.int64)
    n_feat = np.zeros(n_fac, np.int64)
    feat = np.zeros((n_fac, Lmax))
    idx = np.zeros((n_fac, K * K, Lmax), np.int64)
    obs = -np.ones(n_fac, np.int64)
    if use_node:
        nodes[:N, 0] = np.arange(N)
        n_cfg[:N] = K
        n_feat[:N] = F
        feat[:N, :F] = node_features
        # column a, feature f -> f*K + a
        idx[:N, :K, :F] = (np.arange(F)[None, :] * K + np.arange(K)[:, None])[None]
        if labels is not None:
            obs[:N] = labels
    if use_edge:
        s = slice(n_node_fac, n_fac)
        nodes[s] = batch.edges
        n_cfg[s] = K * K
        n_feat[s] = Fe
        feat[s, :Fe] = edge_features
        idx[s, :, :Fe] = (F * K + np.arange(Fe)[None, :] * K * K
                          + np.arange(K * K)[:, None])[None]
        if labels is not None:
            obs[s] = labels[batch.edges[:, 0]] * K + labels[batch.edges[:, 1]]
    # graph by graph, node factors before edge factors of the same graph
    graph = np.concatenate([batch.node_graph[:n_node_fac] if use_node else np.zeros(0, np.int64),
                            batch.edge_graph if use_edge else np.zeros(0, np.int64)])
    kind = np.concatenate([np.zeros(n_node_fac, np.int64), np.ones(n_edge_fac, np.int64)])
    order = np.lexsort((np.arange(n_fac), kind, graph)).astype(np.int64)
    return EPTerms(nodes, n_cfg, n_feat, feat, idx, obs, order, d, K)
