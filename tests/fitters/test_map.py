"""``method="map"`` against a brute-force optimum, and the result contract of ``build_result``."""

import json

import numpy as np
import pytest
from scipy.optimize import minimize

import pymc_crf as pmc
from pymc_crf.inference import BruteForce
from pymc_crf.potentials import log_potential


def _brute_neg_log_post(w_flat, data, sd):
    w = w_flat.reshape(6, 2, 2)
    edge = log_potential(np.einsum("ef,fab->eab", data.edge_features, w), "probit", 0.0)
    node = np.zeros((data.graphs.n_total_nodes, 2))
    b = data.graphs
    y = data.labels
    lz = BruteForce().log_partition(b, node, edge)
    score = np.bincount(b.edge_graph, edge[np.arange(b.n_edges), y[b.edges[:, 0]],
                                           y[b.edges[:, 1]]], minlength=b.n_graphs)
    return -(score - lz).sum() + 0.5 * (w_flat**2).sum() / sd**2


def test_map_matches_brute_force_optimum(loop_data, loop_model):
    res = pmc.fit(loop_model, method="map", rule="strict")
    w_map = res["posterior"]["w"].values[0, 0].ravel()
    ref = minimize(_brute_neg_log_post, np.zeros(24), args=(loop_data[0], 5**0.5),
                   method="BFGS", options={"gtol": 1e-9})
    assert abs(res["optimizer_result"]["objective"].item()
               - (ref.fun + 0.5 * 24 * np.log(2 * np.pi * 5))) < 1e-6
    np.testing.assert_allclose(w_map, ref.x, atol=1e-4)
    assert bool(res["optimizer_result"]["success"])


def test_result_contract(loop_model):
    res = pmc.fit(loop_model, method="map")
    assert {"posterior", "log_likelihood", "observed_data", "optimizer_result"} <= set(res.children)
    assert res["posterior"]["w"].dims == ("chain", "draw", "edge_feature", "label_i", "label_j")
    assert res["log_likelihood"]["t"].dims == ("chain", "draw", "graph")
    assert res.attrs["method"] == "map" and res.attrs["wall_time"] > 0
    assert json.loads(res.attrs["crf"])["potential"] == "probit"
    assert res.attrs["log_z"] == "exact"
    # per-graph log-likelihood sums to the model's log-likelihood at the point
    point = {"w": res["posterior"]["w"].values[0, 0]}
    ll = loop_model.compile_fn(loop_model.logp(vars=loop_model.observed_RVs))(point)
    assert np.isclose(res["log_likelihood"]["t"].values.sum(), ll)


def test_optimizer_settings_are_checked(loop_model):
    # scipy stopped before any iteration on ftol=-1 ("FACTR < 0") and the start came back as
    # the MAP, without a warning
    for option, bad, match in (("ftol", -1.0, "ftol must be a number >= 0 and finite"),
                               ("gtol", -1.0, "gtol must be a number >= 0 and finite"),
                               ("gtol", np.nan, "gtol must be a number >= 0 and finite"),
                               ("maxiter", 0, "maxiter must be an integer >= 1"),
                               ("maxiter", 2.5, "maxiter must be an integer >= 1")):
        with pytest.raises(ValueError, match=match):
            pmc.fit(loop_model, method="map", **{option: bad})
    with pytest.raises(ValueError, match="jitter must be a number >= 0 and finite; got nan"):
        pmc.fit(loop_model, method="map", jitter=np.nan)
    with pytest.raises(ValueError, match="engine_objective must be True or False; got 'False'"):
        pmc.fit(loop_model, method="map", engine_objective="False")


def test_map_refuses_a_start_with_minus_infinite_log_posterior():
    """A Normal prior with a zero sigma entry: the engine objective refuses the prior by name,
    the compiled model's log density is -inf everywhere, and the start is not a MAP."""
    import pymc as pm

    b = pmc.GraphBatch.chains([3, 3])
    X = np.random.default_rng(0).normal(size=(6, 1))
    with pm.Model() as m:
        W = pm.Normal("W", 0.0, np.array([[1.0, 0.0]]), shape=(1, 2))
        pmc.CRF("y", graphs=b, node_features=X, node_weights=W, observed=np.array([0, 1] * 3))
    with pytest.raises(ValueError, match="'W': a Normal prior needs a finite mu and a finite "
                                         "sigma > 0; entry 1 has mu=0.0, sigma=0.0"):
        pmc.fit(m, method="map", engine_objective=True)
    with pytest.raises(ValueError, match="the log posterior is -inf or NaN at the start"):
        pmc.fit(m, method="map")


@pytest.mark.parametrize("n_features", [100, 500])
def test_auto_optimizer_switches_at_ten_thousand_weights(n_features):
    """``optimizer="auto"`` is scipy's L-BFGS-B below 10^4 weights and the package's L-BFGS from
    there on (K = 20: 2,400 and 10,400 weights); both reach the same optimum."""
    import pymc as pm

    rng = np.random.default_rng(5)
    K, batch = 20, pmc.GraphBatch.chains([6] * 12)
    X = rng.normal(size=(batch.n_total_nodes, n_features))
    y = rng.integers(0, K, size=batch.n_total_nodes)
    with pm.Model() as model:
        W = pm.Normal("W", 0.0, 0.3, shape=(n_features, K))
        T = pm.Normal("T", 0.0, 0.3, shape=(K, K))
        pmc.CRF("y", graphs=batch, node_features=X, node_weights=W, edge_weights=T, observed=y)
    fits = {opt: pmc.fit(model, method="map", optimizer=opt, progressbar=False, gtol=1e-8)
            for opt in ("auto", "scipy", "lbfgs")}
    chosen = "lbfgs" if (n_features + K) * K >= 10_000 else "scipy"
    for group in ("posterior", "optimizer_result"):
        for name, v in fits["auto"][group].data_vars.items():
            np.testing.assert_array_equal(v.values, fits[chosen][group][name].values)
    objective = {k: f["optimizer_result"]["objective"].item() for k, f in fits.items()}
    assert objective["lbfgs"] == pytest.approx(objective["scipy"], rel=1e-9)


def test_a_start_value_that_is_not_finite_is_refused_by_name(loop_model):
    """The start is named, not reported as 'log-potentials contain NaN' from the engine."""
    bad = np.zeros((6, 2, 2))
    bad[1, 0, 1] = np.nan
    for engine_objective in (True, False):
        with pytest.raises(ValueError, match=r"start\['w'\] is not finite at index \(1, 0, 1\)"):
            pmc.fit(loop_model, method="map", start={"w": bad}, engine_objective=engine_objective,
                    progressbar=False)
        # a start that is not a dict is refused by name
        with pytest.raises(TypeError, match="start must be a dict of variable name"):
            pmc.fit(loop_model, method="map", start=[bad], engine_objective=engine_objective,
                    progressbar=False)


def test_a_start_with_an_unknown_name_or_a_wrong_shape_is_refused_by_name():
    """On the compiled objective (an HCRF, a transformed scale) the start's names and shapes are
    checked before L-BFGS runs: an unknown name failed after the optimisation with PyTensor's
    "Too many parameter passed to pytensor function", a wrong shape with "Wrong number of
    dimensions" naming no variable."""
    import pymc as pm

    from pymc_crf.distributions.hcrf import from_sequences

    rng = np.random.default_rng(0)
    graphs, X = from_sequences([rng.normal(size=(t, 2)) for t in (3, 4)])
    with pm.Model() as model:
        s = pm.HalfNormal("s", 1.0)
        tx = pm.Normal("theta_x", 0, s, shape=(2, 2))
        ty = pm.Normal("theta_y", 0, 1, shape=(2, 2))
        te = pm.Normal("theta_e", 0, 1, shape=(2, 2, 2))
        pmc.HCRF("y", graphs=graphs, node_features=X, theta_x=tx, theta_y=ty, theta_e=te,
                 observed=np.array([0, 1]))
    with pytest.raises(ValueError, match=r"start names unknown variables \['zz'\]; the free "
                                         r"variables are \['s_log__', 'theta_x'"):
        pmc.fit(model, method="map", start={"zz": 1.0}, progressbar=False)
    with pytest.raises(ValueError, match=r"'s' is given as 's_log__'"):
        pmc.fit(model, method="map", start={"s": 1.0}, progressbar=False)
    with pytest.raises(ValueError, match=r"start\['theta_x'\] has shape \(2,\); the variable "
                                         r"has shape \(2, 2\)"):
        pmc.fit(model, method="map", start={"theta_x": np.zeros(2)}, progressbar=False)


def test_the_stopping_rule_and_its_options():
    """``rule=None`` is the delta rule, or the strict one when gtol / ftol is given; each rule
    refuses the other's tolerances; the settings record the rule and its parameters."""
    import json

    import pymc as pm

    b = pmc.GraphBatch.chains([3, 4])
    X = np.random.default_rng(0).normal(size=(7, 2))
    with pm.Model() as m:
        W = pm.Normal("W", 0.0, 1.0, shape=(2, 2))
        pmc.CRF("y", graphs=b, node_features=X, node_weights=W, observed=np.array([0, 1] * 3 + [0]))
    settings = {opts: json.loads(pmc.fit(m, method="map", progressbar=False, **dict(opts))
                                 .attrs["settings"])
                for opts in ((), (("gtol", 1e-7),), (("rule", "delta"), ("period", 5)))}
    assert settings[()]["rule"] == "delta" and settings[()]["delta"] == 1e-6
    assert settings[(("gtol", 1e-7),)]["rule"] == "strict"
    assert settings[(("gtol", 1e-7),)]["ftol"] == 1e-15
    assert settings[(("rule", "delta"), ("period", 5))]["period"] == 5
    with pytest.raises(ValueError, match="gtol belong\\(s\\) to rule='strict'"):
        pmc.fit(m, method="map", rule="delta", gtol=1e-6)
    with pytest.raises(ValueError, match="delta belong\\(s\\) to rule='delta'"):
        pmc.fit(m, method="map", rule="strict", delta=1e-3)
    with pytest.raises(ValueError, match="rule must be one of"):
        pmc.fit(m, method="map", rule="loose")
