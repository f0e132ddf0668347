import networkx as nx
import numpy as np
import pytest

from pymc_crf import GraphBatch, GraphStructureError


def test_chains_layout():
    b = GraphBatch.chains([3, 1, 2])
    assert b.n_graphs == 3 and b.n_total_nodes == 6 and b.n_edges == 3
    assert b.edges.tolist() == [[0, 1], [1, 2], [4, 5]]
    assert b.node_graph.tolist() == [0, 0, 0, 1, 2, 2]
    assert b.edge_graph.tolist() == [0, 0, 2]
    assert b.node_offsets.tolist() == [0, 3, 4, 6] and b.edge_offsets.tolist() == [0, 2, 2, 3]
    assert list(b.kinds) == ["chain"] * 3 and b.is_chain


def test_kinds_tree_loop_forest():
    b = GraphBatch.from_edges([[(0, 1), (0, 2)], [(0, 1), (1, 2), (2, 0)], [(0, 1)], [(1, 0)]],
                              [3, 3, 4, 2])
    assert list(b.kinds) == ["tree", "loopy", "tree", "tree"]  # reversed edge is not canonical
    assert not b.is_chain and not b.is_forest


def test_grid_and_networkx_roundtrip():
    g = GraphBatch.grid(3, 4, n_graphs=2)
    assert g.n_total_nodes == 24 and g.n_edges == 2 * (3 * 3 + 2 * 4)
    G = g.to_networkx(1)
    assert nx.is_isomorphic(G, nx.grid_2d_graph(3, 4))
    b = GraphBatch.from_networkx([nx.cycle_graph(5), nx.path_graph(3)])
    assert list(b.kinds) == ["loopy", "chain"]
    assert list(b.treewidth()) == [2, 1]


def test_subset_and_indices():
    b = GraphBatch.from_edges([[(0, 1)], [(0, 1), (1, 2), (0, 2)], []], [2, 3, 1])
    s = b.subset([2, 1])
    assert s.n_nodes.tolist() == [1, 3] and s.n_edges == 3
    assert b.node_index([2, 1]).tolist() == [5, 2, 3, 4]
    assert b.edge_index([1]).tolist() == [1, 2, 3]
    assert GraphBatch.from_edges([[(0.0, 1.0)]], [2]).edges.tolist() == [[0, 1]]
    for bad in ([-1], [3], [0.5]):
        with pytest.raises(GraphStructureError, match="graph id"):
            b.subset(bad)
        with pytest.raises(GraphStructureError, match="graph id"):
            b.node_index(bad)


def test_structure_groups_share_shapes():
    b = GraphBatch.chains([3] * 5 + [4] * 2)
    assert sorted(len(v) for v in b.structure_groups.values()) == [2, 5]


@pytest.mark.parametrize("edges,n,msg", [
    ([[(0, 0)]], [2], "self loop"),
    ([[(0, 1), (1, 0)]], [2], "duplicate edge"),
    ([[(0, 1), (0, 1)]], [2], "duplicate edge"),
    ([[(0, 5)]], [3], "out of range"),
    ([[]], [0], "no nodes"),
    ([[(0.5, 1)]], [2], "whole numbers; got 0.5"),
    ([[(0, 1, 2)]], [3], r"pairs, shape \(E, 2\)"),
])
def test_invalid_graphs(edges, n, msg):
    with pytest.raises(GraphStructureError, match=msg):
        GraphBatch.from_edges(edges, n)


def test_invalid_constructors():
    with pytest.raises(GraphStructureError, match="no nodes|>= 1"):
        GraphBatch.chains([3, 0])
    with pytest.raises(GraphStructureError, match="at least one graph|non-empty"):
        GraphBatch.chains([])
    with pytest.raises(GraphStructureError, match="outside its own graph"):
        GraphBatch(np.array([2, 2]), np.array([[1, 2]]), [1, 0])
    with pytest.raises(GraphStructureError, match="directed"):
        GraphBatch.from_networkx([nx.DiGraph([(0, 1)])])


def test_graph_indices_and_limits_are_checked():
    b = GraphBatch.chains([2, 3])
    for g in (-1, 5):
        with pytest.raises(GraphStructureError, match=f"graph id {g} is outside 0..1"):
            b.to_networkx(g)
    for g in (1.5, True):
        with pytest.raises(GraphStructureError, match="a graph index must be an integer"):
            b.junction_tree(g)
    for limit in (2.5, -3):
        with pytest.raises(ValueError, match="treewidth limit must be an integer >= 0"):
            b.treewidth(limit=limit)
    assert b.junction_tree(np.int64(1)).treewidth == 1


def test_from_networkx_multigraphs_and_directed_graphs():
    # a multigraph's edge view gives (u, v, key) triples; parallel edges are refused by name,
    # not with "too many values to unpack (expected 2)"
    with pytest.raises(GraphStructureError,
                       match=r"graph 1 is a multigraph with parallel edges between nodes 'a' and "
                             r"'b'.*nx.Graph\(G\)"):
        GraphBatch.from_networkx([nx.path_graph(2), nx.MultiGraph([("a", "b"), ("b", "a")])])
    # without parallel edges a multigraph is just a graph
    multi = GraphBatch.from_networkx(nx.MultiGraph([(0, 1), (1, 2), (2, 0)]))
    plain = GraphBatch.from_networkx(nx.Graph([(0, 1), (1, 2), (2, 0)]))
    np.testing.assert_array_equal(multi.edges, plain.edges)
    assert list(multi.kinds) == ["loopy"]
    for directed in (nx.DiGraph([(0, 1)]), nx.MultiDiGraph([(0, 1)])):
        with pytest.raises(GraphStructureError, match=r"directed .*to_undirected\(\)"):
            GraphBatch.from_networkx(directed)
    with pytest.raises(TypeError, match="graph 1 is a list, not a networkx graph"):
        GraphBatch.from_networkx([nx.path_graph(2), [(0, 1)]])
    # edge orientation follows G.edges: the end first in G.nodes, whatever add_edge was given
    G = nx.Graph()
    G.add_nodes_from(["x", "y"])
    G.add_edge("y", "x")
    assert GraphBatch.from_networkx(G).edges.tolist() == [[0, 1]]


def test_label_and_feature_checks():
    b = GraphBatch.chains([2, 3])
    assert b.check_labels([[0, 1], [1, 1, 0]], 2).tolist() == [0, 1, 1, 1, 0]
    with pytest.raises(ValueError, match="graph 1 has 3 nodes but 2 labels"):
        b.check_labels([[0, 1], [1, 1]], 2)
    with pytest.raises(ValueError, match="outside 0..1"):
        b.check_labels([0, 1, 2, 0, 0], 2)
    with pytest.raises(ValueError, match="shape"):
        b.check_labels([0, 1, 1], 2)
    with pytest.raises(ValueError, match="NaN"):
        b.check_labels(np.array([0, 1, np.nan, 0, 0]), 2)
    with pytest.raises(ValueError, match="NaN or inf"):
        b.check_features(np.array([[0.0], [np.inf], [1], [1], [1]]), "node")
    with pytest.raises(ValueError, match="one row per node"):
        b.check_features(np.zeros((4, 2)), "node")
    # ragged rows are named, not numpy's "setting an array element with a sequence"
    with pytest.raises(ValueError, match="edge features must be a numeric array .* got a list"):
        b.check_features([[0.0], [1.0, 2.0], [0.0]], "edge")


def test_per_graph_image_masks_are_refused_with_the_node_order_to_use():
    # images of different sizes: numpy's "inhomogeneous shape" error said nothing of the layout
    b = GraphBatch.from_networkx([nx.grid_2d_graph(3, 3), nx.grid_2d_graph(3, 4)])
    masks = [np.eye(3, dtype=int), np.ones((3, 4), int)]
    for labels in (masks, [masks[0].ravel(), masks[1]]):
        with pytest.raises(ValueError, match=r"graph \d's labels have shape \(3, \d\).*ravel"):
            b.check_labels(labels, 2)
    assert b.check_labels([m.ravel() for m in masks], 2).tolist() == [1, 0, 0, 0, 1, 0, 0, 0, 1] + [1] * 12


def test_cached_computes_once_per_key():
    b = GraphBatch.grid(2, 2)
    calls = []

    def factory():
        calls.append(1)
        return object()

    assert not b.has_cached(("test", 1))
    first = b.cached(("test", 1), factory)
    assert b.cached(("test", 1), factory) is first and len(calls) == 1
    assert b.has_cached(("test", 1))
    assert b.cached(("test", 2), factory) is not first and len(calls) == 2


def test_junction_tree_and_treewidth_are_cached_per_shape():
    b = GraphBatch.grid(3, 3, n_graphs=3)
    assert b.junction_tree(2) is b.junction_tree(0)
    assert b.treewidth_is_exact(1)
    big = GraphBatch.grid(12, 12)
    assert big.treewidth(limit=3)[0] > 3 and not big.treewidth_is_exact(0)
    with pytest.raises(ValueError, match="outside 0..2"):
        b.junction_tree(3)
    with pytest.raises(ValueError, match="heuristic"):
        b.treewidth("greedy")


def test_message_layout_lists_every_directed_edge_once():
    from pymc_crf.graphs.adjacency import message_layout

    b = GraphBatch.from_edges([[(0, 1), (2, 1), (0, 2)], [], [(1, 0)]], [3, 1, 2])
    st = message_layout(b)
    assert message_layout(b) is st
    E = b.n_edges
    for d in range(2 * E):
        u, v = b.edges[d // 2]
        assert (st.src[d], st.dst[d]) == ((u, v) if d % 2 == 0 else (v, u))
        assert st.flip[d] == (d % 2 == 1) and st.graph[d] == b.edge_graph[d // 2]
    for i in range(b.n_total_nodes):
        into = sorted(st.in_idx[st.in_ptr[i]:st.in_ptr[i + 1]].tolist())
        assert into == [d for d in range(2 * E) if st.dst[d] == i]
        assert st.degree[i] == len(into)
    assert sorted(st.order.tolist()) == list(range(2 * E))


def test_colour_classes_are_proper_and_cover_every_node():
    from pymc_crf.graphs.adjacency import colour_classes

    b = GraphBatch.from_networkx([nx.grid_2d_graph(3, 3), nx.complete_graph(4), nx.path_graph(3)])
    order, ptr = colour_classes(b)
    assert np.array_equal(np.sort(order), np.arange(b.n_total_nodes))
    colour = np.empty(b.n_total_nodes, int)
    for c in range(len(ptr) - 1):
        colour[order[ptr[c]:ptr[c + 1]]] = c
    assert (colour[b.edges[:, 0]] != colour[b.edges[:, 1]]).all()
    assert len(ptr) - 1 == 4  # K4 needs four colours, and greedy largest-first finds four
