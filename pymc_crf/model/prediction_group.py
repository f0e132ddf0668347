"""The ``predictions`` group: a prediction stored in the result's DataTree, as PyMC stores
``pm.sample_posterior_predictive(predictions=True)``.

Groups added to the result (in place):

* ``predictions``: ``{name}_marginals`` (graph, position, label) and ``{name}_labels`` (graph,
  position) for CRF results (one row per new graph, padded with NaN / -1 past each graph's end, as
  the observed labels are); for hidden CRFs ``{name}_marginals`` (graph, class) and
  ``{name}_labels`` (graph,). With ``sample_labels=n``, ``{name}`` (chain, draw, graph,
  position): n labellings drawn from the posterior predictive ``p(y* | x*, D)``, one draw from
  the CRF at each of n posterior weight draws (the engine's ``sample``: exact where a junction
  tree runs, else Gibbs).
* ``predictions_constant_data``: the new graphs' ``node_features`` / ``edge_features`` and
  ``n_nodes``; sparse features as their CSR arrays ``node_features_data``, ``_indices`` and
  ``_indptr``, with the shape in the attr ``node_features_shape`` (likewise for edges).

``name`` is the observed variable's (from ``observed_data``) and the label dims are the observed
variable's own, so the new group reads like the rest of the result.
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp
import xarray as xr

from pymc_crf.inference.select import get_engine
from pymc_crf.model.predictors import (
    Prediction,
    result_layout,
    tables_at,
    weight_draws,
    weight_sets_at,
)
from pymc_crf.validation import generator, whole_number

__all__ = ["add_predictions", "sample_predictive_labels"]


def _observed(result: xr.DataTree) -> tuple[str, tuple[str, ...]]:
    """The observed variable's name and dims (defaults ``"y"`` and ``("graph", "position")``)."""
    if "observed_data" in result.children:
        obs = result["observed_data"].to_dataset()
        if len(obs.data_vars) == 1:
            name = next(iter(obs.data_vars))
            return str(name), tuple(str(d) for d in obs[name].dims)
    return "y", ("graph", "position")


def _padded(batch, flat: np.ndarray, fill) -> np.ndarray:
    """Per-node values (N, *rest) as (G, L, *rest), ``fill`` past each graph's end."""
    flat = np.asarray(flat)
    out = np.full((batch.n_graphs, int(batch.n_nodes.max()), *flat.shape[1:]), fill,
                  dtype=np.result_type(flat, fill))
    out[batch.node_graph, np.arange(batch.n_total_nodes) - batch.node_offsets[batch.node_graph]] = flat
    return out


def sample_predictive_labels(result: xr.DataTree, data, n: int, *, model=None,
                             inference: str = "auto", random_seed=None) -> np.ndarray:
    """``n`` labellings (n, N) of ``data``'s graphs from the posterior predictive: for each, a
    posterior weight draw (chosen uniformly, with ``random_seed``) and one draw of the CRF's labels
    at those weights (the engine's ``sample``: exact where a junction tree runs, else Gibbs).
    """
    n = whole_number(n, "sample_labels")
    info = result_layout(result, model)
    ws = weight_draws(result, info)
    S = next(iter(ws.values())).shape[0]
    rng = generator(random_seed, "random_seed")
    engine = get_engine(inference, data.graphs)
    out = np.empty((n, data.graphs.n_total_nodes), dtype=np.int64)
    picked = weight_sets_at(ws, rng.integers(0, S, size=n))
    for i, (node, edge) in enumerate(tables_at(data, info, picked)):
        out[i] = engine.sample(data.graphs, node, edge, 1, rng)[0]
    return out


def add_predictions(result: xr.DataTree, data, prediction: Prediction,
                    sampled: np.ndarray | None = None) -> xr.DataTree:
    """Add the ``predictions`` and ``predictions_constant_data`` groups to ``result`` (in place;
    returned for chaining). ``sampled`` (n, N) are labellings from
    :func:`sample_predictive_labels`."""
    name, dims = _observed(result)
    batch = data.graphs
    per_node = prediction.labels.shape == (batch.n_total_nodes,)
    if per_node:
        gdim, pdim = (dims if len(dims) == 2 else ("graph", "position"))
        L = int(batch.n_nodes.max())
        coords = {gdim: np.arange(batch.n_graphs), pdim: np.arange(L),
                  "label": np.arange(prediction.marginals.shape[1])}
        marg = _padded(batch, prediction.marginals, np.nan)
        labels = _padded(batch, prediction.labels, -1)
        group = {f"{name}_marginals": ((gdim, pdim, "label"), marg),
                 f"{name}_labels": ((gdim, pdim), labels)}
        if sampled is not None:
            draws = np.stack([_padded(batch, s, -1) for s in sampled])[None]
            group[name] = (("chain", "draw", gdim, pdim), draws)
            coords.update(chain=[0], draw=np.arange(draws.shape[1]))
    else:  # one class per graph (hidden CRFs)
        if sampled is not None:
            raise ValueError("sample_labels draws node labellings of CRF results; a hidden-CRF "
                             "prediction has one class per graph")
        gdim = dims[0] if len(dims) == 1 else "graph"
        coords = {gdim: np.arange(prediction.labels.shape[0]),
                  "class": np.arange(prediction.marginals.shape[1])}
        group = {f"{name}_marginals": ((gdim, "class"), prediction.marginals),
                 f"{name}_labels": ((gdim,), prediction.labels)}
    ds = xr.Dataset(group, coords=coords,
                    attrs={"predict_method": prediction.method,
                           "sample_dims": ["chain", "draw"] if sampled is not None else []})
    const, attrs = {"n_nodes": (("graph",), np.asarray(batch.n_nodes))}, {}
    for key, rows in (("node_features", "node"), ("edge_features", "edge")):
        x = getattr(data, key, None)
        if x is None:
            continue
        if sp.issparse(x):  # its CSR arrays: a dense copy of text features would not fit
            x = sp.csr_matrix(x)
            const.update({f"{key}_data": ((f"{key}_nnz",), x.data),
                          f"{key}_indices": ((f"{key}_nnz",), x.indices),
                          f"{key}_indptr": ((f"{key}_row_ptr",), x.indptr)})
            attrs[f"{key}_shape"] = list(x.shape)
        else:
            const[key] = ((rows, key.replace("features", "feature")), np.asarray(x))
    constant = xr.Dataset(const, attrs=attrs)
    result["predictions"] = ds
    result["predictions_constant_data"] = constant
    return result
