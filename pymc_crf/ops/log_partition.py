"""PyTensor Ops for log Z of a graph batch: the only place where discrete sums happen.

``LogPartition(node_logpot, edge_logpot) -> log Z per graph``. Its gradient is the
``LogPartitionGrad`` Op (the marginals weighted by the output gradient, one engine pass), whose own
gradient is ``LogPartitionHVP`` (covariance-vector products of the sufficient statistics), so second
derivatives (Laplace approximations, Hessians) work too.

Everything from features to log-potentials is ordinary PyTensor, so autodiff does the chain rule.

A compiled logp-and-gradient graph holds ``LogPartition(n, e)`` and ``LogPartitionGrad(n, e, g)``
of the same tables; the ``fuse_log_partition_with_grad`` rewrite replaces the pair by one
``LogPartitionWithGrad`` node, so the engine runs once (its marginals pass gives log Z too)
instead of a log Z pass plus a marginals pass. With per-edge tables the log Z pass alone costs
about two thirds of the marginals pass (every table is exponentiated in both).

Each Op registers a numba implementation. Engines that provide ``numba_kernels`` (the chain engine)
are called directly from compiled code; the others run in numba's object mode through the engine's
Python entry point (an explicit choice, so PyTensor does not warn about a silent fallback).
"""

from __future__ import annotations

import hashlib
import pathlib
from typing import Any

import numba
import numpy as np
import pytensor.tensor as pt
from pytensor.gradient import DisconnectedType, grad_not_implemented
from pytensor.gradient import pullback as graph_pullback
from pytensor.graph.basic import Apply
from pytensor.graph.op import Op
from pytensor.graph.rewriting.basic import node_rewriter
from pytensor.graph.traversal import ancestors
from pytensor.link.numba.dispatch.basic import get_numba_type, register_funcify_and_cache_key
from pytensor.tensor import TensorLike
from pytensor.tensor.rewriting.basic import register_specialize
from pytensor.tensor.variable import TensorConstant, TensorVariable

from pymc_crf.feature_products import is_sparse, source_key
from pymc_crf.graphs.batch import GraphBatch, as_graph_batch
from pymc_crf.inference.base import Engine, check_potentials, forms_feature_tables
from pymc_crf.inference.select import get_engine, require_log_z
from pymc_crf.potentials import Potential, constant_row, get_potential

__all__ = ["FeatureLogPartition", "FeatureLogPartitionGrad", "FeatureLogPartitionWithGrad",
           "LogPartition", "LogPartitionGrad", "LogPartitionHVP", "LogPartitionWithGrad",
           "log_partition"]


class _BatchOp(Op):
    """An Op bound to one graph batch and one engine (compared by identity of both)."""

    __props__ = ()

    def __init__(self, batch: GraphBatch, engine: Engine):
        self.batch = batch
        self.engine = engine

    def __eq__(self, other):
        return (type(self) is type(other) and self.batch is other.batch
                and self.engine is other.engine)

    def __hash__(self):
        return hash((type(self), id(self.batch), id(self.engine)))

    def __str__(self):
        return f"{type(self).__name__}{{{self.engine.name}, {self.batch.n_graphs} graphs}}"

    def _inputs(self, node_logpot, edge_logpot):
        node = pt.as_tensor_variable(node_logpot).astype("float64")
        edge = pt.as_tensor_variable(edge_logpot).astype("float64")
        if node.ndim != 2 or edge.ndim != 3:
            raise ValueError(f"log-potentials must be (N, K) and (E, K, K) tensors; got ndim "
                             f"{node.ndim} and {edge.ndim}")
        # the shapes known when the graph is built are checked now (the engine checks the rest,
        # and NaN, when the graph is evaluated)
        b = self.batch
        (n_rows, K), (e_rows, k1, k2) = node.type.shape, edge.type.shape
        if n_rows is not None and n_rows != b.n_total_nodes:
            raise ValueError(f"node log-potentials have {n_rows} rows; the batch has "
                             f"{b.n_total_nodes} nodes")
        if e_rows is not None and e_rows not in (b.n_edges, 1):
            raise ValueError(f"edge log-potentials have {e_rows} tables; the batch has "
                             f"{b.n_edges} edges (or give 1 shared table)")
        sizes = {k for k in (K, k1, k2) if k is not None}
        if len(sizes) > 1:
            raise ValueError(f"node log-potentials have {K} labels but the edge tables are "
                             f"{k1} x {k2}")
        return node, edge


def _store(output_storage, *outputs) -> None:
    """``perform``'s outputs into PyTensor's storage cells, as float64 arrays."""
    for cell, value in zip(output_storage, outputs, strict=True):
        cell[0] = np.asarray(value, dtype=np.float64)


def _fused_pullback(op, inputs, outputs, output_grads):
    """The pullback of the fused log Z and gradient Ops: none, as the
    ``fuse_log_partition_with_grad`` rewrite makes them after differentiation."""
    return [grad_not_implemented(op, i, x, "the fused log Z and gradient node (made by a "
                                 "rewrite after differentiation)")
            for i, x in enumerate(inputs)]


class LogPartition(_BatchOp):
    """log Z per graph of ``batch`` from node (N, K) and edge (E, K, K) or (1, K, K) log-potentials.

    The engine must give log Z (exact or approximate): a sampler such as Gibbs is refused here,
    when the graph is built, not when it is evaluated.
    """

    def __init__(self, batch: GraphBatch, engine: Engine):
        require_log_z(engine, engine.name)
        super().__init__(batch, engine)

    def make_node(self, node_logpot, edge_logpot):
        node, edge = self._inputs(node_logpot, edge_logpot)
        return Apply(self, [node, edge], [pt.dvector(shape=(self.batch.n_graphs,))])

    def perform(self, node, inputs, output_storage):
        _store(output_storage, self.engine.log_partition(self.batch, inputs[0], inputs[1]))

    def infer_shape(self, node, shapes):
        return [(self.batch.n_graphs,)]

    def pullback(self, inputs, outputs, output_grads):
        gn, ge = LogPartitionGrad(self.batch, self.engine)(inputs[0], inputs[1], output_grads[0])
        return [gn, ge]


class LogPartitionGrad(_BatchOp):
    """Vector-Jacobian product of log Z: marginals of graph g times the output gradient ``g[g]``."""

    def make_node(self, node_logpot, edge_logpot, g):
        node, edge = self._inputs(node_logpot, edge_logpot)
        g = pt.as_tensor_variable(g).astype("float64")
        return Apply(self, [node, edge, g], [node.type(), edge.type()])

    def perform(self, node, inputs, output_storage):
        gn, ge = self.engine.weighted_marginals(self.batch, inputs[0], inputs[1], inputs[2])
        _store(output_storage, gn, ge)

    def infer_shape(self, node, shapes):
        return [shapes[0], shapes[1]]

    def pullback(self, inputs, outputs, output_grads):
        cn, ce = (pt.zeros_like(o) if isinstance(c.type, DisconnectedType) else c
                  for c, o in zip(output_grads, outputs, strict=True))
        hn, he, hg = LogPartitionHVP(self.batch, self.engine)(*inputs, cn, ce)
        return [hn, he, hg]


class LogPartitionWithGrad(_BatchOp):
    """log Z and its vector-Jacobian product from one engine pass: the outputs of
    ``LogPartition(n, e)`` and ``LogPartitionGrad(n, e, g)`` together.

    Made only by the ``fuse_log_partition_with_grad`` rewrite, after differentiation, so it has
    no gradient of its own. Calls ``Engine.log_z_and_weighted_marginals``.

    Parameters
    ----------
    batch : GraphBatch
    engine : Engine

    Notes
    -----
    Applied to ``(node_logpot (N, K), edge_logpot (E, K, K) or (1, K, K), g (G,))`` it returns
    ``(log_z (G,), g-weighted node marginals (N, K), g-weighted edge marginals)``, the latter
    shaped like ``edge_logpot``.
    """

    def make_node(self, node_logpot, edge_logpot, g):
        node, edge = self._inputs(node_logpot, edge_logpot)
        g = pt.as_tensor_variable(g).astype("float64")
        return Apply(self, [node, edge, g],
                     [pt.dvector(shape=(self.batch.n_graphs,)), node.type(), edge.type()])

    def perform(self, node, inputs, output_storage):
        lz, gn, ge = self.engine.log_z_and_weighted_marginals(self.batch, *inputs)
        _store(output_storage, lz, gn, ge)

    def infer_shape(self, node, shapes):
        return [(self.batch.n_graphs,), shapes[0], shapes[1]]

    pullback = _fused_pullback


class _FeatureOp(_BatchOp):
    """Inputs of the edge-feature Ops: node log-potentials (N, K), edge features (E, Fe) and
    edge weights (Fe, K^2), whose product is the per-edge log-linear tables."""

    def _feature_inputs(self, node_logpot, edge_features, edge_weights):
        node = pt.as_tensor_variable(node_logpot).astype("float64")
        x = pt.as_tensor_variable(edge_features).astype("float64")
        w = pt.as_tensor_variable(edge_weights).astype("float64")
        if node.ndim != 2 or x.ndim != 2 or w.ndim != 2:
            raise ValueError("edge-feature log Z takes node log-potentials (N, K), edge features "
                             f"(E, Fe) and edge weights (Fe, K^2); got ndim {node.ndim}, "
                             f"{x.ndim} and {w.ndim}")
        b = self.batch
        n_rows, e_rows = node.type.shape[0], x.type.shape[0]
        if n_rows is not None and n_rows != b.n_total_nodes:
            raise ValueError(f"node log-potentials have {n_rows} rows; the batch has "
                             f"{b.n_total_nodes} nodes")
        if e_rows is not None and e_rows != b.n_edges:
            raise ValueError(f"edge features have {e_rows} rows; the batch has {b.n_edges} "
                             "edges")
        return node, x, w

    def _tables(self, node, x, w):
        """The edge tables (E, K, K) ``x @ w``, for derivatives through the table Ops."""
        K = node.shape[1]
        return pt.dot(x, w).reshape((x.shape[0], K, K))

    def _perform(self, inputs):
        """The engine's log Z and gradient (inputs with ``g``), or log Z alone (without)."""
        node, x, w, *g = inputs
        K = node.shape[1]
        if w.shape[1] != K * K:
            raise ValueError(f"edge weights must be (Fe, K^2) = ({w.shape[0]}, {K * K}) with the "
                             f"node tables' K = {K}; got {w.shape}")
        w = w.reshape(w.shape[0], K, K)
        if not g:
            return self.engine.feature_log_partition(self.batch, node, x, w)
        return self.engine.log_z_and_feature_marginals(self.batch, node, x, w, g[0])


class FeatureLogPartition(_FeatureOp):
    """log Z per graph of ``batch`` for node log-potentials (N, K) and the log-linear per-edge
    tables ``edge_features @ edge_weights`` (features (E, Fe), weights (Fe, K^2)), through
    ``Engine.log_z_and_feature_marginals``: the chain engine forms no (E, K, K) tables or
    marginals (but those of chains too long for its lane blocks, one chain at a time). Its
    gradient is ``FeatureLogPartitionGrad``; in the edge features (constant
    in a CRF) it is that of the table Ops."""

    def __init__(self, batch: GraphBatch, engine: Engine):
        require_log_z(engine, engine.name)
        super().__init__(batch, engine)

    def make_node(self, node_logpot, edge_features, edge_weights):
        ins = self._feature_inputs(node_logpot, edge_features, edge_weights)
        return Apply(self, list(ins), [pt.dvector(shape=(self.batch.n_graphs,))])

    def perform(self, node, inputs, output_storage):
        _store(output_storage, self._perform(inputs))

    def infer_shape(self, node, shapes):
        return [(self.batch.n_graphs,)]

    def pullback(self, inputs, outputs, output_grads):
        n, x, w = inputs
        [g] = output_grads
        gn, gw = FeatureLogPartitionGrad(self.batch, self.engine)(n, x, w, g)
        # the edge features' gradient (never needed for constant features) by the table Ops
        _, ge = LogPartitionGrad(self.batch, self.engine)(n, self._tables(n, x, w), g)
        return [gn, pt.dot(ge.reshape((x.shape[0], w.shape[1])), w.T), gw]


class FeatureLogPartitionGrad(_FeatureOp):
    """Vector-Jacobian product of ``FeatureLogPartition`` in the node tables and the edge
    weights: the node marginals of graph g times ``g[g]`` (N, K) and the expected edge features
    ``sum_e g[g(e)] x_e mu_e`` (Fe, K^2). Second derivatives go through the table Ops."""

    def make_node(self, node_logpot, edge_features, edge_weights, g):
        ins = list(self._feature_inputs(node_logpot, edge_features, edge_weights))
        ins.append(pt.as_tensor_variable(g).astype("float64"))
        return Apply(self, ins, [ins[0].type(), ins[2].type()])

    def perform(self, node, inputs, output_storage):
        _, gn, gw = self._perform(inputs)
        _store(output_storage, gn, np.reshape(gw, inputs[2].shape))

    def infer_shape(self, node, shapes):
        return [shapes[0], shapes[2]]

    def pullback(self, inputs, outputs, output_grads):
        n, x, w, g = inputs
        gn, ge = LogPartitionGrad(self.batch, self.engine)(n, self._tables(n, x, w), g)
        gw = pt.dot(x.T, ge.reshape((x.shape[0], w.shape[1])))
        cots = [pt.zeros_like(o) if isinstance(c.type, DisconnectedType) else c
                for c, o in zip(output_grads, outputs, strict=True)]
        return graph_pullback([gn, gw], list(inputs), cots, disconnected_inputs="ignore")


class FeatureLogPartitionWithGrad(_FeatureOp):
    """``FeatureLogPartition`` and ``FeatureLogPartitionGrad`` of the same inputs from one engine
    pass; made only by the ``fuse_log_partition_with_grad`` rewrite (no gradient of its own)."""

    def make_node(self, node_logpot, edge_features, edge_weights, g):
        ins = list(self._feature_inputs(node_logpot, edge_features, edge_weights))
        ins.append(pt.as_tensor_variable(g).astype("float64"))
        return Apply(self, ins, [pt.dvector(shape=(self.batch.n_graphs,)), ins[0].type(),
                                 ins[2].type()])

    def perform(self, node, inputs, output_storage):
        lz, gn, gw = self._perform(inputs)
        _store(output_storage, lz, gn, np.reshape(gw, inputs[2].shape))

    def infer_shape(self, node, shapes):
        return [(self.batch.n_graphs,), shapes[0], shapes[2]]

    pullback = _fused_pullback


def feature_tables_path(potential: str | Potential, edge_features: Any, engine: Engine) -> bool:
    """Whether log Z takes the edge features and weights instead of per-edge tables
    (``FeatureLogPartition``, ``Engine.log_z_and_feature_marginals``): log-linear potentials,
    dense edge features whose rows are not all equal (those are one shared table), and an
    engine that forms the tables itself
    (:func:`~pymc_crf.inference.base.forms_feature_tables`, the chain engine)."""
    return (edge_features is not None and not is_sparse(edge_features)
            and get_potential(potential).identity and forms_feature_tables(engine)
            and constant_row(edge_features) is None)


# log Z Op -> (its gradient Op, the fused Op of both)
_FUSED = {LogPartition: (LogPartitionGrad, LogPartitionWithGrad),
          FeatureLogPartition: (FeatureLogPartitionGrad, FeatureLogPartitionWithGrad)}


@node_rewriter([LogPartition, FeatureLogPartition])
def fuse_log_partition_with_grad(fgraph, node):
    """``LogPartition(n, e)`` and a ``LogPartitionGrad(n, e, g)`` of the same batch, engine and
    tables become one ``LogPartitionWithGrad(n, e, g)``, unless ``g`` depends on log Z (as in a
    hidden CRF, whose class weights are a softmax of the log Zs): fusing would make a cycle.
    Likewise ``FeatureLogPartition(n, x, w)`` and ``FeatureLogPartitionGrad(n, x, w, g)``."""
    op = node.op
    grad_type, fused_type = _FUSED[type(op)]
    ins = node.inputs
    lz_out = node.outputs[0]
    for client, _ in fgraph.clients[ins[0]]:
        cop = getattr(client, "op", None)
        if (isinstance(cop, grad_type) and cop.batch is op.batch and cop.engine is op.engine
                and all(a is b for a, b in zip(client.inputs[:-1], ins, strict=True))
                and lz_out not in set(ancestors([client.inputs[-1]]))):
            lz, *grads = fused_type(op.batch, op.engine)(*ins, client.inputs[-1])
            return {lz_out: lz, **dict(zip(client.outputs, grads, strict=True))}
    return None


# overwrite: a re-imported module (importlib.reload) registers its own classes' rewrite
register_specialize(fuse_log_partition_with_grad, overwrite_existing=True)


class LogPartitionHVP(_BatchOp):
    """Second derivatives: for cotangents (cn, ce) of the weighted marginals, returns
    ``(sum_g g_g H_g c, same for the edge table, per-graph <marginals_g, c>)``."""

    def make_node(self, node_logpot, edge_logpot, g, cn, ce):
        node, edge = self._inputs(node_logpot, edge_logpot)
        ins = [node, edge] + [pt.as_tensor_variable(x).astype("float64") for x in (g, cn, ce)]
        return Apply(self, ins, [node.type(), edge.type(), ins[2].type()])

    def perform(self, node, inputs, output_storage):
        b, eng = self.batch, self.engine
        nlp, elp, g, cn, ce = inputs
        shared = elp.shape[0] == 1 and b.n_edges != 1
        E = b.n_edges
        full = np.ascontiguousarray(np.broadcast_to(elp, (E, *elp.shape[1:]))) if shared else elp
        cfull = np.ascontiguousarray(np.broadcast_to(ce, full.shape)) if shared else ce
        m = eng.marginals(b, nlp, full)
        hn, he = eng.covariance_vector_product(b, nlp, full, cn, cfull)
        hn = hn * g[b.node_graph][:, None]
        he = he * g[b.edge_graph][:, None, None]
        hg = (np.bincount(b.node_graph, (m.node * cn).sum(1), minlength=b.n_graphs)
              + np.bincount(b.edge_graph, (m.edge * cfull).sum((1, 2)), minlength=b.n_graphs))
        output_storage[0][0] = hn
        output_storage[1][0] = he.sum(0, keepdims=True) if shared else he
        output_storage[2][0] = hg

    def infer_shape(self, node, shapes):
        return [shapes[0], shapes[1], shapes[2]]

    def pullback(self, inputs, outputs, output_grads):
        # Third derivatives of log Z are not needed by any sampler or fitter here.
        return [grad_not_implemented(self, i, x, "third derivatives of log Z")
                for i, x in enumerate(inputs)]


def log_partition(node_logpot: TensorLike, edge_logpot: TensorLike, batch: GraphBatch,
                  inference: str | Engine = "auto", max_treewidth: int = 10) -> TensorVariable:
    """log Z per graph as a differentiable PyTensor vector of shape (G,).

    Parameters
    ----------
    node_logpot : TensorLike, shape (N, K)
    edge_logpot : TensorLike, shape (E, K, K), or (1, K, K) for one table shared by every edge
    batch : GraphBatch
    inference : {"auto", "chain", "junction_tree", "bp", "bethe", "tree_ep", "mean_field",
        "brute_force"} or Engine
        Any engine that gives log Z (``"gibbs"`` does not and is refused).
    max_treewidth : int
        Limit for the junction tree (``"auto"`` falls back to BP above it).

    Returns
    -------
    TensorVariable, shape (G,)
    """
    batch = as_graph_batch(batch)  # networkx graphs too, as pmc.CRF takes them
    engine = get_engine(inference, batch, max_treewidth=max_treewidth, need_log_z=True)
    node, edge = pt.as_tensor_variable(node_logpot), pt.as_tensor_variable(edge_logpot)
    if node.type.ndim == 2 and node.type.shape[1] is not None:
        engine.check_size(batch, int(node.type.shape[1]))  # e.g. brute force: refused here
    out = LogPartition(batch, engine)(node, edge)  # its static shapes checked by make_node
    if isinstance(node, TensorConstant) and isinstance(edge, TensorConstant):
        # constant tables are folded while the graph compiles, where a refusal would come as
        # PyTensor's rewrite-failure tracebacks before the error: checked here instead
        check_potentials(batch, node.data, edge.data)
    return out


# ---------------------------------------------------------------------------- numba backend
# Engines without njit kernels run in numba's object mode. To keep the compiled graph cacheable
# across processes, the object-mode block calls one module-level function with an integer key
# derived from the batch's content and the engine's settings; the Op is looked up in a per-process
# registry filled when the graph is compiled, so a key always names the same computation.
_OBJMODE_OPS: dict[int, tuple[Op, Apply]] = {}


def _structure_hash(batch: GraphBatch):
    """sha256 of the batch's structure (offsets and edges), the part compiled kernels close over."""
    h = hashlib.sha256()
    for a in (batch.node_offsets, batch.edge_offsets, batch.edges):
        h.update(np.ascontiguousarray(a).tobytes())
    return h


def content_key(batch: GraphBatch, engine: Engine, *extra) -> int:
    """A 63-bit key naming a computation by the batch's structure and the engine's settings."""
    h = _structure_hash(batch)
    settings = sorted((k, v) for k, v in vars(engine).items()
                      if isinstance(v, int | float | str | bool | type(None)))
    h.update(repr((type(engine).__module__, type(engine).__qualname__, settings, extra)).encode())
    return int.from_bytes(h.digest()[:8], "little") & (2**63 - 1)


def _perform_registered(key, inputs):
    op, node = _OBJMODE_OPS[key]
    storage = [[None] for _ in node.outputs]
    op.perform(node, list(inputs), storage)
    return storage[0][0] if len(storage) == 1 else tuple(s[0] for s in storage)


def _objmode_impl(op, node):
    """Call ``op.perform`` from numba's object mode, cacheably (see above)."""
    outs = node.outputs
    ret_sig = (get_numba_type(outs[0].type) if len(outs) == 1
               else numba.types.Tuple([get_numba_type(o.type) for o in outs]))
    key = content_key(op.batch, op.engine, type(op).__name__)
    _OBJMODE_OPS[key] = (op, node)

    @numba.njit
    def impl(*inputs):
        with numba.objmode(ret=ret_sig):
            ret = _perform_registered(key, inputs)
        return ret

    return impl, f"pymc_crf.objmode.{type(op).__name__}.{_SOURCE_KEY}.{key}"


def _source_key() -> str:
    """:func:`~pymc_crf.feature_products.source_key` of what the compiled Ops' numba
    implementations run: this module, the engines' shared code, and the chain engine's closures
    and the kernels they hand the tables to."""
    root = pathlib.Path(__file__).resolve().parent.parent
    return source_key(*sorted([*(root / "inference" / "chain").glob("*.py"),
                               root / "inference" / "base.py", root / "inference" / "kernels.py",
                               root / "allocation.py", root / "threads.py",
                               pathlib.Path(__file__).resolve()]))


_SOURCE_KEY = _source_key()


def _cache_key(op, node) -> str:
    """Numba cache key: the kernels close over the batch's offsets, and the engine picks them
    by the number of labels, so both are part of it."""
    h = _structure_hash(op.batch)
    return (f"pymc_crf.{type(op).__name__}.{op.engine.name}.{_SOURCE_KEY}."
            f"K{_n_labels(node)}.{h.hexdigest()}")


def _n_labels(node) -> int | None:
    """The number of labels of an Apply node's node tables (first input), where its type knows
    it: the engines pick kernels by the problem's size."""
    K = node.inputs[0].type.shape[-1]
    return None if K is None else int(K)


def _engine_kernels(op, node):
    """The engine's njit closures ``(log_z, vjp)`` for the Op's inputs, node and edge tables
    (``Engine.numba_kernels``) or node tables, edge features and weights
    (``feature_numba_kernels``), or None for an engine without them. They take the arrays as
    PyTensor passes them (any layout)."""
    kernels = (op.engine.feature_numba_kernels if isinstance(op, _FeatureOp)
               else op.engine.numba_kernels)
    return kernels(op.batch, _n_labels(node))


@register_funcify_and_cache_key(LogPartition)
@register_funcify_and_cache_key(FeatureLogPartition)
@register_funcify_and_cache_key(LogPartitionGrad)
@register_funcify_and_cache_key(FeatureLogPartitionGrad)
@register_funcify_and_cache_key(LogPartitionWithGrad)
@register_funcify_and_cache_key(FeatureLogPartitionWithGrad)
def _numba_log_partition(op, node, **kwargs):
    """The engine's njit kernels as the Op's numba implementation: ``log_z`` (log Z Ops),
    ``vjp`` (fused Ops) or ``vjp`` without its log Z (gradient Ops); object mode for an engine
    without kernels."""
    kernels = _engine_kernels(op, node)
    if kernels is None:
        return _objmode_impl(op, node)
    log_z, vjp = kernels
    if isinstance(op, LogPartition | FeatureLogPartition):
        return log_z, _cache_key(op, node)
    if isinstance(op, LogPartitionWithGrad | FeatureLogPartitionWithGrad):
        return vjp, _cache_key(op, node)

    @numba.njit
    def gradient(*inputs):
        _, g_node, g_edge = vjp(*inputs)  # g_edge: the edge tables' or the edge weights'
        return g_node, g_edge

    return gradient, _cache_key(op, node)


@register_funcify_and_cache_key(LogPartitionHVP)
def _numba_log_partition_hvp(op, node, **kwargs):
    return _objmode_impl(op, node)
