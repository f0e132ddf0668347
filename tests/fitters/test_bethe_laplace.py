"""The Bethe-Laplace posterior (Welling & Parise 2006): curvature against finite differences,
linear response against exact covariances, BL-BP = BL-MP on trees, pseudo-moment matching, the
result contract and clear errors for models it cannot handle."""

import json
import warnings

import numpy as np
import pymc as pm
import pytest
from helpers.models import ising_grid_mrf, node_edge_crf

import pymc_crf as pmc
from pymc_crf.compare import posterior_matrix
from pymc_crf.fitters.bethe_laplace import laplace_fit, weight_problem
from pymc_crf.fitters.bethe_laplace.pmm import empirical_marginals, pmm_start
from pymc_crf.fitters.bethe_laplace.problem import exact_engine
from pymc_crf.inference import BeliefPropagation, ConvergenceWarning

GRID = pmc.GraphBatch.grid(3, 3)
TREE = pmc.GraphBatch.from_edges([np.array([[0, 1], [1, 2], [1, 3], [3, 4]])], [5])


def _mrf(graph, rows=40, parameterization="ising", sd=0.5, seed=0):
    rng = np.random.default_rng(seed)
    n = graph.n_total_nodes
    K = 3 if parameterization == "table" else 2
    X = rng.integers(0, K, size=(rows, n))
    with pm.Model() as m:
        if parameterization == "table":
            b = pm.Normal("b", 0.0, sd, shape=(n, K))
            w = pm.Normal("w", 0.0, sd, shape=(graph.n_edges, K, K))
        else:
            b = pm.Normal("b", 0.0, sd, shape=n)
            w = pm.Normal("w", 0.0, sd, shape=graph.n_edges)
        pmc.MRF("x", graphs=graph, node_weights=b, edge_weights=w,
                parameterization=parameterization, observed=X)
    return m


def _crf(potential, shared, seed=0):
    rng = np.random.default_rng(seed)
    batch = pmc.GraphBatch.from_edges([np.array([[0, 1], [1, 2], [1, 3]]),
                                       np.array([[0, 1], [1, 2], [2, 0]])] * 2, [4, 3] * 2)
    return node_edge_crf(batch, 3, potential, shared, rng)


def _fd_precision(problem, w):
    lik = problem.make_likelihood(exact_engine(problem))
    h = 1e-5

    def grad(x):
        return lik(x)[1] + problem.prior(x)[1]

    H = np.array([(grad(w + h * e) - grad(w - h * e)) / (2 * h) for e in np.eye(w.size)])
    return -0.5 * (H + H.T)


@pytest.mark.parametrize("case", ["crf-loglinear-shared", "crf-probit-features", "mrf-grid"])
def test_exact_precision_is_the_negative_log_posterior_hessian(case):
    if case == "mrf-grid":
        m = _mrf(GRID)
    else:
        m = _crf("loglinear" if "loglinear" in case else "probit", shared="shared" in case)
    p = weight_problem(m, "bethe_laplace")
    fit = laplace_fit(p, map="exact", covariance="exact")
    assert fit.optimizer["grad_norm"] < 1e-6
    np.testing.assert_allclose(fit.precision, _fd_precision(p, fit.mean), atol=1e-6)
    np.testing.assert_allclose(fit.covariance @ fit.precision, np.eye(p.size), atol=1e-8)


@pytest.mark.parametrize("case", ["crf-loglinear-features", "mrf-grid"])
def test_fisher_vector_product_is_the_negative_log_likelihood_hessian(case):
    """The matrix-free ``J^T C J v`` (log-linear potentials) against finite differences of the
    log-likelihood gradient, and against the columns of ``fisher_matrix``."""
    from pymc_crf.fitters.bethe_laplace.curvature import fisher_matrix, fisher_vector_product

    m = _mrf(GRID) if case == "mrf-grid" else _crf("loglinear", shared=False)
    p = weight_problem(m, "bethe_laplace")
    eng = exact_engine(p)
    lik = p.make_likelihood(eng)
    w = np.random.default_rng(3).normal(0.0, 0.3, p.size)
    fvp = fisher_vector_product(lik, w, eng)
    v = np.random.default_rng(4).normal(size=p.size)
    h = 1e-5
    fd = -(lik(w + h * v)[1] - lik(w - h * v)[1]) / (2 * h)
    np.testing.assert_allclose(fvp(v), fd, rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(fvp(v), fisher_matrix(lik, w, eng) @ v, rtol=1e-10, atol=1e-10)


@pytest.mark.slow  # ~20 s of first compiles; linear response is checked in test_linear_response
def test_linear_response_is_exact_on_trees_and_close_on_a_grid():
    p = weight_problem(_mrf(TREE), "bethe_laplace")
    ex = laplace_fit(p, map="exact", covariance="exact")
    lr = laplace_fit(p, map="exact", covariance="bp")
    np.testing.assert_allclose(lr.precision, ex.precision, atol=1e-8)
    p = weight_problem(_mrf(GRID), "bethe_laplace")
    ex = laplace_fit(p, map="exact", covariance="exact")
    lr = laplace_fit(p, map="exact", covariance="bp")
    rel = np.abs(lr.covariance - ex.covariance).max() / np.abs(ex.covariance).max()
    assert 0 < rel < 0.05  # weak couplings: Bethe is close but not exact on loops


def test_bl_bp_equals_bl_mp_on_a_tree():
    m = _mrf(TREE, rows=30)
    mp = pmc.fit(m, method="bethe_laplace", map="exact", draws=10, random_seed=0)
    bp = pmc.fit(m, method="bethe_laplace", map="bp", draws=10, random_seed=0)
    np.testing.assert_allclose(bp["fit"]["mean_vector"], mp["fit"]["mean_vector"], atol=1e-6)
    np.testing.assert_allclose(bp["fit"]["covariance_matrix"], mp["fit"]["covariance_matrix"],
                               atol=1e-6)
    np.testing.assert_allclose(bp.attrs["log_marginal_likelihood"],
                               mp.attrs["log_marginal_likelihood"], atol=1e-6)
    assert json.loads(mp.attrs["settings"])["bp"] is None  # JSON null, not the string "None"


def test_pseudo_moment_matching_reproduces_the_empirical_marginals_on_a_loopy_graph():
    m = _mrf(GRID, rows=25, parameterization="table")
    p = weight_problem(m, "bethe_laplace")
    lik = p.make_likelihood(BeliefPropagation(tol=1e-12))
    w = pmm_start(lik, p.spec.labels)
    pn, pe = empirical_marginals(p.batch, p.spec.labels, 3)
    marg = lik.engine.marginals(p.batch, *lik.log_potentials(w))
    np.testing.assert_allclose(marg.node, pn, atol=1e-8)
    np.testing.assert_allclose(marg.edge, pe, atol=1e-8)


def test_result_contract_crf():
    m = _crf("probit", shared=True)
    r = pmc.fit(m, method="bethe_laplace", draws=4000, random_seed=1)
    assert {"posterior", "fit", "diagnostics", "log_likelihood", "observed_data"} <= set(r.children)
    assert r["log_likelihood"]["y"].shape == (1, 4000, 4)
    fit = r["fit"]
    assert list(fit["rows"].values[:2]) == ["W[0, 0]", "W[0, 1]"]
    flat = np.concatenate([r["posterior"][n].values.reshape(4000, -1) for n in ("W", "T")], 1)
    sd = np.sqrt(np.diag(fit["covariance_matrix"].values))
    assert np.all(np.abs(flat.mean(0) - fit["mean_vector"].values) < 5 * sd / np.sqrt(4000))
    assert np.isfinite(r.attrs["log_marginal_likelihood"])
    assert bool(r["diagnostics"]["bp_converged"]) and bool(r["diagnostics"]["success"])


@pytest.mark.parametrize("prior", ["laplace", "hierarchical", "extra_free"])
def test_non_gaussian_and_hierarchical_priors_are_refused(prior):
    X = np.random.default_rng(0).integers(0, 2, size=(10, 5))
    with pm.Model() as m:
        if prior == "laplace":
            b = pm.Laplace("b", 0.0, 1.0, shape=5)
        elif prior == "hierarchical":
            s = pm.HalfNormal("s", 1.0)  # a learned scale is s itself or s[idx], not s + 0.5
            b = pm.Normal("b", 0.0, s + 0.5, shape=5)
        else:
            b = pm.Normal("b", 0.0, 1.0, shape=5)
            pm.Normal("other", 0.0, 1.0)
        pmc.MRF("x", graphs=TREE, node_weights=b, parameterization="ising", observed=X)
    with pytest.raises(ValueError, match="bethe_laplace"):
        pmc.fit(m, method="bethe_laplace")


def test_hcrf_is_refused():
    from pymc_crf.distributions.hcrf import from_sequences

    batch, X = from_sequences([np.ones((3, 2)), np.ones((4, 2))])
    with pm.Model() as m:
        tx = pm.Normal("tx", 0, 1, shape=(2, 2))
        ty = pm.Normal("ty", 0, 1, shape=(2, 2))
        te = pm.Normal("te", 0, 1, shape=(2, 2, 2))
        pmc.HCRF("c", graphs=batch, node_features=X, theta_x=tx, theta_y=ty, theta_e=te,
                 observed=np.array([0, 1]))
    with pytest.raises(ValueError, match="hidden-variable .*contrastive Bethe free energy"):
        pmc.fit(m, method="bethe_laplace")
    with pytest.raises(ValueError, match="hidden-variable .*fully observed log-linear"):
        pmc.fit(m, method="randomized_map")


def test_mrf_rows_of_the_wrong_length_are_refused():
    with pm.Model(), pytest.raises(ValueError, match="n_nodes = 5"):
        b = pm.Normal("b", 0.0, 1.0, shape=5)
        pmc.MRF("x", graphs=TREE, node_weights=b, parameterization="ising",
                observed=np.zeros((10, 4), dtype=int))


def test_bp_not_converging_at_the_map_is_recorded_and_warned():
    m = _mrf(GRID, rows=20, sd=3.0, seed=2)
    bp = BeliefPropagation(damping=0.0, max_iter=2, warn=False)
    with pytest.warns(ConvergenceWarning, match="did not converge at the MAP"):
        r = pmc.fit(m, method="bethe_laplace", map="exact", bp=bp, draws=10)
    assert not bool(r["diagnostics"]["bp_converged"])
    assert int(r["diagnostics"]["bp_iterations"]) == 2
    # the bound check at the MAP is recorded beside it (BP's own report, issue 36)
    assert r["diagnostics"]["bp_bound_ok"].dtype == bool


def test_bad_options():
    m = _mrf(TREE)
    with pytest.raises(ValueError, match="map must be one of"):
        pmc.fit(m, method="bethe_laplace", map="pmm")
    with pytest.raises(ValueError, match=r"covariance must be one of \('bp', 'exact', "
                                         r"'diagonal', 'implicit'\)"):
        pmc.fit(m, method="bethe_laplace", covariance="lr")
    for cov in ("diagonal", "implicit"):  # built at the exact MAP: map='bp' was ignored
        with pytest.raises(ValueError, match=rf"covariance='{cov}' is built at the exact MAP.*"
                                             r"map='bp' is for Bethe's"):
            pmc.fit(_crf("loglinear", True), method="bethe_laplace", map="bp", covariance=cov)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(ValueError, match="BeliefPropagation"):
            pmc.fit(m, method="bethe_laplace", bp="bp")


def test_a_dense_covariance_larger_than_the_memory_is_refused_before_the_work(monkeypatch):
    """Three dense (d, d) matrices that would not fit in memory: refused up front, naming the
    covariances that scale (the machine's memory made one 4 KiB page here)."""
    import os

    real = os.sysconf
    monkeypatch.setattr(os, "sysconf", lambda name: 1 if name == "SC_PHYS_PAGES"
                        else 4096 if name == "SC_PAGE_SIZE" else real(name))
    m = _crf("loglinear", True)
    d = sum(v.size.eval() for v in m.free_RVs)
    for method, cov in (("bethe_laplace", "bp"), ("bethe_laplace", "exact"),
                        ("laplace", "exact")):
        with pytest.raises(ValueError, match=rf"method='{method}' with covariance='{cov}' keeps "
                                             rf"dense \({d}, {d}\).*0 GiB of memory.*'diagonal'"):
            pmc.fit(m, method=method, covariance=cov, progressbar=False)


def test_default_draws_are_cut_to_the_draw_memory_with_a_warning(monkeypatch):
    """1000 draws of a text CRF's millions of weights would not fit in memory: by default the
    posterior holds as many as fit in DRAW_MEMORY (here made 60 draws' worth), said in a
    warning; draws given explicitly are kept."""
    from pymc_crf.fitters.bethe_laplace import fitter

    m = _crf("loglinear", True)
    d = sum(int(v.size.eval()) for v in m.free_RVs)
    monkeypatch.setattr(fitter, "DRAW_MEMORY", 8 * d * 60)
    for method in ("laplace", "bethe_laplace"):
        with pytest.warns(UserWarning, match=rf"1000 draws of {d} weights .* holds 60 "):
            res = pmc.fit(m, method=method, progressbar=False, log_likelihood=False)
        assert res.posterior.sizes["draw"] == 60
        with warnings.catch_warnings():
            warnings.simplefilter("error", UserWarning)
            res = pmc.fit(m, method=method, draws=200, progressbar=False, log_likelihood=False)
        assert res.posterior.sizes["draw"] == 200


@pytest.mark.slow
def test_bl_mp_against_nuts_on_a_small_grid():
    """BL-MP against NUTS on the exact posterior (3 x 3 grid, N = 200): means within 0.2
    posterior sds and sds within 10% on average (the full 5 x 5 table is
    bench/bethe_laplace_tables.py)."""
    m = ising_grid_mrf(3, n_samples=200, seed=1, prior_sd=0.5)
    with m:
        nuts = pm.sample(draws=1000, tune=1000, chains=2, cores=1, random_seed=0,
                         progressbar=False, compute_convergence_checks=False)
    bl = pmc.fit(m, method="bethe_laplace", draws=4000, random_seed=0, log_likelihood=False)
    ref = posterior_matrix(nuts, ["b", "w"])
    mat = posterior_matrix(bl, ["b", "w"])
    sd = ref.std(0)
    assert np.mean(np.abs(mat.mean(0) - ref.mean(0)) / sd) < 0.2
    assert abs(np.mean(mat.std(0) / sd) - 1.0) < 0.1


def test_a_hybrid_fit_without_a_laplace_approximation_names_the_settings_that_may_work():
    # the README's model with 5 training graphs: the exact MAP with BP linear response gives an
    # indefinite Hessian, while covariance="exact" and map="bp" both exist
    from pymc_crf.datasets import bcrf_model

    train, _ = pmc.datasets.bcrf_synthetic("loop", n_train=5, n_test=2, seed=0)
    m = bcrf_model(train)
    with pytest.raises(ValueError, match="covariance='exact'.*or map='bp'"):
        pmc.fit(m, method="bethe_laplace", progressbar=False)
    for kw in ({"covariance": "exact"}, {"map": "bp"}):
        res = pmc.fit(m, method="bethe_laplace", progressbar=False, draws=10, **kw)
        assert np.isfinite(res.attrs["log_marginal_likelihood"])
