"""``predict(result, data, method="bp_hcrf")``: class probabilities from a ``bp_hcrf_vi`` fit's
mean-field plug-in weights (``E log pi``, ``E z`` = the prior usage; see :mod:`.fitter`)."""

from __future__ import annotations

import numpy as np

from pymc_crf.distributions.hcrf import class_log_probs
from pymc_crf.fitters.predictors import Prediction, prediction, register_predictor

__all__ = ["predict_bp_hcrf"]


@register_predictor("bp_hcrf")
def predict_bp_hcrf(result, data, **_ignored) -> Prediction:
    """Class probabilities ``p(c | X)`` from the plug-in weights of a ``bp_hcrf_vi`` result.

    ``data`` has ``.graphs``, ``.node_features`` and optionally ``.labels``. Returns a
    ``Prediction`` whose ``marginals`` are the class probabilities (G, C), ``labels`` (G,), and
    ``error_rate`` (1 - accuracy) when ``data.labels`` is given.
    """
    point = result["bp_hcrf_point"]
    tx, ty, te = (np.asarray(point[f"plugin_theta_{k}"].values) for k in ("x", "y", "e"))
    probs = np.exp(class_log_probs(data.graphs, np.asarray(data.node_features, dtype=np.float64),
                                   tx, ty, te))
    return prediction(probs, probs.argmax(axis=1), "bp_hcrf", getattr(data, "labels", None))
