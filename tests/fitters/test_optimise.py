"""``find_map``: one optimiser for every mode-finding fit, its stopping rules and its honest
success flag (``pymc_crf.fitters.optimise``)."""

import warnings

import numpy as np
import pymc as pm
import pytest
import xarray as xr
from helpers.models import ising_grid_mrf, node_edge_crf

import pymc_crf as pmc
from pymc_crf.features import sequence_batch
from pymc_crf.fitters.optimise import OptimiserDiagnostics, find_map


def _quadratic(d: int = 30, seed: int = 0):
    rng = np.random.default_rng(seed)
    A = rng.normal(size=(d, d))
    H = A @ A.T / d + np.eye(d)
    b = rng.normal(size=d)
    return (lambda x: (0.5 * x @ H @ x - b @ x, H @ x - b)), np.linalg.solve(H, b)


def _funnel(x, d: int = 9):
    """-log density of ``s ~ HalfNormal(1)``, ``w ~ Normal(0, s, shape=d)`` in ``(log s, w)``
    without the Jacobian: unbounded below as ``s, w -> 0`` (the collapse of issue 36)."""
    t, w = x[0], x[1:]
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):  # far trial steps
        s2 = np.exp(2 * t)
        f = d * t + 0.5 * np.sum(w ** 2) / s2 + 0.5 * s2
        return f, np.concatenate([[d - np.sum(w ** 2) / s2 + s2], w / s2])


@pytest.mark.parametrize("optimizer", ["scipy", "lbfgs"])
@pytest.mark.parametrize("rule", ["strict", "delta"])
def test_find_map_reaches_the_optimum_of_a_quadratic(optimizer, rule):
    fun, x_star = _quadratic()
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no ConvergenceWarning on a clean run
        x, diag = find_map(fun, np.zeros(x_star.size), rule=rule, optimizer=optimizer)
    assert diag.success and diag.rule == rule and diag.optimizer == optimizer
    tol = 1e-8 if rule == "strict" else 1e-3
    np.testing.assert_allclose(x, x_star, atol=tol)
    assert diag.objective_trace.size == diag.n_iterations
    assert diag.n_evaluations >= diag.n_iterations
    assert diag.objective == pytest.approx(fun(x)[0])


@pytest.mark.parametrize("optimizer", ["scipy", "lbfgs"])
@pytest.mark.parametrize("rule", ["strict", "delta"])
def test_an_unbounded_objective_is_not_a_success(optimizer, rule):
    # linear in x[0]: scipy runs to its limit of evaluations with f near -8e12, ours to maxiter
    def linear(x):
        return -x[0] + 0.5 * x[1] ** 2, np.array([-1.0, x[1]])

    with pytest.warns(pmc.ConvergenceWarning, match="toy: L-BFGS stopped at"):
        _, diag = find_map(linear, np.zeros(2), rule=rule, optimizer=optimizer, what="toy")
    assert not diag.success and "NOT CONVERGED" in diag.message


@pytest.mark.parametrize("rule", ["strict", "delta"])
def test_a_collapsing_scale_is_not_a_success(rule):
    """scipy stops the funnel with 'RELATIVE REDUCTION OF F <= FACTR*EPSMCH' (its line search
    stalls in rounding at s ~ 1e-8) with a gradient entry of 9 there: not a success."""
    x0 = np.r_[0.0, np.linspace(-1.0, 1.0, 9)]
    with pytest.warns(pmc.ConvergenceWarning, match="the final gradient is not small"):
        x, diag = find_map(_funnel, x0, rule=rule, optimizer="scipy")
    assert not diag.success
    assert x[0] < -10  # log s ran off towards -inf
    assert diag.grad_norm > 1.0


def test_bounds_use_the_projected_gradient():
    """A minimum on a bound: the gradient there is not zero, the projected gradient is."""
    fun, _ = _quadratic(5)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        x, diag = find_map(lambda x: (0.5 * np.sum((x - 3.0) ** 2), x - 3.0), np.zeros(5),
                           bounds=[(-1.0, 1.0)] * 5)
    np.testing.assert_allclose(x, 1.0)
    assert diag.success and diag.grad_norm == 0.0 and diag.optimizer == "scipy"
    with pytest.raises(ValueError, match="optimizer='lbfgs' takes no bounds"):
        find_map(fun, np.zeros(5), bounds=[(-1.0, 1.0)] * 5, optimizer="lbfgs")


def test_options_are_checked():
    fun, _ = _quadratic(3)
    with pytest.raises(ValueError, match="rule must be one of"):
        find_map(fun, np.zeros(3), rule="loose")
    with pytest.raises(ValueError, match="period must be an integer >= 1"):
        find_map(fun, np.zeros(3), rule="delta", period=0)
    with pytest.raises(ValueError, match="optimizer must be one of"):
        find_map(fun, np.zeros(3), optimizer="bfgs")


def _flat(result, names):
    return np.concatenate([result["posterior"][n].values[0, 0].ravel() for n in names])


def test_map_and_bethe_laplace_exact_reach_the_same_crf_map():
    """Both minimise the same objective through find_map's strict rule: same point to 1e-8."""
    m = node_edge_crf(pmc.GraphBatch.grid(3, 3, n_graphs=3), 3, "loglinear", True,
                      np.random.default_rng(2))
    mp = pmc.fit(m, method="map", rule="strict", progressbar=False)
    bl = pmc.fit(m, method="bethe_laplace", map="exact", draws=10, random_seed=0,
                 progressbar=False)
    np.testing.assert_allclose(_flat(mp, ["W", "T"]), bl["fit"]["mean_vector"].values,
                               rtol=0, atol=1e-8)
    assert bool(mp.optimizer_result.success) and bool(bl.diagnostics.success)
    assert str(bl.diagnostics.rule.values) == "strict"


def test_map_and_bethe_laplace_exact_reach_the_same_mrf_map():
    m = ising_grid_mrf(3, 200, 0, 0.5)
    mp = pmc.fit(m, method="map", rule="strict", progressbar=False)
    bl = pmc.fit(m, method="bethe_laplace", map="exact", draws=10, random_seed=0,
                 progressbar=False)
    np.testing.assert_allclose(_flat(mp, ["b", "w"]), bl["fit"]["mean_vector"].values,
                               rtol=0, atol=1e-8)


def _chain_data(n: int, seed: int):
    """An HMM-like chain data set: K = 6 labels, 12 noisy features of the label and a bias."""
    rng = np.random.default_rng(seed)
    K, F = 6, 12
    proto = rng.normal(size=(K, F))
    lengths = rng.integers(3, 9, size=2 * n)
    y = [rng.integers(K)]
    for _ in range(int(lengths.sum()) - 1):
        y.append((y[-1] + rng.choice([0, 1, 2], p=[0.2, 0.6, 0.2])) % K)
    y = np.asarray(y)
    X = np.hstack([proto[y] + rng.normal(0.0, 2.0, size=(y.size, F)), np.ones((y.size, 1))])
    cut = int(lengths[:n].sum())
    return (lengths[:n], X[:cut], y[:cut]), (lengths[n:], X[cut:], y[cut:])


def test_delta_rule_stops_earlier_with_the_same_predictions():
    (lens, X, y), (tlens, Xt, _) = _chain_data(80, 1)
    with pm.Model() as m:
        W = pm.Normal("W", 0.0, 0.7, shape=(X.shape[1], 6))
        T = pm.Normal("T", 0.0, 0.7, shape=(6, 6))
        pmc.CRF("y", graphs=sequence_batch(lens), node_features=X, node_weights=W,
                edge_weights=T, observed=y)
    fits = {rule: pmc.fit(m, method="map", rule=rule, progressbar=False)
            for rule in ("delta", "strict")}
    opt = {k: f.optimizer_result for k, f in fits.items()}
    assert int(opt["delta"].n_iterations) < int(opt["strict"].n_iterations)
    assert bool(opt["delta"].success) and bool(opt["strict"].success)
    # the objective is within delta of the strict optimum, relative
    gap = float(opt["delta"].objective) - float(opt["strict"].objective)
    assert 0 <= gap < 1e-5 * abs(float(opt["strict"].objective))
    test = pmc.CRFData(sequence_batch(tlens), None, Xt, n_labels=6)
    labels = {k: pmc.predict(f, test, "map").labels for k, f in fits.items()}
    np.testing.assert_array_equal(labels["delta"], labels["strict"])


def test_the_record_round_trips_through_the_result_group():
    m = node_edge_crf(pmc.GraphBatch.chains([4, 5]), 3, "loglinear", True,
                      np.random.default_rng(0))
    res = pmc.fit(m, method="map", progressbar=False)
    group = res["optimizer_result"].to_dataset()
    diag = OptimiserDiagnostics.from_dataset(group)
    xr.testing.assert_identical(diag.to_dataset(), group)
    assert diag.rule == "delta" and diag.rule_parameters == {"delta": 1e-6, "period": 10}
    assert diag.success and diag.n_iterations == diag.objective_trace.size
    import json

    settings = json.loads(res.attrs["settings"])
    assert settings["rule"] == "delta" and settings["delta"] == 1e-6 and settings["period"] == 10


@pytest.mark.slow  # compiles a PyMC model (about a minute cold)
def test_the_hierarchical_prior_collapse_is_not_a_success():
    """Issue 36: ``s ~ HalfNormal(1)``, ``W ~ Normal(0, s)`` on a small CRF. The log posterior
    (no Jacobian, as ``map`` takes it) is unbounded above as s -> 0; L-BFGS-B ran s down to
    ~1e-8 and stopped on 'RELATIVE REDUCTION OF F', reported as success with gradient norm 9.
    The same objective ``map`` builds, through find_map with map's default rule and the strict
    one."""
    from pymc.blocking import DictToArrayBijection

    rng = np.random.default_rng(0)
    b = pmc.GraphBatch.chains([5] * 10)
    X = rng.normal(size=(b.n_total_nodes, 3))
    with pm.Model() as m:
        s = pm.HalfNormal("s", 1.0)
        W = pm.Normal("W", 0.0, s, shape=(3, 3))
        pmc.CRF("y", graphs=b, node_features=X, node_weights=W,
                observed=rng.integers(0, 3, size=b.n_total_nodes))
    point = m.initial_point()
    x0 = DictToArrayBijection.map({v.name: point[v.name] for v in m.value_vars})
    fn = m.compile_fn([m.logp(jacobian=False), m.dlogp(jacobian=False)], inputs=m.value_vars,
                      point_fn=False)

    def objective(x):
        vals = DictToArrayBijection.rmap(x0._replace(data=x))
        lp, g = fn(*[vals[v.name] for v in m.value_vars])
        return (-float(lp), -np.asarray(g)) if np.isfinite(lp) else (np.inf, np.zeros_like(x))

    for rule in ("delta", "strict"):
        with pytest.warns(pmc.ConvergenceWarning, match="gradient is not small|still falling"):
            x, diag = find_map(objective, x0.data, rule=rule)
        assert not diag.success and diag.grad_norm > 1.0
        assert np.exp(x[0]) < 1e-5  # s collapsed (x[0] = log s)
