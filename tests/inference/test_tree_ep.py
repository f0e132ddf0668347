"""TreeEP: exact on trees and single loops, better than BP on loopy graphs, clear errors."""

import warnings

import networkx as nx
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pymc_crf.graphs.batch import GraphBatch
from pymc_crf.inference.bp import BeliefPropagation, ConvergenceWarning
from pymc_crf.inference.brute_force import BruteForce
from pymc_crf.inference.tree_ep import TreeEP, edge_mutual_information, spanning_tree


def _potentials(b, K, rng, scale=1.0, shared=False):
    node = rng.normal(0, 1, (b.n_total_nodes, K))
    edge = rng.normal(0, scale, (1 if shared else b.n_edges, K, K))
    return node, edge


def _two_loops_one_graph():
    # one graph made of two disjoint cycles plus a pendant tree: a spanning *forest* with two
    # off-tree edges in different components
    edges = [(0, 1), (1, 2), (2, 3), (3, 0), (4, 5), (5, 6), (6, 4), (6, 7), (7, 8)]
    return edges, 9


@settings(max_examples=8, deadline=None)
@given(seed=st.integers(0, 10**6), K=st.integers(2, 3), shared=st.booleans())
def test_exact_on_trees_and_single_loops(seed, K, shared):
    rng = np.random.default_rng(seed)
    loops, n = _two_loops_one_graph()
    cyc = int(rng.integers(3, 7))
    b = GraphBatch.from_edges(
        [list(nx.cycle_graph(cyc).edges), list(nx.random_labeled_tree(5, seed=seed).edges),
         loops, []],
        [cyc, 5, n, 1])
    node, edge = _potentials(b, K, rng, 1.5, shared)
    m = TreeEP(tol=1e-12).marginals(b, node, edge)
    ex = BruteForce().marginals(b, node, edge)
    assert m.report["converged"].all()
    np.testing.assert_allclose(m.log_z, ex.log_z, atol=1e-8)
    np.testing.assert_allclose(m.node, ex.node, atol=1e-8)
    np.testing.assert_allclose(m.edge, ex.edge, atol=1e-8)


def test_better_than_bp_on_loopy_graphs():
    rng = np.random.default_rng(11)
    graphs = [nx.complete_graph(4)] * 6 + [nx.grid_2d_graph(3, 3)] * 6
    b = GraphBatch.from_networkx(graphs)
    th = rng.normal(0, 1, b.n_total_nodes)
    sd = np.where(np.arange(b.n_edges) < 6 * 6, 3 / np.sqrt(3), 1.0)  # Qi 2005, secs. 3.5.2-3.5.3
    w = rng.normal(0, sd)
    node = np.stack([th, -th], 1)
    edge = np.stack([np.stack([w, -w], 1), np.stack([-w, w], 1)], 1)
    ex = BruteForce().marginals(b, node, edge)
    ep = TreeEP().marginals(b, node, edge)
    bp = BeliefPropagation(damping=0.5, max_iter=5000, warn=False).marginals(b, node, edge)
    err_ep = np.abs(ep.node - ex.node)[:, 1]
    err_bp = np.abs(bp.node - ex.node)[:, 1]
    assert ep.report["converged"].all()
    assert err_ep.mean() < 0.6 * err_bp.mean()
    assert np.abs(ep.log_z - ex.log_z).mean() < np.abs(bp.log_z - ex.log_z).mean()


def test_orientation_of_edges_does_not_matter():
    rng = np.random.default_rng(2)
    b = GraphBatch.from_networkx(nx.grid_2d_graph(3, 3))
    node, edge = _potentials(b, 3, rng, 0.8)
    flipped = GraphBatch.from_edges([b.edges[:, ::-1]], [9])
    a = TreeEP(tol=1e-12).marginals(b, node, edge)
    c = TreeEP(tol=1e-12).marginals(flipped, node, edge.transpose(0, 2, 1))
    np.testing.assert_allclose(a.log_z, c.log_z, atol=1e-9)
    np.testing.assert_allclose(a.node, c.node, atol=1e-9)
    np.testing.assert_allclose(a.edge, c.edge.transpose(0, 2, 1), atol=1e-9)


def test_tree_choice_by_mutual_information():
    # a triangle with one weak edge: the tree keeps the two strong ones
    b = GraphBatch.from_edges([[(0, 1), (1, 2), (0, 2)]], [3])
    node = np.zeros((3, 2))
    s = np.array([2.0, 1.5, 0.1])
    edge = np.stack([np.stack([s, -s], 1), np.stack([-s, s], 1)], 1)
    mi = edge_mutual_information(b, node, edge)
    assert mi[0] > mi[1] > mi[2] > 0
    assert spanning_tree(b, mi).tolist() == [True, True, False]
    mask = TreeEP().run(b, node, edge).tree_mask
    assert mask.tolist() == [True, True, False]


def test_no_convergence_is_reported_and_bad_tree_masks_rejected():
    rng = np.random.default_rng(4)
    b = GraphBatch.grid(3, 3, n_graphs=2)
    node, edge = _potentials(b, 2, rng, 1.0)
    with pytest.warns(ConvergenceWarning, match="2 of 2"):
        m = TreeEP(max_iter=1).marginals(b, node, edge)
    assert not m.report["converged"].any() and (m.report["iterations"] == 1).all()
    with pytest.raises(ValueError, match="shape"):
        TreeEP().run(b, node, edge, tree_mask=np.ones(3, bool))
    with pytest.raises(ValueError, match="cycle"):
        TreeEP().run(b, node, edge, tree_mask=np.ones(b.n_edges, bool))
    with pytest.raises(ValueError, match="spanning forest"):
        TreeEP().run(b, node, edge, tree_mask=np.zeros(b.n_edges, bool))
    with pytest.raises(ValueError, match="damping"):
        TreeEP(damping=1.0)


def test_hard_constraints_in_edge_tables():
    # forbidden pairs (-inf edge entries): on a 3-cycle only one labelling is possible, and a
    # forbidden state must not come back through a neutral term
    b = GraphBatch.from_edges([[(0, 1), (0, 2), (1, 2)]], [3])
    node = np.array([[0.0, 1.0], [0.0, -1.0], [-1.0, 1.0]])
    edge = np.array([[[-np.inf, 1.0], [1.0, -1.0]], [[-np.inf, -1.0], [-np.inf, -np.inf]],
                     [[-np.inf, 0.0], [1.0, -1.0]]])
    m = TreeEP(tol=1e-12).marginals(b, node, edge)
    np.testing.assert_allclose(m.log_z, [-1.0], rtol=1e-12)
    np.testing.assert_allclose(m.node, [[1, 0], [0, 1], [0, 1]], atol=1e-12)
    assert m.report["converged"].all()
    # random single loops and trees with forbidden node and edge entries: exact; on denser
    # graphs no NaN, and a graph with no possible labelling has log Z = -inf as in the
    # exact engines
    rng = np.random.default_rng(11)
    for _ in range(40):
        K = int(rng.integers(2, 4))
        cyc = int(rng.integers(3, 6))
        b = GraphBatch.from_networkx(
            [nx.cycle_graph(cyc), nx.random_labeled_tree(4, seed=1), nx.complete_graph(4),
             nx.grid_2d_graph(2, 3)])
        node, edge = _potentials(b, K, rng)
        edge[rng.random(edge.shape) < 0.3] = -np.inf
        node[rng.random(node.shape) < 0.2] = -np.inf
        with np.errstate(all="ignore"):
            ex = BruteForce().marginals(b, node, edge)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            m = TreeEP(tol=1e-12).marginals(b, node, edge)
        assert not np.isnan(m.log_z).any() and not np.isnan(m.node).any()
        np.testing.assert_array_equal(np.isneginf(m.log_z), np.isneginf(ex.log_z))
        for g in (0, 1):  # exact on the loop and the tree
            if np.isfinite(ex.log_z[g]):
                np.testing.assert_allclose(m.log_z[g], ex.log_z[g], rtol=1e-9, atol=1e-9)
                rows = b.node_index([g])
                np.testing.assert_allclose(m.node[rows], ex.node[rows], atol=1e-9)
