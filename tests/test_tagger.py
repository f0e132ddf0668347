"""CRFTagger: sklearn-crfsuite's interface over pmc.fit, as a scikit-learn estimator.

A tiny chunking corpus (a few hundred tokens) keeps every MAP fit well under a second once the
chain kernels are compiled.
"""

import pickle

import joblib
import numpy as np
import pymc as pm
import pytest
from sklearn.base import clone
from sklearn.exceptions import NotFittedError
from sklearn.model_selection import GridSearchCV, KFold, cross_val_score
from sklearn.pipeline import Pipeline
from sklearn.preprocessing import FunctionTransformer

import pymc_crf as pmc
from pymc_crf import CRFTagger
from pymc_crf.features import encode_tags, sequence_batch

LEXICON = {"the": "DT", "a": "DT", "big": "JJ", "old": "JJ", "cat": "NN", "dog": "NN",
           "man": "NN", "sees": "VB", "likes": "VB", "runs": "VB", "in": "IN", "on": "IN"}
CHUNK = {"DT": "B-NP", "JJ": "I-NP", "NN": "I-NP", "VB": "B-VP", "IN": "B-PP"}


def _sentence(rng):
    """DT (JJ) NN VB (DT (JJ) NN) (IN DT NN) with chunk tags."""
    words = []

    def np_():
        words.extend(["the" if rng.random() < 0.5 else "a"])
        if rng.random() < 0.4:
            words.append(str(rng.choice(["big", "old"])))
        words.append(str(rng.choice(["cat", "dog", "man"])))

    np_()
    words.append(str(rng.choice(["sees", "likes", "runs"])))
    if rng.random() < 0.6:
        np_()
    if rng.random() < 0.5:
        words.append(str(rng.choice(["in", "on"])))
        np_()
    return words, [CHUNK[LEXICON[w]] for w in words]


def token_dicts(words):
    """Word identity and the neighbours' words: sklearn-crfsuite style token dicts."""
    out = []
    for i, w in enumerate(words):
        f = {"word": w, "len": float(len(w)), "short": len(w) <= 3}
        if i > 0:
            f["-1:word"] = words[i - 1]
        else:
            f["BOS"] = True
        if i + 1 < len(words):
            f["+1:word"] = words[i + 1]
        out.append(f)
    return out


@pytest.fixture(scope="module")
def corpus():
    rng = np.random.default_rng(0)
    sents = [_sentence(rng) for _ in range(50)]
    words = [w for w, _ in sents]
    return words, [token_dicts(w) for w in words], [t for _, t in sents]


@pytest.fixture(scope="module")
def fitted(corpus):
    _, X, y = corpus
    return CRFTagger(c2=1.0).fit(X[:40], y[:40])


def test_fit_predict_interface(corpus, fitted):
    _, X, y = corpus
    assert fitted.classes_ == ["B-NP", "B-PP", "B-VP", "I-NP"]
    pred = fitted.predict(X[40:])
    assert [len(p) for p in pred] == [len(s) for s in X[40:]]
    assert fitted.score(X[40:], y[40:]) == pytest.approx(
        np.mean([a == b for p, t in zip(pred, y[40:], strict=True)
                 for a, b in zip(p, t, strict=True)]))
    assert fitted.score(X[40:], y[40:]) > 0.95
    assert fitted.predict_single(X[41]) == pred[1]
    marg = fitted.predict_marginals(X[40:])
    assert [len(m) for m in marg] == [len(s) for s in X[40:]]
    for sent in marg:
        for tok in sent:
            assert list(tok) == fitted.classes_
            assert sum(tok.values()) == pytest.approx(1.0)
    single = fitted.predict_marginals_single(X[41])  # batched sums may differ in the last bit
    np.testing.assert_allclose([list(t.values()) for t in single],
                               [list(t.values()) for t in marg[1]], rtol=0, atol=1e-14)
    # max-marginal tags agree with Viterbi on this easy data
    assert [[max(t, key=t.get) for t in s] for s in marg] == pred
    # empty sentences give empty predictions and keep their place
    assert fitted.predict([[], X[40]]) == [[], pred[0]]
    assert fitted.predict_marginals([X[40], []])[1] == []
    assert set(fitted.result_.children) >= {"posterior", "optimizer_result"}
    assert fitted.result_.posterior["W"].dims[2:] == ("feature", "tag")
    assert list(fitted.result_.posterior["W"].coords["feature"].values) == \
        fitted.vectorizer_.feature_names_


def test_same_as_pmc_fit_pipeline(corpus, fitted):
    """The tagger is the pipeline of docs/real_data.md: the same MAP and marginals."""
    _, X, y = corpus
    vec = pmc.FeatureVectorizer(min_freq=1)
    F = vec.fit_transform(X[:40])
    labels, classes = encode_tags(y[:40])
    sd = (1 / 2) ** 0.5
    with pm.Model() as model:
        W = pm.Normal("W", 0.0, sd, shape=(F.shape[1], len(classes)))
        T = pm.Normal("T", 0.0, sd, shape=(len(classes), len(classes)))
        pmc.CRF("y", graphs=sequence_batch(X[:40]), node_features=F, node_weights=W,
                edge_weights=T, observed=labels)
    fit = pmc.fit(model, method="map", progressbar=False)
    np.testing.assert_allclose(fitted.result_.posterior["W"].values, fit.posterior["W"].values,
                               rtol=0, atol=1e-10)
    test = pmc.CRFData(sequence_batch(X[40:]), None, vec.transform(X[40:]), n_labels=len(classes))
    marg = pmc.predict(fit, test, "bpe").marginals
    np.testing.assert_allclose(fitted.marginals_array(X[40:]), marg, rtol=0, atol=1e-12)


def test_prior_c2_and_prior_sd(corpus):
    _, X, y = corpus
    a = CRFTagger(c2=2.0).fit(X[:20], y[:20])
    b = CRFTagger(prior_sd=0.5).fit(X[:20], y[:20])
    np.testing.assert_array_equal(a.result_.posterior["W"].values, b.result_.posterior["W"].values)
    assert a.c2_ == 2.0 and b.c2_ == 2.0  # the c2 given, and the one of sd 0.5
    c = CRFTagger(c2=0.01).fit(X[:20], y[:20])  # a weaker prior: larger weights
    assert np.abs(c.result_.posterior["W"].values).max() > np.abs(a.result_.posterior["W"]).max()


def test_c2_chosen_by_the_evidence(corpus, tmp_path):
    """``c2="evidence"``: the shared prior sd is the Laplace evidence's maximiser (the scale
    ``pmc.fit(method="laplace")`` learns on the same model), the tagger is the MAP at it, and
    ``c2_`` survives a netCDF round trip."""
    _, X, y = corpus
    tagger = CRFTagger(c2="evidence").fit(X[:30], y[:30])
    sd = (1.0 / (2.0 * tagger.c2_)) ** 0.5
    vec = tagger.vectorizer_
    labels, classes = encode_tags(y[:30])
    with pm.Model() as m:
        s = pm.HalfNormal("s", 1.0)
        W = pm.Normal("W", 0.0, s, shape=(len(vec.feature_names_), len(classes)))
        T = pm.Normal("T", 0.0, s, shape=(len(classes), len(classes)))
        pmc.CRF("y", graphs=sequence_batch(X[:30]), node_features=vec.transform(X[:30]),
                node_weights=W, edge_weights=T, observed=labels)
    ref = pmc.fit(m, method="laplace", covariance="implicit", hyperprior=False, draws=1,
                  progressbar=False, log_likelihood=False)
    assert sd == pytest.approx(float(ref["fit"]["scales"][0]), rel=1e-9)
    fixed = CRFTagger(prior_sd=sd).fit(X[:30], y[:30])
    np.testing.assert_allclose(tagger.result_.posterior["W"].values,
                               fixed.result_.posterior["W"].values, rtol=0, atol=1e-12)
    tagger.to_netcdf(tmp_path / "t.nc")
    assert CRFTagger.from_netcdf(tmp_path / "t.nc").c2_ == tagger.c2_
    with pytest.raises(ValueError, match="c2 must be a number > 0, 'evidence' or 'learned'"):
        CRFTagger(c2="cv").fit(X[:5], y[:5])


def test_c2_learned_scales(corpus, tmp_path):
    """``c2="learned"``: the prior sds per template and count bucket are the posterior means of
    the randomized MAP's Gibbs sweeps on the hierarchical model (the same draws as pmc.fit on
    that model with the same seed), and the tagger is the MAP at them; ``prior_scales_``
    survives a netCDF round trip."""
    _, X, y = corpus
    sweeps = {"chains": 1, "tune": 2, "draws": 3, "refine": 0}
    tagger = CRFTagger(c2="learned", scale_options=sweeps, random_state=3).fit(X[:30], y[:30])
    vec = tagger.vectorizer_
    feats = vec.transform(X[:30])
    groups, index = np.unique(vec.template_count_groups(feats), return_inverse=True)
    assert set(tagger.prior_scales_) == {*groups, "transitions"}
    assert not hasattr(tagger, "c2_")
    labels, classes = encode_tags(y[:30])
    F, K = feats.shape[1], len(classes)
    with pm.Model() as hier:
        s = pm.HalfNormal("s", 1.0, shape=len(groups))
        t = pm.HalfNormal("t", 1.0)
        W = pm.Normal("W", 0.0, s[index][:, None], shape=(F, K))
        T = pm.Normal("T", 0.0, t, shape=(K, K))
        pmc.CRF("y", graphs=sequence_batch(X[:30]), node_features=feats, node_weights=W,
                edge_weights=T, observed=labels)
    ref = pmc.fit(hier, method="randomized_map", random_seed=3, progressbar=False,
                  log_likelihood=False, **sweeps)
    s_mean = ref["posterior"]["s"].values.mean(axis=(0, 1))
    np.testing.assert_allclose([tagger.prior_scales_[g] for g in groups], s_mean, rtol=1e-12)
    assert tagger.prior_scales_["transitions"] == pytest.approx(
        float(ref["posterior"]["t"].values.mean()), rel=1e-12)
    with pm.Model() as fixed:
        W = pm.Normal("W", 0.0, s_mean[index][:, None], shape=(F, K))
        T = pm.Normal("T", 0.0, tagger.prior_scales_["transitions"], shape=(K, K))
        pmc.CRF("y", graphs=sequence_batch(X[:30]), node_features=feats, node_weights=W,
                edge_weights=T, observed=labels)
    at_scales = pmc.fit(fixed, method="map", progressbar=False)
    np.testing.assert_allclose(tagger.result_.posterior["W"].values,
                               at_scales.posterior["W"].values, rtol=0, atol=1e-10)
    tagger.to_netcdf(tmp_path / "t.nc")
    assert CRFTagger.from_netcdf(tmp_path / "t.nc").prior_scales_ == tagger.prior_scales_
    # where the sweeps ran (a Dask client) is not saved with the model
    tagger.set_params(scale_options={**sweeps, "client": object()})
    tagger.to_netcdf(tmp_path / "t2.nc")
    assert CRFTagger.from_netcdf(tmp_path / "t2.nc").scale_options == sweeps
    assert pickle.loads(pickle.dumps(tagger)).scale_options == sweeps
    with pytest.raises(TypeError, match="scale_options must be a dict"):
        CRFTagger(c2="learned", scale_options=[1]).fit(X[:5], y[:5])
    with pytest.raises(ValueError, match="c2='learned' integrates over the scales"):
        CRFTagger(c2="learned", scale_options={"scale_method": "em"}).fit(X[:5], y[:5])


def test_params_clone_and_not_fitted(corpus):
    _, X, y = corpus
    t = CRFTagger(c2=0.5, method_options={"ftol": 1e-6}, min_freq=2)
    params = t.get_params()
    assert params == {"c2": 0.5, "prior_sd": None, "method": "map",
                      "method_options": {"ftol": 1e-6}, "min_freq": 2, "draws": 200,
                      "random_state": None, "scale_options": None, "progressbar": False}
    c = clone(t)
    assert c.get_params() == params and c is not t
    assert t.set_params(c2=3.0) is t and t.c2 == 3.0
    with pytest.raises(ValueError, match="Invalid parameter"):
        t.set_params(c1=1.0)
    for call in (lambda: t.predict(X), lambda: t.predict_marginals(X),
                 lambda: t.score(X, y), lambda: t.predict_single(X[0]),
                 lambda: t.to_netcdf("never.nc")):
        with pytest.raises(NotFittedError, match="not fitted"):
            call()


def test_bad_input(corpus):
    _, X, y = corpus
    with pytest.raises(TypeError, match="not a 2-d numeric array"):
        CRFTagger().fit(np.zeros((5, 3)), [["a"] * 3] * 5)
    with pytest.raises(ValueError, match="sentence 1: X\\[1\\] has .* tokens and y\\[1\\]"):
        CRFTagger().fit(X[:3], [y[0], y[1][:-1], y[2]])
    with pytest.raises(ValueError, match="X has 3 sentences and y 2"):
        CRFTagger().fit(X[:3], y[:2])
    with pytest.raises(TypeError, match=r"y\[0\]\[0\] is 1"):
        CRFTagger().fit(X[:1], [[1] * len(X[0])])
    with pytest.raises(ValueError, match="not a registered fitter"):
        CRFTagger(method="nope").fit(X[:3], y[:3])
    with pytest.raises(ValueError, match="c2"):
        CRFTagger(c2=-1).fit(X[:3], y[:3])
    with pytest.raises(ValueError, match="single tag"):
        CRFTagger().fit([X[0]], [["O"] * len(X[0])])
    with pytest.raises(TypeError, match="feature 'w' of token 0 in sentence 0"):
        CRFTagger().fit([[{"w": None}], [{"w": "a"}]], [["A"], ["B"]])
    for draws in (0, -3, 2.5, "all"):  # refused before the fit, not at predict_marginals
        with pytest.raises(ValueError, match="draws"):
            CRFTagger(draws=draws).fit(X[:3], y[:3])
    with pytest.raises(TypeError, match=r"X\[0\] is a dict, one token's features.*\[sentence\]"):
        CRFTagger().fit(X[0], y[0])
    # an error names the user's own sentence number, empty sentences before it counted
    with pytest.raises(ValueError, match="token 0 in sentence 1 is nan"):
        CRFTagger().fit([[], [{"w": float("nan")}, {"w": "a"}]], [[], ["A", "B"]])


def test_predict_errors_and_log_potential_weights_are_named(fitted):
    with pytest.raises(TypeError, match="token 1 of sentence 2 must be a dict"):
        fitted.predict([[], [], [{"w": "a"}, 3]])
    # weights under other names (the result's variable names) or missing would be zeros
    W = fitted.result_["posterior"]["W"].values[0, 0]
    for bad in ({"W": W}, {"node_weights": W}, [W]):
        with pytest.raises(ValueError, match="weights must be a dict with exactly the keys"):
            fitted.log_potentials([[{"w": "a"}]], weights=bad)
    # shapes and values of given weights: a wrong K, a 3-d edge table and NaN weights are
    # refused by name, not turned into inconsistent or NaN tables
    T = fitted.result_["posterior"]["T"].values[0, 0]
    F, K = W.shape
    for node, edge, match in ((W[:, :2], T, rf"node_weights'\] must have shape \({F}, {K}\)"),
                              (W.ravel(), T, "node_weights'] must have shape"),
                              (W, T[:2, :2], rf"edge_weights'\] must have shape \({K}, {K}\)"),
                              (W, T[None], "edge_weights'] must have shape"),
                              (np.full_like(W, np.nan), T, "node_weights'] contains NaN"),
                              (W, "T", "edge_weights'] must be a numeric array")):
        with pytest.raises(ValueError, match=match):
            fitted.log_potentials([[{"w": "a"}]],
                                  weights={"node_weights": node, "edge_weights": edge})
    _, node, edge = fitted.log_potentials([[{"w": "a"}]],
                                          weights={"node_weights": W.tolist(), "edge_weights": T})
    assert node.shape == (1, K) and edge.shape == (1, K, K)


def test_pickle_joblib_netcdf_round_trip(corpus, fitted, tmp_path):
    _, X, _ = corpus
    pred, marg = fitted.predict(X[40:]), fitted.marginals_array(X[40:])
    fitted.metadata_["note"] = "kept"
    blob = pickle.dumps(fitted)
    assert b"pymc.model" not in blob  # no live PyMC model inside
    copies = [pickle.loads(blob)]
    joblib.dump(fitted, tmp_path / "t.joblib")
    copies.append(joblib.load(tmp_path / "t.joblib"))
    fitted.to_netcdf(tmp_path / "t.nc")
    copies.append(CRFTagger.from_netcdf(tmp_path / "t.nc"))
    for c in copies:
        assert c.get_params() == fitted.get_params()
        assert c.classes_ == fitted.classes_
        assert c.vectorizer_.templates_ == fitted.vectorizer_.templates_
        np.testing.assert_array_equal(c.vectorizer_.template_index_,
                                      fitted.vectorizer_.template_index_)
        assert c.metadata_["note"] == "kept"
        assert c.predict(X[40:]) == pred
        np.testing.assert_array_equal(c.marginals_array(X[40:]), marg)
    with pytest.raises(ValueError, match="not a CRFTagger"):
        fitted.result_.to_netcdf(tmp_path / "plain.nc")
        CRFTagger.from_netcdf(tmp_path / "plain.nc")
    # numpy parameters, as a grid search over np.arange sets them, are saved as numbers
    numpy_params = clone(fitted).set_params(min_freq=np.int64(1), random_state=np.int64(0))
    numpy_params.fit(X[:10], fitted.predict(X[:10]))
    numpy_params.to_netcdf(tmp_path / "np.nc")
    assert CRFTagger.from_netcdf(tmp_path / "np.nc").get_params()["min_freq"] == 1


def test_sklearn_model_selection(corpus):
    """cross_val_score, GridSearchCV over c2 and a Pipeline from word lists."""
    words, X, y = corpus
    scores = cross_val_score(CRFTagger(), X[:30], y[:30], cv=KFold(2))
    assert scores.shape == (2,) and np.all(scores > 0.8)
    grid = GridSearchCV(CRFTagger(), {"c2": [0.1, 10.0]}, cv=KFold(2)).fit(X[:30], y[:30])
    assert grid.best_params_["c2"] in (0.1, 10.0)
    assert set(grid.cv_results_["param_c2"]) == {0.1, 10.0}
    assert grid.score(X[40:], y[40:]) == grid.best_estimator_.score(X[40:], y[40:])
    pipe = Pipeline([("features", FunctionTransformer(lambda ws: [token_dicts(w) for w in ws])),
                     ("crf", CRFTagger())])
    pipe.fit(words[:30], y[:30])
    assert pipe.predict(words[40:]) == CRFTagger().fit(X[:30], y[:30]).predict(X[40:])


def test_dev_score(corpus):
    _, X, y = corpus
    t = CRFTagger().fit(X[:20], y[:20], X_dev=X[40:], y_dev=y[40:])
    assert t.dev_score_ == t.score(X[40:], y[40:])
    with pytest.raises(ValueError, match="both X_dev and y_dev"):
        CRFTagger().fit(X[:20], y[:20], X_dev=X[40:])
    with pytest.raises(ValueError, match=r"X_dev has 10 sentences and y_dev 9"):
        CRFTagger().fit(X[:20], y[:20], X_dev=X[40:], y_dev=y[40:49])
    assert not hasattr(t.fit(X[:20], y[:20]), "dev_score_")  # a refit without dev data


def test_bethe_laplace_averages_over_draws(corpus):
    """A method with posterior draws: predict_marginals averages over them by default."""
    _, X, y = corpus
    t = CRFTagger(method="bethe_laplace", method_options={"draws": 20}, random_state=1,
                  draws=20).fit(X[:20], y[:20])
    assert t.result_.posterior.sizes["draw"] == 20
    avg, point = t.marginals_array(X[40:]), t.marginals_array(X[40:], average=False)
    np.testing.assert_allclose(avg.sum(axis=1), 1.0)
    assert np.abs(avg - point).max() > 1e-4  # averaging flattens the marginals
    assert avg.max(axis=1).mean() < point.max(axis=1).mean()
    np.testing.assert_array_equal(t.marginals_array(X[40:]), avg)  # seeded: reproducible


def test_laplace_is_the_diagonal_laplace_above_the_dense_limit():
    """docs/tagger.md: the diagonal Laplace of real_data.md is ``method="laplace"`` (its
    covariance "auto" is diagonal above 3,000 weights), and predict_marginals averages over its
    draws."""
    rng = np.random.default_rng(0)
    X = [[{"w": f"w{int(i)}"} for i in rng.integers(0, 1100, size=8)] for _ in range(400)]
    y = [[["O", "B-A", "I-A"][int(k)] for k in rng.integers(0, 3, size=8)] for _ in X]
    t = CRFTagger(method="laplace", method_options={"draws": 5}, random_state=0).fit(X, y)
    assert len(t.vectorizer_.feature_names_) * 3 > 3000
    assert "sd_vector" in t.result_["fit"] and "covariance_matrix" not in t.result_["fit"]
    avg, point = t.marginals_array(X[:5]), t.marginals_array(X[:5], average=False)
    assert t.result_.posterior.sizes["draw"] == 5 and np.abs(avg - point).max() > 1e-4


#: checks of sklearn's check_estimator that do not feed the estimator a numeric 2-d X: they apply
APPLICABLE_CHECKS = {
    "check_estimator_cloneable", "check_estimator_tags_renamed", "check_valid_tag_types",
    "check_estimator_repr", "check_no_attributes_set_in_init", "check_estimators_unfitted",
    "check_do_not_raise_errors_in_init_or_set_params", "check_mixin_order",
    "check_parameters_default_constructible", "check_get_params_invariance", "check_set_params"}


def test_check_estimator():
    """sklearn's check_estimator: every check that does not fit on a 2-d numeric array passes;
    the rest fail only because a tagger refuses such an X (docs/tagger.md lists them)."""
    import warnings

    from sklearn.base import BaseEstimator
    from sklearn.utils.estimator_checks import check_estimator

    class NumericTagged(CRFTagger):  # claims sklearn's default input tags: every check runs
        def __sklearn_tags__(self):
            return BaseEstimator.__sklearn_tags__(self)

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        results = check_estimator(NumericTagged(), on_fail=None)
        own = check_estimator(CRFTagger(), on_fail=None)  # its own tags: no 2-d X checks
    passed = {r["check_name"] for r in results if r["status"] == "passed"}
    assert APPLICABLE_CHECKS <= passed
    for r in results:
        if r["status"] == "failed":
            assert r["check_name"] not in APPLICABLE_CHECKS
            text = str(r["exception"]) + str(getattr(r["exception"], "__cause__", ""))
            assert ("per-token feature dicts" in text or "NaN and inf" in text
                    or "sparse" in text or "TypeError" in text), r
    assert {r["check_name"] for r in own} == {"check_estimator_cloneable"}
    assert all(r["status"] == "passed" for r in own)


def test_fit_idempotent_and_is_fitted(corpus, fitted):
    from sklearn.utils.validation import check_is_fitted

    _, X, y = corpus
    check_is_fitted(fitted)
    with pytest.raises(NotFittedError):
        check_is_fitted(CRFTagger())
    again = clone(fitted).fit(X[:40], y[:40]).fit(X[:40], y[:40])
    np.testing.assert_array_equal(again.marginals_array(X[40:]), fitted.marginals_array(X[40:]))


@pytest.mark.slow
def test_nuts_tagger():
    """method="nuts" on a toy corpus (compiling the model cold takes minutes)."""
    X = [[{"w": w} for w in s.split()] for s in ["the cat runs", "a dog sees the cat",
                                                "the dog runs", "a cat sees a dog"]]
    y = [["D", "N", "V"], ["D", "N", "V", "D", "N"], ["D", "N", "V"], ["D", "N", "V", "D", "N"]]
    t = CRFTagger(method="nuts", method_options={"draws": 100, "tune": 100, "chains": 1},
                  random_state=0).fit(X, y)
    assert t.result_.posterior.sizes["draw"] == 100
    assert t.predict([[{"w": "the"}, {"w": "dog"}, {"w": "sees"}]]) == [["D", "N", "V"]]
    unseen = [{"w": "the"}, {"w": "cow"}]  # "cow" unseen: averaging flattens its marginals
    avg = t.predict_marginals_single(unseen)[1]
    point = t.predict_marginals_single(unseen, average=False)[1]
    assert max(avg.values()) < max(point.values())
