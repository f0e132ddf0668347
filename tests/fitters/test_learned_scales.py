"""Learned prior scales (issue 40): Normal weight priors whose sd is a free, indexed scale
variable, fitted by the Laplace evidence (type-II ML / MAP, MacKay 1992) or integrated out on a
grid (Rue, Martino & Chopin 2009).

Ground truths: the maximiser of the Laplace log evidence on a fine grid over s; the exact
evidence ``log int p(D | w) N(w; 0, s^2) dw`` by Simpson's rule over the two weights (exact log Z
from the chain engine), and the exact ``log p(D)`` and posterior means by quadrature over the
weights and s; NUTS on the full hierarchical model (slow).
"""

import numpy as np
import pymc as pm
import pytensor
import pytest
from scipy.integrate import simpson

import pymc_crf as pmc
from pymc_crf.features import encode_tags, sequence_batch
from pymc_crf.fitters.bethe_laplace import weight_problem
from pymc_crf.fitters.bethe_laplace.scales import exact_gradient, laplace_point, learn_scales
from pymc_crf.model.spec import extract_crf, free_scales, refuse_free_scales

LAPLACE = dict(map="exact", covariance="exact", bp=None, maxiter=2000, gtol=1e-10)


def _data(n=8, coef=1.5, seed=1, F=1):
    rng = np.random.default_rng(seed)
    batch = pmc.GraphBatch.chains([3] * n)
    X = rng.normal(size=(batch.n_total_nodes, F))
    eta = coef * X[:, 0]
    y = (rng.uniform(size=batch.n_total_nodes) < 1 / (1 + np.exp(-eta))).astype(int)
    return batch, X, y


def _two_weight_model():
    """A chain CRF with two weights W (1, 2) sharing one learned scale s ~ HalfNormal(1)."""
    batch, X, y = _data()
    with pm.Model() as m:
        s = pm.HalfNormal("s", 1.0)
        W = pm.Normal("W", 0.0, s, shape=(1, 2))
        pmc.CRF("y", graphs=batch, node_features=X, node_weights=W, observed=y)
    return m


def _argmax_parabola(x, f):
    """The maximiser of samples ``f(x)`` (x evenly spaced), refined by a parabola through the
    best point and its neighbours."""
    i = int(np.clip(np.argmax(f), 1, len(f) - 2))
    f0, f1, f2 = f[i - 1], f[i], f[i + 1]
    h = x[1] - x[0]
    return x[i] + 0.5 * h * (f0 - f2) / (f0 - 2 * f1 + f2)


class _ExactEvidence:
    """``log p(D | s)`` (and posterior moments) by Simpson's rule over the two weights. The model
    has node weights only, so log Z is a sum over nodes of a log-sum-exp over the 2 labels,
    vectorised over the grid here and checked against the chain engine's."""

    def __init__(self, model, half_width=6.0, n=241):
        p = weight_problem(model, "quadrature", learn_scales=True)
        lik = p.make_likelihood()
        x = np.asarray(p.spec.node_features)[:, 0]
        y = np.asarray(p.spec.labels)
        self.a = np.linspace(-half_width, half_width, n)
        A, B = np.meshgrid(self.a, self.a, indexing="ij")
        self.W = np.stack([A.ravel(), B.ravel()], axis=1)
        scores = x[None, :, None] * self.W[:, None, :]  # (grid, nodes, labels)
        self.ll = (np.take_along_axis(scores, np.broadcast_to(y[None, :, None], (
            self.W.shape[0], y.size, 1)), axis=2)[..., 0]
            - np.logaddexp(scores[..., 0], scores[..., 1])).sum(axis=1)
        for i in (0, 12345, self.W.shape[0] - 1):
            assert self.ll[i] == pytest.approx(lik(self.W[i])[0], abs=1e-9)

    def log_joint(self, s):
        return (self.ll - 0.5 * (self.W ** 2).sum(1) / s ** 2 - 2 * np.log(s)
                - np.log(2 * np.pi))

    def integrate(self, f):
        n = self.a.size
        return simpson(simpson(f.reshape(n, n), x=self.a, axis=1), x=self.a)

    def __call__(self, s):
        lp = self.log_joint(s)
        top = lp.max()
        return float(np.log(self.integrate(np.exp(lp - top))) + top)


def test_spec_reads_any_grouping_by_indexing():
    batch, X, y = _data(F=3)
    idx = np.array([0, 0, 1])
    with pm.Model() as m:
        s = pm.Exponential("s", 1.0, shape=2)
        t = pm.InverseGamma("t", 3.0, 2.0, shape=(2, 2))
        W = pm.Normal("W", 0.0, s[idx][:, None], shape=(3, 2))
        T = pm.Normal("T", 0.0, t[[0, 1]][:, [1, 0]], shape=(2, 2))  # per label pair
        pmc.CRF("y", graphs=batch, node_features=X, node_weights=W, edge_weights=T, observed=y)
    spec = extract_crf(m)
    assert spec.node_weights.prior == "normal_scaled" and spec.node_weights.scale_name == "s"
    np.testing.assert_array_equal(spec.node_weights.scale_index, [[0, 0], [0, 0], [1, 1]])
    np.testing.assert_array_equal(spec.edge_weights.scale_index, [[1, 0], [3, 2]])
    scales, index = free_scales(spec)
    assert [(v.name, v.shape, v.distribution, v.offset) for v in scales] == [
        ("s", (2,), "Exponential", 0), ("t", (2, 2), "InvGamma", 2)]
    np.testing.assert_array_equal(index, [0, 0, 0, 0, 1, 1, 3, 2, 5, 4])
    # a scalar scale shared by node and edge weights
    with pm.Model() as m2:
        s = pm.HalfCauchy("s", 1.0)
        W = pm.Normal("W", 0.0, s, shape=(3, 2))
        T = pm.Normal("T", 0.0, s, shape=(2, 2))
        pmc.CRF("y", graphs=batch, node_features=X, node_weights=W, edge_weights=T, observed=y)
    scales, index = free_scales(extract_crf(m2))
    assert len(scales) == 1 and scales[0].shape == () and np.all(index == 0)


def test_type2_ml_scale_is_the_laplace_evidence_maximiser_and_near_the_exact_one():
    m = _two_weight_model()
    res = pmc.fit(m, method="laplace", hyperprior=False, draws=50, random_seed=0,
                  progressbar=False)
    s_hat = float(res["fit"]["scales"].values[0])
    # the Laplace evidence on a fine grid of log s around the maximum (its maximiser refined by
    # a parabola through the best three points)
    p = weight_problem(m, "grid", learn_scales=True)
    x = np.linspace(np.log(1.0), np.log(1.6), 25)
    lap = [laplace_point(p, np.exp([v]), None, hyperprior=None, **LAPLACE).log_evidence
           for v in x]
    x_lap = _argmax_parabola(x, lap)
    assert abs(np.log(s_hat) - x_lap) < 1e-3, (s_hat, np.exp(x_lap))
    assert float(res["fit"]["log_evidence_at_scales"]) >= max(lap) - 1e-8
    # the exact evidence's maximiser: the Laplace one is within 0.03 in log s (measured 0.009)
    exact = _ExactEvidence(m)
    x_ex = _argmax_parabola(x, [exact(np.exp(v)) for v in x])
    assert abs(np.log(s_hat) - x_ex) < 0.03, (s_hat, np.exp(x_ex))
    # the result: the scale in the posterior (one value), the trace in diagnostics
    post = res["posterior"]["s"].values
    assert post.shape == (1, 50) and np.all(post == s_hat)
    d = res["diagnostics"]
    assert bool(d["scales_converged"])
    assert d["scale_trace"].dims == ("outer_iteration", "scale_entry")
    ev = d["log_evidence"].values
    assert ev[-1] == pytest.approx(res.attrs["log_marginal_likelihood"])
    assert np.all(np.diff(ev[d["scale_step"].values == 1]) > -1e-8)  # MacKay steps ascend


def test_exact_gradient_matches_finite_differences():
    batch, X, y = _data(F=2, n=6, seed=3)
    with pm.Model() as m:
        s = pm.Gamma("s", 2.0, 2.0, shape=2)
        W = pm.Normal("W", 0.0, s[[0, 1]][:, None], shape=(2, 2))
        T = pm.Normal("T", 0.0, 1.0, shape=(2, 2))
        pmc.CRF("y", graphs=batch, node_features=X, node_weights=W, edge_weights=T, observed=y)
    p = weight_problem(m, "check", learn_scales=True)
    from pymc_crf.fitters.bethe_laplace.scales import ScaleHyperprior

    prior = ScaleHyperprior(m, p.scales)
    s0 = np.array([0.8, 1.7])
    g = exact_gradient(p, laplace_point(p, s0, None, hyperprior=prior, **LAPLACE), prior)
    h = 1e-4
    for k in range(2):
        e = np.zeros(2)
        e[k] = h
        f = [laplace_point(p, s0 * np.exp(sgn * e), None, hyperprior=prior, **LAPLACE).objective
             for sgn in (1, -1)]
        assert g[k] == pytest.approx((f[0] - f[1]) / (2 * h), abs=1e-6)


@pytest.mark.parametrize("covariance", ["auto", "implicit"])
def test_grid_integration_against_quadrature_over_weights_and_scale(covariance):
    """The grid mixture's ``log p(D)`` and weight means against quadrature, from the dense exact
    mode and from the implicit covariance's one-scale search (its mode then re-evaluated with the
    grid points' estimator; 2 weights, so the Lanczos traces are exact)."""
    m = _two_weight_model()
    res = pmc.fit(m, method="laplace", integrate_scales="grid", draws=1000, random_seed=1,
                  progressbar=False, covariance=covariance)
    exact = _ExactEvidence(m)
    # log p(D) and E[W | D] by quadrature over log s (HalfNormal(1) prior on s)
    t = np.linspace(np.log(0.05), np.log(20.0), 241)
    s = np.exp(t)
    lj = np.array([exact(v) for v in s]) + np.log(2 / np.pi) / 2 - s ** 2 / 2 + t
    top = lj.max()
    log_pd = float(np.log(simpson(np.exp(lj - top), x=t)) + top)
    mean = np.zeros(2)
    for v, wgt in zip(s, np.exp(lj - log_pd), strict=True):
        lp = exact.log_joint(v)
        q = np.exp(lp - exact(v))
        mean += wgt * (t[1] - t[0]) * np.array([exact.integrate(q * exact.W[:, j])
                                                 for j in range(2)])
    assert res.attrs["log_marginal_likelihood"] == pytest.approx(log_pd, abs=0.05)
    # the mixture's mean is that of the Laplace Gaussians, centred at the modes w*(s): +-0.592
    # by quadrature of the Laplace evidence and w*(s) over log s (s from 1e-3), +-0.597 on the
    # grid, against +-0.637 for the exact posterior mean (quadrature over the weights too)
    np.testing.assert_allclose(res["fit"]["mean_vector"].values, mean, atol=0.05)
    d = res["diagnostics"]
    assert d["grid_weights"].sum() == pytest.approx(1.0) and d["grid_weights"].size >= 5
    draws = res["posterior"]["s"].values.ravel()
    assert np.unique(draws).size > 1  # the scale is integrated out, not a point


def test_grid_covers_the_long_tail_of_a_log_scale():
    """With weak data the evidence is flat as s -> 0 and the posterior of log s has a long left
    tail: the grid explores each axis until the density has fallen by its threshold, so its
    log p(D) and the sd of log s match quadrature of the same Laplace evidence over log s (each
    point a fit at a fixed s); a grid cut at 3 standard deviations gave 0.021 too little log p(D)
    and an sd of 1.07 against 1.21 here."""
    batch, X, y = _data(n=5, coef=0.5, seed=3)

    def model(sd=None):
        with pm.Model() as m:
            s = pm.HalfNormal("s", 1.0) if sd is None else sd
            W = pm.Normal("W", 0.0, s, shape=(1, 2))
            pmc.CRF("y", graphs=batch, node_features=X, node_weights=W, observed=y)
        return m

    res = pmc.fit(model(), method="laplace", integrate_scales="grid", draws=10, random_seed=1,
                  progressbar=False)
    t = np.linspace(np.log(1e-3), np.log(20.0), 61)
    ev = np.array([pmc.fit(model(v), method="laplace", draws=1, progressbar=False,
                           log_likelihood=False).attrs["log_marginal_likelihood"]
                   for v in np.exp(t)])
    lj = ev + np.log(2 / np.pi) / 2 - np.exp(2 * t) / 2 + t  # HalfNormal(1) density of log s
    top = lj.max()
    p = np.exp(lj - top)
    z = simpson(p, x=t)
    mean = simpson(p * t, x=t) / z
    sd = np.sqrt(simpson(p * t * t, x=t) / z - mean ** 2)
    d = res["diagnostics"]
    g, w = np.log(d["grid_scales"].values.ravel()), d["grid_weights"].values
    g_mean = float(w @ g)
    assert res.attrs["log_marginal_likelihood"] == pytest.approx(np.log(z) + top, abs=0.005)
    assert np.sqrt(w @ (g - g_mean) ** 2) == pytest.approx(sd, abs=0.05)
    assert g_mean == pytest.approx(mean, abs=0.05)


def _template_model(learned=True):
    """Tags that depend on the feature template "p" (noisily), not on "w": a chain CRF with one
    learned scale per template (or fixed unit sds)."""
    rng = np.random.default_rng(2)
    sents, tags = [], []
    for _ in range(30):  # tags depend on p (noisily), not on w
        n = int(rng.integers(1, 5))
        p_ = rng.choice(["X", "Y"], size=n)
        sents.append([{"w": str(rng.choice(["a", "b"])), "p": str(v)} for v in p_])
        tags.append(["A" if (v == "X") == (rng.uniform() < 0.8) else "B" for v in p_])
    vec = pmc.FeatureVectorizer()
    X = vec.fit_transform(sents)
    y, classes = encode_tags(tags)
    assert vec.templates_ == ["bias", "p", "w"]
    with pm.Model() as m:
        if learned:
            s = pm.HalfNormal("s", 1.0, shape=len(vec.templates_))
            W = pm.Normal("W", 0.0, s[vec.template_index_][:, None], shape=(X.shape[1], 2))
        else:
            W = pm.Normal("W", 0.0, 1.0, shape=(X.shape[1], 2))
        T = pm.Normal("T", 0.0, 1.0, shape=(2, 2))
        pmc.CRF("y", graphs=sequence_batch(vec.lengths_), node_features=X,
                node_weights=W, edge_weights=T, observed=y)
    return m


def test_grouped_scales_feature_templates_and_the_diagonal_covariance():
    m = _template_model()
    full = pmc.fit(m, method="laplace", covariance="exact", draws=20, progressbar=False)
    diag = pmc.fit(m, method="laplace", covariance="diagonal", draws=20, progressbar=False)
    assert full["fit"]["scales"].size == 3 and "sd_vector" in diag["fit"]
    assert full["posterior"]["s"].shape == (1, 20, 3)
    # the tags depend on p only: "p" keeps a scale of order 1, "bias" and "w" are pruned (the
    # evidence is flat as their scales go to 0); the diagonal curvature, which ignores the
    # correlations between weights, agrees to a factor e (measured: 0.80 and 0.57)
    s_full, s_diag = full["fit"]["scales"].values, diag["fit"]["scales"].values
    assert abs(np.log(s_full[1] / s_diag[1])) < 1.0 and s_full[1] > 0.3
    assert max(s_full[[0, 2]].max(), s_diag[[0, 2]].max()) < 1e-3
    # MacKay's steps take looser MAPs with the diagonal covariance; the result is the strict MAP
    # at the learned scales and its evidence
    p = weight_problem(m, "laplace", learn_scales=True)
    strict = laplace_point(p, s_diag, None, hyperprior=None,
                           **dict(LAPLACE, covariance="diagonal"))
    np.testing.assert_allclose(diag["fit"]["mean_vector"].values, strict.mean, atol=1e-6)
    assert float(diag["fit"]["log_evidence_at_scales"]) == pytest.approx(strict.log_evidence,
                                                                         abs=1e-6)


def test_implicit_covariance_against_the_dense_exact_laplace():
    """``covariance="implicit"`` (the exact covariance as an operator: draws by
    perturbation-optimisation, Hutchinson variances, Lanczos log det) against the dense exact
    Laplace: the same MAP; draws with the dense covariance (within 6 Monte Carlo sds
    entrywise); the evidence within the Lanczos error; and with learned scales the same
    kept / pruned templates and the kept scale within 10%."""
    fixed = _template_model(learned=False)
    full = pmc.fit(fixed, method="laplace", covariance="exact", draws=10, progressbar=False)
    imp = pmc.fit(fixed, method="laplace", covariance="implicit", draws=1000, random_seed=1,
                  progressbar=False, log_likelihood=False)
    mean = full["fit"]["mean_vector"].values
    np.testing.assert_allclose(imp["fit"]["mean_vector"].values, mean, atol=1e-6)
    cov = full["fit"]["covariance_matrix"].values
    flat = np.concatenate([imp["posterior"][w.name].values.reshape(1000, -1)
                           for w in extract_crf(fixed).weights], axis=1)
    delta = flat[::2] - mean  # one of each antithetic pair
    gap = np.abs(delta.T @ delta / 500 - cov) / np.sqrt(
        (np.outer(np.diag(cov), np.diag(cov)) + cov**2) / 500)
    assert gap.max() < 6.0
    ev_full = full.attrs["log_marginal_likelihood"]
    assert abs(imp.attrs["log_marginal_likelihood"] - ev_full) < 0.05 * abs(ev_full)
    m = _template_model()
    exact = pmc.fit(m, method="laplace", covariance="exact", draws=10, progressbar=False)
    implicit = pmc.fit(m, method="laplace", covariance="implicit", draws=10,
                       progressbar=False)
    s_e, s_i = exact["fit"]["scales"].values, implicit["fit"]["scales"].values
    assert abs(np.log(s_i[1] / s_e[1])) < 0.1
    assert s_i[[0, 2]].max() < 1e-2
    # the pruned groups' steps settle at the lower bound (Hutchinson's estimates kept in their
    # range), rather than cycling until scale_maxiter
    d = implicit["diagnostics"]
    assert bool(d["scales_converged"]) and d.sizes["outer_iteration"] < 30


@pytest.mark.parametrize("method", ["laplace", "bethe_laplace"])
def test_scales_stopped_by_scale_maxiter_are_flagged_and_warned(method):
    with pytest.warns(RuntimeWarning, match=rf"method='{method}'.*did not converge in "
                                            r"scale_maxiter=1 steps.*scales_converged"):
        res = pmc.fit(_two_weight_model(), method=method, scale_maxiter=1, draws=10,
                      progressbar=False)
    assert not bool(res["diagnostics"]["scales_converged"])


def test_map_ep_and_fixed_prior_evidence_refuse_free_scales():
    m = _two_weight_model()
    with pytest.raises(ValueError, match=r"method='map'.*s -> 0.*'laplace'.*'bethe_laplace'.*"
                                         r"integrate_scales='grid'.*'randomized_map'.*'nuts'"):
        pmc.fit(m, method="map")
    with pytest.raises(ValueError, match=r"method='ep'.*fixed prior scales.*'laplace'"):
        pmc.fit(m, method="ep")
    with pytest.raises(ValueError, match="laplace"):
        pmc.log_marginal_likelihood(m, "laplace_exact")
    refuse_free_scales(pm.Model(), "map")  # no random field: the fitter says so itself


def test_float32_scales_are_read_refused_by_map_and_learned_as_in_float64():
    """Under PyTensor's floatX="float32" the scale is a float32 variable: it is still read as a
    learned scale (map refuses it rather than collapsing it to 0), and the Laplace and Gibbs
    fits, which feed it float64 values, learn it as in float64."""
    with pytensor.config.change_flags(floatX="float32"):
        m = _two_weight_model()
        assert m["s"].dtype == "float32"
        assert extract_crf(m).node_weights.prior == "normal_scaled"
        with pytest.raises(ValueError, match=r"method='map'.*s -> 0"):
            pmc.fit(m, method="map")
        s32 = float(pmc.fit(m, method="laplace", draws=5, random_seed=0,
                            progressbar=False)["fit"]["scales"].values[0])
        gibbs = pmc.fit(m, method="randomized_map", draws=3, tune=2, chains=1, random_seed=0,
                        progressbar=False)
        assert np.isfinite(gibbs["posterior"]["s"].values).all()
    s64 = float(pmc.fit(_two_weight_model(), method="laplace", draws=5, random_seed=0,
                        progressbar=False)["fit"]["scales"].values[0])
    assert s32 == pytest.approx(s64, rel=1e-5)


def _refused(build, match):
    batch, X, y = _data(F=3)
    with pm.Model() as m:
        W = build()
        pmc.CRF("y", graphs=batch, node_features=X, node_weights=W, observed=y)
    with pytest.raises(ValueError, match=match):
        pmc.fit(m, method="laplace", progressbar=False)


def test_bad_scale_priors_are_refused_with_clear_errors():
    _refused(lambda: pm.Normal("W", 0.0, pm.Normal("s", 1.0, 0.1), shape=(3, 2)),
             "scale 's'.*Normal prior with no log transform.*HalfNormal")
    _refused(lambda: pm.Normal("W", 0.0, pm.Poisson("s", 2.0), shape=(3, 2)),
             "scale 's'.*discrete")
    _refused(lambda: pm.Normal("W", 0.0, 2.0 * pm.HalfNormal("s", 1.0), shape=(3, 2)),
             "expression of 's' other than an indexing")
    _refused(lambda: pm.Normal("W", 0.0, pm.HalfNormal("s", 1.0, shape=4)[[0, 1, 1]][:, None],
                               shape=(3, 2)),
             r"entries \[2, 3\] scale no weight")
    _refused(lambda: pm.Normal("W", 0.0, pm.HalfNormal("s", pm.HalfNormal("tau", 1.0)),
                               shape=(3, 2)),
             "random variables; learned prior scales take one level|depends on 2 random")
    # a grouped prior whose index does not match the weights' shape
    _refused(lambda: pm.Normal("W", 0.0, pm.HalfNormal("s", 1.0, shape=2)[[0, 1]][:, None],
                               shape=(3, 2)),
             r"sigma could not be evaluated as an indexing of 's'.*broadcast.*\(3, ?2\)")
    # an index that selects an entry the scale does not have
    _refused(lambda: pm.Normal("W", 0.0, pm.HalfNormal("s", 1.0, shape=2)[[0, 1, 5]][:, None],
                               shape=(3, 2)),
             r"'W': its prior sd indexes the scale 's' \(shape \(2,\)\) out of range: index 5")


@pytest.mark.parametrize("scale, match", [
    (lambda: pm.HalfNormal("s", 0.0), r"\(HalfNormal\) has invalid parameters \(sigma > 0"),
    (lambda: pm.HalfNormal("s", -1.0), r"\(HalfNormal\) has invalid parameters"),
    (lambda: pm.InverseGamma("s", alpha=-1.0, beta=1.0), r"\(InvGamma\) has invalid parameters"),
    (lambda: pm.Exponential("s", 0.0), r"\(Exponential\) has log density -inf at s = 1"),
])
@pytest.mark.parametrize("method, options", [("laplace", {}), ("laplace", {"hyperprior": False}),
                                             ("randomized_map", {"scale_method": "em",
                                                                 "hyperprior": False})])
def test_a_scale_prior_with_invalid_parameters_is_refused(scale, match, method, options):
    """A point mass at 0 (HalfNormal(0)) or parameters outside the distribution's domain: the
    scale's prior is no density on (0, inf), so it is refused by name, with or without its
    density in the objective (hyperprior=False)."""
    batch, X, y = _data(F=3)
    with pm.Model() as m:
        W = pm.Normal("W", 0.0, scale(), shape=(3, 2))
        pmc.CRF("y", graphs=batch, node_features=X, node_weights=W, observed=y)
    with pytest.raises(ValueError, match=rf"method='{method}': the prior of the learned scale "
                                         rf"'s' {match}"):
        pmc.fit(m, method=method, progressbar=False, **options)


def test_missing_labels_with_learned_scales_name_nuts_alone():
    """A learned-scale model with a missing label: the refusal names NUTS, not map (which
    refuses learned scales)."""
    batch, X, y = _data(F=3)
    y = np.ma.masked_array(y, mask=np.arange(y.size) == 0)
    with pm.Model() as m:
        W = pm.Normal("W", 0.0, pm.HalfNormal("s", 1.0), shape=(3, 2))
        pmc.CRF("y", graphs=batch, node_features=X, node_weights=W, observed=y)
    with pytest.raises(ValueError, match=r"1 missing .*labels\. method='nuts' sums missing"):
        pmc.fit(m, method="laplace", progressbar=False)


def test_bad_options_name_themselves():
    m = _two_weight_model()
    for kw, match in (({"integrate_scales": "ccd"}, "integrate_scales must be one of"),
                      ({"integrate_scales": "grid", "hyperprior": False}, "hyperprior=True"),
                      ({"scale_init": -1.0}, "scale_init must be"),
                      ({"covariance": "bp"}, "covariance must be 'auto'"),
                      ({"scale_tol": 0.0}, "scale_tol"),
                      ({"refine": 7}, "refine must be True or False")):
        with pytest.raises(ValueError, match=match):
            pmc.fit(m, method="laplace", progressbar=False, **kw)
    # on a model without learned scales too, which does not read them
    fixed = _template_model(learned=False)
    for kw, match in (({"refine": 7}, "refine must be True or False"),
                      ({"hyperprior": "yes"}, "hyperprior must be True or False")):
        with pytest.raises(ValueError, match=match):
            pmc.fit(fixed, method="laplace", progressbar=False, **kw)


def test_grid_integration_refuses_an_improper_scale_prior():
    """pm.HalfFlat's log density 0 is no normalised density: the grid's log marginal
    likelihood held an arbitrary constant (and pmc.compare showed it); the point estimate,
    which does not integrate over the prior, still takes it."""
    batch, X, y = _data()
    with pm.Model() as m:
        s = pm.HalfFlat("s")
        W = pm.Normal("W", 0.0, s, shape=(1, 2))
        pmc.CRF("y", graphs=batch, node_features=X, node_weights=W, observed=y)
    with pytest.raises(ValueError, match=r"needs a proper one; \['s'\] have an improper "
                                         r"pm.HalfFlat"):
        pmc.fit(m, method="laplace", integrate_scales="grid", progressbar=False)
    res = pmc.fit(m, method="laplace", draws=5, progressbar=False)
    assert np.isfinite(res.attrs["log_marginal_likelihood"])


@pytest.mark.slow
def test_learned_scales_against_nuts_on_the_hierarchical_model():
    """Posterior means of the weights and posterior-averaged test marginals: the grid-integrated
    Laplace fit (and the type-II MAP point) against NUTS on the full hierarchical model."""
    rng = np.random.default_rng(5)
    batch = pmc.GraphBatch.chains([4] * 30)
    X = rng.normal(size=(batch.n_total_nodes, 3))
    W_true = np.array([[1.2, -1.2], [0.8, -0.8], [0.1, -0.1]])
    y = (rng.uniform(size=batch.n_total_nodes)
         < 1 / (1 + np.exp(-(X @ W_true)[:, 0] * 2))).astype(int)
    with pm.Model() as m:
        s = pm.HalfNormal("s", 1.0, shape=2)
        W = pm.Normal("W", 0.0, s[[0, 0, 1]][:, None], shape=(3, 2))
        T = pm.Normal("T", 0.0, 1.0, shape=(2, 2))
        pmc.CRF("y", graphs=batch, node_features=X, node_weights=W, edge_weights=T, observed=y)
    test_batch = pmc.GraphBatch.chains([4] * 20)
    Xt = rng.normal(size=(test_batch.n_total_nodes, 3))
    test = pmc.CRFData(test_batch, np.zeros(test_batch.n_total_nodes, int), Xt, n_labels=2)
    nuts = pmc.fit(m, method="nuts", draws=2000, tune=2000, chains=2, random_seed=0,
                   target_accept=0.95, progressbar=False)
    grid = pmc.fit(m, method="laplace", integrate_scales="grid", draws=4000, random_seed=0,
                   progressbar=False)
    point = pmc.fit(m, method="laplace", draws=4000, random_seed=0, progressbar=False)
    ref_mean = nuts["posterior"]["W"].mean(("chain", "draw")).values
    ref_sd = nuts["posterior"]["W"].std(("chain", "draw")).values
    ref_marg = pmc.predict(nuts, test, "average", draws=500, random_seed=0).marginals
    # measured: grid 0.095-0.101 NUTS sds and 0.021-0.025; the type-II MAP point 0.145 and
    # 0.110 (500 averaged draws on each side): a point scale misses the scales' uncertainty,
    # which the grid integrates
    out = {}
    for name, res in (("grid", grid), ("point", point)):
        z = np.abs(res["posterior"]["W"].mean(("chain", "draw")).values - ref_mean) / ref_sd
        marg = pmc.predict(res, test, "average", draws=500, random_seed=0).marginals
        out[name] = (z.max(), np.abs(marg - ref_marg).max())
        print(f"{name}: max |mean error| {out[name][0]:.3f} NUTS sds, max |marginal error| "
              f"{out[name][1]:.4f}")
    assert out["grid"][0] < 0.25 and out["grid"][1] < 0.035
    assert out["point"][0] < 0.3 and out["point"][1] < 0.15


def test_laplace_alias_on_fixed_priors_is_exact_bethe_laplace():
    batch, X, y = _data()
    with pm.Model() as m:
        W = pm.Normal("W", 0.0, 1.0, shape=(1, 2))
        pmc.CRF("y", graphs=batch, node_features=X, node_weights=W, observed=y)
    a = pmc.fit(m, method="laplace", draws=10, random_seed=0, progressbar=False)
    b = pmc.fit(m, method="bethe_laplace", map="exact", covariance="exact", draws=10,
                random_seed=0, progressbar=False)
    assert a.attrs["method"] == "laplace"
    np.testing.assert_allclose(a["fit"]["mean_vector"], b["fit"]["mean_vector"])
    np.testing.assert_allclose(a["fit"]["covariance_matrix"], b["fit"]["covariance_matrix"])
    assert a.attrs["log_marginal_likelihood"] == b.attrs["log_marginal_likelihood"]
    diag = pmc.fit(m, method="laplace", covariance="diagonal", draws=10, progressbar=False)
    np.testing.assert_allclose(diag["fit"]["mean_vector"], a["fit"]["mean_vector"], atol=1e-5)


def test_one_implicit_scale_is_found_by_searching_the_evidence():
    """One learned scale with ``covariance="implicit"``: the bounded search of the (Lanczos)
    Laplace evidence lands within 0.1 in ``log s`` of the dense exact type-II ML scale, which
    the exact refinement puts at the evidence's maximiser."""
    m = _two_weight_model()
    dense = pmc.fit(m, method="laplace", covariance="exact", hyperprior=False, draws=4,
                    progressbar=False, log_likelihood=False)
    implicit = pmc.fit(m, method="laplace", covariance="implicit", hyperprior=False, draws=4,
                       progressbar=False, log_likelihood=False)
    s_d, s_i = float(dense["fit"]["scales"][0]), float(implicit["fit"]["scales"][0])
    assert abs(np.log(s_i / s_d)) < 0.1
    assert (implicit["diagnostics"]["scale_step"].values == 2).sum() >= 3  # the search ran


@pytest.mark.parametrize("hyperprior,governs", [(False, "all"), (True, "all"),
                                                (False, "node-weights")],
                         ids=["type-II-ML", "type-II-MAP", "transitions-fixed"])
def test_one_implicit_scale_search_lands_at_the_dense_exact_maximiser(hyperprior, governs):
    """One scale for every weight (16 of them, more than the search's 4 Lanczos probes, so its
    log det is stochastic), or for the node weights with the transitions' sd fixed at 1: the
    node search of ``covariance="implicit"`` lands within 0.1 in
    ``log s`` of the dense exact maximiser (L-BFGS-B on the exact evidence and its gradient),
    reports its Monte Carlo errors, its evidence at the chosen scale is the dense exact one there
    to within 4 of its standard errors, and with ``finish`` its MAP is the exact one
    (``finish=False``: the same scale, no Gaussian)."""
    batch, X, y = _data(n=400, F=6, seed=3)
    with pm.Model() as m:
        s = pm.HalfNormal("s", 1.0)
        W = pm.Normal("W", 0.0, s, shape=(6, 2))
        T = pm.Normal("T", 0.0, s if governs == "all" else 1.0, shape=(2, 2))
        pmc.CRF("y", graphs=batch, node_features=X, node_weights=W, edge_weights=T, observed=y)
    problem = weight_problem(m, "laplace", learn_scales=True)
    dense = learn_scales(problem, covariance="exact", hyperprior=hyperprior)
    found = learn_scales(problem, covariance="implicit", hyperprior=hyperprior)
    th_d, th_i = np.log(dense.point.scales[0]), np.log(found.point.scales[0])
    assert abs(th_i - th_d) < 0.1
    assert 0.0 < found.trace["search_theta_se"] < 0.2  # a flat evidence: 0.09 here
    assert np.all(found.trace["outer_step"] == 2) and found.trace["outer_step"].size >= 3
    at_found = laplace_point(problem, found.point.scales, None, hyperprior=None, **LAPLACE)
    se = found.trace["search_log_evidence_se"]
    assert 0.0 < se < 5.0 and abs(found.point.log_evidence - at_found.log_evidence) < 4.0 * se
    np.testing.assert_allclose(found.point.mean, at_found.mean, atol=1e-6)
    quick = learn_scales(problem, covariance="implicit", hyperprior=hyperprior, finish=False)
    assert quick.point.scales[0] == found.point.scales[0] and quick.point.gaussian is None


def test_extrapolated_step_moves_only_drifting_scales_towards_their_limit():
    from pymc_crf.fitters.bethe_laplace.scales import _extrapolated_step

    down = np.full(6, -10.0)
    last = np.array([-0.10, -0.10, -0.01, 0.05, -0.20, -0.10])
    step = np.array([-0.10, -0.05, -0.01, 0.05, -0.05, -0.075])
    gamma = np.array([5.0, 0.5, 5.0, 0.1, 5.0, 0.5])
    move = _extrapolated_step(step, last, gamma, down, 1e-6, 2.0)
    # scale 0 drifts (equal steps): the cap; scales 1 and 5 are pruned (gamma < 1) with ratios
    # 1/2 and 3/4: Aitken's limits step / (1 - r), twice and four times the step; scale 2 drifts
    # by less than DRIFT, scale 3 goes up, scale 4 converges (ratio 1/4, gamma >= 1): MacKay's
    np.testing.assert_allclose(move, [-2.0, -0.1, -0.01, 0.05, -0.05, -0.3])
    # the cap and the lower bound hold (scale 0 stops at its bound 0.15 below); nothing to
    # extrapolate gives None
    bound = np.where(np.arange(6) == 0, -0.15, -10.0)
    np.testing.assert_allclose(_extrapolated_step(step, last, gamma, bound, 1e-6, 0.25),
                               [-0.15, -0.1, -0.01, 0.05, -0.05, -0.25])
    assert _extrapolated_step(step, None, gamma, down, 1e-6, 2.0) is None
    assert _extrapolated_step(np.abs(step), np.abs(last), gamma, down, 1e-6, 2.0) is None


def test_pruned_groups_reach_the_bound_in_fewer_iterations_with_no_less_evidence(monkeypatch):
    """The extrapolation of drifting scales against MacKay's plain steps, on the template model
    whose "bias" and "w" groups the data do not support."""
    from pymc_crf.fitters.bethe_laplace import scales as S

    m = _template_model()

    def fit():
        d = pmc.fit(m, method="laplace", covariance="exact", refine=False, draws=5,
                    progressbar=False)["diagnostics"]
        return d.sizes["outer_iteration"], float(d["scale_objective"].values[-1]), d

    n_fast, f_fast, d = fit()
    assert (d["scale_step"].values == 3).any()  # an extrapolated step was kept
    assert np.all(np.diff(d["scale_objective"].values) > -1e-6)
    monkeypatch.setattr(S, "_extrapolated_step", lambda *args: None)
    n_plain, f_plain, _ = fit()
    # measured: 5 against 13 iterations, F -50.258468 against -50.258471
    assert n_fast < n_plain and f_fast >= f_plain - 1e-6


def test_an_extrapolation_that_loses_evidence_is_not_kept(monkeypatch):
    """Extrapolations that send every scale to the lower bound (losing evidence) are refused,
    tried less and less often (each loss pauses them for longer), and the fit ends where
    MacKay's plain steps end."""
    from pymc_crf.fitters.bethe_laplace import scales as S

    m = _template_model()
    tried = []

    def to_the_bound(step, last, gamma, down, tol, cap):
        if last is None:
            return None
        tried.append(cap)
        return down

    def fit():
        d = pmc.fit(m, method="laplace", covariance="exact", refine=False, draws=5,
                    progressbar=False)["diagnostics"]
        return d

    monkeypatch.setattr(S, "_extrapolated_step", to_the_bound)
    bad = fit()
    monkeypatch.setattr(S, "_extrapolated_step", lambda *args: None)
    plain = fit()
    # tried, with the cap halved after each loss, and not at every step
    n = bad.sizes["outer_iteration"]
    assert 2 <= len(tried) < n - 1 and tried[:2] == [2.0, 1.0]
    assert not (bad["scale_step"].values == 3).any()
    assert np.all(np.diff(bad["scale_objective"].values) > -1e-6)
    assert float(bad["scale_objective"].values[-1]) >= float(
        plain["scale_objective"].values[-1]) - 1e-6


def test_diagonal_steps_stop_on_strict_maps():
    """With the diagonal covariance MacKay's steps take looser MAPs until they stop; the point is
    then refined (a step-4 entry) and the steps go on with strict MAPs, so the fit reaches at
    least the evidence of strict MAPs throughout."""
    from pymc_crf.fitters.bethe_laplace import scales as S

    m = _template_model()
    d = pmc.fit(m, method="laplace", covariance="diagonal", draws=5,
                progressbar=False)["diagnostics"]
    kinds = d["scale_step"].values
    assert (kinds == 4).sum() == 1
    after = d["scale_objective"].values[np.argmax(kinds == 4):]
    assert np.all(np.diff(after) > -1e-9)  # strict from the refinement on
    outer = S.OUTER_GTOL
    try:
        S.OUTER_GTOL = 0.0
        strict = pmc.fit(m, method="laplace", covariance="diagonal", draws=5,
                         progressbar=False)["diagnostics"]
    finally:
        S.OUTER_GTOL = outer
    assert not (strict["scale_step"].values == 4).any()
    assert float(d["scale_objective"].values[-1]) >= float(
        strict["scale_objective"].values[-1]) - 1e-6


def test_diagonal_maps_at_new_scales_are_searched_in_predicted_laplace_coordinates(monkeypatch):
    """With the diagonal covariance each MAP at new scales is searched in the coordinates
    ``sqrt(s' l')``, ``l'`` the Laplace sds the point it starts from predicts at the new scales
    ``s'`` (its likelihood curvature ``1 / l^2 - 1 / s^2`` held), with ``gtol`` still bounding
    the prior-whitened gradient: the same scales, MAP and evidence as prior-whitened searches,
    in fewer L-BFGS iterations."""
    from pymc_crf.fitters.bethe_laplace import scales as S
    from pymc_crf.fitters.bethe_laplace.problem import exact_engine

    m = _template_model()
    problem = weight_problem(m, "laplace", learn_scales=True)
    calls = []
    exact_map, point = S._exact_map, S.laplace_point

    def recorded_map(p, start, maxiter, gtol, scale=None):
        out = exact_map(p, start, maxiter, gtol, scale)
        calls[-1].update(scale=scale, iterations=out[2]["n_iterations"])
        return out

    def recorded_point(p, scales, start, **kw):
        calls.append({"scales": scales, "start": start})
        return point(p, scales, start, **kw)

    monkeypatch.setattr(S, "_exact_map", recorded_map)
    monkeypatch.setattr(S, "laplace_point", recorded_point)

    def fit():
        calls.clear()
        r = pmc.fit(m, method="laplace", covariance="diagonal", draws=5, progressbar=False)
        return r, sum(c["iterations"] for c in calls)

    fast, n_fast = fit()
    assert calls[0]["start"] is None and calls[0]["scale"] is None
    assert len(calls) > 5
    for c in calls[1:]:
        near = c["start"]
        s_old = problem.at_scales(near.scales).prior.sd
        s_new = problem.at_scales(c["scales"]).prior.sd
        curvature = 1.0 / near.sigma_diag - 1.0 / s_old ** 2
        lap = 1.0 / np.sqrt(np.maximum(curvature, 0.0) + 1.0 / s_new ** 2)
        np.testing.assert_allclose(c["scale"], np.sqrt(s_new * lap), rtol=1e-6)
    # the returned MAP meets gtol (1e-8) in prior-whitened coordinates
    w = fast["fit"]["mean_vector"].values
    q = problem.at_scales(fast["fit"]["scales"].values)
    g = q.make_likelihood(exact_engine(q))(w)[1] + q.prior(w)[1]
    assert np.max(np.abs(q.prior.sd * g)) <= 1e-8
    monkeypatch.setattr(S, "search_scale", lambda sd, *args: sd)
    plain, n_plain = fit()
    np.testing.assert_allclose(fast["fit"]["scales"].values, plain["fit"]["scales"].values,
                               rtol=1e-5)
    np.testing.assert_allclose(fast["fit"]["mean_vector"].values,
                               plain["fit"]["mean_vector"].values, atol=1e-5)
    assert float(fast["diagnostics"]["scale_objective"].values[-1]) == pytest.approx(
        float(plain["diagnostics"]["scale_objective"].values[-1]), abs=1e-5)
    assert n_fast < n_plain
