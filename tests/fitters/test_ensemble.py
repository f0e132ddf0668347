"""Bagging and super-graph prediction (Welling & Parise 2006 sec. 5) against brute force."""

import itertools

import numpy as np
import pytest

import pymc_crf as pmc
from pymc_crf.fitters.ensemble import supergraph
from pymc_crf.inference.bp import BeliefPropagation, ConvergenceWarning
from pymc_crf.inference.brute_force import BruteForce
from pymc_crf.model.predictors import log_potentials_for, result_layout, weight_draws


@pytest.fixture(scope="module")
def fitted():
    train, test = pmc.datasets.bcrf_synthetic("loop", n_train=8, n_test=30, seed=3)
    model = pmc.datasets.bcrf_model(train)
    result = pmc.fit(model, method="bethe_laplace", draws=200, random_seed=0, log_likelihood=False)
    return result, test


def _brute_scores(data, tables):
    """Per graph: all labellings (L, n) and their log-probabilities under each table set (S, L)."""
    out = []
    bf = BruteForce()
    b = data.graphs
    for g in range(b.n_graphs):
        n = int(b.n_nodes[g])
        nidx, local = b.node_index([g]), b.local_edges(g)
        eidx = b.edge_index([g])
        labs = np.array(list(itertools.product(range(2), repeat=n)))
        lp = []
        for node, edge in tables:
            e = np.broadcast_to(edge, (b.n_edges, 2, 2))[eidx]
            s = node[nidx][np.arange(n), labs].sum(1) + e[np.arange(len(local)), labs[:, local[:, 0]],
                                                           labs[:, local[:, 1]]].sum(1)
            lp.append(s - bf.log_partition(b.subset([g]), node[nidx], e)[0])
        out.append((labs, np.array(lp)))
    return out


def test_bagging_and_supergraph_match_brute_force(fitted):
    result, test = fitted
    S = 7
    info = result_layout(result, None)
    draws = weight_draws(result, info)
    idx = np.sort(np.random.default_rng(0).choice(draws["edge_weights"].shape[0], S, replace=False))
    tables = [log_potentials_for(test, info, None, draws["edge_weights"][s]) for s in idx]
    ref_bag, ref_super = [], []
    for labs, lp in _brute_scores(test, tables):
        best = lp.argmax(axis=1)  # each draw's MAP labelling
        votes = np.zeros((labs.shape[1], 2))
        for s, j in enumerate(best):
            votes[np.arange(labs.shape[1]), labs[j]] += np.exp(lp[s, j])
        ref_bag.append(votes.argmax(1))
        ref_super.append(labs[lp.sum(0).argmax()])
    bag = pmc.predict(result, test, method="bagging", draws=S, random_seed=0)
    np.testing.assert_array_equal(bag.labels, np.concatenate(ref_bag))
    exact = pmc.predict(result, test, method="supergraph", draws=S, random_seed=0,
                        supergraph_inference="junction_tree")
    np.testing.assert_array_equal(exact.labels, np.concatenate(ref_super))
    auto = pmc.predict(result, test, method="supergraph", draws=S, random_seed=0)
    np.testing.assert_array_equal(auto.labels, exact.labels)  # small treewidth: junction tree
    # max-product BP on the loopy super-graph (the paper's algorithm) is approximate: with hard
    # constraints it does not converge on some graphs, yet labels most nodes as the exact MAP
    with pytest.warns(ConvergenceWarning):
        bp = pmc.predict(result, test, method="supergraph", draws=S, random_seed=0,
                         supergraph_inference=BeliefPropagation())
    assert np.mean(bp.labels == exact.labels) > 0.85


def test_ensemble_options_are_checked(fitted):
    result, test = fitted
    # coupling <= 0 untied or anti-tied the copies and changed the labels silently
    for bad in (0.0, -1.0, np.nan, True):
        with pytest.raises(ValueError, match="supergraph: coupling must be a number > 0"):
            pmc.predict(result, test, method="supergraph", draws=3, coupling=bad)
    with pytest.raises(ValueError, match="supergraph: inference= does not apply; "
                                         "supergraph_inference="):
        pmc.predict(result, test, method="supergraph", draws=3, inference="bp")
    with pytest.raises(ValueError, match="bagging: weighted must be True or False"):
        pmc.predict(result, test, method="bagging", draws=3, weighted="False")
    # the weights need log Z, which Gibbs sampling does not give (a NotImplementedError from
    # inside the engine before)
    with pytest.raises(ValueError, match="the gibbs engine gives none: pass weighted=False"):
        pmc.predict(result, test, method="bagging", draws=3, inference="gibbs")


def test_ensemble_methods_against_average_and_map(fitted):
    result, test = fitted
    errs = {m: pmc.predict(result, test, method=m, draws=50).error_rate
            for m in ("average", "map", "bagging", "supergraph")}
    base = max(errs["average"], errs["map"])
    assert errs["bagging"] <= base + 0.1
    assert errs["supergraph"] <= base + 0.1
    assert all(0.0 <= e < 0.5 for e in errs.values()), errs


def test_supergraph_structure():
    b = pmc.GraphBatch.chains([2, 3])
    tabs = [np.zeros((5, 2))] * 3
    sb, node, edge = supergraph(b, tabs, [np.zeros((1, 2, 2))] * 3)
    assert list(sb.n_nodes) == [6, 9]
    # graph 0: 3 copies of one edge + 2 x 2 equality edges; graph 1: 3 x 2 + 2 x 3
    assert list(np.bincount(sb.edge_graph)) == [3 + 4, 6 + 6]
    assert np.isneginf(edge[3, 0, 1]) and edge[3, 1, 1] == 0.0
