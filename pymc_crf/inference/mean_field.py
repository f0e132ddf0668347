"""Naive mean field: a fully factorised ``q(x) = prod_i q_i(x_i)`` maximising the lower bound

    log Z >= sum_i <node_i>_{q_i} + sum_e <psi_e>_{q_u q_v} + sum_i H(q_i),

by coordinate ascent ``q_i(x) ∝ exp(node_i(x) + sum_{j ~ i} sum_y q_j(y) psi_ij(x, y))``. Nodes are
updated in colour-class order (the classes of :func:`pymc_crf.inference.gibbs.colour_order`), so a
class is one exact block step and the bound never decreases. Used as a baseline in the comparison
table of ``docs/loopy_inference.md``.
"""

from __future__ import annotations

import warnings

import numpy as np
from numba import njit

from pymc_crf.graphs.batch import GraphBatch
from pymc_crf.inference.base import Engine, MapResult, Marginals, check_potentials
from pymc_crf.inference.bp import ConvergenceWarning, bp_structure, labelling_score
from pymc_crf.inference.gibbs import colour_order
from pymc_crf.inference.kernels import record_sweep

__all__ = ["MeanField"]


@njit(cache=True)
def _mf_run(node, edge, shared, q, order, src, edge_of, flip, in_ptr, in_idx, node_graph,
            n_graphs, damping, tol, max_iter, iters, changes, converged):
    K = node.shape[1]
    lq = np.empty(K)
    active = ~converged
    for it in range(max_iter):
        if not active.any():
            break
        step = np.zeros(n_graphs)
        for j in range(order.shape[0]):
            i = order[j]
            g = node_graph[i]
            if not active[g]:
                continue
            m = -np.inf
            for k in range(K):
                acc = node[i, k]
                for p in range(in_ptr[i], in_ptr[i + 1]):
                    d = in_idx[p]
                    tab = 0 if shared else edge_of[d]
                    nb = src[d]
                    for y in range(K):
                        if q[nb, y] > 0.0:
                            acc += q[nb, y] * (edge[tab, k, y] if flip[d] else edge[tab, y, k])
                lq[k] = acc
                if acc > m:
                    m = acc
            tot = 0.0
            for k in range(K):
                lq[k] = np.exp(lq[k] - m) if lq[k] > -np.inf else 0.0
                tot += lq[k]
            for k in range(K):
                new = (1.0 - damping) * lq[k] / tot + damping * q[i, k]
                c = abs(new - q[i, k])
                if c > step[g]:
                    step[g] = c
                q[i, k] = new
        record_sweep(it, step, tol, active, iters, changes, converged)


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


class MeanField(Engine):
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
        Emit a :class:`~pymc_crf.inference.bp.ConvergenceWarning` on non-convergence.
    """

    name = "mean_field"
    exact = False

    def __init__(self, damping: float = 0.0, tol: float = 1e-10, max_iter: int = 1000,
                 init: str = "node", warn: bool = True):
        if not 0.0 <= float(damping) < 1.0:
            raise ValueError(f"damping must lie in [0, 1); got {damping}")
        if init not in ("uniform", "node"):
            raise ValueError(f"init must be 'uniform' or 'node'; got {init!r}")
        if not float(tol) > 0 or int(max_iter) < 1:
            raise ValueError("tol must be positive and max_iter >= 1")
        self.damping, self.tol, self.max_iter = float(damping), float(tol), int(max_iter)
        self.init, self.warn = init, warn

    def run(self, batch: GraphBatch, node_logpot, edge_logpot) -> tuple[np.ndarray, dict]:
        """Fixed point marginals ``q`` (N, K) and the convergence report."""
        node, edge = check_potentials(batch, node_logpot, edge_logpot)
        N, K = node.shape
        if self.init == "uniform":
            q = np.full((N, K), 1.0 / K)
        else:
            with np.errstate(invalid="ignore"):
                q = np.exp(node - node.max(1, keepdims=True))
            q = np.nan_to_num(q, nan=1.0)
            q /= q.sum(1, keepdims=True)
        st = bp_structure(batch)
        order, _ = colour_order(batch)
        G = batch.n_graphs
        iters, changes = np.zeros(G, np.int64), np.zeros(G)
        converged = np.zeros(G, np.bool_)
        _mf_run(node, edge, edge.shape[0] == 1, q, order, st.src, st.edge, st.flip, st.in_ptr,
                st.in_idx, batch.node_graph, G, self.damping, self.tol, self.max_iter, iters,
                changes, converged)
        report = {"iterations": iters, "max_change": changes, "converged": converged}
        if self.warn and not converged.all():
            warnings.warn(f"mean field did not converge on {int((~converged).sum())} of {G} "
                          f"graphs within max_iter={self.max_iter}", ConvergenceWarning,
                          stacklevel=3)
        return q, report

    def marginals(self, batch, node_logpot, edge_logpot):
        """Lower bound on log Z, factorised node marginals and products as edge marginals."""
        node, edge = check_potentials(batch, node_logpot, edge_logpot)
        q, report = self.run(batch, node, edge)
        em = q[batch.edges[:, 0]][:, :, None] * q[batch.edges[:, 1]][:, None, :]
        if edge.shape[0] == 1:
            em = em.sum(0, keepdims=True) if batch.n_edges else np.zeros_like(edge)
        return Marginals(_bound(batch, node, edge, q), q, em, report)

    def log_partition(self, batch, node_logpot, edge_logpot):
        """The mean-field lower bound on log Z."""
        return self.marginals(batch, node_logpot, edge_logpot).log_z

    def map_assignment(self, batch, node_logpot, edge_logpot):
        """Argmax of the mean-field marginals (a heuristic on loopy graphs)."""
        node, edge = check_potentials(batch, node_logpot, edge_logpot)
        labels = np.argmax(self.run(batch, node, edge)[0], axis=1).astype(np.int64)
        return MapResult(labels, labelling_score(batch, node, edge, labels))

    def sample(self, batch, node_logpot, edge_logpot, n_samples, rng=None):
        """Samples from the model itself, delegated to the Gibbs engine."""
        from pymc_crf.inference.gibbs import Gibbs

        return Gibbs().sample(batch, node_logpot, edge_logpot, n_samples, rng)
