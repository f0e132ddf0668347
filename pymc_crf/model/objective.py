"""The CRF log-likelihood and log posterior as functions of the flat weight vector, from the engine.

For fitters that optimise or integrate over the CRF weights of a model whose only free variables
are those weights (``extract_crf``): the value and gradient come straight from the inference
engine, with no compiled PyTensor function, so there is nothing to compile. With linear scores
``a = x w`` and log-potentials ``phi(a)``,

    log p(y | x, w) = sum_i phi(a_i)[y_i] + sum_e phi(a_e)[y_u, y_v] - log Z(phi(a)),
    d/dw = x^T ((onehot(y) - mu) * phi'(a)),

where ``mu`` are the (node and edge) marginals, the gradient of log Z in the log-potentials (the
usual CRF gradient: observed minus expected feature counts; Qi, Szummer & Minka 2005, eq. (3)-(4) for the
potentials). The values equal the PyMC model's ``logp`` (tested to 1e-9 against the compiled model).

Missing labels (``-1``) are summed out as in the model's ``logp``: a partly observed graph
contributes ``log Z(clamped) - log Z`` with gradient ``x^T ((mu_clamped - mu) * phi'(a))``
(:mod:`pymc_crf.inference.clamp`), an unobserved graph nothing.
"""

from __future__ import annotations

import contextlib
import threading

import numpy as np
import scipy.sparse

from pymc_crf.feature_products import as_feature_matrix, features_tdot
from pymc_crf.inference.base import Engine
from pymc_crf.inference.clamp import ObservedLabels
from pymc_crf.model.spec import CRFSpec
from pymc_crf.ops.log_partition import feature_tables_path
from pymc_crf.potentials import constant_row, get_potential, linear_scores, log_potential_tables

__all__ = ["CRFLogLikelihood", "GaussianLogPrior"]


class _WeightSpaceLikelihood:
    """What the CRF and MRF likelihood objects share: ``spec``, the ``engine`` (the one given,
    else the one the model's likelihood variable uses), ``batch``, ``K`` (labels) and ``size``
    (flat weights)."""

    def __init__(self, spec, engine: Engine | None = None):
        self.spec = spec
        self.engine = engine if engine is not None else spec.engine
        self.batch, self.K = spec.batch, spec.n_labels
        self.size = spec.flat_size


class CRFLogLikelihood(_WeightSpaceLikelihood):
    """``log p(y | x, w)`` of the CRF of ``spec`` and its gradient in the flat weights.

    Parameters
    ----------
    spec : CRFSpec
        From ``extract_crf(model)``.
    engine : Engine, optional
        Defaults to the engine the model's CRF variable uses.

    Examples
    --------
    >>> ll = CRFLogLikelihood(extract_crf(model))          # doctest: +SKIP
    >>> value, grad = ll(w_flat)                            # doctest: +SKIP
    >>> per_graph = ll.pointwise(w_flat)                    # doctest: +SKIP
    """

    def __init__(self, spec: CRFSpec, engine: Engine | None = None):
        super().__init__(spec, engine)
        b = spec.batch
        self.potential, self.epsilon = spec.potential, float(spec.epsilon)
        self._pot = get_potential(spec.potential)
        self.observed_labels = ObservedLabels(b, spec.labels, self.K)
        obs = self.observed_labels
        self._live = obs.part(~obs.empty) if obs.has_missing and not obs.empty.all() else None
        self._part = obs.part(obs.partial) if obs.partial.any() else None
        # missing labels (-1) read as label 0 in the observed-label arrays below; the paths
        # that meet missing labels use only the fully observed graphs' entries of them
        y = np.where(self.observed_labels.observed, spec.labels, 0).astype(np.int64)
        self.y = y
        self.rows = np.arange(b.n_total_nodes)
        self.yu, self.yv = y[b.edges[:, 0]], y[b.edges[:, 1]]
        # features stay as given: a dense array or sparse CSR (products in feature_products)
        self.X = None if spec.node_weights is None else as_feature_matrix(spec.node_features)
        self.Xe = None
        if spec.edge_weights is not None and not spec.shared_edge_table:
            self.Xe = as_feature_matrix(spec.edge_features)
        onehot = np.zeros((b.n_total_nodes, self.K))
        onehot[self.rows, y] = 1.0
        onehot[~self.observed_labels.observed] = 0.0
        self._onehot = onehot
        # observed feature counts (constant; the whole score term for log-linear potentials)
        self._xty = None if self.X is None else features_tdot(self.X, onehot)
        self._trans_counts = np.zeros((self.K, self.K))
        np.add.at(self._trans_counts, (self.yu, self.yv), 1.0)
        # Edge features: constant rows make one shared table in the value and gradient (the
        # public table-space methods keep the per-edge layout); otherwise the observed feature
        # counts sum_e x_e onehot(y_u, y_v) (Fe, K, K), the score term of log-linear potentials.
        self._edge_row = None if self.Xe is None else constant_row(self.Xe)
        self._xety = None
        if self.Xe is not None and self._edge_row is None:
            pair = scipy.sparse.csr_matrix(  # edge -> observed label pair indicator (E, K^2)
                (np.ones(b.n_edges), (np.arange(b.n_edges), self.yu * self.K + self.yv)),
                shape=(b.n_edges, self.K * self.K))
            xety = pair.T @ self.Xe  # (K^2, Fe), sparse times dense or sparse features
            xety = xety.toarray() if scipy.sparse.issparse(xety) else np.asarray(xety)
            self._xety = xety.T.reshape(-1, self.K, self.K)
        # Log-linear per-edge tables from dense edge features go to the engine as features and
        # weights when it has its own Engine.log_z_and_feature_marginals (the chain engine's
        # forms no (E, K, K) tables or marginals but for chains too long for its lane blocks)
        self._feature_path = feature_tables_path(self._pot, self.Xe, self.engine)
        # the score arrays of __call__, reused from call to call (see _score_buffers)
        self._buffers = None
        self._buffers_lock = threading.Lock()

    def __getstate__(self):
        # step methods holding this objective are pickled by PyMC's multiprocess sampling
        # (spawn / forkserver); the lock cannot be, and the arrays are only scratch
        state = self.__dict__.copy()
        state["_buffers"] = state["_buffers_lock"] = None
        return state

    def __setstate__(self, state):
        self.__dict__.update(state)
        self._buffers_lock = threading.Lock()

    @contextlib.contextmanager
    def _scratch(self):
        """The objective's own score arrays (:meth:`_score_buffers`) for the duration of one
        call, or None while another thread holds them (that call then allocates its own)."""
        owned = self._buffers_lock.acquire(blocking=False)
        try:
            yield self._score_buffers() if owned else None
        finally:
            if owned:
                self._buffers_lock.release()

    def _score_buffers(self) -> tuple[np.ndarray | None, np.ndarray | None]:
        """Node (N, K) and per-edge (E, K^2) score arrays owned by this objective, for the
        feature products of :meth:`__call__` and :meth:`pointwise` on fully observed labels
        (None where that product is absent, comes from constant edge rows (one shared table), or
        has sparse features: scipy's product is single-threaded and makes its own array, which a
        copy into ours would only add to).

        An optimiser calls the objective hundreds of times with products of the same shape.
        Reusing their arrays keeps BLAS from faulting in tens of MB of fresh pages at every
        call, which two BLAS threads do slowly (docs/benchmarks.md, "Fresh large arrays"). The
        arrays live as long as the objective (E x K^2 doubles for a per-edge product).
        """
        if self._buffers is None:
            b, K = self.batch, self.K
            node = np.empty((b.n_total_nodes, K)) if isinstance(self.X, np.ndarray) else None
            edge = None
            if (isinstance(self.Xe, np.ndarray) and self._edge_row is None
                    and not self._feature_path):
                edge = np.empty((b.n_edges, K * K))
            self._buffers = (node, edge)
        return self._buffers

    # ------------------------------------------------------------------ potentials
    def _tables(self, w_flat: np.ndarray, shared_if_constant: bool = False, out=None):
        """Weights by name, scores and log-potential tables: (parts, a_node, node, a_edge, edge);
        with ``shared_if_constant``, constant edge features give one (1, K, K) table; ``out``
        (node, edge) receives the feature products (:func:`linear_scores`)."""
        parts = self.spec.unflatten(np.asarray(w_flat, dtype=np.float64))
        nw, ew = self.spec.node_weights, self.spec.edge_weights
        Xe = self.Xe
        if shared_if_constant and self._edge_row is not None:
            Xe = self._edge_row[None, :]
        node, edge, a_node, a_edge = log_potential_tables(
            self._pot, self.epsilon, self.batch.n_total_nodes, self.K, self.X,
            None if nw is None else parts[nw.name], Xe, None if ew is None else parts[ew.name],
            out=out)
        return parts, a_node, node, a_edge, edge

    def _observed_scores(self, node, edge) -> tuple[np.ndarray, np.ndarray]:
        """Per-node and per-edge log-potentials of the observed labels."""
        b = self.batch
        e_idx = np.zeros(b.n_edges, np.int64) if edge.shape[0] == 1 else np.arange(b.n_edges)
        return node[self.rows, self.y], edge[e_idx, self.yu, self.yv]

    # ------------------------------------------------------------------ public
    def log_potentials(self, w_flat: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Engine tables at ``w_flat``: node (N, K) and edge (E, K, K), or (1, K, K) when shared."""
        _, _, node, _, edge = self._tables(w_flat)
        return node, edge

    def score(self, w_flat: np.ndarray) -> tuple[float, np.ndarray]:
        """Unnormalised observed log score ``sum_i phi_i[y_i] + sum_e phi_e[y_u, y_v]`` (the
        log-likelihood without ``-log Z``) and its gradient (d,) in the flat weights."""
        w_flat = np.asarray(w_flat, dtype=np.float64)
        self._require_all_observed("the observed score")
        node, edge = self.log_potentials(w_flat)
        s_node, s_edge = self._observed_scores(node, edge)
        return float(s_node.sum() + s_edge.sum()), self.pullback(w_flat, *self.observed_statistics())

    def _require_all_observed(self, what: str) -> None:
        if self.observed_labels.has_missing:
            raise ValueError(f"{what} needs every label observed; this CRF has "
                             f"{int((~self.observed_labels.observed).sum())} missing labels "
                             "(use the log-likelihood itself, as method='map' or 'nuts' do)")

    def observed_statistics(self) -> tuple[np.ndarray, np.ndarray]:
        """Sufficient statistics of the observed labels in table space: node one-hots (N, K) and
        edge indicators (E, K, K), or transition counts (1, K, K) for a shared table."""
        self._require_all_observed("the observed statistics")
        if self.spec.edge_weights is not None and self.Xe is None:
            edge = self._trans_counts[None]
        else:
            edge = np.zeros((self.batch.n_edges, self.K, self.K))
            edge[np.arange(self.batch.n_edges), self.yu, self.yv] = 1.0
        return self._onehot, edge

    def pullback(self, w_flat: np.ndarray, node_vec: np.ndarray | None,
                 edge_vec: np.ndarray | None) -> np.ndarray:
        """``J^T v``: a table-space cotangent (node (N, K), edge (E, K, K) or, for a shared
        table, (1, K, K) summed over edges) mapped to the flat weights (d,), where ``J`` is the
        Jacobian of the log-potential tables in the weights.

        With ``v = statistics - marginals`` this is the log-likelihood gradient; with the
        statistics of sampled labellings it is a contrastive-divergence gradient.
        """
        w_flat = np.asarray(w_flat, dtype=np.float64)
        _, a_node, _, a_edge, _ = self._tables(w_flat)
        grads = []
        if self.X is not None:
            r = np.asarray(node_vec, dtype=np.float64)
            d = self._pot.dlog(a_node, self.epsilon)
            grads.append(features_tdot(self.X, r if d is None else r * d))
        if self.spec.edge_weights is not None:
            r = np.asarray(edge_vec, dtype=np.float64)
            d = self._pot.dlog(a_edge, self.epsilon)
            if self.Xe is None:
                r = r.sum(axis=0)
                grads.append(r if d is None else r * d[0])
            else:
                grads.append(features_tdot(self.Xe, r if d is None else r * d))
        return np.concatenate([g.ravel() for g in grads])

    def pushforward(self, w_flat: np.ndarray, v: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``J v``: a weight-space direction (d,) mapped to table space, node (N, K) and edge
        (E, K, K) or (1, K, K) for a shared table (zeros for parts without weights)."""
        w_flat = np.asarray(w_flat, dtype=np.float64)
        _, a_node, _, a_edge, _ = self._tables(w_flat)
        parts = self.spec.unflatten(np.asarray(v, dtype=np.float64))
        nw, ew = self.spec.node_weights, self.spec.edge_weights
        b_node, b_edge = linear_scores(self.X, None if nw is None else parts[nw.name],
                                       self.Xe, None if ew is None else parts[ew.name])
        if b_node is None:
            node = np.zeros((self.batch.n_total_nodes, self.K))
        else:
            d = self._pot.dlog(a_node, self.epsilon)
            node = b_node if d is None else b_node * d
        if b_edge is None:
            edge = np.zeros((1, self.K, self.K))
        else:
            d = self._pot.dlog(a_edge, self.epsilon)
            edge = b_edge if d is None else b_edge * d
        return node, edge

    def pointwise(self, w_flat: np.ndarray) -> np.ndarray:
        """Per-graph log-likelihood (G,) at one weight vector."""
        if self.observed_labels.has_missing:
            _, _, node, _, edge = self._tables(w_flat)
            return self._summed_out(node, edge, gradient=False)[0]
        b = self.batch
        with self._scratch() as out:
            if self._feature_path:
                parts, node = self._node_table(w_flat, out)
                We = parts[self.spec.edge_weights.name]
                s_node = node[self.rows, self.y]
                s_edge = np.einsum("ef,fe->e", self.Xe,
                                   We.reshape(-1, self.K * self.K)[:, self.yu * self.K + self.yv])
                log_z = self.engine.feature_log_partition(b, node, self.Xe, We)
            else:
                _, _, node, _, edge = self._tables(w_flat, shared_if_constant=True, out=out)
                s_node, s_edge = self._observed_scores(node, edge)
                log_z = self.engine.log_partition(b, node, edge)
            score = (np.bincount(b.node_graph, s_node, minlength=b.n_graphs)
                     + np.bincount(b.edge_graph, s_edge, minlength=b.n_graphs))
            return score - log_z

    def __call__(self, w_flat: np.ndarray) -> tuple[float, np.ndarray]:
        """Total log-likelihood and its gradient (d,) in the flat weights."""
        w_flat = np.asarray(w_flat, dtype=np.float64)
        if self.observed_labels.has_missing:
            _, _, node, _, edge = self._tables(w_flat)
            ll, gn, ge = self._summed_out(node, edge, gradient=True)
            return float(ll.sum()), self.pullback(w_flat, gn, ge)
        with self._scratch() as out:
            return self._value_and_grad(w_flat, out)

    def _value_and_grad(self, w_flat: np.ndarray, out) -> tuple[float, np.ndarray]:
        """:meth:`__call__` of a fully observed CRF; ``out`` as in :meth:`_tables`."""
        if self._feature_path:
            return self._value_and_grad_features(w_flat, out)
        parts, a_node, node, a_edge, edge = self._tables(w_flat, shared_if_constant=True, out=out)
        m = self.engine.marginals(self.batch, node, edge)
        loglinear = self._pot.identity
        value = -float(np.sum(m.log_z))
        grads = []
        if self.X is not None:
            W = parts[self.spec.node_weights.name]
            if loglinear:
                # sum_i a_i[y_i] = sum_fk W_fk (X^T onehot)_fk: no gather over the N rows
                value += float(np.sum(self._xty * W))
                grads.append(self._xty - features_tdot(self.X, m.node))
            else:
                d = self._pot.dlog(a_node, self.epsilon)
                value += float(node[self.rows, self.y].sum())
                grads.append(features_tdot(self.X, (self._onehot - m.node) * d))
        if self.spec.edge_weights is not None:
            if edge.shape[0] == 1:  # one shared table: counts minus summed edge marginals
                value += float(np.sum(self._trans_counts * edge[0]))
                g = self._trans_counts - m.edge[0]
                if not loglinear:
                    g = g * self._pot.dlog(a_edge[0], self.epsilon)
                if self._edge_row is not None:  # constant edge features x: d/dW_f = x_f g
                    g = np.multiply.outer(self._edge_row, g)
            elif loglinear:  # observed feature counts minus expected ones, one pass over m.edge
                value += float(np.sum(self._xety * parts[self.spec.edge_weights.name]))
                g = self._xety - features_tdot(self.Xe, m.edge)
            else:
                e = np.arange(self.batch.n_edges)
                value += float(edge[e, self.yu, self.yv].sum())
                r = -m.edge
                r[e, self.yu, self.yv] += 1.0
                if not loglinear:
                    r *= self._pot.dlog(a_edge, self.epsilon)
                g = features_tdot(self.Xe, r)
            grads.append(g)
        return value, np.concatenate([g.ravel() for g in grads])

    def _node_table(self, w_flat: np.ndarray, out) -> tuple[dict, np.ndarray]:
        """Weights by name and the node table alone (the feature path's edge tables are left to
        the engine); ``out`` as in :meth:`_tables`."""
        parts = self.spec.unflatten(np.asarray(w_flat, dtype=np.float64))
        nw = self.spec.node_weights
        node, _, _, _ = log_potential_tables(
            self._pot, self.epsilon, self.batch.n_total_nodes, self.K, self.X,
            None if nw is None else parts[nw.name], out=None if out is None else (out[0], None))
        return parts, node

    def _value_and_grad_features(self, w_flat: np.ndarray, out) -> tuple[float, np.ndarray]:
        """:meth:`_value_and_grad` of log-linear per-edge tables from dense edge features: the
        engine takes the features and weights (``Engine.log_z_and_feature_marginals``), so the
        edge tables and edge marginals are never formed here."""
        parts, node = self._node_table(w_flat, out)
        nw, ew = self.spec.node_weights, self.spec.edge_weights
        We = parts[ew.name]
        log_z, gn, gW = self.engine.log_z_and_feature_marginals(self.batch, node, self.Xe, We)
        # observed feature counts minus expected ones (the score is linear in the weights)
        value = float(np.sum(self._xety * We)) - float(np.sum(log_z))
        grads = []
        if self.X is not None:
            W = parts[nw.name]
            value += float(np.sum(self._xty * W))
            grads.append(self._xty - features_tdot(self.X, gn))
        grads.append(self._xety - gW)
        return value, np.concatenate([g.ravel() for g in grads])

    def _summed_out(self, node: np.ndarray, edge: np.ndarray, gradient: bool):
        """Per-graph log-likelihood (G,) with the missing labels summed out and, with
        ``gradient``, its gradient in the tables (observed or clamped minus plain marginals)."""
        obs, live, part, b = self.observed_labels, self._live, self._part, self.batch
        shared = edge.shape[0] == 1 and b.n_edges != 1
        ll = np.zeros(b.n_graphs)
        gn = self._onehot * obs.full[b.node_graph][:, None]
        full_edges = obs.full[b.edge_graph]
        if shared:
            ge = np.zeros((1, self.K, self.K))
            np.add.at(ge[0], (self.yu[full_edges], self.yv[full_edges]), 1.0)
        else:
            ge = np.zeros((b.n_edges, self.K, self.K))
            e = np.flatnonzero(full_edges)
            ge[e, self.yu[e], self.yv[e]] = 1.0
        if live is None:  # no label observed: the likelihood is 1
            return ll, gn, ge
        run = self.engine.marginals if gradient else self.engine.log_partition
        plain = run(live.batch, *live.tables(node, edge, shared, clamp=False))
        log_z = plain.log_z if gradient else plain
        at_live = np.cumsum(~obs.empty) - 1  # graph id -> position among the live graphs
        s_node, s_edge = self._observed_scores(node, edge)
        score = (np.bincount(b.node_graph, s_node, minlength=b.n_graphs)
                 + np.bincount(b.edge_graph, s_edge, minlength=b.n_graphs))
        ll[obs.full] = score[obs.full] - log_z[at_live[obs.full]]
        if part is not None:
            clamped = run(part.batch, *part.tables(node, edge, shared))
            log_zc = clamped.log_z if gradient else clamped
            ll[part.graphs] = log_zc - log_z[at_live[part.graphs]]
        if not gradient:
            return ll, None, None
        if part is not None:
            gn[part.nodes] += clamped.node
            ge[0 if shared else part.edges] += clamped.edge[0] if shared else clamped.edge
        gn[live.nodes] -= plain.node
        ge[0 if shared else live.edges] -= plain.edge[0] if shared else plain.edge
        return ll, gn, ge


class GaussianLogPrior:
    """Independent Normal log-density of the flat weights (with its constant) and its gradient."""

    def __init__(self, spec: CRFSpec):
        self.mean = np.concatenate([w.prior_mean.ravel() for w in spec.weights])
        self.sd = np.concatenate([w.prior_sd.ravel() for w in spec.weights])
        self._const = float(-np.sum(np.log(self.sd)) - 0.5 * self.sd.size * np.log(2.0 * np.pi))

    def __call__(self, w_flat: np.ndarray) -> tuple[float, np.ndarray]:
        z = (np.asarray(w_flat) - self.mean) / self.sd
        return self._const - 0.5 * float(z @ z), -z / self.sd
