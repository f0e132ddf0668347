"""``pmc.predict``: every built-in method against brute-force enumeration of the test graphs."""

import itertools

import numpy as np
import pytest

import pymc_crf as pmc
from pymc_crf.datasets import bcrf_model
from pymc_crf.potentials import log_potential


@pytest.fixture(scope="module")
def fitted():
    train, test = pmc.datasets.bcrf_synthetic("loop", n_train=8, n_test=12, seed=3)
    model = bcrf_model(train)
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


def test_average_over_draws(fitted):
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
    np.testing.assert_allclose(pmc.predict(many, test, "average", draws=3).marginals, expect,
                               atol=1e-10)


def test_unknown_method(fitted):
    res, test = fitted
    with pytest.raises(ValueError, match="unknown predict method"):
        pmc.predict(res, test, method="nope")


def _chain_data(seed=0):
    from pymc_crf.datasets import CRFData

    rng = np.random.default_rng(seed)
    batch = pmc.GraphBatch.chains([5, 3, 4] * 3)
    X = rng.normal(size=(batch.n_total_nodes, 2))
    y = rng.integers(0, 2, batch.n_total_nodes)
    tb = pmc.GraphBatch.chains([4])
    test = CRFData(tb, np.array([0, 1, 1, 0]), node_features=rng.normal(size=(4, 2)), n_labels=2)
    return batch, X, y, test


def _exact_marginals(test, W, T):
    """Node marginals of the one test chain by enumeration."""
    node = test.node_features @ W
    marg = np.zeros((4, 2))
    scores = {lab: sum(node[i, lab[i]] for i in range(4)) + sum(T[lab[i], lab[i + 1]]
                                                              for i in range(3))
              for lab in itertools.product(range(2), repeat=4)}
    log_z = np.logaddexp.reduce(list(scores.values()))
    for lab, s in scores.items():
        for i in range(4):
            marg[i, lab[i]] += np.exp(s - log_z)
    return marg


def test_predict_uses_constant_and_deterministic_weights():
    import pymc as pm

    batch, X, y, test = _chain_data()
    T_fixed = np.array([[3.0, -3.0], [-3.0, 3.0]])
    with pm.Model() as m:
        W = pm.Normal("W", 0, 1, shape=(2, 2))
        T = pm.Normal("T", 0, 1, shape=(2, 2))
        pmc.CRF("y", graphs=batch, node_features=X, node_weights=W, edge_weights=T, observed=y)
    # T fixed by pm.do: a constant the result must carry for predict
    fixed = pmc.fit(pm.do(m, {"T": T_fixed}), method="map", progressbar=False)
    W_map = fixed["posterior"]["W"].values[0, 0]
    for method in ("bpe", "average"):
        pred = pmc.predict(fixed, test, method=method)
        np.testing.assert_allclose(pred.marginals, _exact_marginals(test, W_map, T_fixed),
                                   atol=1e-10)
    # T held in pm.Data: its value at fit time, as a constant
    with pm.Model() as m_data:
        W = pm.Normal("W", 0, 1, shape=(2, 2))
        T = pm.Data("T", T_fixed)
        pmc.CRF("y", graphs=batch, node_features=X, node_weights=W, edge_weights=T, observed=y)
    held = pmc.fit(m_data, method="map", progressbar=False)
    pred = pmc.predict(held, test, method="bpe")
    np.testing.assert_allclose(pred.marginals, _exact_marginals(
        test, held["posterior"]["W"].values[0, 0], T_fixed), atol=1e-10)
    # weights as a pm.Deterministic (a non-centred prior) and as an unnamed expression
    for named in (True, False):
        with pm.Model() as m2:
            z = pm.Normal("z", 0, 1, shape=(2, 2))
            s = pm.HalfNormal("s", 1.0)
            W2 = pm.Deterministic("W", s * z) if named else s * z
            T2 = pm.Normal("T", 0, 1, shape=(2, 2))
            pmc.CRF("y", graphs=batch, node_features=X, node_weights=W2, edge_weights=T2,
                    observed=y)
        res = pmc.fit(m2, method="map", progressbar=False)
        if named:
            pred = pmc.predict(res, test, method="bpe")
            want = _exact_marginals(test, res["posterior"]["W"].values[0, 0],
                                    res["posterior"]["T"].values[0, 0])
            np.testing.assert_allclose(pred.marginals, want, atol=1e-10)
        else:
            with pytest.raises(ValueError, match="unnamed expression.*pm.Deterministic"):
                pmc.predict(res, test, method="bpe")


def test_predict_names_mismatched_data():
    import pymc as pm

    from pymc_crf.datasets import CRFData

    batch, X, y, test = _chain_data()
    with pm.Model() as m:
        W = pm.Normal("W", 0, 1, shape=(2, 2))
        T = pm.Normal("T", 0, 1, shape=(2, 2))
        pmc.CRF("y", graphs=batch, node_features=X, node_weights=W, edge_weights=T, observed=y)
    res = pmc.fit(m, method="map", progressbar=False)
    wide = CRFData(test.graphs, test.labels, node_features=np.ones((4, 3)), n_labels=2)
    with pytest.raises(ValueError, match="node features have 3 columns; the model's node "
                                         "weights expect 2"):
        pmc.predict(res, wide, method="bpe")
    high = CRFData(test.graphs, np.array([0, 1, 4, 0]), node_features=test.node_features,
                   n_labels=5)
    with pytest.raises(ValueError, match="label 4 .* outside 0..1"):
        pmc.predict(res, high, method="bpe")
    for bad in (0, -1, 2.5):
        with pytest.raises(ValueError, match=r"draws \(None for all draws\) must be an integer >= 1"):
            pmc.predict(res, test, draws=bad)
    with pytest.raises(TypeError, match="data must be a CRFData"):
        pmc.predict(res, (test.graphs, test.node_features))
    with pytest.raises(ValueError, match="predictions must be True or False"):
        pmc.predict(res, test, predictions="False")   # it wrote the groups into res
    assert "predictions" not in res.children
    # EP's model_average (expected potentials, its own path) checks the columns too
    ep = pmc.fit(m, method="ep", draws=10, progressbar=False)
    for cols in (1, 3):
        narrow = CRFData(test.graphs, test.labels, node_features=np.ones((4, cols)), n_labels=2)
        with pytest.raises(ValueError, match=f"node features have {cols} columns; the model's "
                                             "node weights expect 2"):
            pmc.predict(ep, narrow, method="model_average")
    # the labels must be one per node: a CRF result given sequence classes is refused
    seq = pmc.datasets.SequenceData(test.graphs, test.node_features, np.array([1]), 2)
    with pytest.raises(ValueError, match="this CRF result labels the nodes .* got SequenceData"):
        pmc.predict(res, seq)


def test_hidden_crf_predictions_need_one_class_per_graph():
    """A hidden-CRF result predicts one class per graph: data with labels per node (CRFData)
    are refused by their type, not broadcast against the classes."""
    import pymc as pm

    from pymc_crf.datasets import CRFData

    rng = np.random.default_rng(1)
    b = pmc.GraphBatch.chains([3, 3])
    X = rng.normal(size=(6, 2))
    with pm.Model() as m:
        pmc.HCRF("y", graphs=b, node_features=X,
                 theta_x=pm.Normal("theta_x", 0, 1, shape=(2, 2)),
                 theta_y=pm.Normal("theta_y", 0, 1, shape=(2, 2)),
                 theta_e=pm.Normal("theta_e", 0, 1, shape=(2, 2, 2)), observed=[0, 1])
    res = pmc.fit(m, method="map", jitter=0.1, random_seed=0, progressbar=False)
    nodes = CRFData(pmc.GraphBatch.chains([4]), np.array([0, 1, 1, 1]),
                    node_features=rng.normal(size=(4, 2)))
    with pytest.raises(ValueError, match="one class per sequence, for data given as "
                                         "pmc.datasets.SequenceData; got CRFData"):
        pmc.predict(res, nodes)
    # class probabilities are per graph: the node-marginal plots refuse them by name
    seqs = pmc.datasets.SequenceData(b, X, np.array([0, 1]), 2)
    pred = pmc.predict(res, seqs)
    assert pred.per_graph
    assert "2 graphs" in repr(pred)
    for plot, args in ((pmc.plots.plot_marginals_chain, (seqs.graphs,)),
                       (pmc.plots.plot_marginals_grid, ((1, 3), seqs.graphs))):
        with pytest.raises(TypeError, match="class probabilities of hidden CRFs "
                                            "\\('hcrf_average'\\) are not node marginals"):
            plot(pred, *args)
    # labels that are not whole numbers are refused with the data, before any prediction
    with pytest.raises(ValueError, match="labels must be whole numbers; entry 1 is 0.5"):
        pmc.predict(res, pmc.datasets.SequenceData(b, X, np.array([0.0, 0.5]), 2))


def test_label_level_methods_on_a_hidden_crf_result_say_so():
    import xarray as xr

    from pymc_crf.model.predictors import result_layout

    res = xr.DataTree.from_dict({"posterior": xr.Dataset()})
    res.attrs["hcrf_weights"] = ["theta_x", "theta_y", "theta_e"]
    with pytest.raises(ValueError, match="hidden-CRF .* result"):
        result_layout(res)


def test_misspelt_options_are_refused(fitted):
    res, test = fitted
    with pytest.raises(TypeError, match="predict method 'average' has no option 'drawz'"):
        pmc.predict(res, test, drawz=5)
    with pytest.raises(TypeError, match="'inferenc'.*its options"):
        pmc.predict(res, test, method="model_average", inferenc="bp")


@pytest.mark.parametrize("inference", ["junction_tree", "brute_force"])
def test_marginals_of_a_graph_that_allows_no_labelling_are_refused(inference):
    """Hard constraints (a constant -inf transition table: neighbours differ) that a triangle
    cannot meet: its log Z is -inf and its marginals 0 / 0, so every predictor refuses the graph
    by number, as decoding does, instead of returning zeros or NaN."""
    import pymc as pm

    T = np.array([[-np.inf, 0.0], [0.0, -np.inf]])
    with pm.Model() as m:
        W = pm.Normal("W", 0.0, 1.0, shape=(1, 2))
        pmc.CRF("y", graphs=pmc.GraphBatch.chains([3, 2]), node_features=np.ones((5, 1)),
                node_weights=W, edge_weights=T, observed=np.array([0, 1, 0, 1, 0]))
    fit = pmc.fit(m, method="map", progressbar=False)
    two = pmc.GraphBatch.from_edges([[(0, 1)], [(0, 1), (1, 2), (0, 2)]], [2, 3])
    data = pmc.CRFData(two, np.array([0, 1, 0, 1, 0]), np.ones((5, 1)), n_labels=2)
    for method in ("bpe", "map", "average"):
        with pytest.raises(ValueError, match=r"graphs \[1\] allow no labelling"):
            pmc.predict(fit, data, method, inference=inference)
    with pytest.raises(ValueError, match=r"graphs \[1\] allow no labelling"):
        pmc.queries.uncertainty(fit, data, inference=inference)
    # the graph that allows labellings, alone: its marginals
    ok = pmc.CRFData(pmc.GraphBatch.chains([2]), np.array([0, 1]), np.ones((2, 1)), n_labels=2)
    np.testing.assert_allclose(pmc.predict(fit, ok, "bpe", inference=inference).marginals,
                               0.5, atol=1e-12)
