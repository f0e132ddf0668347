"""NUTS on the exact CRF posterior (the gold standard the approximate fitters are compared with)."""

import arviz as az
import numpy as np
import pymc as pm
import pytest

import pymc_crf as pmc
from pymc_crf.inference import ChainEngine


def _chain_model(n_seq, length, K, F, seed):
    rng = np.random.default_rng(seed)
    b = pmc.GraphBatch.chains([length] * n_seq)
    X = rng.normal(size=(b.n_total_nodes, F))
    W_true = rng.normal(size=(F, K))  # drawn from the prior below: coverage is then calibrated
    T_true = rng.normal(size=(K, K))
    y = ChainEngine().sample(b, X @ W_true, T_true[None], 1, rng)[0]
    coords = {"feature": range(F), "node_label": range(K), "label_j": range(K),
              "graph": range(n_seq), "position": range(length)}
    with pm.Model(coords=coords) as model:
        W = pm.Normal("W", 0.0, 1.0, dims=("feature", "node_label"))
        T = pm.Normal("T", 0.0, 1.0, dims=("node_label", "label_j"))
        pmc.CRF("y", graphs=b, node_features=X, node_weights=W, edge_weights=T, observed=y,
                dims=("graph", "position"))
    return model, {"W": W_true, "T": T_true}


def _inside_hdi(idata, truth):
    hdi = az.hdi(idata, prob=0.94)
    hdi = hdi["posterior"].to_dataset() if hasattr(hdi, "children") and "posterior" in hdi.children \
        else (hdi.to_dataset() if hasattr(hdi, "to_dataset") else hdi)
    inside, total = 0, 0
    for name, val in truth.items():
        h = hdi[name].values  # (*shape, 2)
        lo, hi = np.take(h, 0, axis=-1), np.take(h, 1, axis=-1)
        inside += int(((val >= lo) & (val <= hi)).sum())
        total += val.size
    return inside / total


@pytest.mark.heavy_smoke  # compiles both NUTS backends: CI runs it after the default suite
def test_nuts_smoke_both_samplers():
    model, _ = _chain_model(20, 5, 2, 2, seed=0)
    for sampler in ("pymc", "nutpie"):
        with model:
            idata = pm.sample(draws=150, tune=150, chains=2, random_seed=1, progressbar=False,
                              nuts_sampler=sampler, compute_convergence_checks=False)
        assert int(idata["sample_stats"]["diverging"].values.sum()) == 0
        assert idata["posterior"]["W"].shape == (2, 150, 2, 2)


@pytest.mark.heavy_smoke  # numba/nutpie compilation on a cold cache: CI runs it after the default suite
def test_fit_nuts_result_and_log_likelihood():
    """``pmc.fit(method="nuts")``: PyMC's NUTS draws with the per-graph log-likelihood of every
    draw (checked against the engine objective at each draw), the CRF layout and the attrs."""
    import json

    from pymc_crf.fitters import extract_crf
    from pymc_crf.model.objective import CRFLogLikelihood

    model, _ = _chain_model(4, 3, 2, 1, seed=3)
    res = pmc.fit(model, method="nuts", draws=20, tune=20, chains=1, cores=1, random_seed=0,
                  compute_convergence_checks=False)
    assert res.attrs["method"] == "nuts" and res.attrs["wall_time"] > 0
    assert json.loads(res.attrs["settings"]) == {"draws": 20, "tune": 20, "chains": 1}
    assert json.loads(res.attrs["crf"])["node_weights"] == "W"
    post = res["posterior"]
    assert post["W"].shape == (1, 20, 1, 2) and post["T"].shape == (1, 20, 2, 2)
    ll = res["log_likelihood"]["y"]
    assert ll.dims == ("chain", "draw", "graph") and ll.shape == (1, 20, 4)
    spec = extract_crf(model)
    lik = CRFLogLikelihood(spec)
    for d in (0, 7, 19):
        w = spec.flatten({"W": post["W"].values[0, d], "T": post["T"].values[0, d]})
        np.testing.assert_allclose(ll.values[0, d], lik.pointwise(w), rtol=1e-10)
    # the draws move: NUTS was run, not a fixed point
    assert np.unique(post["T"].values[0, :, 0, 0]).size > 5
    # log_likelihood=False, the option every fitter takes, is the fitter's and not pm.sample's
    # (nutpie refuses unknown keywords)
    bare = pmc.fit(model, method="nuts", draws=5, tune=5, chains=1, cores=1, random_seed=0,
                   log_likelihood=False, compute_convergence_checks=False)
    assert "log_likelihood" not in bare.children and bare["posterior"]["W"].shape == (1, 5, 1, 2)


@pytest.mark.slow
def test_nuts_covers_true_weights_and_nutpie_agrees():
    """100 chains x 10, K=3, 3 node features: at least 80% of the 18 true values inside the 94%
    HDI, max r-hat < 1.01, no divergences; nutpie's and PyMC's NUTS posterior means within 4 Monte
    Carlo standard errors of each other for every weight."""
    model, truth = _chain_model(100, 10, 3, 3, seed=1)
    res = {}
    for sampler in ("pymc", "nutpie"):
        with model:
            res[sampler] = pm.sample(draws=1000, tune=1000, chains=2, random_seed=2,
                                     progressbar=False, nuts_sampler=sampler)
    gold = res["pymc"]
    assert int(gold["sample_stats"]["diverging"].values.sum()) == 0
    rhat = az.rhat(gold)
    rhat = rhat["posterior"].to_dataset() if hasattr(rhat, "children") and "posterior" in \
        rhat.children else rhat
    assert max(float(rhat[v].max()) for v in ("W", "T")) < 1.01
    assert _inside_hdi(gold, truth) >= 0.8
    for v in ("W", "T"):
        a, b = (res[s]["posterior"][v].values.reshape(-1, *truth[v].shape) for s in res)
        se = np.sqrt(a.var(0) / 400 + b.var(0) / 400)  # ESS >= 400 per sampler, conservatively
        assert np.all(np.abs(a.mean(0) - b.mean(0)) < 4 * se), v


def test_misspelt_sample_options_are_refused_by_name():
    # refused before anything is compiled; real step settings (target_accept) are not typos
    model, _ = _chain_model(2, 3, 2, 1, seed=0)
    for typo, meant in (("drawz", "draws"), ("chians", "chains"), ("randon_seed", "random_seed")):
        with pytest.raises(ValueError, match=f"no option '{typo}'; did you mean '{meant}'"):
            pmc.fit(model, method="nuts", **{typo: 10})
    # other tools' names of pm.sample's options, which pm.sample would silently ignore
    for old, new in (("seed", "random_seed"), ("n_draws", "draws"), ("n_chains", "chains")):
        with pytest.raises(ValueError, match=f"takes pm.sample's '{new}', not '{old}'"):
            pmc.fit(model, method="nuts", **{old: 1})
    from pymc_crf.fitters.nuts import _refuse_typos

    _refuse_typos({"target_accept": 0.9, "nuts_sampler": "pymc", "init": "adapt_diag"})
    # counts and target_accept are checked by name before pm.sample (chains=0 ended in a
    # ZeroDivisionError inside PyMC, target_accept=1.5 ran)
    for option, bad, match in (("draws", -5, "draws must be an integer >= 1"),
                               ("draws", "100", "draws must be an integer >= 1"),
                               ("tune", -1, "tune must be an integer >= 0"),
                               ("chains", 0, "chains must be an integer >= 1"),
                               ("cores", 0, "cores must be an integer >= 1"),
                               ("target_accept", 1.5, r"target_accept must lie in \(0, 1\)"),
                               ("target_accept", "0.9", "target_accept must be a number")):
        with pytest.raises(ValueError, match=f"method='nuts': {match}"):
            pmc.fit(model, method="nuts", **{option: bad})
    with pytest.raises(ValueError, match=r"method='nuts': nuts\['target_accept'\] must lie in"):
        pmc.fit(model, method="nuts", nuts={"target_accept": 1.5})


def test_nuts_leaves_none_counts_to_pm_sample(monkeypatch):
    """chains=None and tune=None are pm.sample's own defaults: passed on, not refused."""
    import pymc_crf.fitters.nuts as nuts_module

    seen = {}

    def fake_sample(**kwargs):
        seen.update(kwargs)
        raise RuntimeError("stop here")

    monkeypatch.setattr(nuts_module.pm, "sample", fake_sample)
    model, _ = _chain_model(2, 3, 2, 1, seed=0)
    with pytest.raises(RuntimeError, match="stop here"):
        pmc.fit(model, method="nuts", chains=None, tune=None, nuts={"target_accept": 0.9})
    assert seen["chains"] is None and seen["tune"] is None
