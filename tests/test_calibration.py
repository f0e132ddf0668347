"""Temperature scaling (pmc.calibration) against the engine's marginals at divided weights."""

from __future__ import annotations

import numpy as np
import pymc as pm
import pytest
import xarray as xr

import pymc_crf as pmc
from pymc_crf.calibration import fit_temperature, tempered, token_log_loss
from pymc_crf.graphs.batch import GraphBatch
from pymc_crf.inference.brute_force import BruteForce


@pytest.fixture(scope="module")
def chain_fit():
    rng = np.random.default_rng(0)
    lengths = list(rng.integers(2, 5, size=25))
    batch = GraphBatch.chains(lengths)
    K, F = 3, 4
    X = rng.normal(size=(batch.n_total_nodes, F))
    y = rng.integers(0, K, size=batch.n_total_nodes)
    with pm.Model() as model:
        W = pm.Normal("W", 0.0, 3.0, shape=(F, K))
        T = pm.Normal("T", 0.0, 3.0, shape=(K, K))
        pmc.CRF("y", graphs=batch, node_features=X, node_weights=W, edge_weights=T, observed=y)
    fit = pmc.fit(model, method="map", progressbar=False)
    return fit, pmc.CRFData(batch, y, X, n_labels=K)


def test_tempered_marginals_are_the_engine_marginals_at_divided_weights(chain_fit):
    fit, data = chain_fit
    W = fit.posterior["W"].values[0, 0]
    T = fit.posterior["T"].values[0, 0]
    got = pmc.predict(tempered(fit, 2.5), data, "bpe").marginals
    ref = BruteForce().marginals(data.graphs, data.node_features @ W / 2.5, T[None] / 2.5).node
    np.testing.assert_allclose(got, ref, atol=1e-10)
    assert float(fit.posterior["W"].values[0, 0, 0, 0]) == W[0, 0]  # the original is unchanged


def test_fit_temperature_minimises_the_held_out_log_loss(chain_fit):
    fit, data = chain_fit
    t_star = fit_temperature(fit, data)
    grid = np.exp(np.linspace(np.log(0.2), np.log(5.0), 41))
    losses = [token_log_loss(pmc.predict(tempered(fit, t), data, "bpe").marginals, data.labels)
              for t in grid]
    best = token_log_loss(pmc.predict(tempered(fit, t_star), data, "bpe").marginals, data.labels)
    assert best <= min(losses) + 1e-6
    assert 0.05 < t_star < 20.0 and not np.isclose(t_star, 1.0)


def test_fit_temperature_warns_at_a_bound(chain_fit):
    fit, data = chain_fit
    t_star = fit_temperature(fit, data)
    with pytest.warns(RuntimeWarning, match="upper bound"):
        t = fit_temperature(fit, data, bounds=(0.5 * t_star, 0.9 * t_star))
    assert t == pytest.approx(0.9 * t_star, rel=1e-2)
    with pytest.warns(RuntimeWarning, match="lower bound"):
        fit_temperature(fit, data, bounds=(1.1 * t_star, 2.0 * t_star))


def test_bad_input(chain_fit):
    fit, data = chain_fit
    with pytest.raises(ValueError, match="temperature"):
        tempered(fit, 0.0)
    with pytest.raises(ValueError, match="fitted CRF result"):
        tempered(None, 1.0)
    with pytest.raises(ValueError, match="marginals must be"):
        token_log_loss(np.ones((3, 2)), np.zeros(4, int))
    half = np.full((3, 2), 0.5)
    with pytest.raises(ValueError, match=r"labels must be integers in 0..1 \(-1: missing\); got "
                                         r"values from 0 to 5"):
        token_log_loss(half, np.array([0, 1, 5]))
    with pytest.raises(ValueError, match="labels must be integers .* got dtype float64"):
        token_log_loss(half, np.array([0.0, 1.0, 1.0]))
    with pytest.raises(ValueError, match=r"every label is missing \(-1\)"):
        token_log_loss(half, np.array([-1, -1, -1]))
    assert token_log_loss(half, np.array([0, -1, 1])) == pytest.approx(np.log(2))
    unlabelled = pmc.CRFData(data.graphs, None, node_features=data.node_features,
                             n_labels=data.n_labels)
    with pytest.raises(ValueError, match="needs held-out data with labels"):
        fit_temperature(fit, unlabelled)
    with pytest.raises(ValueError, match="bounds"):
        fit_temperature(fit, data, bounds=(2.0, 1.0))


def test_a_tagger_passed_for_its_result_is_told_to_pass_result_():
    """tempered / fit_temperature of a CRFTagger itself name its ``result_`` (the DataTree they
    take) instead of only saying that a fitted CRF result is needed."""
    X = [[{"w": "a"}, {"w": "b"}], [{"w": "b"}, {"w": "a"}, {"w": "b"}]]
    y = [["B-A", "I-A"], ["O", "B-A", "I-A"]]
    tagger = pmc.CRFTagger().fit(X, y)
    data = tagger.log_potentials(X)[0]
    data = pmc.CRFData(data.graphs, np.array([1, 2, 0, 1, 2]), node_features=data.node_features,
                       n_labels=3)
    hint = r"fitted CRF result .*: a CRFTagger's fit is its result_ attribute; pass tagger\.result_"
    with pytest.raises(ValueError, match=hint):
        tempered(tagger, 2.0)
    with pytest.raises(ValueError, match=hint):
        fit_temperature(tagger, data)
    assert tempered(tagger.result_, 2.0).attrs["temperature"] == 2.0


def test_token_log_loss_reads_masked_labels_as_missing():
    """np.asarray drops a masked array's mask: the masked position was scored (0.877 instead of
    the 0.164 of the others). Masked labels are missing, as -1 is."""
    marg = np.array([[0.9, 0.1], [0.9, 0.1], [0.2, 0.8]])
    masked = np.ma.masked_array(np.array([0, 1, 1], dtype=np.uint8), mask=[False, True, False])
    expected = -np.mean(np.log([0.9, 0.8]))
    assert token_log_loss(marg, masked) == pytest.approx(expected)
    assert token_log_loss(marg, np.array([0, -1, 1])) == pytest.approx(expected)


@pytest.fixture(scope="module")
def laplace_fit(chain_fit):
    """The chain data's Laplace posterior (a Gaussian ``fit`` group, draws, log-likelihood and
    evidence) and its model."""
    _, data = chain_fit
    with pm.Model() as model:
        W = pm.Normal("W", 0.0, 3.0, shape=(data.node_features.shape[1], data.n_labels))
        T = pm.Normal("T", 0.0, 3.0, shape=(data.n_labels, data.n_labels))
        pmc.CRF("y", graphs=data.graphs, node_features=data.node_features, node_weights=W,
                edge_weights=T, observed=data.labels)
    gauss = pmc.fit(model, method="bethe_laplace", draws=50, random_seed=0, progressbar=False)
    return gauss, model, data


@pytest.mark.parametrize("method", ["bpe", "map"])
def test_tempered_gaussian_fit_predicts_at_the_divided_mean(laplace_fit, method):
    """"bpe" and "map" predict at a Gaussian fit's mean_vector (its fit group): tempering
    divides it (and the sds, the covariance by T^2), so those predictions and the temperature
    search depend on T."""
    gauss, _, data = laplace_fit
    mean = gauss["fit"]["mean_vector"].values
    F, K = data.node_features.shape[1], data.n_labels
    W, T = mean[:F * K].reshape(F, K), mean[F * K:].reshape(K, K)
    hot = tempered(gauss, 2.5)
    np.testing.assert_allclose(hot["fit"]["mean_vector"].values, mean / 2.5)
    np.testing.assert_allclose(hot["fit"]["covariance_matrix"].values,
                               gauss["fit"]["covariance_matrix"].values / 2.5**2)
    # a fit vector that covers more than the CRF weights is not divided but dropped
    wider = gauss.copy(deep=True)
    fit = wider["fit"].to_dataset().drop_vars("covariance_matrix")
    fit["mean_vector"] = ("extended", np.append(mean, 1.0))
    wider["fit"] = xr.DataTree(fit)
    assert "mean_vector" not in tempered(wider, 2.5)["fit"]
    node, edge = data.node_features @ W / 2.5, T[None] / 2.5
    if method == "bpe":
        np.testing.assert_allclose(pmc.predict(hot, data, "bpe").marginals,
                                   BruteForce().marginals(data.graphs, node, edge).node, atol=1e-10)
    else:
        np.testing.assert_array_equal(pmc.predict(hot, data, "map").labels,
                                      BruteForce().map_assignment(data.graphs, node, edge).labels)
        # the held-out loss depends on T: the search stops inside the bounds
        assert 0.05 * 1.01 < fit_temperature(gauss, data) < 20.0 * 0.99


def test_tempered_result_drops_the_untempered_log_likelihood_and_evidence(laplace_fit):
    """The log_likelihood group and the evidence belong to the untempered weights: the tempered
    copy has neither, so pmc.loo refuses it and pmc.compare shows no LOO or evidence for it."""
    gauss, model, _ = laplace_fit
    hot = tempered(gauss, 5.0)
    assert "log_likelihood" not in hot.children
    assert "log_marginal_likelihood" not in hot.attrs
    assert "log_likelihood" in gauss.children and "log_marginal_likelihood" in gauss.attrs
    with pytest.raises(ValueError, match="needs the result's log_likelihood group"):
        pmc.loo(hot, model)
    table = pmc.compare({"fit": gauss, "hot": hot}, model=model)
    assert np.isfinite(table.loc["fit", "elpd_loo"]) and np.isnan(table.loc["hot", "elpd_loo"])
    assert np.isnan(table.loc["hot", "log_marginal_likelihood"])
