"""MAP on an HCRF model (with a jittered start) and the default predict routing to class probabilities."""

import numpy as np
import pymc as pm

import pymc_crf as pmc


def _hcrf_model(tr, S: int) -> pm.Model:
    """An HCRF with S hidden states and N(0, 3^2) priors on the training data ``tr``."""
    F, C = tr.node_features.shape[1], tr.n_classes
    with pm.Model() as model:
        tx = pm.Normal("theta_x", 0, 3, shape=(F, S))
        ty = pm.Normal("theta_y", 0, 3, shape=(S, C))
        te_ = pm.Normal("theta_e", 0, 3, shape=(S, S, C))
        pmc.HCRF("y", graphs=tr.graphs, node_features=tr.node_features, theta_x=tx, theta_y=ty,
                 theta_e=te_, observed=tr.labels)
    return model


def test_map_with_jitter_then_predict_routes_to_hcrf():
    tr, te = pmc.datasets.hmm_classes(n_train_per_class=4, n_test_per_class=10, T=20, seed=0)
    C = tr.n_classes
    model = _hcrf_model(tr, 4)
    res = pmc.fit(model, method="map", jitter=0.5, random_seed=1, maxiter=300)
    assert res.attrs["hcrf_weights"] == ["theta_x", "theta_y", "theta_e"]
    pred = pmc.predict(res, te)  # no model needed: routed to the HCRF predictor
    assert pred.method == "hcrf_average"
    assert pred.marginals.shape == (te.graphs.n_graphs, C)
    np.testing.assert_allclose(pred.marginals.sum(1), 1.0)
    assert pred.error_rate == np.mean(pred.labels != te.labels)
    assert pred.error_rate < 0.5  # 3 well-separated HMM classes; chance is 2/3
    import pytest

    crf_data = pmc.CRFData(te.graphs, None, node_features=te.node_features, n_labels=C)
    with pytest.raises(ValueError, match="hidden-CRF .* one class per sequence.*got CRFData"):
        pmc.predict(res, crf_data)


def test_map_from_a_symmetric_start_warns():
    import pytest

    tr, _ = pmc.datasets.hmm_classes(n_train_per_class=2, n_test_per_class=2, T=8, seed=0)
    F, S, C = tr.node_features.shape[1], 2, tr.n_classes
    model = _hcrf_model(tr, S)
    with pytest.warns(UserWarning, match="symmetric subspace") as rec:
        pmc.fit(model, method="map", maxiter=5, progressbar=False)
    # attributed to the caller's line, not to the package
    assert [r.filename for r in rec if "symmetric" in str(r.message)] == [__file__]
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)
        warnings.simplefilter("ignore", pmc.ConvergenceWarning)  # maxiter=5 on purpose
        pmc.fit(model, method="map", maxiter=5, jitter=0.1, random_seed=0, progressbar=False)
        rng = np.random.default_rng(0)
        start = {"theta_x": rng.normal(size=(F, S)), "theta_y": rng.normal(size=(S, C)),
                 "theta_e": rng.normal(size=(S, S, C))}
        pmc.fit(model, method="map", maxiter=5, start=start, progressbar=False)
        # one hidden state: no symmetry between states, no warning
        pmc.fit(_hcrf_model(tr, 1), method="map", maxiter=5, progressbar=False)


def test_a_random_initval_starts_the_map_and_keeps_the_log_likelihood():
    """docs/hcrf.md's other way out of the symmetric start: a random initval. The per-graph
    log-likelihood (PyMC's, which refuses models with initvals) is computed all the same, and
    the model keeps its initval."""
    import warnings

    tr, _ = pmc.datasets.hmm_classes(n_train_per_class=2, n_test_per_class=2, T=8, seed=0)
    F, S, C = tr.node_features.shape[1], 2, tr.n_classes
    start = np.random.default_rng(0).normal(0, 0.3, (F, S))
    with pm.Model() as model:
        tx = pm.Normal("theta_x", 0, 3, shape=(F, S), initval=start)
        ty = pm.Normal("theta_y", 0, 3, shape=(S, C))
        te_ = pm.Normal("theta_e", 0, 3, shape=(S, S, C))
        pmc.HCRF("y", graphs=tr.graphs, node_features=tr.node_features, theta_x=tx, theta_y=ty,
                 theta_e=te_, observed=tr.labels)
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)  # no symmetric-start warning
        warnings.simplefilter("ignore", pmc.ConvergenceWarning)
        res = pmc.fit(model, method="map", maxiter=20, progressbar=False)
    assert res["log_likelihood"]["y"].shape == (1, 1, tr.graphs.n_graphs)
    assert np.isfinite(res["log_likelihood"]["y"].values).all()
    np.testing.assert_array_equal(model.rvs_to_initial_values[tx], start)


def test_predict_reads_expression_and_constant_weights_or_refuses():
    """An HCRF weight that is an unnamed expression has no draws to read: predict refuses it
    (rather than reading the variable it was built from); a pm.Deterministic and a constant are
    read as they are, matching class_log_probs at the fitted weights."""
    import pytest

    from pymc_crf.distributions.hcrf import class_log_probs

    tr, te = pmc.datasets.hmm_classes(n_train_per_class=2, n_test_per_class=3, T=6, seed=0)
    F, S, C = tr.node_features.shape[1], 2, tr.n_classes
    te_fixed = np.zeros((S, S, C))

    def build(wrap):
        with pm.Model() as model:
            tx = pm.Normal("theta_x", 0, 1, shape=(F, S))
            ty = pm.Normal("theta_y", 0, 1, shape=(S, C))
            pmc.HCRF("y", graphs=tr.graphs, node_features=tr.node_features, theta_x=wrap(tx),
                     theta_y=ty, theta_e=te_fixed, observed=tr.labels)
        return model

    expr = build(lambda tx: 3.0 * tx)
    res = pmc.fit(expr, method="map", jitter=0.5, random_seed=0, maxiter=5, progressbar=False)
    for kw in ({}, {"model": expr}):
        with pytest.raises(ValueError, match="theta_x is an unnamed expression"):
            pmc.predict(res, te, **kw)
    bare = res.copy()  # as pm.sample's output: no layout recorded, the model in context says it
    bare.attrs = {k: v for k, v in res.attrs.items() if not k.startswith("hcrf")}
    with expr, pytest.raises(ValueError, match="theta_x is an unnamed expression"):
        pmc.predict(bare, te)
    det = build(lambda tx: pm.Deterministic("scaled", 3.0 * tx))
    res = pmc.fit(det, method="map", jitter=0.5, random_seed=0, maxiter=5, progressbar=False)
    post = res["posterior"]
    want = np.exp(class_log_probs(te.graphs, te.node_features, post["scaled"].values[0, 0],
                                  post["theta_y"].values[0, 0], te_fixed))
    np.testing.assert_allclose(pmc.predict(res, te).marginals, want, atol=1e-12)
    # a layout recorded by pmc.fit is used before the model passed as model=
    det_data = build(lambda tx: pm.Deterministic("scaled", 3.0 * tx))
    np.testing.assert_allclose(pmc.predict(res, te, model=det_data).marginals, want, atol=1e-12)
    np.testing.assert_allclose(pmc.predict(res, te, inference="junction_tree").marginals, want,
                               atol=1e-10)
    for method in ("bpe", "map"):
        with pytest.raises(ValueError, match="hidden-CRF"):
            pmc.predict(res, te, method=method)
    with pytest.raises(TypeError, match="has no option 'drawz'"):
        pmc.predict(res, te, drawz=3)
    with pytest.raises(ValueError, match="the HCRF was fitted with"):
        pmc.predict(res, pmc.datasets.hmm.SequenceData(
            graphs=te.graphs, node_features=te.node_features[:, :-1], labels=te.labels,
            n_classes=C, coords=te.coords))
