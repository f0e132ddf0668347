"""Reading a ``pmc.MRF`` back out of a model and its log-likelihood in the flat weights.

The weight-space interface of ``CRFSpec`` / ``CRFLogLikelihood`` (``extract_crf``,
``model/objective.py``) for MRF models, plus ``extract_random_field`` /
``random_field_log_likelihood``, which take either kind, so fitters and samplers handle CRFs and
MRFs through one path.

For an MRF the log-potential tables are linear in the weights, ``theta = J w``, so with the node
and pairwise label counts ``c`` of the N observed rows (the sufficient statistics)

    log p(X | w) = <c, J w> - N log Z(J w),    d/dw = J^T (c - N mu),

with ``mu`` the node and edge marginals (Parise & Welling 2006, eqs. (2), (5) and the first two
terms of eq. (8); Welling & Parise 2006, eq. (3)). One engine call gives log Z and ``mu`` whatever
N is.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pymc as pm

from pymc_crf.distributions.crf import CRFRV, is_cast
from pymc_crf.distributions.mrf import MRFRV, MRFInfo, MRFParameterization, check_mrf_labels
from pymc_crf.graphs.batch import GraphBatch
from pymc_crf.inference.base import Engine
from pymc_crf.model.objective import CRFLogLikelihood, _WeightSpaceLikelihood
from pymc_crf.model.spec import (
    CRFSpec,
    WeightSpec,
    check_observed_labels,
    extract_crf,
    model_doc,
    observes,
    single_observed,
    weight_specs,
)
from pymc_crf.validation import refusal

__all__ = ["MRFLogLikelihood", "MRFSpec", "extract_mrf", "extract_random_field",
           "find_random_field", "random_field_log_likelihood", "random_field_pointwise_log_likelihood"]


@dataclass(frozen=True)
class MRFSpec:
    """Everything a weight-space fitter needs about one MRF likelihood in a model.

    The same attributes as ``CRFSpec`` where they apply (``weights``, ``flat_size``,
    ``unflatten``, ``flatten``, ``param_names``, ``batch``, ``labels``, ``n_labels``,
    ``potential`` = ``"loglinear"``, ``free_vars``, ``observed_name``, ``model``, ``engine``),
    with ``labels`` the ``(n_samples, n_nodes)`` rows. The flat weight vector is
    ``concat(node_weights.ravel(), edge_weights.ravel())``.

    Attributes
    ----------
    model, observed_name, batch, n_labels, node_weights, edge_weights, free_vars
        As for ``CRFSpec`` (``observed_name`` the ``pmc.MRF`` variable's, ``batch`` its one graph).
    labels : ndarray (n_samples, n_nodes) int
        The observed labellings, one row each (``pmc.MRF`` refuses missing labels).
    parameterization : {"table", "ising", "boltzmann", "potts"}
        How the weights map to potential tables (``pmc.MRF``'s ``parameterization``).
    info : MRFInfo
        How the MRF variable is built, read back from its node.
    """

    model: pm.Model
    observed_name: str
    batch: GraphBatch
    labels: np.ndarray
    n_labels: int
    parameterization: str
    node_weights: WeightSpec | None
    edge_weights: WeightSpec | None
    free_vars: tuple[str, ...]
    info: MRFInfo = field(repr=False)

    potential = "loglinear"
    epsilon = 0.0

    @property
    def param(self) -> MRFParameterization:
        """The weights-to-tables map."""
        return self.info.param

    @property
    def n_samples(self) -> int:
        return int(self.labels.shape[0])

    @property
    def shared_edge_table(self) -> bool:
        """True when one (1, K, K) edge table serves every edge."""
        return self.edge_weights is not None and self.param.edge_shared

    @property
    def weights(self) -> list[WeightSpec]:
        return [w for w in (self.node_weights, self.edge_weights) if w is not None]

    # The flat layout is CRFSpec's (weights in order, each raveled).
    flat_size = CRFSpec.flat_size
    flatten = CRFSpec.flatten
    unflatten = CRFSpec.unflatten
    engine = CRFSpec.engine
    param_names = CRFSpec.param_names


def _observed(model: pm.Model, rv) -> np.ndarray:
    obs = model.rvs_to_values[rv]
    # PyMC casts float pm.Data to int64, which would truncate 0.5 to 0 before the label check
    while obs.owner is not None and is_cast(obs.owner.op):
        obs = obs.owner.inputs[0]
    return np.asarray(obs.data if hasattr(obs, "data") else obs.eval())


@model_doc
def extract_mrf(model: pm.Model | None = None) -> MRFSpec:
    """The single MRF likelihood of ``model`` and its weights (raises if there is none or several).

    %(model_parameters)s

    Returns
    -------
    MRFSpec
        The observed ``pmc.MRF`` variable's graph, labels, parameterization, weights and the
        model's other free variables.

    Raises
    ------
    ValueError
        When the model has no observed ``pmc.MRF`` or several, or its observed labels are not
        valid.
    """
    model = pm.modelcontext(model)
    rv = single_observed(model, MRFRV, "pmc.MRF")
    op: MRFRV = rv.owner.op
    info: MRFInfo = op.info(op.dist_params(rv.owner))
    # labels held in pm.Data may have been changed since the model was built (pm.set_data)
    try:
        labels = check_mrf_labels(info.batch, _observed(model, rv), info.n_labels,
                                  info.param.parameterization)
    except ValueError as err:
        raise ValueError(f"observed labels of {rv.name!r}: {err}") from None
    nw, ew = weight_specs(model, info.node_weights, info.edge_weights)
    weights = {info.node_weights, info.edge_weights}
    free = tuple(v.name for v in model.free_RVs if v not in weights)
    return MRFSpec(model, rv.name, info.batch, labels, info.n_labels,
                   info.param.parameterization, nw, ew, free, info)


class MRFLogLikelihood(_WeightSpaceLikelihood):
    """``log p(X | w)`` of the MRF of ``spec`` and its gradient in the flat weights, from the
    sufficient statistics with one engine call per evaluation.

    The interface of ``CRFLogLikelihood``: ``ll(w) -> (value, grad)``, ``pointwise(w)`` (one
    value per observed ROW here), ``log_potentials``, ``score``, ``observed_statistics``,
    ``pullback`` (``J^T v``), ``pushforward`` (``J v``), ``engine``, ``batch``, ``K``, ``size``;
    and ``statistics(labels)``, the counts of any rows (sampled ones for CD / exchange moves).

    Parameters
    ----------
    spec : MRFSpec
        From ``extract_mrf(model)``.
    engine : Engine, optional
        Defaults to the engine the model's MRF variable uses (pass ``BeliefPropagation()`` for
        the Bethe approximation of log Z, ``get_engine("junction_tree", batch)`` for exact).

    Examples
    --------
    >>> ll = MRFLogLikelihood(extract_mrf(model))           # doctest: +SKIP
    >>> value, grad = ll(w_flat)                            # doctest: +SKIP
    >>> per_row = ll.pointwise(w_flat)                      # doctest: +SKIP
    >>> bethe_ll = MRFLogLikelihood(extract_mrf(model), BeliefPropagation())  # doctest: +SKIP
    """

    def __init__(self, spec: MRFSpec, engine: Engine | None = None):
        super().__init__(spec, engine)
        self.param = spec.param
        self.n_samples = spec.n_samples
        X = np.asarray(spec.labels, dtype=np.int64)
        # Distinct rows carry all the information (their scores are all ``pointwise`` needs).
        self._rows, self._inverse = np.unique(X, axis=0, return_inverse=True)
        self._inverse = self._inverse.reshape(-1)
        self._node_counts, self._edge_counts = self.statistics(X)

    @property
    def _shared_table(self) -> bool:
        return self.param.edge_kind is None or self.param.edge_shared

    # ------------------------------------------------------------------ tables
    def _parts(self, w_flat: np.ndarray):
        parts = self.spec.unflatten(np.asarray(w_flat, dtype=np.float64))
        nw, ew = self.spec.node_weights, self.spec.edge_weights
        return (None if nw is None else parts[nw.name]), (None if ew is None else parts[ew.name])

    def log_potentials(self, w_flat: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Engine tables at ``w_flat``: node (n, K) and edge (E, K, K), or (1, K, K) when the
        edge weight is shared (or absent)."""
        wn, we = self._parts(w_flat)
        return (np.asarray(self.param.node_table(wn), dtype=np.float64),
                np.asarray(self.param.edge_table(we), dtype=np.float64))

    def statistics(self, labels: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Sufficient statistics of any ``(M, n)`` labellings (e.g. sampled ones, for
        contrastive-divergence or exchange moves), in the layout of
        :meth:`observed_statistics`: node counts (n, K), pairwise counts (E, K, K) or (1, K, K)."""
        X = np.asarray(labels, dtype=np.int64)
        b, K = self.batch, self.K
        n, E = int(b.n_nodes[0]), b.n_edges
        if X.ndim != 2 or X.shape[1] != n:
            raise ValueError(f"labels must be (M, {n}) rows; got shape {X.shape}")
        node = np.zeros((n, K))
        np.add.at(node, (np.broadcast_to(np.arange(n), X.shape), X), 1.0)
        edge = np.zeros((E, K, K))
        if E:
            u, v = b.edges[:, 0], b.edges[:, 1]
            np.add.at(edge, (np.broadcast_to(np.arange(E), (X.shape[0], E)), X[:, u], X[:, v]),
                      1.0)
        return node, (edge.sum(axis=0, keepdims=True) if self._shared_table else edge)

    def observed_statistics(self) -> tuple[np.ndarray, np.ndarray]:
        """Sufficient statistics of the N rows in table space: node label counts (n, K) and
        pairwise counts (E, K, K), or (1, K, K) summed over edges for a shared table."""
        return self._node_counts, self._edge_counts

    def score(self, w_flat: np.ndarray) -> tuple[float, np.ndarray]:
        """Unnormalised observed log score summed over the rows (the log-likelihood without
        ``-N log Z``) and its gradient (d,)."""
        node, edge = self.log_potentials(w_flat)
        value = float(np.sum(self._node_counts * node) + np.sum(self._edge_counts * edge))
        return value, self.pullback(w_flat, *self.observed_statistics())

    def pullback(self, w_flat: np.ndarray, node_vec: np.ndarray | None,
                 edge_vec: np.ndarray | None) -> np.ndarray:
        """``J^T v``: a table-space cotangent (node (n, K); edge (E, K, K), or (1, K, K) summed
        over edges for a shared table) mapped to the flat weights (d,). The map is linear, so
        ``w_flat`` does not enter; it is taken for the common interface."""
        grads = []
        if self.spec.node_weights is not None:
            grads.append(self.param.node_adjoint(node_vec))
        if self.spec.edge_weights is not None:
            grads.append(self.param.edge_adjoint(edge_vec))
        return np.concatenate([np.asarray(g).ravel() for g in grads])

    def pushforward(self, w_flat: np.ndarray, v: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``J v``: a weight direction (d,) mapped to table space (the tables are linear in w)."""
        return self.log_potentials(v)

    def pointwise(self, w_flat: np.ndarray) -> np.ndarray:
        """Per-row log-likelihood (N,): each row's score minus the shared log Z."""
        node, edge = self.log_potentials(w_flat)
        R, b = self._rows, self.batch
        s = node[np.arange(R.shape[1]), R].sum(axis=1)
        if b.n_edges:
            e = np.zeros(b.n_edges, np.int64) if edge.shape[0] == 1 else np.arange(b.n_edges)
            s = s + edge[e, R[:, b.edges[:, 0]], R[:, b.edges[:, 1]]].sum(axis=1)
        log_z = float(self.engine.log_partition(b, node, edge)[0])
        return s[self._inverse] - log_z

    def __call__(self, w_flat: np.ndarray) -> tuple[float, np.ndarray]:
        """Total log-likelihood and its gradient (d,): ``<c, theta> - N log Z`` and
        ``J^T (c - N mu)``."""
        node, edge = self.log_potentials(w_flat)
        m = self.engine.marginals(self.batch, node, edge)
        N = self.n_samples
        value = (float(np.sum(self._node_counts * node) + np.sum(self._edge_counts * edge))
                 - N * float(m.log_z[0]))
        m_edge = m.edge if m.edge.shape == self._edge_counts.shape else \
            m.edge.sum(axis=0, keepdims=True)
        grad = self.pullback(w_flat, self._node_counts - N * m.node,
                             self._edge_counts - N * m_edge)
        return value, grad


@model_doc
def extract_random_field(model: pm.Model | None = None) -> CRFSpec | MRFSpec:
    """The model's single ``pmc.CRF`` (a ``CRFSpec``) or ``pmc.MRF`` (an ``MRFSpec``) likelihood.

    %(model_parameters)s

    Returns
    -------
    CRFSpec or MRFSpec
        :func:`extract_crf` or :func:`extract_mrf` of the model.

    Raises
    ------
    ValueError
        When the model has both a CRF and an MRF, observes neither, or the reader refuses it
        (:func:`extract_crf`, :func:`extract_mrf`).
    """
    model = pm.modelcontext(model)
    kinds = [type(rv.owner.op).__name__ for rv in model.observed_RVs]
    if observes(model, MRFRV):
        if len(kinds) > 1 and "CRFRV" in kinds:
            raise ValueError(refusal("a model with exactly one random field (pmc.CRF or "
                                     "pmc.MRF)", "this model has both a CRF and an MRF"))
        return extract_mrf(model)
    if not observes(model, CRFRV):
        found = [f"{rv.name} ({kind.removesuffix('RV')})"
                 for rv, kind in zip(model.observed_RVs, kinds, strict=True)]
        raise ValueError(refusal("a model with an observed pmc.CRF or pmc.MRF likelihood",
                                 f"this model observes {found or 'nothing'}"))
    # the CRF's own errors (labels out of range, several CRFs) are the ones to report
    return extract_crf(model)


def find_random_field(model: pm.Model) -> CRFSpec | MRFSpec | None:
    """The model's random field read once (:func:`extract_random_field`), or None for a model
    that has no single readable one (a ``pmc.HCRF``, another likelihood, several random fields,
    weights the reader refuses): fitters that take any PyMC model (``map``, ``nuts``) then use
    the model as written. The observed labels of such a model are checked here
    (:func:`~pymc_crf.model.spec.check_observed_labels`), so a bad label is a one-line error
    naming its graph and node either way, not a failed initialisation of a sampler."""
    try:
        return extract_random_field(model)
    except ValueError:
        check_observed_labels(model)
        return None


def random_field_log_likelihood(spec: CRFSpec | MRFSpec, engine: Engine | None = None
                                ) -> MRFLogLikelihood | CRFLogLikelihood:
    """The weight-space log-likelihood object of ``spec``.

    Parameters
    ----------
    spec : CRFSpec or MRFSpec
        The model's random field (:func:`extract_random_field`).
    engine : Engine, optional
        The inference engine; default ``spec.engine``.

    Returns
    -------
    MRFLogLikelihood or CRFLogLikelihood
        ``MRFLogLikelihood`` for an ``MRFSpec``, else ``CRFLogLikelihood`` (same methods).
    """
    if isinstance(spec, MRFSpec):
        return MRFLogLikelihood(spec, engine)
    return CRFLogLikelihood(spec, engine)


def random_field_pointwise_log_likelihood(model, draws, spec: CRFSpec | MRFSpec | None = None
                                          ) -> dict[str, np.ndarray] | None:
    """Pointwise log-likelihood of posterior draws from the engine, with nothing compiled: per
    graph for a ``pmc.CRF`` model, per row for a ``pmc.MRF`` model.

    ``draws`` maps variable names to arrays (chains, draws, *shape) (a dict, or a posterior
    ``Dataset``). Returns ``{observed name: (chains, draws, graphs or rows)}``, or None when the
    model is not one random-field likelihood (and no other observed variable) whose weights are
    all free variables present in ``draws`` (then ``pm.compute_log_likelihood`` is the way). The
    values are the model's elementwise logp of that variable (same engine). ``spec``: the model's
    random field as the caller read it (else it is read here).
    """
    if spec is None:
        try:
            spec = extract_random_field(model)
        except ValueError:
            return None
    if len(model.observed_RVs) > 1:  # PyMC computes every observed variable's group
        return None
    names = [w.name for w in spec.weights]
    if any(n is None or n not in draws for n in names):
        return None
    arrays = [np.asarray(draws[n]) for n in names]
    lead = arrays[0].shape[:2]
    if len(lead) != 2 or any(a.shape[:2] != lead for a in arrays):
        return None
    flat = np.concatenate([a.reshape(*lead, -1) for a in arrays], axis=-1)
    lik = random_field_log_likelihood(spec)
    out = np.stack([lik.pointwise(w) for w in flat.reshape(-1, flat.shape[-1])])
    return {spec.observed_name: out.reshape(*lead, -1)}
