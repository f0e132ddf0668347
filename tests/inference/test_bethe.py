"""Bethe free energy assembly (shared by BP and TreeEP): exact on trees at the true marginals,
the mean-field bound at factorised beliefs, 0 log 0 = 0 with forbidden labels."""

import networkx as nx
import numpy as np
import pytest

from pymc_crf.graphs.adjacency import message_layout
from pymc_crf.graphs.batch import GraphBatch
from pymc_crf.inference.bethe import bethe_log_z
from pymc_crf.inference.brute_force import BruteForce
from pymc_crf.inference.mean_field import MeanField


def _trees(seed, K):
    rng = np.random.default_rng(seed)
    b = GraphBatch.from_networkx([nx.random_labeled_tree(6, seed=seed), nx.star_graph(3),
                                  nx.path_graph(2), nx.empty_graph(1)])
    node = rng.normal(0, 1.5, (b.n_total_nodes, K))
    edge = rng.normal(0, 1.5, (b.n_edges, K, K))
    return b, node, edge


def _neg_f(b, node, edge, node_marg, edge_marg, shared=False):
    with np.errstate(divide="ignore"):
        lbn, lbe = np.log(node_marg), np.log(edge_marg)
    return bethe_log_z(node, edge, shared, lbn, lbe, message_layout(b).degree, b.node_graph,
                       b.edge_graph, b.n_graphs)


@pytest.mark.parametrize("seed", [0, 1])
@pytest.mark.parametrize("K", [2, 3])
def test_exact_log_z_on_trees_at_the_true_marginals(seed, K):
    b, node, edge = _trees(seed, K)
    ex = BruteForce().marginals(b, node, edge)
    np.testing.assert_allclose(_neg_f(b, node, edge, ex.node, ex.edge), ex.log_z, atol=1e-10)
    # one shared table: the same value, reading table 0 for every edge
    full = np.broadcast_to(edge[:1], edge.shape).copy()
    ex = BruteForce().marginals(b, node, full)
    np.testing.assert_allclose(_neg_f(b, node, edge[:1], ex.node, ex.edge, shared=True),
                               ex.log_z, atol=1e-10)


def test_forbidden_labels_contribute_nothing():
    b, node, edge = _trees(2, 3)
    node[0, 1] = -np.inf  # node 0 can never take label 1: zero beliefs times -inf potentials
    edge[0, 2, 0] = -np.inf
    ex = BruteForce().marginals(b, node, edge)
    assert ex.node[0, 1] == 0.0 and ex.edge[0, 2, 0] == 0.0
    got = _neg_f(b, node, edge, ex.node, ex.edge)
    assert np.isfinite(got).all()
    np.testing.assert_allclose(got, ex.log_z, atol=1e-10)


def test_factorised_beliefs_give_the_mean_field_bound():
    # with pair beliefs q_u q_v the edge entropies split into node entropies, so on a forest
    # minus the Bethe free energy is the mean-field objective, below log Z
    b, node, edge = _trees(3, 2)
    mf = MeanField().marginals(b, node, edge)
    pair = mf.node[b.edges[:, 0]][:, :, None] * mf.node[b.edges[:, 1]][:, None, :]
    got = _neg_f(b, node, edge, mf.node, pair)
    np.testing.assert_allclose(got, mf.log_z, atol=1e-10)
    assert (got[:3] < BruteForce().log_partition(b, node, edge)[:3] - 1e-6).all()
