"""Loopy belief propagation (sum- and max-product) over a flat graph batch, in log space.

Every undirected edge ``e = (u, v)`` carries two directed messages: ``d = 2e`` (``u -> v``) and
``d = 2e + 1`` (``v -> u``); the reverse of ``d`` is ``d ^ 1``. Messages are log tables ``(2E, K)``,
kept normalised to max 0 while iterating (cheapest) and returned normalised to log-sum-exp 0
(sum-product) or max 0 (max-product). One numba pass updates all the
messages of the batch; graphs that have converged are frozen, so every graph gets its own
iteration count and convergence flag.

The Bethe approximation of log Z is minus the Bethe free energy at the fixed point
(Yedidia, Freeman & Weiss 2005; seed 001 sec. 2.1):

    -F = sum_i <node_i>_{b_i} + sum_e <psi_e>_{b_e} + sum_e H(b_e) - sum_i (d_i - 1) H(b_i),

exact on trees, and at a fixed point its gradient with respect to the log-potentials is the
beliefs (the BP fixed points are the stationary points of F; envelope theorem).
"""

from __future__ import annotations

import warnings
from typing import NamedTuple

import numpy as np
from numba import get_num_threads, njit, prange

from pymc_crf.graphs.batch import GraphBatch
from pymc_crf.inference.base import Engine, MapResult, Marginals, check_potentials
from pymc_crf.inference.kernels import record_sweep

__all__ = ["BPState", "BPStructure", "BeliefPropagation", "ConvergenceWarning", "bp_structure"]

SCHEDULES = ("parallel", "sequential")


class ConvergenceWarning(UserWarning):
    """An iterative approximate inference engine stopped before reaching its tolerance."""


class BPStructure(NamedTuple):
    """Directed-message layout of a batch (cached on the batch).

    ``src``/``dst``/``edge`` per message, ``flip[d]`` true when ``src`` is ``edges[e, 1]`` (so the
    table is read transposed), ``in_ptr``/``in_idx`` the CSR list of messages entering each node,
    ``graph`` the graph of each message and ``degree`` the node degrees.
    """

    src: np.ndarray
    dst: np.ndarray
    edge: np.ndarray
    flip: np.ndarray
    in_ptr: np.ndarray
    in_idx: np.ndarray
    graph: np.ndarray
    degree: np.ndarray
    order: np.ndarray  # sequential schedule: forward messages in edge order, then reverse ones


def bp_structure(batch: GraphBatch) -> BPStructure:
    """The directed-message layout of ``batch`` (computed once and cached on the batch)."""
    cached = batch._cache.get("bp_structure")
    if cached is not None:
        return cached
    E = batch.n_edges
    d = np.arange(2 * E, dtype=np.int64)
    edge = d // 2
    flip = (d % 2).astype(np.bool_)
    src = np.where(flip, batch.edges[edge, 1], batch.edges[edge, 0]).astype(np.int64)
    dst = np.where(flip, batch.edges[edge, 0], batch.edges[edge, 1]).astype(np.int64)
    in_idx = np.argsort(dst, kind="stable").astype(np.int64)
    degree = np.bincount(dst, minlength=batch.n_total_nodes).astype(np.int64)
    in_ptr = np.concatenate([[0], np.cumsum(degree)]).astype(np.int64)
    # On chains (edges (i, i+1) in order) this is exactly forward-backward: one sweep is exact.
    order = np.concatenate([2 * np.arange(E), 2 * np.arange(E)[::-1] + 1]).astype(np.int64)
    out = BPStructure(src, dst, edge, flip, in_ptr, in_idx,
                      batch.edge_graph[edge].astype(np.int64), degree, order)
    batch._cache["bp_structure"] = out
    return out


# ---------------------------------------------------------------------------- numba kernels
@njit(cache=True, inline="always")
def _cavity(node, msg, s, r, in_ptr, in_idx, out):
    """out = node[s] + messages into s except message r (summed directly: no -inf - -inf)."""
    K = node.shape[1]
    for k in range(K):
        out[k] = node[s, k]
    for p in range(in_ptr[s], in_ptr[s + 1]):
        d2 = in_idx[p]
        if d2 != r:
            for k in range(K):
                out[k] += msg[d2, k]


@njit(cache=True, inline="always")
def _send(edge, P, tab, flip, cav, maxprod, damping, msg, d, a, out):
    """New log message (normalised to max 0) from the cavity ``cav`` of its source; returns the
    largest absolute change of its entries. The old message is ``msg[d]`` (passed as array and
    row rather than a view: creating views in the hot loop costs reference counting).

    Sum-product goes through the linear domain with scaling, ``exp(cav - max cav)`` times the
    precomputed ``P = exp(psi - max psi)``: both lie in [0, 1], so nothing overflows, and K
    exponentials replace K^2. If a sum comes out too small to be accurate (extreme potentials)
    the message is recomputed exactly in the log domain.
    """
    K = cav.shape[0]
    if K == 2 and not maxprod and cav[0] > -np.inf and cav[1] > -np.inf:
        r = _send_binary(P, tab, flip, cav[0], cav[1], damping, msg, d, out)
        if r >= 0.0:
            return r
    cmax = -np.inf
    imax = 0
    for k in range(K):
        if cav[k] > cmax:
            cmax = cav[k]
            imax = k
    exact_log = maxprod or cmax == -np.inf
    if not exact_log:
        # Messages are normalised to max 0 inside the loop (no exp/log for the argmax entry:
        # K-1 exponentials and K-1 logarithms per message); `run` renormalises at the end.
        for k in range(K):
            a[k] = 1.0 if k == imax else np.exp(cav[k] - cmax)
        smax = 0.0
        for xt in range(K):
            acc = 0.0
            for xs in range(K):
                acc += a[xs] * (P[tab, xt, xs] if flip else P[tab, xs, xt])
            out[xt] = acc
            if acc > smax:
                smax = acc
        for xt in range(K):
            if out[xt] < 1e-250 * smax:
                exact_log = True
        if not exact_log:
            for xt in range(K):
                out[xt] = 0.0 if out[xt] == smax else np.log(out[xt] / smax)
    if exact_log:
        for xt in range(K):
            m = -np.inf
            for xs in range(K):
                w = cav[xs] + (edge[tab, xt, xs] if flip else edge[tab, xs, xt])
                if w > m:
                    m = w
            if maxprod or m == -np.inf:
                out[xt] = m
            else:
                acc = 0.0
                for xs in range(K):
                    w = cav[xs] + (edge[tab, xt, xs] if flip else edge[tab, xs, xt])
                    acc += np.exp(w - m)
                out[xt] = m + np.log(acc)
        _normalise(out, True)
    if damping > 0.0:
        # Damping in the log domain (geometric mixture of the old and new messages, as libDAI).
        # The mixture is not renormalised: the fixed points are the same (there old = new is
        # normalised), every update normalises again, and it saves K exp and a log per message.
        for k in range(K):
            if out[k] != msg[d, k]:
                out[k] = (1.0 - damping) * out[k] + damping * msg[d, k]
    change = 0.0
    for k in range(K):
        if out[k] != msg[d, k]:
            c = abs(out[k] - msg[d, k])
            if not c <= change:  # also catches inf / nan
                change = c
    return change


@njit(cache=True, inline="always")
def _send_binary(P, tab, flip, c0, c1, damping, msg, d, out):
    """`_send` for two labels in scalars (the common Ising case); returns -1 when the scaled
    sums are too small to be accurate, so that the caller takes the exact log-domain route."""
    if c0 >= c1:
        a0, a1 = 1.0, np.exp(c1 - c0)
    else:
        a0, a1 = np.exp(c0 - c1), 1.0
    if flip:
        s0 = a0 * P[tab, 0, 0] + a1 * P[tab, 0, 1]
        s1 = a0 * P[tab, 1, 0] + a1 * P[tab, 1, 1]
    else:
        s0 = a0 * P[tab, 0, 0] + a1 * P[tab, 1, 0]
        s1 = a0 * P[tab, 0, 1] + a1 * P[tab, 1, 1]
    if s0 >= s1:
        if s1 < 1e-250 * s0:
            return -1.0
        o0, o1 = 0.0, np.log(s1 / s0)
    else:
        if s0 < 1e-250 * s1:
            return -1.0
        o0, o1 = np.log(s0 / s1), 0.0
    m0, m1 = msg[d, 0], msg[d, 1]
    if damping > 0.0:
        o0 = (1.0 - damping) * o0 + damping * m0
        o1 = (1.0 - damping) * o1 + damping * m1
    out[0] = o0
    out[1] = o1
    ch0 = abs(o0 - m0) if o0 != m0 else 0.0
    ch1 = abs(o1 - m1) if o1 != m1 else 0.0
    ch = ch0 if ch0 > ch1 else ch1
    return ch if ch == ch else np.inf  # nan (inf - inf) counts as not converged


def _scaled_tables(edge: np.ndarray) -> np.ndarray:
    """``exp(psi - max psi)`` per table, in [0, 1] (0 where psi = -inf)."""
    m = edge.max(axis=(1, 2), keepdims=True)
    m = np.where(np.isfinite(m), m, 0.0)
    return np.exp(edge - m)


@njit(cache=True, inline="always")
def _normalise(x, maxprod):
    K = x.shape[0]
    m = -np.inf
    for k in range(K):
        if x[k] > m:
            m = x[k]
    if m == -np.inf:  # contradiction upstream: fall back to a uniform message
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
def _node_sums(node, msg, in_ptr, in_idx, node_graph, active, S, lo, hi):
    """S[i] = node[i] + all messages into i, for nodes lo..hi-1 of active graphs."""
    K = node.shape[1]
    for i in range(lo, hi):
        if not active[node_graph[i]]:
            continue
        for k in range(K):
            S[i, k] = node[i, k]
        for p in range(in_ptr[i], in_ptr[i + 1]):
            d2 = in_idx[p]
            for k in range(K):
                S[i, k] += msg[d2, k]


@njit(cache=True, inline="always")
def _update_range(node, edge, P, msg, new, chg, S, src, edge_of, flip, in_ptr, in_idx, msg_graph,
                  active, shared, damping, maxprod, lo, hi):
    """New messages lo..hi-1 (of active graphs) from the previous sweep, into ``new``/``chg``."""
    K = node.shape[1]
    cav = np.empty(K)
    out = np.empty(K)
    a = np.empty(K)
    for d in range(lo, hi):
        if not active[msg_graph[d]]:
            continue
        s = src[d]
        r = d ^ 1
        ok = True
        for k in range(K):
            if msg[r, k] == -np.inf:
                ok = False
        if ok:  # the cavity is S[src] - msg[reverse] unless that would be -inf - -inf
            for k in range(K):
                cav[k] = S[s, k] - msg[r, k]
        else:
            _cavity(node, msg, s, r, in_ptr, in_idx, cav)
        tab = 0 if shared else edge_of[d]
        chg[d] = _send(edge, P, tab, flip[d], cav, maxprod, damping, msg, d, a, out)
        for k in range(K):
            new[d, k] = out[k]


def _make_flooding(threaded: bool):
    """Compile the flooding loop serially or with numba threads (two dispatchers of one source;
    the closure value ``threaded`` is part of numba's cache key, so the two never collide)."""

    @njit(cache=True, parallel=threaded)
    def run(node, edge, P, msg, src, edge_of, flip, in_ptr, in_idx, msg_graph, node_graph,
            n_graphs, shared, damping, tol, max_iter, maxprod, iters, changes, converged,
            n_chunks):
        """Flooding schedule: every message of every active graph from the previous sweep.

        Messages are independent within a sweep, so the nodes and messages are cut into
        ``n_chunks`` ranges (threads when compiled with ``parallel``); the result does not
        depend on the number of chunks.
        """
        if not threaded:
            n_chunks = 1
        N, K = node.shape
        D = msg.shape[0]
        new = msg.copy()
        S = np.empty((N, K))
        chg = np.zeros(D)
        active = ~converged
        for it in range(max_iter):
            if not active.any():
                break
            for c in prange(n_chunks):
                _node_sums(node, msg, in_ptr, in_idx, node_graph, active, S,
                           c * N // n_chunks, (c + 1) * N // n_chunks)
            for c in prange(n_chunks):
                _update_range(node, edge, P, msg, new, chg, S, src, edge_of, flip, in_ptr,
                              in_idx, msg_graph, active, shared, damping, maxprod,
                              c * D // n_chunks, (c + 1) * D // n_chunks)
            step = np.zeros(n_graphs)
            for d in range(D):
                g = msg_graph[d]
                if active[g]:
                    for k in range(K):
                        msg[d, k] = new[d, k]
                    if not chg[d] <= step[g]:
                        step[g] = chg[d]
            record_sweep(it, step, tol, active, iters, changes, converged)

    return run


_run_parallel = _make_flooding(False)
_run_parallel_threads = _make_flooding(True)


@njit(cache=True)
def _run_sequential(node, edge, P, msg, src, edge_of, flip, in_ptr, in_idx, msg_graph, order,
                    n_graphs, shared, damping, tol, max_iter, maxprod, iters, changes, converged):
    """Sequential schedule: messages updated in place in ``order`` (Gauss-Seidel)."""
    K = node.shape[1]
    cav = np.empty(K)
    out = np.empty(K)
    a = np.empty(K)
    active = ~converged
    for it in range(max_iter):
        if not active.any():
            break
        step = np.zeros(n_graphs)
        for j in range(order.shape[0]):
            d = order[j]
            g = msg_graph[d]
            if not active[g]:
                continue
            _cavity(node, msg, src[d], d ^ 1, in_ptr, in_idx, cav)
            tab = 0 if shared else edge_of[d]
            c = _send(edge, P, tab, flip[d], cav, maxprod, damping, msg, d, a, out)
            for k in range(K):
                msg[d, k] = out[k]
            if not c <= step[g]:
                step[g] = c
        record_sweep(it, step, tol, active, iters, changes, converged)


@njit(cache=True)
def _beliefs(node, edge, msg, edges, in_ptr, in_idx, node_graph, edge_graph, degree, n_graphs,
             shared, maxprod):
    """Normalised log node and edge beliefs, and minus the Bethe free energy per graph."""
    N, K = node.shape
    E = edges.shape[0]
    lbn = np.empty((N, K))
    lbe = np.empty((E, K, K))
    neg_f = np.zeros(n_graphs)
    cu = np.empty(K)
    cv = np.empty(K)
    for i in range(N):
        for k in range(K):
            lbn[i, k] = node[i, k]
        for p in range(in_ptr[i], in_ptr[i + 1]):
            d = in_idx[p]
            for k in range(K):
                lbn[i, k] += msg[d, k]
        _normalise(lbn[i], maxprod)
        if not maxprod:
            g = node_graph[i]
            for k in range(K):
                lb = lbn[i, k]
                if lb > -np.inf:
                    # <node_i> - (d_i - 1) H(b_i), with H(b) = -sum b log b
                    neg_f[g] += np.exp(lb) * (node[i, k] + (degree[i] - 1) * lb)
    for e in range(E):
        u = edges[e, 0]
        v = edges[e, 1]
        # cavity of u without the message from v (message 2e+1 is v -> u) and vice versa
        _cavity(node, msg, u, 2 * e + 1, in_ptr, in_idx, cu)
        _cavity(node, msg, v, 2 * e, in_ptr, in_idx, cv)
        tab = 0 if shared else e
        m = -np.inf
        for a in range(K):
            for b in range(K):
                w = edge[tab, a, b] + cu[a] + cv[b]
                lbe[e, a, b] = w
                if w > m:
                    m = w
        if m == -np.inf:
            for a in range(K):
                for b in range(K):
                    lbe[e, a, b] = -np.log(K * K)
        else:
            z = 0.0
            if not maxprod:
                for a in range(K):
                    for b in range(K):
                        z += np.exp(lbe[e, a, b] - m)
                z = np.log(z)
            for a in range(K):
                for b in range(K):
                    lbe[e, a, b] -= m + z
        if not maxprod:
            g = edge_graph[e]
            for a in range(K):
                for b in range(K):
                    lb = lbe[e, a, b]
                    if lb > -np.inf:
                        neg_f[g] += np.exp(lb) * (edge[tab, a, b] - lb)
    return lbn, lbe, neg_f


# ---------------------------------------------------------------------------- engine
class BPState(NamedTuple):
    """Everything a BP run leaves behind (used by linear response and warm starts).

    ``messages`` (2E, K) normalised log messages, ``log_node`` (N, K) and ``log_edge`` (E, K, K)
    normalised log beliefs, ``log_z`` (G,) minus the Bethe free energy, ``report`` per graph.
    """

    messages: np.ndarray
    log_node: np.ndarray
    log_edge: np.ndarray
    log_z: np.ndarray
    report: dict


class BeliefPropagation(Engine):
    """Loopy sum-product / max-product belief propagation (approximate on loopy graphs).

    Parameters
    ----------
    damping : float
        Weight of the old message in the log-domain mixture ``(1-a) new + a old``; 0 disables it.
    schedule : {"parallel", "sequential"}
        ``"parallel"`` (flooding: all messages from the previous sweep) or ``"sequential"``
        (in place, forward edges in order then reverse edges backwards; exact after one sweep on
        chains).
    tol : float
        A graph has converged when no log message changed by more than ``tol`` in a sweep.
    max_iter : int
        Cap on sweeps.
    warn : bool
        Emit a :class:`ConvergenceWarning` when some graphs did not converge.
    threads : bool or None
        Run flooding sweeps in numba threads. Default False: on a busy machine (parallel tests,
        several MCMC chains) the threads' barrier waits make it slower; on an idle 2-core
        machine it was ~3-4x faster on a 100x100 grid. ``None``: threads for batches with at
        least ``THREAD_MIN_MESSAGES`` directed messages.
    """

    name = "bp"
    THREAD_MIN_MESSAGES = 8192
    exact = False

    def __init__(self, damping: float = 0.5, schedule: str = "parallel", tol: float = 1e-10,
                 max_iter: int = 2000, warn: bool = True, threads: bool | None = False):
        if not 0.0 <= float(damping) < 1.0:
            raise ValueError(f"damping must lie in [0, 1); got {damping}")
        if schedule not in SCHEDULES:
            raise ValueError(f"schedule must be one of {SCHEDULES}; got {schedule!r}")
        if not float(tol) > 0.0:
            raise ValueError(f"tol must be positive; got {tol}")
        if int(max_iter) < 1:
            raise ValueError(f"max_iter must be >= 1; got {max_iter}")
        self.damping = float(damping)
        self.schedule = schedule
        self.tol = float(tol)
        self.max_iter = int(max_iter)
        self.warn = warn
        self.threads = threads

    def _chunks(self, batch: GraphBatch) -> int:
        use = (self.threads if self.threads is not None
               else 2 * batch.n_edges >= self.THREAD_MIN_MESSAGES)
        return max(1, get_num_threads()) if use else 1

    def __repr__(self) -> str:
        return (f"BeliefPropagation(damping={self.damping}, schedule={self.schedule!r}, "
                f"tol={self.tol:g}, max_iter={self.max_iter})")

    def run(self, batch: GraphBatch, node_logpot, edge_logpot, max_product: bool = False,
            messages: np.ndarray | None = None) -> BPState:
        """Run BP to convergence (or ``max_iter``) and return messages, beliefs and report.

        ``messages`` (2E, K) warm-starts the run (e.g. from a previous nearby parameter).
        """
        node, edge = check_potentials(batch, node_logpot, edge_logpot)
        st = bp_structure(batch)
        K = node.shape[1]
        G = batch.n_graphs
        if messages is None:
            msg = np.zeros((2 * batch.n_edges, K))
        else:
            msg = np.array(messages, dtype=np.float64)
            if msg.shape != (2 * batch.n_edges, K):
                raise ValueError(f"messages must have shape ({2 * batch.n_edges}, {K}); "
                                 f"got {msg.shape}")
            if msg.size and not np.isfinite(msg.max(axis=1)).all():
                raise ValueError("messages must have a finite maximum in every row")
            if msg.size:
                msg -= msg.max(axis=1, keepdims=True)
        iters = np.zeros(G, np.int64)
        changes = np.zeros(G)
        converged = np.zeros(G, np.bool_)
        # Graphs without edges are trivially at their fixed point.
        converged[np.bincount(batch.edge_graph, minlength=G) == 0] = True
        shared = edge.shape[0] == 1
        P = _scaled_tables(edge)
        if self.schedule == "parallel":
            chunks = self._chunks(batch)
            (_run_parallel_threads if chunks > 1 else _run_parallel)(
                node, edge, P, msg, st.src, st.edge, st.flip, st.in_ptr, st.in_idx,
                          st.graph, batch.node_graph, G, shared, self.damping, self.tol,
                          self.max_iter, max_product, iters, changes, converged, chunks)
        else:
            _run_sequential(node, edge, P, msg, st.src, st.edge, st.flip, st.in_ptr, st.in_idx,
                            st.graph, st.order, G, shared, self.damping, self.tol,
                            self.max_iter, max_product, iters, changes, converged)
        if msg.size:
            # messages are max-normalised inside the loop (see _send): normalise them once here
            m = msg.max(axis=1, keepdims=True)
            m = np.where(np.isfinite(m), m, 0.0)
            if not max_product:
                with np.errstate(divide="ignore"):
                    m = m + np.log(np.exp(msg - m).sum(axis=1, keepdims=True))
            msg -= m
        lbn, lbe, neg_f = _beliefs(node, edge, msg, batch.edges, st.in_ptr, st.in_idx,
                                   batch.node_graph, batch.edge_graph, st.degree, G, shared,
                                   max_product)
        report = {"iterations": iters, "max_change": changes, "converged": converged}
        if self.warn and not converged.all():
            bad = int((~converged).sum())
            warnings.warn(
                f"{'max' if max_product else 'sum'}-product BP did not converge on {bad} of {G} "
                f"graphs within max_iter={self.max_iter} (tol={self.tol:g}, damping="
                f"{self.damping}, schedule={self.schedule!r}); largest final message change "
                f"{changes[~converged].max():.3g}. Results for those graphs are unreliable: "
                "try more damping, a sequential schedule or another engine.",
                ConvergenceWarning, stacklevel=3)
        return BPState(msg, lbn, lbe, neg_f, report)

    # -------------------------------------------------------------- Engine interface
    def log_partition(self, batch, node_logpot, edge_logpot):
        """Bethe approximation of log Z (minus the Bethe free energy at the fixed point)."""
        return self.run(batch, node_logpot, edge_logpot).log_z

    def marginals(self, batch, node_logpot, edge_logpot):
        """Bethe log Z, BP node and pairwise beliefs, and the per-graph convergence report."""
        state = self.run(batch, node_logpot, edge_logpot)
        edge = np.exp(state.log_edge)
        if np.shape(edge_logpot)[0] == 1 and batch.n_edges != 1:
            edge = edge.sum(axis=0, keepdims=True)
        elif batch.n_edges == 0:
            edge = np.zeros_like(np.asarray(edge_logpot, dtype=np.float64))
        return Marginals(state.log_z, np.exp(state.log_node), edge, state.report)

    def map_assignment(self, batch, node_logpot, edge_logpot):
        """Max-product BP, decoded by the argmax of the node max-beliefs (exact on trees without
        ties); the score is the exact unnormalised log score of the decoded labelling."""
        node, edge = check_potentials(batch, node_logpot, edge_logpot)
        state = self.run(batch, node, edge, max_product=True)
        labels = np.argmax(state.log_node, axis=1).astype(np.int64)
        return MapResult(labels, labelling_score(batch, node, edge, labels))

    def sample(self, batch, node_logpot, edge_logpot, n_samples, rng=None):
        """Samples from the model itself (not from the beliefs), delegated to the Gibbs engine."""
        from pymc_crf.inference.gibbs import Gibbs

        return Gibbs().sample(batch, node_logpot, edge_logpot, n_samples, rng)

    def covariance_vector_product(self, batch, node_logpot, edge_logpot, v_node, v_edge):
        """Linear-response covariance (derivative of the beliefs) applied to a direction."""
        from pymc_crf.inference.linear_response import linear_response_vector_product

        return linear_response_vector_product(batch, node_logpot, edge_logpot, v_node, v_edge,
                                              bp=self)

    def feature_covariance(self, batch, node_logpot, edge_logpot, graph=0):
        """Dense linear-response covariance of one graph's sufficient statistics."""
        from pymc_crf.inference.linear_response import linear_response_matrix

        return linear_response_matrix(batch, node_logpot, edge_logpot, graph=graph, bp=self)


def labelling_score(batch: GraphBatch, node: np.ndarray, edge: np.ndarray,
                    labels: np.ndarray) -> np.ndarray:
    """Unnormalised log score of a labelling, per graph."""
    s = np.bincount(batch.node_graph, weights=node[np.arange(node.shape[0]), labels],
                    minlength=batch.n_graphs)
    if batch.n_edges:
        tab = np.zeros(batch.n_edges, np.int64) if edge.shape[0] == 1 else np.arange(batch.n_edges)
        ew = edge[tab, labels[batch.edges[:, 0]], labels[batch.edges[:, 1]]]
        s = s + np.bincount(batch.edge_graph, weights=ew, minlength=batch.n_graphs)
    return s
