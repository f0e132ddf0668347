"""Gibbs sampler: Monte Carlo marginals converge to the exact ones (and not to a wrong model's)."""

import networkx as nx
import numpy as np
import pytest

from pymc_crf.graphs.adjacency import colour_classes
from pymc_crf.graphs.batch import GraphBatch
from pymc_crf.inference.brute_force import BruteForce
from pymc_crf.inference.gibbs import Gibbs


def _model(K=3, seed=0, shared=False):
    rng = np.random.default_rng(seed)
    b = GraphBatch.from_networkx([nx.grid_2d_graph(3, 3), nx.complete_graph(4), nx.path_graph(3)])
    node = rng.normal(size=(b.n_total_nodes, K))
    edge = rng.normal(size=(1 if shared else b.n_edges, K, K))
    return b, node, edge


@pytest.mark.parametrize("shared", [False, True])
def test_marginals_converge_to_exact_and_not_to_a_wrong_model(shared):
    b, node, edge = _model(shared=shared)
    m = Gibbs(burn_in=500, n_samples=20000).marginals(b, node, edge, rng=1)
    exact = BruteForce().marginals(b, node, edge)
    # Monte Carlo error with 20000 sweeps is ~0.005 here; 0.02 is ~4 standard errors.
    assert np.abs(m.node - exact.node).max() < 0.02
    n_edge = 1 if shared else b.n_edges
    assert np.abs(m.edge - exact.edge).max() < 0.03 * (b.n_edges if shared else 1)
    assert m.edge.shape == (n_edge, 3, 3) and np.isnan(m.log_z).all() and m.report is None
    # A sampler that read the edge tables transposed (or ignored them) would match these instead,
    # and it would fail the tolerance above by a wide margin.
    for wrong_edge in (edge.transpose(0, 2, 1), np.zeros_like(edge)):
        wrong = BruteForce().marginals(b, node, wrong_edge)
        assert np.abs(m.node - wrong.node).max() > 0.1


def test_sample_frequencies_match_exact_marginals_binary():
    b, node, edge = _model(K=2, seed=3)
    s = Gibbs(burn_in=200, thin=2).sample(b, node, edge, 15000, rng=5)
    assert s.shape == (15000, b.n_total_nodes) and s.dtype == np.int64
    exact = BruteForce().marginals(b, node, edge)
    assert np.abs(s.mean(0) - exact.node[:, 1]).max() < 0.025
    # pairwise agreement frequencies (second moments) too
    agree = (s[:, b.edges[:, 0]] == s[:, b.edges[:, 1]]).mean(0)
    exact_agree = exact.edge[:, 0, 0] + exact.edge[:, 1, 1]
    assert np.abs(agree - exact_agree).max() < 0.025


def test_seeded_and_reproducible_with_hard_zeros():
    b, node, edge = _model(K=2, seed=1)
    node[2, 1] = -np.inf
    g = Gibbs(burn_in=10, n_samples=50)
    a = g.sample(b, node, edge, 50, rng=7)
    c = g.sample(b, node, edge, 50, rng=np.random.default_rng(7))
    np.testing.assert_array_equal(a, c)
    assert not np.array_equal(a, g.sample(b, node, edge, 50, rng=8))
    assert (a[:, 2] == 0).all()


def test_map_heuristic_finds_the_mode_of_a_small_graph():
    b, node, edge = _model(K=2, seed=2)
    got = Gibbs(n_samples=3000).map_assignment(b, node, 2 * edge, rng=0)
    ex = BruteForce().map_assignment(b, node, 2 * edge)
    np.testing.assert_allclose(got.score, ex.score)


def test_init_and_bad_input():
    b, node, edge = _model(K=2)
    init = np.zeros(b.n_total_nodes, int)
    chain = Gibbs(burn_in=0).run(b, node, edge, 1, rng=0, init=init)
    assert chain.samples.shape == (1, b.n_total_nodes) and chain.node.shape == node.shape
    # one sweep from the given labelling: the nodes of the first colour class are drawn given
    # their neighbours' labels in init (all 0), so their stored conditionals are those
    order, ptr = colour_classes(b)
    for i in order[ptr[0]:ptr[1]]:
        logit = node[i].copy()
        for e, (u, v) in enumerate(b.edges):
            if u == i:
                logit += edge[e][:, 0]
            elif v == i:
                logit += edge[e][0, :]
        np.testing.assert_allclose(chain.node[i], np.exp(logit) / np.exp(logit).sum(),
                                   atol=1e-12)
    with pytest.raises(ValueError, match="labels"):
        Gibbs().run(b, node, edge, 1, init=np.zeros(3, int))
    with pytest.raises(ValueError, match="thin"):
        Gibbs(thin=0)
    with pytest.raises(ValueError, match="burn_in"):
        Gibbs(burn_in=-1)
    with pytest.raises(ValueError, match="n_samples"):  # a run's marginals need a sample
        Gibbs().run(b, node, edge, 0)
    assert Gibbs().sample(b, node, edge, 0).shape == (0, node.shape[0])  # as the exact engines
    bad = node.copy()
    bad[0] = -np.inf
    with pytest.raises(ValueError, match="every label"):
        Gibbs().sample(b, bad, edge, 5)
    with pytest.raises(NotImplementedError, match="log Z"):
        Gibbs().log_partition(b, node, edge)


def test_a_start_the_constraints_rule_out_moves_to_an_allowed_labelling():
    """Labels forced equal along a path, started from a labelling that breaks the constraint
    (no burn-in): the chain moves to an allowed labelling instead of dividing 0 by 0, and every
    kept sample is allowed."""
    b = GraphBatch.chains([3])
    node = np.zeros((3, 3))
    edge = np.full((1, 3, 3), -np.inf)
    edge[0][np.diag_indices(3)] = 0.0
    for seed in range(5):
        s = Gibbs(burn_in=0, n_samples=50, seed=seed).sample(b, node, edge, 50)
        labels = np.asarray(s.labels if hasattr(s, "labels") else s).reshape(-1, 3)
        assert (labels == labels[:, :1]).all()


def test_kept_labellings_the_constraints_forbid_warn():
    """A triangle whose every edge entry is -inf allows no labelling (exact log Z -inf): the
    chain's samples would be forbidden labellings, and a warning says so. Where the constraints
    leave allowed labellings (only equal neighbours on a 4-cycle), the chain reaches one during
    burn-in and nothing is said."""
    import warnings

    from pymc_crf.inference.base import ConvergenceWarning

    tri = GraphBatch.from_edges([[(0, 1), (1, 2), (2, 0)]], [3])
    with pytest.warns(ConvergenceWarning, match="never reached an allowed labelling"):
        Gibbs(seed=0).sample(tri, np.zeros((3, 2)), np.full((3, 2, 2), -np.inf), 2)
    ring = GraphBatch.from_edges([[(0, 1), (1, 2), (2, 3), (3, 0)]], [4])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for seed in range(5):
            s = Gibbs(seed=seed, burn_in=5).sample(ring, np.zeros((4, 2)),
                                                   np.array([[[0.0, -np.inf], [0.0, 0.0]]]), 3)
            assert (s == s[:, :1]).all()
