"""`CRFData`: one labelled (or unlabelled) batch of graphs with its features."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from pymc_crf.distributions.crf import pad_labels
from pymc_crf.graphs.batch import GraphBatch, as_graph_batch, graphs_doc
from pymc_crf.potentials import check_potential
from pymc_crf.validation import whole_number

__all__ = ["CRFData"]


@dataclass
class CRFData:
    """Graphs, features and labels of a CRF data set.

    Attributes
    ----------
    graphs : GraphBatch
    labels : ndarray (N,) int or None
        One label per node (flat, graph after graph).
    node_features : ndarray or scipy.sparse CSR (N, F), or None
    edge_features : ndarray or scipy.sparse CSR (E, Fe), or None
    n_labels : int
    coords : dict
        Coordinates for ``pm.Model(coords=...)``: ``graph``, ``position``, ``node_label`` (the
        label dim of node weights), ``label_i``, ``label_j`` (of edge tables) and
        ``node_feature`` / ``edge_feature`` where present. No dim is called ``label``: ArviZ's
        ``az.summary`` names its own output dim so and refuses variables that have one.
    true_weights : dict of name -> ndarray, optional
        The weights the labels were generated from (synthetic data).
    potential, epsilon
        The potential the data were generated with.
    description : str
        A short text saying what the data set is (the generators name their source).
    """

    graphs: GraphBatch
    labels: np.ndarray | None
    node_features: np.ndarray | None = None
    edge_features: np.ndarray | None = None
    n_labels: int = 2
    true_weights: dict = field(default_factory=dict)
    potential: str = "loglinear"
    epsilon: float = 0.0
    description: str = ""

    def __post_init__(self):
        # n_labels sizes the coords and the fitters' tables; potential and epsilon are read by
        # the CLI's model builder
        # a networkx graph (or list of them), as pmc.CRF takes; anything else named (None gave
        # "'NoneType' object has no attribute 'check_labels'")
        self.graphs = as_graph_batch(self.graphs)
        self.n_labels = whole_number(self.n_labels, "CRFData: n_labels", minimum=2)
        check_potential(self.potential, self.epsilon)
        if self.labels is not None:
            self.labels = self.graphs.check_labels(self.labels, self.n_labels)
        if self.node_features is not None:
            self.node_features = self.graphs.check_features(self.node_features, "node")
        if self.edge_features is not None:
            self.edge_features = self.graphs.check_features(self.edge_features, "edge")

    @property
    def coords(self) -> dict:
        c = {"graph": np.arange(self.graphs.n_graphs),
             "position": np.arange(int(self.graphs.n_nodes.max())),
             "node_label": np.arange(self.n_labels), "label_i": np.arange(self.n_labels),
             "label_j": np.arange(self.n_labels)}
        if self.node_features is not None:
            c["node_feature"] = np.arange(self.node_features.shape[1])
        if self.edge_features is not None:
            c["edge_feature"] = np.arange(self.edge_features.shape[1])
        return c

    @property
    def padded_labels(self) -> np.ndarray:
        """Labels as the (G, L) matrix a ``pmc.CRF`` variable holds (-1 past each graph's end)."""
        return pad_labels(self.graphs, self.labels, self.n_labels)

    @graphs_doc
    def subset(self, graphs: Sequence[int] | np.ndarray) -> CRFData:
        """The listed graphs as a new data set.

        %(graphs_parameters)s

        Returns
        -------
        CRFData
        """
        graphs = self.graphs.graph_ids(graphs)
        nidx = self.graphs.node_index(graphs)
        eidx = self.graphs.edge_index(graphs)
        return CRFData(self.graphs.subset(graphs),
                       None if self.labels is None else self.labels[nidx],
                       None if self.node_features is None else self.node_features[nidx],
                       None if self.edge_features is None else self.edge_features[eidx],
                       self.n_labels, self.true_weights, self.potential, self.epsilon,
                       self.description)

    def __repr__(self) -> str:
        return (f"CRFData({self.graphs!r}, K={self.n_labels}, node_features="
                f"{None if self.node_features is None else self.node_features.shape}, "
                f"edge_features={None if self.edge_features is None else self.edge_features.shape})")
