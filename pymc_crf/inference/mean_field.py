"""Naive mean field: a fully factorised ``q(x) = prod_i q_i(x_i)`` maximising the lower bound

    log Z >= sum_i <node_i>_{q_i} + sum_e <psi_e>_{q_u q_v} + sum_i H(q_i),

by coordinate ascent ``q_i(x) ∝ exp(node_i(x) + sum_{j ~ i} sum_y q_j(y) psi_ij(x, y))``. Nodes are
updated class by class of the graph colouring (:func:`pymc_crf.graphs.adjacency.colour_classes`):
the nodes of a class are not neighbours, so a class is one exact block step and the bound never
decreases. Used as a baseline in the comparison table of ``docs/loopy_inference.md``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from pymc_crf.graphs.adjacency import colour_classes, message_layout
from pymc_crf.graphs.batch import GraphBatch
from pymc_crf.inference.base import ConvergenceWarning, LoopyResult, check_potentials, warn_at_caller
from pymc_crf.inference.conditionals import exp_normalise, keep_least_forbidden, slot_entry
from pymc_crf.inference.kernels import record_sweep
from pymc_crf.inference.loopy import LoopyEngine, bound_slack, labelling_bound
from pymc_crf.kernel_cache import njit

if TYPE_CHECKING:
    from numpy.typing import ArrayLike

__all__ = ["MeanField"]


@njit(cache=True)
def _mf_run(node, edge, shared, q, order, ptr, src, edge_of, flip, in_ptr, in_idx, node_graph,
            n_graphs, damping, tol, max_iter, iters, changes, converged):
    """Sweeps of block coordinate ascent, one colour class at a time, until every graph has
    converged (its largest marginal change in a sweep below ``tol``) or ``max_iter``."""
    lq = np.empty(node.shape[1])
    fm = np.empty(node.shape[1])
    active = ~converged
    for it in range(max_iter):
        step = np.zeros(n_graphs)
        for c in range(ptr.shape[0] - 1):
            for j in range(ptr[c], ptr[c + 1]):
                i = order[j]
                if active[node_graph[i]]:
                    _update_node(node, edge, shared, q, i, src, edge_of, flip, in_ptr, in_idx,
                                 damping, lq, fm, step, node_graph[i])
        record_sweep(it, step, tol, active, iters, changes, converged)
        if not active.any():
            break


@njit(cache=True, inline="always")
def _update_node(node, edge, shared, q, i, src, edge_of, flip, in_ptr, in_idx, damping, lq, fm,
                 step, g):
    """q_i <- (1 - damping) softmax(local field) + damping q_i; records the change in step[g].
    ``fm[k]``: the neighbours' marginal mass on entries forbidden to label k (-inf)."""
    K = node.shape[1]
    for k in range(K):
        acc = node[i, k]
        fm[k] = np.inf if acc == -np.inf else 0.0
        for p in range(in_ptr[i], in_ptr[i + 1]):
            d = in_idx[p]
            nb = src[d]
            for y in range(K):
                if q[nb, y] > 0.0:
                    e = slot_entry(edge, shared, edge_of, flip, d, k, y)
                    if e == -np.inf:
                        fm[k] += q[nb, y]
                    else:
                        acc += q[nb, y] * e
        lq[k] = acc
    keep_least_forbidden(lq, fm)
    # a label the constraints rule out gets exactly 0, not a damped share of its old mass: a
    # remnant would act as a hard exclusion on the neighbours and stop the run short of a fixed
    # point (the other labels share the removed mass in proportion)
    dropped = 0.0
    for k in range(K):
        fm[k] = 1.0 if lq[k] == -np.inf else 0.0  # fm now marks the ruled-out labels
        dropped += damping * q[i, k] * fm[k]
    tot = exp_normalise(lq)
    for k in range(K):
        new = (1.0 - damping) * lq[k] / tot + damping * q[i, k]
        if dropped > 0.0:
            new = 0.0 if fm[k] != 0.0 else new / (1.0 - dropped)
        c = abs(new - q[i, k])
        if c > step[g]:
            step[g] = c
        q[i, k] = new


def _bound(batch, node, edge, q):
    """The mean-field lower bound on log Z per graph (0 log 0 = 0, 0 * -inf = 0)."""
    with np.errstate(divide="ignore", invalid="ignore"):
        logq = np.log(q)
        node_term = np.where(q > 0, q * (node - logq), 0.0).sum(1)
        out = np.bincount(batch.node_graph, weights=node_term, minlength=batch.n_graphs)
        if batch.n_edges:
            tab = np.zeros(batch.n_edges, np.int64) if edge.shape[0] == 1 else np.arange(
                batch.n_edges)
            pair = q[batch.edges[:, 0]][:, :, None] * q[batch.edges[:, 1]][:, None, :]
            e_term = np.where(pair > 0, pair * edge[tab], 0.0).sum((1, 2))
            out += np.bincount(batch.edge_graph, weights=e_term, minlength=batch.n_graphs)
    return out


class MeanField(LoopyEngine):
    """Naive (fully factorised) mean field with a per-graph convergence report.

    Parameters
    ----------
    damping : float
        Weight of the old marginal in each update (0: plain coordinate ascent).
    tol : float
        Convergence when no marginal changed by more than ``tol`` in a sweep.
    max_iter : int
        Cap on sweeps.
    init : {"uniform", "node"}
        Start from uniform marginals or from the node potentials alone.
    warn : bool
        Emit a :class:`~pymc_crf.inference.base.ConvergenceWarning` on non-convergence.
    """

    name = "mean_field"
    approximation = "the mean-field lower bound"
    method = "mean field"

    def __init__(self, damping: float = 0.0, tol: float = 1e-10, max_iter: int = 1000,
                 init: str = "node", warn: bool = True):
        super().__init__(tol, max_iter, damping, warn)
        if init not in ("uniform", "node"):
            raise ValueError(f"init must be 'uniform' or 'node'; got {init!r}")
        self.init = init

    def run(self, batch: GraphBatch, node_logpot: ArrayLike, edge_logpot: ArrayLike) -> LoopyResult:
        """Coordinate ascent to a fixed point: log marginals ``log_node``, the products
        ``q_u q_v`` as ``log_edge``, the lower bound as ``log_z``, and the report with the bound
        check (``bound``, ``bound_ok``: a fixed point below the score of the labelling decoded
        from it is left for the ascent from that labelling's point mass, counted in
        ``restarts``).

        See :meth:`LoopyEngine.run` for the parameters.
        """
        node, edge = check_potentials(batch, node_logpot, edge_logpot)
        N, K = node.shape
        G = batch.n_graphs
        if self.init == "uniform":
            q = np.full((N, K), 1.0 / K)
        else:
            with np.errstate(invalid="ignore"):
                q = np.exp(node - node.max(1, keepdims=True))
            q = np.nan_to_num(q, nan=1.0)
            q /= q.sum(1, keepdims=True)
        iters, changes, converged = self._ascend(batch, node, edge, q, np.zeros(G, np.bool_))
        log_z = _bound(batch, node, edge, q)
        # The bound check: a labelling's score is itself a mean-field bound (q a point mass, no
        # entropy), and coordinate ascent never lowers the bound, so where the fixed point found
        # is below the score of the check's labelling, ascent restarted from that point mass
        # ends at least as high (the symmetric fixed point of zero fields is the usual case).
        first = labelling_bound(batch, node, edge, np.log(np.maximum(q, 1e-300)),
                                unsettled=~converged)
        with np.errstate(invalid="ignore"):
            low = log_z < first.score - bound_slack(first.score)
        restarts = np.zeros(G, np.int64)
        if low.any():
            q2 = np.where(low[batch.node_graph][:, None], np.eye(K)[first.labels], q)
            it2, ch2, conv2 = self._ascend(batch, node, edge, q2, ~low)
            lz2 = _bound(batch, node, edge, q2)
            take = low & (lz2 > log_z)
            q = np.where(take[batch.node_graph][:, None], q2, q)
            log_z = np.where(take, lz2, log_z)
            iters, changes, converged = (np.where(take, it2, iters), np.where(take, ch2, changes),
                                         np.where(take, conv2, converged))
            restarts[low] = 1
        pair = q[batch.edges[:, 0]][:, :, None] * q[batch.edges[:, 1]][:, None, :]
        with np.errstate(divide="ignore"):
            log_node, log_edge = np.log(q), np.log(pair)
        # (a node with every label -inf makes -inf the exact log Z, nothing to warn about)
        dead = np.bincount(batch.node_graph, weights=np.isneginf(node).all(1), minlength=G) > 0
        stuck = np.isneginf(log_z) & ~dead
        if self.warn and stuck.any():
            # every label of some node is forbidden by the neighbours' point masses: a fixed point
            # of single-node coordinate ascent that no allowed labelling is reachable from
            warn_at_caller(
                f"mean field stopped on {int(stuck.sum())} of {G} graphs at marginals that put "
                "mass on labellings the -inf log-potentials forbid (bound -inf; allowed "
                "labellings may still exist, but single-node updates cannot reach them from "
                "there). Use an exact engine or BP for models with hard constraints.",
                ConvergenceWarning)
        report = self.report(iters, changes, converged)
        report["restarts"] = restarts
        result = LoopyResult(None, log_node, log_edge, log_z, report)
        return self.with_bound(result, np.maximum(
            first.score, labelling_bound(batch, node, edge, log_node,
                                         unsettled=~converged).score))

    def _ascend(self, batch: GraphBatch, node: np.ndarray, edge: np.ndarray, q: np.ndarray,
                frozen: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Coordinate ascent in place on ``q`` for the graphs not ``frozen``; the per-graph
        iterations, last changes and convergence flags."""
        st = message_layout(batch)
        order, ptr = colour_classes(batch)
        G = batch.n_graphs
        iters, changes = np.zeros(G, np.int64), np.zeros(G)
        converged = frozen.copy()
        _mf_run(node, edge, edge.shape[0] == 1, q, order, ptr, st.src, st.edge, st.flip,
                st.in_ptr, st.in_idx, batch.node_graph, G, self.damping, self.tol, self.max_iter,
                iters, changes, converged)
        return iters, changes, converged
