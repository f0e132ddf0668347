"""Imputing missing labels of a semi-supervised CRF: ``pmc.impute(result, model)``.

A ``pmc.CRF`` whose observed labels are partly missing (masked, NaN or ``-1``) sums the missing
labels out of its likelihood, so every fitter that handles it (``pm.sample`` / NUTS, MAP) fits the
weights alone, as PyMC does when a discrete variable is marginalised. The missing labels are then
drawn after the fact, for each posterior draw ``w_s``, from their exact conditional
``p(y_miss | y_obs, x, w_s)`` (an exact engine on tables clamped to the observed labels,
:mod:`pymc_crf.inference.clamp`, even for a model on loopy BP; the model's approximate engine,
with a warning, only beyond the junction tree's reach): a posterior predictive draw of the
labels, and the conditional marginals averaged over the draws (Rao-Blackwellised, so they carry
no sampling noise of the labels).

PyMC's automatic imputation instead splits a variable into observed and missing parts and samples
the missing part inside MCMC; for a label vector whose entries interact through the graph that
needs discrete steps and mixes slowly, while summing out is exact and leaves NUTS on a continuous
posterior. ``extend_inferencedata=True`` still stores the draws where PyMC would, as
``posterior["<name>_unobserved"]``.
"""

from __future__ import annotations

import json
from types import SimpleNamespace

import numpy as np
import pymc as pm
import xarray as xr

from pymc_crf.inference.base import ApproximateInferenceWarning, warn_at_caller
from pymc_crf.inference.select import get_engine
from pymc_crf.model.objective import CRFLogLikelihood
from pymc_crf.model.predictors import crf_attrs, log_potentials_for, weight_draws
from pymc_crf.model.spec import extract_crf
from pymc_crf.validation import flag, generator, whole_number

__all__ = ["impute"]


def impute(result: xr.DataTree, model: pm.Model | None = None, *, draws: int | None = None,
           random_seed: int | np.random.Generator | None = 0,
           extend_inferencedata: bool = False) -> xr.Dataset:
    """Posterior marginals and draws of the missing labels of the model's ``pmc.CRF``.

    Parameters
    ----------
    result : DataTree
        A fit of ``model`` with the CRF weights in its ``posterior`` (``pm.sample``,
        ``pmc.fit(method="nuts" | "map")``; one draw, e.g. MAP, gives the conditional marginals at
        those weights).
    model : pm.Model, optional
        The model whose observed CRF labels have missing entries (default: the context).
    draws : int, optional
        Use this many posterior draws, evenly thinned over (chain, draw) (default: all).
    random_seed : int or Generator, optional
        Seed of the label draws.
    extend_inferencedata : bool
        Also add the label draws to ``result``'s posterior as ``"<name>_unobserved"``, as PyMC's
        automatic imputation names them (needs all draws: ``draws=None``).

    Returns
    -------
    xarray.Dataset
        Over ``missing`` (one entry per missing label, in node order; coords ``node`` = flat node
        id, ``graph`` and ``position``): ``marginals`` (missing, label) the conditional marginals
        averaged over the draws, ``labels`` (missing,) their argmax, and ``draws``
        (chain, draw, missing) one label draw per posterior draw used.
    """
    model = pm.modelcontext(model)
    extend_inferencedata = flag(extend_inferencedata, "extend_inferencedata")
    if draws is not None:
        draws = whole_number(draws, "draws (None for all draws)")
    spec = extract_crf(model)
    lik = CRFLogLikelihood(spec)
    obs = lik.observed_labels
    if not obs.has_missing:
        raise ValueError(f"the labels of {spec.observed_name!r} have no missing entries to impute; "
                         "mark missing labels with -1 or a numpy masked array")
    post = result["posterior"]
    if extend_inferencedata and draws is not None:
        raise ValueError("extend_inferencedata=True stores one label draw per posterior draw; "
                         "leave draws=None")
    # the weights as predict reads them: free variables and pm.Deterministic by name from the
    # posterior, constants (pm.do, fixed arrays, pm.Data) from the model
    info = json.loads(crf_attrs(spec))
    weights = weight_draws(result, info)
    for key, ws in (("node_weights", spec.node_weights), ("edge_weights", spec.edge_weights)):
        if ws is not None and weights[key].shape[1:] != ws.shape:
            raise ValueError(f"the result's {info[key]!r} has shape {weights[key].shape[1:]}; "
                             f"the model's {key.replace('_', ' ')} have shape {ws.shape}: is "
                             "the result from another model?")
    n_chains, n_draws = (int(post.sizes["chain"]), int(post.sizes["draw"]))
    keep = np.arange(n_chains * n_draws)
    if draws is not None and draws < keep.size:
        keep = np.linspace(0, keep.size - 1, draws).round().astype(np.int64)
    rng = generator(random_seed, "random_seed")
    b = spec.batch
    part = obs.part(~obs.full)
    missing = ~obs.observed[part.nodes]
    nodes = part.nodes[missing]
    engine = lik.engine
    if not engine.exact:
        # a model fitted with an approximate engine (inference="bp", or graphs too wide for the
        # junction tree): the conditional is exact wherever an exact engine runs on the graphs,
        # within the model's own treewidth limit (its clique tables grow as K^(width + 1))
        auto = get_engine("auto", part.batch, max_treewidth=spec.info.max_treewidth, warn=False)
        if auto.exact:
            engine = auto
        else:
            warn_at_caller(f"pmc.impute: the graphs with missing labels are beyond the exact "
                           f"engines' reach (the model's max_treewidth="
                           f"{spec.info.max_treewidth}), so the conditional marginals are "
                           f"{engine.name}'s approximation ({engine.approximation}), not the "
                           "exact conditional",
                           ApproximateInferenceWarning)
    marg = np.zeros((nodes.size, spec.n_labels))
    label_draws = np.empty((keep.size, nodes.size), np.int64)
    fields = SimpleNamespace(graphs=b, node_features=spec.node_features,
                             edge_features=spec.edge_features)
    for i, s in enumerate(keep):
        node, edge = log_potentials_for(fields, info, *(
            None if weights.get(k) is None else weights[k][s]
            for k in ("node_weights", "edge_weights")))
        shared = edge.shape[0] == 1 and b.n_edges != 1
        tables = part.tables(node, edge, shared)
        marg += engine.marginals(part.batch, *tables).node[missing]
        label_draws[i] = engine.sample(part.batch, *tables, 1, rng)[0][missing]
    marg /= keep.size
    graph = b.node_graph[nodes]
    coords = {"missing": np.arange(nodes.size), "node": ("missing", nodes),
              "graph": ("missing", graph), "position": ("missing", nodes - b.node_offsets[graph]),
              "label": np.arange(spec.n_labels)}
    shape = (n_chains, n_draws) if keep.size == n_chains * n_draws else (1, keep.size)
    out = xr.Dataset(
        {"marginals": (("missing", "label"), marg),
         "labels": ("missing", marg.argmax(axis=1)),
         "draws": (("chain", "draw", "missing"), label_draws.reshape(*shape, nodes.size))},
        coords=coords, attrs={"observed": spec.observed_name, "n_draws_used": int(keep.size)})
    if extend_inferencedata:
        name = f"{spec.observed_name}_unobserved"
        dim = f"{name}_dim_0"
        result["posterior"] = post.to_dataset().assign(
            {name: (("chain", "draw", dim), out["draws"].values)}).assign_coords({dim: nodes})
    return out
