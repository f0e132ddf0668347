"""The ``CRF`` distribution: labels of a batch of graphs given features and weights.

Labels are a ``(G, L)`` integer matrix, one row per graph, padded with ``-1`` past each graph's
``n_nodes`` (``L`` = the largest graph). One row is one observation, so ``logp`` returns one value per
graph and ``pm.compute_log_likelihood`` / ``az.loo`` work per graph. Flat ``(N,)`` labels or a list of
per-graph arrays are accepted as ``observed`` and padded for you.

log p(t | x, w) = sum_i phi_i(t_i) + sum_e psi_e(t_u, t_v) - log Z(x, w), where the log-potentials come
from linear scores through ``potential`` (Qi, Szummer & Minka 2005, eqs. (1)-(4)) and log Z from the
``LogPartition`` Op.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import pytensor
import pytensor.sparse as ps
import pytensor.tensor as pt
import scipy.sparse
from pymc.distributions.dist_math import check_parameters
from pymc.distributions.distribution import Distribution, _support_point
from pymc.logprob.abstract import _logprob
from pytensor.compile.mode import Mode
from pytensor.graph.basic import Constant, Variable
from pytensor.link.numba.dispatch.random import numba_core_rv_funcify
from pytensor.raise_op import CheckAndRaise
from pytensor.scalar import Cast
from pytensor.sparse.variable import SparseConstant
from pytensor.tensor.elemwise import Elemwise
from pytensor.tensor.random.op import RandomVariable

from pymc_crf.distributions.numba_draws import objmode_random_fn
from pymc_crf.graphs.batch import GraphBatch, as_graph_batch
from pymc_crf.inference.base import Engine, warn_at_caller
from pymc_crf.inference.clamp import ObservedLabels
from pymc_crf.inference.select import get_engine
from pymc_crf.ops.log_partition import (
    FeatureLogPartition,
    LogPartition,
    content_key,
    feature_tables_path,
)
from pymc_crf.potentials import check_potential, log_potential_tables, log_potential_tables_pt
from pymc_crf.validation import flag, whole_number

if TYPE_CHECKING:
    from numpy.typing import ArrayLike
    from pytensor.tensor import TensorLike, TensorVariable

__all__ = ["CRF", "CRFRV", "CRFInfo", "pad_labels", "unpad_labels", "crf_log_potentials",
           "data_check", "integer_labels"]


def pad_labels(batch: GraphBatch, labels: Any, n_labels: int | None = None,
               missing: bool = False) -> np.ndarray:
    """Labels (flat (N,), list of per-graph arrays, or padded (G, L)) as a validated padded matrix.

    With ``missing=True`` a label may be missing: masked (a numpy masked array), NaN or ``-1``;
    missing labels are ``-1`` in the result, like the padding past each graph's last node.

    Parameters
    ----------
    batch : GraphBatch
        The graphs the labels belong to.
    labels : array or list of arrays
        Flat (N,) labels in the batch's node order, a list of one array per graph, or a padded
        (G, L) matrix (``L`` = the largest graph's node count, ``-1`` past each graph's last node).
    n_labels : int, optional
        Number of labels ``K``: labels must lie in 0..K-1 (default: the range is not checked).
    missing : bool
        Allow missing labels (as above).

    Returns
    -------
    numpy.ndarray
        The (G, L) int64 matrix: row ``g`` holds graph ``g``'s labels, then ``-1`` padding.
    """
    if flag(missing, "missing"):
        labels = ([_missing_as_minus_one(x) for x in labels] if isinstance(labels, list | tuple)
                  else _missing_as_minus_one(labels))
    arr = labels if isinstance(labels, list | tuple) else np.asarray(labels)
    L = int(batch.n_nodes.max())
    if not isinstance(arr, list | tuple) and arr.ndim == 2:
        if arr.shape != (batch.n_graphs, L):
            raise ValueError(f"padded labels must have shape ({batch.n_graphs}, {L}); got {arr.shape}")
        pos = np.arange(L)[None, :] < batch.n_nodes[:, None]
        if (arr[~pos] != -1).any():
            raise ValueError("padded labels must be -1 past each graph's last node")
        arr = arr[pos]
    refuse_inf_labels(batch, arr)
    if missing:
        flat = batch.check_labels(arr, None)
        gone = flat == -1
        flat = batch.check_labels(np.where(gone, 0, flat), n_labels)
        flat[gone] = -1
    else:
        flat = batch.check_labels(arr, n_labels)
    out = np.full((batch.n_graphs, L), -1, dtype=np.int64)
    out[batch.node_graph, np.arange(batch.n_total_nodes) - batch.node_offsets[batch.node_graph]] = flat
    return out


def refuse_inf_labels(batch: GraphBatch, labels: Any) -> None:
    """A ValueError naming the first infinite label (flat (N,) labels or a list of per-graph
    arrays): NaN marks a missing label, so a message about "NaN or inf" would point at the
    wrong value."""
    parts = labels if isinstance(labels, list | tuple) else [labels]
    try:
        flat = np.concatenate([np.ravel(np.asarray(np.ma.getdata(p), dtype=np.float64))
                               for p in parts])
    except (TypeError, ValueError):
        return  # not numbers: check_labels names the dtype
    bad = np.flatnonzero(np.isinf(flat))
    if not bad.size:
        return
    i = int(bad[0])
    where = ""
    if flat.size == batch.n_total_nodes:
        g = int(batch.node_graph[i])
        where = f" at node {i - int(batch.node_offsets[g])} of graph {g}"
    raise ValueError(f"labels contain {flat[i]}{where}: a label is a class index 0..K-1 "
                     "(NaN, -1 or a masked entry marks a missing label)")


def _missing_as_minus_one(labels: Any) -> np.ndarray:
    """Masked entries and NaN as -1 (the missing-label marker)."""
    arr = np.asarray(np.ma.getdata(labels))
    mask = np.ma.getmaskarray(labels) if np.ma.isMaskedArray(labels) else np.zeros(arr.shape, bool)
    if arr.dtype.kind == "f":
        mask = mask | np.isnan(arr)
    return np.where(mask, -1, arr) if mask.any() else arr


def unpad_labels(batch: GraphBatch, padded: np.ndarray) -> np.ndarray:
    """Flat (..., N) labels from padded (..., G, L) ones.

    Parameters
    ----------
    batch : GraphBatch
        The graphs the labels belong to.
    padded : numpy.ndarray
        Padded labels (..., G, L), as :func:`pad_labels` returns, with any leading dimensions
        (e.g. chain and draw).

    Returns
    -------
    numpy.ndarray
        The (..., N) labels in the batch's node order (the padding dropped).
    """
    padded = np.asarray(padded)
    G, L = batch.n_graphs, int(batch.n_nodes.max())
    if padded.ndim < 2 or padded.shape[-2:] != (G, L):
        # a larger matrix (another batch's) was read silently, a smaller one failed in numpy
        raise ValueError(f"padded labels must end in the batch's (graphs, max nodes) = ({G}, {L}) "
                         f"dimensions; got shape {padded.shape}")
    pos = np.arange(batch.n_total_nodes) - batch.node_offsets[batch.node_graph]
    return padded[..., batch.node_graph, pos]


def _static_last_dim(w) -> int | None:
    n = w.type.shape[-1]
    if n is not None:
        return int(n)
    try:
        return int(w.shape[-1].eval())
    except Exception:  # noqa: BLE001 - symbolic shape that needs inputs: the caller asks for n_labels
        return None


def fixed_features(x: Any, name: str, dist: str = "CRF") -> Any:
    """Feature input ``x`` as fixed data, refusing PyTensor variables with a clear error.

    Parameters
    ----------
    x : array, scipy.sparse matrix, PyTensor constant or None
        A feature argument (``node_features`` / ``edge_features``) as the user gave it.
    name : str
        The argument's name, for the message.
    dist : str
        The distribution's name, for the message.

    Returns
    -------
    array, scipy.sparse matrix or None
        ``x`` itself, or a PyTensor constant's value.

    Raises
    ------
    ValueError
        If ``x`` is a shared variable (``pm.Data``) or a symbolic tensor.
    """
    if isinstance(x, Constant):  # a fixed value wrapped as a tensor: unwrap it
        return x.data
    if isinstance(x, Variable):
        # the graph batch's feature checks, the inference engine and the fitters' feature
        # products are all built from the features' values when the model is built; a value
        # read then would silently go stale after pm.set_data, so the variable is refused
        raise ValueError(
            f"{dist}: {name} is a PyTensor {type(x).__name__} (pm.Data or a symbolic tensor); "
            "features must be numpy arrays or scipy.sparse matrices fixed when the model is "
            "built: pass the array itself. Labels (observed=) may be pm.Data; to predict on new "
            "features, give the test data (features included) to pmc.predict instead of "
            "pm.set_data.")
    return x


def _checked_inputs(batch: GraphBatch, node_features, node_weights, edge_features, edge_weights,
                    potential: str, epsilon: float, n_labels: int | None):
    """Validated ``(X, Wn, Xe, We, K)``: features as arrays, weights as tensors, K the labels."""
    check_potential(potential, epsilon)
    node_features = fixed_features(node_features, "node_features")
    edge_features = fixed_features(edge_features, "edge_features")
    if node_weights is None and edge_weights is None:
        raise ValueError("a CRF needs node_weights, edge_weights, or both")
    if (node_features is None) != (node_weights is None):
        raise ValueError("node_features and node_weights go together: give both or neither")
    if edge_features is not None and edge_weights is None:
        # edge_weights alone is one shared (K, K) table, so the pair is not symmetric; but edge
        # features without weights to score them would be dropped, fitting a CRF without edges
        raise ValueError("edge_features need edge_weights (n_edge_features, K, K) to score them; "
                         "without edge_weights the features would be ignored and the CRF would "
                         "have no edge potentials")
    Wn = None if node_weights is None else pt.as_tensor_variable(node_weights)
    We = None if edge_weights is None else pt.as_tensor_variable(edge_weights)
    K = n_labels
    for w in (Wn, We):
        if w is not None and K is None:
            K = _static_last_dim(w)
    if K is None:
        raise ValueError("cannot tell the number of labels from the weights' shapes: pass n_labels")
    if int(K) < 2:  # as CRFData refuses: with one label the likelihood is 1 whatever the weights
        raise ValueError(f"a CRF needs at least 2 labels; the weights (or n_labels) give {int(K)}, "
                         "so every graph has one labelling and the likelihood is 1 whatever the "
                         "weights")
    X = Xe = None
    if Wn is not None:
        X = batch.check_features(node_features, "node")
        if Wn.ndim != 2:
            raise ValueError(f"node_weights must be (n_node_features, K) = ({X.shape[1]}, {K}); "
                             f"got a {Wn.ndim}-d tensor")
        _check_static(Wn, (X.shape[1], K), "node_weights")
    if We is not None and edge_features is None:
        if We.ndim != 2:
            raise ValueError("edge_weights without edge_features must be one (K, K) table; got a "
                             f"{We.ndim}-d tensor (pass edge_features for per-edge scores)")
        _check_static(We, (K, K), "edge_weights")
    elif We is not None:
        Xe = batch.check_features(edge_features, "edge")
        if We.ndim != 3:
            raise ValueError(f"edge_weights must be (n_edge_features, K, K) = ({Xe.shape[1]}, {K}, "
                             f"{K}); got a {We.ndim}-d tensor")
        _check_static(We, (Xe.shape[1], K, K), "edge_weights")
    return X, Wn, Xe, We, int(K)


def crf_log_potentials(batch: GraphBatch, node_features=None, node_weights=None,
                       edge_features=None, edge_weights=None, potential: str = "loglinear",
                       epsilon: float = 0.0, n_labels: int | None = None):
    """Node (N, K) and edge (E, K, K) or shared (1, K, K) log-potential tensors and K.

    Node scores are ``node_features @ node_weights`` (F, K); edge scores
    ``einsum("ef,fab->eab", edge_features, edge_weights)`` (Fe, K, K). ``edge_weights`` of shape
    (K, K) without edge features is one transition table shared by every edge.
    """
    X, Wn, Xe, We, K = _checked_inputs(batch, node_features, node_weights, edge_features,
                                       edge_weights, potential, epsilon, n_labels)
    node, edge = log_potential_tables_pt(potential, epsilon, batch.n_total_nodes, K, X, Wn, Xe, We)
    return node, edge, K


def refuse_other_shapes(kwargs: dict, expected: tuple, what: str, layout: str) -> None:
    """Pop ``size`` and ``shape`` from a distribution's ``kwargs``, refusing any that is not
    ``expected``: the shape is the data's layout, and a size would batch the draws but not the
    likelihood. A shape from ``dims`` is checked at its coords' current lengths: the batch is
    fixed, so coords of other lengths can never fit it (PyMC would build the model and fail
    in ArviZ after sampling). A shape that needs inputs passes."""
    shape = kwargs.pop("shape", None)
    if kwargs.pop("size", None) is not None:
        raise ValueError(f"{what} has shape {expected} ({layout}); it takes no other size or "
                         "shape")
    got = None if shape is None else current_shape_tuple(shape)
    if got not in (expected, None):
        raise ValueError(f"{what} has shape {expected} ({layout}); it takes no other size or "
                         f"shape; its shape or dims give {got}")


def static_shape_tuple(shape):
    try:
        return tuple(int(pt.get_underlying_scalar_constant_value(s)) if hasattr(s, "type")
                     else int(s) for s in shape)
    except Exception:  # noqa: BLE001 - symbolic shape (from coords that may change): not checkable
        return None


def current_shape_tuple(shape):
    """The shape's values now: constant entries as they are, symbolic ones (the lengths of
    ``dims``, which PyMC keeps as shared variables) evaluated; None when an entry needs
    inputs."""
    static = static_shape_tuple(shape)
    if static is not None:
        return static
    try:
        # the Python linker: no C module to build on a new machine for a few integers
        values = pytensor.function([], [pt.as_tensor_variable(s) for s in shape],
                                   mode=Mode(linker="py", optimizer="fast_compile"))()
    except Exception:  # noqa: BLE001 - depends on inputs: not checkable when the model is built
        return None
    return tuple(int(v) for v in values)


def _check_static(w, shape, name):
    got = w.type.shape
    for a, b in zip(got, shape, strict=True):
        if a is not None and a != b:
            raise ValueError(f"{name} must have shape {shape}; got {got}")


@dataclass(frozen=True)
class CRFInfo:
    """How a CRF variable is built, read back from its node (:meth:`CRFRV.info`)."""

    batch: GraphBatch
    n_labels: int
    potential: str
    epsilon: float
    node_features: np.ndarray | None
    node_weights: Any
    edge_features: np.ndarray | None
    edge_weights: Any
    inference: Any
    max_treewidth: int
    engine_name: str = ""
    exact: bool = True


#: the CRF's parameters in input order; which are present is the Op's ``layout``
_PARAM_NAMES = ("node_features", "node_weights", "edge_features", "edge_weights")
_PARAM_SIGNATURES = {"node_features": "(n,f)", "node_weights": "(f,k)",
                     "edge_features": "(e,h)", "edge_weights": "(h,k,k)"}


def _constant_value(x) -> np.ndarray:
    """The value of a constant input (a constant, shared data or a graph of them)."""
    if isinstance(x, SparseConstant):
        return x.data  # scipy CSR, kept sparse
    if isinstance(x, pt.TensorConstant):
        return np.asarray(x.data)
    if hasattr(x, "get_value"):
        return np.asarray(x.get_value())
    return np.asarray(x.eval())


class CRFRV(RandomVariable):
    """Labels of a fixed graph batch drawn from the CRF by its engine's sampler (exact where a
    junction tree runs, else Gibbs).

    The parameters are the CRF's own inputs: the features and weights present in ``layout`` (a
    tuple of names from ``node_features``, ``node_weights``, ``edge_features``, ``edge_weights``;
    ``edge_weights`` without ``edge_features`` is one shared (K, K) table). Fitters read the model
    back from them (:meth:`params`), so a model rebuilt by ``pm.do``, ``pm.observe`` or
    ``clone_model`` still names its own weights.
    """

    name = "crf"
    dtype = "int64"
    _print_name = ("CRF", "\\operatorname{CRF}")
    __props__ = ("name", "signature", "dtype", "inplace", "batch", "engine", "potential",
                 "epsilon", "n_labels", "layout", "inference", "max_treewidth")

    def __init__(self, batch: GraphBatch, engine: Engine, potential: str = "loglinear",
                 epsilon: float = 0.0, n_labels: int = 2,
                 layout: tuple[str, ...] = ("edge_weights",), inference: Any = "auto",
                 max_treewidth: int = 10, **kwargs):
        self.batch = batch
        self.engine = engine
        self.potential = potential
        self.epsilon = float(epsilon)
        self.n_labels = int(n_labels)
        self.layout = tuple(layout)
        self.inference = inference if isinstance(inference, str) else engine.name
        self.max_treewidth = whole_number(max_treewidth, "max_treewidth", minimum=0)
        shared = "edge_weights" in self.layout and "edge_features" not in self.layout
        sig = ",".join("(k,k)" if (p == "edge_weights" and shared) else _PARAM_SIGNATURES[p]
                       for p in self.layout)
        kwargs.setdefault("signature", f"{sig}->(g,l)")
        super().__init__(**kwargs)

    def _supp_shape_from_params(self, dist_params, param_shapes=None):
        return (self.batch.n_graphs, int(self.batch.n_nodes.max()))

    def params(self, dist_params) -> dict[str, Any]:
        """The CRF's inputs by name (None for absent parts) from the node's parameters."""
        out = dict.fromkeys(_PARAM_NAMES)
        out.update(zip(self.layout, dist_params, strict=True))
        return out

    def info(self, dist_params) -> CRFInfo:
        """Everything about the CRF in one record: features as arrays, weights as the inputs."""
        p = self.params(dist_params)
        return CRFInfo(
            batch=self.batch, n_labels=self.n_labels, potential=self.potential,
            epsilon=self.epsilon,
            node_features=None if p["node_features"] is None
            else _constant_value(p["node_features"]),
            node_weights=p["node_weights"],
            edge_features=None if p["edge_features"] is None
            else _constant_value(p["edge_features"]),
            edge_weights=p["edge_weights"], inference=self.inference,
            max_treewidth=self.max_treewidth, engine_name=self.engine.name,
            exact=bool(self.engine.exact))

    def log_potentials(self, dist_params):
        """PyTensor node and edge log-potential tables of the parameters."""
        return log_potential_tables_pt(self.potential, self.epsilon, self.batch.n_total_nodes,
                                       self.n_labels, **self.params(dist_params))

    def log_potentials_numpy(self, dist_params):
        """Numpy node and edge log-potential tables of numeric parameters."""
        node, edge, _, _ = log_potential_tables(self.potential, self.epsilon,
                                                self.batch.n_total_nodes, self.n_labels,
                                                **self.params(dist_params))
        return node, edge

    def rng_fn(self, rng, *args):
        *params, size = args
        if size is not None and tuple(size) != ():
            raise ValueError("CRF draws do not take a size: one draw is one labelling of the batch")
        node, edge = self.log_potentials_numpy(params)
        flat = self.engine.sample(self.batch, node, edge, 1, rng)[0]
        return _pad(self.batch, flat)


def _pad(batch, flat):
    out = np.full((batch.n_graphs, int(batch.n_nodes.max())), -1, dtype=np.int64)
    out[batch.node_graph, np.arange(batch.n_total_nodes) - batch.node_offsets[batch.node_graph]] = flat
    return out


class CRF(Distribution):
    r"""Conditional random field over the labels of a batch of graphs.

    .. math::

        \log p(t \mid x, w) = \sum_i \phi_i(t_i) + \sum_{(u,v)} \psi_{uv}(t_u, t_v) - \log Z(x, w)

    with log-potentials from linear scores: ``"loglinear"`` (the score itself) or the robust probit
    ``log(eps + (1 - 2 eps) Phi(score))`` of Qi, Szummer & Minka (2005), eq. (4).

    Parameters
    ----------
    graphs : GraphBatch
        The graphs; fixed data.
    node_features : array or scipy.sparse matrix (N, F), optional
        One row per node (all graphs stacked). Sparse features stay sparse (CSR): the products
        with the weights are sparse-dense (``pytensor.sparse.structured_dot`` in the model,
        :mod:`pymc_crf.feature_products` in the fitters), e.g. the indicator features of
        :class:`pymc_crf.FeatureVectorizer`. Features are fixed data, read when the model is
        built: a ``pm.Data`` or symbolic tensor is refused with a ``ValueError`` (the labels may
        be ``pm.Data``; new features for prediction go to :func:`pymc_crf.predict`).
    node_weights : tensor (F, K), optional
    edge_features : array or scipy.sparse matrix (E, Fe), optional
        One row per edge; a plain transition matrix is ``edge_weights`` of shape (K, K) with no edge features.
    edge_weights : tensor (Fe, K, K) or (K, K), optional
    potential : {"loglinear", "probit"}
    epsilon : float
        Label-noise level of the robust probit, in [0, 0.5).
    inference : str or Engine
        ``"auto"`` (chain -> junction tree -> loopy BP, with a warning when it must approximate),
        ``"chain"``, ``"junction_tree"``, ``"bp"``/``"bethe"``, or an Engine instance.
    max_treewidth : int
        Junction-tree limit for ``"auto"`` / ``"junction_tree"``.
    n_labels : int, optional
        K, when it cannot be read from the weights' static shapes.

    Notes
    -----
    The value is a (G, L) int64 matrix padded with -1 (``pad_labels``); ``observed`` may also be
    flat (N,) labels or a list of per-graph arrays. Give ``dims=("graph", "position")`` to label it.
    Labels held in ``pm.Data`` or given to ``pm.observe`` are the value itself, so they must be the
    padded (G, L) matrix: ``pmc.pad_labels(batch, flat_labels)``.

    Observed labels may be missing (masked in a numpy masked array, NaN, or -1): they are summed
    out of the likelihood, ``log Z(clamped to the observed labels) - log Z`` per graph (0 for a
    graph without observed labels), and :func:`pymc_crf.impute` draws them afterwards.

    Examples
    --------
    >>> import numpy as np, pymc as pm, pymc_crf as pmc
    >>> batch = pmc.GraphBatch.chains([5, 3])
    >>> X = np.random.default_rng(0).normal(size=(8, 2))
    >>> with pm.Model():
    ...     W = pm.Normal("W", 0, 1, shape=(2, 3))
    ...     T = pm.Normal("T", 0, 1, shape=(3, 3))
    ...     y = pmc.CRF("y", graphs=batch, node_features=X, node_weights=W, edge_weights=T,
    ...                 observed=np.zeros(8, dtype=int))
    """

    rv_type = CRFRV

    def __new__(cls, name, *args, observed=None, graphs=None, **kwargs):
        graphs = None if graphs is None else as_graph_batch(graphs)
        if observed is not None and graphs is not None:
            observed = _validated_observed(graphs, observed, kwargs)
        return super().__new__(cls, name, *args, observed=observed, graphs=graphs, **kwargs)

    @classmethod
    def dist(cls, graphs: GraphBatch | None = None,
             node_features: ArrayLike | scipy.sparse.spmatrix | None = None,
             node_weights: TensorLike | None = None,
             edge_features: ArrayLike | scipy.sparse.spmatrix | None = None,
             edge_weights: TensorLike | None = None, potential: str = "loglinear",
             epsilon: float = 0.0, inference: str | Engine = "auto", max_treewidth: int = 10,
             n_labels: int | None = None, **kwargs: Any) -> TensorVariable:
        """Unregistered CRF variable (for ``pm.logp`` / ``pm.draw`` outside a model).

        Parameters
        ----------
        graphs, node_features, node_weights, edge_features, edge_weights, potential, epsilon
            As :class:`CRF`.
        inference, max_treewidth, n_labels
            As :class:`CRF`.
        **kwargs
            Passed to ``pymc.Distribution.dist``; a ``size``, or a ``shape`` other than
            (graphs, max nodes), is refused.

        Returns
        -------
        TensorVariable
            The (G, L) int64 label matrix of the batch, -1 past each graph's end.
        """
        graphs = as_graph_batch(graphs)
        refuse_other_shapes(kwargs, (graphs.n_graphs, int(graphs.n_nodes.max())),
                            "a CRF over this batch", "graphs, max nodes")
        X, Wn, Xe, We, K = _checked_inputs(graphs, node_features, node_weights, edge_features,
                                           edge_weights, potential, epsilon, n_labels)
        engine = get_engine(inference, graphs, max_treewidth=max_treewidth, need_log_z=True)
        engine.check_size(graphs, K)  # e.g. brute force on too large a graph: refused here
        # sparse features enter the graph as sparse constants (PyMC would densify nothing else)
        given = {"node_features": _feature_input(X), "node_weights": Wn,
                 "edge_features": _feature_input(Xe), "edge_weights": We}
        layout = tuple(k for k in _PARAM_NAMES if given[k] is not None)
        return super().dist([given[k] for k in layout], batch=graphs, engine=engine,
                            potential=potential, epsilon=float(epsilon), n_labels=K,
                            layout=layout, inference=inference, max_treewidth=max_treewidth,
                            **kwargs)

    @classmethod
    def rv_op(cls, *params, batch, engine, potential, epsilon, n_labels, layout, inference,
              max_treewidth, size=None, rng=None):
        if rng is None:
            rng = pt.random.shared_rng(seed=None)
        op = CRFRV(batch, engine, potential, epsilon, n_labels, layout, inference, max_treewidth)
        _, rv = op(*params, size=size, rng=rng, return_next_rng=True)
        return rv


def _feature_input(x):
    """Features as an RV input: a sparse constant for scipy.sparse, the array otherwise."""
    return ps.as_sparse_variable(x) if scipy.sparse.issparse(x) else x


def _validated_observed(graphs: GraphBatch, observed, kwargs) -> np.ndarray:
    """Pad and check observed labels against the batch and K before PyMC sees them."""
    if hasattr(observed, "type"):  # a PyTensor variable (pm.Data): checked by logp at run time
        # and here at its current shape, which PyMC gives the variable as its shape: flat
        # labels would otherwise be refused as a shape of the variable, not named as labels
        got = current_shape_tuple([observed.shape[i] for i in range(observed.ndim)])
        if got is not None and got != (graphs.n_graphs, int(graphs.n_nodes.max())):
            raise ValueError(f"{_label_layout(graphs)}; got shape {got}")
        return observed
    K = kwargs.get("n_labels")
    if K is None:
        for key in ("node_weights", "edge_weights"):
            w = kwargs.get(key)
            if w is not None:
                K = _static_last_dim(pt.as_tensor_variable(w))
                if K is not None:
                    break
    padded = pad_labels(graphs, observed, K, missing=True)
    if K in (None, 2) and _look_like_spins(graphs, observed, padded):
        warn_at_caller("pmc.CRF: the observed labels are -1 and 1 only, and -1 marks a missing "
                       "label, so every -1 is left out of the likelihood; if these are spins or "
                       "a +-1 mask, give label indices 0 / 1 ((labels + 1) // 2)", UserWarning)
    return padded


def _look_like_spins(graphs: GraphBatch, observed, padded: np.ndarray) -> bool:
    """Labels written as -1 / +1 (a binary mask in spin form): only -1 and 1 inside the graphs,
    with -1 given as a number rather than as NaN or a masked entry (those say "missing" on
    purpose)."""
    inside = padded[np.arange(padded.shape[1])[None, :] < graphs.n_nodes[:, None]]
    if set(np.unique(inside).tolist()) != {-1, 1}:
        return False
    parts = observed if isinstance(observed, list | tuple) else [observed]
    if any(np.ma.isMaskedArray(x) for x in parts):
        return False
    return not any(np.isnan(np.asarray(x, dtype=np.float64)).any() for x in parts)


def _label_layout(batch: GraphBatch) -> str:
    return (f"CRF labels must be the ({batch.n_graphs}, {int(batch.n_nodes.max())}) (graphs, max "
            "nodes) matrix of this batch, -1 past each graph's end (pmc.pad_labels makes it from "
            "flat labels)")


def _constant_flat_labels(batch: GraphBatch, padded: np.ndarray) -> np.ndarray:
    """Flat labels from a constant (G, L) matrix (``observed=`` after ``pad_labels``, or a
    value given to ``pm.logp``), its layout checked by name."""
    G, L = batch.n_graphs, int(batch.n_nodes.max())
    if padded.shape != (G, L):
        raise ValueError(f"{_label_layout(batch)}; got shape {padded.shape}")
    pad = np.arange(L)[None, :] >= batch.n_nodes[:, None]
    if (padded[pad] != -1).any():
        raise ValueError(f"{_label_layout(batch)}; got a label past a graph's end")
    return unpad_labels(batch, padded)


@_logprob.register(CRFRV)
def crf_logp(op: CRFRV, values, rng, size, *params, **kwargs):
    """Per-graph log-likelihood: score of the labelling minus log Z (one value per graph).

    Missing labels (``-1`` inside a graph) are summed out: such a graph scores
    ``log Z(clamped to its observed labels) - log Z`` and a graph with no observed label 0
    (:mod:`pymc_crf.inference.clamp`). For constant labels (``observed=``) the graphs are sorted
    once, so fully observed data pay one log Z; labels given as a variable (``pm.Data``) pay a
    clamped and a plain log Z of the whole batch."""
    [value] = values
    params = _checked_weights(op, params)
    if not isinstance(value, pt.TensorConstant):
        value = integer_labels(value, "CRF", missing=True)
        return _logp_summed_out(op, value, *op.log_potentials(params))
    flat = _constant_flat_labels(op.batch, np.asarray(value.data))
    if (flat >= 0).all() or (flat < -1).any() or (flat >= op.n_labels).any():
        if _feature_path(op, params):
            return _logp_observed_features(op, value, params)
        return _logp_observed(op, value, *op.log_potentials(params))
    node_logpot, edge_logpot = op.log_potentials(params)
    return _logp_missing(op, ObservedLabels(op.batch, flat, op.n_labels), value, node_logpot,
                         edge_logpot)


def shape_check(message: str, value, expected: tuple):
    """``value`` with its shape checked against ``expected`` (an entry None: any size).

    Where the static shape already disagrees (a numpy value given to ``pm.logp``, whose indexing
    PyTensor shapes while the graph is built, before a run-time check could speak) the
    ValueError is raised at once; sizes unknown until run time (``pm.Data``) are checked where
    the logp runs."""
    static = value.type.shape
    if any(s is not None and e is not None and s != e for s, e in zip(static, expected, strict=True)):
        raise ValueError(f"{message}; got shape {tuple(static)}")
    conditions = [pt.eq(value.shape[i], e) for i, e in enumerate(expected)
                  if e is not None and static[i] is None]
    return data_check(message)(value, *conditions) if conditions else value


def data_check(message: str) -> CheckAndRaise:
    """An Op ``check(x, *conditions)`` returning ``x`` and raising ``ValueError(message)`` where
    the compiled graph runs when a condition is false: for data that ``pm.set_data`` can change
    after the model is built (labels, weights held in ``pm.Data``). It runs before the kernels
    that use ``x`` (they take its output), so a wrong shape never reaches code that indexes
    without bounds checks; PyTensor's ``Assert`` would raise an ``AssertionError``."""
    return CheckAndRaise(ValueError, message)


def integer_labels(value, what: str, missing: bool):
    """Labels given at run time (``pm.Data``) as int64, checked where the logp runs.

    PyMC casts float data to the variable's int64, which truncates 0.5 to 0 and turns NaN into
    the smallest int64: the cast is undone here, and a fraction or inf is refused by name; with
    ``missing`` a NaN is a missing label (-1), as at fit time, else it is refused too."""
    src = value
    if src.owner is not None and is_cast(src.owner.op):
        src = src.owner.inputs[0]
    if not src.dtype.startswith("float"):
        return value
    if missing:
        src = pt.switch(pt.isnan(src), -1.0, src)
    whole = pt.all(pt.and_(pt.isfinite(src), pt.eq(src, pt.round(src))))
    hint = "; NaN marks a missing label" if missing else ""
    src = data_check(f"{what} labels must be whole numbers (class indices); got a fraction, "
                     f"inf{'' if missing else ' or NaN'}{hint}")(src, whole)
    return pt.cast(src, "int64")


def is_cast(op) -> bool:
    return isinstance(op, Elemwise) and isinstance(op.scalar_op, Cast)


def _checked_weights(op: CRFRV, params) -> list:
    """The parameters with the weights' shapes asserted where the logp runs, for weights whose
    static shape leaves sizes open (``pm.Data``, ``dims``): checked when the model was built,
    they can change with ``pm.set_data``, which gave PyTensor's "incompatible array sizes for
    np.dot" or the engine's table error instead of the weight's name."""
    p = op.params(params)
    K = op.n_labels
    want = {"node_weights": None if p["node_features"] is None
            else (_constant_value(p["node_features"]).shape[1], K),
            "edge_weights": (K, K) if p["edge_features"] is None
            else (_constant_value(p["edge_features"]).shape[1], K, K)}
    out = []
    for name, x in zip(op.layout, params, strict=True):
        shape = want.get(name)
        if shape is not None and None in x.type.shape and x.ndim == len(shape):
            ok = pt.all([pt.eq(d, n) for d, n in zip(x.shape, shape, strict=True)])
            x = data_check(f"CRF {name} must have shape {shape}")(x, ok)
        out.append(x)
    return out


def _flat_labels(batch: GraphBatch, value):
    """The (G, L) label matrix as flat (N,) labels, one per node. Labels given at run time
    (``pm.Data`` swapped by ``pm.set_data``) are checked there: the (G, L) shape, and -1 past
    each graph's end (as ``pad_labels`` and constant labels are checked at construction)."""
    G, L = batch.n_graphs, int(batch.n_nodes.max())
    N = batch.n_total_nodes
    layout = _label_layout(batch)
    if value.ndim != 2:
        raise ValueError(f"{layout}; got {value.ndim} dimensions")
    value = shape_check(layout, value, (G, L))
    flat = value.reshape((G * L,))
    flat_pos = batch.node_graph * L + (np.arange(N) - batch.node_offsets[batch.node_graph])
    pad_pos = np.setdiff1d(np.arange(G * L), flat_pos)
    if pad_pos.size:
        flat = data_check(layout)(flat, pt.all(pt.eq(flat[pad_pos], -1)))
    return flat[flat_pos]


def _observed_score(batch: GraphBatch, t, node_logpot, edge_logpot):
    """Per-graph unnormalised log score of the labels ``t`` (N,), all in 0..K-1."""
    N = batch.n_total_nodes
    score = pt.zeros(batch.n_graphs)[batch.node_graph].inc(node_logpot[np.arange(N), t])
    if batch.n_edges:
        u, v = batch.edges[:, 0], batch.edges[:, 1]
        rows = (np.zeros(batch.n_edges, np.int64) if _shared_table(batch, edge_logpot)
                else np.arange(batch.n_edges))
        score = score[batch.edge_graph].inc(edge_logpot[rows, t[u], t[v]])
    return score


def _shared_table(batch: GraphBatch, edge_logpot) -> bool:
    return edge_logpot.type.shape[0] == 1 and batch.n_edges != 1


def _observed_labels(op: CRFRV, value):
    """Flat labels (N,) of every-label-observed data, clipped into 0..K-1 for indexing, and
    whether all lay there."""
    t = _flat_labels(op.batch, value)
    K = op.n_labels
    return pt.clip(t, 0, K - 1), pt.and_(pt.ge(t, 0), pt.lt(t, K))


def _checked_logp(op: CRFRV, logp, valid):
    # Observed labels may come from pm.Data and change after the model is built, so a label
    # outside 0..K-1 is a data error, raised by name (PyMC's ParameterValueError) wherever the
    # logp runs (PyMC's or nutpie's NUTS, find_MAP), rather than a -inf that samplers report as
    # failed initialisation; the clip of the labels keeps the indexing in range until the check
    # fires.
    return check_parameters(logp, valid,
                            msg=f"CRF labels must lie in 0..{op.n_labels - 1} at every node",
                            can_be_replaced_by_ninf=False)


def _logp_observed(op: CRFRV, value, node_logpot, edge_logpot):
    """Every label observed: score - log Z; labels outside 0..K-1 raise."""
    t, valid = _observed_labels(op, value)
    score = _observed_score(op.batch, t, node_logpot, edge_logpot)
    log_z = LogPartition(op.batch, op.engine)(node_logpot, edge_logpot)
    return _checked_logp(op, score - log_z, valid)


def _feature_path(op: CRFRV, params) -> bool:
    """Whether log Z takes the edge features and weights (``FeatureLogPartition``; see
    :func:`~pymc_crf.ops.log_partition.feature_tables_path`)."""
    return feature_tables_path(op.potential, op.params(params)["edge_features"], op.engine)


def _logp_observed_features(op: CRFRV, value, params):
    """:func:`_logp_observed` with the edge tables left to the engine: the labels' edge score
    ``x_e . w[:, y_u, y_v]`` is a gather from the (Fe, K^2) weights and log Z is
    ``FeatureLogPartition``, so no (E, K, K) array is formed."""
    batch, K = op.batch, op.n_labels
    p = op.params(params)
    node_logpot, _ = log_potential_tables_pt(op.potential, op.epsilon, batch.n_total_nodes, K,
                                             p["node_features"], p["node_weights"])
    x = pt.cast(pt.as_tensor_variable(p["edge_features"]), "float64")
    w = pt.cast(pt.as_tensor_variable(p["edge_weights"]), "float64").reshape((x.shape[1], K * K))
    t, valid = _observed_labels(op, value)
    N = batch.n_total_nodes
    score = pt.zeros(batch.n_graphs)[batch.node_graph].inc(node_logpot[np.arange(N), t])
    pair = t[batch.edges[:, 0]] * K + t[batch.edges[:, 1]]
    score = score[batch.edge_graph].inc((x * w.T[pair]).sum(axis=1))
    log_z = FeatureLogPartition(batch, op.engine)(node_logpot, x, w)
    return _checked_logp(op, score - log_z, valid)


def _logp_missing(op: CRFRV, obs: ObservedLabels, value, node_logpot, edge_logpot):
    """Constant labels with some missing: fully observed graphs score - log Z, partly observed
    ones log Z(clamped) - log Z, unobserved ones 0 (their log Z is not computed)."""
    batch = op.batch
    shared = _shared_table(batch, edge_logpot)
    out = pt.zeros(batch.n_graphs)
    if obs.empty.all():
        return out
    live = obs.part(~obs.empty)
    log_z = LogPartition(live.batch, op.engine)(*live.tables(node_logpot, edge_logpot, shared,
                                                             clamp=False))
    at_live = np.cumsum(~obs.empty) - 1  # graph id -> position among the live graphs
    if obs.full.any():
        t = pt.as_tensor_variable(np.where(obs.observed, obs.labels, 0))
        score = _observed_score(batch, t, node_logpot, edge_logpot)
        full = np.flatnonzero(obs.full)
        out = pt.set_subtensor(out[full], score[full] - log_z[at_live[full]])
    if not obs.partial.any():
        return out
    part = obs.part(obs.partial)
    log_zc = LogPartition(part.batch, op.engine)(*part.tables(node_logpot, edge_logpot, shared))
    return pt.set_subtensor(out[part.graphs], log_zc - log_z[at_live[part.graphs]])


def _logp_summed_out(op: CRFRV, value, node_logpot, edge_logpot):
    """Labels known only at run time: log Z(clamped to the observed labels) - log Z per graph,
    which is score - log Z for a fully observed graph; labels outside -1..K-1 raise."""
    batch = op.batch
    K = node_logpot.shape[-1]
    t = _flat_labels(batch, value)
    valid = pt.and_(pt.ge(t, -1), pt.lt(t, K))
    forbidden = pt.and_(pt.ge(t, 0)[:, None], pt.neq(pt.arange(K)[None, :], t[:, None]))
    clamped = node_logpot + pt.switch(forbidden, -np.inf, 0.0)
    log_partition = LogPartition(batch, op.engine)
    log_zc = log_partition(clamped, edge_logpot)
    log_z = log_partition(node_logpot, edge_logpot)
    # a data error raised by name wherever the logp runs, as in _checked_logp
    return check_parameters(log_zc - log_z, pt.all(valid),
                            msg=f"CRF labels must lie in 0..{op.n_labels - 1} (or -1 for a "
                            "missing label) at every node", can_be_replaced_by_ninf=False)


@_support_point.register(CRFRV)
def crf_support_point(op: CRFRV, rv, *params):
    return pt.as_tensor_variable(_pad(op.batch, np.zeros(op.batch.n_total_nodes, np.int64)))


# Draws always run the engine's sampler from object mode; PyTensor's notice that its fallback does
# so (for sparse features, below) tells the user nothing to act on.
warnings.filterwarnings("ignore", message=r"Numba will use object mode to run CRFRV",
                        category=UserWarning)


@numba_core_rv_funcify.register(CRFRV)
def _numba_crf_rv(op: CRFRV, node):
    """Draws in numba through the engine's sampler in object mode (:mod:`.numba_draws`), named by
    batch structure, engine settings and potential. With sparse features (which the numba
    wrapper of random variables cannot broadcast) PyTensor's object-mode fallback draws them."""
    if any(isinstance(p.type, ps.SparseTensorType) for p in node.inputs):
        raise NotImplementedError("sparse features: drawn by the object-mode fallback")
    key = content_key(op.batch, op.engine, "CRFRV", op.potential, op.epsilon, op.n_labels,
                      op.layout)
    return objmode_random_fn(op, key, ndim=2)
