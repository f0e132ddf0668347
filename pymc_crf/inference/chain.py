"""Exact inference on chains: forward-backward, Viterbi, forward-filtering backward-sampling.

Every graph of the batch must be a canonical chain (``GraphBatch.chains``): node ``t`` of graph
``g`` is ``node_offsets[g] + t`` and edge ``(t-1, t)`` is ``edge_offsets[g] + t - 1``.

The hot kernel (log Z and marginals) is forward-backward with per-step scaling (Rabiner 1989): each
node row and edge table is exponentiated once after subtracting its maximum, and the forward
messages are renormalised at every step, so no exp of an unbounded score is taken and the result
equals the log-space recursion to rounding. If a scale ever underflows (log-potential ranges of
hundreds, or forbidden transitions that leave no path), that graph is recomputed in log space,
which never underflows.

The kernels run serially over graphs (no ``prange``): they are called from compiled PyTensor
functions, which may run in forked PyMC workers (GNU OpenMP is not fork-safe) or in nutpie's
sampler threads (numba's workqueue layer is not thread-safe).
"""

from __future__ import annotations

import numpy as np
from numba import njit

from pymc_crf.graphs.batch import GraphBatch
from pymc_crf.inference.base import Engine, MapResult, Marginals, as_generator, check_potentials
from pymc_crf.inference.kernels import logsumexp_1d

__all__ = ["ChainEngine"]

_TINY = 1e-290
_NO_WEIGHTS = np.zeros(0)


@njit(cache=True, inline="always")
def _eidx(e, shared):
    return 0 if shared else e


@njit(cache=True)
def _fb_log_one(node, edge, shared, lo, elo, n, log_z, node_m, edge_m, want_marginals, w):
    """Log-space forward-backward for one chain (fallback path); writes into the outputs."""
    K = node.shape[1]
    la = np.empty((n, K))
    lb = np.zeros((n, K))
    tmp = np.empty(K)
    for j in range(K):
        la[0, j] = node[lo, j]
    for t in range(1, n):
        e = _eidx(elo + t - 1, shared)
        for j in range(K):
            for i in range(K):
                tmp[i] = la[t - 1, i] + edge[e, i, j]
            la[t, j] = node[lo + t, j] + logsumexp_1d(tmp)
    for t in range(n - 2, -1, -1):
        e = _eidx(elo + t, shared)
        for i in range(K):
            for j in range(K):
                tmp[j] = edge[e, i, j] + node[lo + t + 1, j] + lb[t + 1, j]
            lb[t, i] = logsumexp_1d(tmp)
    lz = logsumexp_1d(la[n - 1])
    log_z[0] = lz
    if not want_marginals:
        return
    for t in range(n):
        for j in range(K):
            node_m[lo + t, j] = w * np.exp(la[t, j] + lb[t, j] - lz) if lz > -np.inf else np.nan
    for t in range(1, n):
        e = elo + t - 1
        et = _eidx(e, shared)
        for i in range(K):
            for j in range(K):
                v = w * np.exp(la[t - 1, i] + edge[et, i, j] + node[lo + t, j] + lb[t, j] - lz)
                if shared:
                    edge_m[0, i, j] += v
                else:
                    edge_m[e, i, j] = v


# exp of non-positive arguments, vectorisable (numba has no SVML here, and libm's scalar exp is
# ~4x slower): Cody-Waite reduction x = n ln2 + r, |r| <= ln2/2, a degree-13 Taylor polynomial
# (truncation < 2e-17 relative) and 2^n assembled from the bits of the rounded n; measured
# relative error <= 2.3e-16. Arguments below -708 (including -inf) give 0: the entries are
# relative to the row maximum (= 1), so a flushed subnormal changes any sum by < 1e-307.
_LOG2E = 1.4426950408889634
_LN2_HI = 6.93147180369123816490e-01
_LN2_LO = 1.90821492927058770002e-10
_SHIFTER = 6755399441055744.0  # 1.5 * 2**52: adding it rounds to an integer held in the low bits
_SHIFTER_BITS = int(np.array([_SHIFTER]).view(np.int64)[0]) - 1023
_EXP_FLOOR = -708.0


@njit(cache=True, fastmath={"contract"})
def _exp_nonpos(x, out, kbuf, m):
    """``out[:m] = exp(x[:m])`` for x <= 0 or -inf (no reassociation: it would fold the shifter)."""
    for k in range(m):
        v = x[k]
        v = v if v > _EXP_FLOOR else _EXP_FLOOR
        kf = v * _LOG2E + _SHIFTER
        n = kf - _SHIFTER
        r = (v - n * _LN2_HI) - n * _LN2_LO
        p = 1.0 / 6227020800.0
        p = p * r + 1.0 / 479001600.0
        p = p * r + 1.0 / 39916800.0
        p = p * r + 1.0 / 3628800.0
        p = p * r + 1.0 / 362880.0
        p = p * r + 1.0 / 40320.0
        p = p * r + 1.0 / 5040.0
        p = p * r + 1.0 / 720.0
        p = p * r + 1.0 / 120.0
        p = p * r + 1.0 / 24.0
        p = p * r + 1.0 / 6.0
        p = p * r + 0.5
        p = p * r + 1.0
        p = p * r + 1.0
        out[k] = p if x[k] > _EXP_FLOOR else 0.0
        kbuf[k] = kf
    bits = kbuf.view(np.int64)
    for k in range(m):
        bits[k] = (bits[k] - _SHIFTER_BITS) << 52  # the double 2^n
    for k in range(m):
        out[k] *= kbuf[k]


@njit(cache=True)
def _edge_tables(edge):
    """exp of each edge table shifted by its maximum (so every entry is in [0, 1])."""
    n_tab, K = edge.shape[0], edge.shape[1]
    psi = np.empty((n_tab, K, K))
    shift = np.empty(n_tab)
    x = np.empty(K * K)
    kb = np.empty(K * K)
    out = np.empty(K * K)
    for e in range(n_tab):
        m = -np.inf
        for i in range(K):
            for j in range(K):
                m = max(m, edge[e, i, j])
        if m == -np.inf:
            m = 0.0
        shift[e] = m
        for i in range(K):
            for j in range(K):
                x[i * K + j] = edge[e, i, j] - m
        _exp_nonpos(x, out, kb, K * K)
        for i in range(K):
            for j in range(K):
                psi[e, i, j] = out[i * K + j]
    return psi, shift


# Flags that keep IEEE inf/nan semantics (-inf log-potentials are legitimate): reassociation lets
# the K-loops vectorise, contraction gives FMAs, arcp turns x / s into x * (1 / s).
_FAST = {"reassoc", "contract", "arcp", "nsz"}


@njit(cache=True, fastmath=_FAST)
def _forward_one(node, lo, n, elo, psi, shift, shared, phi, alpha, inv, xb, kb):
    """Scaled forward pass of one chain (Rabiner 1989, eqs. (91)-(92)).

    Fills ``phi`` (n*K, exp of each node row minus its maximum), ``alpha`` (n*K, normalised
    forward messages) and ``inv`` (n, reciprocal scales). Returns log Z, or NaN when a row or a
    scale underflows (the caller then recomputes the graph in log space).
    """
    K = node.shape[1]
    m = n * K
    acc = 0.0
    for t in range(n):
        c = -np.inf
        for j in range(K):
            c = max(c, node[lo + t, j])
        if c == -np.inf:
            return np.nan
        acc += c
        for j in range(K):
            xb[t * K + j] = node[lo + t, j] - c
    _exp_nonpos(xb, phi, kb, m)
    # log Z = sum of row maxima + edge shifts + log of the product of the scales; the product is
    # flushed into the log only when it leaves [1e-200, 1e200], so about one log per chain.
    prod = 1.0
    for t in range(n):
        s = 0.0
        if t == 0:
            for j in range(K):
                alpha[j] = phi[j]
                s += phi[j]
        else:
            e = 0 if shared else elo + t - 1
            acc += shift[e]
            b0 = t * K
            for j in range(K):
                alpha[b0 + j] = 0.0
            for i in range(K):
                a = alpha[b0 - K + i]
                for j in range(K):
                    alpha[b0 + j] += a * psi[e, i, j]
            for j in range(K):
                v = alpha[b0 + j] * phi[b0 + j]
                alpha[b0 + j] = v
                s += v
        if not (s > _TINY):
            return np.nan
        r = 1.0 / s
        inv[t] = r
        for j in range(K):
            alpha[t * K + j] *= r
        if s < 1e-100:
            acc += np.log(s)
        else:
            prod *= s
            if prod < 1e-200 or prod > 1e200:
                acc += np.log(prod)
                prod = 1.0
    return acc + np.log(prod)


@njit(cache=True, fastmath=_FAST)
def _backward_one(lo, n, elo, psi, shared, wg, phi, alpha, inv, beta, bp, macc, node_m, edge_m):
    """Scaled backward pass of one chain: node marginals alpha*beta and edge marginals
    alpha_{t-1}(i) psi(i,j) phi_t(j) beta_t(j) / s_t, all times ``wg``. With a shared table the
    products alpha_{t-1}(i) (phi beta / s)_t(j) are summed into ``macc`` and multiplied by psi once
    at the end (psi does not depend on t)."""
    K = psi.shape[1]
    for j in range(K):
        beta[j] = 1.0
        node_m[lo + n - 1, j] = wg * alpha[(n - 1) * K + j]
    for t in range(n - 1, 0, -1):
        e = elo + t - 1
        et = 0 if shared else e
        r = inv[t]
        for j in range(K):
            bp[j] = phi[t * K + j] * beta[j] * r
        for i in range(K):
            b = 0.0
            for j in range(K):
                b += psi[et, i, j] * bp[j]
            beta[i] = b
        a0 = (t - 1) * K
        if shared:
            for i in range(K):
                a = alpha[a0 + i] * wg
                for j in range(K):
                    macc[i, j] += a * bp[j]
        else:
            for i in range(K):
                a = alpha[a0 + i] * wg
                for j in range(K):
                    edge_m[e, i, j] = a * psi[et, i, j] * bp[j]
        for i in range(K):
            node_m[lo + t - 1, i] = wg * alpha[a0 + i] * beta[i]


@njit(cache=True)
def _forward_backward(node, edge, node_off, edge_off, want_marginals, gw):
    """Scaled forward-backward over the batch. Returns log Z (G,), node (N,K), edge marginals.

    With a non-empty ``gw`` (G,), the marginals of graph g are multiplied by ``gw[g]``: this is the
    vector-Jacobian product of log Z, which a shared edge table needs inside the sum over edges.
    """
    G = node_off.shape[0] - 1
    N, K = node.shape
    shared = edge.shape[0] == 1
    log_z = np.empty(G)
    node_m = np.zeros((N, K)) if want_marginals else np.zeros((0, K))
    n_edge_out = (1 if shared else edge.shape[0]) if want_marginals else 0
    edge_m = np.zeros((n_edge_out, K, K))
    psi, shift = _edge_tables(edge)
    L = 1
    for g in range(G):
        L = max(L, node_off[g + 1] - node_off[g])
    phi = np.empty(L * K)
    alpha = np.empty(L * K)
    xb = np.empty(L * K)
    kb = np.empty(L * K)
    inv = np.empty(L)
    beta = np.empty(K)
    bp = np.empty(K)
    macc = np.zeros((K, K))
    lz1 = np.empty(1)
    for g in range(G):
        lo = node_off[g]
        n = node_off[g + 1] - lo
        elo = edge_off[g]
        wg = gw[g] if gw.shape[0] > 0 else 1.0
        lz = _forward_one(node, lo, n, elo, psi, shift, shared, phi, alpha, inv, xb, kb)
        if np.isnan(lz):
            _fb_log_one(node, edge, shared, lo, elo, n, lz1, node_m, edge_m, want_marginals, wg)
            log_z[g] = lz1[0]
            continue
        log_z[g] = lz
        if want_marginals:
            _backward_one(lo, n, elo, psi, shared, wg, phi, alpha, inv, beta, bp, macc, node_m,
                          edge_m)
    if shared and want_marginals:
        for i in range(K):
            for j in range(K):
                edge_m[0, i, j] += psi[0, i, j] * macc[i, j]
    return log_z, node_m, edge_m


@njit(cache=True)
def _viterbi(node, edge, node_off, edge_off):
    G = node_off.shape[0] - 1
    N, K = node.shape
    shared = edge.shape[0] == 1
    labels = np.empty(N, np.int64)
    score = np.empty(G)
    delta = np.empty((N, K))
    back = np.zeros((N, K), np.int64)
    for g in range(G):
        lo = node_off[g]
        n = node_off[g + 1] - lo
        elo = edge_off[g]
        for j in range(K):
            delta[lo, j] = node[lo, j]
        for t in range(1, n):
            e = _eidx(elo + t - 1, shared)
            for j in range(K):
                best = -np.inf
                arg = 0
                for i in range(K):
                    v = delta[lo + t - 1, i] + edge[e, i, j]
                    if v > best:
                        best = v
                        arg = i
                delta[lo + t, j] = best + node[lo + t, j]
                back[lo + t, j] = arg
        best = -np.inf
        arg = 0
        for j in range(K):
            if delta[lo + n - 1, j] > best:
                best = delta[lo + n - 1, j]
                arg = j
        score[g] = best
        labels[lo + n - 1] = arg
        for t in range(n - 1, 0, -1):
            arg = back[lo + t, arg]
            labels[lo + t - 1] = arg
    return labels, score


@njit(cache=True)
def _log_forward(node, edge, node_off, edge_off):
    """Log-space forward messages (N, K) for sampling (robust to any table range)."""
    N, K = node.shape
    shared = edge.shape[0] == 1
    la = np.empty((N, K))
    tmp = np.empty(K)
    for g in range(node_off.shape[0] - 1):
        lo = node_off[g]
        n = node_off[g + 1] - lo
        elo = edge_off[g]
        for j in range(K):
            la[lo, j] = node[lo, j]
        for t in range(1, n):
            e = _eidx(elo + t - 1, shared)
            for j in range(K):
                for i in range(K):
                    tmp[i] = la[lo + t - 1, i] + edge[e, i, j]
                la[lo + t, j] = node[lo + t, j] + logsumexp_1d(tmp)
    return la


@njit(cache=True)
def _draw(logw, u):
    """Index drawn from unnormalised log-weights with one uniform number."""
    K = logw.shape[0]
    m = logw.max()
    total = 0.0
    for k in range(K):
        total += np.exp(logw[k] - m)
    target = u * total
    c = 0.0
    for k in range(K):
        c += np.exp(logw[k] - m)
        if target < c:
            return k
    for k in range(K - 1, -1, -1):  # u*total rounding past the end: last positive weight
        if logw[k] > -np.inf:
            return k
    return K - 1


@njit(cache=True)
def _ffbs(la, edge, node_off, edge_off, uniforms):
    """Forward-filtering backward-sampling: exact joint draws, one uniform per node per sample."""
    S, N = uniforms.shape
    K = la.shape[1]
    shared = edge.shape[0] == 1
    out = np.empty((S, N), np.int64)
    w = np.empty(K)
    for s in range(S):
        for g in range(node_off.shape[0] - 1):
            lo = node_off[g]
            n = node_off[g + 1] - lo
            elo = edge_off[g]
            cur = _draw(la[lo + n - 1], uniforms[s, lo + n - 1])
            out[s, lo + n - 1] = cur
            for t in range(n - 1, 0, -1):
                e = _eidx(elo + t - 1, shared)
                for i in range(K):
                    w[i] = la[lo + t - 1, i] + edge[e, i, cur]
                cur = _draw(w, uniforms[s, lo + t - 1])
                out[s, lo + t - 1] = cur
    return out


@njit(cache=True)
def _tangent_fb(node, edge, node_off, edge_off, vn, ve):
    """Directional derivative of the marginals along (vn, ve): exact Hessian-vector product of
    log Z.

    Forward-mode differentiation of the log-space recursions: with A_t = log alpha_t and
    B_t = log beta_t, dA_t(j) = vn_t(j) + sum_i w_ij (dA_{t-1}(i) + ve(i,j)) where w_ij is the
    backward-looking posterior p(t_{t-1}=i | t_t=j, past); likewise for dB. Then
    dmu_t = mu_t (dA_t + dB_t - dlogZ) and dxi = xi (dA + ve + vn + dB - dlogZ).
    """
    N, K = node.shape
    shared = edge.shape[0] == 1
    out_n = np.zeros((N, K))
    out_e = np.zeros((1 if shared else edge.shape[0], K, K))
    tmp = np.empty(K)
    for g in range(node_off.shape[0] - 1):
        lo = node_off[g]
        n = node_off[g + 1] - lo
        elo = edge_off[g]
        la = np.empty((n, K))
        lb = np.zeros((n, K))
        da = np.zeros((n, K))
        db = np.zeros((n, K))
        for j in range(K):
            la[0, j] = node[lo, j]
            da[0, j] = vn[lo, j]
        for t in range(1, n):
            e = _eidx(elo + t - 1, shared)
            for j in range(K):
                for i in range(K):
                    tmp[i] = la[t - 1, i] + edge[e, i, j]
                m = logsumexp_1d(tmp)
                la[t, j] = node[lo + t, j] + m
                d = vn[lo + t, j]
                if m > -np.inf:
                    for i in range(K):
                        d += np.exp(tmp[i] - m) * (da[t - 1, i] + ve[e, i, j])
                da[t, j] = d
        for t in range(n - 2, -1, -1):
            e = _eidx(elo + t, shared)
            for i in range(K):
                for j in range(K):
                    tmp[j] = edge[e, i, j] + node[lo + t + 1, j] + lb[t + 1, j]
                m = logsumexp_1d(tmp)
                lb[t, i] = m
                d = 0.0
                if m > -np.inf:
                    for j in range(K):
                        d += np.exp(tmp[j] - m) * (ve[e, i, j] + vn[lo + t + 1, j] + db[t + 1, j])
                db[t, i] = d
        lz = logsumexp_1d(la[n - 1])
        dlz = 0.0
        for j in range(K):
            dlz += np.exp(la[n - 1, j] - lz) * da[n - 1, j]
        for t in range(n):
            for j in range(K):
                mu = np.exp(la[t, j] + lb[t, j] - lz)
                out_n[lo + t, j] = mu * (da[t, j] + db[t, j] - dlz)
        for t in range(1, n):
            e = elo + t - 1
            et = _eidx(e, shared)
            eo = 0 if shared else e
            for i in range(K):
                for j in range(K):
                    xi = np.exp(la[t - 1, i] + edge[et, i, j] + node[lo + t, j] + lb[t, j] - lz)
                    out_e[eo, i, j] += xi * (da[t - 1, i] + ve[et, i, j] + vn[lo + t, j]
                                             + db[t, j] - dlz)
    return out_n, out_e


class ChainEngine(Engine):
    """Exact forward-backward engine for batches of canonical chains.

    Examples
    --------
    >>> import numpy as np
    >>> from pymc_crf import GraphBatch
    >>> from pymc_crf.inference import ChainEngine
    >>> batch = GraphBatch.chains([4, 2])
    >>> node = np.zeros((6, 3)); edge = np.zeros((1, 3, 3))
    >>> np.allclose(ChainEngine().log_partition(batch, node, edge), [4 * np.log(3), 2 * np.log(3)])
    True
    """

    name = "chain"
    exact = True

    def supports(self, batch: GraphBatch) -> bool:
        return batch.is_chain

    def _check(self, batch, node_logpot, edge_logpot):
        if not batch.is_chain:
            bad = int(np.flatnonzero(batch.kinds != "chain")[0])
            raise ValueError(f"chain engine: graph {bad} is a {batch.kinds[bad]}, not a canonical "
                             "chain (edges (0,1), (1,2), ... in order); use 'junction_tree' or "
                             "'auto'")
        return check_potentials(batch, node_logpot, edge_logpot)

    def log_partition(self, batch, node_logpot, edge_logpot):
        node, edge = self._check(batch, node_logpot, edge_logpot)
        return _forward_backward(node, edge, batch.node_offsets, batch.edge_offsets, False,
                                 _NO_WEIGHTS)[0]

    def marginals(self, batch, node_logpot, edge_logpot):
        node, edge = self._check(batch, node_logpot, edge_logpot)
        return Marginals(*_forward_backward(node, edge, batch.node_offsets, batch.edge_offsets,
                                            True, _NO_WEIGHTS))

    def map_assignment(self, batch, node_logpot, edge_logpot):
        node, edge = self._check(batch, node_logpot, edge_logpot)
        return MapResult(*_viterbi(node, edge, batch.node_offsets, batch.edge_offsets))

    def sample(self, batch, node_logpot, edge_logpot, n_samples, rng=None):
        node, edge = self._check(batch, node_logpot, edge_logpot)
        la = _log_forward(node, edge, batch.node_offsets, batch.edge_offsets)
        u = as_generator(rng).random((int(n_samples), batch.n_total_nodes))
        return _ffbs(la, edge, batch.node_offsets, batch.edge_offsets, u)

    def covariance_vector_product(self, batch, node_logpot, edge_logpot, v_node, v_edge):
        node, edge = self._check(batch, node_logpot, edge_logpot)
        vn = np.ascontiguousarray(v_node, dtype=np.float64)
        ve = np.ascontiguousarray(v_edge, dtype=np.float64)
        if vn.shape != node.shape or ve.shape != edge.shape:
            raise ValueError(f"direction shapes {vn.shape}, {ve.shape} do not match the tables "
                             f"{node.shape}, {edge.shape}")
        return _tangent_fb(node, edge, batch.node_offsets, batch.edge_offsets, vn, ve)

    def numba_kernels(self, batch: GraphBatch):
        """Njit closures ``(log_z(node, edge), vjp(node, edge, g))`` over this batch's offsets.

        Used by the PyTensor Ops' numba implementation so compiled models call the kernels directly.
        """
        if not batch.is_chain:
            return None
        no, eo = batch.node_offsets.copy(), batch.edge_offsets.copy()
        empty = np.zeros(0)

        @njit
        def log_z(node, edge):
            return _forward_backward(node, edge, no, eo, False, empty)[0]

        @njit
        def vjp(node, edge, g):
            _, gn, ge = _forward_backward(node, edge, no, eo, True, g)
            return gn, ge

        return log_z, vjp

    def weighted_marginals(self, batch, node_logpot, edge_logpot, graph_weights):
        """Marginals of graph g times ``graph_weights[g]`` (the VJP of log Z), one pass."""
        node, edge = self._check(batch, node_logpot, edge_logpot)
        gw = np.ascontiguousarray(graph_weights, dtype=np.float64)
        _, gn, ge = _forward_backward(node, edge, batch.node_offsets, batch.edge_offsets, True, gw)
        return gn, ge
