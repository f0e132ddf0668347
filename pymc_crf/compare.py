"""Comparing fitted posteriors: one table (and a plot) for NUTS and the approximate fitters."""

from __future__ import annotations

import warnings
from collections.abc import Mapping
from typing import TYPE_CHECKING

import arviz as az
import numpy as np
import pandas as pd
import xarray as xr

from pymc_crf.datasets.base import CRFData
from pymc_crf.inference.base import warn_at_caller
from pymc_crf.loo import loo
from pymc_crf.model.predictors import check_result
from pymc_crf.predict import predict
from pymc_crf.validation import flag, name_list

if TYPE_CHECKING:
    import pymc as pm

__all__ = ["compare", "cvm_score", "inference_trust", "posterior_matrix"]


def cvm_score(s1: np.ndarray, s2: np.ndarray, normalize: bool = False) -> float:
    """Cramer-von Mises score between two sample sets (Welling & Parise 2006, eq. (23)), summed over
    dimensions.

    ``sum_i (F_1(X_i) - F_2(X_i))^2`` over all samples ``X_i`` of both sets, with empirical CDFs;
    for (n, d) arrays the per-dimension scores are summed (Welling & Parise 2006, sec. 7). With ``normalize``
    it is divided by ``N1 + N2`` (a mean squared CDF difference, comparable across sample sizes).

    Parameters
    ----------
    s1, s2 : numpy.ndarray
        The two sample sets: (n1,) and (n2,) draws of one quantity, or (n1, d) and (n2, d) draws
        of ``d`` (the same ``d`` in both).
    normalize : bool
        Divide each dimension's sum by ``N1 + N2``, the number of pooled samples.

    Returns
    -------
    float
        The score, summed over dimensions: 0 for identical empirical distributions, larger the
        further apart they are.
    """
    normalize = flag(normalize, "normalize")
    s1 = np.asarray(s1, dtype=np.float64)
    s2 = np.asarray(s2, dtype=np.float64)
    if s1.ndim == 1:
        s1, s2 = s1[:, None], s2[:, None]
    if s1.ndim != 2 or s2.ndim != 2 or s1.shape[1] != s2.shape[1]:
        raise ValueError(f"sample sets must be (n, d) with the same d; got {s1.shape}, {s2.shape}")
    if s1.shape[0] == 0 or s2.shape[0] == 0:
        raise ValueError(f"sample sets must hold at least one sample each; got {s1.shape}, "
                         f"{s2.shape}")
    for which, s in (("s1", s1), ("s2", s2)):
        # np.sort puts NaN last and searchsorted counts it: a NaN draw gave a finite score
        if not np.isfinite(s).all():
            row, col = np.argwhere(~np.isfinite(s))[0]
            raise ValueError(f"{which} contains {s[row, col]} (sample {row}, dimension {col}): "
                             "the score compares finite draws")
    total = 0.0
    for j in range(s1.shape[1]):
        a, b = np.sort(s1[:, j]), np.sort(s2[:, j])
        x = np.concatenate([a, b])
        f1 = np.searchsorted(a, x, side="right") / a.size
        f2 = np.searchsorted(b, x, side="right") / b.size
        total += float(((f1 - f2) ** 2).sum()) / (x.size if normalize else 1.0)
    return total


def posterior_matrix(result: xr.DataTree, var_names: list[str] | None = None) -> np.ndarray:
    """Posterior draws as an (S, d) matrix of the listed (default: all) variables."""
    post = result["posterior"]
    names = var_names or list(post.data_vars)
    cols = [post[n].values.reshape(post[n].shape[0] * post[n].shape[1], -1) for n in names]
    return np.concatenate(cols, axis=1)


def _as_dataset(x) -> xr.Dataset:
    if isinstance(x, xr.DataTree):
        x = x["posterior"] if "posterior" in x.children else x
        return x.to_dataset()
    return x


def check_results(results, caller: str) -> None:
    """Refuse anything but a non-empty dict of name -> fitted DataTree with a posterior group
    (``compare`` and the plots of several results take one)."""
    if not isinstance(results, Mapping):
        raise TypeError(f"{caller}: results must be a dict of name -> fitted DataTree; "
                        f"got {type(results).__name__}")
    if not results:
        raise ValueError(f"{caller} needs at least one result: pass a dict of name -> fitted "
                         "DataTree (e.g. {'nuts': idata, 'ep': ep}); got an empty dict")
    for key, res in results.items():
        check_result(res, f"results[{key!r}]")


def inference_trust(result: xr.DataTree) -> dict:
    """Loopy inference's convergence and bound check as a result records them: ``converged``
    (BP converged on every graph) and ``bound_ok`` (its Bethe log Z nowhere below the score of a
    single labelling), from the ``diagnostics`` group of a Bethe-Laplace fit (``bp_converged``,
    ``bp_bound_ok``, at the MAP) or the sample stats of a BetheMH chain (``bp_nonconverged``,
    ``bp_bound_violations``, over all draws); empty for results that record neither."""
    out: dict = {}
    groups = result.children
    if "diagnostics" in groups:
        diag = result["diagnostics"]
        for key, name in (("bp_converged", "converged"), ("bp_bound_ok", "bound_ok")):
            if key in diag.data_vars:
                out[name] = bool(np.all(diag[key].values))
    if "sample_stats" in groups:
        stats = result["sample_stats"]
        for key, name in (("bp_nonconverged", "converged"), ("bp_bound_violations", "bound_ok")):
            if key in stats.data_vars:
                out[name] = bool(np.all(stats[key].values == 0))
    return out


def compare(results: Mapping[str, xr.DataTree], reference: str | None = None,
            test: CRFData | None = None, var_names: list[str] | None = None,
            predict_method: str = "average", draws: int | None = 200,
            model: pm.Model | Mapping[str, pm.Model] | None = None) -> pd.DataFrame:
    """One row per method: run time, posterior accuracy against ``reference``, test error.

    Columns: ``wall_time`` (s), ``mean_abs_err`` and ``sd_ratio`` (posterior means' mean absolute
    difference and mean ratio of marginal sds against the reference), ``cvm`` (Welling & Parise 2006, eq.
    (23), normalised by the number of samples, summed over parameters), ``min_ess`` and ``max_rhat``
    (for results with several MCMC chains), ``converged`` and ``bound_ok`` (loopy BP's
    convergence and bound check, for results that record them: :func:`inference_trust`),
    ``log_marginal_likelihood`` where the method gives one, and ``test_error`` of
    ``predict(..., method=predict_method, draws=draws)`` when ``test`` is given (``draws``
    defaults to ``predict``'s).

    Results fitted to different observed data (their ``observed_data`` groups differ) are
    refused.

    LOO columns, for results with more than one draw and a ``log_likelihood`` group: ``elpd_loo``,
    ``elpd_loo_se``, ``p_loo`` and ``loo_warning`` (True when some graph's Pareto k exceeds
    ArviZ's ``good_k``: the estimate cannot be trusted), from ``arviz.compare`` of
    :func:`pymc_crf.loo` of each result: plain PSIS-LOO for MCMC results, corrected for the
    approximation for Gaussian ones (EP, Bethe-Laplace; these need ``model`` or the model's
    context, else their LOO columns are NaN with a warning). One-draw results (``map``) get NaN.

    Parameters are matched by name: ``var_names`` (default: the reference's posterior variables
    that every result has, in the reference's order; without a reference, the first result's),
    whatever order each fitter stores them in.

    Parameters
    ----------
    results : dict of str to DataTree
        Fitted results (any fitter, or ``pm.sample``), keyed by the method name to show; at least
        one.
    reference : str, optional
        Key of the reference result (usually NUTS) that ``mean_abs_err``, ``sd_ratio`` and ``cvm``
        compare against; without it those columns are left out.
    test : CRFData, optional
        Labelled test data for the ``test_error`` column.
    var_names : list of str, optional
        Posterior variables to compare (default: as above).
    predict_method : str
        ``method`` of :func:`pymc_crf.predict` for the test error.
    draws : int or None
        ``draws`` of :func:`pymc_crf.predict` (None: all).
    model : pm.Model or dict of str to pm.Model, optional
        The fitted model (or the context's), for :func:`pymc_crf.predict` of results that do not
        record their CRF layout (``pm.sample`` output) and for the LOO of Gaussian
        approximations; a dict gives each result's own model by key (results of different
        models, e.g. feature sets compared).

    Returns
    -------
    pandas.DataFrame
        One row per result, indexed by ``method`` (the keys of ``results``, in their order), with
        the columns above that apply.
    """
    check_results(results, "compare")
    _check_same_data(results)
    models = _models_by_result(model, results)
    var_names = name_list(var_names, "compare: var_names")
    if var_names == []:
        raise ValueError("compare: var_names is empty; give the posterior variables to compare "
                         "(None: those every result has)")
    if reference is not None and reference not in results:
        raise ValueError(f"reference {reference!r} is not one of {list(results)}")
    if var_names is None:
        base = results[reference] if reference is not None else next(iter(results.values()))
        var_names = [v for v in base["posterior"].data_vars
                     if all(v in r["posterior"].data_vars for r in results.values())]
    else:
        for key, res in results.items():
            missing = [v for v in var_names or [] if v not in res["posterior"].data_vars]
            if missing:
                raise ValueError(f"result {key!r} has no posterior variable(s) {missing}")
    hidden = sorted({v for r in results.values() for v in r.attrs.get("hcrf_weights", ())
                     if v in (var_names or ())})
    if hidden:
        warn_at_caller(
            f"compare: {hidden} are hidden-state weights, identified only up to a relabelling "
            "of the states (label switching, see pymc_crf.distributions.hcrf): mean_abs_err, "
            "sd_ratio, cvm, min_ess and max_rhat of them can differ between equally good fits; "
            "test_error and the log-likelihood are unaffected", UserWarning)
    ref = posterior_matrix(results[reference], var_names) if reference and var_names else None
    rows = []
    for name, res in results.items():
        row: dict = {"method": name, "wall_time": float(res.attrs.get("wall_time", np.nan))}
        mat = posterior_matrix(res, var_names) if var_names else None
        if ref is not None and mat.shape[1] != ref.shape[1]:
            raise ValueError(f"result {name!r} has {mat.shape[1]} entries per draw in "
                             f"{var_names}, the reference {reference!r} {ref.shape[1]}: results "
                             "of different models cannot be compared against one reference")
        if ref is not None:
            row["mean_abs_err"] = float(np.abs(mat.mean(0) - ref.mean(0)).mean())
            sd_ref = ref.std(0)
            row["sd_ratio"] = float(np.mean(mat.std(0) / np.where(sd_ref > 0, sd_ref, np.nan))) \
                if mat.shape[0] > 1 else np.nan
            row["cvm"] = cvm_score(mat, ref, normalize=True) if mat.shape[0] > 1 else np.nan
        post = res["posterior"]
        if var_names and post.sizes.get("chain", 1) > 1 and post.sizes.get("draw", 1) > 3:
            ess = _as_dataset(az.ess(res, var_names=var_names))
            rhat = _as_dataset(az.rhat(res, var_names=var_names))
            row["min_ess"] = float(min(np.min(ess[v].values) for v in ess.data_vars))
            row["max_rhat"] = float(max(np.max(rhat[v].values) for v in rhat.data_vars))
        row.update(inference_trust(res))
        if "log_marginal_likelihood" in res.attrs:
            row["log_marginal_likelihood"] = float(res.attrs["log_marginal_likelihood"])
        if test is not None:
            row["test_error"] = predict(res, test, method=predict_method, draws=draws,
                                        model=models[name]).error_rate
        rows.append(row)
    table = pd.DataFrame(rows).set_index("method")
    loo_table = _loo_columns(results, models)
    if loo_table is not None:
        table = table.join(loo_table)
    return table


def _check_same_data(results: Mapping[str, xr.DataTree]) -> None:
    """Refuse results fitted to different observed data: their posteriors, evidence and
    ``elpd_loo`` answer different questions, and ``arviz.compare`` would rank them all the same.
    Results of different models on the same labels (feature sets compared) pass; results
    without an ``observed_data`` group are not checked."""
    first = None
    for name, res in results.items():
        if "observed_data" not in res.children:
            continue
        obs = res["observed_data"].to_dataset()
        values = [np.asarray(obs[v].values) for v in sorted(obs.data_vars)]
        if first is None:
            first = name, values
            continue
        same = len(values) == len(first[1]) and all(
            a.shape == b.shape and np.array_equal(a, b, equal_nan=a.dtype.kind in "fc"
                                                  and b.dtype.kind in "fc")
            for a, b in zip(values, first[1], strict=True))
        if not same:
            raise ValueError(f"compare: results {first[0]!r} and {name!r} were fitted to "
                             "different observed data (their observed_data groups differ): "
                             "their posteriors, evidence and elpd_loo cannot be compared in one "
                             "table; compare the fits of each data set separately")


def _models_by_result(model, results: Mapping[str, xr.DataTree]) -> dict:
    """Each result's model: ``model[name]`` from a dict (every key a result's), else ``model``
    (or None) for all."""
    import pymc as pm

    if not isinstance(model, Mapping):
        if model is not None and not isinstance(model, pm.Model):
            raise TypeError(f"compare: model must be a pm.Model or a dict of them by result; got "
                            f"{type(model).__name__}")
        return dict.fromkeys(results, model)
    unknown = [k for k in model if k not in results]
    if unknown:
        raise ValueError(f"compare: model has entries {unknown} that are not results "
                         f"{list(results)}")
    bad = [k for k, m in model.items() if not isinstance(m, pm.Model)]
    if bad:
        raise TypeError(f"compare: model[{bad[0]!r}] is {type(model[bad[0]]).__name__}, not a "
                        "pm.Model")
    return {name: model.get(name) for name in results}


def _loo_columns(results: Mapping[str, xr.DataTree], models: Mapping[str, pm.Model | None]
                 ) -> pd.DataFrame | None:
    """``elpd_loo``, ``elpd_loo_se``, ``p_loo``, ``loo_warning`` by result, from
    ``arviz.compare`` of :func:`pymc_crf.loo` (None when no result has LOO)."""
    elpds = {}
    with warnings.catch_warnings():
        # ArviZ's long Pareto-k warning, once per result: the loo_warning column (and the one
        # warning below) say it for the table
        warnings.filterwarnings("ignore", message="Estimated shape parameter of Pareto")
        for name, res in results.items():
            post = res["posterior"]
            if ("log_likelihood" not in res.children
                    or post.sizes.get("chain", 1) * post.sizes.get("draw", 1) < 2):
                continue
            try:
                elpds[name] = loo(res, models[name])
            except ValueError as err:
                warn_at_caller(f"compare: no LOO for {name!r}: {err}", UserWarning)
        if not elpds:
            return None
        cmp = az.compare(elpds, round_to="none")
    out = pd.DataFrame({"elpd_loo": cmp["elpd"].astype(float), "elpd_loo_se": cmp["se"].astype(float),
                        "p_loo": cmp["p"].astype(float),
                        "loo_warning": cmp["diag_elpd"].astype(str) != ""}, index=cmp.index)
    out.index.name = "method"
    flagged = [str(k) for k in out.index[out["loo_warning"]]]
    if flagged:
        warn_at_caller(f"compare: the PSIS-LOO of {flagged} has Pareto k above its reliable "
                       "level (good_k) for some graphs (loo_warning): their elpd_loo is "
                       "unreliable (pmc.loo(result) shows the values of k)", UserWarning)
    return out
