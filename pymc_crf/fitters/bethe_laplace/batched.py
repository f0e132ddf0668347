"""Random-field likelihoods at many weight vectors with one engine call.

Fitters and AIS evaluate the likelihood at many weight vectors (posterior draws, parallel AIS
runs); one engine call per vector pays Python overhead each time. Here the R table sets go into
one batch of R copies of the graphs, and for log-linear tables ``theta = J w`` the tables and
scores of all vectors are matrix products: feature products for a CRF (``J`` never formed), a
dense ``J`` otherwise.
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from pymc_crf.fitters.bethe_laplace.hessian import BlockMaps
from pymc_crf.model.objective import CRFLogLikelihood

__all__ = ["BatchedLikelihood", "pointwise_log_likelihood"]


class _DenseTables:
    """``J W^T`` and ``U J`` for log-linear tables through a dense Jacobian (d pushforwards)."""

    def __init__(self, lik):
        d = lik.size
        cols = [lik.pushforward(np.zeros(d), e) for e in np.eye(d)]
        self.Jn = np.stack([c[0].ravel() for c in cols], axis=1)
        self.Je = np.stack([c[1].ravel() for c in cols], axis=1)
        self.n_node, self.n_edge = self.Jn.shape[0], self.Je.shape[0]

    def push(self, W: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Node (R, N K) and edge (R, n_edge) tables of the rows of ``W`` (R, d)."""
        return W @ self.Jn.T, W @ self.Je.T

    def pull(self, Un: np.ndarray, Ue: np.ndarray) -> np.ndarray:
        """``J^T u`` for rows of table-space vectors: (R, d)."""
        return Un @ self.Jn + Ue @ self.Je


class _FeatureTables:
    """:class:`_DenseTables`' maps for a log-linear CRF by feature products
    (:class:`~pymc_crf.fitters.bethe_laplace.hessian.BlockMaps`; one shared table for constant
    edge features): ``N K d`` memory and flops per vector saved."""

    def __init__(self, lik: CRFLogLikelihood):
        self.maps = BlockMaps(lik, np.zeros(lik.size))
        self.N, self.K = lik.batch.n_total_nodes, lik.K
        self.n_node = self.N * self.K
        self.n_edge = self.maps.edge.shape[0] * self.K * self.K

    def push(self, W: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        R = W.shape[0]
        Tn, Te = self.maps.push(W.T)
        return Tn.reshape(-1, R).T, Te.reshape(-1, R).T

    def pull(self, Un: np.ndarray, Ue: np.ndarray) -> np.ndarray:
        R, K = Un.shape[0], self.K
        return self.maps.pull(Un.T.reshape(self.N, K, R), Ue.T.reshape(-1, K, K, R)).T


class BatchedLikelihood:
    """``log p(D | w)`` and its gradient at R weight vectors with ONE engine call.

    The R table sets go into a batch of R copies of the likelihood's graphs (shared edge tables
    expanded per edge), so the Python overhead of an evaluation is paid once for all runs:
    ``value_r = score(w_r) - m sum_g log Z_g(w_r)`` and
    ``grad_r = J^T (s - m mu_r)``, with ``m`` the number of times each graph is observed
    (``n_samples`` of an MRF, 1 for a CRF).
    """

    def __init__(self, lik, n: int):
        self.lik, self.n = lik, int(n)
        b = lik.batch
        self.batch = b.subset(np.tile(np.arange(b.n_graphs), self.n))
        self.mult = float(getattr(lik, "n_samples", 1))
        self.N, self.E, self.K = b.n_total_nodes, b.n_edges, lik.K
        self.graph_of = np.repeat(np.arange(self.n), b.n_graphs)
        self.linear = getattr(lik, "potential", "loglinear") == "loglinear"
        if self.linear:  # tables = J w: every run in one matrix product
            self.J = (_FeatureTables(lik) if isinstance(lik, CRFLogLikelihood)
                      else _DenseTables(lik))
            self.shared = self.J.n_edge == self.K * self.K
            sn, se = lik.observed_statistics()
            self.sn = np.asarray(sn, float).ravel()
            # per-edge statistics of a shared table (no edge weights, constant edge features)
            se = np.asarray(se, float).reshape(-1, self.K * self.K)
            if se.shape[0] * self.K * self.K != self.J.n_edge:
                se = se.sum(axis=0, keepdims=True)
            self.se = se.ravel()
            self.observed_score = self.J.pull(self.sn[None], self.se[None])[0]
        else:
            self.shared = lik.log_potentials(np.zeros(lik.size))[1].shape[0] == 1

    def _tables(self, W: np.ndarray):
        if self.linear:
            return self._engine_tables(*self.J.push(W))
        tabs = [self.lik.log_potentials(w) for w in W]
        return self._engine_tables(np.stack([t[0] for t in tabs]),
                                   np.stack([t[1] for t in tabs]))

    def _engine_tables(self, node: np.ndarray, edge: np.ndarray):
        """The replicated batch's node (R N, K) and per-edge (R E, K, K) tables from R table
        sets (node tables first, shared edge tables expanded per edge)."""
        R, K, E = node.shape[0], self.K, self.E
        edge = np.broadcast_to(edge.reshape(R, -1, K, K), (R, E, K, K))
        return node.reshape(R * self.N, K), np.ascontiguousarray(edge).reshape(R * E, K, K)

    def __call__(self, W: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        lik, R, E = self.lik, W.shape[0], self.E
        node, edge = self._tables(W)
        m = lik.engine.marginals(self.batch, node, edge)
        log_z = np.bincount(self.graph_of, m.log_z, minlength=R)
        mn = m.node.reshape(R, -1)
        me = m.edge.reshape(R, E, self.K * self.K)  # explicit: -1 is ambiguous when E == 0
        if self.shared:
            me = me.sum(axis=1, keepdims=True)
        if self.linear:
            grads = self.J.pull(self.sn - self.mult * mn, self.se - self.mult * me.reshape(R, -1))
            return W @ self.observed_score - self.mult * log_z, grads
        vals, grads = np.empty(R), np.empty_like(W)
        K = self.K
        for r in range(R):
            vals[r], grads[r] = lik.score(W[r])
            grads[r] -= self.mult * lik.pullback(W[r], mn[r].reshape(-1, K),
                                                 me[r].reshape(-1, K, K))
        return vals - self.mult * log_z, grads

    def _observation_matrix(self):
        """Sparse (observations, tables) indicators of each observation's labels (a graph of a
        CRF, a row of an MRF) and the graph each observation is scored against."""
        lik, K = self.lik, self.K
        b = lik.batch
        spec = lik.spec
        labels = np.asarray(spec.labels, dtype=np.int64)
        if labels.ndim == 2:  # MRF rows: all against graph 0
            n_obs = labels.shape[0]
            lab = labels
        else:
            n_obs = b.n_graphs
            lab = labels[None, :]
        rows, cols = [], []
        NK = self.N * K
        for r in range(lab.shape[0]):
            x = lab[r]
            node_obs = (np.full(self.N, r) if labels.ndim == 2 else b.node_graph)
            rows.append(node_obs)
            cols.append(np.arange(self.N) * K + x)
            if self.E:
                u, v = b.edges[:, 0], b.edges[:, 1]
                e_obs = np.full(self.E, r) if labels.ndim == 2 else b.edge_graph
                e_idx = np.zeros(self.E, np.int64) if self.shared else np.arange(self.E)
                rows.append(e_obs)
                cols.append(NK + e_idx * K * K + x[u] * K + x[v])
        rows, cols = np.concatenate(rows), np.concatenate(cols)
        T = self.J.n_node + self.J.n_edge
        S = sp.csr_matrix((np.ones(rows.size), (rows, cols)), shape=(n_obs, T))
        graph = np.zeros(n_obs, np.int64) if labels.ndim == 2 else np.arange(n_obs)
        return S, graph

    def pointwise(self, W: np.ndarray) -> np.ndarray:
        """Log-likelihood of each observation (a graph of a CRF, a row of an MRF) at every
        weight vector: (R, n_obs); log-linear tables only."""
        if not self.linear:
            raise ValueError("batched pointwise log-likelihood needs log-linear potentials")
        if not hasattr(self, "_obs"):
            self._obs = self._observation_matrix()
        S, graph = self._obs
        node, edge = self.J.push(W)
        score = (S @ np.concatenate([node, edge], axis=1).T).T  # (R, n_obs)
        log_z = self.lik.engine.log_partition(self.batch, *self._engine_tables(node, edge))
        return score - log_z.reshape(W.shape[0], -1)[:, graph]


#: an MRF's batched log-likelihood keeps the dense (tables x d) Jacobian of log-linear tables:
#: for more weights each draw is evaluated on its own (a CRF's goes by feature products)
_BATCHED_MAX_WEIGHTS = 5000
#: bytes of the replicated tables of one engine call of the batched log-likelihood (the draws
#: per call adapt; fresh arrays of hundreds of MB cost more in page faults than the calls saved)
_BATCHED_TABLE_BYTES = 32 * 2**20


def pointwise_log_likelihood(problem, flat: np.ndarray, chunk: int = 500) -> np.ndarray:
    """Per-graph (CRF) or per-row (MRF) log-likelihood of the draws (chains, draws, d), many
    draws per engine call for log-linear tables (at most ``chunk``)."""
    lik = problem.make_likelihood()
    C, S, d = flat.shape
    draws = flat.reshape(C * S, d)
    crf = isinstance(lik, CRFLogLikelihood)
    if problem.potential != "loglinear" or (d > _BATCHED_MAX_WEIGHTS and not crf):
        out = np.stack([lik.pointwise(w) for w in draws])
    else:
        b, K = lik.batch, lik.K
        per_draw = 8 * (b.n_total_nodes * K + b.n_edges * K * K)
        n = max(1, min(chunk, draws.shape[0], _BATCHED_TABLE_BYTES // per_draw))
        batched = BatchedLikelihood(lik, n)  # one replicated batch, reused for every block
        parts = []
        for i in range(0, draws.shape[0], n):
            block = draws[i:i + n]
            pad = n - block.shape[0]
            full = np.concatenate([block, np.repeat(block[-1:], pad, axis=0)]) if pad else block
            parts.append(batched.pointwise(full)[:block.shape[0]])
        out = np.concatenate(parts)
    return out.reshape(C, S, -1)
