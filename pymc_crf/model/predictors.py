"""The predictor registry and the CRF predictors every result supports.

A predictor is ``fn(result, data, **options) -> Prediction``, registered by name with
:func:`register_predictor`; ``pmc.predict(result, data, method=name)`` dispatches to it. Fitters
register the predictors that need their own result groups (EP's ``"model_average"``, the
beta-process HCRF's ``"bp_hcrf"``); the three below work on the draws of any CRF fit:

* ``"average"``: exact marginals averaged over posterior draws (Monte Carlo model averaging);
* ``"bpe"``: exact marginals at the posterior mean (the Bayes point estimate);
* ``"map"``: the MAP labelling at the posterior mean (Viterbi / max-product);

and ``"hcrf_average"`` the class probabilities of a hidden CRF averaged over any fit's draws.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass

import numpy as np
import pymc as pm
import xarray as xr
from pytensor.graph.traversal import ancestors

from pymc_crf.feature_products import dense_features
from pymc_crf.inference.base import Engine, predictive_marginals
from pymc_crf.inference.select import get_engine
from pymc_crf.potentials import log_potential_tables
from pymc_crf.validation import generator

__all__ = ["Prediction", "available_predictors", "average_over_draws", "averaged_marginals",
           "crf_attrs", "crf_layout", "draw_indices", "get_predictor", "log_potentials_for",
           "posterior_mean", "predict_average", "predict_bpe", "predict_hcrf_average",
           "predict_map", "prediction", "register_predictor", "result_gaussian",
           "result_layout", "tables_at",
           "weight_draws", "weight_sets_at"]

_PREDICTORS: dict[str, Callable[..., Prediction]] = {}


@dataclass
class Prediction:
    """Marginals and predicted labels, and the error rate when labels were given.

    For CRF results ``marginals`` are node marginals (N, K) and ``labels`` one per node; for hidden
    CRFs (``per_graph`` True) they are class probabilities (G, C) and one class per graph.

    Attributes
    ----------
    marginals : ndarray (N, K) or (G, C)
        Node marginals, or class probabilities per graph.
    labels : ndarray (N,) or (G,)
        The predicted labels (classes).
    method : str
        The prediction method.
    error_rate : float or None
        The fraction of predicted labels that differ from the data's labels, when the data had
        labels.
    per_graph : bool
        Whether the prediction is per graph (hidden CRFs).
    """

    marginals: np.ndarray
    labels: np.ndarray
    method: str
    error_rate: float | None = None
    per_graph: bool = False

    def __repr__(self) -> str:
        err = "" if self.error_rate is None else f", error_rate={self.error_rate:.4f}"
        what = "graphs" if self.per_graph else "nodes"
        return f"Prediction(method={self.method!r}, {self.labels.size} {what}{err})"


def prediction(marginals: np.ndarray, labels: np.ndarray, method: str, true_labels=None,
               *, per_graph: bool = False) -> Prediction:
    """A :class:`Prediction` with the error rate against ``true_labels`` (when given);
    ``per_graph``: class probabilities of hidden CRFs, one row per graph."""
    err = None
    if true_labels is not None:
        true_labels = np.asarray(true_labels)   # whole numbers: CRFData / SequenceData check
        if true_labels.shape != np.shape(labels):
            raise ValueError(
                f"the data has {true_labels.size} labels; this prediction has "
                f"{np.size(labels)} ({method!r}). A CRF result labels every node (pmc.CRFData); "
                "a hidden-CRF result predicts one class per graph (SequenceData, or labels of "
                "shape (G,))")
        K = marginals.shape[-1]
        bad = (true_labels < 0) | (true_labels >= K)
        if bad.any():
            i = int(np.flatnonzero(bad)[0])
            raise ValueError(f"the data's label {true_labels.flat[i]} (entry {i}) is outside "
                             f"0..{K - 1}, the labels of the fitted model")
        err = float(np.mean(labels != true_labels))
    return Prediction(marginals, labels, method, err, per_graph)


def register_predictor(name: str) -> Callable:
    """Decorator registering ``fn(result, data, **options) -> Prediction`` as a predict method.

    ``pmc.predict`` hands ``fn`` the arguments it shares with every method (``draws``, ``model``,
    ``inference``, ``random_seed``) that ``fn`` names, and the user's other options; an option
    ``fn`` does not name is refused, unless ``fn`` takes ``**options`` itself."""

    def decorator(fn):
        _PREDICTORS[name] = fn
        return fn

    return decorator


def get_predictor(name: str) -> Callable[..., Prediction]:
    """The predictor registered as ``name`` (a clear error naming the registered ones)."""
    if name not in _PREDICTORS:
        raise ValueError(f"unknown predict method {name!r}; choose one of {available_predictors()}")
    return _PREDICTORS[name]


def available_predictors() -> list[str]:
    """Names of the registered predictors."""
    return sorted(_PREDICTORS)


def _weight_source(spec, key: str) -> dict:
    """Where a predictor finds one weight tensor of ``spec``'s CRF: ``{key: name}`` (the
    posterior variable: a free variable or a ``pm.Deterministic``), ``{key: None, key_value:
    array as lists}`` (a constant: weights fixed with ``pm.do``, or held in ``pm.Data``) or
    ``{key: None, key_expression: True}`` (an unnamed expression of free variables: no draws to
    read)."""
    ws = getattr(spec, key)
    if ws is None:
        return {key: None}
    if ws.name:
        return {key: ws.name}
    return tensor_source(spec.model, getattr(spec.info, key), key)


def tensor_source(model: pm.Model, tensor, key: str) -> dict:
    """Where a predictor finds the weight tensor ``tensor`` of ``model``: ``{key: name}`` (a
    named variable of the model: free, or a ``pm.Deterministic``), ``{key: None, key_value: array
    as lists}`` (a constant, including ``pm.Data`` at fit time) or ``{key: None,
    key_expression: True}`` (an unnamed expression of free variables: no draws to read)."""
    if (getattr(tensor, "name", None) and model.named_vars.get(tensor.name) is tensor
            and tensor not in model.data_vars):
        return {key: tensor.name}  # a free variable or a pm.Deterministic: draws in the posterior
    free = set(model.free_RVs) | set(model.value_vars)
    if any(v in free for v in ancestors([tensor])):
        return {key: None, f"{key}_expression": True}
    return {key: None, f"{key}_value": np.asarray(tensor.eval(), dtype=np.float64).tolist()}


def crf_layout(spec) -> dict:
    """What a predictor needs to rebuild the log-potentials of ``spec``'s CRF (the layout
    :func:`log_potentials_for` takes): where its weights are, potential, epsilon, K, engine."""
    return {
        **_weight_source(spec, "node_weights"), **_weight_source(spec, "edge_weights"),
        "shared_edge_table": bool(spec.shared_edge_table), "potential": spec.potential,
        "epsilon": spec.epsilon, "n_labels": spec.n_labels, "engine": spec.info.engine_name,
        "exact_log_z": spec.info.exact}


def crf_attrs(spec) -> str:
    """:func:`crf_layout` as the JSON attr stored on results."""
    return json.dumps(crf_layout(spec))


def tagger_hint(result) -> str:
    """How to pass a fitted ``CRFTagger`` where a fit result is wanted (empty for anything
    else): its fit is the ``result_`` DataTree, and the CRFData of sentences comes from its
    ``log_potentials``."""
    if isinstance(getattr(result, "result_", None), xr.DataTree):
        return (": a CRFTagger's fit is its result_ attribute; pass tagger.result_ (and, as "
                "data, tagger.log_potentials(X)[0] for sentences X)")
    return ""


def check_result(result, what: str = "result", posterior: bool = True) -> None:
    """Raise a clear error unless ``result`` is a fit result: an ``xarray.DataTree`` (with a
    ``posterior`` group, unless ``posterior=False``: a registered predictor may read others)."""
    if not isinstance(result, xr.DataTree):
        raise TypeError(f"{what} must be a fitted DataTree (from pmc.fit or pm.sample); got "
                        f"{type(result).__name__}{tagger_hint(result)}")
    if posterior and "posterior" not in result.children:
        raise ValueError(f"{what} has no 'posterior' group (it has {list(result.children)})")


@dataclass(frozen=True)
class ResultGaussian:
    """The Gaussian posterior of a result's ``fit`` group (``docs/fit_contract.md``): its mean,
    its covariance (None when the result keeps only the marginal sds, ``sd_vector``), the
    marginal variances and the names of the flat entries."""

    mean: np.ndarray
    cov: np.ndarray | None
    var: np.ndarray
    names: list[str]


def result_gaussian(result: xr.DataTree) -> ResultGaussian | None:
    """The Gaussian of ``result``'s ``fit`` group (``mean_vector`` with ``covariance_matrix``
    or ``sd_vector``), None when it has none (MCMC, MAP, randomized MAP); a clear error where
    its parts do not match or are not finite."""
    check_result(result)
    fit = result["fit"] if "fit" in result.children else None
    if fit is None or "mean_vector" not in fit or not ("covariance_matrix" in fit
                                                        or "sd_vector" in fit):
        return None
    mean = np.asarray(fit["mean_vector"].values, np.float64)
    names = [str(r) for r in fit["rows"].values] if "rows" in fit.coords else []
    if "covariance_matrix" in fit:
        cov = np.asarray(fit["covariance_matrix"].values, np.float64)
        d = mean.size
        if cov.shape != (d, d) or not (np.isfinite(mean).all() and np.isfinite(cov).all()):
            raise ValueError(f"the fit group's covariance_matrix {cov.shape} does not match its "
                             f"mean_vector ({d},) or is not finite")
        return ResultGaussian(mean, cov, np.diag(cov).copy(), names)
    sd = np.asarray(fit["sd_vector"].values, np.float64)
    if sd.shape != mean.shape or not (np.isfinite(mean).all() and np.isfinite(sd).all()):
        raise ValueError(f"the fit group's sd_vector {sd.shape} does not match its mean_vector "
                         f"{mean.shape} or is not finite")
    return ResultGaussian(mean, None, sd**2, names)


def result_layout(result: xr.DataTree, model: pm.Model | None = None) -> dict:
    """The CRF layout of a result: its ``crf`` attr, or read from ``model`` (or the context)."""
    check_result(result)
    if "crf" in result.attrs:
        return json.loads(result.attrs["crf"])
    if ("hcrf_weights" in result.attrs or "hcrf_layout" in result.attrs
            or result.attrs.get("method") == "bp_hcrf_vi"):
        raise ValueError("this is a hidden-CRF (pmc.HCRF) result, which predicts one class per "
                         "graph: use predict's 'average' (or 'hcrf_average'; 'bp_hcrf' for "
                         "bp_hcrf_vi results); label-level methods and sample_labels are for CRFs")
    from pymc_crf.model.spec import extract_crf

    try:
        model = pm.modelcontext(model)
    except TypeError as err:
        raise ValueError("this result does not say how its weights map to potentials; call "
                         "predict inside the model's context or pass model=") from err
    return crf_layout(extract_crf(model))


def weight_draws(result: xr.DataTree, info: dict) -> dict[str, np.ndarray]:
    """Weight draws flattened over (chain, draw): ``"node_weights"`` / ``"edge_weights"`` ->
    (S, *shape); a constant weight (``pm.do``, a fixed array) repeated for every draw."""
    post = result["posterior"]
    n_draws = int(post.sizes.get("chain", 1) * post.sizes.get("draw", 1))
    out = {}
    for key in ("node_weights", "edge_weights"):
        name, what = info.get(key), key.replace("_", " ")
        if name is not None:
            if name not in post:
                raise ValueError(f"the result's posterior has no {name!r}, the CRF's {what}; "
                                 "a fitter that does not store deterministics cannot predict "
                                 "from a model whose weights are a pm.Deterministic")
            da = post[name]
            out[key] = da.values.reshape(-1, *da.shape[2:])
        elif info.get(f"{key}_value") is not None:
            value = np.asarray(info[f"{key}_value"], dtype=np.float64)
            out[key] = np.broadcast_to(value, (n_draws, *value.shape))
        elif info.get(f"{key}_expression"):
            raise ValueError(f"the CRF's {what} are an unnamed expression of other variables, "
                             "whose draws the result does not hold: wrap the expression in "
                             "pm.Deterministic('name', ...) so that its draws are stored")
    return out


def check_feature_columns(what: str, features, expected: int) -> None:
    """Raise a ValueError when ``features`` (the data's ``what`` features) do not have the
    ``expected`` columns, the leading dimension of the model's ``what`` weights."""
    if features.shape[1] != expected:
        raise ValueError(f"the data's {what} features have {features.shape[1]} columns; the "
                         f"model's {what} weights expect {expected}")


def log_potentials_for(data, info: dict, node_w, edge_w):
    """Numpy node (N, K) and edge (E, K, K) / (1, K, K) log-potentials of ``data`` for one weight
    set, in the layout ``info`` (:func:`crf_attrs`) records."""
    if node_w is not None and data.node_features is None:
        raise ValueError("the model has node weights but the data has no node features")
    shared = info["shared_edge_table"]
    if edge_w is not None and not shared and data.edge_features is None:
        raise ValueError("the model has per-edge weights but the data has no edge features")
    for what, x, w in (("node", data.node_features, node_w),
                       ("edge", None if shared else data.edge_features, edge_w)):
        if x is not None and w is not None:
            check_feature_columns(what, x, np.shape(w)[0])
    node, edge, _, _ = log_potential_tables(
        info["potential"], info["epsilon"], data.graphs.n_total_nodes, info["n_labels"],
        data.node_features, node_w, None if shared else data.edge_features, edge_w)
    return node, edge


def posterior_mean(result: xr.DataTree, draws: dict[str, np.ndarray],
                   info: dict | None = None) -> dict[str, np.ndarray]:
    """The posterior mean of the weights: a Gaussian fit's exact ``mean_vector`` when the result
    has one (flat order: the free weights, node weights first), else the mean of the draws.
    ``info`` (:func:`crf_attrs`) tells constant weights, which the mean vector does not hold."""
    mean = {k: v.mean(axis=0) for k, v in draws.items()}
    if "fit" not in result.children or "mean_vector" not in result["fit"]:
        return mean
    flat = np.asarray(result["fit"]["mean_vector"].values)
    free = [k for k in ("node_weights", "edge_weights")
            if k in draws and (info is None or info.get(k) is not None)]
    out, i = dict(mean), 0
    for key in free:
        shape = draws[key].shape[1:]
        size = int(np.prod(shape))
        out[key] = flat[i:i + size].reshape(shape)
        i += size
    if i != flat.size:  # the fit covers other parameters too: the draws' mean instead
        return mean
    return out


def _plug_in(result, data, model, inference):
    info = result_layout(result, model)
    mean = posterior_mean(result, weight_draws(result, info), info)
    node, edge = log_potentials_for(data, info, mean.get("node_weights"), mean.get("edge_weights"))
    engine = get_engine(inference, data.graphs)
    return engine, node, edge


@register_predictor("bpe")
def predict_bpe(result: xr.DataTree, data, *, model: pm.Model | None = None,
                inference: str = "auto") -> Prediction:
    """Exact node marginals at the posterior mean and their max-marginal labels."""
    engine, node, edge = _plug_in(result, data, model, inference)
    marg = predictive_marginals(engine, data.graphs, node, edge)
    return prediction(marg, marg.argmax(axis=1), "bpe", data.labels)


@register_predictor("map")
def predict_map(result: xr.DataTree, data, *, model: pm.Model | None = None,
                inference: str = "auto") -> Prediction:
    """The MAP labelling at the posterior mean (marginals there too)."""
    engine, node, edge = _plug_in(result, data, model, inference)
    marg = predictive_marginals(engine, data.graphs, node, edge)
    labels = engine.map_assignment(data.graphs, node, edge).labels
    return prediction(marg, labels, "map", data.labels)


def weight_sets_at(draws: Mapping[str, np.ndarray], indices: Iterable[int]
                   ) -> Iterator[dict[str, np.ndarray]]:
    """The weights of draw ``s``, for each ``s`` in ``indices``, of the weight draws ``draws``
    (:func:`weight_draws`: ``"node_weights"`` / ``"edge_weights"`` -> (S, ...)), one draw at a
    time, keyed as ``draws`` is."""
    for s in indices:
        yield {k: v[s] for k, v in draws.items()}


def tables_at(data, info: dict, weight_sets: Iterable[Mapping[str, np.ndarray]]
              ) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """The (node, edge) log-potential tables of ``data`` (:func:`log_potentials_for`, layout
    ``info``) at each weight set (``{"node_weights": ..., "edge_weights": ...}``, a key absent
    when the CRF has no such weights), one at a time."""
    for w in weight_sets:
        yield log_potentials_for(data, info, w.get("node_weights"), w.get("edge_weights"))


def average_over_draws(values: Iterable[np.ndarray]) -> np.ndarray:
    """The mean of per-draw predictions (node marginals, class or span probabilities): the Monte
    Carlo estimate ``1/S sum_s p(. | x, w_s)`` of the posterior predictive. The values are summed
    as they come, so the (S, ...) stack of all draws is never formed."""
    total, n = None, 0
    for v in values:
        if total is None:
            total = np.array(v, dtype=np.float64)
        else:
            total += v
        n += 1
    if total is None:
        raise ValueError("no weight draws to average over")
    return total / n


def averaged_marginals(data, info: dict, weight_sets: Iterable[Mapping[str, np.ndarray]],
                       inference: str | Engine = "auto") -> np.ndarray:
    """Node marginals (N, K) of ``data`` by the engine ``inference`` averaged over the weight sets
    (:func:`tables_at`; e.g. :func:`weight_sets_at` of a result's draws, or draws of a Gaussian
    approximation made one at a time): Monte Carlo model averaging."""
    engine = get_engine(inference, data.graphs)
    return average_over_draws(predictive_marginals(engine, data.graphs, node, edge)
                              for node, edge in tables_at(data, info, weight_sets))


def draw_indices(draws: dict[str, np.ndarray], n_draws: int | None, random_seed) -> np.ndarray:
    """Indices, in increasing order, of ``n_draws`` of the posterior draws ``draws`` (name ->
    (S, ...)) chosen without replacement with ``random_seed``; all S when ``n_draws`` is None or
    at least S."""
    S = next(iter(draws.values())).shape[0]
    rng = generator(random_seed, "random_seed")  # checked even when every draw is used
    if n_draws is None or n_draws >= S:
        return np.arange(S)
    return np.sort(rng.choice(S, size=n_draws, replace=False))


@register_predictor("average")
def predict_average(result: xr.DataTree, data, *, draws: int | None = 200,
                    model: pm.Model | None = None, inference: str = "auto",
                    random_seed: int | None = 0) -> Prediction:
    """Exact node marginals averaged over ``draws`` posterior draws (None: all), chosen without
    replacement with ``random_seed``."""
    info = result_layout(result, model)
    ws = weight_draws(result, info)
    marg = averaged_marginals(data, info, weight_sets_at(ws, draw_indices(ws, draws, random_seed)),
                              inference)
    return prediction(marg, marg.argmax(axis=1), "average", data.labels)


HCRF_WEIGHTS = ("theta_x", "theta_y", "theta_e")


def hcrf_test_features(data, n_features: int) -> np.ndarray:
    """The node features of ``data`` for an HCRF fitted with ``n_features`` features: dense
    float64, one finite row per node (clear errors else)."""
    X = np.asarray(dense_features(data.graphs.check_features(data.node_features, "node")))
    if X.shape[1] != n_features:
        raise ValueError(f"the data have {X.shape[1]} node features; the HCRF was fitted with "
                         f"{n_features}")
    return X


def hcrf_layout(model: pm.Model) -> dict:
    """Where a predictor finds the three weight tensors of ``model``'s ``pmc.HCRF``
    (:func:`tensor_source` of each)."""
    from pymc_crf.distributions.hcrf import single_hcrf

    rv = single_hcrf(model)  # the weights' layout does not need the (training) labels
    params = rv.owner.op.weights(rv.owner)
    return {k: v for key, p in zip(HCRF_WEIGHTS, params, strict=True)
            for k, v in tensor_source(model, p, key).items()}


def _hcrf_weight_draws(result: xr.DataTree, weights, model) -> list[np.ndarray]:
    """The (S, ...) draws of theta_x, theta_y, theta_e: from the posterior variables ``weights``
    names, else as the result records (``hcrf_weights`` / ``hcrf_layout``, from ``pmc.fit``),
    else as ``model`` (or the model in context) says, else under the default names."""
    post = result["posterior"]
    if weights is not None:
        layout = dict(zip(HCRF_WEIGHTS, weights, strict=True))
    elif "hcrf_weights" in result.attrs:
        layout = dict(zip(HCRF_WEIGHTS, result.attrs["hcrf_weights"], strict=True))
    elif "hcrf_layout" in result.attrs:
        layout = json.loads(result.attrs["hcrf_layout"])
    else:
        try:  # pm.sample output records nothing: the model says where the weights are
            layout = hcrf_layout(pm.modelcontext(model))
        except TypeError:  # no model given and none in context
            layout = dict(zip(HCRF_WEIGHTS, HCRF_WEIGHTS, strict=True))
    missing = [layout[k] for k in HCRF_WEIGHTS if layout[k] is not None and layout[k] not in post]
    if missing:
        raise ValueError(f"posterior has no variables {missing}; pass weights=(theta_x, theta_y, "
                         "theta_e) names")
    named = [layout[k] for k in HCRF_WEIGHTS if layout[k] is not None]
    n = (int(np.prod(post[named[0]].shape[:2])) if named
         else int(np.prod([post.sizes[d] for d in ("chain", "draw") if d in post.sizes]) or 1))
    stack = []
    for k in HCRF_WEIGHTS:
        if layout.get(f"{k}_expression"):
            raise ValueError(f"the HCRF's {k} is an unnamed expression of free variables, so the "
                             "result holds no draws of it: wrap it in pm.Deterministic(name, ...) "
                             "and fit again")
        if layout[k] is None:
            value = np.asarray(layout[f"{k}_value"], dtype=np.float64)
            stack.append(np.broadcast_to(value, (n, *value.shape)))
        else:
            stack.append(np.asarray(post[layout[k]].values).reshape(-1, *post[layout[k]].shape[2:]))
    return stack


@register_predictor("hcrf_average")
def predict_hcrf_average(result: xr.DataTree, data, weights: tuple[str, str, str] | None = None,
                         *, draws: int | None = 200, model: pm.Model | None = None,
                         inference: str = "auto") -> Prediction:
    """``p(c | X)`` of a hidden CRF averaged over the ``posterior`` draws of any fit (MAP, NUTS,
    VI), ``draws`` of them evenly thinned (None: all).

    ``weights`` names the posterior variables (theta_x, theta_y, theta_e); default: the result's
    layout attrs (recorded by ``pmc.fit``: variable names, constants), else ``model``'s, else
    ``("theta_x", "theta_y", "theta_e")``. ``inference``: the engine of the hidden-state
    log Z.
    """
    from pymc_crf.distributions.hcrf import class_log_probs

    stack = _hcrf_weight_draws(result, weights, model)
    if draws is not None and stack[0].shape[0] > draws:
        keep = np.linspace(0, stack[0].shape[0] - 1, int(draws)).round().astype(int)
        stack = [a[keep] for a in stack]
    X = hcrf_test_features(data, stack[0].shape[1])
    probs = average_over_draws(np.exp(class_log_probs(data.graphs, X, a, b, c, inference))
                               for a, b, c in zip(*stack, strict=True))
    return prediction(probs, probs.argmax(axis=1), "hcrf_average", getattr(data, "labels", None),
                      per_graph=True)
