"""Loopy BP engine: exact on trees and chains, Bethe gradient = beliefs, convergence reporting."""

import warnings

import networkx as nx
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pymc_crf.graphs.adjacency import message_layout
from pymc_crf.graphs.batch import GraphBatch
from pymc_crf.inference.base import ConvergenceWarning
from pymc_crf.inference.bp import BeliefPropagation
from pymc_crf.inference.brute_force import BruteForce


def _ising(batch, field_sd, coupling_sd, rng):
    th = rng.normal(0, field_sd, batch.n_total_nodes)
    w = rng.normal(0, coupling_sd, batch.n_edges)
    node = np.stack([th, -th], 1)
    edge = np.stack([np.stack([w, -w], 1), np.stack([-w, w], 1)], 1)
    return node, edge


def _forest(seed, K):
    rng = np.random.default_rng(seed)
    graphs = [nx.random_labeled_tree(int(n), seed=int(s))
              for n, s in zip(rng.integers(2, 7, 3), rng.integers(0, 10**6, 3), strict=True)]
    graphs += [nx.path_graph(4), nx.empty_graph(1)]
    b = GraphBatch.from_networkx(graphs)
    node = rng.normal(0, 1.5, (b.n_total_nodes, K))
    edge = rng.normal(0, 1.5, (b.n_edges, K, K))
    return b, node, edge


@settings(max_examples=8, deadline=None)
@given(seed=st.integers(0, 10**6), K=st.integers(2, 3),
       schedule=st.sampled_from(["parallel", "sequential"]), shared=st.booleans())
def test_exact_on_trees_and_chains(seed, K, schedule, shared):
    b, node, edge = _forest(seed, K)
    if shared:
        edge = edge[:1]
    bp = BeliefPropagation(schedule=schedule, tol=1e-12)
    m = bp.marginals(b, node, edge)
    ex = BruteForce().marginals(b, node, edge)
    assert m.report["converged"].all()
    np.testing.assert_allclose(m.log_z, ex.log_z, atol=1e-8)
    np.testing.assert_allclose(m.node, ex.node, atol=1e-8)
    np.testing.assert_allclose(m.edge, ex.edge, atol=1e-8)
    assert m.edge.shape == edge.shape


def test_sequential_is_forward_backward_on_chains():
    # Undamped, in-order messages: one sweep is exact, the second only confirms it.
    rng = np.random.default_rng(0)
    b = GraphBatch.chains([6, 3, 1])
    node, edge = rng.normal(size=(10, 3)), rng.normal(size=(b.n_edges, 3, 3))
    m = BeliefPropagation(damping=0.0, schedule="sequential").marginals(b, node, edge)
    assert m.report["iterations"][:2].tolist() == [2, 2]
    np.testing.assert_allclose(m.log_z, BruteForce().log_partition(b, node, edge), atol=1e-12)


@settings(max_examples=6, deadline=None)
@given(seed=st.integers(0, 10**6), K=st.integers(2, 3))
def test_max_product_map_on_trees(seed, K):
    b, node, edge = _forest(seed, K)
    got = BeliefPropagation(damping=0.0, schedule="sequential").map_assignment(b, node, edge)
    ex = BruteForce().map_assignment(b, node, edge)
    np.testing.assert_allclose(got.score, ex.score, atol=1e-10)
    np.testing.assert_array_equal(got.labels, ex.labels)


def test_loopy_map_is_the_beliefs_argmax_improved_by_local_search():
    """On 4x4 grids with strong couplings max-product BP does not always converge, and its
    beliefs' argmax can be far from the MAP: the labelling returned scores at least the argmax
    (local search never lowers it), here strictly more on two graphs (+5.34, and +3.64 up to the
    exact MAP), never above the exact MAP, and its score is that labelling's."""
    from pymc_crf.inference.base import decode, labelling_score

    b = GraphBatch.from_edges([GraphBatch.grid(4, 4).local_edges(0)] * 8, [16] * 8)
    gained = []
    for seed in (2, 4):
        rng = np.random.default_rng(seed)
        node = rng.normal(size=(b.n_total_nodes, 2))
        edge = rng.normal(size=(b.n_edges, 2, 2)) * 1.5
        bp = BeliefPropagation()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ConvergenceWarning)
            argmax = decode(b, node, edge, bp.decoding_run(b, node, edge).log_node)
            got = bp.map_assignment(b, node, edge)
        exact = BruteForce().map_assignment(b, node, edge)
        np.testing.assert_allclose(got.score, labelling_score(b, node, edge, got.labels))
        assert np.all(got.score >= argmax.score) and np.all(got.score <= exact.score + 1e-9)
        gained.append(got.score - argmax.score)
    assert np.sum(np.concatenate(gained) > 1.0) == 2


def test_bethe_gradient_equals_beliefs_by_finite_differences():
    rng = np.random.default_rng(3)
    b = GraphBatch.from_networkx([nx.grid_2d_graph(3, 3), nx.complete_graph(4)])
    K = 3
    node = rng.normal(0, 1, (b.n_total_nodes, K))
    edge = rng.normal(0, 0.4, (b.n_edges, K, K))
    bp = BeliefPropagation(tol=1e-13, max_iter=5000)
    m = bp.marginals(b, node, edge)
    assert m.report["converged"].all()
    exact = BruteForce().log_partition(b, node, edge)
    assert np.abs(m.log_z - exact).max() > 1e-4  # loopy: the Bethe value is not log Z ...
    h = 1e-5
    for arr, grad in ((node, m.node), (edge, m.edge)):
        for flat in rng.choice(arr.size, 6, replace=False):
            idx = np.unravel_index(flat, arr.shape)
            g = b.node_graph[idx[0]] if arr is node else b.edge_graph[idx[0]]
            up, dn = arr.copy(), arr.copy()
            up[idx] += h
            dn[idx] -= h
            args_up = (up, edge) if arr is node else (node, up)
            args_dn = (dn, edge) if arr is node else (node, dn)
            fd = (bp.log_partition(b, *args_up)[g] - bp.log_partition(b, *args_dn)[g]) / (2 * h)
            assert abs(fd - grad[idx]) < 1e-7  # ... but its gradient is exactly the beliefs


def test_bp_reasonably_close_on_weak_loopy_grid():
    rng = np.random.default_rng(4)
    b = GraphBatch.grid(3, 3, n_graphs=2)
    node, edge = _ising(b, 1.0, 0.2, rng)
    m = BeliefPropagation().marginals(b, node, edge)
    ex = BruteForce().marginals(b, node, edge)
    assert np.abs(m.node - ex.node).max() < 5e-3
    assert np.abs(m.log_z - ex.log_z).max() < 5e-3


def test_strong_couplings_do_not_converge_and_are_reported():
    rng = np.random.default_rng(1)
    b = GraphBatch.grid(4, 4, n_graphs=4)
    node, edge = _ising(b, 1.0, 3.0, rng)
    with pytest.warns(ConvergenceWarning, match=r"did not converge on 3 of 4 graphs"):
        m = BeliefPropagation(damping=0.0, max_iter=300).marginals(b, node, edge)
    rep = m.report
    assert rep["converged"].tolist() == [False, True, False, False]
    assert (rep["iterations"][~rep["converged"]] == 300).all()
    assert (rep["max_change"][~rep["converged"]] > 1.0).all()
    # The converged graph has its own, smaller, iteration count.
    assert rep["iterations"][1] < 300 and rep["max_change"][1] < 1e-10


def test_no_warning_when_converged_and_warning_can_be_disabled():
    rng = np.random.default_rng(2)
    b = GraphBatch.grid(3, 3)
    node, edge = _ising(b, 1.0, 0.3, rng)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        BeliefPropagation().marginals(b, node, edge)
        BeliefPropagation(max_iter=2, warn=False).marginals(b, node, edge)


def test_graphs_without_edges():
    b = GraphBatch.from_edges([[], [(0, 1)]], [2, 2])
    node = np.log(np.array([[0.2, 0.8], [0.5, 0.5], [0.1, 0.9], [0.3, 0.7]]))
    edge = np.zeros((1, 2, 2))
    m = BeliefPropagation().marginals(b, node, edge)
    np.testing.assert_allclose(m.log_z, BruteForce().log_partition(b, node, edge), atol=1e-12)
    assert m.report["converged"].all()


def test_bad_input():
    b = GraphBatch.grid(2, 2)
    with pytest.raises(ValueError, match="damping"):
        BeliefPropagation(damping=1.0)
    with pytest.raises(ValueError, match="schedule"):
        BeliefPropagation(schedule="random")
    with pytest.raises(ValueError, match="tol"):
        BeliefPropagation(tol=0)
    with pytest.raises(ValueError, match="max_iter"):
        BeliefPropagation(max_iter=0)
    with pytest.raises(ValueError, match="node log-potentials"):
        BeliefPropagation().marginals(b, np.zeros((3, 2)), np.zeros((4, 2, 2)))
    with pytest.raises(ValueError, match="edge log-potentials"):
        BeliefPropagation().marginals(b, np.zeros((4, 2)), np.zeros((4, 3, 3)))
    with pytest.raises(ValueError, match="NaN"):
        BeliefPropagation().marginals(b, np.full((4, 2), np.nan), np.zeros((4, 2, 2)))
    with pytest.raises(ValueError, match="messages"):
        BeliefPropagation().run(b, np.zeros((4, 2)), np.zeros((4, 2, 2)), messages=np.zeros(3))


def test_warm_start_and_hard_zeros():
    rng = np.random.default_rng(5)
    b = GraphBatch.grid(3, 3)
    node, edge = _ising(b, 1.0, 0.5, rng)
    node[0, 1] = -np.inf  # node 0 is clamped to label 0
    bp = BeliefPropagation(tol=1e-12)
    first = bp.run(b, node, edge)
    again = bp.run(b, node, edge, messages=first.messages)
    assert again.report["iterations"].max() <= 2
    np.testing.assert_allclose(again.log_z, first.log_z, atol=1e-11)
    assert np.exp(first.log_node[0, 1]) == 0.0 and np.isfinite(first.log_z).all()
    # the message layout a warm start runs on is derived once per batch
    assert message_layout(b) is message_layout(b)
    # a warm start from a nearby model's fixed point needs fewer sweeps than a cold start, and
    # reaches the same fixed point
    near = edge * 1.05
    cold, warm = bp.run(b, node, near), bp.run(b, node, near, messages=first.messages)
    assert warm.report["iterations"][0] < cold.report["iterations"][0]
    np.testing.assert_allclose(warm.log_node, cold.log_node, atol=1e-10)


@pytest.mark.parametrize("schedule", ["sequential", "parallel"])
@pytest.mark.parametrize("damping", [0.0, 0.5])
def test_both_scaled_sums_underflowing_take_the_log_domain(schedule, damping):
    """Two labels whose cavity and table row are both far (> 745) below the other's make both
    scaled sums of a binary message 0: the message is then computed in the log domain (it
    divided 0 by 0 inside numba). A chain, so BP must equal brute force."""
    b = GraphBatch.chains([3])
    node = np.tile([1000.0, 0.0], (3, 1))
    edge = np.array([[[-1000.0, -1000.0], [0.0, 0.0]]])
    bp = BeliefPropagation(schedule=schedule, damping=damping)
    np.testing.assert_allclose(bp.log_partition(b, node, edge),
                               BruteForce().log_partition(b, node, edge), rtol=1e-10)


@pytest.mark.parametrize("K", [2, 3, 4])
def test_huge_potentials_on_trees_equal_brute_force(K):
    """Log-potentials of scale 3000 on a tree (with -inf entries): every scaled sum of a message
    can underflow (to 0, or to subnormals), which must take the log domain; BP is then exact."""
    rng = np.random.default_rng(K)
    b = GraphBatch.from_edges([[(0, 1), (1, 2), (1, 3), (3, 4)]], [5])
    for _ in range(20):
        node = rng.normal(scale=3000.0, size=(5, K))
        edge = rng.normal(scale=3000.0, size=(4, K, K))
        edge[rng.random(edge.shape) < 0.15] = -np.inf
        exact = BruteForce().log_partition(b, node, edge)
        if not np.isfinite(exact).all():
            continue
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ConvergenceWarning)
            bp = BeliefPropagation()
            np.testing.assert_allclose(bp.log_partition(b, node, edge), exact, rtol=1e-10)
            np.testing.assert_allclose(bp.marginals(b, node, edge).node,
                                       BruteForce().marginals(b, node, edge).node, atol=1e-8)


@pytest.mark.slow  # compiles the threaded flooding kernels (~15 s with an empty numba cache)
def test_threaded_flooding_gives_identical_results():
    rng = np.random.default_rng(9)
    b = GraphBatch.grid(4, 5, n_graphs=3)
    node, edge = _ising(b, 1.0, 0.5, rng)
    a = BeliefPropagation(threads=False).run(b, node, edge)
    t = BeliefPropagation(threads=True).run(b, node, edge)
    np.testing.assert_array_equal(a.messages, t.messages)
    np.testing.assert_array_equal(a.report["iterations"], t.report["iterations"])
