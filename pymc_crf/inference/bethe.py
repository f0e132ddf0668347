"""The Bethe approximation at a message-passing fixed point: beliefs, free energy and its Hessian.

*Beliefs and free energy.* Given normalised log node beliefs ``b_i`` and pair beliefs ``b_e`` of a
pairwise model (node log-potentials ``node_i``, edge tables ``psi_e``), minus the Bethe free energy
is (Yedidia, Freeman & Weiss 2005; Parise & Welling 2006 sec. 2.1)

    -F = sum_i <node_i>_{b_i} + sum_e <psi_e>_{b_e} + sum_e H(b_e) - sum_i (d_i - 1) H(b_i),

exact on trees. Loopy BP evaluates it at its fixed point (the Bethe approximation of log Z, whose
gradient with respect to the log-potentials is the beliefs); TreeEP evaluates it on its spanning
tree, where it is the exact log partition function of the tree approximation. Both assemble it with
:func:`bethe_log_z`.

*Linear response.* The covariance of the node and edge indicators is the Hessian of log Z; linear
response approximates it by the Hessian of minus the Bethe free energy, i.e. by the derivative of
the BP beliefs with respect to the log-potentials (Parise & Welling 2006 eq. (9) and appendix A;
Welling & Parise 2006 eqs. (8)-(10); Welling & Teh 2004). It is exact on trees and symmetric at a
fixed point (a Hessian).

We propagate a tangent ``dm`` of the log messages through the fixed-point equations. For a message
``d: s -> t`` over edge ``e`` with cavity
``c(x_s) = node_s(x_s) + sum_{d' -> s, d' != rev(d)} m_d'``,

    m_d(x_t) = log sum_{x_s} exp(c(x_s) + psi_e(x_s, x_t)) - log normaliser,
    dm_d(x_t) = sum_{x_s} p_d(x_s | x_t) [dc(x_s) + dpsi_e(x_s, x_t)] - <same>_{exp m_d},

which is linear in ``dm``: ``dm = J dm + c(v)``. We solve ``(I - J) dm = c(v)`` over the whole
batch (block diagonal): by GMRES for one direction, by one sparse LU of ``I - J`` (assembled from
its ``sum_d (deg(src d) - 1) K^2`` nonzeros) for many, then differentiate the beliefs:
``db_i = b_i (dlog b_i - <dlog b_i>)`` and likewise for the pairwise beliefs. Subtracting the
message's own mean removes the constant directions that would make ``I - J`` singular on loops.

Messages use the directed-slot layout of :func:`pymc_crf.graphs.adjacency.message_layout`.
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp
from scipy.sparse.linalg import LinearOperator, gmres, splu

from pymc_crf.graphs.adjacency import message_layout
from pymc_crf.graphs.batch import GraphBatch
from pymc_crf.inference.base import LoopyResult, check_direction, check_potentials
from pymc_crf.kernel_cache import njit
from pymc_crf.validation import flag, positive_number, whole_number

__all__ = ["beliefs", "bethe_covariance_matrix", "bethe_covariance_products",
           "bethe_covariance_vector_product", "bethe_log_z", "cavity", "message_jacobian_radius",
           "normalise_log"]


# ---------------------------------------------------------------------------- beliefs, free energy
@njit(cache=True, inline="always")
def normalise_log(x, maxprod):
    """Normalise a log vector in place to log-sum-exp 0 (max 0 for max-product); an all -inf
    vector (a contradiction upstream) becomes uniform."""
    K = x.shape[0]
    m = -np.inf
    for k in range(K):
        if x[k] > m:
            m = x[k]
    if m == -np.inf:
        for k in range(K):
            x[k] = -np.log(K)
        return
    if not maxprod:
        acc = 0.0
        for k in range(K):
            acc += np.exp(x[k] - m)
        m += np.log(acc)
    for k in range(K):
        x[k] -= m


@njit(cache=True, inline="always")
def cavity(node, msg, s, r, in_ptr, in_idx, out):
    """out = node[s] + the messages into s except message r (r = -1: all of them), summed
    directly (no -inf - -inf)."""
    K = node.shape[1]
    for k in range(K):
        out[k] = node[s, k]
    for p in range(in_ptr[s], in_ptr[s + 1]):
        d2 = in_idx[p]
        if d2 != r:
            for k in range(K):
                out[k] += msg[d2, k]


@njit(cache=True)
def _log_belief_sums(node, edge, msg, edges, in_ptr, in_idx, shared):
    """Unnormalised log node beliefs (``node[i]`` plus every message into i) and log pair beliefs
    (``edge[e, a, b]`` plus the cavities of the edge's two ends at a and b).

    Message ``2e`` runs ``edges[e, 0] -> edges[e, 1]`` and ``2e + 1`` back; ``in_ptr``/``in_idx``
    list the messages entering each node (CSR). The sums are linear in ``(node, edge, msg)``, so
    of tangents they give the tangents of the sums (:func:`_belief_tangents`).
    """
    N, K = node.shape
    E = edges.shape[0]
    lbn = np.empty((N, K))
    lbe = np.empty((E, K, K))
    cu = np.empty(K)
    cv = np.empty(K)
    for i in range(N):
        cavity(node, msg, i, -1, in_ptr, in_idx, lbn[i])
    for e in range(E):
        # cavity of u without the message from v (message 2e+1 is v -> u) and vice versa
        cavity(node, msg, edges[e, 0], 2 * e + 1, in_ptr, in_idx, cu)
        cavity(node, msg, edges[e, 1], 2 * e, in_ptr, in_idx, cv)
        tab = 0 if shared else e
        for a in range(K):
            for b in range(K):
                lbe[e, a, b] = edge[tab, a, b] + cu[a] + cv[b]
    return lbn, lbe


@njit(cache=True)
def beliefs(node, edge, msg, edges, in_ptr, in_idx, shared, maxprod):
    """Normalised log node and edge beliefs from log messages (layout as
    :func:`_log_belief_sums`); an all -inf belief (a contradiction upstream) becomes uniform.
    BP passes its whole graph, TreeEP its tree.
    """
    lbn, lbe = _log_belief_sums(node, edge, msg, edges, in_ptr, in_idx, shared)
    for i in range(lbn.shape[0]):
        normalise_log(lbn[i], maxprod)
    for e in range(lbe.shape[0]):
        normalise_log(lbe[e].reshape(-1), maxprod)  # a view of the pair table
    return lbn, lbe


@njit(cache=True)
def bethe_log_z(node, edge, shared, lbn, lbe, degree, node_graph, edge_graph, n_graphs):
    """Minus the Bethe free energy per graph from normalised log beliefs ``lbn`` (N, K) and
    ``lbe`` (E, K, K) (module docstring; ``0 log 0 = 0``, ``0 * -inf = 0``). ``degree`` counts
    the edges of ``lbe`` at each node; ``edge`` holds one table per edge or one shared table."""
    N, K = lbn.shape
    neg_f = np.zeros(n_graphs)
    for i in range(N):
        g = node_graph[i]
        for k in range(K):
            lb = lbn[i, k]
            if lb > -np.inf:
                # <node_i> - (d_i - 1) H(b_i), with H(b) = -sum b log b
                neg_f[g] += np.exp(lb) * (node[i, k] + (degree[i] - 1) * lb)
    for e in range(lbe.shape[0]):
        g = edge_graph[e]
        tab = 0 if shared else e
        for a in range(K):
            for b in range(K):
                lb = lbe[e, a, b]
                if lb > -np.inf:
                    neg_f[g] += np.exp(lb) * (edge[tab, a, b] - lb)
    return neg_f


# ---------------------------------------------------------------------------- linear response


@njit(cache=True)
def _conditionals(node, edge, msg, src, edge_of, flip, in_ptr, in_idx, shared):
    """W[d, x_t, x_s] = p_d(x_s | x_t) at the fixed point, and q[d] = exp(m_d)."""
    D, K = msg.shape
    W = np.empty((D, K, K))
    q = np.exp(msg)
    cav = np.empty(K)
    for d in range(D):
        cavity(node, msg, src[d], d ^ 1, in_ptr, in_idx, cav)
        tab = 0 if shared else edge_of[d]
        for xt in range(K):
            m = -np.inf
            for xs in range(K):
                w = cav[xs] + (edge[tab, xt, xs] if flip[d] else edge[tab, xs, xt])
                W[d, xt, xs] = w
                if w > m:
                    m = w
            acc = 0.0
            for xs in range(K):
                if m == -np.inf:
                    W[d, xt, xs] = 1.0 / K
                else:
                    W[d, xt, xs] = np.exp(W[d, xt, xs] - m)
                acc += W[d, xt, xs]
            for xs in range(K):
                W[d, xt, xs] /= acc
    return W, q


@njit(cache=True)
def _tangent_step(dm, vn, ve, W, q, src, edge_of, flip, in_ptr, in_idx, shared, out):
    """out = J dm + c(v): one linearised message update for all messages of the batch."""
    D, K = dm.shape
    dc = np.empty(K)
    raw = np.empty(K)
    for d in range(D):
        # the tangent of the cavity: the same sum over the tangents of the messages
        cavity(vn, dm, src[d], d ^ 1, in_ptr, in_idx, dc)
        tab = 0 if shared else edge_of[d]
        mean = 0.0
        for xt in range(K):
            acc = 0.0
            for xs in range(K):
                dpsi = ve[tab, xt, xs] if flip[d] else ve[tab, xs, xt]
                acc += W[d, xt, xs] * (dc[xs] + dpsi)
            raw[xt] = acc
            mean += q[d, xt] * acc
        for xt in range(K):
            out[d, xt] = raw[xt] - mean


@njit(cache=True)
def _jacobian_entries(W, q, src, flip, in_ptr, in_idx):
    """COO entries of ``J`` in ``dm = J dm + c(v)`` (the linearised message update of
    :func:`_tangent_step` without its source term): message ``d: s -> t`` depends on each message
    ``d2`` into ``s`` other than ``rev(d)`` through
    ``dJ[d, x_t] / dm[d2, x_s] = W[d, x_t, x_s] - sum_{x_t'} q[d, x_t'] W[d, x_t', x_s]``."""
    D, K = q.shape
    nnz = 0
    for d in range(D):
        s = src[d]
        nnz += (in_ptr[s + 1] - in_ptr[s] - 1) * K * K
    rows = np.empty(nnz, np.int64)
    cols = np.empty(nnz, np.int64)
    vals = np.empty(nnz)
    centred = np.empty((K, K))
    i = 0
    for d in range(D):
        for xs in range(K):
            mean = 0.0
            for xt in range(K):
                mean += q[d, xt] * W[d, xt, xs]
            for xt in range(K):
                centred[xt, xs] = W[d, xt, xs] - mean
        s = src[d]
        for p in range(in_ptr[s], in_ptr[s + 1]):
            d2 = in_idx[p]
            if d2 == (d ^ 1):
                continue
            for xt in range(K):
                for xs in range(K):
                    rows[i] = d * K + xt
                    cols[i] = d2 * K + xs
                    vals[i] = centred[xt, xs]
                    i += 1
    return rows, cols, vals


@njit(cache=True, inline="always")
def _normalised_tangent(log_p, d):
    """In place: ``d``, the tangent of an unnormalised log vector whose normalised log is
    ``log_p``, becomes the tangent of the normalised probabilities ``p (d - <p, d>)``."""
    mean = 0.0
    for k in range(d.shape[0]):
        mean += np.exp(log_p[k]) * d[k]
    for k in range(d.shape[0]):
        d[k] = np.exp(log_p[k]) * (d[k] - mean)


@njit(cache=True)
def _belief_tangents(dm, vn, ve, lbn, lbe, edges, in_ptr, in_idx, shared):
    """Derivatives of the normalised node and edge beliefs (``lbn``, ``lbe``, log) given the
    message tangent ``dm`` and the potentials' tangents ``vn``, ``ve``: the belief sums of the
    tangents (the sums are linear) through the normalisation's derivative."""
    dbn, dbe = _log_belief_sums(vn, ve, dm, edges, in_ptr, in_idx, shared)
    for i in range(dbn.shape[0]):
        _normalised_tangent(lbn[i], dbn[i])
    for e in range(dbe.shape[0]):
        _normalised_tangent(lbe[e].ravel(), dbe[e].reshape(-1))  # read / a view to write
    return dbn, dbe


def message_jacobian_radius(batch: GraphBatch, node: np.ndarray, edge: np.ndarray,
                            messages: np.ndarray, graphs: np.ndarray, n_iter: int = 60,
                            seed: int = 0) -> np.ndarray:
    """Spectral radius of the undamped BP update's Jacobian ``J`` at ``messages``, per graph.

    A fixed point is locally stable under undamped parallel BP when the radius is below 1
    (Mooij & Kappen 2007); stable fixed points are minima of the Bethe free energy (Heskes 2003),
    so a radius above 1 marks a fixed point that BP should leave, e.g. the symmetric
    (paramagnetic) point that zero fields and uniform starting messages leave BP on. Power
    iteration of ``J`` (the linearised update of :func:`_tangent_step`, whose centring removes
    the normalisation directions) from a seeded random tangent, ``n_iter`` steps, the radius
    taken as the geometric mean growth over the last third; graphs outside ``graphs`` (bool
    (G,)) get NaN. ``messages`` (2E, K) are normalised to log-sum-exp 0 (as ``run`` returns
    them); the tables are checked ones.
    """
    st = message_layout(batch)
    G, K = batch.n_graphs, node.shape[1]
    rho = np.full(G, np.nan)
    if not graphs.any() or batch.n_edges == 0:
        return rho
    W, q = _conditionals(node, edge, messages, st.src, st.edge, st.flip, st.in_ptr, st.in_idx,
                         edge.shape[0] == 1)
    rows = graphs[st.graph]
    dm = np.random.default_rng(seed).standard_normal(messages.shape) * rows[:, None]
    out = np.empty_like(dm)
    vn, ve = np.zeros_like(node), np.zeros((1, K, K))

    def norms(x):
        return np.sqrt(np.bincount(st.graph, weights=(x * x).sum(1), minlength=G))

    growth = np.zeros((n_iter, G))
    nrm = norms(dm)
    for t in range(n_iter):
        dm /= np.where(nrm > 0, nrm, 1.0)[st.graph][:, None]
        _tangent_step(dm, vn, ve, W, q, st.src, st.edge, st.flip, st.in_ptr, st.in_idx, True,
                      out)
        dm, out = out, dm
        prev, nrm = nrm, norms(dm)
        with np.errstate(divide="ignore"):
            growth[t] = np.where(prev > 0, np.log(nrm), -np.inf)
        if not (nrm[graphs] > 0).any():  # J v = 0 on every graph (e.g. all tables constant)
            growth[t:] = -np.inf
            break
    tail = max(1, n_iter // 3)
    rho[graphs] = np.exp(growth[-tail:].mean(axis=0))[graphs]
    return rho


def _linearisation(batch: GraphBatch, node, edge, engine, state):
    """The fixed point (run when ``state`` is None), message layout and the conditionals that
    linearise the message updates around it."""
    if state is None:
        state = engine.run(batch, node, edge)
    st = message_layout(batch)
    shared = edge.shape[0] == 1
    W, q = _conditionals(node, edge, state.messages, st.src, st.edge, st.flip, st.in_ptr,
                         st.in_idx, shared)
    return state, st, shared, W, q


def bethe_covariance_vector_product(batch: GraphBatch, node_logpot, edge_logpot, v_node, v_edge,
                                    engine, state: LoopyResult | None = None,
                                    rtol: float = 1e-12, maxiter: int = 2000
                                    ) -> tuple[np.ndarray, np.ndarray]:
    """The Hessian of minus the Bethe free energy at ``engine``'s sum-product fixed point
    applied to ``(v_node, v_edge)``: the derivatives of the beliefs along that direction, shaped
    like the potentials (a shared table's summed over edges). ``state`` is a fixed point already
    computed for these potentials (skips ``engine.run``); ``rtol``, ``maxiter`` are the GMRES
    settings of the linearised message equations. The public entry point, with a default
    engine, is :func:`pymc_crf.inference.linear_response.linear_response_vector_product`.
    """
    node, edge = check_potentials(batch, node_logpot, edge_logpot)
    vn, ve = check_direction(node, edge, v_node, v_edge)
    maxiter = whole_number(maxiter, "maxiter")
    rtol = positive_number(rtol, "rtol")
    if rtol >= 1.0:  # GMRES would stop at its start: a response off by the whole direction
        raise ValueError(f"rtol must be below 1; got {rtol}")
    state, st, shared, W, q = _linearisation(batch, node, edge, engine, state)
    D, K = state.messages.shape
    dm = np.zeros((D, K))
    if D:
        zn, ze = np.zeros_like(vn), np.zeros_like(ve)
        c = np.empty((D, K))
        _tangent_step(dm, vn, ve, W, q, st.src, st.edge, st.flip, st.in_ptr, st.in_idx, shared, c)
        buf = np.empty((D, K))

        def matvec(x):
            _tangent_step(np.ascontiguousarray(x).reshape(D, K), zn, ze, W, q, st.src, st.edge,
                          st.flip, st.in_ptr, st.in_idx, shared, buf)
            return x - buf.ravel()

        op = LinearOperator((D * K, D * K), matvec=matvec, dtype=np.float64)
        if np.abs(c).max() > 0:
            sol, info = gmres(op, c.ravel(), rtol=rtol, atol=0.0, restart=min(D * K, 60),
                              maxiter=maxiter)
            if info != 0:
                raise RuntimeError(f"linear response: GMRES did not converge (info={info}); the "
                                   "BP fixed point is probably unstable")
            dm = sol.reshape(D, K)
    dbn, dbe = _belief_tangents(dm, vn, ve, state.log_node, state.log_edge, batch.edges,
                                st.in_ptr, st.in_idx, shared)
    if shared:
        dbe = dbe.sum(axis=0, keepdims=True)
    return dbn, dbe


def bethe_covariance_products(batch: GraphBatch, node_logpot, edge_logpot, directions,
                              engine, state: LoopyResult | None = None
                              ) -> list[tuple[np.ndarray, np.ndarray]]:
    """:func:`bethe_covariance_vector_product` for many directions at once, by ONE sparse LU of
    the linearised message equations ``(I - J) dm = c(v)`` instead of a GMRES per direction.

    ``directions`` is a sequence of ``(v_node, v_edge)`` pairs shaped like the potentials.
    ``I - J`` has ``2E K`` rows and ``sum_d (deg(src d) - 1) K^2`` off-diagonal nonzeros and is
    block diagonal over the batch's graphs, so its LU is cheap where GMRES per direction is slow
    (near-critical couplings, many weights). Returns the belief derivatives per direction (a
    shared table's summed over edges).

    Raises
    ------
    RuntimeError
        When ``I - J`` is singular: the BP fixed point is unstable, so linear response does not
        define a covariance there.
    """
    node, edge = check_potentials(batch, node_logpot, edge_logpot)
    state, st, shared, W, q = _linearisation(batch, node, edge, engine, state)
    D, K = state.messages.shape
    n = D * K
    checked = [check_direction(node, edge, vn, ve) for vn, ve in directions]
    sol = np.zeros((n, len(checked)))
    if D and checked:
        rows, cols, vals = _jacobian_entries(W, q, st.src, st.flip, st.in_ptr, st.in_idx)
        M = (sp.identity(n, format="csc")
             - sp.csc_matrix((vals, (rows, cols)), shape=(n, n)))
        buf = np.empty((D, K))
        rhs = np.empty((n, len(checked)))
        zero = np.zeros((D, K))
        for j, (vn, ve) in enumerate(checked):
            _tangent_step(zero, vn, ve, W, q, st.src, st.edge, st.flip, st.in_ptr, st.in_idx,
                          shared, buf)
            rhs[:, j] = buf.ravel()
        try:
            sol = splu(M).solve(rhs)
        except RuntimeError as err:  # SuperLU: "Factor is exactly singular"
            raise RuntimeError("linear response: the linearised BP message equations are "
                               "singular (the BP fixed point is unstable), so there is no "
                               "linear-response covariance at these potentials") from err
        if not np.all(np.isfinite(sol)):
            raise RuntimeError("linear response: the linearised BP message equations are "
                               "numerically singular (the BP fixed point is unstable)")
    out = []
    for j, (vn, ve) in enumerate(checked):
        dbn, dbe = _belief_tangents(np.ascontiguousarray(sol[:, j].reshape(D, K)), vn, ve,
                                    state.log_node, state.log_edge, batch.edges, st.in_ptr,
                                    st.in_idx, shared)
        if shared:
            dbe = dbe.sum(axis=0, keepdims=True) if batch.n_edges else np.zeros_like(edge)
        out.append((dbn, dbe))
    return out


def bethe_covariance_matrix(batch: GraphBatch, node_logpot, edge_logpot, engine, graph: int = 0,
                            symmetrise: bool = True) -> np.ndarray:
    """Dense linear-response covariance of graph ``graph``'s sufficient statistics at
    ``engine``'s fixed point, ordered as :meth:`Engine.feature_covariance`. All columns are solved
    in one batched system (the graph replicated once per column), so this is for small graphs.
    """
    node, edge = check_potentials(batch, node_logpot, edge_logpot)
    symmetrise = flag(symmetrise, "symmetrise")
    graph = whole_number(graph, "graph", minimum=0)
    if not graph < batch.n_graphs:
        raise ValueError(f"graph {graph} out of range 0..{batch.n_graphs - 1}")
    sub = batch.subset([graph])
    node = node[batch.node_index([graph])]
    shared = edge.shape[0] == 1
    if not shared:
        edge = edge[batch.edge_index([graph])]
    state = engine.run(sub, node, edge)
    dn, de = node.size, edge.size
    cols = dn + de
    # Replicate the graph once per column and reuse its fixed point for every copy.
    rep = sub.subset(np.zeros(cols, np.int64))
    eye = np.eye(cols)
    vn = eye[:, :dn].reshape(cols * node.shape[0], node.shape[1])
    rep_node = np.tile(node, (cols, 1))
    if shared:
        # A shared table cannot be varied per copy: use per-edge tables equal to it.
        E1 = sub.n_edges
        rep_edge = np.broadcast_to(edge, (cols * E1, *edge.shape[1:])).copy()
        ve = np.repeat(eye[:, dn:].reshape(cols, 1, *edge.shape[1:]), E1, axis=1).reshape(
            cols * E1, *edge.shape[1:])
    else:
        rep_edge = np.tile(edge, (cols, 1, 1))
        ve = eye[:, dn:].reshape(cols * edge.shape[0], *edge.shape[1:])
    rep_state = state._replace(messages=np.tile(state.messages, (cols, 1)),
                               log_node=np.tile(state.log_node, (cols, 1)),
                               log_edge=np.tile(state.log_edge, (cols, 1, 1)),
                               log_z=np.tile(state.log_z, cols))
    dbn, dbe = bethe_covariance_vector_product(rep, rep_node, rep_edge, vn, ve, engine,
                                               state=rep_state)
    dbn = dbn.reshape(cols, dn)
    if shared:
        dbe = dbe.reshape(cols, -1, de).sum(axis=1)
    else:
        dbe = dbe.reshape(cols, de)
    cov = np.concatenate([dbn, dbe], axis=1).T  # column j = response to direction j
    return 0.5 * (cov + cov.T) if symmetrise else cov
