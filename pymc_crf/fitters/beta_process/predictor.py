"""``predict(result, data, method="bp_hcrf")``: class probabilities of new sequences from a
``bp_hcrf_vi`` fit.

Two rules (see :mod:`.local_z` and docs/hcrf.md):

* ``rule="local_z"`` (default): each sequence's own indicators q(z | c) are inferred per class with
  the global factors fixed, and the per-class variational scores of ``log p(c | X)`` (not
  bounds: see :mod:`.local_z`) are normalised;
* ``rule="prior"``: the mean-field plug-in weights (``E log pi``, ``E z`` = the prior usage).
"""

from __future__ import annotations

import json

import numpy as np

from pymc_crf.distributions.hcrf import class_log_probs
from pymc_crf.fitters.beta_process.fitter import sign_split
from pymc_crf.fitters.beta_process.local_z import class_scores_local_z
from pymc_crf.fitters.beta_process.stick_breaking import BetaProcessFactors, z_natural_terms
from pymc_crf.model.predictors import (
    Prediction,
    hcrf_test_features,
    prediction,
    register_predictor,
)
from pymc_crf.validation import whole_number

__all__ = ["predict_bp_hcrf"]

RULES = ("local_z", "prior")


@register_predictor("bp_hcrf")
def predict_bp_hcrf(result, data, *, rule: str = "local_z", max_iter: int = 20) -> Prediction:
    """Class probabilities ``p(c | X)`` of new sequences from a ``bp_hcrf_vi`` result.

    Parameters
    ----------
    result : DataTree
        A ``pmc.fit(..., method="bp_hcrf_vi")`` result.
    data
        Has ``.graphs`` (chains), ``.node_features`` and optionally ``.labels``.
    rule : {"local_z", "prior"}
        ``"local_z"``: per-class inference of the sequence's own state indicators under the
        learned q (:func:`.local_z.class_scores_local_z`); ``"prior"``: plug-in weights with
        the prior usage for every sequence.
    max_iter : int
        Coordinate steps of q(z | c) per class (``rule="local_z"``).

    Returns
    -------
    Prediction
        ``marginals`` the class probabilities (G, C), ``labels`` (G,), and ``error_rate``
        (1 - accuracy) when ``data.labels`` is given.
    """
    if rule not in RULES:
        raise ValueError(f"bp_hcrf predictor: rule must be one of {RULES}; got {rule!r}")
    whole_number(max_iter, "bp_hcrf predictor: max_iter")
    if "bp_hcrf_point" not in result.children:
        raise ValueError("method='bp_hcrf' needs a bp_hcrf_vi result (a 'bp_hcrf_point' group)")
    point = result["bp_hcrf_point"]
    X = hcrf_test_features(data, point["plugin_theta_x"].shape[0])
    if rule == "prior":
        tx, ty, te = (np.asarray(point[f"plugin_theta_{k}"].values) for k in ("x", "y", "e"))
        probs = np.exp(class_log_probs(data.graphs, X, tx, ty, te))
        return prediction(probs, probs.argmax(axis=1), "bp_hcrf", getattr(data, "labels", None),
                      per_graph=True)
    W = {k: np.asarray(point[f"theta_{k}"].values) * np.asarray(point[f"E_log_pi_{k}"].values)
         for k in ("x", "y", "e")}
    C = W["y"].shape[1]
    if data.graphs.n_graphs and not data.graphs.is_chain:
        raise ValueError("method='bp_hcrf' needs every graph to be a chain")
    bp = BetaProcessFactors(*(np.asarray(point[n].values, float)
                     for n in ("q_V_a", "q_V_b", "q_T_shape", "q_T_rate", "q_d")))
    taylor = int(json.loads(result.attrs["settings"])["taylor_terms"])
    scores, _ = class_scores_local_z(data.graphs, sign_split(X), W, z_natural_terms(bp, taylor),
                                     np.asarray(point["usage"].values, float), C, None,
                                     max_iter=max_iter)
    scores -= scores.max(axis=1, keepdims=True)
    probs = np.exp(scores)
    probs /= probs.sum(axis=1, keepdims=True)
    return prediction(probs, probs.argmax(axis=1), "bp_hcrf", getattr(data, "labels", None),
                      per_graph=True)
