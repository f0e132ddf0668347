"""Corpora on Dask: prediction over partitions and the data-parallel MAP objective.

Two jobs run on a ``distributed.Client`` (a ``LocalCluster`` or a scheduler's address):

* :func:`predict`: ``pmc.predict`` over a corpus given as partitions (``CRFData`` in memory,
  futures of ``CRFData`` built on the workers, or a ``dask.bag`` of ``CRFData``). What prediction
  reads from the result (posterior draws, the ``fit`` group, the attrs) is broadcast to every
  worker once (``client.scatter(..., broadcast=True)``); each partition is predicted where it
  lives with the local ``pmc.predict`` and the pieces are concatenated in partition order, so the
  output equals the local call on the concatenated corpus.
* :func:`fit_map`: MAP by L-BFGS on a data-parallel objective. The CRF log-likelihood is a sum over
  graphs, so it splits into shards: each shard's
  :class:`~pymc_crf.model.objective.CRFLogLikelihood` is built on a worker from the shard's
  graphs and stays there (a future of the object, pinned to that worker); each evaluation
  broadcasts the weights, every shard returns its value and gradient, the shards of one worker are
  added on that worker and the workers' sums once more, and the client adds the Gaussian log
  prior and steps the optimiser. The objective is the single-process one, added in another
  order.

For corpora larger than the client's memory the shards are built on the workers from sentence
ranges of a CoNLL file (:func:`conll_shards`, with the vocabulary counted by the workers too:
:func:`conll_vocabulary`); the client then holds only the weights, the prior and the optimiser's
history. See ``docs/distributed.md``.
"""

from __future__ import annotations

import itertools
import json
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import xarray as xr
from scipy.optimize import root

from pymc_crf.columns import count_sentences, read_conll_range
from pymc_crf.datasets.base import CRFData
from pymc_crf.datasets.text import token_features
from pymc_crf.features import FeatureVectorizer, encode_tags, sequence_batch
from pymc_crf.fitters.covariance import DenseGaussian, inverse_pd
from pymc_crf.fitters.map import negative_log_posterior, weight_start
from pymc_crf.fitters.optimise import STRICT_FTOL, STRICT_GTOL, OptimiserDiagnostics, find_map
from pymc_crf.inference.chain.dispatch import batch_tier, pinned_tier
from pymc_crf.model.objective import CRFLogLikelihood, GaussianLogPrior
from pymc_crf.model.predictors import check_feature_columns, prediction
from pymc_crf.model.results import build_result
from pymc_crf.model.spec import (
    CRFSpec,
    check_observed_labels,
    extract_crf,
    other_model_terms,
    require_gaussian_prior,
)
from pymc_crf.predict import Prediction
from pymc_crf.predict import predict as local_predict
from pymc_crf.validation import positive_number, whole_number

if TYPE_CHECKING:
    import pymc as pm
    from distributed import Client, Future
    from pymc.util import RandomGenerator

__all__ = ["ShardData", "ShardedLogLikelihood", "conll_shard", "conll_shards", "conll_vocabulary",
           "connected", "count_sentences", "fit_laplace", "fit_map", "polish", "predict",
           "prediction_payload", "read_conll_range", "sentence_ranges", "shard_ranges"]

#: result groups prediction never reads (training-sized, or the fitter's own records)
_NOT_FOR_PREDICTION = ("log_likelihood", "observed_data", "constant_data", "predictions",
                       "predictions_constant_data", "sample_stats", "warmup_posterior",
                       "warmup_sample_stats", "optimizer_result", "diagnostics")


@contextmanager
def connected(client: Client | str) -> Iterator[Client]:
    """``client`` itself, or a ``distributed.Client`` of the scheduler at the address ``client``
    (closed on exit).

    A context manager (``with connected(client) as c: ...``).

    Parameters
    ----------
    client : distributed.Client or str
        A client (yielded as it is, and left open on exit), or the address of a running
        scheduler (``"tcp://host:8786"``).

    Yields
    ------
    distributed.Client
        ``client`` itself, or a new client of the scheduler at that address, closed on exit.
    """
    if client is None:
        raise TypeError("pmc.distributed needs a distributed.Client or a scheduler's address "
                        "(\"tcp://host:8786\"); got None (pmc.predict and pmc.fit run in this "
                        "process)")
    if not isinstance(client, str):
        if getattr(client, "status", None) in ("closing", "closed"):
            raise ValueError(f"the Dask client is {client.status}: pass an open "
                             "distributed.Client or a scheduler's address")
        yield client
        return
    from distributed import Client

    with Client(client) as c:
        yield c


# ---------------------------------------------------------------------------------- prediction
def prediction_payload(result: xr.DataTree) -> xr.DataTree:
    """The part of ``result`` a predictor reads: the ``posterior`` and ``fit`` groups (and any
    group a fitter added for its predictor) and the attrs, without the training-sized groups
    (``log_likelihood``, ``observed_data``, ...).

    Parameters
    ----------
    result : xarray.DataTree
        A fitter's result.

    Returns
    -------
    xarray.DataTree
        A new tree of ``result``'s groups except ``log_likelihood``, ``observed_data``,
        ``constant_data``, ``predictions``, ``predictions_constant_data``, ``sample_stats``,
        ``warmup_posterior``, ``warmup_sample_stats``, ``optimizer_result`` and
        ``diagnostics``, with ``result``'s attrs.
    """
    keep = {name: result[name].to_dataset() for name in result.children
            if name not in _NOT_FOR_PREDICTION}
    out = xr.DataTree.from_dict(keep)
    out.attrs.update(result.attrs)
    return out


def _predict_partition(payload: xr.DataTree, data: CRFData, method: str, options: dict,
                       tier: str | None = None
                       ) -> tuple[np.ndarray, np.ndarray, np.ndarray | None, bool]:
    """One partition's marginals, labels, true labels and ``per_graph``, by the local
    ``pmc.predict``, chain batches run in the whole corpus's kernel tier ``tier``."""
    with pinned_tier(tier):
        pred = local_predict(payload, data, method, **options)
    return pred.marginals, pred.labels, data.labels, pred.per_graph


def _predict_items(payload: xr.DataTree, items: Sequence[CRFData], method: str, options: dict,
                   tier: str | None = None
                   ) -> list[tuple[np.ndarray, np.ndarray, np.ndarray | None, bool]]:
    """:func:`_predict_partition` of every ``CRFData`` of one ``dask.bag`` partition."""
    return [_predict_partition(payload, d, method, options, tier) for d in items]


def _chain_sizes(items) -> tuple[int, int, bool]:
    """Positions, longest graph and whether every graph is a chain, of a partition (a
    ``CRFData`` or a list of them)."""
    items = items if isinstance(items, list | tuple) else [items]
    n, longest, chains = 0, 0, True
    for d in items:
        g = d.graphs
        n += int(g.n_total_nodes)
        longest = max(longest, int(np.max(g.n_nodes, initial=0)))
        chains = chains and bool(g.is_chain)
    return n, longest, chains


def _corpus_tier(sizes, n_labels: int | None) -> str | None:
    """The chain-engine tier the whole corpus would run in locally (None: not all chains)."""
    if n_labels is None or not sizes or not all(c for _, _, c in sizes):
        return None
    return batch_tier(sum(n for n, _, _ in sizes), max(m for _, m, _ in sizes), n_labels)


def predict(result: xr.DataTree, partitions: Any, method: str = "average", *,
            client: Client | str, **options: Any) -> Prediction:
    """``pmc.predict`` over a partitioned corpus on a Dask cluster.

    Parameters
    ----------
    result : DataTree
        A fitter's result; what prediction reads is broadcast to every worker once.
    partitions : sequence of CRFData or of Futures of CRFData, or dask.bag.Bag of CRFData
        The corpus, in order. ``CRFData`` held by the client are scattered to the workers;
        futures (e.g. from :func:`conll_shards`) are predicted where they live; a bag's items are
        predicted in the bag's order.
    method : str
        Any ``pmc.predict`` method (``"average"``, ``"bpe"``, ``"map"``, ``"model_average"``, ...).
    client : distributed.Client or str
        A client, or the address of a running scheduler (``"tcp://host:8786"``).
    **options
        ``pmc.predict``'s options (``draws``, ``random_seed``, ``inference``, ``model``, a
        predictor's own). ``predictions`` and ``sample_labels`` (storing into the result) are not
        available here: the corpus is not on the client.

    Returns
    -------
    Prediction
        The partitions' marginals and labels concatenated in order, and the error rate over the
        whole corpus when every partition has labels: equal to ``pmc.predict`` on the
        concatenated corpus (same draws, same seed; each graph's marginals do not depend on the
        other graphs of its batch).

    Raises
    ------
    ValueError
        When ``predictions`` or ``sample_labels`` is given true, or ``partitions`` is an empty
        sequence.
    """
    for name in ("predictions", "sample_labels"):
        if options.get(name):
            raise ValueError(f"pmc.distributed.predict does not take {name}=: the corpus is not "
                             "on the client; store the prediction of a corpus that fits in "
                             "memory with pmc.predict")
        options.pop(name, None)
    with connected(client) as c:
        return _predict(result, partitions, method, c, options)


def _predict(result: xr.DataTree, partitions: Any, method: str, client: Client, options: dict
             ) -> Prediction:
    """:func:`predict` with a client. Chain corpora are run in the kernel tier the whole corpus
    would take locally (``pinned_tier``), so every graph's numbers equal the local call's."""
    n_labels = int(json.loads(result.attrs["crf"])["n_labels"]) if "crf" in result.attrs \
        else None
    payload = client.scatter(prediction_payload(result), broadcast=True, hash=False)
    try:
        import dask.bag as db
    except ImportError:  # pragma: no cover - dask.distributed depends on dask
        db = None
    if db is not None and isinstance(partitions, db.Bag):
        import dask

        parts = partitions.to_delayed()
        sizes = client.gather(client.compute([dask.delayed(_chain_sizes)(p) for p in parts]))
        tier = _corpus_tier(sizes, n_labels)
        tasks = [dask.delayed(_predict_items)(payload, part, method, options, tier)
                 for part in parts]
        pieces = list(itertools.chain.from_iterable(client.gather(client.compute(tasks))))
    else:
        parts = list(partitions)
        if not parts:
            raise ValueError("pmc.distributed.predict needs at least one partition")
        from distributed import Future

        local = [i for i, p in enumerate(parts) if not isinstance(p, Future)]
        if local:
            scattered = client.scatter([parts[i] for i in local], hash=False)
            for i, fut in zip(local, scattered, strict=True):
                parts[i] = fut
        sizes = client.gather([client.submit(_chain_sizes, p, pure=False) for p in parts])
        tier = _corpus_tier(sizes, n_labels)
        futures = [client.submit(_predict_partition, payload, p, method, options, tier,
                                 pure=False) for p in parts]
        pieces = client.gather(futures)
    marginals = np.concatenate([p[0] for p in pieces], axis=0)
    labels = np.concatenate([p[1] for p in pieces], axis=0)
    truth = None
    if all(p[2] is not None for p in pieces):
        truth = np.concatenate([p[2] for p in pieces], axis=0)
    return prediction(marginals, labels, method, truth,
                      per_graph=bool(pieces[0][3]))


# ---------------------------------------------------------------------------------- shards
@dataclass(frozen=True)
class ShardData:
    """One shard of a CRF likelihood: its graphs, flat labels (-1: missing) and features.

    Attributes
    ----------
    graphs : GraphBatch
        The shard's graphs.
    labels : ndarray (N,) int
        One label per node of ``graphs`` (flat, graph after graph; -1: missing).
    node_features : ndarray or scipy.sparse CSR (N, F), or None
        The nodes' features, if the CRF has node features.
    edge_features : ndarray or scipy.sparse CSR (E, Fe), or None
        The edges' features, if the CRF has edge features.
    """

    graphs: Any
    labels: np.ndarray
    node_features: Any = None
    edge_features: Any = None

    @classmethod
    def from_crf_data(cls, data: CRFData) -> ShardData:
        """The graphs, labels and features of a labelled ``CRFData``.

        Parameters
        ----------
        data : CRFData
            A data set with labels.

        Returns
        -------
        ShardData
            ``data.graphs``, ``data.labels`` (as an ndarray), ``data.node_features`` and
            ``data.edge_features``.

        Raises
        ------
        ValueError
            When ``data.labels`` is None.
        """
        if data.labels is None:
            raise ValueError("a training shard needs labels; this CRFData has none")
        return cls(data.graphs, np.asarray(data.labels), data.node_features, data.edge_features)


def shard_ranges(n_graphs: int, n_shards: int) -> list[tuple[int, int]]:
    """``n_shards`` contiguous ``[start, stop)`` graph ranges of near-equal length covering
    ``0..n_graphs`` (none empty).

    Parameters
    ----------
    n_graphs : int
        How many graphs (at least 1).
    n_shards : int
        How many ranges (at least 1, at most ``n_graphs``).

    Returns
    -------
    list of tuple of (int, int)
        The ``(start, stop)`` pairs, in order; each range's ``stop`` is the next one's
        ``start``.

    Raises
    ------
    ValueError
        When ``n_shards`` is more than ``n_graphs``, or either is not a whole number of at
        least 1.
    """
    n_graphs = whole_number(n_graphs, "n_graphs", minimum=1)
    n_shards = whole_number(n_shards, "n_shards", minimum=1)
    if n_shards > n_graphs:
        raise ValueError(f"n_shards={n_shards} is more than the {n_graphs} graphs")
    edges = np.linspace(0, n_graphs, n_shards + 1).round().astype(int)
    return [(int(a), int(b)) for a, b in itertools.pairwise(edges)]


def _split_spec(spec: CRFSpec, n_shards: int) -> list[ShardData]:
    """The model's CRF data in ``n_shards`` contiguous graph ranges."""
    b = spec.batch
    out = []
    for start, stop in shard_ranges(b.n_graphs, n_shards):
        g = np.arange(start, stop)
        nidx, eidx = b.node_index(g), b.edge_index(g)
        xe = None
        if spec.edge_features is not None:
            xe = spec.edge_features[eidx]
        out.append(ShardData(b.subset(g), np.asarray(spec.labels)[nidx],
                             None if spec.node_features is None else spec.node_features[nidx],
                             xe))
    return out


def _layout(spec: CRFSpec) -> CRFSpec:
    """``spec`` without its model and data: what a worker combines with a shard."""
    return replace(spec, model=None, info=None, batch=None, labels=None, node_features=None,
                   edge_features=None)


def _build_shard(layout: CRFSpec, engine, shard: ShardData | CRFData) -> CRFLogLikelihood:
    """The shard's log-likelihood object (runs on the worker that keeps it)."""
    if isinstance(shard, CRFData):
        shard = ShardData.from_crf_data(shard)
    # a shard built on the worker is checked only here: a wrong width would otherwise fail in
    # the first feature product ("shapes (12,3) and (6,4) not aligned"). The layout holds no
    # data, so a (K, K) edge weight (ndim 2) tells the shared table from per-edge (Fe, K, K) ones.
    wanted = [("node", shard.node_features, layout.node_weights)]
    if layout.edge_weights is not None and len(layout.edge_weights.shape) == 3:
        wanted.append(("edge", shard.edge_features, layout.edge_weights))
    for what, x, w in wanted:
        if w is None:
            continue
        if x is None:
            raise ValueError(f"the shard has no {what} features; the model's {what} weights "
                             f"need {w.shape[0]} columns")
        check_feature_columns(what, x, w.shape[0])
    spec = replace(layout, batch=shard.graphs, labels=np.asarray(shard.labels),
                   node_features=shard.node_features, edge_features=shard.edge_features)
    return CRFLogLikelihood(spec, engine=engine)


def _shard_size(lik: CRFLogLikelihood) -> int:
    return int(lik.batch.n_graphs)


def _value_and_grad(lik: CRFLogLikelihood, w: np.ndarray) -> tuple[float, np.ndarray]:
    return lik(w)


def _pointwise(lik: CRFLogLikelihood, w: np.ndarray) -> np.ndarray:
    """Per-graph log-likelihood of the shard at one weight vector (d,) or at each row of (S, d)."""
    if w.ndim == 1:
        return lik.pointwise(w)
    return np.stack([lik.pointwise(row) for row in w])


def _negative_hessian(lik: CRFLogLikelihood, w: np.ndarray) -> np.ndarray:
    """The shard's negative log-likelihood Hessian (d, d) at ``w``: ``J^T C J`` minus the
    probit potentials' curvature term, as the exact Laplace fit computes it
    (:mod:`pymc_crf.fitters.bethe_laplace.curvature`; Welling & Parise 2006, eq. (12))."""
    from pymc_crf.fitters.bethe_laplace.curvature import fisher_matrix, potential_curvature

    A = fisher_matrix(lik, w, lik.engine)
    if lik.potential != "loglinear":
        node, edge = lik.log_potentials(w)
        m = lik.engine.marginals(lik.batch, node, edge)
        extra = potential_curvature(lik, w, m.node, m.edge)
        if extra is not None:
            A = A - extra
    return A


def _add(*pairs: tuple[float, np.ndarray]) -> tuple[float, np.ndarray]:
    """Sum of (value, gradient) pairs, in the order given."""
    value, grad = pairs[0][0], pairs[0][1].copy()
    for v, g in pairs[1:]:
        value += v
        grad += g
    return value, grad


def _shards_value_and_grad(w: np.ndarray, *liks: CRFLogLikelihood) -> tuple[float, np.ndarray]:
    """Sum of (value, gradient) over the shards of one worker, in the order given."""
    return _add(*[lik(w) for lik in liks])


# Weights up to this size travel inside an evaluation's tasks; larger ones are scattered to the
# workers first. A scatter is a round trip of its own before the tasks can be sent (measured on
# a local cluster: 36 ms an evaluation with a scatter and a task per shard, 11 ms with the
# weights in one task per worker), while weights of 10^5-10^6 would make every task large.
_EMBED_BYTES = 1 << 20


class ShardedLogLikelihood:
    """``log p(y | x, w)`` and its gradient summed over shards that live on Dask workers.

    Parameters
    ----------
    client : distributed.Client
    spec : CRFSpec
        The model's CRF (``extract_crf``): the weights' layout, priors, potential and engine. Its
        own graphs are the data unless ``shards`` is given.
    n_shards : int, optional
        Split the model's graphs into this many contiguous shards (default: one per worker),
        scattered to the workers in turn.
    shards : list of Future, optional
        Shards already on the workers (futures of ``CRFData`` or :class:`ShardData`, e.g. from
        :func:`conll_shards`), in corpus order; the model's graphs are then not used.

    Notes
    -----
    Each shard's :class:`~pymc_crf.model.objective.CRFLogLikelihood` is built by a task pinned
    to the worker holding the shard's data, and every evaluation is pinned there too, so the
    shard objects never move. :meth:`close` releases them.
    """

    def __init__(self, client: Client, spec: CRFSpec, n_shards: int | None = None,
                 shards: Sequence[Future] | None = None):
        self.client = client
        self.size = spec.flat_size
        workers = sorted(client.scheduler_info()["workers"])
        if not workers:
            raise ValueError("the Dask cluster has no workers")
        token = uuid.uuid4().hex[:8]
        layout = client.scatter(_layout(spec), broadcast=True, hash=False)
        engine = client.scatter(spec.engine, broadcast=True, hash=False)
        if shards is None:
            n_shards = len(workers) if n_shards is None else whole_number(n_shards, "n_shards")
            data = _split_spec(spec, n_shards)
            placed = [(client.scatter(d, workers=[workers[i % len(workers)]], hash=False),
                       workers[i % len(workers)]) for i, d in enumerate(data)]
        else:
            shards = list(shards)
            if not shards:
                raise ValueError("shards is empty")
            who = client.who_has(shards)
            placed = [(s, sorted(who.get(s.key, ()))[0] if who.get(s.key) else
                       workers[i % len(workers)]) for i, s in enumerate(shards)]
        self.workers = [w for _, w in placed]
        # each worker's shards in corpus order: one task a worker sums them
        self._by_worker: dict[str, list[Future]] = {}
        self.shards = [client.submit(_build_shard, layout, engine, s, workers=[w],
                                     allow_other_workers=False, pure=False,
                                     key=f"pymc-crf-shard-{token}-{i}")
                       for i, (s, w) in enumerate(placed)]
        self.n_graphs = client.gather([
            client.submit(_shard_size, s, workers=[w], allow_other_workers=False, pure=False)
            for s, w in zip(self.shards, self.workers, strict=True)])
        for s, w in zip(self.shards, self.workers, strict=True):
            self._by_worker.setdefault(w, []).append(s)
        # the data this object scattered (not the caller's shards, which stay theirs)
        self._layout, self._engine = layout, engine
        self._data = [s for s, _ in placed] if shards is None else []
        self.n_evaluations = 0

    @property
    def n_shards(self) -> int:
        return len(self.shards)

    def _weights(self, w: np.ndarray) -> np.ndarray | Future:
        """The weights as a task argument: the array itself when small, else scattered."""
        w = np.asarray(w, dtype=np.float64)
        if w.nbytes <= _EMBED_BYTES:
            return w
        return self.client.scatter(w, broadcast=True, hash=False)

    def _on_shards(self, fn, w: np.ndarray) -> list[Future]:
        wf = self._weights(w)
        return [self.client.submit(fn, s, wf, workers=[addr], allow_other_workers=False,
                                   pure=False)
                for s, addr in zip(self.shards, self.workers, strict=True)]

    def __call__(self, w: np.ndarray) -> tuple[float, np.ndarray]:
        """Total log-likelihood and its gradient (d,) at the flat weights ``w``."""
        wf = self._weights(w)
        sums = [self.client.submit(_shards_value_and_grad, wf, *shards, workers=[addr],
                                   allow_other_workers=False, pure=False)
                for addr, shards in sorted(self._by_worker.items())]
        if isinstance(wf, np.ndarray):  # small: the workers' sums come to the client
            value, grad = _add(*self.client.gather(sums))
        else:  # large: one gradient leaves the workers, not one a worker
            total = sums[0] if len(sums) == 1 else self.client.submit(_add, *sums, pure=False)
            value, grad = total.result()
        self.n_evaluations += 1
        return float(value), np.asarray(grad)

    def pointwise(self, w: np.ndarray) -> np.ndarray:
        """Per-graph log-likelihood (G,) in shard order at the weights ``w`` (d,), or (S, G) at
        each row of ``w`` (S, d).

        Parameters
        ----------
        w : ndarray (d,) or (S, d)
            Flat weights, or one flat weight vector per row.

        Returns
        -------
        ndarray (G,) or (S, G)
            Each graph's log-likelihood, the shards' graphs in order.
        """
        return np.concatenate(self.client.gather(self._on_shards(_pointwise, w)), axis=-1)

    def negative_hessian(self, w: np.ndarray) -> np.ndarray:
        """The log-likelihood's negative Hessian (d, d) at ``w``, each shard's computed on its
        worker and the sum formed on the client (dense: for d up to a few thousand).

        Each shard's is ``J^T C J`` minus the probit potentials' curvature term, as the exact
        Laplace fit computes it (:mod:`pymc_crf.fitters.bethe_laplace.curvature`).

        Parameters
        ----------
        w : ndarray (d,)
            Flat weights.

        Returns
        -------
        ndarray (d, d)
            The summed negative Hessian, symmetrised (``(A + A.T) / 2``).
        """
        parts = self.client.gather(self._on_shards(_negative_hessian, w))
        A = parts[0].copy()
        for P in parts[1:]:
            A += P
        return 0.5 * (A + A.T)

    def close(self) -> None:
        """Release the shard objects (and the data scattered for them) on the workers."""
        self.client.cancel([*self.shards, *self._data, self._layout, self._engine])
        self.shards, self._by_worker = [], {}

    def __enter__(self) -> ShardedLogLikelihood:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


# ---------------------------------------------------------------------------------- MAP
def _optimise(objective, x0: np.ndarray, maxiter: int, gtol: float, ftol: float,
              optimizer: str, progressbar: bool) -> tuple[np.ndarray, OptimiserDiagnostics]:
    """:func:`~pymc_crf.fitters.optimise.find_map` on the client under the strict rule (the mode
    itself, as the single-process fit it must equal), with the fit's name in its messages."""
    x, diag = find_map(objective, x0, rule="strict", maxiter=maxiter, gtol=gtol, ftol=ftol,
                       optimizer=optimizer, progress=progressbar,
                       description="MAP on Dask (L-BFGS iterations)",
                       what="pmc.distributed.fit_map",
                       consequence="the weights returned are not the posterior mode")
    if not np.isfinite(diag.objective):
        raise ValueError("pmc.distributed.fit_map: the log posterior is -inf or NaN at every "
                         "point L-BFGS tried: check the priors and the start")
    return x, diag


def polish(gradient: Callable[[np.ndarray], np.ndarray], x0: np.ndarray, gtol: float,
           maxiter: int = 50) -> tuple[np.ndarray, int]:
    """Newton-Krylov on the gradient from ``x0`` until its largest entry is at most ``gtol``.

    L-BFGS stops where the objective stops decreasing in floating point: near the mode
    ``f - f* ~ g' H^-1 g / 2`` falls below ``eps |f|`` while the gradient is still
    ``~ sqrt(eps |f| lambda)`` (6e-8 on the loop model of ``tests/conftest.py``, whose weights
    are then 6e-7 from the mode). Solving ``grad = 0`` with residual-based steps (scipy's
    ``newton_krylov``: Jacobian-vector products by finite differences of the gradient, a line
    search on the residual norm) uses the gradient alone, which keeps its accuracy there.

    Parameters
    ----------
    gradient : callable
        The gradient: flat weights (d,) to an ndarray (d,).
    x0 : ndarray (d,)
        The start (e.g. L-BFGS's point).
    gtol : float
        The stopping rule: largest absolute gradient entry at most this (positive).
    maxiter : int, default 50
        Most Newton iterations (scipy's ``root(method="krylov")`` ``maxiter``).

    Returns
    -------
    x : ndarray (d,)
        The point (``x0`` as float64 when its gradient already meets ``gtol``).
    n_iterations : int
        The number of Newton iterations (0 when ``x0`` already meets ``gtol``).

    Raises
    ------
    ValueError
        When Newton-Krylov does not reach ``gtol`` in ``maxiter`` iterations, or ``gtol`` is
        not a positive number.
    """
    gtol = positive_number(gtol, "polish_gtol")
    if np.max(np.abs(gradient(x0))) <= gtol:
        return np.asarray(x0, dtype=np.float64), 0
    res = root(gradient, np.asarray(x0, dtype=np.float64), method="krylov",
               options={"fatol": gtol, "maxiter": maxiter})
    if not res.success:
        raise ValueError(f"polish: Newton-Krylov did not reach max |gradient| <= {gtol} in "
                         f"{maxiter} iterations ({res.message})")
    return res.x, int(res.nit)


def fit_map(model: pm.Model, client: Client | str, n_shards: int | None = None, *,
            shards: Sequence[Future] | None = None, maxiter: int = 2000,
            gtol: float = STRICT_GTOL, ftol: float = STRICT_FTOL, optimizer: str = "auto",
            start: dict | None = None,
            polish_gtol: float | None = None, log_likelihood: bool = True,
            progressbar: bool = False) -> xr.DataTree:
    """MAP of a CRF's weights with the log-likelihood computed data-parallel on Dask.

    The model must be what ``method="map"``'s engine objective takes: one ``pmc.CRF`` likelihood
    with an exact engine and fixed Normal priors on its weights, and nothing else free. The
    optimiser (the package's L-BFGS from 10^4 weights on, else scipy's L-BFGS-B, as
    ``method="map"`` with ``optimizer="auto"``) runs on the client; the log-likelihood and its
    gradient come from :class:`ShardedLogLikelihood`.

    Parameters
    ----------
    model : pm.Model
        The CRF model. With ``shards``, only its weights, priors, potential and engine are used
        (a template: e.g. the same model built on one sentence), not its graphs.
    client : distributed.Client or str
        A client, or the address of a running scheduler.
    n_shards : int, optional
        Split the model's graphs into this many contiguous shards (default: one per worker).
    shards : list of Future, optional
        Shards built on the workers (:func:`conll_shards`), in corpus order.
    maxiter, gtol, ftol, optimizer, start
        As ``pmc.fit(method="map", rule="strict")`` (:func:`~pymc_crf.fitters.optimise.find_map`).
    polish_gtol : float, optional
        After L-BFGS, solve ``grad = 0`` by Newton-Krylov (:func:`polish`) until the largest
        gradient entry is at most this: a stopping rule on the gradient alone, which L-BFGS's
        line search on the objective value cannot reach near the mode.
    log_likelihood : bool
        Add the per-graph ``log_likelihood`` group (computed on the shards); not with
        ``shards`` (the model's observed data are then a template's).
    progressbar : bool
        Show the optimiser's iterations.

    Returns
    -------
    xarray.DataTree
        As ``method="map"``'s: a one-draw ``posterior``, ``optimizer_result``; ``attrs["method"]``
        is ``"map"`` and ``attrs["settings"]`` records ``n_shards`` and ``distributed``. With
        ``shards`` the result has no ``observed_data`` / ``constant_data`` (the template's) and
        no ``log_likelihood``.
    """
    t0 = time.perf_counter()
    maxiter = whole_number(maxiter, "maxiter")
    gtol = positive_number(gtol, "gtol", allow_zero=True)
    ftol = positive_number(ftol, "ftol", allow_zero=True)
    if optimizer not in ("auto", "scipy", "lbfgs"):
        raise ValueError(f"optimizer must be 'auto', 'scipy' or 'lbfgs'; got {optimizer!r}")
    if shards is None:
        check_observed_labels(model)
    spec = extract_crf(model)
    require_gaussian_prior(spec, "pmc.distributed.fit_map")
    if not spec.info.exact:
        raise ValueError(f"pmc.distributed.fit_map needs an exact engine; this CRF uses "
                         f"{spec.info.engine_name!r}")
    reason = other_model_terms(spec)
    if reason:
        raise ValueError(f"pmc.distributed.fit_map fits a model whose only term is the CRF; "
                         f"{reason}")
    prior = GaussianLogPrior(spec)
    x0 = weight_start(spec, prior, start)
    with connected(client) as c, ShardedLogLikelihood(c, spec, n_shards, shards) as lik:
        objective = negative_log_posterior(lik, prior)
        x, diag = _optimise(objective, x0, maxiter, gtol, ftol, optimizer, progressbar)
        n_polish = 0
        if polish_gtol is not None:
            x, n_polish = polish(lambda x: objective(x)[1], x, polish_gtol)
            f, g = objective(x)
            diag = replace(diag, objective=float(f), grad_norm=float(np.linalg.norm(g)))
        pointwise = None
        if log_likelihood and shards is None:
            pointwise = {spec.observed_name: lik.pointwise(x)[None, None]}
        n_used, workers = lik.n_shards, sorted(set(lik.workers))
    draws = {k: v[None, None] for k, v in spec.unflatten(x).items()}
    if spec.model.deterministics:
        from pymc.util import get_default_varnames

        out_vars = get_default_varnames(spec.model.unobserved_value_vars, include_transformed=False)
        values = spec.model.compile_fn(out_vars)(spec.unflatten(x))
        draws = {v.name: np.asarray(val)[None, None]
                 for v, val in zip(out_vars, values, strict=True)}
    settings = {"maxiter": maxiter, "gtol": gtol, "ftol": ftol, "optimizer": optimizer,
                "engine_objective": True, "distributed": True, "n_shards": n_used,
                "n_workers": len(workers), "polish_gtol": polish_gtol,
                "n_polish_iterations": n_polish}
    result = build_result(spec.model, draws, "map", settings, time.perf_counter() - t0,
                          diagnostics=diag.to_dict(), diagnostics_group="optimizer_result",
                          log_likelihood=False, pointwise_log_likelihood=pointwise)
    if shards is not None:
        for group in ("observed_data", "constant_data"):
            if group in result.children:
                del result[group]
    return result


def fit_laplace(model: pm.Model, client: Client | str, n_shards: int | None = None, *,
                draws: int = 1000, chains: int = 1, random_seed: RandomGenerator = None,
                polish_gtol: float | None = 1e-9, **map_options: Any) -> xr.DataTree:
    """The exact Laplace approximation ``N(w*, A^-1)`` with the MAP and the curvature computed
    data-parallel: :func:`fit_map`, then each shard's negative log-likelihood Hessian on its
    worker, summed with the prior precision on the client (``A = sum_s A_s + Lambda^-1``;
    Welling & Parise 2006, eqs. (7), (12) with the exact covariance). The same approximation as
    ``pmc.fit(model, method="bethe_laplace", map="exact", covariance="exact")``.

    Parameters
    ----------
    model, client, n_shards
        As :func:`fit_map` (the model's own graphs are the data).
    draws, chains, random_seed
        Draws from the Gaussian for the ``posterior`` group.
    polish_gtol : float or None
        :func:`fit_map`'s gradient rule for the mode (default 1e-9).
    **map_options
        Further :func:`fit_map` options (``maxiter``, ``gtol``, ``ftol``, ``optimizer``).

    Returns
    -------
    xarray.DataTree
        A Gaussian-approximation result (``fit`` group with ``mean_vector`` and
        ``covariance_matrix``, draws, per-graph ``log_likelihood``) whose ``attrs["method"]`` is
        ``"laplace"``; ``pmc.loo`` corrects its LOO for the approximation.
    """
    from pymc_crf.validation import generator

    t0 = time.perf_counter()
    draws = whole_number(draws, "draws")
    chains = whole_number(chains, "chains")
    rng = generator(random_seed, "random_seed")
    spec = extract_crf(model)
    n_missing = int((np.asarray(spec.labels) < 0).sum())
    if n_missing:
        # the curvature J^T C J is the Fisher information of fully observed labels; with labels
        # summed out the Hessian also has the clamped covariance, so the covariance would be off
        raise ValueError(f"pmc.distributed.fit_laplace needs every label observed; this model "
                         f"has {n_missing} missing (masked / -1) labels. "
                         "pmc.distributed.fit_map sums missing labels out of the likelihood.")
    with connected(client) as c:
        mode = fit_map(model, c, n_shards, polish_gtol=polish_gtol, log_likelihood=False,
                       **map_options)
        w = spec.flatten({v.name: mode["posterior"][v.name].values[0, 0] for v in spec.weights})
        with ShardedLogLikelihood(c, spec, n_shards) as lik:
            A = lik.negative_hessian(w) + np.diag(1.0 / GaussianLogPrior(spec).sd ** 2)
            cov = inverse_pd(A, "; in pmc.distributed.fit_laplace")
            # drawn from the precision's Cholesky factor as the single-process exact Laplace
            # draws, so the same seed gives the same draws
            sample = DenseGaussian(w, A, "; in pmc.distributed.fit_laplace").sample(
                chains * draws, rng).reshape(chains, draws, -1)
            pointwise = lik.pointwise(sample.reshape(-1, w.size))
            n_used = lik.n_shards
    settings = {"draws": draws, "chains": chains, "random_seed": random_seed,
                "polish_gtol": polish_gtol, "distributed": True, "n_shards": n_used,
                **{k: v for k, v in map_options.items() if k != "progressbar"}}
    return build_result(spec.model, spec.unflatten(sample), "laplace", settings,
                        time.perf_counter() - t0, mean_vector=w, covariance_matrix=cov,
                        param_names=spec.param_names(), log_likelihood=False,
                        pointwise_log_likelihood={spec.observed_name: pointwise.reshape(
                            chains, draws, -1)})


# ---------------------------------------------------------------------------------- CoNLL files
# read by pymc_crf.columns (count_sentences, read_conll_range; imported above): the jobs below
# run them on the workers
def sentence_ranges(n_sentences: int, n_shards: int) -> list[tuple[int, int]]:
    """``n_shards`` contiguous sentence ranges (:func:`shard_ranges`).

    Parameters
    ----------
    n_sentences : int
        How many sentences (e.g. :func:`count_sentences` of the file; at least 1).
    n_shards : int
        How many ranges (at least 1, at most ``n_sentences``).

    Returns
    -------
    list of tuple of (int, int)
        The ``(start, stop)`` sentence ranges, in order.

    Raises
    ------
    ValueError
        As :func:`shard_ranges`.
    """
    return shard_ranges(n_sentences, n_shards)


def _count_range(path: str, start: int, stop: int, bias: bool) -> tuple[Counter, set[str]]:
    """Feature document counts (tokens per feature name, as ``FeatureVectorizer.fit`` counts
    them) and the tag set of one sentence range (runs on a worker)."""
    words, pos, tags = read_conll_range(path, start, stop)
    counts = FeatureVectorizer(min_freq=1, bias=bias).feature_counts(
        token_features(w, p) for w, p in zip(words, pos, strict=True))
    return counts, {t for s in tags for t in s}


def conll_vocabulary(client: Client, path: str | Path, ranges: Sequence[tuple[int, int]], *,
                     min_freq: int = 1, bias: bool = True
                     ) -> tuple[FeatureVectorizer, list[str]]:
    """A ``FeatureVectorizer`` of :func:`~pymc_crf.datasets.token_features` fitted on the whole
    file, with the feature counts made by the workers (one task per range) and added on the
    client, and the sorted tag set: the vocabulary ``FeatureVectorizer(min_freq, bias).fit`` of
    all the file's sentences gives, without the client reading the file.

    Parameters
    ----------
    client : distributed.Client
        The cluster's client.
    path : str or Path
        The CoNLL file (``word POS chunk`` per line, :func:`read_conll_range`), readable by
        every worker at this path.
    ranges : sequence of tuple of (int, int)
        Sentence ranges ``[start, stop)`` covering the file (:func:`sentence_ranges`); one task
        each.
    min_freq : int, default 1
        As ``FeatureVectorizer``: features seen in fewer tokens are dropped.
    bias : bool, default True
        As ``FeatureVectorizer``: add a bias feature.

    Returns
    -------
    vectorizer : FeatureVectorizer
        Fitted on the features of all the ranges' sentences.
    tags : list of str
        The sorted tag set of the ranges' sentences.
    """
    futures = [client.submit(_count_range, str(path), a, b, bias, pure=False) for a, b in ranges]
    counts: Counter[str] = Counter()
    tags: set[str] = set()
    for c, t in client.gather(futures):
        counts.update(c)
        tags |= t
    return FeatureVectorizer(min_freq=min_freq, bias=bias).fit_counts(counts), sorted(tags)


def conll_shard(path: str | Path, start: int, stop: int, vectorizer: FeatureVectorizer,
                classes: Sequence[str]) -> CRFData:
    """Sentences ``start..stop-1`` of a CoNLL file as a chain ``CRFData`` with the CRFsuite token
    template's sparse features (runs on a worker; the rows equal those of the whole file's
    matrix for these sentences).

    Parameters
    ----------
    path : str or Path
        The CoNLL file (:func:`read_conll_range`).
    start, stop : int
        The sentence range ``[start, stop)``.
    vectorizer : FeatureVectorizer
        A fitted vectorizer (:func:`conll_vocabulary`) of the
        :func:`~pymc_crf.datasets.token_features` dicts.
    classes : sequence of str
        The tag set; a tag's label is its index here.

    Returns
    -------
    CRFData
        The sentences as chains, with labels, node features ``vectorizer.transform(...)`` and
        ``n_labels=len(classes)``.
    """
    words, pos, tags = read_conll_range(path, start, stop)
    X = vectorizer.transform([token_features(w, p) for w, p in zip(words, pos, strict=True)])
    y, _ = encode_tags(tags, classes)
    return CRFData(sequence_batch(words), y, X, n_labels=len(classes))


def conll_shards(client: Client, path: str | Path, ranges: Sequence[tuple[int, int]],
                 vectorizer: FeatureVectorizer, classes: Sequence[str]) -> list[Future]:
    """Futures of :func:`conll_shard` for each sentence range, built on the workers in turn
    (the vectorizer is broadcast once); feed them to :func:`fit_map` (``shards=``) or
    :func:`predict`.

    Parameters
    ----------
    client : distributed.Client
        The cluster's client.
    path : str or Path
        The CoNLL file, readable by every worker at this path.
    ranges : sequence of tuple of (int, int)
        Sentence ranges ``[start, stop)`` (:func:`sentence_ranges`), one shard each; range
        ``i`` is built on the ``i``-th worker (by sorted address), cycling.
    vectorizer : FeatureVectorizer
        A fitted vectorizer (:func:`conll_vocabulary`).
    classes : sequence of str
        The tag set (labels are indices into it).

    Returns
    -------
    list of distributed.Future
        Futures of the shards' ``CRFData`` (:func:`conll_shard`), in range order.
    """
    workers = sorted(client.scheduler_info()["workers"])
    vec = client.scatter(vectorizer, broadcast=True, hash=False)
    return [client.submit(conll_shard, str(path), a, b, vec, list(classes),
                          workers=[workers[i % len(workers)]], pure=False)
            for i, (a, b) in enumerate(ranges)]
