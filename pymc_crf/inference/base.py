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

from abc import ABC, abstractmethod
from typing import NamedTuple

import numpy as np

from pymc_crf.graphs.batch import GraphBatch

__all__ = ["Engine", "Marginals", "MapResult", "check_potentials"]


class Marginals(NamedTuple):
    """Exact or approximate marginals of a batch.

    ``log_z`` (G,), ``node`` (N, K), ``edge`` (E, K, K) (or (1, K, K) summed over edges when the
    edge table is shared), and for approximate engines a per-graph convergence ``report`` (dict of
    arrays: ``iterations``, ``max_change``, ``converged``) or None.
    """

    log_z: np.ndarray
    node: np.ndarray
    edge: np.ndarray
    report: dict | None = None


class MapResult(NamedTuple):
    """Most probable labelling ``labels`` (N,) and its unnormalised log score per graph (G,)."""

    labels: np.ndarray
    score: np.ndarray


def check_potentials(batch: GraphBatch, node_logpot, edge_logpot) -> tuple[np.ndarray, np.ndarray]:
    """Validate shapes and finiteness of log-potential tables; returns contiguous float64 copies."""
    node = np.ascontiguousarray(node_logpot, dtype=np.float64)
    edge = np.ascontiguousarray(edge_logpot, dtype=np.float64)
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
            raise ValueError("log-potentials contain NaN")
        if top == np.inf:
            raise ValueError("log-potentials contain +inf")
    return node, edge


class Engine(ABC):
    """Base class of inference engines. Subclasses implement the abstract methods over a whole batch.

    Attributes
    ----------
    name : str
        Registry name (``"chain"``, ``"junction_tree"``, ``"bp"``, ...).
    exact : bool
        Whether ``log_partition`` and ``marginals`` are exact.
    """

    name: str = "engine"
    exact: bool = True

    def supports(self, batch: GraphBatch) -> bool:
        """Whether this engine can run on every graph of ``batch``."""
        return True

    @abstractmethod
    def log_partition(self, batch: GraphBatch, node_logpot, edge_logpot) -> np.ndarray:
        """log Z per graph, shape (G,)."""

    @abstractmethod
    def marginals(self, batch: GraphBatch, node_logpot, edge_logpot) -> Marginals:
        """log Z and node / edge marginals (the gradient of log Z w.r.t. the tables)."""

    @abstractmethod
    def map_assignment(self, batch: GraphBatch, node_logpot, edge_logpot) -> MapResult:
        """Most probable labelling of every graph."""

    @abstractmethod
    def sample(self, batch: GraphBatch, node_logpot, edge_logpot, n_samples: int,
               rng: np.random.Generator | int | None = None) -> np.ndarray:
        """``n_samples`` labellings of every graph, shape (n_samples, N), int64."""

    def weighted_marginals(self, batch: GraphBatch, node_logpot, edge_logpot,
                           graph_weights) -> tuple[np.ndarray, np.ndarray]:
        """Marginals of graph g times ``graph_weights[g]``: the vector-Jacobian product of log Z.

        The generic version expands a shared edge table so the weights apply per edge before the
        sum over edges; engines override it with a one-pass kernel.
        """
        node, edge = check_potentials(batch, node_logpot, edge_logpot)
        w = np.asarray(graph_weights, dtype=np.float64)
        shared = edge.shape[0] == 1 and batch.n_edges != 1
        full = np.broadcast_to(edge, (batch.n_edges, *edge.shape[1:])) if shared else edge
        m = self.marginals(batch, node, np.ascontiguousarray(full))
        gn = m.node * w[batch.node_graph][:, None]
        ge = m.edge * w[batch.edge_graph][:, None, None]
        return gn, (ge.sum(axis=0, keepdims=True) if shared else ge)

    def numba_kernels(self, batch: GraphBatch):
        """Optional njit closures ``(log_z(node, edge), vjp(node, edge, g))`` for compiled models.

        None means the PyTensor Ops call this engine from numba's object mode.
        """
        return None

    def covariance_vector_product(self, batch: GraphBatch, node_logpot, edge_logpot,
                                  v_node, v_edge) -> tuple[np.ndarray, np.ndarray]:
        """Covariance of the sufficient statistics (Hessian of log Z) applied to ``(v_node, v_edge)``.

        Returns arrays shaped like the marginals. Engines that can, override this.
        """
        raise NotImplementedError(f"engine {self.name!r} has no covariance-vector product")

    def feature_covariance(self, batch: GraphBatch, node_logpot, edge_logpot,
                           graph: int = 0) -> np.ndarray:
        """Dense covariance of the sufficient statistics of one graph.

        The order is the graph's node indicators (node-major, ``n_g * K``) followed by its edge
        indicators (edge-major, ``e_g * K * K``); with a shared edge table, the ``K * K`` summed
        edge statistics. Built column by column from :meth:`covariance_vector_product`, so meant
        for small problems.
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


def as_generator(rng: np.random.Generator | int | None) -> np.random.Generator:
    """A numpy Generator from a Generator, a seed, or None."""
    return rng if isinstance(rng, np.random.Generator) else np.random.default_rng(rng)

