"""Predicting labels of new graphs from a fitted result: ``pmc.predict(result, data, method)``.

The predictors live with the fitters (:mod:`pymc_crf.model.predictors`): ``"average"``,
``"bpe"``, ``"map"`` for every CRF result, and the ones fitters register (EP's
``"model_average"``, the HCRF predictors). This module picks one and calls it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pymc as pm
import xarray as xr

from pymc_crf.fitters import load_builtin
from pymc_crf.model.options import check_options
from pymc_crf.model.prediction_group import add_predictions, sample_predictive_labels
from pymc_crf.model.predictors import (
    Prediction,
    check_result,
    crf_attrs,
    get_predictor,
    log_potentials_for,
    register_predictor,
    weight_draws,
)
from pymc_crf.validation import flag, generator, whole_number

if TYPE_CHECKING:
    from pymc_crf.datasets.base import CRFData
    from pymc_crf.datasets.hmm import SequenceData

__all__ = ["Prediction", "crf_attrs", "log_potentials_for", "predict", "register_predictor",
           "weight_draws"]


def _model_has_hcrf(model) -> bool:
    from pymc_crf.distributions.hcrf import single_hcrf

    try:
        single_hcrf(pm.modelcontext(model))
    except (TypeError, ValueError):
        return False
    return True


def _model_has_mrf(model) -> bool:
    from pymc_crf.distributions.mrf import MRFRV

    try:
        model = pm.modelcontext(model)
    except TypeError:
        return False
    return any(isinstance(rv.owner.op, MRFRV) for rv in model.observed_RVs)


def _is_mrf_result(result: xr.DataTree, model) -> bool:
    """Whether ``result`` is a fit of a ``pmc.MRF``: the model says so, or the result records
    how exact its log Z was (``log_z``) but no CRF or HCRF layout, which only MRF fits do."""
    if "crf" in result.attrs:
        return False
    if _model_has_mrf(model):
        return True
    hcrf = ("hcrf_weights" in result.attrs or "hcrf_layout" in result.attrs
            or result.attrs.get("method") == "bp_hcrf_vi")
    return "log_z" in result.attrs and not hcrf and not _model_has_hcrf(model)


def predict(result: xr.DataTree, data: CRFData | SequenceData, method: str = "average", *,
            draws: int | None = 200, model: pm.Model | None = None,
            inference: str = "auto", random_seed: int | None = 0,
            predictions: bool = False, sample_labels: int = 0,
            **options: Any) -> Prediction:
    """Marginals and labels for the graphs of ``data``.

    Parameters
    ----------
    result : DataTree
        A fitter's result (any method, including ``pm.sample``'s when called in the model context).
    data : CRFData or SequenceData
        Graphs and features to label; if it has labels, the error rate is reported.
    method : str
        ``"average"``: exact marginals averaged over ``draws`` posterior draws (Monte Carlo model
        averaging); ``"bpe"``: exact marginals at the posterior mean (the Bayes point estimate);
        ``"map"``: MAP labelling at the posterior mean (Viterbi / max-product); or a method a fitter
        registered (e.g. ``"model_average"`` for EP results). For results of hidden-CRF models
        (``pmc.HCRF``) ``"average"`` is sent to the HCRF predictors (class probabilities per
        graph: ``"hcrf_average"``, or ``"bp_hcrf"`` for ``bp_hcrf_vi``); ``"bpe"`` and ``"map"``
        are refused.
    draws : int or None
        Draws used by ``"average"`` (None: all).
    model : pm.Model, optional
        Needed only for results that do not record their CRF layout (``pm.sample`` output).
    inference : str
        Engine for the new graphs (``"auto"``).
    random_seed : int, optional
        Seed of the choice of draws.
    predictions : bool
        Also store the prediction in ``result`` (in place) as a ``predictions`` group
        (``{name}_marginals``, ``{name}_labels`` in the observed variable's dims) and a
        ``predictions_constant_data`` group (the new graphs' features), as
        ``pm.sample_posterior_predictive(predictions=True)`` does; see
        :mod:`pymc_crf.model.prediction_group`.
    sample_labels : int
        With ``predictions``, also draw this many labellings of the new graphs from the posterior
        predictive (one CRF draw at each of as many posterior weight draws, seeded by
        ``random_seed``) as the ``predictions`` group's ``{name}`` (chain, draw, graph, position);
        a positive ``sample_labels`` implies ``predictions``.
    **options
        Options of the predictor ``method`` names (e.g. ``weighted`` of ``"bagging"``); an
        option it does not take is refused.

    Returns
    -------
    Prediction
        ``marginals`` (N, K), ``labels`` (N,) (max-marginal labels, or MAP for ``"map"``),
        ``error_rate`` when ``data`` has labels.
    """
    check_result(result, posterior=False)
    if _is_mrf_result(result, model):
        # an MRF has no inputs: there are no new graphs' features to label, and the CRF
        # predictors would fail inside, naming internal classes
        raise ValueError("pmc.predict labels new graphs from their features (pmc.CRF results) or "
                         "classifies new sequences (pmc.HCRF results); this is a pmc.MRF result, "
                         "whose labellings depend on no inputs: draw them with "
                         "pm.sample_posterior_predictive(result, model=model)")
    if draws is not None:
        draws = whole_number(draws, "draws (None for all draws)")
    generator(random_seed, "random_seed")
    predictions = flag(predictions, "predictions")
    if not hasattr(data, "graphs"):
        raise TypeError("data must be a CRFData or SequenceData (pmc.CRFData(graphs, labels, "
                        f"node_features=...), or from pmc.datasets); got {type(data).__name__}")
    load_builtin()
    if method in ("average", "bpe", "map") and "crf" not in result.attrs:
        # Hidden-CRF results predict a class per graph with their own predictors.
        hidden = (result.attrs.get("method") == "bp_hcrf_vi" or "hcrf_weights" in result.attrs
                  or "hcrf_layout" in result.attrs or _model_has_hcrf(model))
        if hidden and method != "average":
            raise ValueError(f"method={method!r} labels the nodes of a CRF at the posterior mean; "
                             "this is a hidden-CRF (pmc.HCRF) result, which predicts one class "
                             "per graph: use method='average' (p(c | x) averaged over the "
                             "posterior)")
        if hidden:
            method = "bp_hcrf" if result.attrs.get("method") == "bp_hcrf_vi" else "hcrf_average"
    if "crf" in result.attrs and not hasattr(data, "edge_features"):
        raise ValueError(f"this CRF result labels the nodes of graphs given as pmc.CRFData; got "
                         f"{type(data).__name__} (one class per sequence, for pmc.HCRF results)")
    if method in ("hcrf_average", "bp_hcrf") and hasattr(data, "edge_features"):
        raise ValueError("this hidden-CRF (pmc.HCRF) result predicts one class per sequence, "
                         "for data given as pmc.datasets.SequenceData; got CRFData (node "
                         "labels, for pmc.CRF results)")
    predictor = get_predictor(method)
    common = {"draws": draws, "model": model, "inference": inference, "random_seed": random_seed}
    # any other option must be one of the predictor's own (a misspelt one would be lost); the
    # shared arguments a predictor does not name are not its concern
    named = check_options(predictor, options, f"predict method {method!r}")
    if named is not None:
        common = {k: v for k, v in common.items() if k in named}
    pred = predictor(result, data, **common, **options)
    if predictions or sample_labels:
        sampled = (sample_predictive_labels(result, data, sample_labels, model=model,
                                            inference=inference, random_seed=random_seed)
                   if sample_labels else None)
        add_predictions(result, data, pred, sampled)
    return pred
