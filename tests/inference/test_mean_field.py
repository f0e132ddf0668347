"""Naive mean field: the bound gap is KL(q || p), q solves the mean-field equations, report."""

import warnings

import networkx as nx
import numpy as np
import pytest

from pymc_crf.graphs.batch import GraphBatch
from pymc_crf.inference.base import ConvergenceWarning
from pymc_crf.inference.brute_force import BruteForce
from pymc_crf.inference.mean_field import MeanField


def _model(seed=6, K=3, coupling=0.7):
    rng = np.random.default_rng(seed)
    b = GraphBatch.from_networkx([nx.grid_2d_graph(2, 3), nx.complete_graph(4)])
    node = rng.normal(size=(b.n_total_nodes, K))
    edge = rng.normal(0, coupling, (b.n_edges, K, K))
    return b, node, edge


def _enumerate(b, node, edge, g):
    """Every labelling of graph g and its unnormalised log score, by plain loops."""
    K = node.shape[1]
    n, lo = int(b.n_nodes[g]), int(b.node_offsets[g])
    local = b.local_edges(g)
    eids = range(int(b.edge_offsets[g]), int(b.edge_offsets[g + 1]))
    configs = np.indices((K,) * n).reshape(n, -1).T
    score = np.array([sum(node[lo + i, c[i]] for i in range(n))
                      + sum(edge[e, c[u], c[v]] for e, (u, v) in zip(eids, local, strict=True))
                      for c in configs])
    return configs, score


def test_bound_gap_is_the_kl_divergence_and_q_is_a_fixed_point():
    b, node, edge = _model()
    m = MeanField().marginals(b, node, edge)
    assert m.report["converged"].all()
    exact = BruteForce().log_partition(b, node, edge)
    for g in range(b.n_graphs):
        configs, score = _enumerate(b, node, edge, g)
        lo = b.node_offsets[g]
        logq = np.log(m.node[lo + np.arange(configs.shape[1]), configs]).sum(1)
        q = np.exp(logq)
        kl = np.sum(q * (logq - (score - exact[g])))
        # log Z - bound = KL(q || p) >= 0, checked by enumeration
        assert abs((exact[g] - m.log_z[g]) - kl) < 1e-10 and kl > 0
    # fixed point of the mean-field equations
    i = 4
    nb = [(e, b.edges[e, 1] if b.edges[e, 0] == i else b.edges[e, 0]) for e in range(b.n_edges)
          if i in b.edges[e]]
    logit = node[i] + sum(edge[e] @ m.node[j] if b.edges[e, 0] == i else edge[e].T @ m.node[j]
                          for e, j in nb)
    np.testing.assert_allclose(m.node[i], np.exp(logit) / np.exp(logit).sum(), atol=1e-9)
    np.testing.assert_allclose(m.edge[0], np.outer(m.node[b.edges[0, 0]], m.node[b.edges[0, 1]]))


def test_exact_without_edges_and_shared_table_sums_edge_marginals():
    rng = np.random.default_rng(1)
    lone = GraphBatch.from_edges([[], []], [3, 2])
    node = rng.normal(size=(5, 2))
    m = MeanField().marginals(lone, node, np.zeros((0, 2, 2)))
    exact = BruteForce().marginals(lone, node, np.zeros((0, 2, 2)))
    np.testing.assert_allclose(m.log_z, exact.log_z, atol=1e-12)
    np.testing.assert_allclose(m.node, exact.node, atol=1e-12)
    b, node, edge = _model(seed=2)
    shared = MeanField().marginals(b, node, edge[:1])
    q = shared.node
    pair = q[b.edges[:, 0]][:, :, None] * q[b.edges[:, 1]][:, None, :]
    np.testing.assert_allclose(shared.edge, pair.sum(0, keepdims=True), atol=1e-12)
    assert shared.edge.shape == (1, 3, 3)


def test_map_is_the_argmax_of_q_with_its_exact_score():
    b, node, edge = _model(seed=3)
    mf = MeanField()
    got = mf.map_assignment(b, node, edge)
    q = mf.marginals(b, node, edge).node
    np.testing.assert_array_equal(got.labels, q.argmax(1))
    for g in range(b.n_graphs):
        configs, score = _enumerate(b, node, edge, g)
        lab = got.labels[b.node_offsets[g]:b.node_offsets[g + 1]]
        assert got.score[g] == pytest.approx(score[(configs == lab).all(1)][0], abs=1e-12)


def test_both_starts_reach_the_same_fixed_point_on_weak_couplings():
    b, node, edge = _model(seed=4, coupling=0.2)
    a = MeanField(init="node").marginals(b, node, edge)
    c = MeanField(init="uniform").marginals(b, node, edge)
    np.testing.assert_allclose(a.node, c.node, atol=1e-8)
    np.testing.assert_allclose(a.log_z, c.log_z, atol=1e-10)


def test_non_convergence_is_reported_and_bad_settings_rejected():
    b, node, edge = _model(seed=5, coupling=3.0)
    with pytest.warns(ConvergenceWarning, match=r"mean field did not converge on \d of 2 graphs"):
        m = MeanField(max_iter=1).marginals(b, node, edge)
    assert (m.report["iterations"] == 1).all() and not m.report["converged"].any()
    with pytest.raises(ValueError, match="init"):
        MeanField(init="random")
    with pytest.raises(ValueError, match="damping"):
        MeanField(damping=1.0)
    with pytest.raises(ValueError, match="tol"):
        MeanField(tol=0.0)
    with pytest.raises(ValueError, match="max_iter"):
        MeanField(max_iter=0)


def test_hard_constraints_and_impossible_models():
    """Forbidden (-inf) transitions that rule out every label under the start's marginals: mean
    field moves to a labelling the constraints allow (its bound 0 <= log 2 here) instead of
    dividing 0 by 0; an impossible model gives log Z = -inf."""
    b = GraphBatch.chains([2])
    node = np.zeros((2, 2))
    edge = np.array([[[0.0, -np.inf], [-np.inf, 0.0]]])
    mf = MeanField()
    assert mf.log_partition(b, node, edge)[0] == 0.0
    np.testing.assert_array_equal(mf.marginals(b, node, edge).node, [[1.0, 0.0], [1.0, 0.0]])
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the exact answer: no warning
        assert mf.log_partition(b, np.full((2, 2), -np.inf), edge)[0] == -np.inf


def test_a_fixed_point_on_forbidden_labellings_warns():
    """A triangle with a pendant node whose -inf entries leave mean field at point masses that
    the constraints forbid, with every single-node change forbidden too: the bound is -inf
    though the exact log Z is -6.519, and a warning says so."""
    ninf = -np.inf
    b = GraphBatch.from_edges([[(0, 1), (1, 2), (2, 0), (2, 3)]], [4])
    node = np.array([[-0.852, -1.063], [1.35, -2.843], [-0.408, 0.544], [-0.656, 0.425]])
    edge = np.array([[[-1.153, -0.122], [ninf, -0.101]], [[0.029, -0.08], [1.001, ninf]],
                     [[ninf, -0.407], [ninf, -1.653]], [[-2.042, ninf], [0.153, -0.799]]])
    assert np.isclose(BruteForce().log_partition(b, node, edge)[0], -6.519, atol=1e-3)
    for init in ("uniform", "node"):
        with pytest.warns(ConvergenceWarning, match="mean field stopped on 1 of 1 graphs"):
            assert MeanField(init=init).log_partition(b, node, edge)[0] == -np.inf


def test_damped_mean_field_on_hard_constraints_keeps_a_finite_bound():
    """Damping leaves a vanishing mass on forbidden labels; the final undamped sweep removes it:
    the same bound as without damping and no warning."""
    b = GraphBatch.from_edges([[(0, 1), (1, 2)]], [3])
    node = np.array([[0.5, 0.0], [0.0, 0.0], [0.0, 0.2]])
    edge = np.array([[[0.0, -np.inf], [-np.inf, 0.0]]])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        plain = MeanField(init="uniform").log_partition(b, node, edge)
        damped = MeanField(damping=0.5, init="uniform").log_partition(b, node, edge)
    np.testing.assert_allclose(damped, plain, atol=1e-9)
    assert plain[0] <= BruteForce().log_partition(b, node, edge)[0]


def test_damped_runs_with_hard_constraints_end_at_fixed_points():
    """Random loopy models with -inf entries: a damped run's marginals are a fixed point of the
    plain update (an undamped continuation moves nothing and gains no bound)."""
    from pymc_crf.graphs.adjacency import colour_classes, message_layout
    from pymc_crf.inference.mean_field import _bound, _mf_run

    rng = np.random.default_rng(0)
    b = GraphBatch.from_networkx([nx.cycle_graph(5), nx.grid_2d_graph(2, 3),
                                  nx.complete_graph(4), nx.path_graph(4)])
    K, G = 3, b.n_graphs
    st, (order, ptr) = message_layout(b), colour_classes(b)
    for _ in range(20):
        node = rng.normal(size=(b.n_total_nodes, K))
        edge = rng.normal(0.0, 1.0, (b.n_edges, K, K))
        edge[rng.random(edge.shape) < 0.2] = -np.inf
        for damping in (0.5, 0.8):
            run = MeanField(damping=damping, init="uniform", max_iter=3000, warn=False).run(
                b, node, edge)
            q = np.exp(run.log_node)
            q2 = q.copy()
            _mf_run(node, edge, False, q2, order, ptr, st.src, st.edge, st.flip, st.in_ptr,
                    st.in_idx, b.node_graph, G, 0.0, 1e-10, 3000, np.zeros(G, np.int64),
                    np.zeros(G), np.zeros(G, np.bool_))
            finite = np.isfinite(run.log_z)
            assert np.abs(q2 - q).max() < 1e-6
            assert np.all(_bound(b, node, edge, q2)[finite] - run.log_z[finite] < 1e-9)
