"""The MRF weight-space likelihood (MRFLogLikelihood) against the compiled model and finite
differences, and the CRF/MRF dispatch of extract_random_field."""

import numpy as np
import pymc as pm
import pytest
from pymc.model.fgraph import clone_model

import pymc_crf as pmc
from pymc_crf.fitters import (
    MRFLogLikelihood,
    MRFSpec,
    extract_mrf,
    extract_random_field,
    random_field_log_likelihood,
    require_gaussian_prior,
)
from pymc_crf.inference import BeliefPropagation
from pymc_crf.model.objective import CRFLogLikelihood, GaussianLogPrior
from pymc_crf.model.spec import CRFSpec

GRAPH = pmc.GraphBatch.from_edges([[(0, 1), (1, 2), (2, 3), (3, 0), (1, 3), (3, 4)]], [5])


def _model(kind: str, shared: bool, rng, n_rows: int = 40):
    K = 3 if kind in ("table", "potts") else 2
    n, E = 5, GRAPH.n_edges
    X = rng.integers(0, K, size=(n_rows, n))
    with pm.Model() as m:
        if kind in ("table", "potts"):
            a = pm.Normal("a", 0.2, 1.3, shape=(K,) if shared else (n, K))
        else:
            a = pm.Normal("a", 0.2, 1.3, shape=() if shared else (n,))
        if kind == "table":
            c = pm.Normal("c", -0.1, 0.7, shape=(K, K) if shared else (E, K, K))
        else:
            c = pm.Normal("c", -0.1, 0.7, shape=() if shared else (E,))
        pmc.MRF("x", graphs=GRAPH, node_weights=a, edge_weights=c, parameterization=kind,
                observed=X)
    return m


KINDS = [("table", True), ("table", False), ("ising", True), ("ising", False),
         ("boltzmann", False), ("potts", True), ("potts", False)]


@pytest.mark.parametrize("kind,shared", KINDS)
def test_value_gradient_pointwise_equal_compiled_model(kind, shared):
    rng = np.random.default_rng(0)
    m = _model(kind, shared, rng)
    spec = extract_mrf(m)
    assert isinstance(spec, MRFSpec) and spec.n_samples == 40 and spec.labels.shape == (40, 5)
    lik, prior = MRFLogLikelihood(spec), GaussianLogPrior(spec)
    names = [w.name for w in spec.weights]
    inputs = [m.rvs_to_values[m[nm]] for nm in names]
    # one case through the default (numba) backend, the others in FAST_COMPILE (the model's
    # logp graph without numba compilation)
    mode = None if (kind, shared) == ("ising", False) else "FAST_COMPILE"
    fn = m.compile_fn([m.logp(), m.dlogp(vars=[m[nm] for nm in names])], point_fn=False,
                      inputs=inputs, mode=mode)
    fn_ll = m.compile_fn(m.logp(vars=m.observed_RVs, sum=False)[0], point_fn=False,
                         inputs=inputs, mode=mode)
    for _ in range(2):
        w = rng.normal(size=spec.flat_size)
        parts = spec.unflatten(w)
        lp_ref, g_ref = fn(*[parts[nm] for nm in names])
        ll, g = lik(w)
        lp, gp = prior(w)
        # the prior constant of sigma = 1.3 is taken in float32 by PyMC: totals at 1e-8
        np.testing.assert_allclose(ll + lp, lp_ref, rtol=1e-8)
        np.testing.assert_allclose(g + gp, g_ref, rtol=1e-8, atol=1e-10)
        pw = lik.pointwise(w)
        np.testing.assert_allclose(pw, fn_ll(*[parts[nm] for nm in names]), rtol=1e-10)
        np.testing.assert_allclose(pw.sum(), ll, rtol=1e-12)


@pytest.mark.parametrize("kind,shared", KINDS)
def test_score_pullback_pushforward(kind, shared):
    """score - N log Z = value; pullback(counts - N mu) = gradient = finite differences;
    pushforward = directional derivative of the tables; <J^T u, d> = <u, J d>."""
    rng = np.random.default_rng(3)
    ll = MRFLogLikelihood(extract_mrf(_model(kind, shared, rng)))
    w0 = rng.normal(size=ll.size)
    value, grad = ll(w0)
    s, sg = ll.score(w0)
    node, edge = ll.log_potentials(w0)
    mg = ll.engine.marginals(ll.batch, node, edge)
    N = ll.n_samples
    np.testing.assert_allclose(s - N * mg.log_z[0], value, rtol=1e-12)
    cn, ce = ll.observed_statistics()
    assert cn.sum() == N * 5 and ce.sum() == N * GRAPH.n_edges
    sn, se = ll.statistics(ll.spec.labels)
    np.testing.assert_array_equal(sn, cn)
    np.testing.assert_array_equal(se, ce)
    np.testing.assert_allclose(ll.pullback(w0, cn - N * mg.node, ce - N * mg.edge), grad,
                               atol=1e-9)
    h = 1e-6
    eye = np.eye(ll.size)
    fd = np.array([(ll(w0 + h * e)[0] - ll(w0 - h * e)[0]) / (2 * h) for e in eye])
    np.testing.assert_allclose(grad, fd, rtol=1e-6, atol=1e-5)
    fds = np.array([(ll.score(w0 + h * e)[0] - ll.score(w0 - h * e)[0]) / (2 * h) for e in eye])
    np.testing.assert_allclose(sg, fds, atol=1e-6)
    d = rng.normal(size=ll.size)
    jn, je = ll.pushforward(w0, d)
    n1, e1 = ll.log_potentials(w0 + h * d)
    n0, e0 = ll.log_potentials(w0 - h * d)
    np.testing.assert_allclose(jn, (n1 - n0) / (2 * h), atol=1e-7)
    np.testing.assert_allclose(je, (e1 - e0) / (2 * h), atol=1e-7)
    un, ue = rng.normal(size=jn.shape), rng.normal(size=je.shape)
    np.testing.assert_allclose(ll.pullback(w0, un, ue) @ d, np.sum(un * jn) + np.sum(ue * je),
                               rtol=1e-10)


def test_engine_choice_and_fisher_product():
    """A Bethe engine gives the Bethe log Z; pullback(cov . pushforward) is the Hessian of
    N log Z in w (exact engine, finite differences of the gradient)."""
    rng = np.random.default_rng(5)
    spec = extract_mrf(_model("ising", False, rng))
    exact = MRFLogLikelihood(spec)
    bethe = random_field_log_likelihood(spec, BeliefPropagation())
    w = 0.3 * rng.normal(size=exact.size)
    node, edge = exact.log_potentials(w)
    assert np.isclose(bethe(w)[0] + exact.n_samples * bethe.engine.log_partition(
        exact.batch, node, edge)[0], exact.score(w)[0])
    # counts of exact draws, per row, estimate the marginals (20000 draws: sd <= 0.0035)
    draws = exact.engine.sample(exact.batch, node, edge, 20000, rng)
    dn, de = exact.statistics(draws)
    mg = exact.engine.marginals(exact.batch, node, edge)
    np.testing.assert_allclose(dn / 20000, mg.node, atol=0.015)
    np.testing.assert_allclose(de / 20000, mg.edge, atol=0.015)
    v = rng.normal(size=exact.size)
    hn, he = exact.engine.covariance_vector_product(exact.batch, node, edge,
                                                    *exact.pushforward(w, v))
    hv = exact.n_samples * exact.pullback(w, hn, he)
    h = 1e-5
    fd = -(exact(w + h * v)[1] - exact(w - h * v)[1]) / (2 * h)
    np.testing.assert_allclose(hv, fd, rtol=1e-5, atol=1e-6)


def test_extract_random_field_dispatch_and_refusals():
    rng = np.random.default_rng(1)
    m = _model("ising", True, rng)
    spec = extract_random_field(m)
    assert isinstance(spec, MRFSpec)
    assert isinstance(random_field_log_likelihood(spec), MRFLogLikelihood)
    assert spec.param_names() == ["a", "c"]
    np.testing.assert_array_equal(spec.flatten(spec.unflatten(np.array([0.5, -2.0]))), [0.5, -2.0])
    require_gaussian_prior(spec, "bethe_laplace")
    b = pmc.GraphBatch.chains([3])
    with pm.Model() as mc:
        T = pm.Normal("T", 0, 1, shape=(2, 2))
        pmc.CRF("y", graphs=b, edge_weights=T, observed=np.zeros(3, int))
    cspec = extract_random_field(mc)
    assert isinstance(cspec, CRFSpec)
    assert isinstance(random_field_log_likelihood(cspec), CRFLogLikelihood)
    with pm.Model() as mh:
        s = pm.HalfNormal("s", 1.0)
        w = pm.Normal("w", 0, s)
        pmc.MRF("x", graphs=GRAPH, edge_weights=w, parameterization="ising",
                observed=np.zeros((3, 5), int))
    with pytest.raises(ValueError, match="depend on other random variables"):
        require_gaussian_prior(extract_mrf(mh), "bethe_laplace")
    with pm.Model() as mn:
        pm.Normal("z", 0, 1, observed=np.zeros(3))
    with pytest.raises(ValueError, match="pmc.CRF or pmc.MRF"):
        extract_random_field(mn)


def test_fit_map_result_has_per_row_log_likelihood():
    """A fitter's result gets the MRF's per-row log_likelihood group from the engine, equal to
    PyMC's own compute_log_likelihood."""
    rng = np.random.default_rng(2)
    X = rng.integers(0, 2, size=(25, 5))
    with pm.Model(coords={"row": range(25), "node": range(5)}) as m:
        b = pm.Normal("b", 0, 1, dims="node")
        w = pm.Normal("w", 0, 1)
        pmc.MRF("x", graphs=GRAPH, node_weights=b, edge_weights=w, parameterization="ising",
                observed=X, dims=("row", "node"))
    res = pmc.fit(m, method="map")
    ll = res["log_likelihood"]["x"]
    assert ll.dims == ("chain", "draw", "row") and ll.shape == (1, 1, 25)
    assert res.attrs["log_z"] == "exact"
    ref = pm.compute_log_likelihood(res.copy(), model=m, extend_inferencedata=False,
                                    progressbar=False)
    np.testing.assert_allclose(ll.values, ref["x"].values, rtol=1e-10)


def _ising_model(X=None, n_rows: int = 30):
    with pm.Model() as m:
        b = pm.Normal("b", 0.0, 1.0, shape=(5,))
        w = pm.Normal("w", 0.0, 0.8)
        pmc.MRF("x", graphs=GRAPH, node_weights=b, edge_weights=w, parameterization="ising",
                n_samples=n_rows, observed=X)
    return m


def test_rebuilt_mrf_models_read_back_and_fit_like_the_original():
    """An MRF model passed through clone_model or pm.observe names its own weight variables (not
    the original's): MAP and Bethe-Laplace give the original's optimum and mean."""
    X = np.random.default_rng(4).integers(0, 2, size=(30, 5))
    orig = _ising_model(X)
    ref_map = pmc.fit(orig, method="map")
    ref_bl = pmc.fit(orig, method="bethe_laplace", draws=10, random_seed=0)
    observed = pm.observe(_ising_model(), {"x": X})
    for rebuilt in (clone_model(orig), observed):
        spec = extract_mrf(rebuilt)
        assert spec.model is rebuilt and spec.free_vars == ()
        assert spec.node_weights.prior == "normal" and spec.edge_weights.prior == "normal"
        assert spec.info.node_weights is rebuilt["b"] and spec.info.edge_weights is rebuilt["w"]
        np.testing.assert_array_equal(spec.labels, X)
        res = pmc.fit(rebuilt, method="map")
        for name in ("b", "w"):
            np.testing.assert_allclose(res["posterior"][name].values,
                                       ref_map["posterior"][name].values, atol=1e-6)
        bl = pmc.fit(rebuilt, method="bethe_laplace", draws=10, random_seed=0)
        np.testing.assert_allclose(bl["fit"]["mean_vector"], ref_bl["fit"]["mean_vector"],
                                   atol=1e-6)


def test_do_fixes_the_mrf_weights():
    """pm.do replaces the coupling by a constant: it is no longer a free variable to fit."""
    X = np.random.default_rng(5).integers(0, 2, size=(30, 5))
    spec = extract_mrf(pm.do(_ising_model(X), {"w": 0.3}))
    assert spec.node_weights.prior == "normal" and spec.node_weights.name == "b"
    assert spec.edge_weights.prior == "other"
    assert "not a free PyMC variable" in spec.edge_weights.reason
    with pytest.raises(ValueError, match="not a free PyMC variable"):
        require_gaussian_prior(spec, "bethe_laplace")


def test_extract_mrf_needs_exactly_one_mrf():
    with pm.Model() as two:
        w = pm.Normal("w", 0, 1)
        for name in ("x", "y"):
            pmc.MRF(name, graphs=GRAPH, edge_weights=w, parameterization="ising",
                    observed=np.zeros((3, 5), int))
    with pytest.raises(ValueError, match=r"exactly one pmc.MRF likelihood; this model has 2"):
        extract_mrf(two)
    with pm.Model() as none:
        pm.Normal("z", 0, 1, observed=np.zeros(3))
    with pytest.raises(ValueError,
                       match=r"an observed pmc.MRF likelihood; this model observes \[.z \(Normal\).\]"):
        extract_mrf(none)
