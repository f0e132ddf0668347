"""Neighbourhood structure of a batch for local-update engines (BP, mean field, Gibbs).

Every undirected edge ``e = (u, v)`` gives two directed slots: ``d = 2e`` (``u -> v``) and
``d = 2e + 1`` (``v -> u``); the reverse of ``d`` is ``d ^ 1``. Message passing keeps one message per
slot; mean field and Gibbs read a node's neighbours through the slots entering it. The colouring
splits every graph into classes of mutually non-adjacent nodes, so a class can be updated as one
exact block (Gibbs, mean field).

Both depend on the structure only and are cached on the batch (:meth:`GraphBatch.cached`), so a
sampler calling an engine thousands of times on one batch derives them once.
"""

from __future__ import annotations

from typing import NamedTuple

import networkx as nx
import numpy as np

from pymc_crf.graphs.batch import GraphBatch

__all__ = ["MessageLayout", "colour_classes", "message_layout"]


class MessageLayout(NamedTuple):
    """Directed-slot layout of a batch.

    ``src``/``dst``/``edge`` per slot, ``flip[d]`` true when ``src`` is ``edges[e, 1]`` (so the
    edge table is read transposed), ``in_ptr``/``in_idx`` the CSR list of slots entering each
    node, ``graph`` the graph of each slot, ``degree`` the node degrees, and ``order`` the
    sequential schedule: forward slots in edge order, then reverse ones backwards (on chains,
    exactly forward-backward).
    """

    src: np.ndarray
    dst: np.ndarray
    edge: np.ndarray
    flip: np.ndarray
    in_ptr: np.ndarray
    in_idx: np.ndarray
    graph: np.ndarray
    degree: np.ndarray
    order: np.ndarray


def _message_layout(batch: GraphBatch) -> MessageLayout:
    E = batch.n_edges
    d = np.arange(2 * E, dtype=np.int64)
    edge = d // 2
    flip = (d % 2).astype(np.bool_)
    src = np.where(flip, batch.edges[edge, 1], batch.edges[edge, 0]).astype(np.int64)
    dst = np.where(flip, batch.edges[edge, 0], batch.edges[edge, 1]).astype(np.int64)
    in_idx = np.argsort(dst, kind="stable").astype(np.int64)
    degree = np.bincount(dst, minlength=batch.n_total_nodes).astype(np.int64)
    in_ptr = np.concatenate([[0], np.cumsum(degree)]).astype(np.int64)
    order = np.concatenate([2 * np.arange(E), 2 * np.arange(E)[::-1] + 1]).astype(np.int64)
    return MessageLayout(src, dst, edge, flip, in_ptr, in_idx,
                         batch.edge_graph[edge].astype(np.int64), degree, order)


def message_layout(batch: GraphBatch) -> MessageLayout:
    """The directed-slot layout of ``batch`` (computed once and cached on the batch)."""
    return batch.cached(("adjacency", "message_layout"), lambda: _message_layout(batch))


def _colour_classes(batch: GraphBatch) -> tuple[np.ndarray, np.ndarray]:
    colour = np.empty(batch.n_total_nodes, np.int64)
    for gs in batch.structure_groups.values():
        col = nx.greedy_color(batch.to_networkx(int(gs[0])), strategy="largest_first")
        local = np.array([col[i] for i in range(int(batch.n_nodes[gs[0]]))], np.int64)
        colour[batch.node_index(gs)] = np.tile(local, len(gs))
    order = np.argsort(colour, kind="stable").astype(np.int64)
    ptr = np.concatenate([[0], np.cumsum(np.bincount(colour))]).astype(np.int64)
    return order, ptr


def colour_classes(batch: GraphBatch) -> tuple[np.ndarray, np.ndarray]:
    """Global node ids sorted by colour class, and the class pointer (cached on the batch).

    Each graph is greedily coloured (``largest_first``, once per distinct shape) so that no two
    neighbours share a colour. Returns ``(order, ptr)``: the nodes of class ``c`` (across all
    graphs) are ``order[ptr[c]:ptr[c+1]]``.
    """
    return batch.cached(("adjacency", "colour_classes"), lambda: _colour_classes(batch))
