"""``pmc.predict``: every built-in method against brute-force enumeration of the test graphs."""

import itertools

import numpy as np
import pytest

import pymc_crf as pmc
from pymc_crf.cli import build_bcrf_model
from pymc_crf.potentials import log_potential


@pytest.fixture(scope="module")
def fitted():
    train, test = pmc.datasets.bcrf_synthetic("loop", n_train=8, n_test=12, seed=3)
    model = build_bcrf_model(train)
    return pmc.fit(model, method="map"), test


def _brute_force(test, w):
    """Node marginals (N, 2) and MAP labels (N,) of every 3-node loop by enumeration."""
    lp = log_potential(np.einsum("ef,fab->eab", test.edge_features, w), "probit", 0.0)
    b = test.graphs
    marg = np.zeros((b.n_total_nodes, 2))
    labels = np.zeros(b.n_total_nodes, np.int64)
    for g in range(b.n_graphs):
        nodes = np.arange(b.node_offsets[g], b.node_offsets[g + 1])
        edges = np.arange(b.edge_offsets[g], b.edge_offsets[g + 1])
        cfgs = list(itertools.product(range(2), repeat=nodes.size))
        scores = np.array([sum(lp[e, c[b.edges[e, 0] - nodes[0]], c[b.edges[e, 1] - nodes[0]]]
                               for e in edges) for c in cfgs])
        p = np.exp(scores - scores.max())
        p /= p.sum()
        for c, pc in zip(cfgs, p, strict=True):
            marg[nodes, list(c)] += pc
        labels[nodes] = cfgs[int(np.argmax(scores))]
    return marg, labels


def test_map_bpe_and_average_against_brute_force(fitted):
    res, test = fitted
    w = res["posterior"]["w"].values[0, 0]
    marg, labels = _brute_force(test, w)
    p_map = pmc.predict(res, test, method="map")
    np.testing.assert_array_equal(p_map.labels, labels)
    np.testing.assert_allclose(p_map.marginals, marg, atol=1e-10)
    p_bpe = pmc.predict(res, test, method="bpe")
    np.testing.assert_allclose(p_bpe.marginals, marg, atol=1e-10)
    np.testing.assert_array_equal(p_bpe.labels, marg.argmax(1))
    # one-draw posterior: averaging equals the plug-in estimate
    np.testing.assert_allclose(pmc.predict(res, test, "average").marginals, marg, atol=1e-10)
    wrong = int(sum(a != b for a, b in zip(labels, test.labels, strict=True)))
    assert p_map.error_rate == pytest.approx(wrong / test.graphs.n_total_nodes)


def test_average_over_draws_and_deprecated_names(fitted):
    """With several draws, "average" is the mean of the per-draw brute-force marginals."""
    res, test = fitted
    w0 = res["posterior"]["w"].values[0, 0]
    offsets = np.array([-0.5, 0.0, 0.7])
    many = res.copy()
    many["posterior"] = many["posterior"].to_dataset().isel(draw=[0, 0, 0]).assign(
        w=(("chain", "draw", "edge_feature", "label_i", "label_j"),
           (w0[None] + offsets[:, None, None, None])[None]))
    expect = np.mean([_brute_force(test, w0 + o)[0] for o in offsets], axis=0)
    np.testing.assert_allclose(pmc.predict(many, test, "average", draws=None).marginals, expect,
                               atol=1e-10)
    with pytest.warns(FutureWarning, match="n_draws= is renamed draws="):
        old = pmc.predict(many, test, "average", n_draws=3)
    np.testing.assert_allclose(old.marginals, expect, atol=1e-10)


def test_unknown_method(fitted):
    res, test = fitted
    with pytest.raises(ValueError, match="unknown predict method"):
        pmc.predict(res, test, method="nope")
