"""Junction trees of pairwise graphs: triangulation by elimination, maximal cliques, clique tree.

A graph is triangulated by eliminating its vertices one at a time in a greedy order (min-fill or
min-weight): eliminating ``v`` joins all its remaining neighbours pairwise (the "fill" edges) and
records the elimination clique ``{v} | N(v)``. The maximal elimination cliques of the resulting
chordal graph, joined by a maximum-weight spanning tree on separator sizes, form a junction tree
(Jensen & Jensen 1994): every variable's cliques form a connected subtree (the running-intersection
property), so the joint factorises as clique marginals over separator marginals (Qi 2005, eq. (3.2)).

Disconnected graphs give a forest of clique trees, one per connected component (separators of size
0 are never used as tree edges). The structure depends only on the graph's shape: this module works
on one shape in local node ids, and :meth:`GraphBatch.junction_tree` caches one structure per
distinct shape of a batch.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:  # annotations only: batch.py builds on this module, never the reverse
    from pymc_crf.graphs.batch import GraphBatch

__all__ = ["HEURISTICS", "JunctionTreeStructure", "elimination_order", "junction_tree",
           "junction_tree_from_edges", "treewidth"]

HEURISTICS = ("min_fill", "min_weight")


@dataclass(frozen=True)
class JunctionTreeStructure:
    """The clique forest of one graph shape (local node ids ``0..n_nodes-1``).

    Attributes
    ----------
    n_nodes : int
        Number of nodes of the graph.
    cliques : tuple of tuple of int
        Maximal cliques of the triangulated graph in *topological order* (every clique comes after
        its parent). Within a non-root clique the separator variables come first (sorted), then the
        others (sorted); a root clique is sorted. The engines rely on this variable order.
    parent : tuple of int
        Parent clique of each clique, ``-1`` for the root of each connected component.
    separators : tuple of tuple of int
        ``cliques[c] & cliques[parent[c]]`` in the order it appears in ``cliques[c]`` (empty for
        roots).
    node_clique : tuple of int
        For each node, the smallest clique containing it (where its potential is multiplied in).
    edge_clique : tuple of int
        For each local edge (in the batch's edge order), the smallest clique containing both ends.
    treewidth : int
        Largest clique size minus one (of this triangulation: an upper bound on the true treewidth).
    elimination_order : tuple of int
        The vertex elimination order that produced the triangulation.
    """

    n_nodes: int
    cliques: tuple[tuple[int, ...], ...]
    parent: tuple[int, ...]
    separators: tuple[tuple[int, ...], ...]
    node_clique: tuple[int, ...]
    edge_clique: tuple[int, ...]
    treewidth: int
    elimination_order: tuple[int, ...]

    @property
    def n_cliques(self) -> int:
        return len(self.cliques)

    @property
    def roots(self) -> tuple[int, ...]:
        return tuple(c for c, p in enumerate(self.parent) if p < 0)


# ---------------------------------------------------------------------------- elimination
def _score(adj: list[set[int]], v: int, heuristic: str) -> tuple[int, int]:
    """Greedy cost of eliminating ``v``: (primary, tie-break), smaller is better."""
    nb = adj[v]
    fill = 0
    if heuristic == "min_fill" or len(nb) < 64:
        nbl = list(nb)
        for i, a in enumerate(nbl):
            na = adj[a]
            for b in nbl[i + 1:]:
                if b not in na:
                    fill += 1
    if heuristic == "min_fill":
        return fill, len(nb)
    # min_weight: weight of the elimination clique = prod of its label counts; with one label count
    # K for every node that is K ** (deg + 1), so the order is by degree (then by fill).
    return len(nb), fill


def elimination_order(n_nodes: int, edges: np.ndarray, heuristic: str = "min_fill",
                      stop_above: int | None = None) -> tuple[list[int], list[tuple[int, ...]]]:
    """Greedy elimination order and the elimination cliques it produces.

    Parameters
    ----------
    n_nodes : int
        Number of nodes (local ids ``0..n_nodes-1``).
    edges : ndarray (E, 2)
        Undirected edges in local ids.
    heuristic : {"min_fill", "min_weight"}
        ``min_fill`` eliminates the vertex adding the fewest fill edges (ties: fewest neighbours);
        ``min_weight`` the vertex with the smallest elimination clique table (ties: least fill).
        Remaining ties go to the smallest node id, so the result is deterministic.
    stop_above : int, optional
        Stop as soon as an elimination clique has more than ``stop_above + 1`` nodes (the
        triangulation's width is then known to exceed ``stop_above``); the returned lists are then
        partial. Saves the full elimination of big graphs that are over a treewidth limit anyway.

    Returns
    -------
    order : list of int
        Vertices in elimination order.
    cliques : list of tuple of int
        The elimination clique ``{v} | N(v)`` (sorted) of each eliminated vertex, in the same order.
    """
    if heuristic not in HEURISTICS:
        raise ValueError(f"unknown triangulation heuristic {heuristic!r}; use one of {HEURISTICS}")
    adj: list[set[int]] = [set() for _ in range(n_nodes)]
    for u, v in np.asarray(edges, dtype=np.int64).reshape(-1, 2).tolist():
        adj[u].add(v)
        adj[v].add(u)
    alive = [True] * n_nodes
    score = [_score(adj, v, heuristic) for v in range(n_nodes)]
    # A heap of (score, node) with lazy deletion: an entry is stale once its node is eliminated
    # or rescored; the live minimum is the same (score, id) minimum as a full scan.
    heap = [(score[v], v) for v in range(n_nodes)]
    heapq.heapify(heap)
    order: list[int] = []
    cliques: list[tuple[int, ...]] = []
    while heap:
        sc, v = heapq.heappop(heap)
        if not alive[v] or sc != score[v]:
            continue
        nb = adj[v]
        order.append(v)
        cliques.append(tuple(sorted(nb | {v})))
        if stop_above is not None and len(nb) > stop_above:
            break
        # Join the neighbours pairwise (fill edges), then drop v.
        nbl = list(nb)
        for a in nbl:
            adj[a].update(nb)
            adj[a].discard(a)
            adj[a].discard(v)
        alive[v] = False
        adj[v] = set()
        # Only the neighbours and their neighbours can change score (a fill edge a-b changes the
        # fill count of every common neighbour of a and b).
        touched = set(nbl)
        for a in nbl:
            touched |= adj[a]
        for w in touched:
            new = _score(adj, w, heuristic)
            if new != score[w]:
                score[w] = new
                heapq.heappush(heap, (new, w))
    return order, cliques


def _maximal(cliques: list[tuple[int, ...]]) -> list[tuple[int, ...]]:
    """Drop elimination cliques contained in another one (keeps first-seen order)."""
    sets = [frozenset(c) for c in cliques]
    # Larger cliques first, so a clique is only tested against those that could contain it.
    idx = sorted(range(len(sets)), key=lambda i: -len(sets[i]))
    kept: list[int] = []
    for i in idx:
        if not any(sets[i] <= sets[j] for j in kept):
            kept.append(i)
    return [cliques[i] for i in sorted(kept)]


def _spanning_forest(cliques: list[tuple[int, ...]]) -> list[tuple[int, int]]:
    """Maximum-weight spanning forest on separator sizes (Kruskal with union-find)."""
    sets = [set(c) for c in cliques]
    m = len(cliques)
    cand = []
    for i in range(m):
        for j in range(i + 1, m):
            w = len(sets[i] & sets[j])
            if w:
                cand.append((-w, i, j))
    cand.sort()
    root = list(range(m))

    def find(x: int) -> int:
        while root[x] != x:
            root[x] = root[root[x]]
            x = root[x]
        return x

    tree = []
    for _, i, j in cand:
        ri, rj = find(i), find(j)
        if ri != rj:
            root[ri] = rj
            tree.append((i, j))
    return tree


def junction_tree_from_edges(n_nodes: int, edges: np.ndarray,
                             heuristic: str = "min_fill") -> JunctionTreeStructure:
    """Build the :class:`JunctionTreeStructure` of one graph given in local ids."""
    edges = np.asarray(edges, dtype=np.int64).reshape(-1, 2)
    order, elim = elimination_order(n_nodes, edges, heuristic)
    cl = _maximal(elim)
    tree = _spanning_forest(cl)
    m = len(cl)
    nbrs: list[list[int]] = [[] for _ in range(m)]
    for i, j in tree:
        nbrs[i].append(j)
        nbrs[j].append(i)
    # Root each component at its largest clique (ties: first), then breadth-first order, so that
    # parents precede children and the upward pass is a reverse sweep.
    parent_old = [-2] * m
    topo: list[int] = []
    for r in sorted(range(m), key=lambda c: (-len(cl[c]), c)):
        if parent_old[r] != -2:
            continue
        parent_old[r] = -1
        queue = [r]
        while queue:
            c = queue.pop(0)
            topo.append(c)
            for d in sorted(nbrs[c]):
                if parent_old[d] == -2:
                    parent_old[d] = c
                    queue.append(d)
    new_id = {old: new for new, old in enumerate(topo)}
    cliques, parent, seps = [], [], []
    for old in topo:
        p = parent_old[old]
        if p < 0:
            cliques.append(tuple(sorted(cl[old])))
            parent.append(-1)
            seps.append(())
        else:
            sep = tuple(sorted(set(cl[old]) & set(cl[p])))
            rest = tuple(sorted(set(cl[old]) - set(sep)))
            cliques.append(sep + rest)
            parent.append(new_id[p])
            seps.append(sep)
    sizes = [len(c) for c in cliques]
    # Home cliques: the smallest clique holding the node / both edge ends (smallest table to sum).
    containing: list[list[int]] = [[] for _ in range(n_nodes)]
    for c, cq in enumerate(cliques):
        for v in cq:
            containing[v].append(c)
    node_clique = tuple(min(containing[v], key=lambda c: (sizes[c], c)) for v in range(n_nodes))
    edge_clique = []
    for u, v in edges.tolist():
        both = set(containing[u]) & set(containing[v])
        edge_clique.append(min(both, key=lambda c: (sizes[c], c)))
    return JunctionTreeStructure(
        n_nodes=int(n_nodes), cliques=tuple(cliques), parent=tuple(parent),
        separators=tuple(seps), node_clique=node_clique, edge_clique=tuple(edge_clique),
        treewidth=max(sizes) - 1, elimination_order=tuple(order))


def junction_tree(batch: GraphBatch, g: int, heuristic: str = "min_fill") -> JunctionTreeStructure:
    """The junction tree of graph ``g`` of ``batch`` (the same as ``batch.junction_tree(g)``),
    computed once per distinct graph shape."""
    return batch.junction_tree(g, heuristic)


def treewidth(batch: GraphBatch, heuristic: str = "min_fill",
              limit: int | None = None) -> np.ndarray:
    """Treewidth of each graph's triangulation (the same as ``batch.treewidth(heuristic, limit)``,
    see :meth:`GraphBatch.treewidth`)."""
    return batch.treewidth(heuristic, limit)
