"""The shared contract of the iterative engines (BP, TreeEP, mean field): one run type, one
settings check, one convergence report and warning, decoding and Gibbs sampling."""

import networkx as nx
import numpy as np
import pytest

from pymc_crf.graphs.batch import GraphBatch
from pymc_crf.inference import (
    BeliefPropagation,
    BruteForce,
    ConvergenceWarning,
    LoopyEngine,
    LoopyResult,
    MeanField,
    TreeEP,
)
from pymc_crf.inference.base import labelling_score

ENGINES = {"bp": BeliefPropagation, "tree_ep": TreeEP, "mean_field": MeanField}


def _model(seed=0, K=3, coupling=0.5, shared=False):
    rng = np.random.default_rng(seed)
    b = GraphBatch.from_networkx([nx.grid_2d_graph(2, 3), nx.cycle_graph(4), nx.empty_graph(1),
                                  nx.star_graph(3)])
    node = rng.normal(size=(b.n_total_nodes, K))
    edge = rng.normal(0, coupling, (1 if shared else b.n_edges, K, K))
    return b, node, edge


@pytest.mark.parametrize("name", list(ENGINES))
@pytest.mark.parametrize("shared", [False, True])
def test_one_run_type_and_the_interface_derived_from_it(name, shared):
    b, node, edge = _model(shared=shared)
    eng = ENGINES[name](tol=1e-12)
    assert isinstance(eng, LoopyEngine) and not eng.exact and eng.has_log_z
    r = eng.run(b, node, edge)
    assert isinstance(r, LoopyResult)
    N, K, E, G = b.n_total_nodes, 3, b.n_edges, b.n_graphs
    assert r.log_node.shape == (N, K) and r.log_edge.shape == (E, K, K) and r.log_z.shape == (G,)
    extra = {"bp": {"radius", "restarts"}, "mean_field": {"restarts"}}.get(name, set())
    assert set(r.report) == {"iterations", "max_change", "converged", "bound", "bound_ok", *extra}
    assert r.report["converged"].all() and r.report["bound_ok"].all()
    # normalised beliefs whose pair beliefs agree with their node beliefs at the fixed point
    np.testing.assert_allclose(np.exp(r.log_node).sum(1), 1.0, atol=1e-12)
    pe = np.exp(r.log_edge)
    np.testing.assert_allclose(pe.sum((1, 2)), 1.0, atol=1e-12)
    np.testing.assert_allclose(pe.sum(2), np.exp(r.log_node[b.edges[:, 0]]), atol=1e-8)
    np.testing.assert_allclose(pe.sum(1), np.exp(r.log_node[b.edges[:, 1]]), atol=1e-8)
    assert (r.messages is not None) == (name == "bp")
    assert (r.tree_mask is not None) == (name == "tree_ep")
    m = eng.marginals(b, node, edge)
    np.testing.assert_array_equal(m.node, np.exp(r.log_node))
    np.testing.assert_array_equal(m.edge, pe.sum(0, keepdims=True) if shared else pe)
    np.testing.assert_array_equal(eng.log_partition(b, node, edge), r.log_z)
    # every estimate is close to the exact log Z on these weakly coupled graphs, and exact on
    # the graph without edges
    exact = BruteForce().marginals(b, node, edge)
    assert np.abs(r.log_z - exact.log_z).max() < 0.5
    assert r.log_z[2] == pytest.approx(exact.log_z[2], abs=1e-12)


@pytest.mark.parametrize("name", list(ENGINES))
def test_settings_are_checked_in_one_place(name):
    cls = ENGINES[name]
    for kwargs, word in (({"tol": 0.0}, "tol"), ({"tol": np.nan}, "tol"),
                         ({"max_iter": 0}, "max_iter"), ({"damping": 1.0}, "damping"),
                         ({"damping": -0.1}, "damping")):
        with pytest.raises(ValueError, match=word):
            cls(**kwargs)


@pytest.mark.parametrize(("name", "method"), [("bp", "sum-product BP"), ("tree_ep", "TreeEP"),
                                              ("mean_field", "mean field")])
def test_one_convergence_warning_naming_the_method(name, method):
    rng = np.random.default_rng(1)
    b = GraphBatch.grid(3, 3, n_graphs=2)
    node = rng.normal(size=(18, 2))
    edge = rng.normal(0, 2.0, (b.n_edges, 2, 2))
    with pytest.warns(ConvergenceWarning) as rec:
        r = ENGINES[name](max_iter=1, damping=0.0).run(b, node, edge)
    assert len(rec) == 1
    text = str(rec[0].message)
    assert text.startswith(f"{method} did not converge on 2 of 2 graphs within max_iter=1")
    assert (r.report["iterations"] == 1).all() and not r.report["converged"].any()
    with pytest.warns(ConvergenceWarning, match="max-product BP"):
        BeliefPropagation(max_iter=1).map_assignment(b, node, edge)


@pytest.mark.parametrize("name", list(ENGINES))
def test_decoding_scores_exactly_and_sampling_is_gibbs_on_the_model(name):
    b, node, edge = _model(seed=2, K=2)
    eng = ENGINES[name]()
    got = eng.map_assignment(b, node, edge)
    # the score is the labelling's own unnormalised log probability, summed by hand
    by_hand = np.zeros(b.n_graphs)
    for i, lab in enumerate(got.labels):
        by_hand[b.node_graph[i]] += node[i, lab]
    for e, (u, v) in enumerate(b.edges):
        by_hand[b.edge_graph[e]] += edge[e, got.labels[u], got.labels[v]]
    np.testing.assert_allclose(got.score, by_hand, atol=1e-12)
    np.testing.assert_allclose(labelling_score(b, node, edge, got.labels), by_hand, atol=1e-12)
    # the labels maximise the node beliefs of the decoding run (BP: max-product, so on the star
    # and the lone node they are the exact MAP)
    ref = eng.run(b, node, edge, max_product=True) if name == "bp" else eng.run(b, node, edge)
    np.testing.assert_array_equal(got.labels, ref.log_node.argmax(1))
    if name == "bp":
        exact = BruteForce().map_assignment(b, node, edge)
        np.testing.assert_allclose(got.score[2:], exact.score[2:], atol=1e-12)
    s = eng.sample(b, node, edge, 20, rng=3)
    assert s.shape == (20, b.n_total_nodes)
    np.testing.assert_array_equal(s, eng.sample(b, node, edge, 20, rng=3))  # seeded
    assert eng.sample(b, node, edge, 0).shape == (0, b.n_total_nodes)


@pytest.mark.parametrize("name", ENGINES)
def test_samples_are_exact_where_the_junction_tree_runs(name):
    """Within the junction tree's limits the loopy engines draw with it (exact); above them,
    from independent Gibbs chains."""
    from pymc_crf.inference import JunctionTree
    from pymc_crf.inference.gibbs import independent_draws

    b, node, edge = _model(seed=4)
    eng = ENGINES[name]()
    np.testing.assert_array_equal(eng.sample(b, node, edge, 30, rng=5),
                                  JunctionTree().sample(b, node, edge, 30, rng=5))
    big = GraphBatch.grid(12, 12)  # treewidth 12, above the junction tree's default 10
    node_b = np.random.default_rng(0).normal(size=(144, 2))
    edge_b = 0.3 * np.array([[[1.0, -1.0], [-1.0, 1.0]]])
    settings = {k: v for k, v in eng.sample_settings.items() if k != "exact_table_entries"}
    np.testing.assert_array_equal(eng.sample(big, node_b, edge_b, 40, rng=5),
                                  independent_draws(big, node_b, edge_b, 40, rng=5, **settings))
    # a complete graph on 6 nodes with K = 16 (16.7 M clique-table entries) is cheaper by Gibbs
    k6 = GraphBatch.from_networkx([nx.complete_graph(6)])
    node_k, edge_k = np.zeros((6, 16)), np.zeros((15, 16, 16))
    assert not JunctionTree().fits(k6, 16, total_entries=2 ** 20)
    np.testing.assert_array_equal(eng.sample(k6, node_k, edge_k, 3, rng=1),
                                  independent_draws(k6, node_k, edge_k, 3, rng=1, **settings))


def test_independent_gibbs_draws_follow_the_model():
    """16 chains on a 4x4 Ising grid with a field: the magnetisation of 3000 draws follows its
    exact law (enumeration of the 2^16 labellings, chi-square), consecutive draws (from different
    chains) are uncorrelated, and the node marginals match the exact ones."""
    from scipy import stats

    from pymc_crf.inference.gibbs import independent_draws

    b = GraphBatch.grid(4, 4)
    rng = np.random.default_rng(2)
    node = np.column_stack([np.zeros(16), rng.normal(0.2, 0.3, 16)])
    edge = 0.4 * np.array([[[1.0, -1.0], [-1.0, 1.0]]])
    n = 3000
    s = independent_draws(b, node, edge, n, rng=0)
    assert s.shape == (n, 16)
    configs = np.indices((2,) * 16).reshape(16, -1).T
    score = labelling_score(b, node, edge, configs)[:, 0]
    p = np.exp(score - score.max())
    p /= p.sum()
    mag = (2 * configs - 1).sum(1)
    m = (2 * s - 1).sum(1)
    values = np.arange(-16, 17, 2)
    exact = np.array([p[mag == v].sum() for v in values])
    counts = np.array([(m == v).sum() for v in values])
    keep = exact * n >= 5  # pool the sparse tail cells into one
    obs = np.append(counts[keep], counts[~keep].sum()) if (~keep).any() else counts
    expected = (np.append(exact[keep], exact[~keep].sum()) if (~keep).any() else exact) * n
    assert stats.chisquare(obs, expected).pvalue > 1e-3
    assert abs(np.corrcoef(m[:-1], m[1:])[0, 1]) < 0.1
    marg = (configs * p[:, None]).sum(0)
    assert np.all(np.abs(s.mean(0) - marg) < 5 * np.sqrt(marg * (1 - marg) / n))
    assert independent_draws(b, node, edge, 0).shape == (0, 16)


def test_labelling_score_of_several_labellings_is_the_score_of_each(rng):
    batch = GraphBatch.from_edges([np.array([[0, 1], [1, 2], [2, 0]]), np.array([[0, 1]])], [3, 2])
    node = rng.normal(size=(batch.n_total_nodes, 3))
    for edge in (rng.normal(size=(1, 3, 3)), rng.normal(size=(batch.n_edges, 3, 3))):
        rows = rng.integers(0, 3, size=(4, batch.n_total_nodes))
        many = labelling_score(batch, node, edge, rows)
        assert many.shape == (4, 2)
        for r, s in zip(rows, many, strict=True):
            tab = np.zeros(batch.n_edges, int) if edge.shape[0] == 1 else np.arange(batch.n_edges)
            direct = [sum(node[n, r[n]] for n in range(batch.n_total_nodes)
                          if batch.node_graph[n] == g)
                      + sum(edge[tab[e], r[u], r[v]] for e, (u, v) in enumerate(batch.edges)
                            if batch.edge_graph[e] == g) for g in range(2)]
            np.testing.assert_allclose(s, direct, atol=1e-12)
            np.testing.assert_allclose(labelling_score(batch, node, edge, r), direct, atol=1e-12)


def test_graphs_within_the_junction_tree_stay_exact_beside_wider_ones():
    """A batch mixing graphs the junction tree takes with wider ones is split: the former are
    drawn exactly, the others by Gibbs, from one random stream (exact part first)."""
    from pymc_crf.inference import JunctionTree
    from pymc_crf.inference.gibbs import independent_draws

    grid, chain = nx.grid_2d_graph(12, 12), nx.path_graph(4)  # treewidth 12 and 1
    b = GraphBatch.from_networkx([chain, grid, chain])
    rng = np.random.default_rng(0)
    node = rng.normal(size=(b.n_total_nodes, 2))
    edge = rng.normal(size=(b.n_edges, 2, 2))
    eng = BeliefPropagation()
    got = eng.sample(b, node, edge, 25, rng=7)
    np.testing.assert_array_equal(got, eng.sample(b, node, edge, 25, rng=7))
    assert JunctionTree().fitting_graphs(b, 2).tolist() == [True, False, True]
    exact_g, wide_g = np.array([0, 2]), np.array([1])
    stream = np.random.default_rng(7)
    want_exact = JunctionTree().sample(b.subset(exact_g), node[b.node_index(exact_g)],
                                       edge[b.edge_index(exact_g)], 25, stream)
    settings = {k: v for k, v in eng.sample_settings.items() if k != "exact_table_entries"}
    want_wide = independent_draws(b.subset(wide_g), node[b.node_index(wide_g)],
                                  edge[b.edge_index(wide_g)], 25, stream, **settings)
    np.testing.assert_array_equal(got[:, b.node_index(exact_g)], want_exact)
    np.testing.assert_array_equal(got[:, b.node_index(wide_g)], want_wide)
    # the table budget is spent on the smallest shapes first: a budget below the 4-node chain's
    # tables (3 cliques of 4 entries) sends every graph to Gibbs
    assert JunctionTree().fitting_graphs(b, 2, total_entries=11).tolist() == [False] * 3
    assert JunctionTree().fitting_graphs(b, 2, total_entries=12).tolist() == [True, False, True]


def test_mixed_batch_with_a_shared_table_and_three_labels():
    from pymc_crf.inference import JunctionTree
    from pymc_crf.inference.gibbs import independent_draws

    grid = nx.grid_2d_graph(11, 11)  # treewidth 11
    b = GraphBatch.from_networkx([nx.cycle_graph(5), grid, nx.path_graph(3), grid])
    rng = np.random.default_rng(1)
    node = rng.normal(size=(b.n_total_nodes, 3))
    edge = rng.normal(size=(1, 3, 3))  # one table shared by every edge
    eng = TreeEP()
    got = eng.sample(b, node, edge, 30, rng=np.random.default_rng(2))
    exact_g, wide_g = np.array([0, 2]), np.array([1, 3])
    stream = np.random.default_rng(2)
    want_exact = JunctionTree().sample(b.subset(exact_g), node[b.node_index(exact_g)], edge, 30,
                                       stream)
    settings = {k: v for k, v in eng.sample_settings.items() if k != "exact_table_entries"}
    want_wide = independent_draws(b.subset(wide_g), node[b.node_index(wide_g)], edge, 30, stream,
                                  **settings)
    np.testing.assert_array_equal(got[:, b.node_index(exact_g)], want_exact)
    np.testing.assert_array_equal(got[:, b.node_index(wide_g)], want_wide)
    assert got.max() == 2 and eng.sample(b, node, edge, 0).shape == (0, b.n_total_nodes)
    eng.sample_settings["exact_table_entries"] = np.nan
    with pytest.raises(ValueError, match=r'sample_settings\["exact_table_entries"\] must be'):
        eng.sample(b, node, edge, 1)
