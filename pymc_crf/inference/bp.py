"""Loopy belief propagation (sum- and max-product) over a flat graph batch, in log space.

Every undirected edge ``e = (u, v)`` carries two directed messages: ``d = 2e`` (``u -> v``) and
``d = 2e + 1`` (``v -> u``); the reverse of ``d`` is ``d ^ 1`` (the layout of
:func:`pymc_crf.graphs.adjacency.message_layout`, cached on the batch). Messages are log tables
``(2E, K)``, kept normalised to max 0 while iterating (cheapest) and returned normalised to
log-sum-exp 0 (sum-product) or max 0 (max-product). One numba pass updates all the messages of
the batch; graphs that have converged are frozen, so every graph gets its own iteration count and
convergence flag.

The Bethe approximation of log Z is minus the Bethe free energy at the fixed point
(:mod:`pymc_crf.inference.bethe`; Yedidia, Freeman & Weiss 2005; Parise & Welling 2006 sec. 2.1),
exact on trees, and at a fixed point its gradient with respect to the log-potentials is the
beliefs (the BP fixed points are the stationary points of F; envelope theorem).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
from numba import get_num_threads, prange

from pymc_crf.graphs.adjacency import MessageLayout, message_layout
from pymc_crf.graphs.batch import LOOPY, GraphBatch
from pymc_crf.inference.base import (
    ConvergenceWarning,
    LoopyResult,
    check_potentials,
    engine_doc,
    labelling_score,
)
from pymc_crf.inference.bethe import (
    beliefs,
    bethe_covariance_matrix,
    bethe_covariance_vector_product,
    bethe_log_z,
    cavity,
    message_jacobian_radius,
    normalise_log,
)
from pymc_crf.inference.kernels import record_sweep
from pymc_crf.inference.loopy import LoopyEngine, bound_slack, labelling_bound
from pymc_crf.kernel_cache import njit
from pymc_crf.validation import flag, whole_number

if TYPE_CHECKING:
    from numpy.typing import ArrayLike

__all__ = ["BPState", "BPStructure", "BeliefPropagation", "ConvergenceWarning", "bp_structure",
           "labelling_score"]

SCHEDULES = ("parallel", "sequential")
STABILITY = ("symmetric", "always", "never")

# Names importable from here for one release; the definitions are where the comments say.
BPState = LoopyResult  # inference/base.py: the run result of every iterative engine
BPStructure = MessageLayout  # graphs/adjacency.py
bp_structure = message_layout  # graphs/adjacency.py (cached on the batch)
# ConvergenceWarning and labelling_score: inference/base.py


# ---------------------------------------------------------------------------- numba kernels
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
        # Every term lies in [0, 1]; underflow costs at most K 2^-1074 per sum, so a sum of at
        # least 1e-300 is accurate to ~1e-20 relative. Smaller sums (all of them, when every
        # product underflows and smax is 0) go to the log domain.
        for xt in range(K):
            if not (out[xt] >= 1e-300 and out[xt] >= 1e-250 * smax):
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
        normalise_log(out, True)
    if damping > 0.0:
        # Damping in the log domain (geometric mixture of the old and new messages, as libDAI, Mooij 2010).
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
    # `<=`: both sums can underflow to 0 (a label whose cavity and table row are both ~745 below
    # the other's), which the exact log-domain route handles; so do sums below 1e-300, whose
    # subnormal terms are not accurate
    if s0 >= s1:
        if s1 <= 1e-250 * s0 or s1 < 1e-300:
            return -1.0
        o0, o1 = 0.0, np.log(s1 / s0)
    else:
        if s0 <= 1e-250 * s1 or s0 < 1e-300:
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
            cavity(node, msg, s, r, in_ptr, in_idx, cav)
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
            cavity(node, msg, src[d], d ^ 1, in_ptr, in_idx, cav)
            tab = 0 if shared else edge_of[d]
            c = _send(edge, P, tab, flip[d], cav, maxprod, damping, msg, d, a, out)
            for k in range(K):
                msg[d, k] = out[k]
            if not c <= step[g]:
                step[g] = c
        record_sweep(it, step, tol, active, iters, changes, converged)


# ---------------------------------------------------------------------------- engine
class BeliefPropagation(LoopyEngine):
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
        Emit a :class:`~pymc_crf.inference.base.ConvergenceWarning` when some graphs did not
        converge.
    threads : bool or None
        Run flooding sweeps in numba threads. Default False: on a busy machine (parallel tests,
        several MCMC chains) the threads' barrier waits make it slower; on idle cores it pays
        on large grids (docs/benchmarks.md, "Loopy BP threads"). ``None``: threads for batches with at
        least ``THREAD_MIN_MESSAGES`` directed messages.
    restarts : int
        Restarts of a sum-product run on the loopy graphs whose fixed point is suspect: Bethe
        log Z below the score of the labelling decoded from the beliefs (a lower bound on log
        Z), or an unstable fixed point. The first restart starts from the messages of that
        labelling, the others from random labellings; each graph keeps the converged fixed point
        of lowest Bethe free energy. 0 disables restarts (the checks still run and warn).
    stability : {"symmetric", "always", "never"}
        Where to estimate the stability of the fixed point (spectral radius of the undamped
        update's Jacobian, 60 power-iteration steps, roughly the cost of 60 sweeps): only on
        graphs whose messages are all uniform (default: the symmetric fixed point of zero fields,
        where BP from uniform messages never moves), on every loopy graph, or nowhere.
    seed : int
        Seed of the random restarts and of the power iteration (results are deterministic).

    Notes
    -----
    With zero node fields and symmetric tables, uniform messages are a fixed point for any
    coupling strength, and BP started from them stays there: on an 8x8 grid with edge table
    ``[[-1, 1], [1, -1]]`` it returned log Z 92.94 against the exact 112.87 and the score 112 of
    the best labelling. The global minimum of the Bethe free energy never lies below a labelling's
    score (a point mass has Bethe free energy minus its score), so an estimate below the bound is
    always a fixed point other than the Bethe minimum; the checks find it and the restarts look
    for a better one.
    """

    name = "bp"
    approximation = "the Bethe approximation"
    hint = "try more damping, a sequential schedule or another engine"
    THREAD_MIN_MESSAGES = 8192

    def __init__(self, damping: float = 0.5, schedule: str = "parallel", tol: float = 1e-10,
                 max_iter: int = 2000, warn: bool = True, threads: bool | None = False,
                 restarts: int = 3, stability: str = "symmetric", seed: int = 0):
        super().__init__(tol, max_iter, damping, warn)
        if schedule not in SCHEDULES:
            raise ValueError(f"schedule must be one of {SCHEDULES}; got {schedule!r}")
        self.schedule = schedule
        self.restarts = whole_number(restarts, "restarts", minimum=0)
        if stability not in STABILITY:
            raise ValueError(f"stability must be one of {STABILITY}; got {stability!r}")
        self.stability = stability
        self.seed = whole_number(seed, "seed", minimum=0)
        if threads is not None:  # read as every bool option is (0 and 1 too); None is BP's own
            try:
                threads = flag(threads, "threads")
            except ValueError:
                raise ValueError(f"threads must be True, False or None (by batch size); got "
                                 f"{threads!r}") from None
        self.threads = threads

    def _chunks(self, batch: GraphBatch) -> int:
        use = (self.threads if self.threads is not None
               else 2 * batch.n_edges >= self.THREAD_MIN_MESSAGES)
        return max(1, get_num_threads()) if use else 1

    def __repr__(self) -> str:
        return (f"BeliefPropagation(damping={self.damping}, schedule={self.schedule!r}, "
                f"tol={self.tol:g}, max_iter={self.max_iter})")

    def stopping(self) -> str:
        return (f"max_iter={self.max_iter} (tol={self.tol:g}, damping={self.damping}, "
                f"schedule={self.schedule!r})")

    def _start(self, batch: GraphBatch, K: int, messages) -> np.ndarray:
        """Initial messages: uniform, or a warm start checked and max-normalised."""
        if messages is None:
            return np.zeros((2 * batch.n_edges, K))
        msg = np.array(messages, dtype=np.float64)
        if msg.shape != (2 * batch.n_edges, K):
            raise ValueError(f"messages must have shape ({2 * batch.n_edges}, {K}); "
                             f"got {msg.shape}")
        if msg.size:
            top = msg.max(axis=1, keepdims=True)
            if not np.isfinite(top).all():
                raise ValueError("messages must have a finite maximum in every row")
            msg -= top
        return msg

    def _iterate(self, batch: GraphBatch, node: np.ndarray, edge: np.ndarray, P: np.ndarray,
                 msg: np.ndarray, max_product: bool, frozen: np.ndarray
                 ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Sweeps in place on ``msg`` for the graphs not ``frozen`` until each converges or
        ``max_iter``; then every message normalised (log-sum-exp 0, or max 0 for max-product).
        Returns the per-graph iterations, last changes and convergence flags."""
        st = message_layout(batch)
        G = batch.n_graphs
        iters = np.zeros(G, np.int64)
        changes = np.zeros(G)
        converged = frozen.copy()
        shared = edge.shape[0] == 1
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
        return iters, changes, converged

    def _fixed_point(self, batch: GraphBatch, node: np.ndarray, edge: np.ndarray,
                     msg: np.ndarray, max_product: bool
                     ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Beliefs and Bethe log Z (zeros for max-product) of normalised messages."""
        st = message_layout(batch)
        shared = edge.shape[0] == 1
        lbn, lbe = beliefs(node, edge, msg, batch.edges, st.in_ptr, st.in_idx, shared,
                           max_product)
        log_z = np.zeros(batch.n_graphs) if max_product else bethe_log_z(
            node, edge, shared, lbn, lbe, st.degree, batch.node_graph, batch.edge_graph,
            batch.n_graphs)
        return lbn, lbe, log_z

    @engine_doc
    def run(self, batch: GraphBatch, node_logpot: ArrayLike, edge_logpot: ArrayLike,
            max_product: bool = False, messages: np.ndarray | None = None) -> LoopyResult:
        """Run BP to convergence (or ``max_iter``) and return messages, beliefs and report.

        ``messages`` (2E, K) warm-starts the run (e.g. from a previous nearby parameter); the
        message layout is cached on the batch, so a warm-started call costs only its sweeps.
        ``log_z`` is minus the Bethe free energy (zeros for max-product).

        Sum-product runs then check their fixed point on each loopy graph (see the class
        docstring): the bound check against a good labelling's score and, where the fixed point
        is symmetric (every message uniform; ``stability="always"``: everywhere), the stability
        of the undamped update; a graph whose estimate is below the bound or whose fixed point
        is unstable is rerun from ``restarts`` other starting messages and keeps the converged
        fixed point of lowest Bethe free energy. The report holds, besides ``iterations``,
        ``max_change`` and ``converged`` (of the fixed point kept), ``bound`` and ``bound_ok``
        (:meth:`~pymc_crf.inference.loopy.LoopyEngine.check_bound`), ``radius`` (the Jacobian's
        spectral radius at the fixed point kept, where it was estimated; NaN elsewhere, also
        where a restart replaced the fixed point it was estimated at) and ``restarts``
        (restarts run).

        Parameters
        ----------
        %(tables)s
        max_product : bool, default False
            Max-product BP (the beliefs :meth:`decoding_run` decodes) instead of sum-product.
        messages : ndarray (2E, K), optional
            Starting messages (normalised log messages, e.g. a previous run's ``messages``).

        Returns
        -------
        LoopyResult
            ``messages``, the normalised log beliefs, ``log_z`` and the report.
        """
        node, edge = check_potentials(batch, node_logpot, edge_logpot)
        K = node.shape[1]
        G = batch.n_graphs
        msg = self._start(batch, K, messages)
        # Graphs without edges are trivially at their fixed point.
        no_edges = np.bincount(batch.edge_graph, minlength=G) == 0
        P = _scaled_tables(edge)
        iters, changes, converged = self._iterate(batch, node, edge, P, msg, max_product,
                                                  no_edges)
        lbn, lbe, log_z = self._fixed_point(batch, node, edge, msg, max_product)
        method = f"{'max' if max_product else 'sum'}-product BP"
        if max_product:
            return LoopyResult(msg, lbn, lbe, log_z,
                               self.report(iters, changes, converged, method))
        first = labelling_bound(batch, node, edge, lbn, unsettled=~converged, seed=self.seed)
        bound = first.score
        radius = np.full(G, np.nan)
        n_restarts = np.zeros(G, np.int64)
        loopy = (batch.kinds == LOOPY) & ~no_edges
        with np.errstate(invalid="ignore"):
            low = log_z < bound - bound_slack(bound)
        suspect = loopy & low
        if self.stability != "never":
            check = loopy & ~low
            if self.stability == "symmetric":
                check &= self._symmetric(batch, msg)
            if check.any():
                radius = message_jacobian_radius(batch, node, edge, msg, check, seed=self.seed)
                suspect |= check & (radius > 1.0 + 1e-4)
        if suspect.any() and self.restarts:
            n_restarts, moved = self._restart(batch, node, edge, P, msg, suspect, first.labels,
                                              bound, log_z, iters, changes, converged)
            radius[moved] = np.nan  # estimated at the fixed point left, not the one kept
            lbn, lbe, log_z = self._fixed_point(batch, node, edge, msg, False)
            bound = np.maximum(bound, labelling_bound(batch, node, edge, lbn, unsettled=~converged,
                                                      seed=self.seed).score)
        report = self.report(iters, changes, converged, method)
        report.update(radius=radius, restarts=n_restarts)
        note = (f", also after up to {int(n_restarts.max())} restarts from other messages "
                "keeping the lowest Bethe free energy") if n_restarts.any() else ""
        return self.with_bound(LoopyResult(msg, lbn, lbe, log_z, report), bound, method, note)

    @staticmethod
    def _symmetric(batch: GraphBatch, msg: np.ndarray) -> np.ndarray:
        """Per graph: every message uniform (the fixed point that zero fields and symmetric
        tables keep BP on from its uniform start, however strong the couplings)."""
        st = message_layout(batch)
        if msg.size == 0:
            return np.zeros(batch.n_graphs, np.bool_)
        spread = msg.max(axis=1) - msg.min(axis=1)
        uneven = ~(spread <= 1e-9)
        return np.bincount(st.graph, weights=uneven, minlength=batch.n_graphs) == 0

    def _clamped(self, batch: GraphBatch, edge: np.ndarray, labels: np.ndarray) -> np.ndarray:
        """Messages as if every node were clamped to ``labels``: ``m_{s->t}(x_t) =
        psi_e(labels_s, x_t)``, max-normalised (rows without a finite entry uniform)."""
        st = message_layout(batch)
        tab = np.zeros(st.src.size, np.int64) if edge.shape[0] == 1 else st.edge
        ls = labels[st.src]
        rows = np.where(st.flip[:, None], edge[tab, :, ls], edge[tab, ls, :])
        top = rows.max(axis=1, keepdims=True)
        return np.where(np.isfinite(top), rows - np.where(np.isfinite(top), top, 0.0), 0.0)

    def _restart(self, batch, node, edge, P, msg, suspect, labels, bound, log_z, iters, changes,
                 converged) -> tuple[np.ndarray, np.ndarray]:
        """Rerun the ``suspect`` graphs from other starts and keep, per graph, the converged
        fixed point of highest Bethe log Z (lowest free energy; Yedidia, Freeman & Weiss 2005,
        Heskes 2003); updates ``msg`` and the report arrays in place and returns the restarts
        run per graph and which graphs took a restart's fixed point.

        The first start clamps every node to the labelling of the bound check (messages
        ``psi_e(t_s, .)``: the basin of the ordered fixed points that a symmetric one hides).
        Graphs where that run converged to a fixed point not below ``bound`` stop there; the
        others get up to ``restarts - 1`` more starts clamped to uniformly random labellings
        with a random strength in [0, 1) (on a large grid a random start can take all
        ``max_iter`` sweeps, so they are run only where needed).
        """
        st = message_layout(batch)
        best = log_z.copy()
        rng = np.random.default_rng(self.seed)
        K = node.shape[1]
        todo = suspect.copy()
        runs = np.zeros(batch.n_graphs, np.int64)
        moved = np.zeros(batch.n_graphs, np.bool_)
        for r in range(self.restarts):
            if not todo.any():
                break
            if r == 0:
                start = self._clamped(batch, edge, labels)
            else:
                random_labels = rng.integers(0, K, batch.n_total_nodes)
                start = (self._clamped(batch, edge, random_labels)
                         * rng.uniform(0.0, 1.0, (st.src.size, 1)))
            rows = todo[st.graph]
            trial = msg.copy()
            trial[rows] = start[rows]
            it, ch, conv = self._iterate(batch, node, edge, P, trial, False, ~todo)
            lz = self._fixed_point(batch, node, edge, trial, False)[2]
            runs[todo] += 1
            take = todo & conv & (~converged | (lz > best + 1e-12))
            if take.any():
                msg[take[st.graph]] = trial[take[st.graph]]
                best[take] = lz[take]
                moved |= take
                iters[take], changes[take], converged[take] = it[take], ch[take], True
            if r == 0:
                with np.errstate(invalid="ignore"):
                    todo &= ~(conv & ~(lz < bound - bound_slack(bound)))
        return runs, moved

    # -------------------------------------------------------------- Engine interface
    def decoding_run(self, batch: GraphBatch, node: np.ndarray, edge: np.ndarray) -> LoopyResult:
        """Max-product BP: its max-beliefs decode to the MAP labelling on trees without ties.

        See :meth:`LoopyEngine.decoding_run` for the parameters.
        """
        return self.run(batch, node, edge, max_product=True)

    def covariance_vector_product(self, batch: GraphBatch, node_logpot: ArrayLike,
                                  edge_logpot: ArrayLike, v_node: ArrayLike,
                                  v_edge: ArrayLike) -> tuple[np.ndarray, np.ndarray]:
        """Linear-response covariance (derivative of the beliefs) applied to a direction.

        See :meth:`Engine.covariance_vector_product` for the parameters.
        """
        return bethe_covariance_vector_product(batch, node_logpot, edge_logpot, v_node, v_edge,
                                               self)

    def feature_covariance(self, batch: GraphBatch, node_logpot: ArrayLike, edge_logpot: ArrayLike,
                           graph: int = 0) -> np.ndarray:
        """Dense linear-response covariance of one graph's sufficient statistics.

        See :meth:`Engine.feature_covariance` for the parameters.
        """
        return bethe_covariance_matrix(batch, node_logpot, edge_logpot, self, graph=graph)
