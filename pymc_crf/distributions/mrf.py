"""The ``MRF`` distribution: i.i.d. labellings of one graph, no input features.

The value is an ``(N, n)`` integer matrix, one labelling of the graph's ``n`` nodes per row. With
node log-potentials ``phi_i`` and edge log-potentials ``psi_e`` (linear in the weights, see
:class:`MRFParameterization`)

    log p(x_1..x_N | w) = sum_n [ sum_i phi_i(x_ni) + sum_e psi_e(x_nu, x_nv) ] - N log Z(w)
                        = < counts, (phi, psi) > - N log Z(w),

where ``counts`` are the node and pairwise label counts over the N rows: the sufficient statistics
of the model (Parise & Welling 2006, eq. (2) and the first two terms of eq. (8); Welling & Parise
2006, eq. (1)). ``logp`` returns one value per row (the row's score minus the shared log Z) so
``az.loo`` works per sample, and log Z comes from ONE call of the ``LogPartition`` Op whatever N
is; its gradient (``counts - N * marginals`` in table space) flows through the Op's VJP.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import pytensor
import pytensor.tensor as pt
from pymc.distributions.dist_math import check_parameters
from pymc.distributions.distribution import Distribution, _support_point
from pymc.logprob.abstract import _logprob
from pytensor.link.numba.dispatch.random import numba_core_rv_funcify
from pytensor.tensor.random.op import RandomVariable

from pymc_crf.distributions.crf import (
    current_shape_tuple,
    data_check,
    integer_labels,
    shape_check,
    static_shape_tuple,
)
from pymc_crf.distributions.numba_draws import objmode_random_fn
from pymc_crf.graphs.batch import GraphBatch, as_graph_batch
from pymc_crf.inference.base import Engine
from pymc_crf.inference.select import get_engine
from pymc_crf.ops.log_partition import LogPartition, content_key
from pymc_crf.validation import class_indices, whole_number

if TYPE_CHECKING:
    from pytensor.tensor import TensorLike, TensorVariable

__all__ = ["MRF", "MRFRV", "MRFInfo", "MRFParameterization", "PARAMETERIZATIONS",
           "check_mrf_labels"]

PARAMETERIZATIONS = ("table", "ising", "boltzmann", "potts")

# Label -> feature value of the scalar parameterisations: the Ising spin s = 2 x - 1 (Welling &
# Parise 2006, sec. 7: binary +-1 Boltzmann machines) and the 0/1 unit of Parise & Welling 2006,
# appendix A (features x_i and x_i x_j).
_SPIN = {"ising": np.array([-1.0, 1.0]), "boltzmann": np.array([0.0, 1.0])}


@dataclass(frozen=True)
class MRFParameterization:
    """How the MRF weights map to log-potential tables (a linear map, the same for numpy and
    PyTensor arrays).

    ``node_kind`` / ``edge_kind`` is ``"table"`` (the weights are the log-potentials themselves:
    ``(K,)`` / ``(n, K)`` node weights, ``(K, K)`` / ``(E, K, K)`` edge weights) or ``"scalar"``
    (one number per node / edge times a fixed feature: ``b_i f[x_i]`` with ``f = s`` (Ising) or
    ``x`` (Boltzmann), and ``w_e F[x_u, x_v]`` with ``F = s s^T``, ``x x^T`` or the Potts
    ``[x_u = x_v]``). ``node_shared`` / ``edge_shared``: one weight for all nodes / edges.
    Node tables are always ``(n, K)``; a shared edge weight gives one ``(1, K, K)`` table, which the
    engines take without copying it E times.
    """

    parameterization: str
    n_labels: int
    n_nodes: int
    n_edges: int
    node_kind: str | None
    node_shared: bool
    edge_kind: str | None
    edge_shared: bool

    @property
    def node_feature(self) -> np.ndarray:
        """f (K,): node log-potential of label a is b_i f[a] (scalar node weights)."""
        return _SPIN[self.parameterization]

    @property
    def edge_feature(self) -> np.ndarray:
        """F (K, K): edge log-potential of labels (a, b) is w_e F[a, b] (scalar edge weights)."""
        if self.parameterization == "potts":
            return np.eye(self.n_labels)
        s = _SPIN[self.parameterization]
        return np.outer(s, s)

    @property
    def node_shape(self) -> tuple[int, ...] | None:
        if self.node_kind is None:
            return None
        lead = () if self.node_shared else (self.n_nodes,)
        return lead + ((self.n_labels,) if self.node_kind == "table" else ())

    @property
    def edge_shape(self) -> tuple[int, ...] | None:
        if self.edge_kind is None:
            return None
        lead = () if self.edge_shared else (self.n_edges,)
        return lead + ((self.n_labels,) * 2 if self.edge_kind == "table" else ())

    # ------------------------------------------------------------------ the linear map
    def node_table(self, w):
        """Node log-potentials (n, K) from the node weights (numpy or PyTensor); None -> zeros."""
        K, n = self.n_labels, self.n_nodes
        if w is None:
            return np.zeros((n, K))
        t = w if self.node_kind == "table" else w[..., None] * self.node_feature
        return t + np.zeros((n, K))  # broadcasts a shared (K,) row to every node

    def edge_table(self, w):
        """Edge log-potentials (E, K, K), or (1, K, K) for a shared weight; None -> zeros."""
        K = self.n_labels
        if w is None:
            return np.zeros((1, K, K))
        t = w if self.edge_kind == "table" else w[..., None, None] * self.edge_feature
        return t[None] if self.edge_shared else t

    def node_adjoint(self, cot: np.ndarray) -> np.ndarray | None:
        """J^T of :meth:`node_table`: an (n, K) cotangent to the node weights' shape (numpy)."""
        if self.node_kind is None:
            return None
        r = np.asarray(cot, dtype=np.float64)
        if self.node_kind == "scalar":
            r = r @ self.node_feature
        return r.sum(axis=0) if self.node_shared else r

    def edge_adjoint(self, cot: np.ndarray) -> np.ndarray | None:
        """J^T of :meth:`edge_table`: an (E, K, K) or summed (1, K, K) cotangent to the edge
        weights' shape (numpy)."""
        if self.edge_kind is None:
            return None
        r = np.asarray(cot, dtype=np.float64)
        if self.edge_kind == "scalar":
            r = np.tensordot(r, self.edge_feature, axes=([-2, -1], [0, 1]))
        return r.sum(axis=0) if self.edge_shared else r


def _full_shape(w) -> tuple[int, ...] | None:
    if None not in w.type.shape:
        return tuple(int(s) for s in w.type.shape)
    try:
        return tuple(int(s) for s in w.shape.eval())
    except Exception:  # noqa: BLE001 - symbolic shape that needs inputs: checked at run time
        return None


def mrf_parameterization(batch: GraphBatch, parameterization: str, node_weights, edge_weights,
                         n_labels: int | None) -> MRFParameterization:
    """Check the weights' shapes against the graph and the parameterisation (clear errors)."""
    if parameterization not in PARAMETERIZATIONS:
        raise ValueError(f"parameterization must be one of {PARAMETERIZATIONS}; got "
                         f"{parameterization!r}")
    if node_weights is None and edge_weights is None:
        raise ValueError("an MRF needs node_weights, edge_weights, or both")
    n, E = int(batch.n_nodes[0]), batch.n_edges
    if edge_weights is not None and E == 0:
        raise ValueError("edge_weights given but the graph has no edges")
    node_kind = None if node_weights is None else (
        "table" if parameterization in ("table", "potts") else "scalar")
    edge_kind = None if edge_weights is None else (
        "table" if parameterization == "table" else "scalar")
    shapes = {k: None if w is None else _full_shape(w)
              for k, w in (("node_weights", node_weights), ("edge_weights", edge_weights))}
    K = n_labels
    if parameterization in _SPIN:
        if n_labels not in (None, 2):
            raise ValueError(f"parameterization={parameterization!r} is binary (K = 2); got "
                             f"n_labels={n_labels}")
        K = 2
    elif K is None:
        for key, kind in (("node_weights", node_kind), ("edge_weights", edge_kind)):
            if kind == "table" and shapes[key]:
                K = shapes[key][-1]
                break
    if K is None:
        raise ValueError("cannot tell the number of labels from the weights' shapes: pass "
                         "n_labels")
    if K < 2:
        raise ValueError(f"an MRF needs at least 2 labels; got n_labels={K}")

    def shared(key, kind, w, lead, what):
        core = (K,) * (1 if key == "node_weights" else 2) if kind == "table" else ()
        ok = {core: True, (lead, *core): False}
        shape = shapes[key]
        if shape is None:
            shape_nd = w.ndim
            if shape_nd not in (len(core), len(core) + 1):
                raise ValueError(f"{key} must have shape {core} (shared) or {(lead, *core)} "
                                 f"(one per {what}); got a {shape_nd}-d tensor")
            return shape_nd == len(core)
        if shape not in ok:
            raise ValueError(f"{key} for parameterization={parameterization!r} must have shape "
                             f"{core} (shared) or {(lead, *core)} (one per {what}); got {shape}")
        return ok[shape]

    node_shared = node_kind is not None and shared("node_weights", node_kind, node_weights, n,
                                                   "node")
    edge_shared = edge_kind is not None and shared("edge_weights", edge_kind, edge_weights, E,
                                                   "edge")
    return MRFParameterization(parameterization, int(K), n, E, node_kind, node_shared,
                               edge_kind, edge_shared)


def check_mrf_labels(batch: GraphBatch, labels: Any, n_labels: int | None,
                     parameterization: str = "table") -> np.ndarray:
    """Validated ``(N, n)`` int64 labels: one labelling of the graph's n nodes per row.

    A 1-d array of length n is one row. Raises a one-line ValueError naming the problem (row
    length, NaN, non-integer, label range).
    """
    n = int(batch.n_nodes[0])
    if np.ma.isMaskedArray(labels) and np.ma.getmaskarray(labels).any():
        raise ValueError("MRF labels cannot be missing (masked): the MRF likelihood needs whole "
                         "labellings; missing labels are supported by pmc.CRF")
    arr = np.asarray(labels)
    if arr.ndim == 1 and arr.shape[0] == n:
        arr = arr[None, :]
    if arr.ndim != 2:
        raise ValueError(f"MRF labels must be an (n_samples, n_nodes) = (N, {n}) matrix, one "
                         f"labelling per row; got shape {arr.shape}")
    if arr.shape[1] != n:
        raise ValueError(f"each MRF label row must have n_nodes = {n} labels; got rows of length "
                         f"{arr.shape[1]}")
    if arr.shape[0] == 0:
        raise ValueError("MRF labels have no rows: give at least one labelling")
    arr = class_indices(arr, "MRF labels", lambda i: f"row {i[0]}, node {i[1]}",
                        ": the MRF needs whole labellings (missing labels are supported by "
                        "pmc.CRF)")
    if n_labels is not None and (arr.min() < 0 or arr.max() >= n_labels):
        r, i = (int(k[0]) for k in np.nonzero((arr < 0) | (arr >= n_labels)))
        if n_labels == 2 and np.isin(arr, (-1, 1)).all():
            # spins -1 / +1 given as labels: -1 is a spin here, not a missing-label marker
            hint = (": these look like spins -1 / +1; give label indices 0 / 1 "
                    "(label = (s + 1) // 2, s = 2 * label - 1)")
        else:
            hint = (" (spins are given as label indices: s = 2 * label - 1)"
                    if parameterization == "ising" else "")
            if arr[r, i] == -1:
                hint += (": the MRF needs whole labellings (missing labels are supported by "
                         "pmc.CRF)")
        raise ValueError(f"label {int(arr[r, i])} at row {r}, node {i} is outside "
                         f"0..{n_labels - 1}{hint}")
    return arr


@dataclass(frozen=True)
class MRFInfo:
    """How an MRF variable was built (read by fitters through ``extract_mrf``)."""

    batch: GraphBatch
    param: MRFParameterization
    node_weights: Any
    edge_weights: Any
    inference: Any
    max_treewidth: int
    engine_name: str = ""
    exact: bool = True

    @property
    def n_labels(self) -> int:
        return self.param.n_labels


# Core signature of each weight input, by (kind, shared): n nodes, e edges, k labels.
_NODE_SIGNATURES = {("table", True): "(k)", ("table", False): "(n,k)",
                    ("scalar", True): "()", ("scalar", False): "(n)"}
_EDGE_SIGNATURES = {("table", True): "(k,k)", ("table", False): "(e,k,k)",
                    ("scalar", True): "()", ("scalar", False): "(e)"}


class MRFRV(RandomVariable):
    """``N`` i.i.d. labellings of one graph, drawn with the engine's sampler (exact for
    chain and junction-tree engines; the loopy engines draw with the junction tree where it runs,
    else from independent Gibbs chains).

    The parameters are the MRF's own weight tensors (node weights, edge weights, or both, as
    ``param`` says) and last the number of rows ``N``, a scalar input rather than an Op setting,
    so that draws follow observed rows held in ``pm.Data`` (or a ``row`` dim) when
    ``pm.set_data`` changes them; the parameterisation, graph and engine are Op settings.
    Fitters read the model back from the node (:meth:`info`), so a model rebuilt by ``pm.do``,
    ``pm.observe`` or ``clone_model`` still names its own weights.
    """

    name = "mrf"
    dtype = "int64"
    _print_name = ("MRF", "\\operatorname{MRF}")
    __props__ = ("name", "signature", "dtype", "inplace", "batch", "engine", "param",
                 "inference", "max_treewidth")

    def __init__(self, batch: GraphBatch, engine: Engine, param: MRFParameterization,
                 inference: Any = "auto", max_treewidth: int = 10, **kwargs):
        self.batch = batch
        self.engine = engine
        self.param = param
        self.inference = inference if isinstance(inference, str) else engine.name
        self.max_treewidth = int(max_treewidth)
        sig = [table[(kind, shared)] for table, kind, shared in (
            (_NODE_SIGNATURES, param.node_kind, param.node_shared),
            (_EDGE_SIGNATURES, param.edge_kind, param.edge_shared)) if kind is not None]
        kwargs.setdefault("signature", f"{','.join([*sig, '()'])}->(s,m)")
        super().__init__(**kwargs)

    def _supp_shape_from_params(self, dist_params, param_shapes=None):
        return (dist_params[-1], int(self.batch.n_nodes[0]))

    def weights(self, dist_params) -> tuple[Any, Any]:
        """``(node_weights, edge_weights)`` from the node's parameters (None for an absent one;
        the last parameter, the number of rows, is not a weight)."""
        it = iter(dist_params)
        node = next(it) if self.param.node_kind is not None else None
        edge = next(it) if self.param.edge_kind is not None else None
        return node, edge

    def info(self, dist_params) -> MRFInfo:
        """Everything about the MRF in one record, with the weights as the node's inputs."""
        node, edge = self.weights(dist_params)
        return MRFInfo(batch=self.batch, param=self.param, node_weights=node, edge_weights=edge,
                       inference=self.inference, max_treewidth=self.max_treewidth,
                       engine_name=self.engine.name, exact=bool(self.engine.exact))

    def log_potentials(self, dist_params):
        """PyTensor float64 node (n, K) and edge (E or 1, K, K) log-potential tables."""
        node, edge = self.weights(dist_params)
        return (pt.as_tensor_variable(self.param.node_table(node)).astype("float64"),
                pt.as_tensor_variable(self.param.edge_table(edge)).astype("float64"))

    def log_potentials_numpy(self, dist_params):
        """Numpy node and edge log-potential tables of numeric parameters."""
        node, edge = (None if w is None else np.asarray(w, dtype=np.float64)
                      for w in self.weights(dist_params))
        return (np.asarray(self.param.node_table(node), dtype=np.float64),
                np.asarray(self.param.edge_table(edge), dtype=np.float64))

    def draw(self, rng, dist_params) -> np.ndarray:
        """``(N, n)`` labellings from the engine's sampler for numeric weights (``N`` the last
        parameter)."""
        node, edge = self.log_potentials_numpy(dist_params)
        return self.engine.sample(self.batch, node, edge, int(dist_params[-1]), rng)

    def rng_fn(self, rng, *args):
        *params, size = args
        if size is not None and tuple(size) != ():
            raise ValueError("MRF draws do not take a size: one draw is n_samples labellings "
                             "(set n_samples or the observed rows)")
        return self.draw(rng, params)


class MRF(Distribution):
    r"""Markov random field: ``N`` i.i.d. labellings of one graph, no input features.

    .. math::

        \log p(X \mid w) = \sum_{n=1}^N \Big[\sum_i \phi_i(x_{ni}) + \sum_{(u,v)}
        \psi_{uv}(x_{nu}, x_{nv})\Big] - N \log Z(w)

    computed from the node and pairwise label counts with ONE log Z per evaluation, whatever N.

    Parameters
    ----------
    graphs : GraphBatch
        The graph: a batch holding exactly one graph (every row labels this graph).
    node_weights, edge_weights : tensor, optional
        At least one. Shapes by ``parameterization`` (``n`` nodes, ``E`` edges, ``K`` labels;
        the shorter shape is one weight shared by every node / edge):

        ================  =====================  ==========================  ============================
        parameterization  node_weights           edge_weights                log-potentials
        ================  =====================  ==========================  ============================
        ``"table"``       ``(K,)`` / ``(n, K)``  ``(K, K)`` / ``(E, K, K)``  the weights themselves
        ``"ising"``       ``()`` / ``(n,)``      ``()`` / ``(E,)``           ``b_i s_i``, ``w_e s_u s_v``
        ``"boltzmann"``   ``()`` / ``(n,)``      ``()`` / ``(E,)``           ``b_i x_i``, ``w_e x_u x_v``
        ``"potts"``       ``(K,)`` / ``(n, K)``  ``()`` / ``(E,)``           table, ``w_e [x_u = x_v]``
        ================  =====================  ==========================  ============================

        with the spin ``s = 2 x - 1`` of the label ``x`` in {0, 1} (the Boltzmann machines of
        Welling & Parise 2006, sec. 7; Parise & Welling 2006, appendix A uses the 0/1 units of
        ``"boltzmann"``). Any PyMC prior works.
    parameterization : {"table", "ising", "boltzmann", "potts"}
    inference : str or Engine
        ``"auto"`` (chain -> junction tree -> loopy BP, with an ``ApproximateInferenceWarning``
        when it must approximate), ``"chain"``, ``"junction_tree"``, ``"bp"``/``"bethe"``, or an
        Engine instance, as for :class:`pymc_crf.CRF`.
    max_treewidth : int
        Junction-tree limit for ``"auto"`` / ``"junction_tree"``.
    n_labels : int, optional
        K, when the weights' shapes do not give it (``"potts"`` without node weights).
    n_samples : int, optional
        Number of rows; read from ``observed``, or from ``shape`` / a ``row`` dim, when not
        given (``MRF.dist`` needs one of them). Rows held in ``pm.Data`` or given by a dim are
        an input of the draws, which follow ``pm.set_data``; a given ``n_samples`` must match
        their current value.

    Notes
    -----
    The value is an ``(N, n)`` int64 matrix of label indices (0..K-1; for ``"ising"`` the label
    1 is spin +1). ``logp`` is one value per row (that row's score minus the shared log Z), so
    ``pm.compute_log_likelihood`` and ``az.loo`` work per sample; give
    ``dims=("row", "node")`` to label it. Draws (prior / posterior predictive) take all N
    rows from the engine's sampler at once: exact for the chain and junction-tree engines.

    Examples
    --------
    A 3 x 3 Ising grid with one shared coupling and per-node biases:

    >>> import numpy as np, pymc as pm, pymc_crf as pmc
    >>> grid = pmc.GraphBatch.grid(3, 3)
    >>> X = np.random.default_rng(0).integers(0, 2, size=(50, 9))
    >>> with pm.Model(coords={"row": range(50), "node": range(9)}) as model:
    ...     b = pm.Normal("b", 0.0, 0.5, dims="node")
    ...     w = pm.Normal("w", 0.0, 0.5)
    ...     x = pmc.MRF("x", graphs=grid, node_weights=b, edge_weights=w,
    ...                 parameterization="ising", observed=X, dims=("row", "node"))
    >>> model.compile_logp()(model.initial_point()).shape
    ()
    """

    rv_type = MRFRV

    def __new__(cls, name, *args, observed=None, graphs=None, **kwargs):
        graphs = None if graphs is None else as_graph_batch(graphs)
        if observed is not None and isinstance(graphs, GraphBatch) and graphs.n_graphs == 1:
            if not hasattr(observed, "type"):  # constant data: validate before PyMC sees it
                param = mrf_parameterization(
                    graphs, kwargs.get("parameterization", "table"),
                    _as_tensor(kwargs.get("node_weights")), _as_tensor(kwargs.get("edge_weights")),
                    kwargs.get("n_labels"))
                observed = check_mrf_labels(graphs, observed, param.n_labels,
                                            param.parameterization)
                rows = observed.shape[0]
                if kwargs.get("n_samples") is None:
                    kwargs["n_samples"] = rows
            else:
                # data that can change (pm.Data): the rows stay symbolic (PyMC passes the
                # observed shape on), so that draws follow pm.set_data; checked here against the
                # data's current rows
                rows = _full_shape(observed)
                rows = None if rows is None else rows[0]
            if rows is not None and kwargs.get("n_samples") not in (None, rows):
                raise ValueError(f"n_samples={kwargs['n_samples']} but observed has {rows} rows")
        return super().__new__(cls, name, *args, observed=observed, graphs=graphs, **kwargs)

    @classmethod
    def dist(cls, graphs: GraphBatch | None = None, node_weights: TensorLike | None = None,
             edge_weights: TensorLike | None = None, parameterization: str = "table",
             inference: str | Engine = "auto", max_treewidth: int = 10,
             n_labels: int | None = None, n_samples: int | TensorLike | None = None,
             **kwargs: Any) -> TensorVariable:
        """Unregistered MRF variable (for ``pm.logp`` / ``pm.draw`` outside a model).

        Parameters
        ----------
        graphs, node_weights, edge_weights, parameterization, inference, max_treewidth
            As :class:`MRF`.
        n_labels, n_samples
            As :class:`MRF` (here ``n_samples`` or a ``shape`` must give the rows).
        **kwargs
            Passed to ``pymc.Distribution.dist``. A ``size`` is refused, and so are
            ``node_features`` / ``edge_features`` (an MRF has none) and a ``shape`` other than
            (n_samples, n_nodes).

        Returns
        -------
        TensorVariable
            The (n_samples, n_nodes) int64 labellings of the graph.

        Raises
        ------
        ValueError
            When ``graphs`` holds more than one graph, or ``n_samples`` is neither given nor read
            from ``shape``.
        """
        for key in ("node_features", "edge_features"):
            # PyMC would pass them on to rv_op ("unexpected keyword argument"), which does not
            # say that an MRF has no features by design
            if key in kwargs:
                raise TypeError(f"an MRF takes no {key}: its potentials are the weights "
                                "themselves; for potentials computed from features use pmc.CRF")
        graphs = as_graph_batch(graphs)
        if graphs.n_graphs != 1:
            raise ValueError(f"an MRF models labellings of ONE graph; got a batch of "
                             f"{graphs.n_graphs} graphs (use one MRF per graph)")
        shape = kwargs.pop("shape", None)
        n = int(graphs.n_nodes[0])
        if kwargs.pop("size", None) is not None:
            raise ValueError("an MRF takes no size: its shape is (n_samples, n_nodes)")
        rows = None
        if shape is not None:
            shape = tuple(shape)
            if len(shape) != 2:
                raise ValueError(f"an MRF has shape (n_samples, n_nodes) = (N, {n}); got a "
                                 f"shape of {len(shape)} dimension(s)")
            static = static_shape_tuple(shape[:1])
            # rows that can change (pm.Data, a dim) stay symbolic: the draws follow them
            rows = (static[0] if static is not None
                    else pt.as_tensor_variable(shape[0]).astype("int64"))
        if n_samples is None:
            n_samples = rows
        if n_samples is None:
            raise ValueError("MRF.dist needs n_samples (the number of labellings, rows)")
        if not hasattr(n_samples, "type"):
            n_samples = whole_number(n_samples, "n_samples")
            expected = (int(n_samples), n)
            full = None if shape is None else static_shape_tuple(shape)
            if full is not None and full != expected:
                raise ValueError(f"this MRF has shape {expected} (samples, nodes); it takes no "
                                 f"other shape; got {full}")
            if hasattr(rows, "type"):
                current = _current_value(rows)
                if current is not None and current != n_samples:
                    raise ValueError(f"n_samples={n_samples} but the MRF's shape (its dims or "
                                     f"observed data) has {current} rows")
                n_samples = rows
        nodes = None if shape is None else current_shape_tuple(shape[1:])
        if nodes is not None and nodes != (n,):
            # the graph is fixed, so a node dim of another length never fits it (PyMC would
            # build the model and fail in ArviZ after sampling)
            raise ValueError(f"this MRF has shape (N, {n}) (samples, nodes); it takes no other "
                             f"shape; its shape or dims give {nodes[0]} nodes")
        Wn, We = _as_tensor(node_weights), _as_tensor(edge_weights)
        param = mrf_parameterization(graphs, parameterization, Wn, We, n_labels)
        engine = get_engine(inference, graphs, max_treewidth=max_treewidth, need_log_z=True)
        engine.check_size(graphs, param.n_labels)  # e.g. brute force on too large a graph
        params = [w if w.dtype.startswith("float") else w.astype("float64")
                  for w in (Wn, We) if w is not None]
        n_rows = pt.as_tensor_variable(n_samples).astype("int64")
        return super().dist([*params, n_rows], batch=graphs, engine=engine, param=param,
                            inference=inference, max_treewidth=max_treewidth, **kwargs)

    @classmethod
    def rv_op(cls, *params, batch, engine, param, inference, max_treewidth, size=None, rng=None):
        if rng is None:
            rng = pt.random.shared_rng(seed=None)
        op = MRFRV(batch, engine, param, inference, max_treewidth)
        _, rv = op(*params, size=size, rng=rng, return_next_rng=True)
        return rv


def _as_tensor(w):
    return None if w is None else pt.as_tensor_variable(w)


def _current_value(x) -> int | None:
    """The current value of a symbolic size (a dim length, rows of pm.Data); None where it
    needs inputs."""
    try:
        return int(pytensor.function([], x, mode="FAST_COMPILE")())
    except Exception:  # noqa: BLE001 - depends on inputs: checked where the logp runs
        return None


def _checked_shapes(op: MRFRV, value, params):
    """The labels and weights with their shapes asserted where the logp runs.

    Labels (and weights) held in ``pm.Data`` can change shape after the model is built
    (``pm.set_data``); the compiled kernels index the label columns by the graph's node ids
    without bounds checks, so a row one node short read past the array (a segmentation fault)
    and one node long gave a raw broadcasting error. Each input is checked by name instead."""
    n = int(op.batch.n_nodes[0])
    if value.ndim != 2:
        raise ValueError(f"MRF labels must be an (n_samples, n_nodes) = (N, {n}) matrix, one "
                         f"labelling per row; got a {value.ndim}-d tensor")
    value = shape_check(f"MRF labels (observed) must be an (n_samples, n_nodes) = (N, {n}) "
                        f"matrix: one labelling of the graph's {n} nodes per row", value, (None, n))
    node, edge = op.weights(params)
    checked = []
    for key, w, want in (("node_weights", node, op.param.node_shape),
                         ("edge_weights", edge, op.param.edge_shape)):
        if w is None:
            continue
        if want:  # the number of dimensions was fixed when the model was built
            ok = pt.all([pt.eq(d, k) for d, k in zip(w.shape, want, strict=True)])
            w = data_check(f"MRF {key} must have shape {want} for parameterization="
                       f"{op.param.parameterization!r}")(w, ok)
        checked.append(w)
    return value, checked


@_logprob.register(MRFRV)
def mrf_logp(op: MRFRV, values, rng, size, *params, **kwargs):
    """Per-row log-likelihood: each row's score minus the shared log Z (one Op call)."""
    [value] = values
    value, params = _checked_shapes(op, integer_labels(value, "MRF", missing=False), params)
    node_logpot, edge_logpot = op.log_potentials(params)
    batch = op.batch
    n = int(batch.n_nodes[0])
    K = node_logpot.shape[-1]
    valid = pt.all(pt.and_(pt.ge(value, 0), pt.lt(value, K)), axis=-1)
    t = pt.clip(value, 0, K - 1)
    score = node_logpot[np.arange(n)[None, :], t].sum(axis=-1)
    if batch.n_edges:
        u, v = batch.edges[:, 0], batch.edges[:, 1]
        shared = op.param.edge_kind is None or op.param.edge_shared  # one (1, K, K) table
        rows = np.zeros(batch.n_edges, np.int64) if shared else np.arange(batch.n_edges)
        score = score + edge_logpot[rows[None, :], t[:, u], t[:, v]].sum(axis=-1)
    # log Z once for all N rows: the gradient through it is N * marginals (Op VJP with g = N)
    log_z = LogPartition(batch, op.engine)(node_logpot, edge_logpot)[0]
    # a data error (labels from pm.Data outside 0..K-1) raised by name, as pmc.CRF does: a -inf
    # log-likelihood would send a sampler after a model that cannot hold the data
    return check_parameters(score - log_z, pt.all(valid),
                            msg=f"MRF samples must lie in 0..{op.param.n_labels - 1} at every "
                            "node", can_be_replaced_by_ninf=False)


@_support_point.register(MRFRV)
def mrf_support_point(op: MRFRV, rv, *params):
    return pt.zeros((params[-1], int(op.batch.n_nodes[0])), dtype="int64")


@numba_core_rv_funcify.register(MRFRV)
def _numba_mrf_rv(op: MRFRV, node):
    """Draws in numba through the engine's sampler in object mode (:mod:`.numba_draws`), named by
    graph structure, engine settings and parameterisation (the number of rows is an input)."""
    key = content_key(op.batch, op.engine, "MRFRV", repr(op.param))
    return objmode_random_fn(op, key, ndim=2)
