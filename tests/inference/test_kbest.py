"""k-best labellings (list Viterbi) against brute-force enumeration: order, scores and
log-probabilities."""

import numpy as np
import pytest
from helpers.brute_force import chain_labellings

from pymc_crf.graphs.batch import GraphBatch
from pymc_crf.inference import ChainEngine
from pymc_crf.inference.base import labelling_score
from pymc_crf.inference.kbest import kbest_labellings


def _ranked(batch, node, edge, g):
    """Every labelling of graph g, best first, and its log-probability."""
    configs, log_prob = chain_labellings(batch, node, edge, g)
    order = np.argsort(-log_prob, kind="stable")
    return configs[order], log_prob[order]


@pytest.mark.parametrize(("shared", "k"), [(True, 7), (False, 7), (False, 1), (True, 40)])
def test_kbest_equals_enumeration(shared, k):
    rng = np.random.default_rng(k + shared)
    lengths = [4, 1, 3, 5]
    batch = GraphBatch.chains(lengths)
    K = 3
    node = rng.normal(size=(batch.n_total_nodes, K))
    edge = rng.normal(size=(1 if shared else batch.n_edges, K, K))
    best = kbest_labellings(batch, node, edge, k)
    assert best.labels.shape == (k, batch.n_total_nodes) and best.log_prob.shape == (k, 4)
    for g in range(batch.n_graphs):
        configs, logp = _ranked(batch, node, edge, g)
        m = min(k, len(logp))
        lo, hi = batch.node_offsets[g], batch.node_offsets[g + 1]
        np.testing.assert_array_equal(best.labels[:m, lo:hi], configs[:m])
        np.testing.assert_allclose(best.log_prob[:m, g], logp[:m], atol=1e-12)
        assert (best.labels[m:, lo:hi] == -1).all() and np.all(best.log_prob[m:, g] == -np.inf)
    # the first is Viterbi's, and scores are the labellings' own scores
    vit = ChainEngine().map_assignment(batch, node, edge)
    np.testing.assert_array_equal(best.labels[0], vit.labels)
    rows = best.labels[: min(k, 3)]  # every graph has at least 3 labellings
    np.testing.assert_allclose(best.score[: rows.shape[0]],
                               labelling_score(batch, node, edge, rows), atol=1e-12)


def test_forbidden_transitions_are_padding():
    batch = GraphBatch.chains([3])
    node = np.zeros((3, 2))
    edge = np.array([[[0.0, -np.inf], [-np.inf, 0.0]]])  # only constant labellings: 2 of 8
    best = kbest_labellings(batch, node, edge, 4)
    assert sorted(map(tuple, best.labels[:2])) == [(0, 0, 0), (1, 1, 1)]
    np.testing.assert_allclose(best.log_prob[:2, 0], np.log(0.5))
    assert (best.labels[2:] == -1).all() and np.all(best.score[2:] == -np.inf)


def test_refusals():
    batch = GraphBatch.chains([3])
    with pytest.raises(ValueError, match="k"):
        kbest_labellings(batch, np.zeros((3, 2)), np.zeros((1, 2, 2)), 0)
    tree = GraphBatch.from_edges([np.array([[0, 1], [0, 2]])], [3])
    with pytest.raises(ValueError, match="k-best labellings are implemented for chain CRFs"):
        kbest_labellings(tree, np.zeros((3, 2)), np.zeros((2, 2, 2)), 2)
