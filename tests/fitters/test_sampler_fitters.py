"""pmc.fit(method="bethe_mh" | "langevin_cd" | "exchange"): the fit contract, and (slow) the
samplers' draws against NUTS on the exact posterior."""

import json
import warnings

import arviz as az
import numpy as np
import pytest
from helpers.models import grid_model, mrf_model, tree_model

import pymc_crf as pmc
from pymc_crf.compare import posterior_matrix
from pymc_crf.model.random_field import extract_random_field, random_field_log_likelihood

METHODS = ["bethe_mh", "langevin_cd", "exchange"]


@pytest.mark.parametrize("method", METHODS)
def test_fit_returns_the_contract(method):
    m = tree_model()
    res = pmc.fit(m, method=method, draws=60, tune=60, chains=2, random_seed=1)
    assert {"posterior", "sample_stats", "log_likelihood", "observed_data"} <= set(res.children)
    assert res["posterior"]["W"].shape == (2, 60, 2, 2)
    assert res.attrs["method"] == method and res.attrs["wall_time"] > 0
    assert json.loads(res.attrs["settings"])["draws"] == 60
    assert "accept_rate" in res["sample_stats"]
    # per-graph log-likelihood of the draws, from the model's (exact) engine
    ll = res["log_likelihood"]["y"].values
    assert ll.shape == (2, 60, 6)
    spec = extract_random_field(m)
    w = spec.flatten({"W": res["posterior"]["W"].values[1, 7], "T": res["posterior"]["T"].values[1, 7]})
    np.testing.assert_allclose(ll[1, 7], random_field_log_likelihood(spec).pointwise(w), atol=1e-9)


def test_fit_mrf_and_exchange_flag():
    m = mrf_model(n_rows=30)
    res = pmc.fit(m, method="exchange", draws=40, tune=40, chains=1, random_seed=2)
    assert res["log_likelihood"]["x"].shape == (1, 40, 30)  # one value per row
    assert res.attrs["exact_auxiliary"] == 1


@pytest.mark.parametrize("method", METHODS)
def test_log_likelihood_false_leaves_the_group_out(method):
    # the option every fitter takes (nuts's docstring), the sampler fitters included
    res = pmc.fit(mrf_model(n_rows=10), method=method, draws=5, tune=5, chains=1, random_seed=0,
                  log_likelihood=False, progressbar=False)
    assert "log_likelihood" not in res.children
    assert {"posterior", "sample_stats", "observed_data"} <= set(res.children)


@pytest.mark.parametrize("method", METHODS)
def test_mrf_labels_changed_in_pm_data_are_checked(method):
    import pymc as pm
    from helpers.models import TREE

    from pymc_crf.graphs.batch import GraphBatch

    g = GraphBatch.from_edges([TREE], [5])
    with pm.Model() as m:
        X = pm.Data("X", np.array([[0, 1, 1, 0, 1], [1, 1, 0, 0, 0]]))
        b = pm.Normal("b", 0.0, 1.0, shape=5)
        w = pm.Normal("w", 0.0, 1.0, shape=4)
        pmc.MRF("x", graphs=g, node_weights=b, edge_weights=w, parameterization="ising",
                observed=X)
    for bad, label in ((2, "2"), (-1, "-1")):
        with m:
            pm.set_data({"X": np.array([[0, 1, bad, 0, 1], [1, 1, 0, 0, 0]])})
        # refused before the Bethe-Laplace proposal is tried (no warning about it first)
        with warnings.catch_warnings(), pytest.raises(
                ValueError, match=f"'x': label {label} at row 0, node 2 is outside 0..1"):
            warnings.simplefilter("error", UserWarning)
            pmc.fit(m, method=method, draws=5, tune=5, chains=1)


@pytest.mark.parametrize("method", METHODS)
def test_sampler_options_and_unsupported_models_are_refused_by_name(method):
    import pymc as pm

    from pymc_crf.graphs.batch import GraphBatch

    m = tree_model()
    for option, value, match in (("chains", 0, "chains must be an integer >= 1"),
                                 ("chains", -1, "chains must be an integer >= 1"),
                                 ("cores", 0, "cores must be an integer >= 1"),
                                 ("draws", 2.5, "draws must be an integer >= 1"),
                                 ("tune", -1, "tune must be an integer >= 0")):
        with pytest.raises(ValueError, match=f"{method}: {match}"):
            pmc.fit(m, method=method, **{option: value})
    # options neither the fitter nor its step takes: refused before the Bethe-Laplace proposal
    with pytest.raises(TypeError, match=f"method='{method}' takes 'random_seed', not 'seed'"):
        pmc.fit(m, method=method, seed=1)
    with pytest.raises(TypeError, match=f"method='{method}' has no option 'drawz'; its options: "
                                        "draws, tune, chains"):
        pmc.fit(m, method=method, drawz=5)
    step_option = {"bethe_mh": "scaling", "exchange": "scaling", "langevin_cd": "step_size"}
    with pytest.raises(ValueError, match=f"{step_option[method]} must be a number > 0 and finite"):
        pmc.fit(m, method=method, draws=5, tune=5, chains=1, **{step_option[method]: np.inf})
    # what the step needs is checked before the Bethe-Laplace proposal: one error, no warning
    b = GraphBatch.chains([3])
    with pm.Model() as halfnormal:
        W = pm.HalfNormal("W", 1.0, shape=(1, 2))
        pmc.CRF("y", graphs=b, node_features=np.ones((3, 1)), node_weights=W,
                observed=np.array([0, 1, 0]))
    with pm.Model() as expressions:
        W = pm.Normal("W", 0.0, 1.0, shape=(1, 2))
        pmc.CRF("y", graphs=b, node_features=np.ones((3, 1)), node_weights=2.0 * W,
                edge_weights=W[0, 0] * np.eye(2), observed=np.array([0, 1, 0]))
    for model, match in ((halfnormal, "needs untransformed weights; 'W' has the transform"),
                         (expressions, "needs the random-field weights to be free variables; "
                                       "they are an expression")):
        with warnings.catch_warnings(), pytest.raises(ValueError, match=match):
            warnings.simplefilter("error", UserWarning)
            pmc.fit(model, method=method, draws=5, tune=5, chains=1)


@pytest.mark.parametrize("start", [{"b": np.zeros(5), "w": np.zeros(4)}, True, 0])
def test_start_other_than_auto_laplace_or_none_is_refused(start):
    # a dict of starting values (what method="map" takes as start) was read as "auto": the chains
    # started at the Laplace draws and attrs["start"] said "laplace"
    with pytest.raises(ValueError, match="start takes 'auto', 'laplace' or None; .*initvals="):
        pmc.fit(mrf_model(), method="exchange", draws=5, tune=5, chains=1, start=start)



@pytest.mark.parametrize("method", ["exchange", "nuts"])
@pytest.mark.parametrize("initvals", [{"zz": 1.0}, [{"b": np.zeros(5)}, {"zz": 1.0}]])
def test_initvals_naming_no_variable_are_refused_by_name(method, initvals):
    # PyMC fails on these with a bare KeyError('zz')
    with pytest.raises(ValueError, match=r"initvals names 'zz', which is not a variable of the "
                                         r"model; its free variables are \['b', 'w'\]"):
        pmc.fit(mrf_model(), method=method, draws=5, tune=5, chains=2, initvals=initvals,
                progressbar=False)
    for bad in ([0.5], 0.5):
        with pytest.raises(TypeError, match="initvals must be a dict .*; got float"):
            pmc.fit(mrf_model(), method=method, draws=5, tune=5, chains=1, initvals=bad)

def test_chains_none_takes_pm_samples_default_with_the_laplace_starts():
    # chains=None (documented: pm.sample's default, max(2, cores)) failed with "int() argument
    # must be ... not 'NoneType'" where the Bethe-Laplace starts are drawn, one per chain
    res = pmc.fit(mrf_model(), method="exchange", draws=5, tune=5, chains=None, random_seed=0,
                  progressbar=False)
    assert res.attrs["start"] == "laplace"
    assert res["posterior"]["b"].shape[:2] == (2, 5)


def test_numpy_scalar_step_options_are_recorded_in_the_settings():
    # step options given as numpy scalars were left out of attrs["settings"] (isinstance(np.int64,
    # int) is False), though the settings record the step options that are numbers
    res = pmc.fit(mrf_model(), method="langevin_cd", draws=5, tune=5, chains=1, S=None,
                  start=None, cd_steps=np.int64(2), step_size=np.float32(0.25), progressbar=False)
    settings = json.loads(res.attrs["settings"])
    assert settings["cd_steps"] == 2 and settings["step_size"] == 0.25


# ------------------------------------------------------------------ slow: against NUTS
def _agreement(res, ref, names):
    """Largest |mean difference| in units of the combined MCSE, and the CVM score."""
    z = []
    for n in names:
        d = res["posterior"][n].mean(("chain", "draw")).values
        r = ref["posterior"][n].mean(("chain", "draw")).values
        se = np.sqrt(az.mcse(res, var_names=[n])[n].values ** 2
                     + az.mcse(ref, var_names=[n])[n].values ** 2)
        z.append(np.abs(d - r) / se)
    cvm = pmc.cvm_score(posterior_matrix(res, names), posterior_matrix(ref, names), normalize=True)
    return float(np.max(np.concatenate([a.ravel() for a in z]))), cvm


# Threshold on the normalised CVM score summed over the 8 weights: two independent samples of one
# distribution with effective sizes n1, n2 score about 8 / 6 * (1/n1 + 1/n2) (the Cramer-von Mises
# mean), ~0.003-0.006 at the ESS of these runs; 0.02 leaves room for the random walk's ESS spread
# while a wrong posterior (e.g. a prior sd or a log Z off by a factor) scores > 0.05.
CVM_MAX = 0.02


@pytest.mark.slow
def test_bethe_mh_matches_nuts_on_a_tree():
    m = tree_model()
    ref = pmc.fit(m, method="nuts", draws=4000, tune=1000, chains=2, random_seed=0)
    res = pmc.fit(m, method="bethe_mh", draws=20000, tune=3000, chains=2, random_seed=0)
    zmax, cvm = _agreement(res, ref, ["W", "T"])
    print(f"BetheMH vs NUTS (tree): max |z| {zmax:.2f}, CVM {cvm:.4f}")
    assert zmax < 4 and cvm < CVM_MAX


@pytest.mark.slow
def test_exchange_matches_nuts_on_a_4x4_grid():
    m = grid_model(rows=4, n_graphs=4)
    ref = pmc.fit(m, method="nuts", draws=4000, tune=1000, chains=2, random_seed=0)
    res = pmc.fit(m, method="exchange", draws=20000, tune=3000, chains=2, random_seed=0)
    assert res.attrs["exact_auxiliary"] == 1
    zmax, cvm = _agreement(res, ref, ["W", "T"])
    print(f"Exchange vs NUTS (4x4 grid): max |z| {zmax:.2f}, CVM {cvm:.4f}")
    assert zmax < 4 and cvm < CVM_MAX


@pytest.mark.slow
def test_langevin_cd_is_biased_and_reports_it():
    # LV-CD is biased by design (no Metropolis test, CD-1 gradients): its CVM is reported, and
    # only bounded loosely so that a broken sampler (far from the posterior) fails
    m = tree_model()
    ref = pmc.fit(m, method="nuts", draws=4000, tune=1000, chains=2, random_seed=0)
    res = pmc.fit(m, method="langevin_cd", draws=10000, tune=2000, chains=2, random_seed=0)
    zmax, cvm = _agreement(res, ref, ["W", "T"])
    print(f"LangevinCD vs NUTS (tree): max |z| {zmax:.2f}, CVM {cvm:.4f}")
    assert cvm < 0.5


def test_fitters_start_from_the_bethe_laplace_fit_where_it_applies():
    from helpers.models import hierarchical_model

    m = tree_model()
    res = pmc.fit(m, method="bethe_mh", draws=20, tune=20, chains=2, random_seed=3)
    assert res.attrs["proposal"] == "laplace" and res.attrs["start"] == "laplace"
    # chains start at their own draws near the MAP: the first draws differ between chains
    first = res["posterior"]["W"].values[:, 0]
    assert not np.allclose(first[0], first[1])
    res = pmc.fit(m, method="exchange", draws=10, tune=10, chains=1, S=None, start=None,
                  random_seed=3)
    assert res.attrs["proposal"] == "unit" and res.attrs["start"] == "initial_point"
    # a hierarchical prior: no Bethe-Laplace fit, so "auto" falls back (with a warning) ...
    h = hierarchical_model()
    with pytest.warns(UserWarning, match="no Bethe-Laplace proposal") as rec:
        res = pmc.fit(h, method="langevin_cd", draws=10, tune=10, chains=1, random_seed=3)
    assert {r.filename for r in rec if "Bethe-Laplace" in str(r.message)} == {__file__}
    assert res.attrs["proposal"] == "unit"
    # ... and "laplace" insists
    with pytest.raises(ValueError, match="no Bethe-Laplace proposal"):
        pmc.fit(h, method="bethe_mh", draws=10, tune=10, chains=1, S="laplace")


@pytest.mark.slow
def test_bethe_mh_mixes_on_the_5x5_grid_with_the_laplace_proposal():
    # 65 weights (Welling & Parise 2006, sec. 7): a random walk mixes here only with a proposal
    # shaped like the posterior, and even then needs ~d / 0.3 ~ 200 steps per effective draw
    # (Roberts, Gelman & Gilks 1997), hence 20000 draws per chain
    from helpers.models import ising_grid_mrf

    m = ising_grid_mrf(5, n_samples=100, seed=0, prior_sd=1.0)
    res = pmc.fit(m, method="bethe_mh", draws=20000, tune=1000, chains=2, random_seed=0)
    assert res.attrs["proposal"] == "laplace" and res.attrs["start"] == "laplace"
    rhat = max(float(az.rhat(res)[v].max()) for v in ("b", "w"))
    ess = min(float(az.ess(res)[v].min()) for v in ("b", "w"))
    acc = float(res["sample_stats"]["accept_rate"].mean())
    print(f"BetheMH 5x5 grid: max r-hat {rhat:.3f}, min ESS {ess:.1f}, acceptance {acc:.3f}")
    assert rhat < 1.1 and 0.1 < acc < 0.5
