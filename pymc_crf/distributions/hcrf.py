"""The hidden CRF (HCRF) as a PyMC distribution: one class per graph, hidden states summed out.

For a graph ``g`` (usually a chain over the frames of a sequence) with node features ``x_t`` and a
hidden state ``s_t in {0..S-1}`` per node, the score of class ``y`` and hidden states ``s`` is
(Luo, Sun & Zhao, eqs. (1)-(3); Quattoni et al. 2007)::

    score(y, s) = sum_t [x_t @ theta_x[:, s_t] + theta_y[s_t, y]] + sum_(u,v) theta_e[s_u, s_v, y]

and ``p(y | X) = Z(y, X) / sum_y' Z(y', X)`` with ``Z(y, X) = sum_s exp score(y, s)``. Each
``log Z(y, X)`` is the log partition function of an ordinary CRF over the hidden states with node
log-potentials ``X @ theta_x + theta_y[:, y]`` and edge tables ``theta_e[:, :, y]``, so the whole
likelihood is ONE call of :func:`pymc_crf.ops.log_partition` over a replicated batch of
``C * G`` (class, graph) pairs (pair ``c * G + g``); no second forward-backward exists here.

Edge orientation follows :class:`~pymc_crf.graphs.GraphBatch`: for an edge ``(u, v)`` (for chains
``(t, t+1)``) the table entry ``theta_e[a, b, y]`` scores state ``a`` at ``u`` and ``b`` at ``v``,
i.e. ``theta_e[a, b, y]`` is the weight of the transition ``a -> b`` under class ``y``.

Label switching
---------------
The hidden states are exchangeable: permuting the state index of ``theta_x`` columns, ``theta_y``
rows and both state axes of ``theta_e`` leaves ``p(y | X)`` unchanged. With exchangeable priors the
posterior therefore has ``S!`` symmetric copies of every mode, and MCMC chains usually settle in
different copies (or, rarely, hop between them inside one chain). Consequences:

* marginal posteriors of individual weights (``theta_x[:, 0]`` etc.) are not interpretable across
  chains, and R-hat / ESS of those weights flag "non-convergence" that is only relabelling;
* everything invariant under relabelling -- ``p(y | X)``, predictive accuracy, the per-graph
  log-likelihood, ``az.loo`` -- is well defined and is what should be read and diagnosed;
* to inspect states, post-process each draw (e.g. sort states by a chosen feature weight) or look
  at one chain at a time.

Weights are also only identified up to shifts (adding a constant to all of ``theta_y[:, y]`` for
every ``y``, or to all entries of ``theta_e``, cancels in ``p(y | X)``), so use proper priors.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import pymc as pm
import pytensor
import pytensor.tensor as pt
import scipy.sparse as sp
from pymc.distributions.dist_math import check_parameters
from pymc.distributions.distribution import Distribution, _support_point
from pymc.logprob.abstract import _logprob
from pytensor.link.numba.dispatch.random import numba_core_rv_funcify
from pytensor.tensor.random.op import RandomVariable
from scipy.special import log_softmax

from pymc_crf.distributions.crf import (
    data_check,
    fixed_features,
    integer_labels,
    refuse_other_shapes,
    shape_check,
)
from pymc_crf.distributions.numba_draws import objmode_random_fn
from pymc_crf.graphs.batch import GraphBatch, as_graph_batch
from pymc_crf.inference.select import get_engine
from pymc_crf.ops.log_partition import content_key, log_partition
from pymc_crf.potentials import hcrf_pair_tables
from pymc_crf.validation import class_indices, refusal, whole_number

if TYPE_CHECKING:
    from numpy.typing import ArrayLike
    from pytensor.tensor import TensorLike, TensorVariable

__all__ = ["HCRF", "HCRFInfo", "HCRFRV", "find_hcrf", "single_hcrf", "from_sequences",
           "replicate_batch", "pair_logpots", "class_log_probs", "check_class_labels", "hcrf_logp"]


# ---------------------------------------------------------------------------- helpers (numpy)
def from_sequences(sequences: Sequence[Any]) -> tuple[GraphBatch, np.ndarray]:
    """A chain batch and stacked node features from a list of per-sequence arrays (T_g, F).

    Raises a ValueError naming the first empty sequence or a feature-size mismatch.
    """
    if len(sequences) == 0:
        raise ValueError("from_sequences: need at least one sequence")
    arrs = []
    for g, s in enumerate(sequences):
        a = np.asarray(s, dtype=np.float64)
        if a.ndim == 1:
            a = a[:, None]
        if a.ndim != 2:
            raise ValueError(f"sequence {g} must be a (T, F) array; got shape {np.shape(s)}")
        if a.shape[0] == 0:
            raise ValueError(f"sequence {g} has length 0; every sequence needs at least one frame")
        if arrs and a.shape[1] != arrs[0].shape[1]:
            raise ValueError(f"sequence {g} has {a.shape[1]} features, sequence 0 has "
                             f"{arrs[0].shape[1]}")
        arrs.append(a)
    return GraphBatch.chains([len(a) for a in arrs]), np.concatenate(arrs)


def replicate_batch(batch: GraphBatch, n_classes: int) -> GraphBatch:
    """The batch of ``n_classes * G`` (class, graph) pairs, pair ``c * G + g`` (cached on batch)."""
    def build() -> GraphBatch:
        if batch.is_chain:
            return GraphBatch.chains(np.tile(batch.n_nodes, n_classes))
        return batch.subset(np.tile(np.arange(batch.n_graphs), n_classes))

    return batch.cached(("hcrf_replicated", int(n_classes)), build)


def check_class_labels(labels: Any, n_graphs: int, n_classes: int) -> np.ndarray:
    """Validate one class label per graph; returns int64 array (G,)."""
    if np.ma.isMaskedArray(labels) and np.ma.getmaskarray(labels).any():
        raise ValueError("HCRF class labels cannot be missing (masked): a sequence without its "
                         "class adds nothing to the likelihood; leave it out of the training data")
    arr = np.asarray(labels)
    if arr.shape != (n_graphs,):
        raise ValueError(f"HCRF labels must have one class per graph, shape ({n_graphs},); "
                         f"got shape {arr.shape}")
    arr = class_indices(arr, "HCRF labels")
    bad = np.flatnonzero((arr < 0) | (arr >= n_classes))
    if bad.size:
        raise ValueError(f"HCRF label {int(arr[bad[0]])} of graph {int(bad[0])} is outside the "
                         f"classes 0..{n_classes - 1}")
    return arr


def pair_logpots(node_features: np.ndarray, theta_x, theta_y, theta_e,
                 batch: GraphBatch) -> tuple[np.ndarray, np.ndarray]:
    """Numpy log-potential tables of the replicated (class, graph) batch.

    Returns node ``(C * N, S)`` and edge ``(C * E, S, S)`` tables (pair ``c * G + g``).
    """
    theta_x, theta_y, theta_e = (np.asarray(a, dtype=np.float64)
                                 for a in (theta_x, theta_y, theta_e))
    return hcrf_pair_tables(node_features, theta_x, theta_y, theta_e, batch.n_edges)


def class_log_probs(batch: GraphBatch, node_features: np.ndarray, theta_x, theta_y, theta_e,
                    inference: Any = "auto") -> np.ndarray:
    """``log p(c | X_g)`` for every graph and class, shape (G, C), with numpy weights."""
    C = np.shape(theta_y)[1]
    rep = replicate_batch(batch, C)
    node, edge = pair_logpots(node_features, theta_x, theta_y, theta_e, batch)
    engine = get_engine(inference, rep, warn=False)
    log_z = engine.log_partition(rep, node, edge).reshape(C, batch.n_graphs).T
    return log_softmax(log_z, axis=1)


def expected_weight_shapes(n_features: int, n_states: int, n_classes: int) -> dict:
    """The shapes of ``theta_x``, ``theta_y``, ``theta_e`` for these sizes."""
    S, C = n_states, n_classes
    return {"theta_x": (n_features, S), "theta_y": (S, C), "theta_e": (S, S, C)}


def _shape_message(name: str, want: tuple, n_features: int, n_states: int,
                   n_classes: int) -> str:
    return (f"HCRF: {name} must have shape {want} (features={n_features}, n_states={n_states}, "
            f"n_classes={n_classes})")


def check_weight_shapes(shapes: Sequence[tuple], n_features: int, n_states: int,
                        n_classes: int) -> None:
    """A ValueError naming the first of (theta_x, theta_y, theta_e) whose shape in ``shapes``
    is not the HCRF's (weights with ``dims`` get their sizes only when they are evaluated)."""
    want = expected_weight_shapes(n_features, n_states, n_classes)
    for (name, w), got in zip(want.items(), shapes, strict=True):
        if tuple(got) != w:
            raise ValueError(f"{_shape_message(name, w, n_features, n_states, n_classes)}; got "
                             f"{tuple(int(d) for d in got)}")


# ---------------------------------------------------------------------------- PyTensor logp
def hcrf_logp(value, theta_x, theta_y, theta_e, *, batch: GraphBatch, node_features: np.ndarray,
              n_classes: int, inference: Any = "auto", n_states: int | None = None):
    """Per-graph ``log p(y_g | X_g)`` as a PyTensor vector (G,) (one ``log_partition`` call).

    With ``n_states`` the weights' shapes are asserted where the logp runs, by name (weights
    with ``dims`` have no static shape)."""
    G, C = batch.n_graphs, n_classes
    rep = replicate_batch(batch, C)
    theta_x, theta_y, theta_e = (pt.as_tensor_variable(a) for a in (theta_x, theta_y, theta_e))
    if n_states is not None:
        X = pt.as_tensor_variable(node_features)
        F = X.type.shape[1]               # fixed features: known when the graph is built
        F_sym, F_label = (X.shape[1], "F") if F is None else (F, F)
        shown = expected_weight_shapes(F_label, n_states, C)
        checked = []
        for (name, want), w in zip(expected_weight_shapes(F_sym, n_states, C).items(),
                                   (theta_x, theta_y, theta_e), strict=True):
            ok = pt.all([pt.eq(d, n) for d, n in zip(w.shape, want, strict=True)])
            msg = _shape_message(name, shown[name], F_label, n_states, C)
            checked.append(data_check(msg)(w, ok))
        theta_x, theta_y, theta_e = checked
    node, edge = hcrf_pair_tables(pt.as_tensor_variable(node_features), theta_x, theta_y, theta_e,
                                  batch.n_edges, backend=pt)
    log_z = log_partition(node, edge, rep, inference=inference).reshape((C, G))
    # labels held in pm.Data can change length after the model is built (pm.set_data): one
    # label would broadcast against every graph (a silent wrong likelihood), others fail inside
    # PyTensor; the length is checked where the logp runs, by name
    value = integer_labels(pt.as_tensor_variable(value), "HCRF", missing=False)
    if value.ndim != 1:
        raise ValueError(f"HCRF labels (observed) must be one class per graph, shape ({G},); got "
                         f"a {value.ndim}-d tensor")
    value = shape_check(f"HCRF labels (observed) must be one class per graph, shape ({G},)",
                        value, (G,))
    y = pt.cast(value, "int64")
    # Labels may come from pm.Data: a class outside 0..C-1 is raised by name wherever the logp
    # runs (as pmc.CRF does); the clip keeps the indexing in range until the check fires.
    valid = pt.all(pt.and_(pt.ge(y, 0), pt.lt(y, C)))
    y = pt.clip(y, 0, C - 1)
    return check_parameters(log_z[y, pt.arange(G)] - pt.logsumexp(log_z, axis=0), valid,
                            msg=f"HCRF class labels must lie in 0..{C - 1}",
                            can_be_replaced_by_ninf=False)


# ---------------------------------------------------------------------------- distribution
def _static_shape(x) -> tuple | None:
    if isinstance(x, np.ndarray | list | tuple | float | int):
        return np.shape(x)
    shape = getattr(getattr(x, "type", None), "shape", None)
    if shape is None or any(s is None for s in shape):
        return None
    return tuple(shape)


@dataclass(frozen=True)
class HCRFInfo:
    """What fitters need to know about an HCRF likelihood (read back by :meth:`HCRFRV.info`)."""

    batch: GraphBatch
    node_features: np.ndarray
    n_classes: int
    n_states: int
    inference: Any


class HCRFRV(RandomVariable):
    """Class labels of a fixed graph batch drawn exactly from ``p(y | X)``.

    Parameters (the node's inputs): node features (N, F) and the weights ``theta_x`` (F, S),
    ``theta_y`` (S, C), ``theta_e`` (S, S, C); fitters read the model back from them.
    """

    name = "hcrf"
    signature = "(n,f),(f,s),(s,c),(s,s,c)->(g)"
    dtype = "int64"
    _print_name = ("HCRF", "\\operatorname{HCRF}")
    __props__ = ("name", "signature", "dtype", "inplace", "batch", "n_classes", "n_states",
                 "inference")

    def __init__(self, batch: GraphBatch, n_classes: int, n_states: int, inference: Any = "auto",
                 **kwargs):
        self.batch = batch
        self.n_classes = int(n_classes)
        self.n_states = int(n_states)
        self.inference = inference
        super().__init__(**kwargs)

    def _supp_shape_from_params(self, dist_params, param_shapes=None):
        return (self.batch.n_graphs,)

    def weights(self, node) -> list:
        """The ``theta_x``, ``theta_y``, ``theta_e`` inputs of an HCRF node."""
        return list(self.dist_params(node)[1:])

    def info(self, node) -> HCRFInfo:
        """The model as fitters read it; the weights' current shapes are checked against
        ``n_states`` and ``n_classes``."""
        X = self.dist_params(node)[0]
        X = np.asarray(X.data if isinstance(X, pt.TensorConstant) else X.eval())
        weights = self.weights(node)
        shapes = [_static_shape(w) for w in weights]
        if any(s is None for s in shapes):   # weights with dims: sizes known only when evaluated
            shapes = pytensor.function([], [w.shape for w in weights],
                                       on_unused_input="ignore", mode="FAST_COMPILE")()
        check_weight_shapes(shapes, X.shape[1], self.n_states, self.n_classes)
        return HCRFInfo(self.batch, X, self.n_classes, self.n_states, self.inference)

    def rng_fn(self, rng, X, theta_x, theta_y, theta_e, size):
        check_weight_shapes([np.shape(w) for w in (theta_x, theta_y, theta_e)], X.shape[1],
                            self.n_states, self.n_classes)
        cum = np.cumsum(np.exp(class_log_probs(self.batch, X, theta_x, theta_y, theta_e,
                                               self.inference)), axis=1)          # (G, C)
        shape = () if size is None else tuple(size)
        u = rng.random(shape + (self.batch.n_graphs, 1)) * cum[:, -1:]
        return np.minimum((u > cum).sum(axis=-1), self.n_classes - 1).astype(np.int64)


@_logprob.register(HCRFRV)
def _hcrf_logprob(op: HCRFRV, values, rng, size, X, theta_x, theta_y, theta_e, **kwargs):
    [value] = values
    return hcrf_logp(value, theta_x, theta_y, theta_e, batch=op.batch, node_features=X,
                     n_classes=op.n_classes, inference=op.inference, n_states=op.n_states)


@_support_point.register(HCRFRV)
def _hcrf_support_point(op: HCRFRV, rv, *params):
    return pt.zeros((op.batch.n_graphs,), dtype="int64")


@numba_core_rv_funcify.register(HCRFRV)
def _numba_hcrf_rv(op: HCRFRV, node):
    """Draws in numba through object mode (:mod:`.numba_draws`), named by a content key."""
    engine = get_engine(op.inference, replicate_batch(op.batch, op.n_classes), warn=False)
    key = content_key(op.batch, engine, "HCRFRV", op.n_classes, op.n_states)
    return objmode_random_fn(op, key, ndim=1)


def single_hcrf(model: pm.Model):
    """The single observed HCRF variable of ``model`` (a clear error if there is none or
    several)."""
    found = [rv for rv in model.observed_RVs if isinstance(rv.owner.op, HCRFRV)]
    if len(found) != 1:
        raise ValueError(refusal("a model with exactly one observed pmc.HCRF likelihood",
                                 f"this model has {len(found)} ({[rv.name for rv in found]})"))
    return found[0]


def find_hcrf(model: pm.Model):
    """The single observed HCRF variable of ``model``, its info and its checked labels (G,)."""
    rv = single_hcrf(model)
    obs = model.rvs_to_values[rv]
    labels = np.asarray(obs.data if hasattr(obs, "data") else obs.eval())
    # labels in pm.Data can have been changed since the model was built
    labels = check_class_labels(labels, rv.owner.op.batch.n_graphs, rv.owner.op.n_classes)
    return rv, rv.owner.op.info(rv.owner), labels


class HCRF(Distribution):
    """Hidden CRF likelihood: one class per graph, hidden node states summed out (Luo, Sun & Zhao, eqs. 1-3).

    Use inside a ``pm.Model`` like any distribution::

        coords = train.coords | {"state": range(S), "state_to": range(S)}
        with pm.Model(coords=coords) as model:
            tx = pm.Normal("theta_x", 0, 1, dims=("feature", "state"))
            ty = pm.Normal("theta_y", 0, 1, dims=("state", "class"))
            te = pm.Normal("theta_e", 0, 1, dims=("state", "state_to", "class"))
            pmc.HCRF("y", graphs=train.graphs, node_features=train.node_features,
                     theta_x=tx, theta_y=ty, theta_e=te, n_states=S,
                     n_classes=train.n_classes, observed=train.labels)

    (Weights with ``dims`` have no static shape, hence ``n_states`` and ``n_classes``.)

    Parameters
    ----------
    name : str
    graphs : GraphBatch
        One graph per labelled example (``GraphBatch.chains(lengths)`` for sequences).
    node_features : array (N, F)
        Features of every node, graphs concatenated in batch order, dense. Fixed data: a
        ``pm.Data`` or symbolic tensor is refused (the labels may be ``pm.Data``), and so is a
        ``scipy.sparse`` matrix.
    theta_x : tensor (F, S)
        Feature-to-state weights.
    theta_y : tensor (S, C)
        State-class weights (added to every node of the graph).
    theta_e : tensor (S, S, C)
        Class-dependent edge weights; ``theta_e[a, b, c]`` scores state ``a`` at ``edges[e, 0]``
        (chains: frame ``t``) and ``b`` at ``edges[e, 1]`` (frame ``t + 1``).
    n_states, n_classes : int, optional
        Needed only when the weights' static shapes are unknown (weights with ``dims``); the
        weights' sizes are then checked where the logp runs, by the fitters and by the draws.
    inference : str or Engine
        Engine for log Z of the hidden-state CRFs (``"auto"``: forward-backward on chains).
    observed : array (G,) of int, optional
        Class labels ``0 .. n_classes - 1``.

    Notes
    -----
    The log-likelihood of graph ``g`` is ``log Z(y_g, X_g) - logsumexp_c log Z(c, X_g)``; it is
    returned per graph, so ``pm.compute_log_likelihood`` gives a ``(chain, draw, graph)`` array
    and ``az.loo`` works. ``random`` draws labels exactly from ``p(y | X)``. See the module
    docstring about label switching of hidden states under MCMC.
    """

    rv_type = HCRFRV

    def __new__(cls, name: str, *args, observed=None, **kwargs):
        if kwargs.get("graphs") is not None:
            kwargs["graphs"] = as_graph_batch(kwargs["graphs"])
        if observed is not None and not hasattr(observed, "type"):
            _, batch, C, _ = cls._prepare(*args, **kwargs)
            observed = check_class_labels(observed, batch.n_graphs, C)
        return super().__new__(cls, name, *args, observed=observed, **kwargs)

    @classmethod
    def dist(cls, graphs: GraphBatch, node_features: ArrayLike, theta_x: TensorLike,
             theta_y: TensorLike, theta_e: TensorLike, n_states: int | None = None,
             n_classes: int | None = None, inference: Any = "auto",
             **kwargs: Any) -> TensorVariable:
        """Unregistered HCRF variable (for ``pm.logp`` / ``pm.draw`` outside a model).

        Parameters
        ----------
        graphs, node_features, theta_x, theta_y, theta_e, n_states, n_classes, inference
            As :class:`HCRF`.
        **kwargs
            Passed to ``pymc.Distribution.dist``; a ``size``, or a ``shape`` other than
            (graphs,), is refused.

        Returns
        -------
        TensorVariable
            The (G,) int64 class labels, one per graph.
        """
        X, batch, C, S = cls._prepare(graphs, node_features, theta_x, theta_y, theta_e,
                                      n_states, n_classes)
        refuse_other_shapes(kwargs, (batch.n_graphs,), "an HCRF over this batch",
                            "one class per graph")
        return super().dist([X, theta_x, theta_y, theta_e], batch=batch, n_classes=C,
                            n_states=S, inference=inference, **kwargs)

    @classmethod
    def rv_op(cls, X, theta_x, theta_y, theta_e, *, batch, n_classes, n_states, inference,
              size=None, rng=None):
        if rng is None:
            rng = pt.random.shared_rng(seed=None)
        # an unknown engine name or one that cannot run these graphs: said when the model is
        # built, as pmc.CRF does, not inside the first fit
        get_engine(inference, replicate_batch(batch, n_classes), warn=False)
        op = HCRFRV(batch, n_classes, n_states, inference)
        _, rv = op(X, theta_x, theta_y, theta_e, size=size, rng=rng, return_next_rng=True)
        return rv

    @staticmethod
    def _prepare(graphs, node_features, theta_x, theta_y, theta_e, n_states=None,
                 n_classes=None, inference=None, **_ignored):
        graphs = as_graph_batch(graphs)
        if sp.issparse(node_features):
            raise TypeError("HCRF: node_features must be a dense array; got a scipy.sparse "
                            "matrix (sparse features are for pmc.CRF; use .toarray() here)")
        X = graphs.check_features(fixed_features(node_features, "node_features", "HCRF"), "node")
        sx, sy, se = _static_shape(theta_x), _static_shape(theta_y), _static_shape(theta_e)
        for nm, sh, nd in (("theta_x", sx, 2), ("theta_y", sy, 2), ("theta_e", se, 3)):
            if sh is not None and len(sh) != nd:
                raise ValueError(f"HCRF: {nm} must be {nd}-d; got shape {sh}")
        # the size most of the weights' state axes agree on (theta_y's first on a tie), so the
        # error below names the weight whose shape is the odd one out, not one that is right
        votes = (((sy[0],) if sy else ()) + ((sx[1],) if sx else ())
                 + ((se[0], se[1]) if se else ()))
        S = (n_states if n_states is not None else
             max(votes, key=votes.count) if votes else None)
        C = n_classes if n_classes is not None else (sy[1] if sy else (se[2] if se else None))
        if S is None or C is None:
            raise ValueError("HCRF: cannot infer n_states / n_classes from the weights' shapes; "
                             "pass n_states= and n_classes=")
        S, C = whole_number(S, "HCRF: n_states"), whole_number(C, "HCRF: n_classes")
        if S < 1 or C < 2:
            raise ValueError(f"HCRF needs n_states >= 1 and n_classes >= 2; got {S}, {C}")
        known = [(nm, sh) for nm, sh in (("theta_x", sx), ("theta_y", sy), ("theta_e", se))
                 if sh is not None]
        want = expected_weight_shapes(X.shape[1], S, C)
        for nm, sh in known:
            if tuple(sh) != want[nm]:
                raise ValueError(f"{_shape_message(nm, want[nm], X.shape[1], S, C)}; got "
                                 f"{tuple(sh)}")
        return X, graphs, C, S
