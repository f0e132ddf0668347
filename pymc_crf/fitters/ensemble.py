"""Prediction by an ensemble of posterior draws (Welling & Parise 2006 sec. 5).

Two ways to turn S weight draws ``lambda_s`` from the posterior into one labelling of a test graph:

* ``"bagging"``: the MAP labelling ``t_s`` of each draw votes for its labels with weight
  ``p(t_s | x, lambda_s)`` (its own probability), and each node takes the label with the most
  vote mass: bagging with posterior draws in place of bootstrap replicates, weighted by confidence.
* ``"supergraph"``: the S copies of the test graph, one per draw, are joined into one super-graph
  by edges between the copies of each node that force equal labels (fig. 1); the max-product
  labelling of the super-graph maximises ``sum_s log p(t | x, lambda_s)`` over labellings ``t``
  shared by all copies, so a confident copy can overrule many unsure ones. The copies of a node
  are joined in a chain (S - 1 equality edges); ``coupling=inf`` makes the constraints hard.

Both are registered as ``pmc.predict(result, data, method="bagging" | "supergraph")`` for any
result with posterior draws of a CRF's weights.
"""

from __future__ import annotations

import numpy as np
import xarray as xr

from pymc_crf.datasets.base import CRFData
from pymc_crf.graphs.batch import GraphBatch
from pymc_crf.inference.bp import BeliefPropagation
from pymc_crf.inference.select import get_engine
from pymc_crf.model.predictors import (
    Prediction,
    draw_indices,
    prediction,
    register_predictor,
    result_layout,
    tables_at,
    weight_draws,
    weight_sets_at,
)
from pymc_crf.validation import flag, positive_number

__all__ = ["predict_bagging", "predict_supergraph", "supergraph"]


@register_predictor("bagging")
def predict_bagging(result: xr.DataTree, data: CRFData, *, draws: int | None = 200,
                    model=None, inference: str = "auto", random_seed: int | None = 0,
                    weighted: bool = True) -> Prediction:
    """Vote of the per-draw MAP labellings, each weighted by its probability under its draw.

    ``weighted=False`` gives the plain majority vote. ``marginals`` are the normalised vote
    masses per node and label. Each draw's labelling is the engine's ``map_assignment``: the
    MAP for exact engines and BP (max-product, exact on trees), the per-node argmax of the
    beliefs for TreeEP and mean field (not the MAP, even on chains).
    """
    weighted = flag(weighted, "bagging: weighted")
    info = result_layout(result, model)
    weights = weight_draws(result, info)
    engine = get_engine(inference, data.graphs)
    if weighted and not getattr(engine, "has_log_z", True):
        raise ValueError(f"bagging weighs each draw's labelling by its probability, which needs "
                         f"log Z; the {engine.name} engine gives none: pass weighted=False (the "
                         "plain majority vote) or another inference")
    b = data.graphs
    votes = np.zeros((b.n_total_nodes, info["n_labels"]))
    rows = np.arange(b.n_total_nodes)
    used = weight_sets_at(weights, draw_indices(weights, draws, random_seed))
    for node, edge in tables_at(data, info, used):
        best = engine.map_assignment(b, node, edge)
        w = np.ones(b.n_graphs)
        if weighted:  # p(t_s | x, lambda_s) per graph: the MAP score minus log Z
            w = np.exp(best.score - engine.log_partition(b, node, edge))
        votes[rows, best.labels] += w[b.node_graph]
    marg = votes / np.maximum(votes.sum(axis=1, keepdims=True), 1e-300)
    return prediction(marg, votes.argmax(axis=1), "bagging", data.labels)


def supergraph(batch: GraphBatch, node_tables: list[np.ndarray], edge_tables: list[np.ndarray],
               coupling: float = np.inf) -> tuple[GraphBatch, np.ndarray, np.ndarray]:
    """The super-graph of S copies of ``batch`` (one per table set) joined by equality edges.

    Graph ``g`` of the result holds the S copies of graph ``g`` (copy s, node j at local id
    ``s * n_g + j``) and the chain of equality edges between consecutive copies of each node, with
    table 0 on the diagonal and ``-coupling`` off it (``-inf``: hard constraints). Returns the
    batch, node tables (N*S, K) and per-edge tables.
    """
    S = len(node_tables)
    K = node_tables[0].shape[1]
    E = batch.n_edges
    edge_lists, n_nodes, node_rows, big_edge = [], [], [], []
    eq = np.where(np.eye(K, dtype=bool), 0.0, -float(coupling))
    full = [np.broadcast_to(t, (E, K, K)) for t in edge_tables]
    for g in range(batch.n_graphs):
        n = int(batch.n_nodes[g])
        nidx = batch.node_index([g])
        eidx = batch.edge_index([g])
        local = batch.local_edges(g)
        edges = [local + s * n for s in range(S)]
        links = [np.stack([np.arange(n) + s * n, np.arange(n) + (s + 1) * n], axis=1)
                 for s in range(S - 1)]
        edge_lists.append(np.concatenate(edges + links).astype(np.int64).reshape(-1, 2))
        n_nodes.append(n * S)
        node_rows += [node_tables[s][nidx] for s in range(S)]
        big_edge += [full[s][eidx] for s in range(S)]
        big_edge.append(np.broadcast_to(eq, (n * (S - 1), K, K)))
    sb = GraphBatch.from_edges(edge_lists, n_nodes)
    return sb, np.concatenate(node_rows), np.ascontiguousarray(np.concatenate(big_edge))


@register_predictor("supergraph")
def predict_supergraph(result: xr.DataTree, data: CRFData, *, draws: int | None = 200,
                       model=None, inference: str = "auto", random_seed: int | None = 0,
                       coupling: float = np.inf, supergraph_inference="auto") -> Prediction:
    """Max-product labelling of the super-graph of ``draws`` posterior draws (fig. 1); the
    super-graph has ``draws`` copies of each test graph, so fewer draws (e.g. 20) are faster.

    ``supergraph_inference`` is the engine for the super-graph (a name or an Engine):
    ``"auto"`` takes the exact junction tree when the super-graph's treewidth allows and falls
    back to max-product BP (the paper's choice, with an ``ApproximateInferenceWarning``)
    otherwise. ``marginals`` are the normalised max-marginal beliefs of the first copy (BP) or
    the one-hot MAP labels (exact engines). ``coupling`` > 0 is the penalty of two copies of a
    node that disagree (``inf``, the default: hard constraints). ``inference`` does not apply
    (the test graphs are only solved inside the super-graph).
    """
    coupling = positive_number(coupling, "supergraph: coupling", allow_inf=True)
    if inference != "auto":
        raise ValueError("supergraph: inference= does not apply; supergraph_inference= is the "
                         f"engine of the super-graph (got inference={inference!r})")
    info = result_layout(result, model)
    weights = weight_draws(result, info)
    tabs = list(tables_at(data, info,
                          weight_sets_at(weights, draw_indices(weights, draws, random_seed))))
    b = data.graphs
    sb, node, edge = supergraph(b, [t[0] for t in tabs], [t[1] for t in tabs], coupling)
    engine = get_engine(supergraph_inference, sb)
    # node s*n_g + j of super-graph g is copy s of node j of graph g: read copy 0
    first = np.concatenate([sb.node_offsets[g] + np.arange(int(b.n_nodes[g]))
                            for g in range(b.n_graphs)])
    K = info["n_labels"]
    if isinstance(engine, BeliefPropagation):
        st = engine.run(sb, node, edge, max_product=True)
        lb = st.log_node[first]
        labels = lb.argmax(axis=1)
        marg = np.exp(lb - lb.max(axis=1, keepdims=True))
        marg /= marg.sum(axis=1, keepdims=True)
    else:
        labels = engine.map_assignment(sb, node, edge).labels[first]
        marg = np.eye(K)[labels]
    return prediction(marg, labels, "supergraph", data.labels)
