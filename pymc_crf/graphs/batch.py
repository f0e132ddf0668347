"""`GraphBatch`: many pairwise graphs stored as one flat, block-diagonal batch.

Node ids are global: graph ``g`` owns nodes ``node_offsets[g] : node_offsets[g + 1]`` and edges
``edge_offsets[g] : edge_offsets[g + 1]``. An edge table ``edge_logpot[e, a, b]`` is indexed by the
label ``a`` of ``edges[e, 0]`` and the label ``b`` of ``edges[e, 1]``: orientation matters and is the
one the user gave.

Everything is validated once, here, so that the numba engines below can trust their input.
"""

from __future__ import annotations

import numbers
from collections.abc import Callable, Hashable, Iterable, Sequence
from functools import cached_property
from typing import Any, TypeVar

import networkx as nx
import numpy as np
import scipy.sparse

from pymc_crf.docstrings import fill_doc
from pymc_crf.graphs.junction_tree import (
    HEURISTICS,
    JunctionTreeStructure,
    elimination_order,
    junction_tree_from_edges,
)
from pymc_crf.validation import class_indices, whole_number

__all__ = ["GraphBatch", "GraphStructureError", "as_graph_batch"]

T = TypeVar("T")

# the parameter of the methods that take one graph (local_edges, to_networkx) or a list of graphs
# (subset, node_index, edge_index, and the data sets' subset), worded once (``fill_doc``)
GRAPHS_DOCS = {
    "graph_parameters": """
        Parameters
        ----------
        g : int
            The graph id.""",
    "graphs_parameters": """
        Parameters
        ----------
        graphs : sequence of int or ndarray
            Graph ids, each in 0..G-1.""",
}
graphs_doc = fill_doc(GRAPHS_DOCS)

CHAIN, TREE, LOOPY = "chain", "tree", "loopy"


class GraphStructureError(ValueError):
    """A graph batch is malformed (self loop, duplicate edge, id out of range, empty graph...)."""


def _edge_array(el: Any, g: int) -> np.ndarray:
    """Graph ``g``'s edge list as an (E, 2) int64 array: whole-number node ids in pairs."""
    if not len(el):
        return np.zeros((0, 2), np.int64)
    try:
        arr = np.asarray(el)
    except ValueError as err:  # ragged pairs
        raise GraphStructureError(f"graph {g}: the edge list must be (i, j) pairs ({err})") from err
    if arr.ndim != 2 or arr.shape[1] != 2:
        raise GraphStructureError(f"graph {g}: the edge list must be (i, j) pairs, shape (E, 2); "
                                  f"got shape {arr.shape}")
    if not np.issubdtype(arr.dtype, np.integer):
        flat = arr.reshape(-1)
        whole = (np.isfinite(flat) & (flat == np.round(flat))
                 if np.issubdtype(arr.dtype, np.floating) else np.zeros(flat.size, bool))
        if not whole.all():
            raise GraphStructureError(f"graph {g}: node ids in the edge list must be whole "
                                      f"numbers; got {flat[np.argmin(whole)]!s} "
                                      f"(dtype {arr.dtype})")
    return arr.astype(np.int64)


def _node_counts(n_nodes: Any) -> np.ndarray:
    """``n_nodes`` as a 1-d integer array of counts >= 1 (one per graph), else a
    GraphStructureError naming the problem."""
    n_nodes = np.asarray(n_nodes)
    if n_nodes.ndim != 1:
        raise GraphStructureError(f"n_nodes must be a 1-d sequence of node counts, one per graph; "
                                  f"got shape {n_nodes.shape}")
    if n_nodes.size == 0:
        raise GraphStructureError("a GraphBatch needs at least one graph (n_nodes is empty)")
    if not np.issubdtype(n_nodes.dtype, np.integer):
        raise GraphStructureError(f"n_nodes must be integers, got dtype {n_nodes.dtype}")
    if (n_nodes < 1).any():
        bad = np.flatnonzero(n_nodes < 1)[:5].tolist()
        raise GraphStructureError(f"graphs {bad} have no nodes: every graph needs >= 1 node")
    return n_nodes


class GraphBatch:
    """A batch of undirected pairwise graphs, flattened into one block-diagonal graph.

    Use the constructors :meth:`chains`, :meth:`from_edges`, :meth:`grid` and
    :meth:`from_networkx` rather than ``__init__``.

    Parameters
    ----------
    n_nodes : sequence of int or ndarray (G,)
        Number of nodes of each graph (each at least 1).
    edges : ndarray (E, 2)
        Edges in global node ids, grouped by graph in graph order.
    edge_counts : sequence of int or ndarray (G,)
        Number of edges of each graph; they sum to ``len(edges)``.

    Attributes
    ----------
    n_nodes : ndarray of int64, shape (G,)
        Number of nodes of each graph (each at least 1).
    edges : ndarray of int64, shape (E, 2)
        Edges in global node ids, grouped by graph in graph order.
    node_offsets, edge_offsets : ndarray of int64, shape (G + 1,)
        Graph ``g`` owns nodes ``node_offsets[g]:node_offsets[g+1]`` and likewise edges.
    node_graph, edge_graph : ndarray of int64
        The graph each node / edge belongs to.
    """

    def __init__(self, n_nodes: Sequence[int] | np.ndarray, edges: np.ndarray,
                 edge_counts: Sequence[int] | np.ndarray):
        n_nodes = _node_counts(n_nodes)
        edges = np.asarray(edges, dtype=np.int64).reshape(-1, 2)
        edge_counts = np.asarray(edge_counts, dtype=np.int64)
        if edge_counts.shape != n_nodes.shape or edge_counts.sum() != edges.shape[0]:
            raise GraphStructureError("edge_counts must give one count per graph summing to len(edges)")
        self.n_nodes = n_nodes.astype(np.int64)
        self.node_offsets = np.concatenate([[0], np.cumsum(self.n_nodes)]).astype(np.int64)
        self.edge_offsets = np.concatenate([[0], np.cumsum(edge_counts)]).astype(np.int64)
        self.edges = np.ascontiguousarray(edges)
        self.node_graph = np.repeat(np.arange(self.n_graphs, dtype=np.int64), self.n_nodes)
        self.edge_graph = np.repeat(np.arange(self.n_graphs, dtype=np.int64), edge_counts)
        self._cache: dict[Hashable, Any] = {}
        self._validate()
        for a in (self.n_nodes, self.node_offsets, self.edge_offsets, self.edges,
                  self.node_graph, self.edge_graph):
            a.flags.writeable = False

    # ------------------------------------------------------------------ constructors
    @classmethod
    def chains(cls, lengths: Iterable[int]) -> GraphBatch:
        """Linear chains ``0 - 1 - ... - (n-1)`` of the given lengths (edges ``(i, i+1)`` in order).

        Parameters
        ----------
        lengths : iterable of int
            The number of nodes of each chain (a non-empty 1-d sequence of integers >= 1).

        Returns
        -------
        GraphBatch
            One chain per length.

        Raises
        ------
        GraphStructureError
            When ``lengths`` is empty or not 1-d, or holds a non-integer or a length below 1.
        """
        lengths = np.asarray(list(lengths) if not isinstance(lengths, np.ndarray) else lengths)
        if lengths.ndim != 1 or lengths.size == 0:
            raise GraphStructureError("chains() needs a non-empty 1-d sequence of lengths")
        if not np.issubdtype(lengths.dtype, np.integer):
            raise GraphStructureError(f"chain lengths must be integers, got {lengths.dtype}")
        if (lengths < 1).any():
            raise GraphStructureError(
                f"chain lengths must be >= 1; got {lengths[lengths < 1][:5].tolist()}")
        offsets = np.concatenate([[0], np.cumsum(lengths)])
        starts = np.repeat(offsets[:-1], lengths - 1)
        within = np.arange(int((lengths - 1).sum())) - np.repeat(
            np.concatenate([[0], np.cumsum(lengths - 1)])[:-1], lengths - 1)
        src = starts + within
        edges = np.stack([src, src + 1], axis=1)
        return cls(lengths, edges, lengths - 1)

    @classmethod
    def from_edges(cls, edge_lists: Sequence[Any], n_nodes: Sequence[int]) -> GraphBatch:
        """Graphs from per-graph edge arrays in *local* node ids ``0..n_nodes[g]-1``.

        Parameters
        ----------
        edge_lists : sequence of array_like (E_g, 2)
            The edges of each graph, in its local node ids.
        n_nodes : sequence of int
            The number of nodes of each graph (each >= 1).

        Returns
        -------
        GraphBatch
            The graphs, in the order given.

        Raises
        ------
        GraphStructureError
            When the node counts are not a non-empty 1-d sequence of integers >= 1, there are not
            as many edge lists as node counts, or an edge names a node outside its graph.
        """
        n_nodes = _node_counts(n_nodes)  # before the edges: their range check needs the counts
        if len(edge_lists) != len(n_nodes):
            raise GraphStructureError(
                f"{len(edge_lists)} edge lists but {len(n_nodes)} node counts")
        offsets = np.concatenate([[0], np.cumsum(n_nodes)])
        parts, counts = [], []
        for g, el in enumerate(edge_lists):
            el = _edge_array(el, g)
            if el.size and (el.min() < 0 or el.max() >= n_nodes[g]):
                raise GraphStructureError(
                    f"graph {g}: node id out of range 0..{n_nodes[g] - 1} in its edge list")
            parts.append(el + offsets[g])
            counts.append(len(el))
        edges = np.concatenate(parts) if parts else np.zeros((0, 2), np.int64)
        return cls(n_nodes, edges, counts)

    @classmethod
    def grid(cls, rows: int, cols: int, n_graphs: int = 1) -> GraphBatch:
        """``n_graphs`` copies of a ``rows x cols`` 4-connected grid, nodes in row-major order.

        Parameters
        ----------
        rows, cols : int
            The grid's size (integers >= 1).
        n_graphs : int, default 1
            Number of copies.

        Returns
        -------
        GraphBatch
        """
        rows, cols = whole_number(rows, "grid(): rows"), whole_number(cols, "grid(): cols")
        n_graphs = whole_number(n_graphs, "grid(): n_graphs")
        idx = np.arange(rows * cols).reshape(rows, cols)
        horiz = np.stack([idx[:, :-1].ravel(), idx[:, 1:].ravel()], axis=1)
        vert = np.stack([idx[:-1, :].ravel(), idx[1:, :].ravel()], axis=1)
        local = np.concatenate([horiz, vert])
        return cls.from_edges([local] * n_graphs, [rows * cols] * n_graphs)

    @classmethod
    def from_networkx(cls, graphs: Sequence[nx.Graph] | nx.Graph) -> GraphBatch:
        """Graphs from undirected networkx graphs; nodes are numbered in ``G.nodes`` order.

        Parameters
        ----------
        graphs : networkx.Graph or sequence of them
            Undirected graphs. A ``networkx.MultiGraph`` is taken if it has no parallel edges
            (its edge keys are ignored).

        Returns
        -------
        GraphBatch

        Raises
        ------
        TypeError
            If an item is not a networkx graph.
        GraphStructureError
            For a directed graph (``DiGraph``, ``MultiDiGraph``): CRF graphs are undirected;
            convert with ``G.to_undirected()``. For a multigraph with parallel edges: a pairwise
            CRF has one potential table per node pair; merge them with ``nx.Graph(G)``. And for
            whatever :class:`GraphBatch` refuses (self loops, empty graphs...).

        Notes
        -----
        Each edge is oriented as ``G.edges`` reports it, ``(u, v)``: an edge table's first index
        is the label of ``u``. For a ``networkx.Graph`` ``u`` is the end that comes first in
        ``G.nodes``, whatever order ``add_edge`` was given; use :meth:`from_edges` to choose the
        orientation of each edge.
        """
        if isinstance(graphs, nx.Graph):
            graphs = [graphs]
        edge_lists, n_nodes = [], []
        for g, G in enumerate(graphs):
            if not isinstance(G, nx.Graph):
                raise TypeError(f"graph {g} is a {type(G).__name__}, not a networkx graph")
            if G.is_directed():
                # orientation here only indexes an edge table; a directed input would suggest
                # directed semantics the CRF does not have, so it is refused rather than guessed
                raise GraphStructureError(
                    f"graph {g} is a directed networkx {type(G).__name__}; CRF graphs are "
                    "undirected: pass G.to_undirected() (or use GraphBatch.from_edges to fix "
                    "each edge's orientation)")
            index = {v: i for i, v in enumerate(G.nodes)}
            # G.edges() gives (u, v) pairs for graphs and multigraphs alike (iterating a
            # multigraph's edge view gives (u, v, key) triples)
            pairs = list(G.edges())
            if G.is_multigraph():
                seen: set[frozenset] = set()
                for u, v in pairs:
                    if frozenset((u, v)) in seen:
                        raise GraphStructureError(
                            f"graph {g} is a multigraph with parallel edges between nodes {u!r} "
                            f"and {v!r}; a pairwise CRF has one potential table per node pair: "
                            "merge them with nx.Graph(G)")
                    seen.add(frozenset((u, v)))
            edge_lists.append([(index[u], index[v]) for u, v in pairs])
            n_nodes.append(G.number_of_nodes())
        return cls.from_edges(edge_lists, n_nodes)

    # ------------------------------------------------------------------ sizes
    @property
    def n_graphs(self) -> int:
        return int(self.n_nodes.shape[0])

    @property
    def n_total_nodes(self) -> int:
        return int(self.node_offsets[-1])

    @property
    def n_edges(self) -> int:
        return int(self.edges.shape[0])

    def __len__(self) -> int:
        return self.n_graphs

    def __repr__(self) -> str:
        kinds = {k: int((self.kinds == k).sum()) for k in (CHAIN, TREE, LOOPY)}
        kinds = ", ".join(f"{v} {k}" for k, v in kinds.items() if v)
        return (f"GraphBatch({self.n_graphs} graphs, {self.n_total_nodes} nodes, "
                f"{self.n_edges} edges: {kinds})")

    def _graph_id(self, g) -> int:
        """One graph index, checked as :meth:`graph_ids` checks them (a bool or a fraction is no
        index)."""
        if isinstance(g, bool | np.bool_) or not isinstance(g, numbers.Integral | np.integer):
            raise GraphStructureError(f"a graph index must be an integer; got {g!r}")
        return int(self.graph_ids([g])[0])

    def graph_ids(self, graphs: Sequence[int] | np.ndarray) -> np.ndarray:
        """``graphs`` as int64 ids, each in 0..G-1 (negative ids would slice the offsets wrongly).

        Parameters
        ----------
        graphs : sequence of int or ndarray
            Graph ids.

        Returns
        -------
        ndarray (n,) int64
            The ids, flattened.

        Raises
        ------
        GraphStructureError
            When an id is not an integer or is outside 0..G-1.
        """
        ids = np.asarray(graphs)
        if ids.size and not np.issubdtype(ids.dtype, np.integer):
            raise GraphStructureError(f"graph ids must be integers; got dtype {ids.dtype}")
        ids = ids.astype(np.int64).reshape(-1)
        bad = ids[(ids < 0) | (ids >= self.n_graphs)]
        if bad.size:
            raise GraphStructureError(f"graph id {int(bad[0])} is outside 0..{self.n_graphs - 1}")
        return ids

    @graphs_doc
    def local_edges(self, g: int) -> np.ndarray:
        """Edges of graph ``g`` in local node ids.

        %(graph_parameters)s

        Returns
        -------
        ndarray (E_g, 2)
        """
        g = int(self.graph_ids([g])[0])
        lo, hi = self.edge_offsets[g], self.edge_offsets[g + 1]
        return self.edges[lo:hi] - self.node_offsets[g]

    @graphs_doc
    def to_networkx(self, g: int) -> nx.Graph:
        """Graph ``g`` as a networkx graph on local node ids 0..n-1.

        %(graph_parameters)s

        Returns
        -------
        networkx.Graph
        """
        g = self._graph_id(g)
        G = nx.Graph()
        G.add_nodes_from(range(int(self.n_nodes[g])))
        G.add_edges_from(map(tuple, self.local_edges(g).tolist()))
        return G

    @graphs_doc
    def subset(self, graphs: Sequence[int] | np.ndarray) -> GraphBatch:
        """A new batch made of the listed graphs, in that order.

        %(graphs_parameters)s

        Returns
        -------
        GraphBatch
        """
        graphs = self.graph_ids(graphs)
        sub = GraphBatch.from_edges([self.local_edges(g) for g in graphs], self.n_nodes[graphs])
        # junction trees are keyed by a graph's local structure, so they hold in any batch: the
        # subset need not triangulate again what this batch already did
        for key, value in self._cache.items():
            if isinstance(key, tuple) and key[:1] == ("junction_tree",):
                sub._cache[key] = value
        return sub

    @graphs_doc
    def node_index(self, graphs: Sequence[int] | np.ndarray) -> np.ndarray:
        """Global node ids of the listed graphs (to slice node arrays consistently with `subset`).

        %(graphs_parameters)s

        Returns
        -------
        ndarray int64
            The nodes of each listed graph, graph after graph.
        """
        graphs = self.graph_ids(graphs)
        return np.concatenate([np.arange(self.node_offsets[g], self.node_offsets[g + 1])
                               for g in graphs]) if len(graphs) else np.zeros(0, np.int64)

    @graphs_doc
    def edge_index(self, graphs: Sequence[int] | np.ndarray) -> np.ndarray:
        """Global edge ids of the listed graphs (to slice edge arrays consistently with `subset`).

        %(graphs_parameters)s

        Returns
        -------
        ndarray int64
            The edges of each listed graph, graph after graph.
        """
        graphs = self.graph_ids(graphs)
        return np.concatenate([np.arange(self.edge_offsets[g], self.edge_offsets[g + 1])
                               for g in graphs]) if len(graphs) else np.zeros(0, np.int64)

    # ------------------------------------------------------------------ structure
    def structure_key(self, g: int) -> tuple:
        """A hashable key equal for graphs of identical local structure (used to share caches)."""
        return (int(self.n_nodes[g]), self.local_edges(g).tobytes())

    @cached_property
    def structure_groups(self) -> dict[tuple, np.ndarray]:
        """Graph ids grouped by identical local structure (many batches repeat a few shapes)."""
        groups: dict[tuple, list[int]] = {}
        for g in range(self.n_graphs):
            groups.setdefault(self.structure_key(g), []).append(g)
        return {k: np.asarray(v, dtype=np.int64) for k, v in groups.items()}

    @cached_property
    def kinds(self) -> np.ndarray:
        """Per graph: ``"chain"`` (edges exactly ``(i, i+1)`` in order), ``"tree"`` (a forest that is
        not such a chain) or ``"loopy"``."""
        out = np.empty(self.n_graphs, dtype=object)
        for key, gs in self.structure_groups.items():
            n, _ = key
            local = self.local_edges(int(gs[0]))
            if len(local) == n - 1 and (n == 1 or (
                    np.array_equal(local[:, 0], np.arange(n - 1))
                    and np.array_equal(local[:, 1], np.arange(1, n)))):
                kind = CHAIN
            elif nx.is_forest(self.to_networkx(int(gs[0]))):
                kind = TREE
            else:
                kind = LOOPY
            out[gs] = kind
        return out

    @property
    def is_chain(self) -> bool:
        """True when every graph is a chain in canonical order."""
        return bool((self.kinds == CHAIN).all())

    @property
    def is_forest(self) -> bool:
        return bool((self.kinds != LOOPY).all())

    # ------------------------------------------------------------------ derived-structure cache
    def cached(self, key: Hashable, factory: Callable[[], T]) -> T:
        """The structure cached under ``key``, computed by ``factory()`` on first use.

        The batch is immutable, so anything derived from its structure alone (message layouts,
        colourings, junction trees, compiled index arrays) can be computed once and reused by
        every later call, e.g. every log-density evaluation of a sampler. Keys are tuples whose
        first entry names the module that owns the entry (``("bp", "layout")``), so modules
        never collide.
        """
        if key not in self._cache:
            self._cache[key] = factory()
        return self._cache[key]

    def has_cached(self, key: Hashable) -> bool:
        """Whether :meth:`cached` already holds an entry for ``key``."""
        return key in self._cache

    def junction_tree(self, g: int, heuristic: str = "min_fill") -> JunctionTreeStructure:
        """The junction tree of graph ``g``, computed once per distinct graph shape.

        Parameters
        ----------
        g : int
            Graph index.
        heuristic : {"min_fill", "min_weight"}
            Greedy triangulation heuristic (see
            :func:`~pymc_crf.graphs.junction_tree.elimination_order`).

        Returns
        -------
        JunctionTreeStructure
            Shared (frozen) by every graph of the batch with the same local structure.
        """
        if heuristic not in HEURISTICS:
            raise ValueError(f"unknown triangulation heuristic {heuristic!r}; use one of "
                             f"{HEURISTICS}")
        g = self._graph_id(g)
        return self.cached(
            ("junction_tree", heuristic, self.structure_key(g)),
            lambda: junction_tree_from_edges(int(self.n_nodes[g]), self.local_edges(g), heuristic))

    def treewidth(self, heuristic: str = "min_fill", limit: int | None = None) -> np.ndarray:
        """Treewidth per graph of its triangulation (an upper bound, exact on trees and small grids).

        Parameters
        ----------
        heuristic : {"min_fill", "min_weight"}
        limit : int, optional
            Only decide whether each width is <= ``limit``: the elimination of a shape stops as
            soon as it exceeds the limit (unless its junction tree is already cached), and such
            graphs report the width reached at that point, a value > ``limit`` but not
            necessarily the full width. Graphs within the limit get their junction tree built and
            cached as usual.

        Returns
        -------
        ndarray of int64, shape (G,)
        """
        if heuristic not in HEURISTICS:
            raise ValueError(f"unknown triangulation heuristic {heuristic!r}; use one of "
                             f"{HEURISTICS}")
        if limit is not None:
            limit = whole_number(limit, "treewidth limit", minimum=0)
        out = np.empty(self.n_graphs, dtype=np.int64)
        # widths of shapes whose elimination stopped above some limit (a lower bound on the width)
        over: dict[tuple, int] = self.cached(("treewidth_over_limit", heuristic), dict)
        for key, gs in self.structure_groups.items():
            g = int(gs[0])
            if limit is not None and not self.has_cached(("junction_tree", heuristic, key)):
                known = over.get(key)
                if known is not None and known > limit:
                    out[gs] = known
                    continue
                _, elim = elimination_order(int(self.n_nodes[g]), self.local_edges(g), heuristic,
                                            stop_above=limit)
                width = max(len(c) for c in elim) - 1
                if width > limit:
                    over[key] = max(width, over.get(key, width))
                    out[gs] = width
                    continue
            out[gs] = self.junction_tree(g, heuristic).treewidth
        return out

    def treewidth_is_exact(self, g: int, heuristic: str = "min_fill") -> bool:
        """Whether :meth:`treewidth` gave graph ``g`` its full width (its junction tree was built)
        rather than the width at which a ``limit`` stopped the elimination."""
        return self.has_cached(("junction_tree", heuristic, self.structure_key(g)))

    # ------------------------------------------------------------------ validation
    def _validate(self) -> None:
        e = self.edges
        if e.shape[0] == 0:
            return
        if e.min() < 0 or e.max() >= self.n_total_nodes:
            raise GraphStructureError(
                f"edge node ids must lie in 0..{self.n_total_nodes - 1}; got "
                f"min {int(e.min())}, max {int(e.max())}")
        g0, g1 = self.node_graph[e[:, 0]], self.node_graph[e[:, 1]]
        if not (np.array_equal(g0, self.edge_graph) and np.array_equal(g1, self.edge_graph)):
            bad = int(np.flatnonzero((g0 != self.edge_graph) | (g1 != self.edge_graph))[0])
            raise GraphStructureError(
                f"edge {bad} {e[bad].tolist()} joins nodes outside its own graph "
                f"{int(self.edge_graph[bad])}")
        loops = np.flatnonzero(e[:, 0] == e[:, 1])
        if loops.size:
            g = int(self.edge_graph[loops[0]])
            raise GraphStructureError(
                f"graph {g} has a self loop on node {int(e[loops[0], 0] - self.node_offsets[g])}")
        lo, hi = np.minimum(e[:, 0], e[:, 1]), np.maximum(e[:, 0], e[:, 1])
        key = lo * self.n_total_nodes + hi
        uniq, first, counts = np.unique(key, return_index=True, return_counts=True)
        if (counts > 1).any():
            dup = int(first[np.flatnonzero(counts > 1)[0]])
            g = int(self.edge_graph[dup])
            a, b = (e[dup] - self.node_offsets[g]).tolist()
            raise GraphStructureError(
                f"graph {g} has a duplicate edge between local nodes {a} and {b} "
                "(pairwise CRFs take one table per node pair)")

    # ------------------------------------------------------------------ data checks
    def check_labels(self, labels: Any, n_labels: int | None = None) -> np.ndarray:
        """Flatten and validate labels (one per node).

        Parameters
        ----------
        labels : array_like (N,) or list of per-graph sequences
            One label per node, flat (all graphs stacked) or one sequence per graph.
        n_labels : int, optional
            When given, every label must be in 0..n_labels-1.

        Returns
        -------
        ndarray (N,) int64

        Raises
        ------
        ValueError
            When the labels do not give one per node (a per-graph sequence that is not 1-d
            included: an image's mask must be flattened in the graph's node order), are not
            class indices (integers,
            booleans or whole-valued floats: NaN, inf and fractions are refused), or one is
            outside 0..n_labels-1.
        """
        if isinstance(labels, list | tuple) and len(labels) and np.ndim(labels[0]) >= 1:
            for g, x in enumerate(labels):
                if np.ndim(x) != 1:
                    # an image's (rows, cols) mask: numpy's "inhomogeneous shape" error for
                    # images of different sizes, or a row count read as a label count, would
                    # not say that the node order is the caller's to give
                    raise ValueError(
                        f"labels: graph {g}'s labels have shape {np.shape(x)}; give one flat "
                        "sequence per graph in its node order (for GraphBatch.grid and "
                        "networkx.grid_2d_graph, row-major: mask.ravel())")
            lens = np.array([len(x) for x in labels])
            if len(labels) != self.n_graphs or not np.array_equal(lens, self.n_nodes):
                bad = next((g for g in range(min(len(labels), self.n_graphs))
                            if lens[g] != self.n_nodes[g]), None)
                raise ValueError(
                    f"labels: got {len(labels)} label sequences for {self.n_graphs} graphs"
                    if bad is None else
                    f"labels: graph {bad} has {self.n_nodes[bad]} nodes but {lens[bad]} labels")
            labels = np.concatenate([np.asarray(x) for x in labels])
        arr = np.asarray(labels)
        if arr.shape != (self.n_total_nodes,):
            raise ValueError(f"labels must have one entry per node, shape ({self.n_total_nodes},); "
                             f"got shape {arr.shape}")
        arr = class_indices(arr, "labels", self._locate_node)
        if n_labels is not None and arr.size and (arr.min() < 0 or arr.max() >= n_labels):
            i = int(np.flatnonzero((arr < 0) | (arr >= n_labels))[0])
            raise ValueError(f"label {int(arr[i])} at {self._locate_node((i,))} is outside "
                             f"0..{n_labels - 1}")
        return arr

    def _locate_node(self, idx: tuple[int]) -> str:
        """Words for flat node ``idx[0]``: its local index and graph."""
        g = int(self.node_graph[idx[0]])
        return f"node {idx[0] - int(self.node_offsets[g])} of graph {g}"

    def check_features(self, x: Any, where: str) -> Any:
        """Validate node (``where="node"``) or edge features: 2-d, one row per node/edge, finite.

        Parameters
        ----------
        x : array_like or scipy.sparse matrix
            The features, one row per node (``where="node"``) or edge.
        where : str
            ``"node"`` for node features; anything else checks edge features.

        Returns
        -------
        ndarray or scipy.sparse.csr_matrix
            Dense input comes back as a float64 array; a ``scipy.sparse`` matrix or array comes
            back as a float64 CSR matrix with sorted indices (never densified), so feature
            products stay sparse.

        Raises
        ------
        ValueError
            When the features are not real numbers, not 2-d with one row per node / edge, or
            not finite.
        """
        rows = self.n_total_nodes if where == "node" else self.n_edges
        # numpy reads complex numbers as floats by dropping the imaginary part (a warning only)
        # and numeric strings as their numbers: both refused, not read silently
        dtype = getattr(x, "dtype", None)
        if dtype is None and not scipy.sparse.issparse(x):
            try:
                dtype = np.asarray(x).dtype
            except (TypeError, ValueError):
                dtype = None  # ragged: refused below with numpy's reason
        if isinstance(dtype, np.dtype) and dtype.kind in "cUSMmV":
            raise ValueError(f"{where} features must be real numbers (a float, int or bool "
                             f"array, or a scipy.sparse matrix of them); got dtype {dtype}")
        if scipy.sparse.issparse(x):
            if x.ndim != 2 or x.shape[0] != rows:
                raise ValueError(f"sparse {where} features must have shape ({rows}, n_features) "
                                 f"(one row per {where}); got {x.shape}")
            csr = scipy.sparse.csr_matrix(x, dtype=np.float64)
            if not np.isfinite(csr.data).all():
                bad = int(np.flatnonzero(~np.isfinite(csr.data))[0])
                row = int(np.searchsorted(csr.indptr, bad, side="right") - 1)
                raise ValueError(f"sparse {where} features contain NaN or inf (first at row {row})")
            return csr if csr.has_sorted_indices else csr.sorted_indices()
        try:
            arr = np.asarray(x, dtype=np.float64)
        except (TypeError, ValueError) as err:
            # ragged lists, strings, symbolic tensors...: numpy's own message ("setting an array
            # element with a sequence") does not say which input was wrong
            raise ValueError(f"{where} features must be a numeric array or a scipy.sparse "
                             f"matrix; got a {type(x).__name__} that numpy cannot read as "
                             f"floats ({err})") from err
        if arr.ndim == 1:
            arr = arr[:, None]
        if arr.ndim != 2 or arr.shape[0] != rows:
            raise ValueError(f"{where} features must have shape ({rows}, n_features) "
                             f"(one row per {where}); got {np.shape(x)}")
        if not np.isfinite(arr).all():
            raise ValueError(f"{where} features contain NaN or inf "
                             f"(first at row {int(np.flatnonzero(~np.isfinite(arr).all(1))[0])})")
        return arr


def as_graph_batch(graphs: Any) -> GraphBatch:
    """``graphs`` as a :class:`GraphBatch`: a batch itself, or one networkx graph, or a list of them
    (:meth:`GraphBatch.from_networkx`, nodes numbered in ``G.nodes`` order).

    Raises
    ------
    TypeError
        For anything else, naming what was given.
    """
    if isinstance(graphs, GraphBatch):
        return graphs
    if isinstance(graphs, nx.Graph):
        return GraphBatch.from_networkx(graphs)
    if isinstance(graphs, list | tuple) and graphs:
        bad = next((i for i, g in enumerate(graphs) if not isinstance(g, nx.Graph)), None)
        if bad is None:
            return GraphBatch.from_networkx(list(graphs))
        raise TypeError(f"graphs[{bad}] is a {type(graphs[bad]).__name__}; a list of graphs must "
                        "hold networkx graphs only (or build a GraphBatch)")
    raise TypeError(f"graphs must be a GraphBatch, a networkx graph or a non-empty list of "
                    f"networkx graphs; got {type(graphs).__name__}")
