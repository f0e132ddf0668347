"""Tree-structured expectation propagation (TreeEP; Qi 2005, ch. 3).

The approximation ``q`` is a spanning-tree MRF (Qi 2005, eq. (3.2)). The tree is the maximum spanning
tree of the mutual information estimated from each edge's own factors (node potentials times the
edge table, Qi 2005, sec. 3.4, after Chow & Liu 1968). Tree edges enter ``q`` exactly; each off-tree edge
``o = (u, v)`` is approximated by a term living on the tree path ``u = p_0, ..., p_L = v``
(Qi 2005, eq. (3.6)): pairwise log tables ``t_o[k](x_{p_k}, x_{p_{k+1}})``, the path's separator
divisions folded into the pairwise tables. So ``q ∝ exp(node + Psi)`` with tree tables
``Psi = psi_tree + sum_o t_o``.

EP update of a term (Qi 2005, sec. 3.3.2), with local propagation (sec. 3.3.4):

1. *Local propagation*: the tree messages are kept valid towards a moving centre (one per tree
   component). The centre walks along the tree to ``u``, recomputing only the messages on that
   route, so every message pointing into the path is current.
2. *Deletion* (Qi 2005, eqs. (3.7)-(3.8)): the path's marginal under ``q`` is a chain whose node
   potentials include the messages from the rest of the tree; removing ``t_o`` gives the cavity.
3. *Incorporate evidence by cutset conditioning* (Qi 2005, sec. 3.3.3): the cavity chain times
   ``f_o(x_u, x_v)`` is a single loop; conditioning on ``x_u`` turns it into ``K`` chains whose
   forward-backward passes, averaged by their scale factors, give the tilted path marginals.
4. *Update* (Qi 2005, eqs. (3.9)-(3.10)): new ``t_o`` = tilted / cavity pair marginals divided by the
   inner node ratios, so that the new ``q`` has exactly the tilted marginals on every tree edge
   (the rest of the tree only sees the path through it, so ``q`` matches the tilted distribution
   everywhere on the tree). The messages along the path towards ``u`` are recomputed.

The log Z estimate is the EP evidence ``log Z_q + sum_o log E_{q}[f_o / t_o]``, each expectation
an exact computation on the path chain; it is exact when a single off-tree edge closes a single
loop, and the engine reduces to exact tree inference when there is no off-tree edge.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
from scipy.sparse import coo_matrix
from scipy.sparse.csgraph import minimum_spanning_tree

from pymc_crf.graphs.batch import GraphBatch
from pymc_crf.inference.base import LoopyResult, check_potentials, engine_doc
from pymc_crf.inference.bethe import beliefs, bethe_log_z, cavity
from pymc_crf.inference.kernels import SUM, copy_into, log_backward, log_forward, logsumexp_1d, unused_arrays
from pymc_crf.inference.loopy import LoopyEngine
from pymc_crf.kernel_cache import njit

if TYPE_CHECKING:
    from numpy.typing import ArrayLike

__all__ = ["TreeEP", "spanning_tree"]


# ---------------------------------------------------------------------------- tree choice
def _edge_tables(batch: GraphBatch, edge: np.ndarray) -> np.ndarray:
    return edge if edge.shape[0] == batch.n_edges else np.broadcast_to(
        edge, (batch.n_edges, *edge.shape[1:]))


def edge_mutual_information(batch: GraphBatch, node: np.ndarray, edge: np.ndarray) -> np.ndarray:
    """Mutual information of each edge's own two-node model ``exp(node_u + node_v + psi_e)``
    (Qi 2005, sec. 3.4), shape (E,)."""
    if batch.n_edges == 0:
        return np.zeros(0)
    tab = _edge_tables(batch, edge)
    lj = node[batch.edges[:, 0]][:, :, None] + node[batch.edges[:, 1]][:, None, :] + tab
    m = lj.max(axis=(1, 2), keepdims=True)
    m = np.where(np.isfinite(m), m, 0.0)
    p = np.exp(lj - m)
    p /= p.sum(axis=(1, 2), keepdims=True)
    pu, pv = p.sum(2), p.sum(1)
    with np.errstate(divide="ignore", invalid="ignore"):
        term = np.where(p > 0, p * (np.log(p) - np.log(pu[:, :, None]) - np.log(pv[:, None, :])),
                        0.0)
    return np.maximum(term.sum(axis=(1, 2)), 0.0)


def spanning_tree(batch: GraphBatch, weights: np.ndarray) -> np.ndarray:
    """Boolean mask (E,) of a maximum-weight spanning forest of the whole batch (Kruskal/Prim via
    scipy on the block-diagonal graph; graphs never share edges, so it is per graph)."""
    E, N = batch.n_edges, batch.n_total_nodes
    mask = np.zeros(E, np.bool_)
    if E == 0:
        return mask
    # scipy finds a *minimum* tree and drops zero weights: use positive, order-reversed weights.
    w = (weights.max() - weights) + 1.0
    lo = np.minimum(batch.edges[:, 0], batch.edges[:, 1])
    hi = np.maximum(batch.edges[:, 0], batch.edges[:, 1])
    T = minimum_spanning_tree(coo_matrix((w, (lo, hi)), shape=(N, N)).tocsr()).tocoo()
    key = lo * N + hi
    order = np.argsort(key)
    tkey = np.minimum(T.row, T.col).astype(np.int64) * N + np.maximum(T.row, T.col)
    mask[order[np.searchsorted(key[order], tkey)]] = True
    return mask


# ---------------------------------------------------------------------------- numba helpers
@njit(cache=True)
def _forest(N, tu, tv, adj_ptr, adj_nbr, adj_te):
    """BFS over the tree edges: parent, parent tree edge, depth, component root, BFS order, and a
    DFS preorder (used to sort the off-tree edges so consecutive paths are close)."""
    parent = np.full(N, -1, np.int64)
    pte = np.full(N, -1, np.int64)
    depth = np.zeros(N, np.int64)
    comp = np.full(N, -1, np.int64)
    order = np.empty(N, np.int64)
    pre = np.empty(N, np.int64)
    stack = np.empty(N, np.int64)
    n = 0
    npre = 0
    for r in range(N):
        if comp[r] >= 0:
            continue
        comp[r] = r
        order[n] = r
        head = n
        n += 1
        while head < n:
            a = order[head]
            head += 1
            for p in range(adj_ptr[a], adj_ptr[a + 1]):
                b = adj_nbr[p]
                if comp[b] < 0:
                    comp[b] = r
                    parent[b] = a
                    pte[b] = adj_te[p]
                    depth[b] = depth[a] + 1
                    order[n] = b
                    n += 1
        # DFS preorder of this component
        top = 0
        stack[0] = r
        top = 1
        while top > 0:
            top -= 1
            a = stack[top]
            pre[a] = npre
            npre += 1
            for p in range(adj_ptr[a], adj_ptr[a + 1]):
                b = adj_nbr[p]
                if parent[b] == a and pte[b] == adj_te[p]:
                    stack[top] = b
                    top += 1
    return parent, pte, depth, comp, order, pre


@njit(cache=True)
def _route(a, b, parent, depth, bufa, bufb, out):
    """Tree path a -> b into ``out``; returns its number of nodes."""
    na = 0
    nb = 0
    x = a
    y = b
    bufa[na] = x
    na += 1
    bufb[nb] = y
    nb += 1
    while depth[x] > depth[y]:
        x = parent[x]
        bufa[na] = x
        na += 1
    while depth[y] > depth[x]:
        y = parent[y]
        bufb[nb] = y
        nb += 1
    while x != y:
        x = parent[x]
        bufa[na] = x
        na += 1
        y = parent[y]
        bufb[nb] = y
        nb += 1
    n = 0
    for i in range(na):
        out[n] = bufa[i]
        n += 1
    for i in range(nb - 2, -1, -1):
        out[n] = bufb[i]
        n += 1
    return n


@njit(cache=True)
def _paths(off_u, off_v, parent, pte, depth, N):
    """Flattened tree paths of the off-tree edges: nodes (ptr_n) and tree edges (ptr_e)."""
    M = off_u.shape[0]
    bufa = np.empty(N, np.int64)
    bufb = np.empty(N, np.int64)
    out = np.empty(N, np.int64)
    lens = np.empty(M, np.int64)
    for o in range(M):
        lens[o] = _route(off_u[o], off_v[o], parent, depth, bufa, bufb, out)
    ptr_n = np.zeros(M + 1, np.int64)
    ptr_e = np.zeros(M + 1, np.int64)
    for o in range(M):
        ptr_n[o + 1] = ptr_n[o] + lens[o]
        ptr_e[o + 1] = ptr_e[o] + lens[o] - 1
    pn = np.empty(ptr_n[M], np.int64)
    pe = np.empty(ptr_e[M], np.int64)
    for o in range(M):
        n = _route(off_u[o], off_v[o], parent, depth, bufa, bufb, out)
        for k in range(n):
            pn[ptr_n[o] + k] = out[k]
        for k in range(n - 1):
            a = out[k]
            b = out[k + 1]
            pe[ptr_e[o] + k] = pte[a] if parent[a] == b else pte[b]
    return ptr_n, ptr_e, pn, pe


@njit(cache=True)
def _send(a, te, node, Psi, tu, adj_ptr, into, msg, buf, col):
    """Tree message from ``a`` over tree edge te (log, normalised), stored in ``msg``.

    Tree message ``2t`` runs ``tu[t] -> tv[t]`` and ``2t + 1`` back; ``into`` lists the messages
    entering each node in adjacency order, so the cavity of ``a`` is BP's."""
    K = node.shape[1]
    fwd = tu[te] == a
    dout = 2 * te if fwd else 2 * te + 1
    cavity(node, msg, a, dout ^ 1, adj_ptr, into, buf)
    for y in range(K):
        for x in range(K):
            col[x] = buf[x] + (Psi[te, x, y] if fwd else Psi[te, y, x])
        msg[dout, y] = logsumexp_1d(col)
    z = logsumexp_1d(msg[dout])
    if z == -np.inf:
        for y in range(K):
            msg[dout, y] = -np.log(K)
    else:
        for y in range(K):
            msg[dout, y] -= z


@njit(cache=True)
def _move(c, target, parent, pte, depth, node, Psi, tu, adj_ptr, into, msg, bufa,
          bufb, route, buf, col):
    """Local propagation: move the centre c -> target, recomputing the messages on the route."""
    n = _route(c, target, parent, depth, bufa, bufb, route)
    for k in range(n - 1):
        a = route[k]
        b = route[k + 1]
        te = pte[a] if parent[a] == b else pte[b]
        _send(a, te, node, Psi, tu, adj_ptr, into, msg, buf, col)


@njit(cache=True)
def _chain_pass(o, e_off, edge_tab, pn, pe, n0, e0, L, node, Psi, tu, adj_ptr, adj_nbr, adj_te,
                msg, t, phi, C, Cq, al, be, ac, bc, col, tmp):
    """Build the path chain of term o (node potentials with incoming messages, cavity tables)
    and run the conditioned (tilted) and plain (cavity) forward-backward passes.

    Returns (log Z tilted, log Z cavity chain, log Z q chain), all relative to the same ``phi``.
    """
    K = node.shape[1]
    for k in range(L + 1):
        i = pn[n0 + k]
        prev = pn[n0 + k - 1] if k > 0 else -1
        nxt = pn[n0 + k + 1] if k < L else -1
        for x in range(K):
            phi[k, x] = node[i, x]
        for p in range(adj_ptr[i], adj_ptr[i + 1]):
            w = adj_nbr[p]
            if w != prev and w != nxt:
                t2 = adj_te[p]
                din = 2 * t2 if tu[t2] == w else 2 * t2 + 1
                for x in range(K):
                    phi[k, x] += msg[din, x]
    for k in range(L):
        te = pe[e0 + k]
        fwd = tu[te] == pn[n0 + k]
        for x in range(K):
            for y in range(K):
                ps = Psi[te, x, y] if fwd else Psi[te, y, x]
                Cq[k, x, y] = ps
                tk = t[e0 + k, x, y]
                C[k, x, y] = ps - tk if tk > -np.inf else ps
    # tilted: condition on x_u = a (Qi 2005, sec. 3.3.3), one chain per a: al[k, a, x], be[k, a, x]
    noi, no2, no3 = unused_arrays()
    fw = np.empty((L + 1, K))
    bw = np.empty((L + 1, K))
    for a in range(K):
        for x in range(K):
            fw[0, x] = phi[0, a] if x == a else -np.inf
            bw[L, x] = edge_tab[e_off, a, x]
        log_forward(phi, 0, L + 1, C, 0, False, SUM, fw, noi, no2, no3, no2)
        log_backward(phi, 0, L + 1, C, 0, False, SUM, bw, no2, no3, no2)
        # element by element, not al[:L + 1, a] = fw: see kernels.copy_into
        for k in range(L + 1):
            for x in range(K):
                al[k, a, x] = fw[k, x]
                be[k, a, x] = bw[k, x]
    for a in range(K):
        tmp[a] = phi[0, a] + be[0, a, a]
    lzt = logsumexp_1d(tmp)
    # cavity chain and q chain (forward only for the latter)
    for x in range(K):
        ac[0, x] = phi[0, x]
        bc[L, x] = 0.0
    log_forward(phi, 0, L + 1, C, 0, False, SUM, ac, noi, no2, no3, no2)
    log_backward(phi, 0, L + 1, C, 0, False, SUM, bc, no2, no3, no2)
    lzc = logsumexp_1d(ac[L])
    copy_into(fw[0], phi[0])
    log_forward(phi, 0, L + 1, Cq, 0, False, SUM, fw, noi, no2, no3, no2)
    lzq = logsumexp_1d(fw[L])
    return lzt, lzc, lzq


@njit(cache=True)
def _pair_logs(k, L, C, phi, al, be, ac, bc, lzt, lzc, lp, lc, col):
    """Tilted and cavity log pair marginals of chain edge k into lp, lc (K, K)."""
    K = phi.shape[1]
    for x in range(K):
        for y in range(K):
            for a in range(K):
                col[a] = al[k, a, x] + C[k, x, y] + phi[k + 1, y] + be[k + 1, a, y]
            lp[x, y] = logsumexp_1d(col) - lzt
            lc[x, y] = ac[k, x] + C[k, x, y] + phi[k + 1, y] + bc[k + 1, y] - lzc


@njit(cache=True)
def _tree_ep_run(node, edge_tab, Psi, tu, tv, adj_ptr, adj_nbr, adj_te, into, parent, pte, depth,
                 comp, bfs, off_e, off_u, ptr_n, ptr_e, pn, pe, goff_ptr, damping, tol,
                 max_iter, iters, changes, converged, log_s, off_marg):
    """TreeEP for every graph of the batch. ``Psi`` (tree tables) is updated in place; returns
    the calibrated tree messages."""
    N, K = node.shape
    T = tu.shape[0]
    msg = np.zeros((2 * T, K))
    buf = np.empty(K)
    col = np.empty(K)
    tmp = np.empty(K)
    bufa = np.empty(N, np.int64)
    bufb = np.empty(N, np.int64)
    route = np.empty(N, np.int64)
    Lmax = 1
    for o in range(off_e.shape[0]):
        Lmax = max(Lmax, ptr_e[o + 1] - ptr_e[o])
    phi = np.empty((Lmax + 1, K))
    C = np.empty((Lmax, K, K))
    Cq = np.empty((Lmax, K, K))
    al = np.empty((Lmax + 1, K, K))
    be = np.empty((Lmax + 1, K, K))
    ac = np.empty((Lmax + 1, K))
    bc = np.empty((Lmax + 1, K))
    lp = np.empty((K, K))
    lc = np.empty((K, K))
    lpn = np.empty(K)
    lcn = np.empty(K)
    tnew = np.empty((Lmax, K, K))
    t = np.zeros((pe.shape[0], K, K))
    centre = np.arange(N)  # centre of the component rooted at r is centre[r]
    # initial collect: messages child -> parent are valid towards each root
    for j in range(N - 1, -1, -1):
        i = bfs[j]
        if parent[i] >= 0:
            _send(i, pte[i], node, Psi, tu, adj_ptr, into, msg, buf, col)
    G = goff_ptr.shape[0] - 1
    for g in range(G):
        lo, hi = goff_ptr[g], goff_ptr[g + 1]
        if hi == lo:
            converged[g] = True
            continue
        for it in range(max_iter + 1):
            final = it == max_iter or converged[g]
            step = 0.0
            for o in range(lo, hi):
                u = off_u[o]
                r = comp[u]
                _move(centre[r], u, parent, pte, depth, node, Psi, tu, adj_ptr, into,
                      msg, bufa, bufb, route, buf, col)
                centre[r] = u
                n0, e0 = ptr_n[o], ptr_e[o]
                L = ptr_e[o + 1] - e0
                lzt, lzc, lzq = _chain_pass(o, off_e[o], edge_tab, pn, pe, n0, e0, L, node, Psi,
                                            tu, adj_ptr, adj_nbr, adj_te, msg, t, phi, C, Cq, al,
                                            be, ac, bc, col, tmp)
                # The terms only rule out what the graph rules out, so a tilted chain with no
                # possible labelling means the graph has none: log Z is -inf, the terms stay
                # as they are, and the off-tree belief is uniform (as BP's beliefs are then).
                feasible = lzt > -np.inf and lzc > -np.inf
                if final:
                    # EP evidence term and the tilted marginal of the off-tree edge itself
                    log_s[o] = lzt - lzq if feasible else -np.inf
                    for a in range(K):
                        for y in range(K):
                            off_marg[o, a, y] = (np.exp(al[L, a, y] + be[L, a, y] - lzt)
                                                 if feasible else 1.0 / (K * K))
                    continue
                if not feasible:
                    continue
                # new term: tilted / cavity pair ratios, inner node ratios divided out (3.9)-(3.10)
                for k in range(L):
                    _pair_logs(k, L, C, phi, al, be, ac, bc, lzt, lzc, lp, lc, col)
                    if k < L - 1:
                        for y in range(K):
                            for a in range(K):
                                tmp[a] = al[k + 1, a, y] + be[k + 1, a, y]
                            lpn[y] = logsumexp_1d(tmp) - lzt
                            lcn[y] = ac[k + 1, y] + bc[k + 1, y] - lzc
                    for x in range(K):
                        for y in range(K):
                            # A pair the tilted chain rules out gets a -inf term whatever the
                            # node ratio (which is 0 / 0 there when y itself is ruled out); a
                            # pair the cavity already rules out gets a neutral term (the tilted
                            # one is then ruled out too). Only pairs possible in both take the
                            # ratio, and their node marginals are then positive in both.
                            if lp[x, y] == -np.inf:
                                v = -np.inf if lc[x, y] > -np.inf else 0.0
                            elif lc[x, y] == -np.inf:
                                v = 0.0
                            else:
                                v = lp[x, y] - lc[x, y]
                                if k < L - 1:
                                    v -= lpn[y] - lcn[y]
                            old = t[e0 + k, x, y]
                            if damping > 0.0 and v > -np.inf and old > -np.inf:
                                v = (1.0 - damping) * v + damping * old
                            tnew[k, x, y] = v
                            if v != old:
                                d = abs(v - old)
                                if not d <= step:
                                    step = d
                for k in range(L):
                    te = pe[e0 + k]
                    fwd = tu[te] == pn[n0 + k]
                    for x in range(K):
                        for y in range(K):
                            t[e0 + k, x, y] = tnew[k, x, y]
                            v = C[k, x, y] + tnew[k, x, y]
                            if fwd:
                                Psi[te, x, y] = v
                            else:
                                Psi[te, y, x] = v
                # the messages along the path towards u changed: recompute them (centre stays u)
                for k in range(L - 1, -1, -1):
                    _send(pn[n0 + k + 1], pe[e0 + k], node, Psi, tu, adj_ptr, into, msg, buf,
                          col)
            if final:
                break
            iters[g] = it + 1
            changes[g] = step
            if step < tol:
                converged[g] = True
    # distribute from every centre so that all messages are valid
    for r in range(N):
        if comp[r] != r:
            continue
        c = centre[r]
        # BFS from the centre over the tree, sending messages outwards
        route[0] = c
        n = 1
        head = 0
        bufa[c] = -1
        while head < n:
            a = route[head]
            head += 1
            for p in range(adj_ptr[a], adj_ptr[a + 1]):
                b = adj_nbr[p]
                if b != bufa[a]:
                    bufa[b] = a
                    _send(a, adj_te[p], node, Psi, tu, adj_ptr, into, msg, buf, col)
                    route[n] = b
                    n += 1
    return msg


# ---------------------------------------------------------------------------- engine
class TreeEP(LoopyEngine):
    """Tree-structured EP with cutset conditioning and local propagation (Qi 2005, ch. 3).

    Parameters
    ----------
    tol : float
        Convergence when no term table changed by more than ``tol`` (log scale) in a sweep.
    max_iter : int
        Cap on sweeps over the off-tree edges.
    damping : float
        Weight of the old term in the log-domain mixture (0: plain EP, as in the thesis).
    warn : bool
        Emit a :class:`~pymc_crf.inference.base.ConvergenceWarning` on non-convergence.
    """

    name = "tree_ep"
    approximation = "the TreeEP (tree-structured EP) estimate"
    method = "TreeEP"
    hint = "try damping"

    def __init__(self, tol: float = 1e-9, max_iter: int = 200, damping: float = 0.0,
                 warn: bool = True):
        super().__init__(tol, max_iter, damping, warn)

    @engine_doc
    def run(self, batch: GraphBatch, node_logpot: ArrayLike, edge_logpot: ArrayLike,
            tree_mask: np.ndarray | None = None) -> LoopyResult:
        """Run TreeEP: beliefs (q on tree edges, the tilted distribution on off-tree edges), the
        EP log Z estimate, the report, and in ``tree_mask`` (E,) the spanning tree used (pass
        one to override the mutual-information choice). The report carries the bound check
        (``bound``, ``bound_ok``: :meth:`~pymc_crf.inference.loopy.LoopyEngine.check_bound`).

        Parameters
        ----------
        %(tables)s
        tree_mask : ndarray (E,) bool, optional
            The spanning tree's edges; default: chosen by mutual information.

        Returns
        -------
        LoopyResult
            The beliefs, ``log_z``, the report and ``tree_mask``.

        Raises
        ------
        ValueError
            When ``tree_mask`` does not have shape (E,), or the tables do not fit the batch.
        """
        node, edge = check_potentials(batch, node_logpot, edge_logpot)
        N, K = node.shape
        E, G = batch.n_edges, batch.n_graphs
        if tree_mask is None:
            tree_mask = spanning_tree(batch, edge_mutual_information(batch, node, edge))
        else:
            tree_mask = np.asarray(tree_mask, dtype=np.bool_)
            if tree_mask.shape != (E,):
                raise ValueError(f"tree_mask must have shape ({E},); got {tree_mask.shape}")
        tab = np.zeros(E, np.int64) if edge.shape[0] == 1 else np.arange(E)
        tid = np.flatnonzero(tree_mask)
        tu = batch.edges[tid, 0].copy()
        tv = batch.edges[tid, 1].copy()
        Psi = edge[tab[tid]].copy()
        # tree adjacency (CSR)
        ends = np.concatenate([tu, tv])
        nbrs = np.concatenate([tv, tu])
        tes = np.concatenate([np.arange(len(tid)), np.arange(len(tid))])
        o = np.argsort(ends, kind="stable")
        degree = np.bincount(ends, minlength=N)
        adj_ptr = np.concatenate([[0], np.cumsum(degree)]).astype(np.int64)
        adj_nbr, adj_te = nbrs[o].astype(np.int64), tes[o].astype(np.int64)
        # messages entering each node in adjacency order (tree message 2t runs tu[t] -> tv[t]
        # and 2t + 1 back, as BP's messages on the tree)
        into = np.where(tu[adj_te] == ends[o], 2 * adj_te + 1, 2 * adj_te).astype(np.int64)
        parent, pte, depth, comp, bfs, pre = _forest(N, tu, tv, adj_ptr, adj_nbr, adj_te)
        if (comp[batch.edges[:, 0]] != comp[batch.edges[:, 1]]).any():
            raise ValueError("tree_mask is not a spanning forest of the batch (an edge joins two "
                             "of its components)")
        if len(tid) != N - len(np.unique(comp)):
            raise ValueError("tree_mask contains a cycle: it must be a spanning forest")
        off = np.flatnonzero(~tree_mask)
        # sort the off-tree edges by graph, then by the DFS preorder of u (short centre moves)
        off = off[np.lexsort((pre[batch.edges[off, 0]], batch.edge_graph[off]))]
        off_u = batch.edges[off, 0].copy()
        off_v = batch.edges[off, 1].copy()
        ptr_n, ptr_e, pn, pe = _paths(off_u, off_v, parent, pte, depth, N)
        goff_ptr = np.concatenate([[0], np.cumsum(np.bincount(batch.edge_graph[off],
                                                               minlength=G))]).astype(np.int64)
        iters, changes = np.zeros(G, np.int64), np.zeros(G)
        converged = np.zeros(G, np.bool_)
        log_s = np.zeros(len(off))
        off_marg = np.zeros((len(off), K, K))
        edge_tab = np.ascontiguousarray(edge[tab[off]])
        msg = _tree_ep_run(node, edge_tab, Psi, tu, tv, adj_ptr, adj_nbr, adj_te, into, parent, pte,
                           depth, comp, bfs, np.arange(len(off), dtype=np.int64), off_u, ptr_n,
                           ptr_e, pn, pe, goff_ptr, self.damping, self.tol, self.max_iter, iters,
                           changes, converged, log_s, off_marg)
        lbn, lbe = beliefs(node, Psi, msg, np.stack([tu, tv], axis=1), adj_ptr, into, False,
                           False)
        # log Z_q: the Bethe free energy of the tree q is exact (Qi 2005, eq. (3.2))
        logz_q = bethe_log_z(node, Psi, False, lbn, lbe, degree, batch.node_graph,
                             batch.edge_graph[tid], G)
        log_z = logz_q + np.bincount(batch.edge_graph[off], weights=log_s, minlength=G)
        log_edge = np.empty((E, K, K))
        log_edge[tid] = lbe
        with np.errstate(divide="ignore"):
            log_edge[off] = np.log(off_marg)
        result = LoopyResult(None, lbn, log_edge, log_z, self.report(iters, changes, converged),
                             tree_mask=tree_mask)
        return self.check_bound(batch, node, edge, result)
