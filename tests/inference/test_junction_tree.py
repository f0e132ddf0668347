"""Junction-tree engine against brute-force enumeration (ground truth) on random small graphs."""

from __future__ import annotations

import itertools

import networkx as nx
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats
from scipy.special import logsumexp

from pymc_crf.graphs.batch import GraphBatch
from pymc_crf.graphs.junction_tree import junction_tree, junction_tree_from_edges, treewidth
from pymc_crf.inference.brute_force import BruteForce
from pymc_crf.inference.junction_tree import JunctionTree

BF = BruteForce()
JT = JunctionTree()
KINDS = ("chain", "tree", "forest", "loopy")


def random_graph(rng: np.random.Generator, n: int, kind: str) -> list[tuple[int, int]]:
    """Edges (local ids, random orientation and node numbering) of a random graph of `kind`."""
    perm = rng.permutation(n)
    if kind == "chain":
        edges = [(i, i + 1) for i in range(n - 1)]
    else:
        edges = [(int(rng.integers(i)), i) for i in range(1, n)]  # random recursive tree
        if kind == "forest":
            edges = [e for e in edges if rng.random() < 0.6]
        elif kind == "loopy":
            pairs = [(a, b) for a in range(n) for b in range(a + 1, n)
                     if (a, b) not in edges and (b, a) not in edges]
            extra = int(rng.integers(1, max(2, len(pairs) // 2 + 1))) if pairs else 0
            for k in rng.permutation(len(pairs))[:extra]:
                edges.append(pairs[k])
    out = []
    for a, b in edges:
        a, b = int(perm[a]), int(perm[b])
        out.append((a, b) if rng.random() < 0.5 else (b, a))
    return out


def random_problem(rng, sizes, kinds, K, scale, shared=False, repeat_first=True):
    """A batch of graphs (the first one repeated, to exercise shape sharing) and potentials."""
    edge_lists = [random_graph(rng, n, k) for n, k in zip(sizes, kinds, strict=True)]
    n_nodes = list(sizes)
    if repeat_first:
        edge_lists.append(edge_lists[0])
        n_nodes.append(n_nodes[0])
    batch = GraphBatch.from_edges(edge_lists, n_nodes)
    node = scale * rng.normal(size=(batch.n_total_nodes, K))
    edge = scale * rng.normal(size=(1 if shared else batch.n_edges, K, K))
    return batch, node, edge


@st.composite
def problems(draw, max_configs=60_000, shared=None):
    K = draw(st.integers(2, 4))
    n_max = max(1, min(9, int(np.log(max_configs) / np.log(K))))
    n_graphs = draw(st.integers(1, 2))
    sizes = [draw(st.integers(1, n_max)) for _ in range(n_graphs)]
    kinds = [draw(st.sampled_from(KINDS)) for _ in range(n_graphs)]
    scale = draw(st.sampled_from([0.1, 1.0, 5.0, 20.0]))
    sh = draw(st.booleans()) if shared is None else shared
    seed = draw(st.integers(0, 2 ** 32 - 1))
    return random_problem(np.random.default_rng(seed), sizes, kinds, K, scale, sh)


def labelling_score(batch, node, edge, labels):
    e = batch.edges
    eidx = np.zeros(batch.n_edges, np.int64) if edge.shape[0] == 1 else np.arange(batch.n_edges)
    s_node = np.bincount(batch.node_graph, node[np.arange(batch.n_total_nodes), labels],
                         minlength=batch.n_graphs)
    s_edge = np.bincount(batch.edge_graph, edge[eidx, labels[e[:, 0]], labels[e[:, 1]]],
                         minlength=batch.n_graphs)
    return s_node + s_edge


# ------------------------------------------------------------------------ exactness vs brute force
@settings(max_examples=40, deadline=None)
@given(problems())
def test_log_z_and_marginals_match_brute_force(problem):
    batch, node, edge = problem
    ref = BF.marginals(batch, node, edge)
    got = JT.marginals(batch, node, edge)
    np.testing.assert_allclose(got.log_z, ref.log_z, rtol=1e-9, atol=1e-9)
    np.testing.assert_allclose(JT.log_partition(batch, node, edge), ref.log_z, rtol=1e-9,
                               atol=1e-9)
    np.testing.assert_allclose(got.node, ref.node, rtol=0, atol=1e-9)
    np.testing.assert_allclose(got.edge, ref.edge, rtol=0, atol=1e-9 * max(1, batch.n_edges))


@settings(max_examples=30, deadline=None)
@given(problems())
def test_map_score_matches_brute_force(problem):
    batch, node, edge = problem
    ref = BF.map_assignment(batch, node, edge)
    got = JT.map_assignment(batch, node, edge)
    np.testing.assert_allclose(got.score, ref.score, rtol=1e-9, atol=1e-9)
    # The labels returned really score what is claimed (ties may pick another argmax).
    np.testing.assert_allclose(labelling_score(batch, node, edge, got.labels), got.score,
                               rtol=1e-9, atol=1e-9)


@settings(max_examples=25, deadline=None)
@given(problems(max_configs=5_000))
def test_covariance_matches_brute_force(problem):
    batch, node, edge = problem
    rng = np.random.default_rng(0)
    v_node, v_edge = rng.normal(size=node.shape), rng.normal(size=edge.shape)
    got = JT.covariance_vector_product(batch, node, edge, v_node, v_edge)
    ref = BF.covariance_vector_product(batch, node, edge, v_node, v_edge)
    np.testing.assert_allclose(got[0], ref[0], rtol=0, atol=1e-8)
    np.testing.assert_allclose(got[1], ref[1], rtol=0, atol=1e-8 * max(1, batch.n_edges))
    g = batch.n_graphs - 1
    np.testing.assert_allclose(JT.feature_covariance(batch, node, edge, graph=g),
                               BF.feature_covariance(batch, node, edge, graph=g),
                               rtol=0, atol=1e-8)


def test_covariance_vector_product_is_directional_derivative_of_marginals():
    # Independent of brute force: central differences of the marginals along v.
    rng = np.random.default_rng(5)
    batch = GraphBatch.grid(3, 4)
    node, edge = rng.normal(size=(12, 3)), rng.normal(size=(batch.n_edges, 3, 3))
    vn, ve = rng.normal(size=node.shape), rng.normal(size=edge.shape)
    h = 1e-5
    plus = JT.marginals(batch, node + h * vn, edge + h * ve)
    minus = JT.marginals(batch, node - h * vn, edge - h * ve)
    cn, ce = JT.covariance_vector_product(batch, node, edge, vn, ve)
    np.testing.assert_allclose(cn, (plus.node - minus.node) / (2 * h), atol=1e-7)
    np.testing.assert_allclose(ce, (plus.edge - minus.edge) / (2 * h), atol=1e-7)


def test_min_weight_heuristic_and_hard_constraints_match_brute_force():
    rng = np.random.default_rng(3)
    batch, node, edge = random_problem(rng, [8, 6], ["loopy", "forest"], 3, 5.0)
    edge[rng.random(edge.shape) < 0.2] = -np.inf  # forbidden label pairs
    node[0, 0] = -np.inf
    ref = BF.marginals(batch, node, edge)
    for eng in (JT, JunctionTree(heuristic="min_weight")):
        got = eng.marginals(batch, node, edge)
        np.testing.assert_allclose(got.log_z, ref.log_z, rtol=1e-9)
        np.testing.assert_allclose(got.node, ref.node, atol=1e-9)
        np.testing.assert_allclose(got.edge, ref.edge, atol=1e-9)
        np.testing.assert_allclose(eng.map_assignment(batch, node, edge).score,
                                   BF.map_assignment(batch, node, edge).score, rtol=1e-9)
        vn, ve = rng.normal(size=node.shape), rng.normal(size=edge.shape)
        np.testing.assert_allclose(
            np.concatenate([x.ravel() for x in eng.covariance_vector_product(
                batch, node, edge, vn, ve)]),
            np.concatenate([x.ravel() for x in BF.covariance_vector_product(
                batch, node, edge, vn, ve)]), atol=1e-8)


def test_shared_edge_table_sums_over_edges():
    rng = np.random.default_rng(11)
    batch, node, edge = random_problem(rng, [7, 5], ["loopy", "tree"], 3, 2.0, shared=True)
    full = np.repeat(edge, batch.n_edges, axis=0)
    shared = JT.marginals(batch, node, edge)
    per_edge = JT.marginals(batch, node, full)
    assert shared.edge.shape == (1, 3, 3)
    np.testing.assert_allclose(shared.log_z, per_edge.log_z, rtol=1e-12)
    np.testing.assert_allclose(shared.edge[0], per_edge.edge.sum(0), atol=1e-12)
    np.testing.assert_allclose(shared.edge[0].sum(), batch.n_edges, rtol=1e-12)


# ------------------------------------------------------------------------ sampling
def test_sampling_frequencies_pass_chi_square():
    # A triangle with a pendant node plus an isolated node (a forest of 2 components), K = 2: the
    # 32 joint labellings are compared with their exact probabilities.
    batch = GraphBatch.from_edges([[(0, 1), (1, 2), (2, 0), (2, 3)]], [5])
    rng = np.random.default_rng(0)
    node, edge = rng.normal(size=(5, 2)), 1.5 * rng.normal(size=(4, 2, 2))
    n = 200_000
    samples = JT.sample(batch, node, edge, n, rng=np.random.default_rng(1234))
    assert samples.shape == (n, 5) and samples.dtype == np.int64
    configs = np.array(list(itertools.product(range(2), repeat=5)))
    logp = np.array([labelling_score(batch, node, edge, c)[0] for c in configs])
    p = np.exp(logp - logsumexp(logp))
    counts = np.bincount(samples @ (2 ** np.arange(4, -1, -1)), minlength=32)
    chi2, pval = stats.chisquare(counts, n * p)
    assert pval > 1e-3, (chi2, pval)


def test_sampling_many_graphs_matches_marginals_and_is_seeded():
    rng = np.random.default_rng(2)
    batch, node, edge = random_problem(rng, [6, 4], ["loopy", "chain"], 3, 1.0)
    s1 = JT.sample(batch, node, edge, 20_000, rng=7)
    s2 = JT.sample(batch, node, edge, 20_000, rng=np.random.default_rng(7))
    s3 = JT.sample(batch, node, edge, 20_000, rng=8)
    np.testing.assert_array_equal(s1, s2)
    assert not np.array_equal(s1, s3)
    freq = (s1[:, :, None] == np.arange(3)).mean(0)
    exact = BF.marginals(batch, node, edge).node
    # Binomial standard error is <= 0.0036 at 20k samples: 5 sigma.
    np.testing.assert_allclose(freq, exact, atol=0.018)


# ------------------------------------------------------------------------ structure
def check_junction_tree(n, edges, jt):
    """Running intersection, coverage of every edge, maximal cliques, valid separators."""
    cl = [set(c) for c in jt.cliques]
    for c, p in enumerate(jt.parent):
        assert p < c  # parents first
        if p >= 0:
            assert set(jt.separators[c]) == cl[c] & cl[p]
            assert jt.cliques[c][:len(jt.separators[c])] == jt.separators[c]
    for a in range(len(cl)):
        for b in range(len(cl)):
            assert a == b or not cl[a] <= cl[b]
    for v in range(n):
        holding = [c for c in range(len(cl)) if v in cl[c]]
        assert holding and v in cl[jt.node_clique[v]]
        # The cliques holding v form one subtree: exactly one of them has no parent holding v.
        assert sum(1 for c in holding if jt.parent[c] < 0 or v not in cl[jt.parent[c]]) == 1
    for e, (u, v) in enumerate(edges):
        assert {u, v} <= cl[jt.edge_clique[e]]


@settings(max_examples=40, deadline=None)
@given(st.integers(1, 14), st.sampled_from(KINDS), st.integers(0, 2 ** 32 - 1),
       st.sampled_from(["min_fill", "min_weight"]))
def test_junction_tree_properties(n, kind, seed, heuristic):
    edges = random_graph(np.random.default_rng(seed), n, kind)
    jt = junction_tree_from_edges(n, np.array(edges, dtype=np.int64).reshape(-1, 2), heuristic)
    check_junction_tree(n, edges, jt)
    G = nx.Graph()
    G.add_nodes_from(range(n))
    G.add_edges_from(edges)
    assert len(jt.roots) == nx.number_connected_components(G)
    if nx.is_forest(G):
        assert jt.treewidth == (1 if G.number_of_edges() else 0)


def test_treewidth_of_known_graphs():
    cycle = [(i, (i + 1) % 7) for i in range(7)]
    complete = list(itertools.combinations(range(5), 2))
    star = [(0, i) for i in range(1, 6)]
    batch = GraphBatch.from_edges([cycle, complete, star, []], [7, 5, 6, 3])
    np.testing.assert_array_equal(treewidth(batch), [2, 4, 1, 0])
    np.testing.assert_array_equal(treewidth(batch, "min_weight"), [2, 4, 1, 0])
    for n in range(2, 7):
        assert treewidth(GraphBatch.grid(n, n))[0] == n
    assert treewidth(GraphBatch.chains([1, 5, 30]))[0] <= 1


def test_structure_is_shared_between_identical_shapes():
    batch = GraphBatch.grid(3, 3, n_graphs=50)
    jt0 = junction_tree(batch, 0)
    assert all(junction_tree(batch, g) is jt0 for g in (1, 25, 49))
    assert batch.junction_tree(7) is jt0
    # other heuristics are separate entries
    assert batch.junction_tree(0, "min_weight") is not jt0


# ------------------------------------------------------------------------ limits and errors
def test_clear_error_above_treewidth_limit():
    batch = GraphBatch.from_edges(
        [[(0, 1)], GraphBatch.grid(4, 4).local_edges(0)], [2, 16])
    eng = JunctionTree(max_treewidth=3)
    assert not eng.supports(batch)
    assert JunctionTree(max_treewidth=4).supports(batch)
    node, edge = np.zeros((18, 2)), np.zeros((batch.n_edges, 2, 2))
    msg = r"graph 1 has treewidth (at least )?4 .*max_treewidth=3"
    for call in (lambda: eng.log_partition(batch, node, edge),
                 lambda: eng.marginals(batch, node, edge),
                 lambda: eng.map_assignment(batch, node, edge),
                 lambda: eng.sample(batch, node, edge, 3, rng=0),
                 lambda: eng.covariance_vector_product(batch, node, edge, node, edge)):
        with pytest.raises(ValueError, match=msg):
            call()


def test_treewidth_limit_stops_early_on_big_graphs():
    big = GraphBatch.grid(40, 40)
    eng = JunctionTree(max_treewidth=4)
    assert not eng.supports(big)  # decided without triangulating the whole grid
    tw = treewidth(big, limit=4)
    assert tw[0] > 4
    with pytest.raises(ValueError, match=r"graph 0 has treewidth at least \d+ .*max_treewidth=4"):
        eng.log_partition(big, np.zeros((1600, 2)), np.zeros((big.n_edges, 2, 2)))
    small = GraphBatch.from_edges([[(0, 1), (1, 2), (2, 0)], [(0, 1)]], [3, 2])
    np.testing.assert_array_equal(treewidth(small, limit=1), treewidth(small))


def test_bad_arguments():
    with pytest.raises(ValueError, match="heuristic"):
        JunctionTree(heuristic="greedy")
    batch = GraphBatch.chains([3])
    with pytest.raises(ValueError, match="node log-potentials"):
        JT.marginals(batch, np.zeros((2, 2)), np.zeros((2, 2, 2)))
    with pytest.raises(ValueError, match="direction"):
        JT.covariance_vector_product(batch, np.zeros((3, 2)), np.zeros((2, 2, 2)),
                                     np.zeros((3, 3)), np.zeros((2, 2, 2)))
    with pytest.raises(ValueError, match="clique-table entries"):
        JunctionTree(max_table_entries=100).log_partition(
            GraphBatch.grid(3, 3), np.zeros((9, 3)), np.zeros((12, 3, 3)))
