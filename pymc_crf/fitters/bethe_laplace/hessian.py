"""The exact log-likelihood curvature ``J^T C J`` of a random field applied to blocks of weight
directions, and the dense matrix assembled from such blocks.

For log-linear potentials the negative Hessian of the log-likelihood in the flat weights is
``J^T C J`` with ``C`` the covariance of the table-space sufficient statistics (the Hessian of
log Z, summed over the graphs; Welling & Parise 2006 eqs. (6), (12)) and ``J`` the Jacobian of the
log-potential tables in the weights. :mod:`~pymc_crf.fitters.bethe_laplace.curvature` applies it
one direction at a time, each product recomputing the tables; here a block of B directions goes
through at once.

* ``J V`` and ``J^T U`` for a (d, B) block are single feature products (:class:`BlockMaps`),
  with the tables and potential derivatives at ``w`` formed once.
* On chains, ``C (J V)`` comes from one forward-backward pass of the engine (node and pairwise
  marginals ``mu``, ``xi``) and two linear recursions per block. The posterior of a chain CRF is a
  Markov chain with backward and forward conditionals ``xi_t(i, j) / mu_t(j)`` and
  ``xi_t(i, j) / mu_{t-1}(i)``; for a direction ``v`` with additive statistic
  ``S(y) = sum_t v_t(y_t) + sum_t v_{t-1,t}(y_{t-1}, y_t)``,

      A_t(j) = E[past of S up to and including t | y_t = j]
             = v_t(j) + sum_i p(y_{t-1} = i | y_t = j) (A_{t-1}(i) + v_{t-1,t}(i, j)),
      G_t(i) = E[future of S after t | y_t = i]
             = sum_j p(y_{t+1} = j | y_t = i) (v_{t,t+1}(i, j) + v_{t+1}(j) + G_{t+1}(j)),

  and the covariance products are ``Cov(1[y_t = j], S) = mu_t(j) (A_t(j) + G_t(j) - E S)`` and
  ``Cov(1[y_{t-1} = i, y_t = j], S) = xi_t(i, j) (A_{t-1}(i) + v_{t-1,t}(i, j) + v_t(j) +
  G_t(j) - E S)``: the forward-mode derivative of forward-backward (the
  ``_covariance_vector_product`` kernel of :mod:`pymc_crf.inference.chain.log_space`) written in
  probabilities, where it is linear in the direction, so a block of B directions goes through
  one compiled pass over the chains (:func:`chain_covariance_block`), the directions innermost,
  about ``4 K^2 B`` multiply-adds per position, instead of a pass per direction.
* On other exact engines (junction tree, brute force), the block's B directions go to one call
  of the engine's ``covariance_vector_product`` on a batch of B copies of the graphs.

:func:`exact_fisher_matrix` assembles the dense (d, d) ``J^T C J``: for chain CRFs from the label
covariances of all position pairs (:mod:`~pymc_crf.fitters.bethe_laplace.chain_fisher`, the
features entering through matrix products), otherwise from column blocks of the identity;
:class:`CurvatureOperator` is the product as a matrix-free operator (Lanczos / randomised
eigensolvers, :mod:`pymc_crf.fitters.covariance`).
"""

from __future__ import annotations

import numpy as np
import scipy.sparse

from pymc_crf.feature_products import features_dot, features_tdot, is_sparse
from pymc_crf.fitters.bethe_laplace.chain_fisher import (
    add_node_block,
    chain_pair_covariance,
    chain_transition_covariances,
    symmetric_node_block,
)
from pymc_crf.inference.base import Engine
from pymc_crf.inference.chain import ChainEngine
from pymc_crf.kernel_cache import njit
from pymc_crf.model.objective import CRFLogLikelihood
from pymc_crf.potentials import constant_row, get_potential

__all__ = ["BlockMaps", "CurvatureOperator", "chain_conditionals", "chain_covariance_block",
           "curvature_diagonal", "exact_fisher_matrix"]

#: bytes of work arrays one direction block may take (the block size adapts to it)
MEMORY_BUDGET = 256 * 2**20


class BlockMaps:
    """``J V`` (weights to tables) and ``J^T U`` (tables to weights) for blocks of directions at
    fixed weights ``w``.

    For a ``CRFLogLikelihood`` the maps are feature products with the scores and potential
    derivatives formed once; any other likelihood (an MRF's) goes column by column through its own
    ``pushforward`` / ``pullback``. Edge directions are ``(1, K, K, B)`` when the model has one
    shared edge table (a transition table, constant edge features, or no edge weights) and
    ``(E, K, K, B)`` for per-edge tables.

    Attributes
    ----------
    node, edge : ndarray
        The log-potential tables at ``w``: (N, K) and (E, K, K) or (1, K, K).
    shared : bool
        Whether the edge tables (and edge directions) are one shared (1, K, K) table.
    """

    def __init__(self, lik, w: np.ndarray):
        self.lik = lik
        self.w = np.asarray(w, dtype=np.float64)
        self.d = self.w.size
        self.K = int(lik.K)
        self.batch = lik.batch
        self._crf = isinstance(lik, CRFLogLikelihood)
        self._row_cache: dict = {}
        if self._crf:
            self._init_crf(lik)
        else:
            self.node, self.edge = lik.log_potentials(self.w)
            self.shared = self.edge.shape[0] == 1

    # ------------------------------------------------------------------ CRF feature products
    def _init_crf(self, lik: CRFLogLikelihood) -> None:
        spec, K = lik.spec, self.K
        pot, eps = get_potential(lik.potential), lik.epsilon
        parts = spec.unflatten(self.w)
        nw, ew = spec.node_weights, spec.edge_weights
        N = self.batch.n_total_nodes
        self.X = lik.X
        self.dn = 0 if nw is None else int(nw.size)
        if nw is None:
            self.node, self.node_scale = np.zeros((N, K)), None
        else:
            a = features_dot(self.X, parts[nw.name])
            self.node, self.node_scale = pot.log(a, eps), pot.dlog(a, eps)
        self.edge_row = None
        if ew is None:
            self.edge_kind = "none"
            self.edge, self.edge_scale = np.zeros((1, K, K)), None
        else:
            We = np.asarray(parts[ew.name], dtype=np.float64)
            if lik.Xe is None:
                self.edge_kind, a = "shared", We[None]
            else:
                self.edge_row = constant_row(lik.Xe) if not is_sparse(lik.Xe) else None
                if self.edge_row is not None:  # constant edge features: one shared table
                    self.edge_kind = "row"
                    a = np.tensordot(self.edge_row, We, axes=1)[None]
                else:
                    self.edge_kind = "features"
                    a = features_dot(lik.Xe, We)
            self.edge, self.edge_scale = pot.log(a, eps), pot.dlog(a, eps)
        self.shared = self.edge.shape[0] == 1

    def _rows_of(self, which: str, rows: slice) -> tuple[np.ndarray | None, object]:
        """The feature rows ``rows`` of ``X`` (``which="node"``) or ``Xe``: ``(None, rows)`` for
        dense features; for sparse ones ``(cols, rows[:, cols])`` with ``cols`` the features the
        rows use, so products touch only those weights (cached per range)."""
        x = self.X if which == "node" else self.lik.Xe
        if not scipy.sparse.issparse(x):
            return None, x[rows]
        key = (which, rows.start, rows.stop)
        if key not in self._row_cache:
            sub = scipy.sparse.csr_matrix(x[rows])
            cols = np.unique(sub.indices)
            self._row_cache[key] = (cols, sub[:, cols].tocsr())
        return self._row_cache[key]

    def push(self, V: np.ndarray, rows: slice | None = None, erows: slice | None = None
             ) -> tuple[np.ndarray, np.ndarray]:
        """``J V`` for a (d, B) block: node (N, K, B) and edge (1 or E, K, K, B) directions;
        ``rows`` / ``erows`` restrict them to a range of nodes / edges (per-edge tables)."""
        V = np.asarray(V, dtype=np.float64)
        B, K = V.shape[1], self.K
        rows = slice(0, self.batch.n_total_nodes) if rows is None else rows
        erows = slice(0, self.batch.n_edges) if erows is None else erows
        if not self._crf:
            cols = [self.lik.pushforward(self.w, V[:, j]) for j in range(B)]
            Tn = np.stack([np.asarray(c[0], dtype=np.float64) for c in cols], axis=-1)
            Te = np.stack([np.asarray(c[1], dtype=np.float64) for c in cols], axis=-1)
            return Tn[rows], (Te if self.shared else Te[erows])
        n = rows.stop - rows.start
        if self.dn:
            cols, x = self._rows_of("node", rows)
            Vn = V[:self.dn].reshape(-1, K, B)  # a view: splits the first axis
            if cols is not None:
                Vn = Vn[cols]
            Tn = np.asarray(x @ Vn.reshape(Vn.shape[0], K * B)).reshape(n, K, B)
            if self.node_scale is not None:
                Tn *= self.node_scale[rows][:, :, None]
        else:
            Tn = np.zeros((n, K, B))
        Ve = V[self.dn:]
        scale = self.edge_scale
        if self.edge_kind == "none":
            Te = np.zeros((1, K, K, B))
        elif self.edge_kind == "shared":
            Te = Ve.reshape(1, K, K, B).copy()
        elif self.edge_kind == "row":
            Te = np.tensordot(self.edge_row, Ve.reshape(-1, K, K, B), axes=1)[None]
        else:
            cols, x = self._rows_of("edge", erows)
            Ve = Ve.reshape(-1, K * K, B)
            if cols is not None:
                Ve = Ve[cols]
            Te = np.asarray(x @ Ve.reshape(Ve.shape[0], K * K * B)).reshape(-1, K, K, B)
            scale = None if scale is None else scale[erows]
        if scale is not None:
            Te *= scale[..., None]
        return Tn, Te

    def push_unit(self, cols: np.ndarray, rows: slice | None = None,
                  erows: slice | None = None) -> tuple[np.ndarray, np.ndarray]:
        """:meth:`push` of the unit directions ``e_c`` for ``c`` in ``cols`` (columns of the
        identity), placed without a product: a node weight ``(f, a)`` moves column ``a`` of
        the node table by feature ``f``, an edge weight one entry of the edge tables."""
        cols = np.asarray(cols, dtype=np.int64)
        if not self._crf:
            V = np.zeros((self.d, cols.size))
            V[cols, np.arange(cols.size)] = 1.0
            return self.push(V, rows, erows)
        B, K = cols.size, self.K
        rows = slice(0, self.batch.n_total_nodes) if rows is None else rows
        erows = slice(0, self.batch.n_edges) if erows is None else erows
        n = rows.stop - rows.start
        Tn = np.zeros((n, K, B))
        node = np.flatnonzero(cols < self.dn)
        if node.size:
            f, a = np.divmod(cols[node], K)
            xc = self.X[rows][:, f]
            xc = xc.toarray() if scipy.sparse.issparse(xc) else np.asarray(xc)
            if self.node_scale is not None:
                xc = xc * self.node_scale[rows][:, a]
            Tn[:, a, node] = xc
        edge = np.flatnonzero(cols >= self.dn)
        if self.edge_kind == "features":
            Te = np.zeros((erows.stop - erows.start, K, K, B))
        else:
            Te = np.zeros((1, K, K, B))
        if edge.size:
            f, ij = np.divmod(cols[edge] - self.dn, K * K)
            i, j = np.divmod(ij, K)
            if self.edge_kind == "shared":
                Te[0, i, j, edge] = 1.0
            elif self.edge_kind == "row":
                Te[0, i, j, edge] = self.edge_row[f]
            else:
                xc = self.lik.Xe[erows][:, f]
                Te[:, i, j, edge] = xc.toarray() if scipy.sparse.issparse(xc) else xc
            if self.edge_scale is not None:
                sc = self.edge_scale if self.edge_kind != "features" else self.edge_scale[erows]
                Te[:, i, j, edge] *= sc[:, i, j]
        return Tn, Te

    def pull(self, Un: np.ndarray, Ue: np.ndarray, rows: slice | None = None,
             erows: slice | None = None, out: np.ndarray | None = None) -> np.ndarray:
        """``J^T U`` for table-space blocks ``Un`` (N, K, B) and ``Ue`` (1 or E, K, K, B) (shaped
        as :meth:`push` returns them, with the same ``rows`` / ``erows``): a (d, B) block,
        added into ``out`` when given (only the rows of the weights the range uses)."""
        B, K = Un.shape[-1], self.K
        if out is None:
            out = np.zeros((self.d, B))
        if not self._crf:
            if rows is not None:
                full = np.zeros((self.batch.n_total_nodes, K, B))
                full[rows] = Un
                Un = full
            if erows is not None and not self.shared:
                full = np.zeros((self.batch.n_edges, K, K, B))
                full[erows] = Ue
                Ue = full
            out += np.stack([self.lik.pullback(self.w, Un[..., j], Ue[..., j])
                             for j in range(B)], axis=1)
            return out
        rows = slice(0, self.batch.n_total_nodes) if rows is None else rows
        erows = slice(0, self.batch.n_edges) if erows is None else erows
        if self.dn:
            if self.node_scale is not None:
                Un = Un * self.node_scale[rows][:, :, None]
            cols, x = self._rows_of("node", rows)
            g = np.asarray(x.T @ Un.reshape(Un.shape[0], K * B))
            target = out[:self.dn].reshape(-1, K, B)  # a view: splits the first axis
            if cols is None:
                target += g.reshape(-1, K, B)
            else:
                target[cols] += g.reshape(-1, K, B)
        if self.edge_kind == "none":
            return out
        oe = out[self.dn:]
        if self.edge_kind == "features":
            if self.edge_scale is not None:
                Ue = Ue * self.edge_scale[erows][..., None]
            cols, x = self._rows_of("edge", erows)
            g = np.asarray(x.T @ Ue.reshape(Ue.shape[0], K * K * B)).reshape(-1, K * K, B)
            target = oe.reshape(-1, K * K, B)
            if cols is None:
                target += g
            else:
                target[cols] += g
            return out
        if self.edge_scale is not None:
            Ue = Ue * self.edge_scale[..., None]
        summed = Ue.sum(axis=0)
        if self.edge_kind == "shared":
            oe += summed.reshape(K * K, B)
        else:
            oe += np.multiply.outer(self.edge_row, summed).reshape(-1, B)
        return out


# ---------------------------------------------------------------------------- chains
def _safe_divide(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``a / b`` where ``b > 0``, else 0 (conditionals of impossible labels never matter: they
    are multiplied by a zero marginal)."""
    return np.divide(a, b, out=np.zeros_like(a), where=b > 0)


def chain_conditionals(batch, mu: np.ndarray, xi: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The posterior's backward and forward conditionals of a chain batch per edge (u, v):
    ``Pb[e, i, j] = p(y_u = i | y_v = j)`` and ``Pf[e, i, j] = p(y_v = j | y_u = i)``."""
    u, v = batch.edges[:, 0], batch.edges[:, 1]
    return _safe_divide(xi, mu[v][:, None, :]), _safe_divide(xi, mu[u][:, :, None])


def chain_covariance_block(batch, mu: np.ndarray, xi: np.ndarray, Vn: np.ndarray,
                           Ve: np.ndarray,
                           work: tuple[np.ndarray, np.ndarray] | None = None,
                           conditionals: tuple[np.ndarray, np.ndarray] | None = None
                           ) -> tuple[np.ndarray, np.ndarray]:
    """Exact covariance products ``C V`` of a chain batch for a block of B directions.

    Parameters
    ----------
    batch : GraphBatch
        Canonical chains.
    mu, xi : ndarray
        Node marginals (N, K) and per-edge pairwise marginals (E, K, K) of the tables
        (``xi[e, i, j]`` for label ``i`` at ``edges[e, 0]``, ``j`` at ``edges[e, 1]``).
    Vn, Ve : ndarray
        Directions: node (N, K, B) and edge (E, K, K, B), or (1, K, K, B) for one shared table.
    work : pair of ndarray (N, K, B), optional
        Scratch arrays for the two recursions, reused from block to block by the caller (fresh
        arrays of tens of MB cost their page faults at every block); ``Cn`` is written into
        the first.
    conditionals : pair of ndarray (E, K, K), optional
        :func:`chain_conditionals` of ``mu`` and ``xi`` (computed when None).

    Returns
    -------
    Cn : ndarray, shape (N, K, B)
    Ce : ndarray, shape (E, K, K, B), or (1, K, K, B) summed over the edges when ``Ve`` is shared

    Notes
    -----
    The recursions of the module docstring in one compiled pass over the chains (the B
    directions innermost); equal to ``ChainEngine.covariance_vector_product`` column by column
    (tested). About ``4 N K^2 B`` multiply-adds.
    """
    N, K = mu.shape
    B = Vn.shape[-1]
    E = batch.n_edges
    shared = Ve.shape[0] == 1
    Pb, Pf = chain_conditionals(batch, mu, xi) if conditionals is None else conditionals
    A, G = (np.empty((N, K, B)), np.empty((N, K, B))) if work is None else work
    Ce = np.zeros((1 if shared else E, K, K, B))
    lo = batch.node_offsets[:-1].astype(np.int64)
    elo = batch.edge_offsets[:-1].astype(np.int64)
    _chain_tangent(lo, batch.n_nodes.astype(np.int64), elo, mu, xi, Pb, Pf,
                   np.ascontiguousarray(Vn, dtype=np.float64),
                   np.ascontiguousarray(Ve, dtype=np.float64), shared, A, G, Ce)
    return A, Ce


@njit(cache=True)
def _chain_tangent(lo, n, elo, mu, xi, Pb, Pf, Vn, Ve, shared, A, G, Ce):
    """The recursions of the module docstring, chain by chain: ``A`` forward, ``G`` backward,
    then ``Ce`` (added into, summed over the edges when ``shared``) and ``Cn`` written over
    ``A``. Canonical chains: edge ``elo[g] + t - 1`` joins nodes ``lo[g] + t - 1`` and
    ``lo[g] + t``."""
    K, B = Vn.shape[1], Vn.shape[2]
    es = np.empty(B)
    for g in range(lo.size):
        a, L, e0 = lo[g], n[g], elo[g]
        for j in range(K):
            for b in range(B):
                A[a, j, b] = Vn[a, j, b]
        for t in range(1, L):  # A_t(j) = v_t(j) + sum_i Pb(i, j) (A_{t-1}(i) + v_e(i, j))
            v, e = a + t, e0 + t - 1
            ev = 0 if shared else e
            for j in range(K):
                for b in range(B):
                    A[v, j, b] = Vn[v, j, b]
                for i in range(K):
                    p = Pb[e, i, j]
                    if p != 0.0:
                        for b in range(B):
                            A[v, j, b] += p * (A[v - 1, i, b] + Ve[ev, i, j, b])
        last = a + L - 1
        for i in range(K):
            for b in range(B):
                G[last, i, b] = 0.0
        for t in range(L - 2, -1, -1):  # G_t(i) = sum_j Pf(i, j) (v_e(i, j) + v_{t+1}(j)
            u, e = a + t, e0 + t  # + G_{t+1}(j))
            ev = 0 if shared else e
            for i in range(K):
                for b in range(B):
                    G[u, i, b] = 0.0
                for j in range(K):
                    p = Pf[e, i, j]
                    if p != 0.0:
                        for b in range(B):
                            G[u, i, b] += p * (Ve[ev, i, j, b] + Vn[u + 1, j, b]
                                               + G[u + 1, j, b])
        for b in range(B):  # E S
            es[b] = 0.0
            for k in range(K):
                es[b] += mu[last, k] * A[last, k, b]
        for t in range(1, L):
            u, e = a + t - 1, e0 + t - 1
            ev = 0 if shared else e
            for i in range(K):
                for j in range(K):
                    x = xi[e, i, j]
                    if x != 0.0:
                        for b in range(B):
                            Ce[ev, i, j, b] += x * (A[u, i, b] + Ve[ev, i, j, b] + Vn[u + 1, j, b]
                                                    + G[u + 1, j, b] - es[b])
        for t in range(L):
            v = a + t
            for k in range(K):
                m = mu[v, k]
                for b in range(B):
                    A[v, k, b] = m * (A[v, k, b] + G[v, k, b] - es[b])


class CurvatureOperator:
    """``V -> J^T C J V`` (times ``n_samples`` for an MRF likelihood) at fixed weights ``w`` on an
    exact engine, for (d, B) blocks of directions: the log-likelihood's negative Hessian for
    log-linear potentials (Welling & Parise 2006 eq. (12) in weight space).

    Chains go through :func:`chain_covariance_block`, graphs chunked so that a chunk's
    pairwise marginals and work arrays stay within ``memory`` bytes; other exact engines take
    each block as one ``covariance_vector_product`` call on B copies of the graphs.

    Parameters
    ----------
    lik
        A ``CRFLogLikelihood`` or ``MRFLogLikelihood``.
    w : array (d,)
    engine : Engine, optional
        An exact engine (default: the likelihood's).
    memory : int
        Bytes of work arrays per block (the block size adapts).
    """

    def __init__(self, lik, w: np.ndarray, engine: Engine | None = None,
                 memory: int = MEMORY_BUDGET):
        self.engine = lik.engine if engine is None else engine
        if not getattr(self.engine, "exact", False):
            raise ValueError(f"CurvatureOperator needs an exact engine; got {self.engine.name!r}")
        self.maps = BlockMaps(lik, w)
        self.batch = lik.batch
        self.d = self.maps.d
        self.K = self.maps.K
        self.scale = float(getattr(lik, "n_samples", 1))
        self.memory = int(memory)
        self.chain = self.batch.is_chain and isinstance(self.engine, ChainEngine)
        self._chunks = None
        self._replicas: dict[int, object] = {}
        # the marginals and conditionals at w are kept between products (iterative solvers
        # call matmat hundreds of times) when they fit a quarter of the memory budget
        b = self.batch
        self._keep = 8 * (b.n_total_nodes + 3 * b.n_edges * self.K) * self.K <= self.memory // 4
        self._marginals: list | None = None
        self._conditionals: dict[int, tuple[np.ndarray, np.ndarray]] = {}

    @property
    def shape(self) -> tuple[int, int]:
        return (self.d, self.d)

    def _block_size(self, positions: int, edges_per_edge: int) -> int:
        """Directions per block: the block's table-space arrays (about eight of N K, three of
        E K^2 for per-edge tables) within the memory budget, at most 512."""
        per_direction = 8 * (8 * positions * self.K + 3 * edges_per_edge * self.K * self.K)
        return int(min(512, max(1, self.memory // max(per_direction, 1))))

    # ------------------------------------------------------------------ chains
    def _chain_chunks(self):
        """Consecutive groups of graphs whose pairwise marginals (3 arrays of E_c K^2) fit a
        quarter of the memory budget, with their rows and sub-batches."""
        if self._chunks is None:
            b, K = self.batch, self.K
            per_edge = 8 * 3 * K * K
            cap = max(1, self.memory // 4 // per_edge)
            chunks, g0 = [], 0
            e_end = b.edge_offsets
            while g0 < b.n_graphs:
                g1 = int(np.searchsorted(e_end, e_end[g0] + cap, side="right")) - 1
                g1 = min(max(g1, g0 + 1), b.n_graphs)
                graphs = np.arange(g0, g1)
                sub = b if (g0 == 0 and g1 == b.n_graphs) else b.subset(graphs)
                rows = slice(int(b.node_offsets[g0]), int(b.node_offsets[g1]))
                erows = slice(int(b.edge_offsets[g0]), int(b.edge_offsets[g1]))
                chunks.append((sub, rows, erows))
                g0 = g1
            self._chunks = chunks
        return self._chunks

    def chunk_marginals(self):
        """Per chunk of graphs (chains): ``(sub_batch, rows, erows, mu, xi)`` with the
        node marginals and per-edge pairwise marginals of the tables at ``w``."""
        if self._marginals is not None:
            yield from self._marginals
            return
        maps, K = self.maps, self.K
        kept = []
        for sub, rows, erows in self._chain_chunks():
            E = sub.n_edges
            edge = maps.edge if maps.shared else maps.edge[erows]
            full = np.ascontiguousarray(np.broadcast_to(edge, (E, K, K))) if maps.shared else edge
            m = self.engine.marginals(sub, maps.node[rows], full)
            item = (sub, rows, erows, m.node, m.edge)
            if self._keep:
                kept.append(item)
            yield item
        if self._keep:
            self._marginals = kept

    def _chain_matmat(self, V: np.ndarray | None, units: np.ndarray | None = None
                      ) -> np.ndarray:
        """``J^T C J V`` on chains; ``V`` None means the columns ``units`` of the identity
        (placed by :meth:`BlockMaps.push_unit`, never formed)."""
        maps, K = self.maps, self.K
        n_cols = V.shape[1] if V is not None else len(units)
        out = np.zeros((self.d, n_cols))
        for k, (sub, rows, erows, mu, xi) in enumerate(self.chunk_marginals()):
            cond = self._conditionals.get(k)
            if cond is None:
                cond = chain_conditionals(sub, mu, xi)
                if self._keep:
                    self._conditionals[k] = cond
            B = self._block_size(sub.n_total_nodes, 0 if maps.shared else sub.n_edges)
            nb = -(-n_cols // B)
            B = -(-n_cols // nb)  # equal blocks, so the scratch arrays are reused
            n = sub.n_total_nodes
            work = None
            for j0 in range(0, n_cols, B):
                b = min(B, n_cols - j0)
                if V is None:  # the last block is padded with repeated directions
                    cols = units[np.minimum(np.arange(j0, j0 + B), n_cols - 1)]
                    Tn, Te = maps.push_unit(cols, rows, erows)
                else:  # the last block is padded with zero directions
                    Vb = V[:, j0:j0 + B]
                    if b < B:
                        Vb = np.concatenate([Vb, np.zeros((V.shape[0], B - b))], axis=1)
                    Tn, Te = maps.push(Vb, rows, erows)
                if work is None:
                    work = (np.empty((n, K, B)), np.empty((n, K, B)))
                Cn, Ce = chain_covariance_block(sub, mu, xi, Tn, Te, work, cond)
                maps.pull(Cn[..., :b], Ce[..., :b], rows, erows, out=out[:, j0:j0 + b])
        return out

    # ------------------------------------------------------------------ other exact engines
    def _replica(self, B: int):
        if B not in self._replicas:
            b = self.batch
            self._replicas[B] = b.subset(np.tile(np.arange(b.n_graphs), B))
        return self._replicas[B]

    def _replicated_matmat(self, V: np.ndarray) -> np.ndarray:
        maps, K, b = self.maps, self.K, self.batch
        N, E = b.n_total_nodes, b.n_edges
        out = np.empty_like(V)
        B = min(V.shape[1], self._block_size(N, E), 64)
        node_rep = edge_rep = None
        for j0 in range(0, V.shape[1], B):
            Vb = V[:, j0:j0 + B]
            nb = Vb.shape[1]
            rep = self._replica(nb)
            if node_rep is None or node_rep.shape[0] != nb * N:
                node_rep = np.tile(maps.node, (nb, 1))
                edge_rep = np.tile(np.broadcast_to(maps.edge, (E, K, K)), (nb, 1, 1))
            Tn, Te = maps.push(Vb)
            vn = np.ascontiguousarray(Tn.transpose(2, 0, 1)).reshape(nb * N, K)
            ve = np.ascontiguousarray(np.broadcast_to(Te.transpose(3, 0, 1, 2), (nb, E, K, K))
                                      ).reshape(nb * E, K, K)
            cn, ce = self.engine.covariance_vector_product(rep, node_rep, edge_rep, vn, ve)
            Cn = cn.reshape(nb, N, K).transpose(1, 2, 0)
            Ce = ce.reshape(nb, E, K, K).transpose(1, 2, 3, 0)
            if maps.shared:
                Ce = Ce.sum(axis=0, keepdims=True)
            out[:, j0:j0 + nb] = maps.pull(Cn, Ce)
        return out

    # ------------------------------------------------------------------ public
    def matmat(self, V: np.ndarray) -> np.ndarray:
        """``J^T C J V`` (times ``n_samples`` for an MRF) for a (d, B) block ``V``."""
        V = np.asarray(V, dtype=np.float64)
        if V.ndim == 1:
            return self.matmat(V[:, None])[:, 0]
        if V.shape[0] != self.d:
            raise ValueError(f"directions must have {self.d} rows; got {V.shape}")
        out = self._chain_matmat(V) if self.chain else self._replicated_matmat(V)
        return self.scale * out

    def matvec(self, v: np.ndarray) -> np.ndarray:
        """``J^T C J v`` for one direction (d,)."""
        return self.matmat(np.asarray(v, dtype=np.float64)[:, None])[:, 0]


def _row_products(x, a: np.ndarray, b: np.ndarray):
    """Elementwise products of rows ``a`` and ``b`` of dense or sparse features."""
    if scipy.sparse.issparse(x):
        x = scipy.sparse.csr_matrix(x)
        return x[a].multiply(x[b]).tocsr()
    return x[a] * x[b]


def _squared(x):
    if scipy.sparse.issparse(x):
        return scipy.sparse.csr_matrix(x).multiply(x).tocsr()
    return x * x


def _chain_diagonal(op: CurvatureOperator) -> np.ndarray:
    """Exact ``diag(J^T C J)`` of a chain CRF (times ``n_samples`` for an MRF does not arise:
    CRF likelihoods only).

    The variance of a weight's statistic ``sum_s x_sf c_sa 1[y_s = a]`` (``c`` the potential
    derivative, 1 for log-linear) is ``sum_s x_sf^2 c_sa^2 mu_s(a)(1 - mu_s(a))`` plus twice
    ``sum_{s<t} x_sf x_tf c_sa c_ta mu_s(a) (R_st(a, a) - mu_t(a))``, where
    ``R_st = P_{s+1} ... P_t`` is the product of the posterior's forward conditionals
    ``P_t(i, j) = p(y_t = j | y_{t-1} = i)``; an edge weight's pairs of edges
    ``(s-1, s), (t-1, t)`` likewise have ``p(ij at both) = xi_s(i, j) R_{s,t-1}(j, i) P_t(i, j)``.
    The products are carried lag by lag for all start positions at once: ``n K^3`` per lag.
    """
    maps, K = op.maps, op.K
    d = op.d
    out = np.zeros(d)
    dn = maps.dn
    node_diag = np.zeros((dn // K if dn else 0, K))
    shared_diag = np.zeros((K, K))  # variance of the summed pair counts (shared / row kinds)
    feat_diag = None
    if maps.edge_kind == "features":
        feat_diag = np.zeros((maps.lik.Xe.shape[1], K, K))
    for sub, rows, erows, mu, xi in op.chunk_marginals():
        X = maps.X[rows] if dn else None
        sn = None if maps.node_scale is None else maps.node_scale[rows]
        u, v = sub.edges[:, 0], sub.edges[:, 1]
        E = sub.n_edges
        Pf = _safe_divide(xi, mu[u][:, :, None])
        n = sub.n_total_nodes
        in_edge = np.full(n, -1, np.int64)
        in_edge[v] = np.arange(E)
        last = np.repeat(sub.node_offsets[1:] - 1, sub.n_nodes)
        if maps.edge_kind == "features":
            Xe = maps.lik.Xe[erows]
            se = None if maps.edge_scale is None else maps.edge_scale[erows]
        else:
            se = None if maps.edge_scale is None else np.broadcast_to(maps.edge_scale, xi.shape)
        # same-position terms
        if dn:
            c = mu * (1.0 - mu) * (1.0 if sn is None else sn**2)
            node_diag += features_tdot(_squared(X), c)
        if E:
            c = xi * (1.0 - xi) * (1.0 if se is None else se**2)
            if feat_diag is not None:
                feat_diag += features_tdot(_squared(Xe), c.reshape(E, K * K)).reshape(-1, K, K)
            elif maps.edge_kind != "none":
                shared_diag += c.sum(axis=0)
        # cross terms, lag by lag: R[s] = R_{s, s+L}
        act = np.arange(n)
        R = np.broadcast_to(np.eye(K), (n, K, K))
        for L in range(0, int(sub.n_nodes.max())):
            if L:
                keep = act + L <= last[act]
                act, R = act[keep], R[keep]
                if not act.size:
                    break
                R = np.matmul(R, Pf[in_edge[act + L]])
                if dn:
                    t = act + L
                    c = mu[act] * (np.einsum("sii->si", R) - mu[t])
                    if sn is not None:
                        c = c * sn[act] * sn[t]
                    node_diag += 2.0 * features_tdot(_row_products(X, act, t), c)
            # edge pairs (in_edge[s], in_edge[s + L + 1]) use R_{s, s+L}
            if E and maps.edge_kind != "none":
                ok = (in_edge[act] >= 0) & (act + L + 1 <= last[act])
                s0 = act[ok]
                if s0.size:
                    e1, e2 = in_edge[s0], in_edge[s0 + L + 1]
                    Rt = R[ok].transpose(0, 2, 1)  # R(j, i) at [i, j]
                    c = xi[e1] * Rt * Pf[e2] - xi[e1] * xi[e2]
                    if se is not None:
                        c = c * se[e1] * se[e2]
                    if feat_diag is not None:
                        feat_diag += 2.0 * features_tdot(_row_products(Xe, e1, e2),
                                                         c.reshape(-1, K * K)).reshape(-1, K, K)
                    else:
                        shared_diag += 2.0 * c.sum(axis=0)
    if dn:
        out[:dn] = node_diag.ravel()
    if maps.edge_kind == "shared":
        out[dn:] = shared_diag.ravel()
    elif maps.edge_kind == "row":
        out[dn:] = np.multiply.outer(maps.edge_row**2, shared_diag).ravel()
    elif feat_diag is not None:
        out[dn:] = feat_diag.ravel()
    return out


def curvature_diagonal(op: CurvatureOperator, block: int = 256) -> np.ndarray:
    """``diag(J^T C J)`` (times ``n_samples`` for an MRF): exact and in ``O(n_g K^3)`` per
    position for chain CRFs (:func:`_chain_diagonal`), otherwise from d Hessian-vector
    products in blocks (small d)."""
    if op.chain and op.maps._crf:
        return _chain_diagonal(op)
    out = np.empty(op.d)
    for j0 in range(0, op.d, block):
        cols = np.arange(j0, min(op.d, j0 + block))
        E = np.zeros((op.d, cols.size))
        E[cols, np.arange(cols.size)] = 1.0
        out[cols] = op.matmat(E)[cols, np.arange(cols.size)]
    return out


def _pairwise_chain_bytes(n: np.ndarray | int, K: int, F: int, transitions: bool):
    """Bytes :func:`_chain_pairwise_blocks` holds for a chain of ``n`` nodes: its label
    covariances of all position pairs, feature and work rows, and with ``transitions`` its
    transition covariances."""
    return 8 * n * (K * K * n + 2 * K * F + (2 * K**3 if transitions else 0))


def _chain_pairwise_blocks(op: CurvatureOperator, H: np.ndarray, transitions: bool):
    """The node-weight block of ``J^T C J`` of a chain CRF, written into ``H`` (an (F, K, F, K)
    view of the (dn, dn) block), from the label covariances of all position pairs
    (:mod:`~pymc_crf.fitters.bethe_laplace.chain_fisher`): per chunk of graphs, chains of equal
    length together, in batches whose covariances and work arrays fit half the memory budget.

    With ``transitions``, returns the covariances with the transition counts of one shared
    table: ``J_n^T Q`` (dn, K^2) (node weights against table entries) and ``D`` (K^2, K^2)
    (:func:`~pymc_crf.fitters.bethe_laplace.chain_fisher.chain_transition_covariances`)."""
    maps, K = op.maps, op.K
    F = maps.dn // K
    H[...] = 0.0
    NQ = np.zeros((F, K, K * K)) if transitions else None
    D = np.zeros((K * K, K * K)) if transitions else None
    for sub, rows, _erows, mu, xi in op.chunk_marginals():
        Pf = chain_conditionals(sub, mu, xi)[1]
        in_edge = np.full(sub.n_total_nodes, -1, np.int64)
        in_edge[sub.edges[:, 1]] = np.arange(sub.n_edges)
        X = maps.X[rows]
        X = X.toarray() if scipy.sparse.issparse(X) else np.asarray(X, dtype=np.float64)
        sn = None if maps.node_scale is None else maps.node_scale[rows]
        lo = sub.node_offsets[:-1]
        # chains by length; bytes per chain: its covariances, feature rows and work rows (and
        # its transition covariances, kept and then concatenated for one product)
        order = np.argsort(sub.n_nodes, kind="stable")
        cost = _pairwise_chain_bytes(sub.n_nodes[order], K, F, transitions)
        batch_of = np.floor_divide(np.cumsum(cost), max(op.memory // 2, 1))
        for b in np.unique(batch_of):
            groups, scales, qs = [], [], []
            sel = order[batch_of == b]
            for n in np.unique(sub.n_nodes[sel]):
                nodes = lo[sel[sub.n_nodes[sel] == n], None] + np.arange(n)  # (G, n)
                m, P = mu[nodes], Pf[in_edge[nodes[:, 1:]]]
                C = chain_pair_covariance(m, P)
                if transitions:
                    Q, Dg = chain_transition_covariances(C, m, P)
                    D += Dg
                    qs.append(Q if sn is None else Q * sn[nodes][..., None])
                groups.append((C, X[nodes]))
                if sn is not None:
                    scales.append(sn[nodes])
            if transitions:  # J_n^T Q: one product over the batch's positions
                Xb = np.concatenate([x.reshape(-1, F) for _, x in groups])
                Qb = np.concatenate([q.reshape(-1, K * K * K) for q in qs])
                NQ += (Xb.T @ Qb).reshape(F, K, K * K)
            add_node_block(H, groups, None if sn is None else scales)
    symmetric_node_block(H)
    if not transitions:
        return None, None
    return NQ.reshape(maps.dn, K * K), D


def _shared_edge_jacobian(maps: BlockMaps) -> np.ndarray:
    """The (K^2, d_edge) Jacobian of one shared edge table in the edge weights: a transition
    table (``edge_kind="shared"``) or constant edge features (``"row"``), times the potential
    derivative."""
    K2 = maps.K * maps.K
    scale = np.ones(K2) if maps.edge_scale is None else maps.edge_scale.reshape(K2)
    if maps.edge_kind == "shared":
        return np.diag(scale)
    return (np.multiply.outer(scale, maps.edge_row)[:, :, None]
            * np.eye(K2)[:, None, :]).reshape(K2, -1)


def exact_fisher_matrix(lik, w: np.ndarray, engine: Engine | None = None,
                        memory: int = MEMORY_BUDGET) -> np.ndarray:
    """Dense ``J^T C J`` (d, d) at ``w`` on an exact engine (times ``n_samples`` for an MRF): the
    negative log-likelihood Hessian of log-linear potentials (Welling & Parise 2006 eq. (12)).
    Symmetrised.

    Chain CRFs with node weights: from the label covariances of all position pairs
    (:func:`_chain_pairwise_blocks`), the node-weight block through feature products, and with
    one shared edge table (a transition table or constant edge features) its blocks from the
    covariances with the transition counts; per-edge tables take their columns from blocks of
    unit directions through the chain recursions of :class:`CurvatureOperator`. Other
    likelihoods and exact engines (MRFs, junction trees), and chains too long for their
    pairwise covariances to fit half of ``memory``: all columns from blocks of unit
    directions."""
    op = CurvatureOperator(lik, w, engine, memory)
    maps = op.maps
    crf_chains = op.chain and maps._crf and maps.dn  # a CRF: n_samples is 1
    shared = crf_chains and maps.edge_kind in ("shared", "row")
    # the pairwise covariances of one chain grow as n^2, which no batching of whole chains
    # divides: a chain beyond half the budget takes the unit directions (O(n K^2 d))
    if crf_chains and _pairwise_chain_bytes(int(op.batch.n_nodes.max()), op.K,
                                            maps.dn // op.K, shared) <= op.memory // 2:
        dn, d = maps.dn, op.d
        F = np.empty((d, d))
        node = np.reshape(F[:dn, :dn], (dn // op.K, op.K, dn // op.K, op.K), copy=False)
        NQ, D = _chain_pairwise_blocks(op, node, shared)
        if shared:
            Je = _shared_edge_jacobian(maps)
            F[:dn, dn:] = NQ @ Je
            F[dn:, :dn] = F[:dn, dn:].T
            ee = Je.T @ D @ Je
            F[dn:, dn:] = 0.5 * (ee + ee.T)
        elif d > dn:  # per-edge tables: their columns by blocks of unit directions
            cols = op._chain_matmat(None, units=np.arange(dn, d))
            F[:dn, dn:] = cols[:dn]
            F[dn:, :dn] = cols[:dn].T
            F[dn:, dn:] = 0.5 * (cols[dn:] + cols[dn:].T)
        return F
    if op.chain:
        F = op._chain_matmat(None, units=np.arange(op.d))
        F *= op.scale
    else:
        F = op.matmat(np.eye(op.d))
    F += F.T  # numpy buffers the overlapping transpose
    F *= 0.5
    return F
