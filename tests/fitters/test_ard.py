"""Tests of predictive ARD by EP (Qi 2005, thesis ch. 4; :mod:`pymc_crf.fitters.ep.ard`).

Ground truth independent of the code under test: quadrature for the group evidence, a grid search
for its maximiser, the Schur complement through the other groups for the in-model group
statistics, the product of the other graphs' sites for each leave-one-out cavity, and EP on a
model built without a feature for EP with that feature pinned at 0.
"""

from __future__ import annotations

import numpy as np
import pymc as pm
import pytest
from scipy import integrate

import pymc_crf as pmc
from pymc_crf.datasets import bcrf_synthetic
from pymc_crf.fitters.ep.ard import (
    feature_groups,
    graph_cavities,
    group_evidence,
    group_statistics,
    optimal_precision,
    run_ard,
)
from pymc_crf.fitters.ep.core import run_ep, site_natural_params
from pymc_crf.fitters.ep.terms import build_terms


@pytest.fixture(scope="module")
def loop_run():
    """EP on 3-cycles with 6 relevant and 3 irrelevant edge features, irrelevant group 7 out."""
    train, _ = bcrf_synthetic("loop", n_train=8, n_test=0, seed=2, n_irrelevant=3)
    xe = train.edge_features
    terms = build_terms(train.graphs, 2, train.labels, None, xe, use_node=False, use_edge=True)
    groups = feature_groups(0, xe.shape[1], 2)
    alpha = np.full(len(groups), 0.2)
    alpha[7] = np.inf
    pv = np.zeros(terms.d)
    for g, idx in enumerate(groups):
        if np.isfinite(alpha[g]):
            pv[idx] = 1 / alpha[g]
    run = run_ep(terms, np.zeros(terms.d), pv, step_size=0.5)
    assert run.converged
    return train, terms, groups, alpha, pv, run


def test_irrelevant_features_leave_the_data_alone():
    a, _ = bcrf_synthetic("chain", n_train=5, n_test=0, seed=4)
    b, _ = bcrf_synthetic("chain", n_train=5, n_test=0, seed=4, n_irrelevant=3)
    assert b.edge_features.shape == (a.edge_features.shape[0], 9)
    np.testing.assert_array_equal(b.edge_features[:, :6], a.edge_features)
    np.testing.assert_array_equal(b.labels, a.labels)
    assert b.true_weights["w"].shape == (9, 2, 2) and not b.true_weights["w"][6:].any()
    with pytest.raises(ValueError, match="n_irrelevant"):
        bcrf_synthetic("chain", n_irrelevant=-1)


def test_sites_rebuild_the_posterior(loop_run):
    _, terms, _, _, pv, run = loop_run
    lam, h = site_natural_params(terms, run.state)
    free = pv > 0
    ff = np.ix_(free, free)
    Q = np.linalg.inv(run.cov[ff])
    np.testing.assert_allclose(np.diag(1 / pv[free]) + lam[ff], Q, atol=1e-9 * np.abs(Q).max())
    np.testing.assert_allclose(h[free], Q @ run.mean[free], atol=1e-9)


def test_pinned_feature_is_the_model_without_it(loop_run):
    train, terms, groups, _, pv, run = loop_run
    keep = [f for f in range(9) if f != 7]
    small = build_terms(train.graphs, 2, train.labels, None, train.edge_features[:, keep],
                        use_node=False, use_edge=True)
    ref = run_ep(small, np.zeros(small.d), np.full(small.d, 5.0), step_size=0.5)
    idx = np.concatenate([groups[g] for g in keep])
    assert ref.iterations == run.iterations
    np.testing.assert_allclose(run.mean[idx], ref.mean, atol=1e-10)
    np.testing.assert_allclose(run.cov[np.ix_(idx, idx)], ref.cov, atol=1e-10)
    assert not run.mean[groups[7]].any() and not run.cov[groups[7]].any()


def test_warm_start_resumes_the_fixed_point(loop_run):
    _, terms, _, _, pv, run = loop_run
    again = run_ep(terms, np.zeros(terms.d), pv, step_size=0.5, init=run.state)
    assert again.converged and again.iterations <= 3
    np.testing.assert_allclose(again.mean, run.mean, atol=1e-3)


@pytest.mark.parametrize("n", [1, 2])
def test_group_evidence_is_the_gaussian_integral(n):
    rng = np.random.default_rng(n)
    B = rng.normal(size=(n, n))
    S = B @ B.T + 0.3 * np.eye(n)
    q = rng.normal(size=n) * 2
    for alpha in (0.3, 2.0):
        def f(*w, alpha=alpha):
            w = np.array(w)
            prior = (alpha / (2 * np.pi)) ** (n / 2) * np.exp(-0.5 * alpha * w @ w)
            return prior * np.exp(-0.5 * w @ S @ w + q @ w)
        val = (integrate.quad(f, -30, 30, epsabs=1e-12)[0] if n == 1 else
               integrate.dblquad(lambda y, x: f(x, y), -15, 15, -15, 15, epsabs=1e-10)[0])
        assert group_evidence(S, q, alpha) == pytest.approx(np.log(val), abs=1e-6)
    assert group_evidence(S, q, np.inf) == 0.0


def test_optimal_precision_maximises():
    # one weight: thesis eqs. (4.15)-(4.16) against a grid
    s, q = 1.5, 2.0
    a, ell = optimal_precision(np.array([[s]]), np.array([q]), alpha_min=1e-6)
    assert a == pytest.approx(s ** 2 / (q ** 2 - s))
    grid = np.exp(np.linspace(-8, 8, 20001))
    vals = [group_evidence(np.array([[s]]), np.array([q]), x) for x in grid]
    assert ell == pytest.approx(max(vals), abs=1e-6)
    assert optimal_precision(np.array([[s]]), np.array([1.0]))[0] == np.inf  # q^2 <= s
    # a group of four: the maximiser beats the grid and its neighbours, and the bound holds
    rng = np.random.default_rng(0)
    B = rng.normal(size=(4, 4))
    S = B @ B.T
    qv = 3 * rng.normal(size=4)
    a, ell = optimal_precision(S, qv, alpha_min=1e-4)
    vals = [group_evidence(S, qv, x) for x in grid]
    assert ell >= max(vals) - 1e-6 and ell > 0
    assert ell >= group_evidence(S, qv, 1.01 * a) and ell >= group_evidence(S, qv, a / 1.01)
    assert optimal_precision(S, qv, alpha_min=10 * a)[0] == pytest.approx(10 * a)
    assert optimal_precision(S, np.zeros(4))[0] == np.inf  # no signal: prune
    # negative curvature: alpha stays above twice it
    a, _ = optimal_precision(np.array([[-0.5, 0], [0, 1]]), np.array([1.0, 1.0]), alpha_min=1e-4)
    assert a >= 1.0


def test_group_statistics_in_and_out_of_the_model(loop_run):
    _, terms, groups, alpha, _, run = loop_run
    lam, h = site_natural_params(terms, run.state)
    stats = group_statistics(run.cov, run.mean, lam, h, alpha, groups)
    for g in (0, 7):  # in the model (read off q) and out (Schur complement): the same formula
        others = np.concatenate([groups[j] for j in range(len(groups))
                                 if j != g and np.isfinite(alpha[j])])
        A = np.diag(np.concatenate([np.full(groups[j].size, alpha[j]) for j in range(len(groups))
                                    if j != g and np.isfinite(alpha[j])]))
        C = np.linalg.inv(A + lam[np.ix_(others, others)])
        L_go = lam[np.ix_(groups[g], others)]
        S_ref = lam[np.ix_(groups[g], groups[g])] - L_go @ C @ L_go.T
        q_ref = h[groups[g]] - L_go @ C @ h[others]
        np.testing.assert_allclose(stats[g][0], S_ref, atol=1e-8)
        np.testing.assert_allclose(stats[g][1], q_ref, atol=1e-8)


def test_cavities_are_the_other_graphs_sites(loop_run):
    train, terms, _, _, pv, run = loop_run
    free = pv > 0
    ff = np.ix_(free, free)
    graph = train.graphs.node_graph[terms.nodes[:, 0]]
    seen = 0
    for g, m_c, V_c, pd in graph_cavities(terms, run, train.graphs):
        lam, h = site_natural_params(terms, run.state, np.flatnonzero(graph != g))
        P = np.diag(1 / pv[free]) + lam[ff]
        np.testing.assert_allclose(m_c[free], np.linalg.solve(P, h[free]), atol=1e-8)
        if pd:
            np.testing.assert_allclose(V_c[ff], np.linalg.inv(P), atol=1e-8)
        seen += 1
    assert seen == train.graphs.n_graphs


def test_path_only_shrinks_and_picks_by_criterion():
    train, _ = bcrf_synthetic("chain", n_train=10, n_test=0, seed=0, n_irrelevant=3)
    xe = train.edge_features
    terms = build_terms(train.graphs, 2, train.labels, None, xe, use_node=False, use_edge=True)
    groups = feature_groups(0, xe.shape[1], 2)
    path = run_ard(terms, train.graphs, train.labels, None, xe, groups, np.full(9, 0.2),
                   max_steps=8, ep_options={"step_size": 0.5})
    assert path.steps[0].action == "start" and np.all(path.steps[0].alpha == 0.2)
    removed = np.zeros(9, bool)
    for s in path.steps:
        out = np.isinf(s.alpha)
        assert np.all(out >= removed)  # a removed feature never comes back
        removed = out
        assert np.all(s.alpha[~out] >= 0.2 - 1e-12)  # never wider than the model's prior
        assert 0 <= s.loo_error <= 1 and 0 <= s.loo_probability <= 1
    assert removed.any()
    loo = [s.loo_error for s in path.steps]
    assert path.choose("loo") == int(np.argmin(loo)) and path.choose("evidence") == len(loo) - 1
    with pytest.raises(ValueError, match="criterion"):
        path.choose("bic")


def _model(train, mu=0.0):
    with pm.Model(coords=train.coords) as model:
        w = pm.Normal("w", mu, 5 ** 0.5, dims=("edge_feature", "label_i", "label_j"))
        pmc.CRF("t", graphs=train.graphs, edge_features=train.edge_features, edge_weights=w,
                potential="probit", observed=train.labels)
    return model


def test_fit_predictive_ard_contract():
    train, test = bcrf_synthetic("chain", n_train=10, n_test=20, seed=1, n_irrelevant=3)
    res = pmc.fit(_model(train), method="predictive_ard", max_steps=6, draws=50,
                  keep_path=True, progressbar=False, random_seed=0)
    ard = res["ard"]
    chosen = int(ard["chosen_step"])
    assert chosen == int(np.argmin(ard["loo_error"].values))
    pv = ard["prior_variance"].values[chosen]
    kept = [f"edge feature {f}" for f in np.flatnonzero(pv > 0)]
    assert list(ard["features_kept"].values) == kept
    w = res["posterior"]["w"].values
    assert w.shape == (1, 50, 9, 2, 2)
    assert not w[..., pv == 0, :, :].any()  # removed features' weights are exactly 0
    np.testing.assert_allclose(res["fit"]["mean_vector"].values.reshape(9, 2, 2)[pv == 0], 0)
    assert "log_likelihood" in res.children
    np.testing.assert_array_equal(ard["path_mean"].values[chosen], res["fit"]["mean_vector"])
    pred = pmc.predict(res, test, method="model_average")
    assert 0 <= pred.error_rate <= 1
    # the contract's diagnostics group: the path's per-step traces, which plot_convergence shows
    diag = res["diagnostics"]
    np.testing.assert_array_equal(diag["loo_error"].values, ard["loo_error"].values)
    assert diag["loo_error"].dims == ("iteration",) and int(diag["chosen_step"]) == chosen
    import matplotlib

    matplotlib.use("Agg")
    axes = pmc.plots.plot_convergence(res)
    assert {ln.get_label() for a in axes for ln in a.get_lines()} >= {"loo_error", "n_features"}
    matplotlib.pyplot.close("all")


def test_fit_predictive_ard_bad_input():
    train, _ = bcrf_synthetic("chain", n_train=4, n_test=0, seed=1)
    with pytest.raises(ValueError, match="criterion"):
        pmc.fit(_model(train), method="predictive_ard", criterion="aic", progressbar=False)
    with pytest.raises(ValueError, match="zero prior means"):
        pmc.fit(_model(train, mu=1.0), method="predictive_ard", progressbar=False)
    with pytest.raises(ValueError, match="tol"):
        pmc.fit(_model(train), method="predictive_ard", tol=0, progressbar=False)
    # max_steps=-1 crashed inside numpy, 2.5 ran 2 steps; tol=inf stopped after one step
    for bad in (-1, 0, 2.5, True, np.nan):
        with pytest.raises(ValueError, match="max_steps must be an integer >= 1"):
            pmc.fit(_model(train), method="predictive_ard", max_steps=bad, progressbar=False)
    with pytest.raises(ValueError, match="tol must be a number > 0 and finite; got inf"):
        pmc.fit(_model(train), method="predictive_ard", tol=np.inf, progressbar=False)
    for option in ("warm_start", "keep_path", "backoff"):
        with pytest.raises(ValueError, match=f"{option} must be True or False"):
            pmc.fit(_model(train), method="predictive_ard", progressbar=False,
                    **{option: "False"})


@pytest.mark.slow
def test_ard_beats_the_fixed_prior_with_irrelevant_features():
    """docs/ep.md, "Predictive ARD": over chain seeds 0-7 (14 irrelevant features), measured
    test errors EP 0.3446, evidence-ARD 0.3233, predictive ARD 0.3378, MAP 0.3817; evidence-ARD
    kept 1.9 of the 14 irrelevant features on average."""
    err = {"map": [], "ep": [], "loo": [], "evidence": []}
    irrelevant_kept = []
    for seed in range(8):
        train, test = bcrf_synthetic("chain", n_train=20, n_test=300, seed=seed, n_irrelevant=14)
        model = _model(train)
        err["map"].append(pmc.predict(pmc.fit(model, method="map", progressbar=False),
                                      test).error_rate)
        ep = pmc.fit(model, method="ep", progressbar=False, log_likelihood=False)
        err["ep"].append(pmc.predict(ep, test, method="model_average").error_rate)
        for crit in ("loo", "evidence"):
            res = pmc.fit(model, method="predictive_ard", criterion=crit, progressbar=False,
                          log_likelihood=False)
            err[crit].append(pmc.predict(res, test, method="model_average").error_rate)
            if crit == "evidence":
                pv = res["ard"]["prior_variance"].values[int(res["ard"]["chosen_step"])]
                irrelevant_kept.append(int((pv[6:] > 0).sum()))
    mean = {k: float(np.mean(v)) for k, v in err.items()}
    assert mean["evidence"] < mean["ep"] - 0.01
    assert mean["loo"] < mean["map"] - 0.02
    assert np.mean(irrelevant_kept) < 4


def test_node_features_and_shared_table():
    """Node feature groups of K weights and one shared (K, K) table group, K = 3, against EP with
    the same prior at the start of the path."""
    rng = np.random.default_rng(5)
    graphs = pmc.GraphBatch.chains([4] * 12)
    x = rng.normal(size=(graphs.n_total_nodes, 4))
    labels = (x[:, 0] > 0).astype(int) + (x[:, 1] > 0.8)
    with pm.Model() as model:
        W = pm.Normal("W", 0.0, 1.0, shape=(4, 3))
        V = pm.Normal("V", 0.0, 1.0, shape=(3, 3))
        pmc.CRF("t", graphs=graphs, node_features=x, node_weights=W, edge_weights=V,
                potential="probit", observed=labels)
    res = pmc.fit(model, method="predictive_ard", max_steps=5, keep_path=True, draws=20,
                  progressbar=False)
    ard = res["ard"]
    assert list(ard["feature_group"].values) == [f"node feature {f}" for f in range(4)] + [
        "edge table"]
    # ARD runs EP with the back-off schedule (run_ep's default); pmc.fit's default is adaptive
    ep = pmc.fit(model, method="ep", draws=20, progressbar=False, log_likelihood=False,
                 schedule="backoff")
    np.testing.assert_allclose(ard["path_mean"].values[0], ep["fit"]["mean_vector"].values,
                               atol=1e-8)
    assert res["posterior"]["W"].shape == (1, 20, 4, 3)
