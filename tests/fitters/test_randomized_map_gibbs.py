"""The randomized MAP with the scales integrated over (``scale_method="gibbs"``): its scale steps
against exact densities, its scale posterior against the exact one by quadrature, and against
NUTS on a hierarchical model with redundant groups."""

from __future__ import annotations

import warnings

import numpy as np
import pymc as pm
import pytest
from scipy import stats
from scipy.special import logsumexp

import pymc_crf as pmc
from pymc_crf.fitters.bethe_laplace import weight_problem
from pymc_crf.fitters.bethe_laplace.scales import ScaleHyperprior
from pymc_crf.fitters.randomized_map.gibbs import ScaleDensity, slice_sample
from tests.fitters.test_randomized_map import _hierarchical, _poor_split, _separable


def test_slice_sampler_draws_each_entry_from_its_density():
    """Independent entries, each under its own density (a normal and a log-concave Gumbel-type
    density of ``log s``): the chain's moments match the exact ones."""
    rng = np.random.default_rng(0)
    mean, sd = np.array([0.0, 3.0, -2.0]), np.array([1.0, 0.01, 5.0])

    def log_f(x):
        return np.concatenate([-0.5 * ((x[:3] - mean) / sd) ** 2,
                               [-40.0 * x[3] - 0.5 * 90.0 * np.exp(-2.0 * x[3])]])

    x, kept = np.zeros(4), []
    for t in range(6000):
        x = slice_sample(log_f, x, np.array([1.0, 1.0, 1.0, 0.3]), rng)
        if t >= 500:
            kept.append(x.copy())
    kept = np.asarray(kept)
    assert np.all(np.abs(kept[:, :3].mean(axis=0) - mean) < 0.1 * sd)
    np.testing.assert_allclose(kept[:, :3].std(axis=0), sd, rtol=0.08)
    # the centred step's density of u = log s, exp(-n u - R e^-2u / 2) without a prior, is
    # s^-2 ~ Gamma(n / 2, rate R / 2): here n = 40, R = 90
    tau = np.exp(-2.0 * kept[:, 3])
    assert tau.mean() == pytest.approx(20.0 / 45.0, rel=0.02)
    assert tau.std() == pytest.approx(np.sqrt(20.0) / 45.0, rel=0.08)


def test_scale_density_is_the_hyperprior_per_entry():
    """Per entry, ``log p(s) + log s`` of the scales' priors: summed, ScaleHyperprior's density
    of log s, with its gradient."""
    batch = pmc.GraphBatch.chains([3, 3])
    with pm.Model() as m:
        s = pm.HalfNormal("s", 2.0, shape=3)
        t = pm.InverseGamma("t", 3.0, 2.0)
        W = pm.Normal("W", 0.0, s[np.array([0, 1, 2, 0])][:, None], shape=(4, 2))
        T = pm.Normal("T", 0.0, t, shape=(2, 2))
        pmc.CRF("y", graphs=batch, node_features=np.ones((6, 4)), node_weights=W,
                edge_weights=T, observed=np.array([0, 1, 0, 1, 1, 0]))
    p = weight_problem(m, "randomized_map", learn_scales=True)
    u = np.log(np.array([0.5, 1.0, 2.0, 0.7]))
    dens, grad = ScaleDensity(m, p.scales)(u)
    total, total_grad = ScaleHyperprior(m, p.scales, jacobian=True)(u)
    assert dens.sum() == pytest.approx(total, rel=1e-12)
    np.testing.assert_allclose(grad, total_grad, rtol=1e-12)
    exact = np.concatenate([stats.halfnorm(scale=2.0).logpdf(np.exp(u[:3])),
                            [stats.invgamma(3.0, scale=2.0).logpdf(np.exp(u[3]))]]) + u
    np.testing.assert_allclose(dens, exact, rtol=1e-7)


def test_gibbs_result():
    """The kept sweeps' weights and scales (each draw its own), the trace of every sweep, the
    posterior-mean scales in ``fit``; the weight step's L-BFGS record and HMC acceptance."""
    res = pmc.fit(_hierarchical(), method="randomized_map", scale_method="gibbs", draws=8,
                  tune=4, chains=2, refine=2, random_seed=0, progressbar=False)
    s = res["posterior"]["s"].values
    assert s.shape == (2, 8) and np.all(s > 0) and np.unique(s).size == 16
    d = res["diagnostics"]
    assert d["scale_trace"].shape == (2, 12, 1)
    np.testing.assert_array_equal(d["scale_trace"].values[:, 4:, 0], s)
    assert np.isnan(d["scale_acceptance"].values[:, :4]).all()
    assert np.isfinite(d["scale_acceptance"].values[:, 4:]).all()
    assert d["draw_acceptance"].shape == (2, 8) and bool(d["draw_success"].all())
    assert res["fit"]["scales"].values[0] == pytest.approx(s.mean())
    assert res["log_likelihood"]["y"].shape[:2] == (2, 8)
    # the default with learned scales, and the same draws from the same seed
    again = pmc.fit(_hierarchical(), method="randomized_map", draws=8, tune=4, chains=2,
                    refine=2, random_seed=0, progressbar=False)
    np.testing.assert_array_equal(again["posterior"]["s"].values, s)


def test_gibbs_bad_input():
    hier = _hierarchical()
    with pytest.raises(ValueError, match="scale_method must be 'gibbs'"):
        pmc.fit(hier, method="randomized_map", scale_method="grid", progressbar=False)
    with pytest.raises(ValueError, match="tune must be an integer >= 0"):
        pmc.fit(hier, method="randomized_map", scale_method="gibbs", tune=-1,
                progressbar=False)
    with pytest.raises(ValueError, match="antithetic pairs do not apply"):
        pmc.fit(hier, method="randomized_map", antithetic=True, progressbar=False)
    with pytest.raises(ValueError, match="hyperprior=False"):
        pmc.fit(hier, method="randomized_map", scale_method="gibbs", hyperprior=False,
                progressbar=False)


def _exact_log_s_posterior(log_evidence):
    """Mean and sd of ``log s`` under ``p(s | D)`` with the ``HalfNormal(1)`` prior, by
    quadrature on a fine grid."""
    x = np.linspace(np.log(0.2), np.log(6.0), 1501)
    lp = np.array([log_evidence(np.exp(v)) for v in x]) - 0.5 * np.exp(2.0 * x) + x
    p = np.exp(lp - logsumexp(lp))
    m = float(p @ x)
    return m, float(np.sqrt(p @ (x - m) ** 2))


@pytest.mark.slow
def test_gibbs_scale_posterior_is_the_exact_one():
    """The separable model of test_randomized_map.py (60 one-hot features, one scale), whose
    ``p(s | D)`` is exact by quadrature (log s: mean 0.452, sd 0.231). With ``refine=20`` the
    chains' log s has mean 0.474 and sd 0.241 (2 x 100 sweeps; measured); the test asserts the
    mean within 0.3 posterior sds and the sd within 25 %."""
    model, log_evidence = _separable()
    m, sd = _exact_log_s_posterior(log_evidence)
    assert m == pytest.approx(0.452, abs=0.005)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        res = pmc.fit(model, method="randomized_map", scale_method="gibbs", refine=20,
                      draws=100, tune=20, chains=2, random_seed=0, progressbar=False,
                      log_likelihood=False)
    u = np.log(res["posterior"]["s"].values)
    assert abs(u.mean() - m) < 0.3 * sd, (u.mean(), m, sd)
    assert abs(u.std() / sd - 1.0) < 0.25, (u.std(), sd)


def _redundant(train, centred: bool, V: int = 25, K: int = 3):
    """The data-poor chain CRF of test_randomized_map.py with each word's indicator twice (two
    redundant templates) and a bias, one ``HalfNormal(1)`` scale per template; ``centred=False``
    writes the weights non-centred (``s * z``) for NUTS."""
    X = train.node_features
    X2 = np.hstack([X[:, :V], X[:, :V], X[:, V:]])
    group = np.array([0] * V + [1] * V + [2])
    with pm.Model() as m:
        s = pm.HalfNormal("s", 1.0, shape=3)
        if centred:
            W = pm.Normal("W", 0.0, s[group][:, None], shape=(2 * V + 1, K))
        else:
            z = pm.Normal("z", 0.0, 1.0, shape=(2 * V + 1, K))
            W = pm.Deterministic("W", s[group][:, None] * z)
        T = pm.Normal("T", 0.0, 1.0, shape=(K, K))
        pmc.CRF("y", graphs=train.graphs, node_features=X2, node_weights=W, edge_weights=T,
                observed=train.labels)
    return m


@pytest.mark.slow
def test_gibbs_averaged_marginals_against_nuts_with_redundant_groups():
    """Two templates that always fire together (each word's indicator twice) and a bias, one
    learned scale each, 20 data-poor sentences. The type-II MAP prunes redundant groups
    (measured: the EM's scales 0, 0.66, 0, its averaged test marginals 0.056 from NUTS's on
    average); integrated over, the scales keep every group and the averaged marginals are those
    of NUTS on the non-centred model (measured once with 2 x 150 sweeps and refine=20: 0.007
    on average, log loss 0.823 against NUTS's 0.825; the test runs 2 x 100 sweeps with
    refine=10)."""
    K, V = 3, 25
    train, test = _poor_split(20, V, K)
    Xt = test.node_features
    test2 = pmc.CRFData(test.graphs, test.labels, np.hstack([Xt[:, :V], Xt[:, :V], Xt[:, V:]]),
                        n_labels=K)
    opts = dict(random_seed=0, progressbar=False, log_likelihood=False)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        nuts = pmc.fit(_redundant(train, False), method="nuts", draws=1000, tune=1000,
                       chains=2, target_accept=0.95, **opts)
        gibbs = pmc.fit(_redundant(train, True), method="randomized_map",
                        scale_method="gibbs", refine=10, draws=100, tune=30, chains=2, **opts)
    ref = pmc.predict(nuts, test2, "average", draws=None).marginals
    got = pmc.predict(gibbs, test2, "average", draws=None).marginals
    assert np.abs(got - ref).mean() < 0.015
    y = test.labels
    rows = np.arange(y.size)
    assert abs(np.log(got[rows, y]).mean() - np.log(ref[rows, y]).mean()) < 0.015
    # no group pruned: every scale's posterior mean well away from 0
    assert np.all(gibbs["posterior"]["s"].values.mean(axis=(0, 1)) > 0.2)


def test_sweep_maps_are_searched_where_the_last_sweeps_laplace_sds_predict(monkeypatch):
    """Each sweep's MAP, at new scales, is searched in the coordinates ``sqrt(s' l')``, ``l'``
    the diagonal Laplace sds the chain's last sweep predicts at the new scales ``s'``
    (prior-whitened at the first sweep); the EM path's MAPs likewise from its last centre."""
    from pymc_crf.fitters.randomized_map import draws, gibbs

    searches = []
    minimise = draws.minimise

    def recorded(f, mu, sd, start, rule, gtol, maxiter, what, scale=None):
        if "MAP" in what:
            searches.append((sd, sd if scale is None else scale))
        return minimise(f, mu, sd, start, rule, gtol, maxiter, what, scale)

    laps = []
    step = gibbs._weight_step

    def recorded_step(*args):
        out = step(*args)
        laps.append(out[1])
        return out

    monkeypatch.setattr(draws, "minimise", recorded)
    monkeypatch.setattr(gibbs, "_weight_step", recorded_step)

    def expected(sd_new, lap, sd_old):
        curvature = np.maximum(1.0 / lap ** 2 - 1.0 / sd_old ** 2, 0.0)
        return np.sqrt(sd_new / np.sqrt(curvature + 1.0 / sd_new ** 2))

    pmc.fit(_hierarchical(), method="randomized_map", draws=3, tune=2, chains=2, refine=0,
            random_seed=0, progressbar=False)
    assert len(searches) == len(laps) == 10
    for c in range(2):
        chain, lap = searches[c::2], laps[c::2]
        np.testing.assert_array_equal(chain[0][1], chain[0][0])
        for t in range(1, 5):
            (sd0, _), (sd1, scale) = chain[t - 1], chain[t]
            assert not np.array_equal(sd1, sd0)  # the scales moved
            np.testing.assert_allclose(scale, expected(sd1, lap[t - 1], sd0), rtol=1e-12)

    searches.clear()
    centres = []
    centre_at = draws.DrawRunner.centre

    def recorded_centre(self, mu, sd, w_map):
        c = centre_at(self, mu, sd, w_map)
        centres.append(c)
        return c

    monkeypatch.setattr(draws.DrawRunner, "centre", recorded_centre)
    pmc.fit(_hierarchical(), method="randomized_map", scale_method="em", draws=4,
            scale_maxiter=3, random_seed=0, progressbar=False)
    assert len(searches) >= 2
    np.testing.assert_array_equal(searches[0][1], searches[0][0])
    for t in range(1, len(searches)):
        sd1, scale = searches[t]
        last = centres[t - 1]
        np.testing.assert_allclose(scale, expected(sd1, last.laplace_sd, last.sd), rtol=1e-12)
