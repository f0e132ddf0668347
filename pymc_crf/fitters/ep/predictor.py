"""``predict(result, data, method="model_average")``: approximate model averaging (Qi, Szummer & Minka 2005,
sec. 7).

Registered for any result with a Gaussian ``fit`` group (``mean_vector``, ``covariance_matrix``), in
particular EP's: every potential table entry of the new graphs is replaced by its expectation under
q(w) = N(m, V) (Qi, Szummer & Minka 2005, eqs. (59)-(60), :mod:`.average`) and the node marginals of those
averaged tables are computed by the chosen engine (``inference="bp"`` is the paper's factorised update, eqs.
(61)-(63); ``"auto"`` is exact where the graphs allow).
"""

from __future__ import annotations

import json

import numpy as np
import xarray as xr

from pymc_crf.datasets.base import CRFData
from pymc_crf.feature_products import as_feature_matrix
from pymc_crf.fitters.ep.average import averaged_node_marginals
from pymc_crf.model.predictors import (
    Prediction,
    check_feature_columns,
    prediction,
    register_predictor,
)

__all__ = ["predict_model_average"]


@register_predictor("model_average")
def predict_model_average(result: xr.DataTree, data: CRFData, *, inference: str = "auto"
                          ) -> Prediction:
    """Node marginals of the q-averaged CRF of ``data`` and their max-marginal labels.

    Parameters
    ----------
    result : DataTree
        A result with a ``fit`` group (Gaussian q over the flat weights) and the ``crf`` layout attr
        (every ``pmc.fit`` result of a CRF model has it).
    data : CRFData
        The graphs to label (and labels, for the error rate).
    inference : str
        Engine for the averaged tables.
    """
    if "fit" not in result.children or "crf" not in result.attrs:
        raise ValueError("method='model_average' needs a Gaussian posterior (a 'fit' group with "
                         "mean_vector and covariance_matrix, e.g. from method='ep') and the CRF "
                         "layout attr of a pmc.fit result")
    info = json.loads(result.attrs["crf"])
    mean = np.asarray(result["fit"]["mean_vector"].values, float)
    cov = np.asarray(result["fit"]["covariance_matrix"].values, float)
    K, graphs = int(info["n_labels"]), data.graphs
    xn = xe = None
    if info["node_weights"] is not None:
        if data.node_features is None:
            raise ValueError("the model has node weights but the data has no node features")
        xn = as_feature_matrix(data.node_features)
    if info["edge_weights"] is not None:
        if info["shared_edge_table"]:
            xe = np.ones((1, 1))  # one shared table: average it once
        elif data.edge_features is None:
            raise ValueError("the model has per-edge weights but the data has no edge features")
        else:
            xe = as_feature_matrix(data.edge_features)
    post = result["posterior"]
    for what, x in (("node", xn), ("edge", None if info["shared_edge_table"] else xe)):
        name = info[f"{what}_weights"]
        if x is not None and name in post:
            check_feature_columns(what, x, post[name].shape[2])  # dims (chain, draw, feature, ...)
    marg = averaged_node_marginals(mean, cov, K, graphs, xn, xe, info["potential"],
                                   float(info["epsilon"]), inference)
    return prediction(marg, marg.argmax(axis=1), "model_average", data.labels)
