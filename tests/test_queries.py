"""Posterior queries (pymc_crf.queries) on MAP and posterior results, against brute-force
enumeration on short chains; the selective-prediction and span-calibration metrics; prior_from
and sequential updating."""

import numpy as np
import pymc as pm
import pytest
import xarray as xr
from helpers.brute_force import chain_labellings
from pytensor.graph.basic import Constant
from scipy.special import logsumexp

import pymc_crf as pmc
from pymc_crf.inference import BruteForce, ChainEngine
from pymc_crf.inference.spans import ChunkScheme
from pymc_crf.metrics import confidence_reliability, selective_curve
from pymc_crf.model.predictors import log_potentials_for, result_layout, weight_draws
from pymc_crf.model.results import gaussian_fit_group

TAGS = ["O", "B-A", "I-A"]


def _data(seed, G, max_len=5, F=3, K=3):
    """Chains of 2..max_len nodes, labels drawn from a CRF whose transitions make BIO chunks."""
    rng = np.random.default_rng(seed)
    b = pmc.GraphBatch.chains(rng.integers(2, max_len + 1, size=G))
    X = rng.normal(size=(b.n_total_nodes, F))
    W = np.random.default_rng(99).normal(size=(F, K)) * 1.5
    T = np.array([[1.0, 0.5, -3.0], [0.0, -0.5, 1.0], [0.2, 0.0, 0.8]])
    y = ChainEngine().sample(b, X @ W, T[None], 1, rng)[0]
    return pmc.CRFData(b, y, node_features=X, n_labels=K)


def _model(d, prior=None, covariance="auto"):
    with pm.Model(coords=d.coords) as m:
        if prior is None:
            W = pm.Normal("W", 0, 2, dims=("node_feature", "node_label"))
            T = pm.Normal("T", 0, 2, dims=("label_i", "label_j"))
        else:
            w = pmc.prior_from(prior, covariance=covariance)
            W, T = w["W"], w["T"]
        pmc.CRF("y", graphs=d.graphs, node_features=d.node_features, node_weights=W,
                edge_weights=T, observed=d.padded_labels, dims=("graph", "position"))
    return m


@pytest.fixture(scope="module")
def fits():
    train, test = _data(0, 30), _data(1, 8)
    m = _model(train)
    r_map = pmc.fit(m, method="map", rule="strict", progressbar=False)
    r_bl = pmc.fit(m, method="bethe_laplace", draws=12, random_seed=1, progressbar=False)
    return train, test, r_map, r_bl


def _per_draw_tables(result, data):
    info = result_layout(result)
    ws = weight_draws(result, info)
    S = next(iter(ws.values())).shape[0]
    return [log_potentials_for(data, info, ws["node_weights"][s], ws["edge_weights"][s])
            for s in range(S)]


@pytest.mark.parametrize("which", ["map", "bl"])
def test_span_probabilities_equal_enumeration(fits, which):
    _, test, r_map, r_bl = fits
    result = r_map if which == "map" else r_bl
    sp = pmc.queries.span_probabilities(result, test, TAGS, draws=None)
    scheme = ChunkScheme(TAGS)
    b = test.graphs
    tables = _per_draw_tables(result, test)
    assert len(tables) == (1 if which == "map" else 12)
    # the spans are the chunks of the MAP labelling at the posterior mean
    node, edge = log_potentials_for(test, result_layout(result), *(
        np.asarray(result["fit"]["mean_vector"])[sl].reshape(shape) if "fit" in result.children
        else result.posterior[v].values[0, 0]
        for v, sl, shape in (("W", slice(0, 9), (3, 3)), ("T", slice(9, 18), (3, 3)))))
    labels = ChainEngine().map_assignment(b, node, edge).labels
    want_spans = [(g, s, e) for g in range(b.n_graphs) for _, s, e in
                  scheme.chunks(labels[b.node_offsets[g]:b.node_offsets[g + 1]])]
    assert list(zip(sp.graph, sp.start, sp.end, strict=True)) == want_spans and len(sp) > 3
    assert set(sp.type) == {"A"}
    gold = [(g, s, e) for g in range(b.n_graphs) for _, s, e in
            scheme.chunks(test.labels[b.node_offsets[g]:b.node_offsets[g + 1]])]
    want = np.zeros(len(sp))
    for node, edge in tables:
        for i, (g, s, e) in enumerate(want_spans):
            configs, logp = chain_labellings(b, node, edge, g)
            hit = [(0, s, e) in set(scheme.chunks(c)) for c in configs]
            want[i] += np.exp(logp[hit]).sum() / len(tables)
    np.testing.assert_allclose(sp.probability, want, atol=1e-12)
    np.testing.assert_array_equal(sp.correct, [x in gold for x in want_spans])
    assert 0 < sp.correct.sum() < len(sp)
    # the exact-tags event of a span opening with B-A lies inside its chunk event (the MAP
    # labelling also opens some chunks with I-A, which conlleval reads as a chunk start)
    tags = pmc.queries.span_probabilities(result, test, TAGS, draws=None, labels=labels,
                                          match="tags")
    opens = labels[b.node_offsets[sp.graph] + sp.start] == 1
    assert opens.sum() > 3 and np.all(tags.probability[opens] <= sp.probability[opens] + 1e-12)
    assert np.any(tags.probability[opens] < sp.probability[opens] - 1e-3)
    # given spans: the gold chunks (the mean is the expected recall), and the predicted ones again
    gold_rows = [(g, s, e, "A") for g, s, e in gold]
    rec = pmc.queries.span_probabilities(result, test, TAGS, draws=None, spans=gold_rows)
    assert len(rec) == len(gold) and rec.correct.all() and 0 < rec.probability.mean() < 1
    same = pmc.queries.span_probabilities(result, test, TAGS, draws=None,
                                          spans=[(g, s, e, "A") for g, s, e in want_spans])
    np.testing.assert_allclose(same.probability, sp.probability, rtol=1e-12)
    with pytest.raises(ValueError, match="types \\['B'\\]"):
        pmc.queries.span_probabilities(result, test, TAGS, spans=[(0, 0, 0, "B")])
    with pytest.raises(ValueError, match=r"span 0 \('A' in graph 0, positions 0\.\.40\) is not a "
                                         r"range of positions inside its graph of \d nodes"):
        pmc.queries.span_probabilities(result, test, TAGS, spans=[(0, 0, 40, "A")])
    # labels from a Prediction
    pred = pmc.predict(result, test, method="map")
    again = pmc.queries.span_probabilities(result, test, TAGS, draws=None, labels=pred)
    np.testing.assert_array_equal(again.probability, sp.probability)
    # calibration and selective curves are metrics' on (probability, correct)
    assert sp.reliability(4).ece == confidence_reliability(sp.probability, sp.correct, 4).ece
    assert sp.selective().area == selective_curve(sp.probability, sp.correct).area


def test_kbest_map_and_posterior_equal_enumeration(fits):
    _, test, r_map, r_bl = fits
    b = test.graphs
    for result in (r_map, r_bl):
        k = 4
        got = pmc.queries.kbest(result, test, k, draws=None)
        tables = _per_draw_tables(result, test)
        for g in range(b.n_graphs):
            per = [chain_labellings(b, node, edge, g) for node, edge in tables]
            configs = per[0][0]
            avg = logsumexp(np.stack([lp for _, lp in per]), axis=0) - np.log(len(per))
            order = np.argsort(-avg, kind="stable")[:k]
            m = min(k, len(order))
            lo, hi = b.node_offsets[g], b.node_offsets[g + 1]
            # (for the posterior: the top k of the averaged distribution are in the union of the
            # draws' k best here, so the list is the exact top k)
            np.testing.assert_array_equal(got.labels[:m, lo:hi], configs[order[:m]])
            np.testing.assert_allclose(got.log_prob[:m, g], avg[order[:m]], atol=1e-10)
            assert np.all(got.log_prob[m:, g] == -np.inf) and (got.labels[m:, lo:hi] == -1).all()


@pytest.mark.parametrize("seed", [None, 5, "generator"])
def test_kbest_of_a_draw_subset_scores_and_normalises_by_the_same_draws(fits, seed):
    """With fewer draws than the result has, the candidates' log Z and their scores come from the
    same chosen draws, whatever the seed: the k = 9 labellings of 2-node chains sum to 1."""
    _, test, _, r_bl = fits
    two = np.flatnonzero(test.graphs.n_nodes == 2)
    sub = test.subset(list(two)) if len(two) else _data(3, 4, max_len=2)
    rng = np.random.default_rng(0) if seed == "generator" else seed
    got = pmc.queries.kbest(r_bl, sub, 9, draws=5, random_seed=rng)
    np.testing.assert_allclose(np.exp(logsumexp(got.log_prob, axis=0)), 1.0, rtol=1e-12)


def test_sample_labellings_frequencies(fits):
    _, test, r_map, r_bl = fits
    one = test.subset([int(np.argmin(test.graphs.n_nodes))])  # a chain of 2 nodes: 9 labellings
    for result in (r_map, r_bl):
        n = 6000
        s = pmc.queries.sample_labellings(result, one, n, random_seed=3)
        assert s.shape == (n, one.graphs.n_total_nodes) and s.dtype == np.int64
        tables = _per_draw_tables(result, one)
        probs = np.mean([np.exp(chain_labellings(one.graphs, nd, ed, 0)[1]) for nd, ed in tables],
                        axis=0)
        freq = np.bincount(s[:, 0] * 3 + s[:, 1], minlength=9) / n
        assert np.abs(freq - probs).max() < 4 * np.sqrt(0.25 / n)
    np.testing.assert_array_equal(pmc.queries.sample_labellings(r_bl, test, 5, random_seed=1),
                                  pmc.queries.sample_labellings(r_bl, test, 5, random_seed=1))


def test_uncertainty_and_selection(fits):
    _, test, r_map, r_bl = fits
    b = test.graphs
    u = pmc.queries.uncertainty(r_bl, test, draws=None)
    marg = [BruteForce().marginals(b, nd, ed).node for nd, ed in _per_draw_tables(r_bl, test)]

    def ent(p):
        return np.bincount(b.node_graph, -np.sum(p * np.log(p), axis=-1), minlength=b.n_graphs)

    pred = ent(np.mean(marg, axis=0))
    expected = np.mean([ent(m) for m in marg], axis=0)
    np.testing.assert_allclose(u.predictive_entropy, pred, rtol=1e-10)
    np.testing.assert_allclose(u.expected_entropy, expected, rtol=1e-10)
    np.testing.assert_allclose(u.bald, pred - expected, atol=1e-12)
    assert u.n_draws == 12 and np.all(u.bald > 0)
    u_map = pmc.queries.uncertainty(r_map, test)
    np.testing.assert_allclose(u_map.bald, 0.0, atol=1e-12)
    m_map = BruteForce().marginals(b, *_per_draw_tables(r_map, test)[0]).node
    np.testing.assert_allclose(u_map.point_entropy, ent(m_map), rtol=1e-10)
    sel = pmc.queries.select_for_labelling(r_bl, test, 3, "bald", draws=None)
    np.testing.assert_array_equal(sel, np.argsort(-u.bald, kind="stable")[:3])
    sel = pmc.queries.select_for_labelling(r_bl, test, 3, "bald", draws=None, per_token=True)
    np.testing.assert_array_equal(sel, np.argsort(-u.bald / b.n_nodes, kind="stable")[:3])
    sel = pmc.queries.select_for_labelling(r_map, test, 3, "entropy")
    np.testing.assert_array_equal(sel, np.argsort(-ent(m_map), kind="stable")[:3])
    rnd = pmc.queries.select_for_labelling(r_map, test, 5, "random", random_seed=2)
    assert len(set(rnd)) == 5 and np.array_equal(
        rnd, pmc.queries.select_for_labelling(r_map, test, 5, "random", random_seed=2))
    with pytest.raises(ValueError, match="one draw .*strategy='entropy'"):
        pmc.queries.select_for_labelling(r_map, test, 3, "bald")
    with pytest.raises(ValueError, match="strategy"):
        pmc.queries.select_for_labelling(r_map, test, 3, "margin")
    with pytest.raises(ValueError, match="the pool has 8"):
        pmc.queries.select_for_labelling(r_map, test, 9, "entropy")


def test_selective_prediction_token_and_span(fits):
    _, test, r_map, r_bl = fits
    for result in (r_map, r_bl):
        pred = pmc.predict(result, test, method="average", draws=None)
        got = pmc.queries.selective_prediction(result, test, draws=None)
        want = selective_curve(pred.marginals.max(axis=1), pred.labels == test.labels)
        np.testing.assert_array_equal(got.accuracy, want.accuracy)
        assert got.area == want.area and got.coverage[-1] == 1.0
        assert got.accuracy[-1] == pytest.approx(1 - pred.error_rate)
    span = pmc.queries.selective_prediction(r_bl, test, level="span", tags=TAGS)
    sp = pmc.queries.span_probabilities(r_bl, test, TAGS)
    assert span.area == sp.selective().area
    with pytest.raises(ValueError, match="tags="):
        pmc.queries.selective_prediction(r_bl, test, level="span")
    with pytest.raises(ValueError, match="level"):
        pmc.queries.selective_prediction(r_bl, test, level="graph")


def test_selective_curve_and_confidence_reliability_by_hand():
    conf = np.array([0.9, 0.6, 0.9, 0.3, 0.6])
    ok = np.array([True, False, True, False, True])
    c = selective_curve(conf, ok)
    np.testing.assert_allclose(c.coverage, [0.4, 0.8, 1.0])
    np.testing.assert_allclose(c.accuracy, [1.0, 0.75, 0.6])
    np.testing.assert_allclose(c.threshold, [0.9, 0.6, 0.3])
    assert c.area == pytest.approx(0.4 * 1.0 + 0.4 * 0.75 + 0.2 * 0.6)
    assert c.accuracy_at(0.5) == 0.75
    # distinct confidences: the mean accuracy of the c most confident, c = 1..n
    d = selective_curve(np.array([0.9, 0.8, 0.7]), np.array([1, 0, 1]))
    assert d.area == pytest.approx(np.mean([1, 1 / 2, 2 / 3]))
    r = confidence_reliability(conf, ok, n_bins=2)
    np.testing.assert_array_equal(r.count, [1, 4])
    np.testing.assert_allclose(r.confidence[1], 0.75)
    assert r.ece == pytest.approx((1 * 0.3 + 4 * abs(0.75 - 0.75)) / 5)
    with pytest.raises(ValueError, match="probabilities"):
        selective_curve(np.array([1.2]), np.array([True]))
    with pytest.raises(ValueError, match="booleans"):
        confidence_reliability(np.array([0.5]), np.array([2]))
    with pytest.raises(ValueError, match="one length"):
        selective_curve(np.array([0.5, 0.4]), np.array([True]))


def test_refusals(fits):
    _, test, r_map, _ = fits
    with pytest.raises(TypeError, match="CRFData"):
        pmc.queries.kbest(r_map, test.graphs, 2)
    seqs, _ = pmc.datasets.hmm_classes(n_train_per_class=1, n_test_per_class=1, T=3, seed=0)
    with pytest.raises(TypeError, match="SequenceData: the queries are about labellings of CRFs"):
        pmc.queries.kbest(r_map, seqs, 2)
    with pytest.raises(ValueError, match="not a BIO tag"):
        pmc.queries.span_probabilities(r_map, test, ["O", "X-A", "I-A"])
    with pytest.raises(ValueError, match="4 tags for a model with 3 labels"):
        pmc.queries.span_probabilities(r_map, test, ["O", "B-A", "I-A", "B-B"])
    with pytest.raises(ValueError, match="2 tags for a model with 3 labels"):
        pmc.queries.span_probabilities(r_map, test, ["O", "B-A"])
    with pytest.raises(ValueError, match="Gaussian posterior.*'laplace', 'bethe_laplace', 'ep'"):
        with pm.Model():
            pmc.prior_from(r_map)
    tree = pmc.CRFData(pmc.GraphBatch.from_edges([np.array([[0, 1], [0, 2]])], [3]), None,
                       node_features=np.zeros((3, 3)), n_labels=3)
    with pytest.raises(ValueError, match="chain CRFs; graph 0 is a tree"):
        pmc.queries.kbest(r_map, tree, 2)
    with pytest.raises(ValueError, match="chain CRFs; graph 0 is a tree"):
        pmc.queries.span_probabilities(r_map, tree, TAGS)
    # marginal-based queries and sampling take trees (junction tree: exact)
    assert pmc.queries.uncertainty(r_map, tree).point_entropy.shape == (1,)
    assert pmc.queries.sample_labellings(r_map, tree, 4).shape == (4, 3)


# --- prior_from ---------------------------------------------------------------------------------

def _tree(post, mean, cov, names):
    tree = xr.DataTree.from_dict({"posterior": post, "fit": gaussian_fit_group(mean, cov, names)})
    tree.attrs["method"] = "ep"
    return tree


def _value(t):
    return t.data if isinstance(t, Constant) else t.eval()


@pytest.mark.parametrize("covariance", ["full", "diagonal"])
def test_prior_from_sequential_linear_gaussian_equals_joint(covariance):
    """Linear-Gaussian regression y = X w + noise, w = (a (2,), B (2, 2)) with prior N(0, s0^2):
    the batch-1 posterior is exactly Gaussian; prior_from(its result) then batch 2 is exactly the
    joint posterior (full covariance; with orthogonal batch-1 columns the posterior is diagonal
    and the diagonal prior is exact too)."""
    rng = np.random.default_rng(0)
    d, s0, sigma = 6, 2.0, 0.5
    X1 = (np.eye(d) * 3.0 if covariance == "diagonal" else rng.normal(size=(10, d)))
    X2 = rng.normal(size=(7, d))
    w_true = rng.normal(size=d)
    y1 = X1 @ w_true + sigma * rng.normal(size=X1.shape[0])
    y2 = X2 @ w_true + sigma * rng.normal(size=X2.shape[0])

    def update(m, V, X, y):  # conjugate update of N(m, V) by y ~ N(X w, sigma^2)
        P = np.linalg.inv(V) + X.T @ X / sigma**2
        C = np.linalg.inv(P)
        return C @ (np.linalg.solve(V, m) + X.T @ y / sigma**2), C

    m1, V1 = update(np.zeros(d), s0**2 * np.eye(d), X1, y1)
    if covariance == "diagonal":
        V1[~np.eye(d, dtype=bool)] = 0.0  # exactly diagonal (orthogonal columns)
    names = ["a[0]", "a[1]", "B[0, 0]", "B[0, 1]", "B[1, 0]", "B[1, 1]"]
    result = _tree(xr.Dataset({"a": (("chain", "draw", "coef"), m1[None, None, :2]),
                               "B": (("chain", "draw", "B_dim_0", "B_dim_1"),
                                     m1[None, None, 2:].reshape(1, 1, 2, 2))},
                              coords={"coef": ["x", "z"]}), m1, V1, names)
    with pm.Model() as model:
        w = pmc.prior_from(result)
    assert set(w) == {"a", "B"} and model.named_vars_to_dims["a"] == ("coef",)
    assert list(model.coords["coef"]) == ["x", "z"]
    if covariance == "full":
        flat = model["a_B_flat"]
        mu, cov = (_value(p) for p in flat.owner.op.dist_params(flat.owner))
        np.testing.assert_allclose(mu, m1)
        np.testing.assert_allclose(cov, V1, rtol=1e-12)
        # the weight variables are the flat vector in the fit group's order
        v = rng.normal(size=d)
        np.testing.assert_allclose(w["a"].eval({flat: v}), v[:2])
        np.testing.assert_allclose(w["B"].eval({flat: v}), v[2:].reshape(2, 2))
        prior_mean, prior_cov = mu, cov
    else:
        assert model.free_RVs == [w["a"], w["B"]]
        mus = [_value(w[k].owner.op.dist_params(w[k].owner)[0]) for k in ("a", "B")]
        sds = [_value(w[k].owner.op.dist_params(w[k].owner)[1]) for k in ("a", "B")]
        prior_mean = np.concatenate([np.ravel(m) for m in mus])
        prior_cov = np.diag(np.concatenate([np.ravel(s) for s in sds]) ** 2)
    seq = update(prior_mean, prior_cov, X2, y2)
    joint = update(np.zeros(d), s0**2 * np.eye(d), np.vstack([X1, X2]), np.r_[y1, y2])
    np.testing.assert_allclose(seq[0], joint[0], rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(seq[1], joint[1], rtol=1e-10, atol=1e-14)


def test_prior_from_chain_crf_sequential_vs_joint():
    """bethe_laplace on batch 1, its diagonal Gaussian as the prior of batch 2, map there: close
    to the joint MAP of both batches (measured: max |difference| 0.49 where the weights reach
    3.3, against 1.38 for the batch-1 fit alone)."""
    full = _data(0, 60, max_len=6)
    b1, b2 = full.subset(np.arange(30)), full.subset(np.arange(30, 60))
    joint = pmc.fit(_model(full), method="map", rule="strict", progressbar=False)
    r1 = pmc.fit(_model(b1), method="bethe_laplace", draws=10, random_seed=1, progressbar=False)
    m2 = _model(b2, r1, covariance="diagonal")
    assert m2.named_vars_to_dims["W"] == ("node_feature", "node_label")
    r2 = pmc.fit(m2, method="map", rule="strict", progressbar=False)
    jw = np.concatenate([joint.posterior[v].values.ravel() for v in ("W", "T")])
    sw = np.concatenate([r2.posterior[v].values.ravel() for v in ("W", "T")])
    first = np.asarray(r1["fit"]["mean_vector"])
    assert np.abs(sw - jw).max() < 0.6
    assert np.abs(sw - jw).max() < 0.4 * np.abs(first - jw).max()
    # a bethe_laplace fit of batch 2 takes the diagonal prior too, and prior_from chains on
    r2b = pmc.fit(m2, method="bethe_laplace", draws=10, random_seed=1, progressbar=False)
    np.testing.assert_allclose(np.asarray(r2b["fit"]["mean_vector"]), sw, atol=1e-4)
    with pm.Model(coords=b2.coords):
        w3 = pmc.prior_from(r2b)
    assert set(w3) == {"W", "T"}


@pytest.mark.slow
def test_prior_from_full_covariance_chain_crf():
    """As above with the full covariance (pm.MvNormal; map compiles the model: minutes cold).
    Measured: max |difference| 0.23 from the joint MAP (relative norm 5.5 %)."""
    full = _data(0, 60, max_len=6)
    b1, b2 = full.subset(np.arange(30)), full.subset(np.arange(30, 60))
    joint = pmc.fit(_model(full), method="map", rule="strict", progressbar=False)
    r1 = pmc.fit(_model(b1), method="bethe_laplace", draws=10, random_seed=1, progressbar=False)
    r2 = pmc.fit(_model(b2, r1, covariance="full"), method="map", rule="strict", progressbar=False)
    jw = np.concatenate([joint.posterior[v].values.ravel() for v in ("W", "T")])
    sw = np.concatenate([r2.posterior[v].values.ravel() for v in ("W", "T")])
    assert np.abs(sw - jw).max() < 0.3
    pred = pmc.predict(r2, b2, method="map")  # the Deterministic weights are read back by name
    assert pred.error_rate < 0.5


def test_prior_from_bad_input():
    result = _tree(xr.Dataset({"a": (("chain", "draw", "a_dim_0"), np.zeros((1, 1, 2)))}),
                   np.zeros(2), np.eye(2), ["a[0]", "a[1]"])
    with pytest.raises(ValueError, match="inside a pm.Model"):
        pmc.prior_from(result)
    with pytest.raises(ValueError, match="covariance must be"):
        with pm.Model():
            pmc.prior_from(result, covariance="low_rank")
    bad = _tree(xr.Dataset({"a": (("chain", "draw", "a_dim_0"), np.zeros((1, 1, 2)))}),
                np.zeros(2), np.diag([1.0, 0.0]), ["a[0]", "a[1]"])
    with pytest.raises(ValueError, match="variance <= 0 at 'a\\[1\\]'"):
        with pm.Model():
            pmc.prior_from(bad)
    with pm.Model() as m:
        w = pmc.prior_from(result)  # diagonal covariance: independent Normals
    assert m.free_RVs == [w["a"]] and w["a"].owner.op.name == "normal"
    for not_a_result in ({"posterior": None}, None, m):
        with pytest.raises(TypeError, match="must be a fitted DataTree .*got " +
                           type(not_a_result).__name__):
            with pm.Model():
                pmc.prior_from(not_a_result)
        with pytest.raises(TypeError, match="must be a fitted DataTree"):
            pmc.queries.kbest(not_a_result, _data(0, 2), 2)


def test_prior_from_refuses_model_coords_that_are_not_the_results():
    """Each entry's prior is the posterior of the result's entry at its position: a new model
    whose coords name other (or reordered) features would give each feature another one's
    posterior, one of another length a variable whose dims do not match its shape."""
    result = _tree(xr.Dataset({"a": (("chain", "draw", "feature"), np.zeros((1, 1, 3)))},
                              coords={"feature": ["w=the", "w=cat", "len"]}),
                   np.array([1.0, 2.0, 3.0]), np.eye(3), ["a[0]", "a[1]", "a[2]"])
    with pytest.raises(ValueError, match="coords of 'feature' are not the result's: position 0 "
                                         "is 'len' in the model and 'w=the' in the result"):
        with pm.Model(coords={"feature": ["len", "w=cat", "w=the"]}):
            pmc.prior_from(result)
    with pytest.raises(ValueError, match="dim 'feature' has 4 coords; the result's 'a' has 3"):
        with pm.Model(coords={"feature": ["w=the", "w=cat", "len", "w=a"]}):
            pmc.prior_from(result)
    with pm.Model(coords={"feature": ["w=the", "w=cat", "len"]}) as m:  # the same coords
        pmc.prior_from(result)
    np.testing.assert_array_equal(m.initial_point()["a"], [1.0, 2.0, 3.0])


def test_prior_from_refuses_a_predictive_ard_result_that_removed_a_feature():
    """ARD's removed features have weights exactly 0 and variance 0 in the fit group (the
    fitter's own output on a chain CRF with irrelevant features): refused naming the cause."""
    result = _tree(xr.Dataset({"a": (("chain", "draw", "a_dim_0"), np.zeros((1, 1, 2)))}),
                   np.array([0.7, 0.0]), np.diag([0.3, 0.0]), ["a[0]", "a[1]"])
    result.attrs["method"] = "predictive_ard"
    with pytest.raises(ValueError, match="variance of 0 at 'a\\[1\\]': predictive_ard removed"):
        with pm.Model():
            pmc.prior_from(result)


def test_prior_from_a_result_with_marginal_sds_only(fits):
    """laplace / bethe_laplace with a diagonal or implicit covariance keep sd_vector only: their
    prior is the diagonal one, with those sds; a full one is refused by name."""
    train, _, _, _ = fits
    r = pmc.fit(_model(train), method="laplace", covariance="diagonal", draws=4,
                progressbar=False)
    assert "sd_vector" in r["fit"] and "covariance_matrix" not in r["fit"]
    with pm.Model(coords=train.coords) as m:
        w = pmc.prior_from(r)
    assert set(m.free_RVs) == {w["W"], w["T"]}
    sd = r["fit"]["sd_vector"].values
    got = np.concatenate([m.initial_point()  # the means
                          [n].ravel() for n in ("W", "T")])
    np.testing.assert_allclose(got, r["fit"]["mean_vector"].values)
    np.testing.assert_allclose(w["W"].owner.inputs[-1].eval().ravel(), sd[:w["W"].size.eval()])
    with pytest.raises(ValueError, match="only the posterior's marginal sds.*'diagonal'"):
        with pm.Model(coords=train.coords):
            pmc.prior_from(r, covariance="full")


def test_prior_from_ep_on_a_loopy_probit_crf(loop_model):
    """The flat MvNormal of an EP fit of the loopy BCRF (probit edge potentials, one weight
    tensor with three dims) carries its mean and covariance; the dims and coords come along."""
    r = pmc.fit(loop_model, method="ep", draws=20, random_seed=0, progressbar=False)
    with pm.Model() as m:
        w = pmc.prior_from(r)
    assert list(w) == ["w"] and m.named_vars_to_dims["w"] == ("edge_feature", "label_i", "label_j")
    assert list(m.coords["edge_feature"]) == list(r.posterior.coords["edge_feature"].values)
    flat = m["w_flat"]
    mu, cov = (_value(p) for p in flat.owner.op.dist_params(flat.owner))
    np.testing.assert_allclose(mu, r["fit"]["mean_vector"].values)
    np.testing.assert_allclose(cov, r["fit"]["covariance_matrix"].values, rtol=1e-12, atol=1e-15)
    v = np.arange(mu.size, dtype=float)
    np.testing.assert_allclose(w["w"].eval({flat: v}), v.reshape(6, 2, 2))


def test_a_tagger_passed_for_its_result_is_told_to_pass_result_():
    """A CRFTagger user naturally hands the tagger itself to the queries; the error names its
    ``result_`` and the ``log_potentials`` that give the data, instead of only the type."""
    X = [[{"w": "a"}, {"w": "b"}], [{"w": "b"}, {"w": "a"}, {"w": "b"}]]
    tagger = pmc.CRFTagger().fit(X, [["B-A", "I-A"], ["O", "B-A", "I-A"]])
    data = tagger.log_potentials(X)[0]
    hint = r"pass tagger\.result_ .*tagger\.log_potentials\(X\)\[0\]"
    calls = [lambda: pmc.queries.span_probabilities(tagger, data, tagger.classes_),
             lambda: pmc.queries.kbest(tagger, data, 2),
             lambda: pmc.queries.sample_labellings(tagger, data, 2),
             lambda: pmc.queries.uncertainty(tagger, data),
             lambda: pmc.queries.select_for_labelling(tagger, data, 1, "entropy"),
             lambda: pmc.predict(tagger, data)]
    for call in calls:
        with pytest.raises(TypeError, match="got CRFTagger: a CRFTagger's fit is its result_ .*"
                           + hint):
            call()
    with pytest.raises(TypeError, match=hint):
        with pm.Model():
            pmc.prior_from(tagger)
    assert pmc.queries.kbest(tagger.result_, data, 2).labels.shape == (2, 5)
