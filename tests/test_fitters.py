import json

import numpy as np
import pymc as pm
import pytest
from scipy.optimize import minimize

import pymc_crf as pmc
from pymc_crf.cli import build_bcrf_model, run_demo
from pymc_crf.fitters import extract_crf, require_gaussian_prior
from pymc_crf.inference import BruteForce
from pymc_crf.potentials import log_potential


@pytest.fixture(scope="module")
def loop_data():
    return pmc.datasets.bcrf_synthetic("loop", n_train=8, n_test=50, seed=3)


@pytest.fixture(scope="module")
def loop_model(loop_data):
    return build_bcrf_model(loop_data[0])


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
    res = pmc.fit(loop_model, method="map")
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


def test_extract_crf_and_prior_checks(loop_data, loop_model):
    spec = extract_crf(loop_model)
    assert spec.flat_size == 24 and spec.n_labels == 2 and spec.potential == "probit"
    assert spec.edge_weights.prior == "normal"
    np.testing.assert_allclose(spec.edge_weights.prior_sd, 5**0.5)
    np.testing.assert_array_equal(spec.labels, loop_data[0].labels)
    w = np.arange(24.0)
    np.testing.assert_array_equal(spec.flatten(spec.unflatten(w)), w)
    require_gaussian_prior(spec, "ep")
    train = loop_data[0]
    with pm.Model(coords=train.coords) as m2:
        s = pm.HalfNormal("s", 1.0)
        w = pm.Normal("w", 0.0, s, dims=("edge_feature", "label_i", "label_j"))
        pmc.CRF("t", graphs=train.graphs, edge_features=train.edge_features, edge_weights=w,
                potential="probit", observed=train.labels)
    with pytest.raises(ValueError, match="depend on other random variables"):
        require_gaussian_prior(extract_crf(m2), "ep")
    with pm.Model(coords=train.coords) as m3:
        w = pm.StudentT("w", nu=3, mu=0.0, sigma=1.0, dims=("edge_feature", "label_i", "label_j"))
        pmc.CRF("t", graphs=train.graphs, edge_features=train.edge_features, edge_weights=w,
                potential="probit", observed=train.labels)
    with pytest.raises(ValueError, match="StudentT, not Normal"):
        require_gaussian_prior(extract_crf(m3), "ep")
    with pm.Model() as m4:
        pm.Normal("x", 0, 1, observed=[0.0])
    with pytest.raises(ValueError, match="observed pmc.CRF"):
        extract_crf(m4)


def test_fit_errors(loop_model):
    with pytest.raises(ValueError, match="unknown method"):
        pmc.fit(loop_model, method="no_such_method")
    assert {"map", "nuts"} <= set(pmc.fitters.available())


def test_predict_methods_and_error_rate(loop_data, loop_model):
    train, test = loop_data
    res = pmc.fit(loop_model, method="map")
    for method in ("bpe", "average", "map"):
        p = pmc.predict(res, test, method=method)
        assert p.labels.shape == (test.graphs.n_total_nodes,)
        assert np.allclose(p.marginals.sum(1), 1)
        assert p.error_rate == np.mean(p.labels != test.labels)
    # one-draw posterior: averaging equals the plug-in estimate
    np.testing.assert_allclose(pmc.predict(res, test, "average").marginals,
                               pmc.predict(res, test, "bpe").marginals)
    with pytest.raises(ValueError, match="unknown predict method"):
        pmc.predict(res, test, method="nope")


def test_cvm_score():
    a = np.array([0.0, 1.0, 2.0])
    assert pmc.cvm_score(a, a) == 0.0
    # F1 - F2 on the pooled points {0, 1, 2, 10}: (1/3, 2/3, 1, 1) - (0, 0, 0, 1)
    assert np.isclose(pmc.cvm_score(a, np.array([10.0])), 1 / 9 + 4 / 9 + 1 + 0)
    rng = np.random.default_rng(0)
    x, y, z = rng.normal(size=(3, 2000, 2))
    assert pmc.cvm_score(x, y, normalize=True) < pmc.cvm_score(x, z + 1.0, normalize=True)
    with pytest.raises(ValueError, match="same d"):
        pmc.cvm_score(np.zeros((3, 2)), np.zeros((3, 3)))


def test_dataset_is_deterministic_and_documented_shape():
    a, _ = pmc.datasets.bcrf_synthetic("chain", n_train=5, n_test=0, seed=1)
    b, _ = pmc.datasets.bcrf_synthetic("chain", n_train=5, n_test=0, seed=1)
    np.testing.assert_array_equal(a.labels, b.labels)
    np.testing.assert_array_equal(a.edge_features, b.edge_features)
    assert a.true_weights["w"].size == 24 and a.graphs.is_chain
    with pytest.raises(ValueError, match="kind"):
        pmc.datasets.bcrf_synthetic("grid")


def test_cli_demo_runs_map(capsys):
    table, results = run_demo("loop", n_train=5, n_test=20, seed=0, methods=("map",))
    assert "test_error" in table.columns and 0 <= table.loc["map", "test_error"] <= 1
    assert "map" in capsys.readouterr().out
