"""``compare`` and ``cvm_score``: every column against values computed here from the draws."""

import warnings

import arviz as az
import numpy as np
import pytest
import xarray as xr

import pymc_crf as pmc
from pymc_crf.datasets import bcrf_model


def _result(values, wall_time, **attrs):
    """A result holding draws (chains, draws, 2) of one variable ``a``."""
    post = xr.Dataset({"a": (("chain", "draw", "a_dim"), values)},
                      coords={"chain": np.arange(values.shape[0]),
                              "draw": np.arange(values.shape[1])})
    dt = xr.DataTree.from_dict({"posterior": post})
    dt.attrs.update({"wall_time": wall_time, **attrs})
    return dt


def _cvm(x, y):
    """Welling & Parise 2006, eq. (23) over the pooled points, per dimension, divided by N1 + N2."""
    total = 0.0
    for j in range(x.shape[1]):
        pooled = np.concatenate([x[:, j], y[:, j]])
        f1 = np.array([np.mean(x[:, j] <= v) for v in pooled])
        f2 = np.array([np.mean(y[:, j] <= v) for v in pooled])
        total += np.sum((f1 - f2) ** 2) / pooled.size
    return total


def test_cvm_score():
    a = np.array([0.0, 1.0, 2.0])
    assert pmc.cvm_score(a, a) == 0.0
    # F1 - F2 on the pooled points {0, 1, 2, 10}: (1/3, 2/3, 1, 1) - (0, 0, 0, 1)
    assert np.isclose(pmc.cvm_score(a, np.array([10.0])), 1 / 9 + 4 / 9 + 1 + 0)
    rng = np.random.default_rng(0)
    x, y, z = rng.normal(size=(3, 2000, 2))
    assert pmc.cvm_score(x, y, normalize=True) < pmc.cvm_score(x, z + 1.0, normalize=True)
    np.testing.assert_allclose(pmc.cvm_score(x[:50], z[:70] + 0.3, normalize=True),
                               _cvm(x[:50], z[:70] + 0.3), rtol=1e-12)
    with pytest.raises(ValueError, match="same d"):
        pmc.cvm_score(np.zeros((3, 2)), np.zeros((3, 3)))



def test_cvm_score_refuses_empty_and_non_finite_samples():
    a = np.array([0.0, 1.0, 2.0])
    with pytest.raises(ValueError, match="at least one sample each"):
        pmc.cvm_score(a, a[:0])
    with pytest.raises(ValueError, match=r"s1 contains nan \(sample 1, dimension 0\)"):
        pmc.cvm_score(np.array([0.0, np.nan, 2.0]), a)
    with pytest.raises(ValueError, match=r"s2 contains inf \(sample 0, dimension 1\)"):
        pmc.cvm_score(np.zeros((3, 2)), np.array([[0.0, np.inf], [1.0, 1.0]]))

def test_compare_columns_against_the_draws():
    rng = np.random.default_rng(1)
    ref = rng.normal([0.0, 1.0], [1.0, 2.0], size=(2, 300, 2))
    approx = rng.normal([0.2, 0.7], [0.5, 3.0], size=(1, 400, 2))
    stuck = np.stack([rng.normal(0.0, 1.0, (200, 2)), rng.normal(5.0, 1.0, (200, 2))])
    results = {"ref": _result(ref, 3.0), "approx": _result(approx, 0.5, log_marginal_likelihood=-7.5),
               "stuck": _result(stuck, 1.0)}
    table = pmc.compare(results, reference="ref")
    r, a = ref.reshape(-1, 2), approx.reshape(-1, 2)
    row = table.loc["approx"]
    assert row["wall_time"] == 0.5 and row["log_marginal_likelihood"] == -7.5
    np.testing.assert_allclose(row["mean_abs_err"], np.mean(np.abs(a.mean(0) - r.mean(0))))
    np.testing.assert_allclose(row["sd_ratio"], np.mean(a.std(0) / r.std(0)))
    np.testing.assert_allclose(row["cvm"], _cvm(a, r), rtol=1e-12)
    assert table.loc["ref", "mean_abs_err"] == 0.0 and table.loc["ref", "cvm"] == 0.0
    # ESS and R-hat only for several chains: ArviZ's values, and they tell mixing from not
    assert np.isnan(row["min_ess"]) and np.isnan(row["max_rhat"])
    for name, vals in (("ref", ref), ("stuck", stuck)):
        ds = xr.Dataset({"a": (("chain", "draw", "a_dim"), vals)})
        ess = np.asarray(az.ess(ds)["a"])
        rhat = np.asarray(az.rhat(ds)["a"])
        np.testing.assert_allclose(table.loc[name, "min_ess"], ess.min())
        np.testing.assert_allclose(table.loc[name, "max_rhat"], rhat.max())
    assert table.loc["ref", "max_rhat"] < 1.02 < 1.5 < table.loc["stuck", "max_rhat"]
    with pytest.raises(ValueError, match="reference 'nuts' is not one of"):
        pmc.compare(results, reference="nuts")
    # a lone name is not split into its characters, and no names is not no columns silently
    with pytest.raises(TypeError, match="compare: var_names must be a list of names; got the str"):
        pmc.compare(results, reference="ref", var_names="a")
    with pytest.raises(ValueError, match="compare: var_names is empty"):
        pmc.compare(results, reference="ref", var_names=[])


def test_compare_warns_that_hidden_state_weights_can_switch_labels():
    rng = np.random.default_rng(2)
    hidden = {k: _result(rng.normal(size=(2, 50, 2)), 1.0, hcrf_weights=["a", "b", "c"])
              for k in ("nuts", "vi")}
    with pytest.warns(UserWarning, match=r"compare: \['a'\] are hidden-state weights") as rec:
        pmc.compare(hidden, reference="nuts")
    assert rec[0].filename == __file__          # attributed to the caller's line
    plain = {k: _result(rng.normal(size=(2, 50, 2)), 1.0) for k in ("nuts", "vi")}
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        pmc.compare(plain, reference="nuts")


def test_compare_test_error_is_the_prediction_error():
    train, test = pmc.datasets.bcrf_synthetic("loop", n_train=6, n_test=10, seed=2)
    res = pmc.fit(bcrf_model(train), method="map")
    table = pmc.compare({"map": res}, test=test, predict_method="bpe")
    pred = pmc.predict(res, test, method="bpe")
    wrong = np.count_nonzero(pred.labels != test.labels)
    assert table.loc["map", "test_error"] == pytest.approx(wrong / test.labels.size)


def test_parameters_are_matched_by_name_whatever_order_each_result_stores():
    rng = np.random.default_rng(0)
    a, b = rng.normal(size=(2, 50, 2)), 5.0 + rng.normal(size=(2, 50, 3))

    def two_vars(first):
        data = {"a": a, "b": b}
        order = ("a", "b") if first == "a" else ("b", "a")
        post = xr.Dataset({k: (("chain", "draw", f"{k}_dim"), data[k]) for k in order},
                          coords={"chain": [0, 1], "draw": np.arange(50)})
        return xr.DataTree.from_dict({"posterior": post})

    table = pmc.compare({"ref": two_vars("a"), "other": two_vars("b")}, reference="ref")
    assert table.loc["other", "mean_abs_err"] == pytest.approx(0.0, abs=1e-12)
    assert table.loc["other", "cvm"] == pytest.approx(0.0, abs=1e-12)
    with pytest.raises(ValueError, match=r"'ref' has no posterior variable\(s\) \['c'\]"):
        pmc.compare({"ref": two_vars("a"), "other": two_vars("b")}, reference="ref",
                    var_names=["a", "c"])
    # a same-named variable of another shape is another model: refused, not a row without columns
    rng3 = rng.normal(size=(2, 50, 3))
    with pytest.raises(ValueError, match="'wide' has 3 entries per draw .* 'ref' 2"):
        pmc.compare({"ref": _result(a, 1.0), "wide": _result(rng3, 1.0)}, reference="ref")


def test_compare_refuses_results_fitted_to_different_data():
    # two fits to other labels: their evidence and elpd_loo would be ranked in one table
    rng = np.random.default_rng(3)

    def fitted(labels):
        res = _result(rng.normal(size=(2, 50, 2)), 1.0)
        res["observed_data"] = xr.Dataset({"t": (("graph", "position"), np.asarray(labels))})
        return res

    labels = np.array([[0, 1, -1], [1, 1, 0]])
    other = labels.copy()
    other[1, 2] = 1
    same = {"nuts": fitted(labels), "ep": fitted(labels.copy()), "bare": _result(np.zeros((1, 5, 2)), 1.0)}
    assert list(pmc.compare(same, reference="nuts").index) == ["nuts", "ep", "bare"]
    with pytest.raises(ValueError, match="results 'nuts' and 'ep' were fitted to different observed data"):
        pmc.compare({"nuts": fitted(labels), "ep": fitted(other)}, reference="nuts")
    with pytest.raises(ValueError, match="'nuts' and 'few' were fitted to different observed data"):
        pmc.compare({"nuts": fitted(labels), "few": fitted(labels[:1])})


def test_compare_refuses_no_results_and_results_that_are_not_fits():
    with pytest.raises(ValueError, match="compare needs at least one result"):
        pmc.compare({})
    res = _result(np.zeros((1, 5, 2)), 1.0)
    with pytest.raises(TypeError, match="results must be a dict of name -> fitted DataTree; got list"):
        pmc.compare([res])
    with pytest.raises(TypeError, match=r"results\['a'\] must be a fitted DataTree .*got ndarray"):
        pmc.compare({"a": np.zeros((5, 2))})
    with pytest.raises(ValueError, match=r"results\['a'\] has no 'posterior' group"):
        pmc.compare({"a": xr.DataTree()})


def test_compare_shows_loopy_inference_trust_where_results_record_it():
    # converged / bound_ok: from a Bethe-Laplace fit's diagnostics (at the MAP) and a BetheMH
    # chain's sample stats (every draw), absent (NaN) for results that record neither
    rng = np.random.default_rng(2)
    bl = _result(rng.normal(size=(1, 50, 2)), 1.0)
    bl["diagnostics"] = xr.Dataset({"bp_converged": ((), np.bool_(True)),
                                    "bp_bound_ok": ((), np.bool_(False))})
    mh = _result(rng.normal(size=(2, 50, 2)), 2.0)
    mh["sample_stats"] = xr.Dataset({
        "bp_nonconverged": (("chain", "draw"), np.zeros((2, 50), np.int64)),
        "bp_bound_violations": (("chain", "draw"), np.zeros((2, 50), np.int64))})
    bad = _result(rng.normal(size=(2, 50, 2)), 2.0)
    stats = np.zeros((2, 50), np.int64)
    stats[1, 7] = 1
    bad["sample_stats"] = xr.Dataset({"bp_nonconverged": (("chain", "draw"), stats),
                                      "bp_bound_violations": (("chain", "draw"), stats)})
    plain = _result(rng.normal(size=(1, 50, 2)), 0.1)
    table = pmc.compare({"bl": bl, "mh": mh, "bad": bad, "plain": plain})
    assert table.loc["bl", "converged"] and not table.loc["bl", "bound_ok"]
    assert table.loc["mh", "converged"] and table.loc["mh", "bound_ok"]
    assert not table.loc["bad", "converged"] and not table.loc["bad", "bound_ok"]
    assert table.loc[["plain"], ["converged", "bound_ok"]].isna().all(axis=None)
    assert pmc.compare({"plain": plain}).columns.tolist() == ["wall_time"]
