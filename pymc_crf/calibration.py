"""Temperature scaling of a fitted log-linear CRF: the non-Bayesian calibration baseline.

A careful user who finds a MAP CRF's marginals over- or under-confident fits one temperature on
held-out data (Guo et al. 2017): the log-potentials are divided by ``T``, which for a log-linear
CRF is the same as dividing every weight by ``T``, and ``T`` is chosen to minimise the held-out
token log loss of the marginals. ``tempered`` returns a result whose weights are so divided, so
``pmc.predict`` and ``pmc.queries`` use it as any other result; the posterior-averaged marginals
of a Bayesian fit are the alternative this baseline is compared with (examples/conll2000_posterior.py).
"""

from __future__ import annotations

import json
import warnings
from typing import TYPE_CHECKING, Any

import numpy as np
import xarray as xr
from scipy.optimize import minimize_scalar

from pymc_crf.metrics import as_array, checked_marginals
from pymc_crf.model.predictors import tagger_hint
from pymc_crf.validation import positive_number

if TYPE_CHECKING:
    from pymc_crf.datasets import CRFData

__all__ = ["fit_temperature", "tempered", "token_log_loss"]


def token_log_loss(marginals: np.ndarray, labels: np.ndarray) -> float:
    """Mean negative log probability of the true labels (labels < 0, missing, are left out).

    Parameters
    ----------
    marginals : ndarray (N, K)
        Predicted marginals, each row probabilities summing to 1.
    labels : ndarray (N,) int
        True labels in 0..K-1, or -1 (missing); flattened (``ravel``) first. The masked
        entries of a masked array are missing too.

    Returns
    -------
    float
        The mean of ``-log p`` over the labelled positions, ``p`` the marginal of the true label
        (clipped below at 1e-300).

    Raises
    ------
    ValueError
        When the shapes are not (N, K) and (N,), N is 0, the marginals hold NaN or inf or a row
        that is not probabilities summing to 1, a label is not an integer in -1..K-1, or every
        label is missing.
    """
    labels = as_array(labels, "labels", "token_log_loss", missing=-1).ravel()
    marginals, labels = checked_marginals(marginals, labels, "token_log_loss", missing_ok=True)
    keep = labels >= 0
    p = marginals[np.flatnonzero(keep), labels[keep]]
    return float(-np.mean(np.log(np.clip(p, 1e-300, None))))


def _layout(result: xr.DataTree) -> dict:
    if not isinstance(result, xr.DataTree) or "crf" not in result.attrs:
        raise ValueError("tempered / fit_temperature take a fitted CRF result (pmc.fit of a model "
                         f"with a pmc.CRF likelihood){tagger_hint(result)}")
    info = json.loads(result.attrs["crf"])
    if info.get("potential") != "loglinear":
        raise ValueError(f"temperature scaling divides the weights by T, which tempers the "
                         f"potentials of log-linear CRFs only; this result's potential is "
                         f"{info.get('potential')!r}")
    return info


def tempered(result: xr.DataTree, temperature: float) -> xr.DataTree:
    """A copy of ``result`` whose CRF weights (every draw, and a Gaussian fit's mean, sds and
    covariance in its ``fit`` group) are divided by ``temperature``. The result's
    ``log_likelihood`` group and ``log_marginal_likelihood`` attr, which belong to the
    untempered weights, are dropped, so ``pmc.loo`` refuses the copy and ``pmc.compare`` shows
    no LOO or evidence for it; compare temperatures by held-out log loss (``fit_temperature``).

    Parameters
    ----------
    result : xarray.DataTree
        A fitted log-linear CRF result.
    temperature : float
        ``T > 0``: above 1 flattens the marginals, below 1 sharpens them.
    """
    info = _layout(result)
    T = positive_number(temperature, "temperature")
    out = result.copy(deep=True)
    post = out["posterior"].to_dataset()
    for key in ("node_weights", "edge_weights"):
        name = info.get(key)
        if name is not None:
            post[name] = post[name] / T
        elif info.get(f"{key}_value") is not None:
            info[f"{key}_value"] = (np.asarray(info[f"{key}_value"]) / T).tolist()
    out["posterior"] = xr.DataTree(post)
    if "fit" in out.children:
        # a Gaussian approximation's mean (and a randomized MAP's unperturbed MAP) is what
        # "bpe" and "map" predict at (predictors.posterior_mean): its rows are the free CRF
        # weights, so they are divided too, sds by T and the covariance by T^2; left alone,
        # those predictions ignored the temperature and fit_temperature returned a bound
        fit = out["fit"].to_dataset()
        n_weights = sum(int(np.prod(post[info[k]].shape[2:])) for k in
                        ("node_weights", "edge_weights") if info.get(k) is not None)
        for name, power in (("mean_vector", 1), ("map_vector", 1), ("sd_vector", 1),
                            ("covariance_matrix", 2)):
            if name not in fit:
                continue
            if fit[name].shape[0] == n_weights:
                fit[name] = fit[name] / T**power
            else:  # the fit covers other parameters too (learned scales): not the weights'
                fit = fit.drop_vars(name)
        out["fit"] = xr.DataTree(fit)
    # the per-graph log-likelihood of the draws and the evidence are those of the untempered
    # weights: kept, pmc.loo and pmc.compare scored the tempered draws with them (a higher
    # elpd_loo at T = 5 than at T = 1, the same evidence); a tempered posterior is not the
    # model's, so it has neither
    if "log_likelihood" in out.children:
        del out["log_likelihood"]
    out.attrs.pop("log_marginal_likelihood", None)
    out.attrs["crf"] = json.dumps(info)
    out.attrs["temperature"] = T
    return out


def fit_temperature(result: xr.DataTree, data: CRFData, *, method: str = "bpe",
                    bounds: tuple[float, float] = (0.05, 20.0), **predict_options: Any) -> float:
    """The temperature minimising the held-out token log loss of the tempered result.

    The loss is that of ``pmc.predict(tempered(result, T), data, method)`` on held-out ``data``,
    found by a bounded search in ``log T``.

    Parameters
    ----------
    result : xarray.DataTree
        A fitted log-linear CRF result (``pmc.fit`` of a model with a ``pmc.CRF`` likelihood).
    data : CRFData
        Held-out data with labels (a ``pmc.CRFData``).
    method : str, default "bpe"
        The ``pmc.predict`` method whose marginals are scored.
    bounds : tuple of float, default (0.05, 20.0)
        ``(low, high)``, both positive with ``low < high``: the range of ``T`` searched.
    **predict_options
        Passed to ``pmc.predict``.

    Returns
    -------
    float
        The temperature; ``tempered(result, T)`` applies it. A ``RuntimeWarning`` says when it
        lies at a bound of ``bounds``.

    Raises
    ------
    ValueError
        When ``result`` is not a fitted CRF result or its potential is not log-linear, when
        ``bounds`` is not two positive numbers with ``low < high``, or when ``data`` has no
        labels (or only missing ones).
    """
    from pymc_crf.predict import predict

    _layout(result)
    lo, hi = (positive_number(b, "bounds") for b in bounds)
    if not lo < hi:
        raise ValueError(f"bounds must be (low, high) with low < high; got {bounds}")
    labels = getattr(data, "labels", None)
    labels = np.asarray([] if labels is None else labels).ravel()
    if labels.size == 0 or np.all(labels < 0):
        raise ValueError("fit_temperature needs held-out data with labels (this data has none)")

    def loss(log_t: float) -> float:
        pred = predict(tempered(result, float(np.exp(log_t))), data, method, **predict_options)
        return token_log_loss(pred.marginals, labels)

    best = minimize_scalar(loss, bounds=(np.log(lo), np.log(hi)), method="bounded",
                           options={"xatol": 1e-3})
    t = float(np.exp(best.x))
    # Brent's bounded search returns a point within about xatol of a bound when the loss still
    # falls there (a tiny or all-correct dev set): the value is the bound, not a minimiser.
    for bound, side in ((lo, "lower"), (hi, "upper")):
        if abs(best.x - np.log(bound)) < 5e-3:
            warnings.warn(f"fit_temperature: the held-out log loss is smallest at the {side} "
                          f"bound T={bound:g} of the search; the minimiser may lie beyond it "
                          "(widen `bounds`, or use a larger dev set)", RuntimeWarning,
                          stacklevel=2)
    return t
