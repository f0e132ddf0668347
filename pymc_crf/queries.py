"""What users ask of a fitted CRF, answered from its posterior (``docs/posterior_queries.md``).

Every function takes a fitted result (any fitter's DataTree: one draw for ``map``, many for
``nuts``, ``ep``, ``bethe_laplace``, ...) and a :class:`pymc_crf.CRFData`, and averages over the
result's posterior draws as ``pmc.predict(method="average")`` does, reading the draws with the
predictors' helpers (``result_layout``, ``weight_draws``, ``draw_indices``,
``log_potentials_for``); a MAP result is the one-draw case.

* :func:`span_probabilities`: the probability that each predicted chunk (span) is exactly right,
  by constrained forward-backward (Culotta & McCallum 2004), averaged over draws; its
  reliability curve / ECE and selective-prediction curve.
* :func:`kbest`: the k most probable labellings of each sequence (list Viterbi) under a point
  estimate, or under the posterior predictive among the union of every draw's k best.
* :func:`sample_labellings`: labellings drawn from the posterior predictive (forward-filtering
  backward-sampling on chains).
* :func:`selective_prediction`: accuracy against coverage when abstaining on low confidence,
  token-level (largest marginal) or span-level (span probability).
* :func:`uncertainty` and :func:`select_for_labelling`: BALD (Houlsby et al. 2011) and the
  token entropy at the point estimate (Settles & Craven 2008) of each unlabelled sequence, and the
  sequences to label next.
* :func:`prior_from`: the Gaussian posterior of an ``ep`` / ``bethe_laplace`` result as the prior
  of a new model (sequential Bayesian updating).
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import pymc as pm
import xarray as xr

from pymc_crf.docstrings import fill_doc
from pymc_crf.inference.base import labelling_score, predictive_marginals
from pymc_crf.inference.kbest import KBest, kbest_labellings
from pymc_crf.inference.select import get_engine
from pymc_crf.inference.spans import (
    ChunkScheme,
    Spans,
    check_chain_batch,
    span_log_probabilities,
)
from pymc_crf.metrics import Reliability, SelectiveCurve, confidence_reliability, selective_curve
from pymc_crf.model.predictors import (
    Prediction,
    ResultGaussian,
    average_over_draws,
    check_result,
    draw_indices,
    log_potentials_for,
    posterior_mean,
    predict_average,
    result_gaussian,
    result_layout,
    tables_at,
    weight_draws,
    weight_sets_at,
)
from pymc_crf.validation import flag, generator, whole_number

if TYPE_CHECKING:
    from pymc_crf.datasets.base import CRFData

__all__ = ["SpanProbabilities", "Uncertainty", "kbest", "prior_from", "sample_labellings",
           "select_for_labelling", "selective_prediction", "span_probabilities", "uncertainty"]


# the parameters most queries take, worded once (filled into their docstrings by ``fill_doc``)
_PARAMETERS = {
    "result": """
        result : DataTree
            A fitted CRF result (one draw for ``map``, many for the others).""",
    "draws": """
        draws : int or None
            Posterior draws used (None: all), chosen without replacement with ``random_seed`` as
            ``pmc.predict(method="average")`` chooses them; a MAP result has one.""",
    "model": """
        model : pm.Model, optional
            Only for results that do not record their CRF layout (``pm.sample`` output).""",
    "inference": """
        inference : str
            Engine for ``data``'s graphs (``"auto"``: chain, junction tree, else loopy BP with a
            warning).""",
    "random_seed": """
        random_seed : int, optional
            Seed of the choice of draws.""",
    # an engine's results averaged over posterior draws: the four together
    "averaging": "%(draws)s\n%(model)s\n%(inference)s\n%(random_seed)s",
}
_shared_doc = fill_doc(_PARAMETERS)


# --- the result's draws as log-potential tables --------------------------------------------------

def _check_data(data) -> None:
    if not (hasattr(data, "graphs") and hasattr(data, "edge_features")):
        hint = (": the queries are about labellings of CRFs; a hidden CRF (pmc.HCRF) predicts "
                "one class per sequence, with pmc.predict" if hasattr(data, "n_classes") else "")
        raise TypeError("data must be a pmc.CRFData (graphs, features and optional labels); got "
                        f"{type(data).__name__}{hint}")


def _draw_tables(result: xr.DataTree, data, draws: int | None, model, random_seed
                 ) -> tuple[int, Iterator[tuple[np.ndarray, np.ndarray]]]:
    """The number of posterior draws used and an iterator over their (node, edge) log-potential
    tables on ``data``: ``draws`` of them chosen without replacement with ``random_seed`` (None:
    all), as ``pmc.predict(method="average")`` chooses them."""
    info, ws, idx = _chosen_draws(result, data, draws, model, random_seed)
    return len(idx), _tables_at(data, info, ws, idx)


def _chosen_draws(result: xr.DataTree, data, draws: int | None, model, random_seed
                  ) -> tuple[dict, dict, np.ndarray]:
    """The result's layout, its weight draws and the indices of the ``draws`` chosen (as
    :func:`_draw_tables` chooses them), for a query that passes over the same draws twice."""
    _check_data(data)
    if draws is not None:
        draws = whole_number(draws, "draws (None for all draws)")
    info = result_layout(result, model)
    ws = weight_draws(result, info)
    return info, ws, draw_indices(ws, draws, random_seed)


def _tables_at(data, info: dict, ws: dict, idx: np.ndarray) -> Iterator:
    """(node, edge) log-potential tables of ``data`` at the weight draws ``ws[...][s]``, s in
    ``idx`` (the predictors' ``tables_at``)."""
    return tables_at(data, info, weight_sets_at(ws, idx))


def _point_tables(result: xr.DataTree, data, model) -> tuple[np.ndarray, np.ndarray]:
    """Log-potential tables at the posterior mean (the MAP for a MAP result)."""
    _check_data(data)
    info = result_layout(result, model)
    mean = posterior_mean(result, weight_draws(result, info), info)
    return log_potentials_for(data, info, mean.get("node_weights"), mean.get("edge_weights"))


def _n_draws(result: xr.DataTree) -> int:
    check_result(result)
    post = result["posterior"]
    return int(post.sizes.get("chain", 1) * post.sizes.get("draw", 1))


# --- span probabilities ------------------------------------------------------------------------

@dataclass(frozen=True)
class SpanProbabilities:
    """Predicted spans and the posterior probability that each is exactly right.

    Attributes
    ----------
    graph : ndarray (S,)
        The graph of each span.
    start, end : ndarray (S,)
        Inclusive positions within the graph.
    type : ndarray (S,)
        The chunk type's name.
    probability : ndarray (S,)
        The posterior probability that the span is exactly right.
    correct : ndarray (S,) or None
        Whether the span is one of the gold chunks (when the data have labels, else None).
    match : str
        The event scored (:func:`span_probabilities`).
    """

    graph: np.ndarray
    start: np.ndarray
    end: np.ndarray
    type: np.ndarray
    probability: np.ndarray
    correct: np.ndarray | None
    match: str

    def __len__(self) -> int:
        return int(self.graph.size)

    def _outcomes(self, what: str) -> np.ndarray:
        if self.correct is None:
            raise ValueError(f"{what} needs the gold chunks: call span_probabilities with data "
                             "that have labels")
        if len(self) == 0:
            raise ValueError(f"{what}: there are no predicted spans")
        return self.correct

    def reliability(self, n_bins: int = 10) -> Reliability:
        """Reliability curve of the span probabilities against the spans' correctness.

        Parameters
        ----------
        n_bins : int, default 10
            Number of equal-width probability bins.

        Returns
        -------
        Reliability
            Its ``.ece`` is the span-level expected calibration error.

        Raises
        ------
        ValueError
            When the data had no labels (``correct`` is None) or there are no predicted spans.
        """
        return confidence_reliability(self.probability, self._outcomes("reliability"), n_bins)

    def selective(self) -> SelectiveCurve:
        """Span accuracy (precision) against coverage when abstaining on the least probable."""
        return selective_curve(self.probability, self._outcomes("selective"))


def _predicted_labels(result, data, labels, model) -> np.ndarray:
    if labels is None:  # the MAP labelling at the posterior mean (pmc.predict's "map")
        node, edge = _point_tables(result, data, model)
        return get_engine("chain", data.graphs).map_assignment(data.graphs, node, edge).labels
    if isinstance(labels, Prediction):
        labels = labels.labels
    return data.graphs.check_labels(labels)


def _spans_of(rows, schema: ChunkScheme) -> Spans:
    """:class:`Spans` from ``(graph, first, last, type name)`` rows."""
    rows = list(rows)
    if any(len(r) != 4 for r in rows):
        raise ValueError("spans must be (graph, first, last, type) tuples")
    unknown = sorted({str(r[3]) for r in rows} - set(schema.types))
    if unknown:
        raise ValueError(f"spans: types {unknown} are not among the tags' types {schema.types}")
    cols = [np.array([r[i] for r in rows], dtype=np.int64).reshape(-1) for i in range(3)]
    kind = np.array([schema.types.index(str(r[3])) for r in rows], np.int64)
    return Spans(*cols, kind)


@_shared_doc
def span_probabilities(result: xr.DataTree, data: CRFData, tags: Sequence[str], *, scheme: str = "BIO",
                       labels: np.ndarray | Prediction | None = None,
                       spans: Sequence[tuple[int, int, int, str]] | None = None,
                       match: str = "chunk", draws: int | None = 200,
                       model: pm.Model | None = None,
                       random_seed: int | None = 0) -> SpanProbabilities:
    """The probability that each predicted span (chunk) is exactly right, averaged over the
    posterior draws (chain CRFs).

    Parameters
    ----------
    %(result)s
    data : CRFData
        Chains to label; with labels, ``correct`` says which predicted spans are gold chunks.
    tags : sequence of str
        The tag of each label (``tags[k]`` for label ``k``): ``"O"``, ``"B-NP"``, ``"I-NP"``, ...
    scheme : {"BIO", "BIOES"}
        How tags form chunks (:mod:`pymc_crf.inference.spans`; BIO as conlleval reads it).
    labels : ndarray (N,) or Prediction, optional
        The labelling whose chunks are scored; default: the MAP labelling at the posterior mean
        (``pmc.predict(method="map")``).
    spans : sequence of (graph, first, last, type), optional
        Score these spans instead of a labelling's chunks (``match="chunk"`` only): e.g. the gold
        chunks, whose mean probability is the expected recall of the true labelling's chunks.
    match : {"chunk", "tags"}
        ``"chunk"``: P(the span is a chunk of the true labelling), the event chunk F1 counts as
        correct; ``"tags"``: P(the span's tags are exactly right and the next tag does not
        continue them), Culotta & McCallum 2004's constrained forward-backward.
    draws : int or None
        Posterior draws averaged over (None: all), chosen with ``random_seed``.
    %(model)s
    %(random_seed)s

    Returns
    -------
    SpanProbabilities
    """
    schema = ChunkScheme(tags, scheme)
    _check_data(data)
    check_chain_batch(data.graphs, "span probabilities")
    K = result_layout(result, model)["n_labels"]
    if K != schema.n_labels:
        raise ValueError(f"tags: {schema.n_labels} tags for a model with {K} labels")
    if spans is not None:
        if match != "chunk" or labels is not None:
            raise ValueError("spans= scores given spans as chunks: it takes match='chunk' and "
                             "no labels=")
        spans = _spans_of(spans, schema)
        spans.check(data.graphs, schema)
    else:
        labels = _predicted_labels(result, data, labels, model)
        spans = Spans.of_labelling(data.graphs, labels, schema)
    _, tables = _draw_tables(result, data, draws, model, random_seed)
    probs = average_over_draws(np.exp(span_log_probabilities(data.graphs, node, edge, spans,
                                                             schema, match=match, labels=labels))
                               for node, edge in tables)
    correct = None
    if data.labels is not None:
        b = data.graphs
        gold = {(g, k, s, e) for g in range(b.n_graphs)
                for k, s, e in schema.chunks(data.labels[b.node_offsets[g]:b.node_offsets[g + 1]])}
        correct = np.array([(g, k, s, e) in gold for g, k, s, e in
                            zip(spans.graph, spans.type, spans.start, spans.end, strict=True)],
                           dtype=bool)
    names = np.array(schema.types, dtype=object)[spans.type] if len(spans) else np.array([], object)
    return SpanProbabilities(spans.graph, spans.start, spans.end, names, probs, correct, match)


# --- k best and sampled labellings ---------------------------------------------------------------

@_shared_doc
def kbest(result: xr.DataTree, data: CRFData, k: int = 5, *, draws: int | None = 200,
          model: pm.Model | None = None, random_seed: int | None = 0) -> KBest:
    """The ``k`` most probable labellings of each chain and their log-probabilities.

    With one draw (a MAP result) these are the exact ``k`` best under it (list Viterbi,
    :mod:`pymc_crf.inference.kbest`). With several, the candidates are the union of every used
    draw's ``k`` best, each scored exactly by its posterior predictive probability
    ``mean_s p(y | x, w_s)``, and the ``k`` most probable candidates are returned: a labelling
    outside every draw's ``k`` best is not considered (exact search under the averaged
    distribution is intractable; such a labelling has probability below the ``k``-th under
    every draw).

    Parameters
    ----------
    %(result)s
    data : CRFData
        Chains to label.
    k : int
        Labellings per chain.
    %(draws)s
    %(model)s
    %(random_seed)s

    Returns
    -------
    KBest
        ``labels`` (k, N): row ``r`` holds each graph's labelling of rank ``r`` (-1 where a graph
        has fewer than ``k``); ``log_prob`` (k, G) their log-probabilities (posterior
        predictive); ``score`` (k, G) their unnormalised scores at the posterior mean.
    """
    k = whole_number(k, "k", minimum=1)
    _check_data(data)
    b = data.graphs
    check_chain_batch(b, "k-best labellings")
    # the candidates and log Z, then the candidates' scores: two passes over the same draws
    info, ws, idx = _chosen_draws(result, data, draws, model, random_seed)
    n, tables = len(idx), _tables_at(data, info, ws, idx)
    if n == 1:
        return kbest_labellings(b, *next(tables), k)
    cands, log_z = [], []
    engine = get_engine("chain", b)
    for node, edge in tables:
        cands.append(kbest_labellings(b, node, edge, k).labels)
        log_z.append(engine.log_partition(b, node, edge))
    rows = np.concatenate(cands)  # (n k, N)
    # the distinct candidates of each graph, as rows of one (C, N) array (padding: the graph's
    # first candidate, masked out)
    per_graph = []
    for g in range(b.n_graphs):
        seg = rows[:, b.node_offsets[g]:b.node_offsets[g + 1]]
        per_graph.append(np.unique(seg[(seg >= 0).all(axis=1)], axis=0))
    C = max(1, max(len(u) for u in per_graph))
    cand = np.empty((C, b.n_total_nodes), np.int64)
    valid = np.zeros((C, b.n_graphs), bool)
    for g, u in enumerate(per_graph):
        pad = u[:1] if len(u) else np.zeros((1, u.shape[1]), np.int64)  # none: no labelling
        cand[:, b.node_offsets[g]:b.node_offsets[g + 1]] = np.concatenate(
            [u, np.repeat(pad, C - len(u), axis=0)])
        valid[:len(u), g] = True
    acc = np.full((C, b.n_graphs), -np.inf)
    for (node, edge), lz in zip(_tables_at(data, info, ws, idx), log_z, strict=True):
        acc = np.logaddexp(acc, labelling_score(b, node, edge, cand) - lz[None, :])
    acc = np.where(valid, acc - np.log(n), -np.inf)
    order = np.argsort(-acc, axis=0, kind="stable")[:k]  # (k', G)
    labels = np.full((k, b.n_total_nodes), -1, np.int64)
    log_prob = np.full((k, b.n_graphs), -np.inf)
    for r in range(order.shape[0]):
        lp = acc[order[r], np.arange(b.n_graphs)]
        log_prob[r] = lp
        ok = np.isfinite(lp)[b.node_graph]
        labels[r, ok] = cand[order[r][b.node_graph], np.arange(b.n_total_nodes)][ok]
    node, edge = _point_tables(result, data, model)
    score = np.full((k, b.n_graphs), -np.inf)
    have = labels >= 0
    score[:] = np.where(np.isfinite(log_prob),
                        labelling_score(b, node, edge, np.where(have, labels, 0)), -np.inf)
    return KBest(labels, score, log_prob)


@_shared_doc
def sample_labellings(result: xr.DataTree, data: CRFData, n: int, *, model: pm.Model | None = None,
                      inference: str = "auto", random_seed: int | None = 0) -> np.ndarray:
    """``n`` labellings (n, N) of ``data``'s graphs drawn from the posterior predictive: each
    row from the CRF at a posterior draw chosen uniformly (with replacement), drawn by the
    engine's ``sample`` (forward-filtering backward-sampling on chains, exact on junction trees,
    Gibbs on loopy graphs); one table computation and one forward pass per distinct draw. A MAP
    result gives ``n`` draws from the CRF at the MAP weights.

    Parameters
    ----------
    %(result)s
    data : CRFData
        Graphs to label.
    n : int
        Number of labellings.
    %(model)s
    %(inference)s
    random_seed : int, optional
        Seed of the choice of draws and of the labellings.

    Returns
    -------
    ndarray (n, N) int64
    """
    n = whole_number(n, "n", minimum=0)
    _check_data(data)
    rng = generator(random_seed, "random_seed")
    S = _n_draws(result)
    counts = np.bincount(rng.integers(0, S, size=n), minlength=S)
    used = np.flatnonzero(counts)
    info = result_layout(result, model)
    engine = get_engine(inference, data.graphs)
    out = np.empty((n, data.graphs.n_total_nodes), np.int64)
    i = 0
    for s, (node, edge) in zip(used, _tables_at(data, info, weight_draws(result, info), used),
                               strict=True):
        out[i:i + counts[s]] = engine.sample(data.graphs, node, edge, int(counts[s]), rng)
        i += counts[s]
    return out[rng.permutation(n)]


# --- selective prediction ----------------------------------------------------------------------

@_shared_doc
def selective_prediction(result: xr.DataTree, data: CRFData, *, level: str = "token",
                         tags: Sequence[str] | None = None, scheme: str = "BIO",
                         draws: int | None = 200, model: pm.Model | None = None,
                         inference: str = "auto", random_seed: int | None = 0
                         ) -> SelectiveCurve:
    """Accuracy against coverage on ``data`` (which must have labels) when abstaining on the
    least confident predictions (:func:`pymc_crf.metrics.selective_curve`).

    ``level="token"``: each token's prediction is the argmax of its marginals averaged over
    ``draws`` posterior draws, its confidence the largest averaged marginal (any engine);
    ``level="span"``: each predicted chunk (of the MAP labelling at the posterior mean), its
    confidence its :func:`span_probabilities` (chain CRFs, ``tags`` and ``scheme`` needed), and
    accuracy is span precision.

    Parameters
    ----------
    %(result)s
    data : CRFData
        Labelled graphs.
    level : {"token", "span"}
    tags, scheme
        The chunk tag of each label and the scheme (``level="span"``; see
        :func:`span_probabilities`).
    %(averaging)s

    Returns
    -------
    SelectiveCurve
    """
    _check_data(data)
    if data.labels is None:
        raise ValueError("selective_prediction needs data with labels (to score the predictions)")
    if level == "span":
        if tags is None:
            raise ValueError("level='span' needs tags=, the chunk tag of each label")
        return span_probabilities(result, data, tags, scheme=scheme, draws=draws, model=model,
                                  random_seed=random_seed).selective()
    if level != "token":
        raise ValueError(f"level must be 'token' or 'span'; got {level!r}")
    pred = predict_average(result, data, draws=draws, model=model, inference=inference,
                           random_seed=random_seed)
    return selective_curve(pred.marginals.max(axis=1), pred.labels == data.labels)


# --- active learning ---------------------------------------------------------------------------

def _entropy(p: np.ndarray) -> np.ndarray:
    """Entropy (nats) of each row of (..., K) probabilities."""
    with np.errstate(divide="ignore", invalid="ignore"):
        return -np.sum(np.where(p > 0, p * np.log(p), 0.0), axis=-1)


def _averaged_marginals(result, data, draws, model, inference, random_seed):
    """Node marginals averaged over the draws and the mean per-node entropy over the draws."""
    n, tables = _draw_tables(result, data, draws, model, random_seed)
    engine = get_engine(inference, data.graphs)
    marg = ent = 0.0
    for node, edge in tables:
        m = predictive_marginals(engine, data.graphs, node, edge)
        marg = marg + m
        ent = ent + _entropy(m)
    return marg / n, ent / n, n


@dataclass(frozen=True)
class Uncertainty:
    """Per-sequence (G,) uncertainty scores of unlabelled sequences (nats).

    Attributes
    ----------
    bald : ndarray (G,)
        ``predictive_entropy - expected_entropy``: the mutual information between each
        position's label and the weights summed over positions (Houlsby et al. 2011, eq. 2; 0 for
        a one-draw result).
    predictive_entropy : ndarray (G,)
        Sum over positions of the entropy of the draw-averaged marginals.
    expected_entropy : ndarray (G,)
        Sum over positions of the mean over draws of each draw's marginal entropy.
    point_entropy : ndarray (G,)
        Sum of the marginal entropies at the posterior mean (for a MAP result, the MAP entropy:
        total token entropy, Settles & Craven 2008).
    n_draws : int
        The draws used.
    """

    bald: np.ndarray
    predictive_entropy: np.ndarray
    expected_entropy: np.ndarray
    point_entropy: np.ndarray
    n_draws: int


@_shared_doc
def uncertainty(result: xr.DataTree, data: CRFData, *, draws: int | None = 200,
                model: pm.Model | None = None, inference: str = "auto",
                random_seed: int | None = 0) -> Uncertainty:
    """BALD and entropy scores of each graph of ``data`` (see :class:`Uncertainty`), from the
    exact marginals of each of ``draws`` posterior draws (any engine ``inference`` names).

    Parameters
    ----------
    %(result)s
    data : CRFData
        Unlabelled (or labelled) graphs.
    %(averaging)s

    Returns
    -------
    Uncertainty
    """
    marg, ent, n = _averaged_marginals(result, data, draws, model, inference, random_seed)
    b = data.graphs

    def per_graph(v):
        return np.bincount(b.node_graph, weights=v, minlength=b.n_graphs)

    node, edge = _point_tables(result, data, model)
    point = predictive_marginals(get_engine(inference, b), b, node, edge)
    pred, exp_ = per_graph(_entropy(marg)), per_graph(ent)
    return Uncertainty(np.maximum(pred - exp_, 0.0), pred, exp_, per_graph(_entropy(point)), n)


@_shared_doc
def select_for_labelling(result: xr.DataTree, pool: CRFData, n: int, strategy: str = "bald", *,
                         per_token: bool = False, draws: int | None = 200,
                         model: pm.Model | None = None, inference: str = "auto",
                         random_seed: int | None = 0) -> np.ndarray:
    """Indices of the ``n`` graphs of ``pool`` (a CRFData, labels not needed) to label next.

    ``strategy``: ``"bald"`` (largest BALD score: where the posterior draws disagree; needs a
    result with several draws), ``"entropy"`` (largest total token entropy at the posterior mean,
    the MAP for a MAP result) or ``"random"`` (uniformly, with ``random_seed``). The scores are
    sums over positions, so they favour long sequences; ``per_token=True`` divides them by the
    sequence length (the cost of labelling a sequence).

    Parameters
    ----------
    %(result)s
    pool : CRFData
        The unlabelled graphs to choose from.
    n : int
        How many to choose.
    strategy : {"bald", "entropy", "random"}
    per_token : bool
        Divide the scores by the sequence lengths.
    %(draws)s
    %(model)s
    %(inference)s
    random_seed : int, optional
        Seed of the choice of draws (and of ``"random"``).

    Returns
    -------
    ndarray (n,) int
        Graph indices, highest score first (ties: lower index first).
    """
    _check_data(pool)
    n = whole_number(n, "n", minimum=0)
    G = pool.graphs.n_graphs
    if n > G:
        raise ValueError(f"n={n} graphs asked for; the pool has {G}")
    if strategy == "random":
        return generator(random_seed, "random_seed").choice(G, size=n, replace=False)
    if strategy not in ("bald", "entropy"):
        raise ValueError(f"strategy must be 'bald', 'entropy' or 'random'; got {strategy!r}")
    if strategy == "bald" and _n_draws(result) < 2:
        raise ValueError("strategy='bald' needs posterior draws (it measures how much they "
                         "disagree); this result has one draw (a MAP fit): use "
                         "strategy='entropy', or fit with nuts, ep or bethe_laplace")
    u = uncertainty(result, pool, draws=draws, model=model, inference=inference,
                    random_seed=random_seed)
    score = u.bald if strategy == "bald" else u.point_entropy
    if flag(per_token, "per_token"):
        score = score / pool.graphs.n_nodes
    return np.argsort(-score, kind="stable")[:n]


# --- continuing training -------------------------------------------------------------------------

_NAME = re.compile(r"^(?P<name>.+)\[(?P<index>[\d, ]*)\]$")
_GAUSSIAN_METHODS = "'laplace', 'bethe_laplace', 'ep', 'predictive_ard'"


def _gaussian(result: xr.DataTree) -> ResultGaussian:
    """The result's Gaussian posterior (:func:`~pymc_crf.model.predictors.result_gaussian`),
    refused by name where it has none."""
    gauss = result_gaussian(result)
    if gauss is None:
        method = result.attrs.get("method", "this fitter")
        raise ValueError(f"prior_from needs a Gaussian posterior (a 'fit' group with mean_vector "
                         f"and covariance_matrix or sd_vector); the result of {method!r} has "
                         f"none. Fit with method={_GAUSSIAN_METHODS} to get one")
    return gauss


def _layout(names: list[str], result: xr.DataTree) -> list[tuple[str, tuple, tuple | None]]:
    """``(variable, shape, dims)`` of the flat entries' variables, in flat order."""
    order, index = [], {}
    for row in names:
        m = _NAME.match(row)
        if m is None:
            raise ValueError(f"the fit group's row {row!r} is not 'name[i, j, ...]'")
        name = m["name"]
        if name not in index:
            order.append(name)
            index[name] = []
        elif order[-1] != name:
            raise ValueError(f"the fit group's rows of {name!r} are not contiguous")
        index[name].append(tuple(int(i) for i in m["index"].split(",") if i.strip()))
    post = result["posterior"] if "posterior" in result.children else None
    out = []
    for name in order:
        if post is not None and name in post:
            da = post[name]
            shape = tuple(int(s) for s in da.shape[2:])
            dims = tuple(str(d) for d in da.dims[2:])
            if any(re.fullmatch(rf"{re.escape(name)}_dim_\d+", d) for d in dims):
                dims = None  # ArviZ's default names: the variable had no dims
        else:
            shape = tuple(int(i) + 1 for i in np.max(index[name], axis=0)) if index[name][0] else ()
            dims = None
        if int(np.prod(shape)) != len(index[name]):
            raise ValueError(f"the fit group has {len(index[name])} entries of {name!r}; its "
                             f"posterior shape {shape} has {int(np.prod(shape))}")
        out.append((name, shape, dims))
    return out


def _check_model_coords(model: pm.Model, dim: str, size: int, name: str, post) -> None:
    """Refuse coords of the new model that are not the result's along a weight's dim: the prior
    of each entry is the posterior of the result's entry at the same position, so other or
    reordered features or labels would each get another one's posterior, and a dim of another
    length a variable whose dims do not match its shape."""
    values = model.coords[dim]
    length = len(values) if values is not None else int(model.dim_lengths[dim].eval())
    if length != size:
        raise ValueError(f"the new model's dim {dim!r} has {length} coords; the result's {name!r} "
                         f"has {size} entries along it (a model with other features or labels "
                         "cannot take this result's posterior as its prior)")
    if values is None or post is None or dim not in post.coords:
        return
    theirs = [str(v) for v in post.coords[dim].values]
    ours = [str(v) for v in values]
    if ours != theirs:
        i = next(i for i, (a, b) in enumerate(zip(ours, theirs, strict=True)) if a != b)
        raise ValueError(f"the new model's coords of {dim!r} are not the result's: position {i} "
                         f"is {ours[i]!r} in the model and {theirs[i]!r} in the result. "
                         "prior_from gives each entry the posterior of the result's entry at the "
                         "same position, so the coords must be the same, in the same order (or "
                         "leave the dim out of the new model's coords to take the result's)")


def prior_from(result: xr.DataTree, *, covariance: str = "auto", model: pm.Model | None = None,
               flat_name: str | None = None) -> dict:
    """The Gaussian posterior of ``result`` as the prior of the weights of a new model.

    Call inside a new ``pm.Model`` (or pass ``model=``); it creates the weight variables of the
    result's CRF with their names, shapes and dims (coords copied from the result's posterior
    where the model has none; coords it has must be the result's, in the same order),
    distributed as the result's Gaussian approximation ``N(mean_vector, covariance_matrix)``
    (its ``fit`` group, from ``laplace``, ``bethe_laplace``, ``ep``, ``predictive_ard``; a
    result that keeps only the marginal sds, ``sd_vector``, as ``laplace`` / ``bethe_laplace``
    with a diagonal or implicit covariance do, gives the diagonal prior). Then
    ``pmc.CRF(..., node_weights=w["W"], ...)`` on new data and any fit is the sequential
    Bayesian update ``p(w | D1, D2) ∝ p(D2 | w) N(w; m1, V1)``.

    Parameters
    ----------
    result : DataTree
        A fit with a Gaussian approximation in its ``fit`` group (``mean_vector`` and
        ``covariance_matrix`` or ``sd_vector``).
    covariance : {"auto", "full", "diagonal"}
        ``"full"``: one ``pm.MvNormal`` named ``flat_name`` over the flat weight vector (node
        weights first) and a ``pm.Deterministic`` of each weight variable reshaped from it
        (fitters that need independent Normal priors, ``ep`` and ``bethe_laplace``, refuse it;
        ``map`` and ``nuts`` take it, compiling the model); ``"diagonal"``: each weight variable a
        ``pm.Normal`` with the posterior means and marginal standard deviations (the
        correlations are dropped; every fitter takes it); ``"auto"``: diagonal when the
        covariance matrix is diagonal or the result has only marginal sds, else full.
    model : pm.Model, optional
        The model to add the variables to (default: the one in context).
    flat_name : str, optional
        Name of the flat ``pm.MvNormal`` (default: the weight names joined by ``_`` and
        ``"_flat"``).

    Returns
    -------
    dict
        Weight name -> its variable (a free ``pm.Normal`` or a ``pm.Deterministic``).
    """
    if covariance not in ("auto", "full", "diagonal"):
        raise ValueError(f"covariance must be 'auto', 'full' or 'diagonal'; got {covariance!r}")
    g = _gaussian(result)
    mean, cov, var, names = g.mean, g.cov, g.var, g.names
    d = mean.size
    if cov is None and covariance == "full":
        raise ValueError(f"the result of {result.attrs.get('method', 'this fitter')!r} keeps "
                         "only the posterior's marginal sds (sd_vector: a diagonal or implicit "
                         "covariance), so its prior can only be covariance='diagonal' (or "
                         "'auto'); fit with covariance='exact' for the full matrix")
    layout = _layout(names, result)
    try:
        model = pm.modelcontext(model)
    except TypeError as err:
        raise ValueError("prior_from creates variables in a model: call it inside a pm.Model "
                         "context or pass model=") from err
    post = result["posterior"] if "posterior" in result.children else None
    for name, shape, dims in layout:
        for dim, size in zip(dims, shape, strict=True) if dims else ():
            if dim not in model.coords:
                if post is None or dim not in post.coords:
                    raise ValueError(f"the new model has no coords for the dim {dim!r} of the "
                                     "result's weights; pass them in pm.Model(coords=...)")
                model.add_coord(dim, post.coords[dim].values)
            else:
                _check_model_coords(model, dim, size, name, post)
    if np.any(var <= 0):
        at = names[int(np.argmin(var))]
        if result.attrs.get("method") == "predictive_ard" and np.all(var >= 0):
            # ARD's removed features have weights fixed at exactly 0, which no Normal prior of a
            # free weight expresses
            raise ValueError(f"the fit group's covariance has a variance of 0 at {at!r}: "
                             "predictive_ard removed its feature (its weights are exactly 0), "
                             "and prior_from takes only results whose weights all have a "
                             "variance > 0; fit with method='ep' (no pruning) to continue "
                             "training")
        raise ValueError(f"the fit group's covariance has a variance <= 0 at {at!r}")
    diagonal = cov is None or covariance == "diagonal" or (
        covariance == "auto" and np.all(cov[~np.eye(d, dtype=bool)] == 0.0))
    out, i = {}, 0
    with model:
        if diagonal:
            for name, shape, dims in layout:
                size = int(np.prod(shape))
                out[name] = pm.Normal(name, mean[i:i + size].reshape(shape),
                                      np.sqrt(var[i:i + size]).reshape(shape), shape=shape,
                                      dims=dims)
                i += size
            return out
        flat = pm.MvNormal(flat_name or "_".join(n for n, _, _ in layout) + "_flat", mu=mean,
                           cov=0.5 * (cov + cov.T))
        for name, shape, dims in layout:
            size = int(np.prod(shape))
            out[name] = pm.Deterministic(name, flat[i:i + size].reshape(shape), dims=dims)
            i += size
    return out
