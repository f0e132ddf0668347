"""One interface for every discrete inference engine (in the spirit of libDAI's ``InfAlg``).

An engine works on a :class:`~pymc_crf.graphs.GraphBatch` and log-potential tables:

* ``node_logpot``: float64 array ``(N, K)`` (N = total nodes of the batch),
* ``edge_logpot``: float64 array ``(E, K, K)``, ``edge_logpot[e, a, b]`` scoring label ``a`` at
  ``edges[e, 0]`` and label ``b`` at ``edges[e, 1]``; or ``(1, K, K)``, one table shared by every
  edge (a plain transition matrix, the common case that is worth not copying E times).

The unnormalised log-probability of a labelling ``t`` of graph ``g`` is
``sum_i node_logpot[i, t_i] + sum_e edge_logpot[e, t_{e0}, t_{e1}]``; ``log_partition`` is the
log-sum-exp of that over all labellings, one value per graph.

The sufficient statistics are the node indicators ``[t_i = a]`` and edge indicators
``[t_{e0} = a, t_{e1} = b]``, so ``marginals`` is the gradient of ``log_partition`` with respect to
the tables and ``covariance_vector_product`` is its Hessian applied to a direction. With a shared edge
table, edge marginals and edge directions are summed/broadcast over edges accordingly.
"""

from __future__ import annotations

import os
import sys
import warnings
from abc import ABC, abstractmethod
from collections.abc import Callable
from typing import TYPE_CHECKING, NamedTuple

import numpy as np
from scipy.sparse import issparse

from pymc_crf.docstrings import fill_doc
from pymc_crf.feature_products import features_dot, features_tdot
from pymc_crf.graphs.batch import GraphBatch
from pymc_crf.inference.kernels import writeable
from pymc_crf.validation import positive_number, real_number, whole_number

if TYPE_CHECKING:
    from numpy.typing import ArrayLike
    from scipy.sparse import sparray, spmatrix

__all__ = ["ApproximateInferenceWarning", "ConvergenceWarning", "Engine", "LoopyResult",
           "MapResult", "Marginals", "check_direction", "check_iteration_settings",
           "check_feature_tables", "check_potentials", "convergence_report",
           "forms_feature_tables", "decode", "labelling_score",
           "warn_at_caller", "warn_unconverged"]


# the parameters the engine methods share, worded once (filled into the docstrings of Engine and
# the engines by ``fill_doc``; the engines' modules import ``engine_doc``)
ENGINE_DOCS = {
    "batch": """
        batch : GraphBatch
            The graphs.""",
    "node_logpot": """
        node_logpot : array_like (N, K)
            Node log-potentials, one row per node of the batch.""",
    "edge_logpot": """
        edge_logpot : array_like (E, K, K) or (1, K, K)
            Edge log-potentials (``edge_logpot[e, a, b]`` scores label ``a`` at ``edges[e, 0]``
            and ``b`` at ``edges[e, 1]``), or one table shared by every edge.""",
    # the three every engine method takes
    "tables": "%(batch)s\n%(node_logpot)s\n%(edge_logpot)s",
    # the section of the methods that take nothing else
    "tables_parameters": "Parameters\n----------\n%(tables)s",
    "batch_node": "%(batch)s\n%(node_logpot)s",
    # the tables as check_potentials returns them (the loopy engines' helpers)
    "checked_tables": """
        %(batch)s
        node : ndarray (N, K)
            The checked node log-potentials.
        edge : ndarray (E, K, K) or (1, K, K)
            The checked edge log-potentials.""",
    "n_labels": """
        n_labels : int
            Labels per node (K).""",
    # numba_kernels and feature_numba_kernels
    "kernel_sections": """
        Parameters
        ----------
        %(batch)s
        n_labels : int or None, optional
            Labels per node (K), where the compiled graph knows it.

        Returns
        -------
        tuple of (callable, callable) or None
            ``(log_z, vjp)``, or None (this base version).""",
}
engine_doc = fill_doc(ENGINE_DOCS)


class ConvergenceWarning(UserWarning):
    """An iterative approximate inference engine stopped before reaching its tolerance."""


class ApproximateInferenceWarning(UserWarning):
    """log Z is approximate (Bethe, TreeEP or mean field): the likelihood and its posterior are
    approximate."""


_PACKAGE_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
#: libraries whose frames stand between a user's call and the package: ``pmc.CRF(...)`` in a
#: model reaches its engine through PyMC's ``Distribution.__new__``, a logp through PyTensor's
#: compiled function
_CALLER_LIBRARIES = ("pymc", "pytensor")


def warn_at_caller(message: str, category: type[Warning]) -> None:
    """``warnings.warn`` attributed to the first frame outside the package, PyMC and PyTensor
    (the user's ``pmc.fit`` or ``pmc.CRF`` line), however deep inside them the warning is
    raised."""
    # a library's frames can be on the stack only once it is imported, so sys.modules suffices
    # (and importing PyMC here would slow down ``import pymc_crf``); each directory ends in a
    # separator, so that "pymc" does not also cover a sibling such as "pymc_extras"
    skip = [_PACKAGE_DIR] + [os.path.dirname(os.path.abspath(sys.modules[name].__file__)) + os.sep
                             for name in _CALLER_LIBRARIES
                             if getattr(sys.modules.get(name), "__file__", None)]
    warnings.warn(message, category, skip_file_prefixes=tuple(skip))


class Marginals(NamedTuple):
    """Exact or approximate marginals of a batch.

    ``log_z`` (G,), ``node`` (N, K), ``edge`` (E, K, K) (or (1, K, K) summed over edges when the
    edge table is shared), and for approximate engines a per-graph convergence ``report`` (dict of
    arrays: ``iterations``, ``max_change``, ``converged``, and from the iterative engines the
    bound check ``bound``, ``bound_ok``; see ``inference/loopy.py``) or None.
    """

    log_z: np.ndarray
    node: np.ndarray
    edge: np.ndarray
    report: dict | None = None


class MapResult(NamedTuple):
    """Most probable labelling ``labels`` (N,) and its unnormalised log score per graph (G,)."""

    labels: np.ndarray
    score: np.ndarray


class LoopyResult(NamedTuple):
    """What one run of an iterative approximate engine (BP, TreeEP, mean field) leaves behind.

    ``log_node`` (N, K) and ``log_edge`` (E, K, K) normalised log beliefs (one table per edge,
    also for a shared edge table), ``log_z`` (G,) the engine's estimate of log Z, ``report`` the
    per-graph convergence report (:func:`convergence_report`, with the bound check ``bound`` /
    ``bound_ok`` of ``LoopyEngine.check_bound``; BP adds ``radius`` and ``restarts``, mean field
    ``restarts``). Engine-specific extras:
    ``messages`` (2E, K) BP's normalised log messages (the warm start of a later run; None for
    the other engines) and ``tree_mask`` (E,) TreeEP's spanning tree (None otherwise).
    """

    messages: np.ndarray | None
    log_node: np.ndarray
    log_edge: np.ndarray
    log_z: np.ndarray
    report: dict
    tree_mask: np.ndarray | None = None

    def marginals(self, shared_edge_table: bool) -> Marginals:
        """The run as :class:`Marginals`: beliefs as probabilities, edge beliefs summed over edges
        when the model has one shared edge table (its gradient).

        Parameters
        ----------
        shared_edge_table : bool
            Whether the model has one edge table shared by every edge.

        Returns
        -------
        Marginals
            ``log_z``, ``exp(log_node)`` (N, K), ``exp(log_edge)`` (E, K, K) or its sum over
            edges (1, K, K), and ``report``.
        """
        edge = np.exp(self.log_edge)
        if shared_edge_table:
            edge = edge.sum(axis=0, keepdims=True)
        return Marginals(self.log_z, np.exp(self.log_node), edge, self.report)


def check_potentials(batch: GraphBatch, node_logpot: ArrayLike, edge_logpot: ArrayLike
                     ) -> tuple[np.ndarray, np.ndarray]:
    """Validate shapes and finiteness of log-potential tables.

    Parameters
    ----------
    batch : GraphBatch
        The graphs.
    node_logpot : array_like (N, K)
        Node log-potentials, one row per node of the batch (real numbers).
    edge_logpot : array_like (E, K, K) or (1, K, K)
        Edge log-potentials, or one table shared by every edge (real numbers).

    Returns
    -------
    node, edge : ndarray
        The tables as contiguous, writeable float64 arrays (the inputs themselves where they
        already are: see :func:`~pymc_crf.inference.kernels.writeable`).

    Raises
    ------
    TypeError
        When ``batch`` is not a ``GraphBatch``.
    ValueError
        When a table is complex, has the wrong shape or K < 1, or holds NaN or +inf (-inf
        entries, forbidden labels, are legitimate).
    """
    if not isinstance(batch, GraphBatch):
        raise TypeError(f"the engines take a GraphBatch; got {type(batch).__name__} "
                        "(pmc.GraphBatch.from_networkx converts networkx graphs)")
    if np.iscomplexobj(node_logpot) or np.iscomplexobj(edge_logpot):
        raise ValueError("log-potentials must be real numbers; got a complex array")
    node = writeable(np.ascontiguousarray(node_logpot, dtype=np.float64))
    edge = writeable(np.ascontiguousarray(edge_logpot, dtype=np.float64))
    if node.ndim != 2 or node.shape[0] != batch.n_total_nodes:
        raise ValueError(f"node log-potentials must have shape ({batch.n_total_nodes}, K); "
                         f"got {node.shape}")
    K = node.shape[1]
    if K < 1:
        raise ValueError("need at least one label (K >= 1)")
    if edge.ndim != 3 or edge.shape[1:] != (K, K) or edge.shape[0] not in (batch.n_edges, 1):
        raise ValueError(f"edge log-potentials must have shape ({batch.n_edges}, {K}, {K}) or "
                         f"(1, {K}, {K}) for a shared table; got {edge.shape}")
    # one reduction per table instead of two boolean temporaries: max is NaN if any entry is NaN
    # and +inf if any is +inf (-inf entries, forbidden labels, are legitimate)
    for table in (node, edge):
        top = table.max() if table.size else 0.0
        if np.isnan(top):
            raise ValueError("log-potentials contain NaN (from a model: NaN weights, or feature "
                             "values so large that features x weights overflow; rescale them)")
        if top == np.inf:
            raise ValueError("log-potentials contain +inf (from a model: features x weights "
                             "overflowed; rescale very large feature values)")
    return node, edge


def check_feature_tables(batch: GraphBatch, node_logpot, edge_features, edge_weights,
                         graph_weights=None) -> tuple[np.ndarray, np.ndarray, np.ndarray,
                                                      np.ndarray]:
    """Validate the inputs of ``Engine.log_z_and_feature_marginals``: node log-potentials (N, K)
    as in :func:`check_potentials`, edge features (E, Fe) (dense or ``scipy.sparse``; left as
    they are), finite edge weights (Fe, K, K) and graph weights (G,) (all ones when None).
    Returns the node table, the edge weights as (Fe, K^2) and the graph weights, contiguous
    and writeable float64."""
    K = np.shape(node_logpot)[-1] if np.ndim(node_logpot) == 2 else 0
    node, _ = check_potentials(batch, node_logpot, np.zeros((1, K, K)))  # the node table's checks
    rows = np.shape(edge_features)
    if len(rows) != 2 or rows[0] != batch.n_edges:
        raise ValueError(f"edge features must have shape ({batch.n_edges}, Fe), one row per edge "
                         f"of the batch; got {rows}")
    values = edge_features.data if issparse(edge_features) else edge_features
    if not np.isfinite(values).all():
        raise ValueError("edge features contain NaN or inf")
    We = writeable(np.ascontiguousarray(edge_weights, dtype=np.float64))
    if We.shape != (rows[1], K, K):
        raise ValueError(f"edge weights must have shape ({rows[1]}, {K}, {K}) (edge features, "
                         f"labels, labels); got {We.shape}")
    if not np.isfinite(We).all():
        raise ValueError("edge weights contain NaN or inf")
    if graph_weights is None:
        gw = np.ones(batch.n_graphs)
    else:
        gw = writeable(np.ascontiguousarray(graph_weights, dtype=np.float64))
        if gw.shape != (batch.n_graphs,):
            raise ValueError(f"graph weights must have shape ({batch.n_graphs},); got "
                             f"{gw.shape}")
    return node, edge_features, We.reshape(rows[1], K * K), gw


def forms_feature_tables(engine: Engine) -> bool:
    """Whether ``engine`` has its own ``log_z_and_feature_marginals`` (the chain engine's forms
    the edge tables from the features block by block); the generic one forms all (E, K, K)
    tables, which the table paths do with fewer copies."""
    return (type(engine).log_z_and_feature_marginals
            is not Engine.log_z_and_feature_marginals)


def check_direction(node: np.ndarray, edge: np.ndarray, v_node, v_edge
                    ) -> tuple[np.ndarray, np.ndarray]:
    """Validate a direction ``(v_node, v_edge)`` for a covariance-vector product: shaped like the
    (checked) potentials and finite. Returns them contiguous, writeable float64."""
    vn = writeable(np.ascontiguousarray(v_node, dtype=np.float64))
    ve = writeable(np.ascontiguousarray(v_edge, dtype=np.float64))
    if vn.shape != node.shape or ve.shape != edge.shape:
        raise ValueError(f"direction must be shaped like the potentials {node.shape}, "
                         f"{edge.shape}; got {vn.shape}, {ve.shape}")
    if not (np.isfinite(vn).all() and np.isfinite(ve).all()):
        raise ValueError("direction (v_node, v_edge) contains NaN or inf")
    return vn, ve


def check_iteration_settings(tol: float, max_iter: int, damping: float
                             ) -> tuple[float, int, float]:
    """Validate the settings every iterative engine shares; returns them as (float, int, float).

    ``tol`` > 0 is the per-sweep change below which a graph has converged, ``max_iter`` >= 1 caps
    the sweeps, ``damping`` in [0, 1) is the weight of the old value in each update.
    """
    tol = positive_number(tol, "tol")
    max_iter = whole_number(max_iter, "max_iter")
    if not 0.0 <= real_number(damping, "damping") < 1.0:
        raise ValueError(f"damping must lie in [0, 1); got {damping}")
    return tol, max_iter, float(damping)


def convergence_report(iterations: np.ndarray, max_change: np.ndarray,
                       converged: np.ndarray) -> dict:
    """The per-graph convergence report of an iterative engine: sweeps run, largest change in
    the last sweep, and whether that change fell below the tolerance."""
    return {"iterations": iterations, "max_change": max_change, "converged": converged}


def warn_unconverged(report: dict, method: str, settings: str, hint: str,
                     stacklevel: int = 3) -> None:
    """Emit one :class:`ConvergenceWarning` when some graphs of ``report`` did not converge.

    ``method`` names the algorithm (``"sum-product BP"``, ``"TreeEP"``, ...), ``settings`` its
    stopping settings and ``hint`` what to try instead.
    """
    bad = ~report["converged"]
    if bad.any():
        warnings.warn(
            f"{method} did not converge on {int(bad.sum())} of {bad.size} graphs within "
            f"{settings}; largest final change {report['max_change'][bad].max():.3g}. Results "
            f"for those graphs are unreliable: {hint}.", ConvergenceWarning,
            stacklevel=stacklevel + 1)


def labelling_score(batch: GraphBatch, node: np.ndarray, edge: np.ndarray,
                    labels: np.ndarray) -> np.ndarray:
    """Unnormalised log score per graph of a labelling (N,) -> (G,), or of several labellings
    (S, N) -> (S, G) in one gather."""
    labels = np.asarray(labels, dtype=np.int64)
    rows = labels.reshape(-1, batch.n_total_nodes)
    S, G = rows.shape[0], batch.n_graphs
    # graph g of row s is bin s * G + g
    offsets = (np.arange(S) * G)[:, None]
    s = np.bincount((offsets + batch.node_graph[None, :]).ravel(),
                    weights=node[np.arange(batch.n_total_nodes)[None, :], rows].ravel(),
                    minlength=S * G)
    if batch.n_edges:
        tab = np.zeros(batch.n_edges, np.int64) if edge.shape[0] == 1 else np.arange(batch.n_edges)
        ew = edge[tab[None, :], rows[:, batch.edges[:, 0]], rows[:, batch.edges[:, 1]]]
        s = s + np.bincount((offsets + batch.edge_graph[None, :]).ravel(), weights=ew.ravel(),
                            minlength=S * G)
    return s.reshape(S, G) if labels.ndim == 2 else s


def impossible_graphs(graphs, what: str = "sample") -> ValueError:
    """The error for graphs on which every labelling has a -inf log-potential (Z = 0)."""
    return ValueError(f"graphs {list(map(int, graphs))} allow no labelling: every labelling has "
                      "a -inf log-potential (contradictory hard constraints), so log Z is -inf "
                      f"and there is nothing to {what}")


def checked_map(result: MapResult) -> MapResult:
    """An exact engine's MAP, after refusing the graphs whose best labelling has probability
    zero: there the model allows no labelling (the labelling returned would be any)."""
    bad = np.flatnonzero(result.score == -np.inf)
    if bad.size:
        raise impossible_graphs(bad, "decode")
    return result


def predictive_marginals(engine: Engine, batch: GraphBatch, node: np.ndarray,
                         edge: np.ndarray) -> np.ndarray:
    """The node marginals (N, K) that a prediction reports, after refusing, for an exact engine,
    the graphs whose log Z is -inf: there the model allows no labelling and the marginals are
    0 / 0, which each engine would return as its own zeros or NaN. (Approximate engines are not
    checked: their log Z is an estimate.)"""
    m = engine.marginals(batch, node, edge)
    if engine.exact:
        bad = np.flatnonzero(np.asarray(m.log_z) == -np.inf)
        if bad.size:
            raise impossible_graphs(bad, "predict")
    return m.node


def checked_draws(batch: GraphBatch, node: np.ndarray, edge: np.ndarray,
                  draws: np.ndarray) -> np.ndarray:
    """``draws`` (n, N) of an exact sampler, after refusing the graphs whose first draw has
    probability zero: an exact sampler draws such a labelling only where the model allows none
    (it returned one anyway, silently)."""
    if draws.shape[0]:
        bad = np.flatnonzero(labelling_score(batch, node, edge, draws[0]) == -np.inf)
        if bad.size:
            raise impossible_graphs(bad)
    return draws


def decode(batch: GraphBatch, node: np.ndarray, edge: np.ndarray,
           log_beliefs: np.ndarray) -> MapResult:
    """The labelling maximising each node's belief, with its exact unnormalised log score."""
    labels = np.argmax(log_beliefs, axis=1).astype(np.int64)
    return MapResult(labels, labelling_score(batch, node, edge, labels))


class Engine(ABC):
    """Base class of inference engines. Subclasses implement the abstract methods over a whole batch.

    Attributes
    ----------
    name : str
        Registry name (``"chain"``, ``"junction_tree"``, ``"bp"``, ...).
    exact : bool
        Whether ``log_partition`` and ``marginals`` are exact.
    has_log_z : bool
        Whether ``log_partition`` gives a value (exact or approximate), so that the engine can
        define a likelihood; a pure sampler (Gibbs) has none.
    approximation : str
        For approximate engines, what their ``log_partition`` is (named in warnings).
    """

    name: str = "engine"
    exact: bool = True
    has_log_z: bool = True
    approximation: str = "exact"

    @engine_doc
    def supports(self, batch: GraphBatch) -> bool:
        """Whether this engine can run on every graph of ``batch``.

        Parameters
        ----------
        %(batch)s

        Returns
        -------
        bool
            True when it can (this base version: always).
        """
        return True

    @engine_doc
    def check_size(self, batch: GraphBatch, n_labels: int) -> None:
        """Raise a ValueError when the engine cannot run on ``batch`` with ``n_labels`` labels
        (a model's build calls it where the labels are known; by default every size runs).

        Parameters
        ----------
        %(batch)s
        %(n_labels)s

        Raises
        ------
        ValueError
            When the engine cannot run at this size (this base version: never).
        """
        return None

    @engine_doc
    def check_supported(self, batch: GraphBatch) -> None:
        """Raise a ValueError saying why the engine cannot run on ``batch`` (engines override this
        to name the offending graph).

        Parameters
        ----------
        %(batch)s

        Raises
        ------
        ValueError
            When :meth:`supports` is False for ``batch``.
        """
        if not self.supports(batch):
            kinds = ", ".join(f"{int((batch.kinds == k).sum())} {k}"
                              for k in ("chain", "tree", "loopy") if (batch.kinds == k).any())
            raise ValueError(f"engine {self.name!r} cannot handle this graph batch ({kinds}); "
                             "use inference='auto'")

    @abstractmethod
    @engine_doc
    def log_partition(self, batch: GraphBatch, node_logpot: ArrayLike,
                      edge_logpot: ArrayLike) -> np.ndarray:
        """log Z per graph, shape (G,).

        %(tables_parameters)s

        Returns
        -------
        ndarray (G,)
            log Z of each graph: exact, or the engine's approximation (:attr:`approximation`)
            when :attr:`exact` is False.
        """

    @abstractmethod
    @engine_doc
    def marginals(self, batch: GraphBatch, node_logpot: ArrayLike,
                  edge_logpot: ArrayLike) -> Marginals:
        """log Z and node / edge marginals (the gradient of log Z w.r.t. the tables).

        %(tables_parameters)s

        Returns
        -------
        Marginals
            ``log_z`` (G,), ``node`` (N, K), ``edge`` (E, K, K) (or (1, K, K) summed over edges
            when the edge table is shared) and, for approximate engines, the per-graph
            convergence ``report`` (else None).
        """

    @abstractmethod
    @engine_doc
    def map_assignment(self, batch: GraphBatch, node_logpot: ArrayLike,
                       edge_logpot: ArrayLike) -> MapResult:
        """Most probable labelling of every graph.

        %(tables_parameters)s

        Returns
        -------
        MapResult
            ``labels`` (N,) and their unnormalised log score per graph, ``score`` (G,).
        """

    @abstractmethod
    @engine_doc
    def sample(self, batch: GraphBatch, node_logpot: ArrayLike, edge_logpot: ArrayLike,
               n_samples: int, rng: np.random.Generator | int | None = None) -> np.ndarray:
        """``n_samples`` labellings of every graph, shape (n_samples, N), int64.

        Parameters
        ----------
        %(tables)s
        n_samples : int
            Labellings to draw.
        rng : Generator, int or None, optional
            The random generator, or a seed of one.

        Returns
        -------
        ndarray (n_samples, N) int64
            One labelling of the whole batch per row.
        """

    @engine_doc
    def weighted_marginals(self, batch: GraphBatch, node_logpot: ArrayLike,
                           edge_logpot: ArrayLike, graph_weights: ArrayLike
                           ) -> tuple[np.ndarray, np.ndarray]:
        """Marginals of graph g times ``graph_weights[g]``: the vector-Jacobian product of log Z
        (``log_z_and_weighted_marginals`` without log Z).

        Engines with a one-pass kernel override ``log_z_and_weighted_marginals``, not this
        method: compiled models call that one.

        Parameters
        ----------
        %(tables)s
        graph_weights : array_like (G,)
            The output gradient, one weight per graph.

        Returns
        -------
        node : ndarray (N, K)
            Node marginals of graph g times ``graph_weights[g]``.
        edge : ndarray (E, K, K), or (1, K, K) for a shared table
            Edge marginals likewise (summed over edges for a shared table).
        """
        return self.log_z_and_weighted_marginals(batch, node_logpot, edge_logpot,
                                                 graph_weights)[1:]

    def log_z_and_weighted_marginals(self, batch: GraphBatch, node_logpot: ArrayLike,
                                     edge_logpot: ArrayLike, graph_weights: ArrayLike
                                     ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """log Z and the marginals of graph g times ``graph_weights[g]``, from one pass.

        A compiled model that needs both log Z and its gradient runs this once (the
        ``LogPartitionWithGrad`` node) instead of ``log_partition`` and the marginals
        separately, so an engine's ``marginals(...).log_z`` must be the number its
        ``log_partition`` gives. The generic version expands a shared edge table so the weights
        apply per edge before the sum over edges; engines with a one-pass kernel override it.

        Parameters
        ----------
        batch : GraphBatch
        node_logpot : array_like, shape (N, K)
        edge_logpot : array_like, shape (E, K, K) or (1, K, K)
        graph_weights : array_like, shape (G,)

        Returns
        -------
        log_z : ndarray, shape (G,)
        node : ndarray, shape (N, K)
            Node marginals of graph g times ``graph_weights[g]``.
        edge : ndarray, shape (E, K, K), or (1, K, K) for a shared table
            Edge marginals likewise (summed over edges for a shared table).
        """
        node, edge = check_potentials(batch, node_logpot, edge_logpot)
        w = np.asarray(graph_weights, dtype=np.float64)
        shared = edge.shape[0] == 1 and batch.n_edges != 1
        full = np.broadcast_to(edge, (batch.n_edges, *edge.shape[1:])) if shared else edge
        m = self.marginals(batch, node, np.ascontiguousarray(full))
        gn = m.node * w[batch.node_graph][:, None]
        ge = m.edge * w[batch.edge_graph][:, None, None]
        return (np.asarray(m.log_z, dtype=np.float64), gn,
                ge.sum(axis=0, keepdims=True) if shared else ge)

    def log_z_and_feature_marginals(self, batch: GraphBatch, node_logpot: ArrayLike,
                                    edge_features: np.ndarray | spmatrix | sparray,
                                    edge_weights: ArrayLike, graph_weights: ArrayLike | None = None
                                    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """log Z and its gradient for log-linear edge tables made from edge features.

        The edge table of edge e is ``sum_f edge_features[e, f] * edge_weights[f]``; returns log Z
        with the vector-Jacobian product of log Z in the node tables and in ``edge_weights``.
        This generic version forms the (E, K, K) tables and their marginals; the chain engine
        forms them only for chains longer than its lane blocks, one chain at a time.

        Parameters
        ----------
        batch : GraphBatch
        node_logpot : array_like, shape (N, K)
        edge_features : ndarray or scipy.sparse matrix, shape (E, Fe)
            Finite (as ``GraphBatch.check_features`` returns them).
        edge_weights : array_like, shape (Fe, K, K)
        graph_weights : array_like, shape (G,), optional
            Output gradient; all ones (the gradient of ``sum(log Z)``) when None.

        Returns
        -------
        log_z : ndarray, shape (G,)
        node : ndarray, shape (N, K)
            Node marginals of graph g times ``graph_weights[g]``.
        edge_weights_grad : ndarray, shape (Fe, K, K)
            ``sum_e graph_weights[g(e)] * edge_features[e, f] * mu_e``, the expected edge
            features (mu_e the edge marginals).
        """
        node, Xe, We, gw = check_feature_tables(batch, node_logpot, edge_features, edge_weights,
                                                graph_weights)
        K = node.shape[1]
        edge = features_dot(Xe, We).reshape(batch.n_edges, K, K)
        log_z, gn, ge = self.log_z_and_weighted_marginals(batch, node, edge, gw)
        return log_z, gn, features_tdot(Xe, ge.reshape(batch.n_edges, K * K)).reshape(-1, K, K)

    @engine_doc
    def numba_kernels(self, batch: GraphBatch, n_labels: int | None = None
                      ) -> tuple[Callable, Callable] | None:
        """Optional njit closures ``(log_z(node, edge), vjp(node, edge, g))`` for compiled models,
        taking arrays of any layout (the Ops pass PyTensor's as they are); ``vjp`` returns
        ``(log_z, weighted node marginals, weighted edge marginals)``.
        ``n_labels``, where the compiled graph knows it, lets an engine pick kernels for the
        problem's size.

        None means the PyTensor Ops call this engine from numba's object mode.

        %(kernel_sections)s
        """
        return None

    @engine_doc
    def feature_log_partition(self, batch: GraphBatch, node_logpot: ArrayLike,
                              edge_features: np.ndarray | spmatrix | sparray,
                              edge_weights: ArrayLike) -> np.ndarray:
        """log Z (G,) of log-linear edge tables made from edge features: the first output of
        :meth:`log_z_and_feature_marginals`, without the gradient pass. This generic version
        forms the (E, K, K) tables.

        Parameters
        ----------
        %(batch_node)s
        edge_features : ndarray or scipy.sparse matrix (E, Fe)
            Finite (as ``GraphBatch.check_features`` returns them).
        edge_weights : array_like (Fe, K, K)
            The edge table of edge e is ``sum_f edge_features[e, f] * edge_weights[f]``.

        Returns
        -------
        ndarray (G,)
            log Z of each graph.
        """
        node, Xe, We, _ = check_feature_tables(batch, node_logpot, edge_features, edge_weights)
        K = node.shape[1]
        return self.log_partition(batch, node, features_dot(Xe, We).reshape(batch.n_edges, K, K))

    @engine_doc
    def feature_numba_kernels(self, batch: GraphBatch, n_labels: int | None = None
                              ) -> tuple[Callable, Callable] | None:
        """Optional njit closures ``(log_z(node, x, w), vjp(node, x, w, g))`` of
        :meth:`log_z_and_feature_marginals` for compiled models (``x`` dense (E, Fe), ``w``
        (Fe, K^2)); ``vjp`` returns ``(log_z, weighted node marginals, expected edge features
        (Fe, K^2))``; layouts and ``n_labels`` as in :meth:`numba_kernels`. None means the PyTensor Ops call
        this engine from numba's object mode.

        %(kernel_sections)s
        """
        return None

    @engine_doc
    def covariance_vector_product(self, batch: GraphBatch, node_logpot: ArrayLike,
                                  edge_logpot: ArrayLike, v_node: ArrayLike, v_edge: ArrayLike
                                  ) -> tuple[np.ndarray, np.ndarray]:
        """Covariance of the sufficient statistics (Hessian of log Z) applied to ``(v_node, v_edge)``.

        Returns arrays shaped like the marginals. Engines that can, override this.

        Parameters
        ----------
        %(tables)s
        v_node : array_like (N, K)
            The direction's node part.
        v_edge : array_like (E, K, K), or (1, K, K) for a shared table
            The direction's edge part (with a shared table, broadcast over edges).

        Returns
        -------
        node : ndarray (N, K)
            The product's node part.
        edge : ndarray (E, K, K), or (1, K, K) for a shared table
            Its edge part (summed over edges for a shared table).

        Raises
        ------
        NotImplementedError
            When the engine has no covariance-vector product (this base version).
        """
        raise NotImplementedError(f"engine {self.name!r} has no covariance-vector product")

    @engine_doc
    def feature_covariance(self, batch: GraphBatch, node_logpot: ArrayLike,
                           edge_logpot: ArrayLike, graph: int = 0) -> np.ndarray:
        """Dense covariance of the sufficient statistics of one graph.

        The order is the graph's node indicators (node-major, ``n_g * K``) followed by its edge
        indicators (edge-major, ``e_g * K * K``); with a shared edge table, the ``K * K`` summed
        edge statistics. Built column by column from :meth:`covariance_vector_product`, so meant
        for small problems.

        Parameters
        ----------
        %(tables)s
        graph : int, default 0
            The graph's index in ``batch``.

        Returns
        -------
        ndarray (D, D)
            The symmetrised covariance, ``D = n_g * K + e_g * K * K`` (``n_g * K + K * K``
            with a shared edge table).

        Raises
        ------
        NotImplementedError
            When the engine has no :meth:`covariance_vector_product`.
        """
        node, edge = check_potentials(batch, node_logpot, edge_logpot)
        sub = batch.subset([graph])
        node = node[batch.node_index([graph])]
        if edge.shape[0] != 1:
            edge = edge[batch.edge_index([graph])]
        dn, de = node.size, edge.size
        cov = np.empty((dn + de, dn + de))
        for j in range(dn + de):
            v = np.zeros(dn + de)
            v[j] = 1.0
            cn, ce = self.covariance_vector_product(
                sub, node, edge, v[:dn].reshape(node.shape), v[dn:].reshape(edge.shape))
            cov[:, j] = np.concatenate([cn.ravel(), ce.ravel()])
        return 0.5 * (cov + cov.T)
