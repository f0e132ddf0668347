"""Conditioning on observed labels: the clamped tables that sum missing labels out.

With labels observed at some nodes and missing (``-1``) at others, the likelihood of what was
observed sums the missing labels out:

    log p(y_obs | x, w) = log Z(x, w; clamped to y_obs) - log Z(x, w),

where the clamped partition function is the same engine run on tables whose observed nodes keep
only their observed label (every other entry ``-inf``, a forbidden label). Its gradient in the
tables is ``E_clamped[phi] - E[phi]``: the clamped marginals are the conditional marginals of the
missing labels given the observed ones (one-hot at observed nodes), which is also what imputing
the missing labels needs. Every engine takes ``-inf`` entries (tested against brute force).

:class:`ObservedLabels` sorts the graphs of a batch into fully observed, partly observed and
unobserved ones and cuts out :class:`ClampedPart`, the sub-batch whose tables are clamped. The
table gathering is plain indexing and addition, so it works on numpy arrays and PyTensor tensors
alike.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from pymc_crf.graphs.batch import GraphBatch

__all__ = ["ClampedPart", "ObservedLabels"]


@dataclass(frozen=True)
class ClampedPart:
    """Graphs ``graphs`` of a batch as their own sub-batch, with the clamping of their observed nodes.

    ``nodes`` / ``edges`` are the global node and edge ids of the sub-batch (to gather tables),
    ``penalty`` (n_sub_nodes, K) is 0 where a label is allowed and ``-inf`` at the labels an
    observed node does not have.
    """

    graphs: np.ndarray
    batch: GraphBatch
    nodes: np.ndarray
    edges: np.ndarray
    penalty: np.ndarray
    whole: bool

    def tables(self, node_logpot, edge_logpot, shared: bool, clamp: bool = True):
        """Sub-batch tables of ``(node_logpot, edge_logpot)`` (numpy arrays or PyTensor tensors),
        clamped to the observed labels unless ``clamp`` is False. A shared (1, K, K) edge table
        stays shared."""
        node = node_logpot if self.whole else node_logpot[self.nodes]
        edge = edge_logpot if (self.whole or shared) else edge_logpot[self.edges]
        return (node + self.penalty if clamp else node), edge

    def scatter_node(self, values: np.ndarray, n_total_nodes: int) -> np.ndarray:
        """Per-node rows of the sub-batch (n_sub_nodes, ...) placed at their global node ids."""
        out = np.zeros((n_total_nodes, *values.shape[1:]), dtype=values.dtype)
        out[self.nodes] = values
        return out


class ObservedLabels:
    """Flat labels (N,) of ``batch`` with ``-1`` at the missing ones.

    Attributes
    ----------
    labels : ndarray (N,)
    observed : ndarray (N,) bool
    full, partial, empty : ndarray (G,) bool
        Graphs with every, some (not all) and no label observed.
    """

    def __init__(self, batch: GraphBatch, labels: np.ndarray, n_labels: int):
        labels = np.asarray(labels, dtype=np.int64)
        if labels.shape != (batch.n_total_nodes,):
            raise ValueError(f"labels must have shape ({batch.n_total_nodes},); got {labels.shape}")
        if labels.size and (labels.min() < -1 or labels.max() >= n_labels):
            raise ValueError(f"labels must lie in 0..{n_labels - 1}, or be -1 where missing")
        self.batch, self.n_labels, self.labels = batch, int(n_labels), labels
        self.observed = labels >= 0
        n_obs = np.bincount(batch.node_graph, self.observed, minlength=batch.n_graphs)
        self.full = n_obs == batch.n_nodes
        self.empty = n_obs == 0
        self.partial = ~self.full & ~self.empty

    @property
    def has_missing(self) -> bool:
        """Whether any label is missing."""
        return not bool(self.observed.all())

    def part(self, graphs: np.ndarray) -> ClampedPart:
        """The sub-batch of ``graphs`` (ids, or a (G,) bool mask) with its clamping penalty."""
        b = self.batch
        graphs = np.asarray(graphs)
        graphs = np.flatnonzero(graphs) if graphs.dtype == bool else graphs.astype(np.int64)
        whole = np.array_equal(graphs, np.arange(b.n_graphs))
        nodes = np.arange(b.n_total_nodes) if whole else b.node_index(graphs)
        edges = np.arange(b.n_edges) if whole else b.edge_index(graphs)
        sub = b if whole else b.subset(graphs)
        penalty = np.zeros((nodes.size, self.n_labels))
        y = self.labels[nodes]
        obs = y >= 0
        penalty[obs] = -np.inf
        penalty[np.flatnonzero(obs), y[obs]] = 0.0
        return ClampedPart(graphs, sub, nodes, edges, penalty, whole)
