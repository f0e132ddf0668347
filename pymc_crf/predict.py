"""Predicting labels of new graphs from a fitted result: plug-in, Monte Carlo averaging, MAP."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pymc as pm
import xarray as xr

from pymc_crf.datasets.base import CRFData
from pymc_crf.inference.select import get_engine
from pymc_crf.potentials import linear_scores, log_potential

__all__ = ["Prediction", "crf_attrs", "log_potentials_for", "predict", "register_predictor",
           "weight_draws"]

_PREDICTORS: dict[str, Callable[..., Prediction]] = {}


@dataclass
class Prediction:
    """Node marginals (N, K), predicted labels (N,), and the error rate when labels were given."""

    marginals: np.ndarray
    labels: np.ndarray
    method: str
    error_rate: float | None = None

    def __repr__(self) -> str:
        err = "" if self.error_rate is None else f", error_rate={self.error_rate:.4f}"
        return f"Prediction(method={self.method!r}, {self.labels.size} nodes{err})"


def register_predictor(name: str) -> Callable:
    """Decorator registering ``fn(result, data, **options) -> Prediction`` as a predict method."""

    def decorator(fn):
        _PREDICTORS[name] = fn
        return fn

    return decorator


def crf_attrs(spec) -> str:
    """What ``predict`` needs to rebuild log-potentials, as a JSON attr stored on results."""
    return json.dumps({
        "node_weights": spec.node_weights.name if spec.node_weights else None,
        "edge_weights": spec.edge_weights.name if spec.edge_weights else None,
        "shared_edge_table": bool(spec.shared_edge_table), "potential": spec.potential,
        "epsilon": spec.epsilon, "n_labels": spec.n_labels, "engine": spec.info.engine_name,
        "exact_log_z": spec.info.exact})


def _crf_info(result: xr.DataTree, model: pm.Model | None) -> dict:
    if "crf" in result.attrs:
        return json.loads(result.attrs["crf"])
    from pymc_crf.fitters.spec import extract_crf

    try:
        model = pm.modelcontext(model)
    except TypeError as err:
        raise ValueError("this result does not say how its weights map to potentials; call "
                         "predict inside the model's context or pass model=") from err
    return json.loads(crf_attrs(extract_crf(model)))


def weight_draws(result: xr.DataTree, info: dict) -> dict[str, np.ndarray]:
    """Weight draws flattened over (chain, draw): name -> (S, *shape)."""
    post = result["posterior"]
    out = {}
    for key in ("node_weights", "edge_weights"):
        name = info[key]
        if name is not None:
            da = post[name]
            out[key] = da.values.reshape(-1, *da.shape[2:])
    return out


def log_potentials_for(data: CRFData, info: dict, node_w, edge_w):
    """Numpy node (N, K) and edge (E, K, K) / (1, K, K) log-potentials of ``data`` for one weight
    set (the numpy twin of ``crf_log_potentials``)."""
    K, pot, eps = info["n_labels"], info["potential"], info["epsilon"]
    if node_w is not None and data.node_features is None:
        raise ValueError("the model has node weights but the data has no node features")
    shared = info["shared_edge_table"]
    if edge_w is not None and not shared and data.edge_features is None:
        raise ValueError("the model has per-edge weights but the data has no edge features")
    a_node, a_edge = linear_scores(data.node_features, node_w,
                                   None if shared else data.edge_features, edge_w)
    node = (np.zeros((data.graphs.n_total_nodes, K)) if a_node is None
            else log_potential(a_node, pot, eps))
    edge = np.zeros((1, K, K)) if a_edge is None else log_potential(a_edge, pot, eps)
    return node, edge


def _posterior_mean(result: xr.DataTree, draws: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The posterior mean of the weights: a Gaussian fit's exact ``mean_vector`` when the result
    has one (flat order: node weights, then edge weights), else the mean of the draws."""
    if "fit" not in result.children:
        return {k: v.mean(axis=0) for k, v in draws.items()}
    flat = np.asarray(result["fit"]["mean_vector"].values)
    out, i = {}, 0
    for key in ("node_weights", "edge_weights"):
        if key in draws:
            shape = draws[key].shape[1:]
            size = int(np.prod(shape))
            out[key] = flat[i:i + size].reshape(shape)
            i += size
    if i != flat.size:  # the fit covers other parameters too: fall back to the draws
        return {k: v.mean(axis=0) for k, v in draws.items()}
    return out


def _model_has_hcrf(model) -> bool:
    from pymc_crf.distributions.hcrf import find_hcrf

    try:
        find_hcrf(pm.modelcontext(model))
    except (TypeError, ValueError):
        return False
    return True


def _finish(data: CRFData, marginals: np.ndarray, labels: np.ndarray, method: str) -> Prediction:
    err = None
    if data.labels is not None:
        err = float(np.mean(labels != data.labels))
    return Prediction(marginals, labels, method, err)


def predict(result: xr.DataTree, data: CRFData, method: str = "average", *,
            n_draws: int | None = 200, model: pm.Model | None = None,
            inference: str = "auto", seed: int | None = 0, **options) -> Prediction:
    """Node marginals and labels for the graphs of ``data``.

    Parameters
    ----------
    result : DataTree
        A fitter's result (any method, including ``pm.sample``'s when called in the model context).
    data : CRFData
        Graphs and features to label; if it has labels, the error rate is reported.
    method : str
        ``"average"``: exact marginals averaged over ``n_draws`` posterior draws (Monte Carlo model
        averaging); ``"bpe"``: exact marginals at the posterior mean (the Bayes point estimate);
        ``"map"``: MAP labelling at the posterior mean (Viterbi / max-product); or a method a fitter
        registered (e.g. ``"model_average"`` for EP results). Results of hidden-CRF models
        (``pmc.HCRF``) are sent to the HCRF predictors (class probabilities per graph).
    n_draws : int or None
        Draws used by ``"average"`` (None: all).
    model : pm.Model, optional
        Needed only for results that do not record their CRF layout (``pm.sample`` output).
    inference : str
        Engine for the new graphs (``"auto"``).

    Returns
    -------
    Prediction
        ``marginals`` (N, K), ``labels`` (N,) (max-marginal labels, or MAP for ``"map"``),
        ``error_rate`` when ``data`` has labels.
    """
    from pymc_crf.fitters.registry import _load_builtin

    _load_builtin()  # fitter modules register their predictors on import
    from pymc_crf import ensemble_predict  # noqa: F401  (registers "bagging", "supergraph")
    if method in ("average", "bpe", "map") and "crf" not in result.attrs:
        # Hidden-CRF results predict a class per graph with their own predictors.
        if result.attrs.get("method") == "bp_hcrf_vi":
            method = "bp_hcrf"
        elif "hcrf_weights" in result.attrs or _model_has_hcrf(model):
            method = "hcrf_average"
    if method in _PREDICTORS:
        return _PREDICTORS[method](result, data, n_draws=n_draws, model=model,
                                   inference=inference, seed=seed, **options)
    if method not in ("average", "bpe", "map"):
        raise ValueError(f"unknown predict method {method!r}; choose 'average', 'bpe', 'map' or "
                         f"one of {sorted(_PREDICTORS)}")
    info = _crf_info(result, model)
    draws = weight_draws(result, info)
    engine = get_engine(inference, data.graphs)
    if method in ("bpe", "map"):
        mean = _posterior_mean(result, draws)
        node, edge = log_potentials_for(data, info, mean.get("node_weights"),
                                        mean.get("edge_weights"))
        marg = engine.marginals(data.graphs, node, edge).node
        if method == "map":
            return _finish(data, marg, engine.map_assignment(data.graphs, node, edge).labels, "map")
        return _finish(data, marg, marg.argmax(axis=1), "bpe")
    S = next(iter(draws.values())).shape[0]
    idx = np.arange(S)
    if n_draws is not None and n_draws < S:
        idx = np.random.default_rng(seed).choice(S, size=n_draws, replace=False)
    acc = None
    for s in idx:
        node, edge = log_potentials_for(
            data, info, draws["node_weights"][s] if "node_weights" in draws else None,
            draws["edge_weights"][s] if "edge_weights" in draws else None)
        m = engine.marginals(data.graphs, node, edge).node
        acc = m if acc is None else acc + m
    marg = acc / len(idx)
    return _finish(data, marg, marg.argmax(axis=1), "average")
