"""Exact inference on chains: forward-backward, Viterbi, forward-filtering backward-sampling.

Every graph of the batch must be a canonical chain (``GraphBatch.chains``): node ``t`` of graph ``g``
is ``node_offsets[g] + t`` and edge ``(t-1, t)`` is ``edge_offsets[g] + t - 1``.

The hot kernel (log Z and marginals) is forward-backward with per-step scaling (Rabiner 1989): the
tables are exponentiated once after subtracting their maxima, and the forward messages are renormalised
at every step, so no exp of an unbounded score is taken and the result equals the log-space recursion to
rounding. If a scale ever underflows (log-potential ranges of hundreds, or forbidden transitions that
leave no path), that graph is recomputed in log space, which never underflows.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from pymc_crf.graphs.batch import GraphBatch
from pymc_crf.inference.base import Engine, Marginals, MapResult, as_generator, check_potentials

__all__ = ["ChainEngine"]

_TINY = 1e-290
_NO_WEIGHTS = np.zeros(0)


@njit(cache=True, inline="always")
def _eidx(e, shared):
    return 0 if shared else e


@njit(cache=True)
def _logsumexp(x):
    m = -np.inf
    for v in x:
        if v > m:
            m = v
    if m == -np.inf:
        return -np.inf
    s = 0.0
    for v in x:
        s += np.exp(v - m)
    return m + np.log(s)


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
            la[t, j] = node[lo + t, j] + _logsumexp(tmp)
    for t in range(n - 2, -1, -1):
        e = _eidx(elo + t, shared)
        for i in range(K):
            for j in range(K):
                tmp[j] = edge[e, i, j] + node[lo + t + 1, j] + lb[t + 1, j]
            lb[t, i] = _logsumexp(tmp)
    lz = _logsumexp(la[n - 1])
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
    # exp of the edge tables once, shifted by their maxima (no exp of an unbounded score).
    n_tab = edge.shape[0]
    psi = np.empty((n_tab, K, K))
    shift = np.empty(n_tab)
    for e in range(n_tab):
        m = -np.inf
        for i in range(K):
            for j in range(K):
                if edge[e, i, j] > m:
                    m = edge[e, i, j]
        if m == -np.inf:
            m = 0.0
        shift[e] = m
        for i in range(K):
            for j in range(K):
                psi[e, i, j] = np.exp(edge[e, i, j] - m)
    alpha = np.empty((N, K))
    phi = np.empty((N, K))
    scale = np.empty(N)
    beta = np.empty(K)
    beta_next = np.empty(K)
    lz1 = np.empty(1)
    for g in range(G):
        lo = node_off[g]
        n = node_off[g + 1] - lo
        elo = edge_off[g]
        wg = gw[g] if gw.shape[0] > 0 else 1.0
        ok = True
        acc = 0.0
        for t in range(n):
            c = -np.inf
            for j in range(K):
                if node[lo + t, j] > c:
                    c = node[lo + t, j]
            if c == -np.inf:
                ok = False
                break
            for j in range(K):
                phi[lo + t, j] = np.exp(node[lo + t, j] - c)
            s = 0.0
            if t == 0:
                for j in range(K):
                    alpha[lo, j] = phi[lo, j]
                    s += phi[lo, j]
            else:
                e = _eidx(elo + t - 1, shared)
                acc += shift[e]
                for j in range(K):
                    a = 0.0
                    for i in range(K):
                        a += alpha[lo + t - 1, i] * psi[e, i, j]
                    a *= phi[lo + t, j]
                    alpha[lo + t, j] = a
                    s += a
            if not (s > _TINY) or not np.isfinite(s):
                ok = False
                break
            for j in range(K):
                alpha[lo + t, j] /= s
            scale[lo + t] = s
            acc += c + np.log(s)
        if not ok:
            _fb_log_one(node, edge, shared, lo, elo, n, lz1, node_m, edge_m, want_marginals, wg)
            log_z[g] = lz1[0]
            continue
        log_z[g] = acc
        if not want_marginals:
            continue
        # Backward pass with the forward scales (beta_t sums against alpha_t to 1).
        for j in range(K):
            beta[j] = 1.0
        for j in range(K):
            node_m[lo + n - 1, j] = wg * alpha[lo + n - 1, j]
        for t in range(n - 1, 0, -1):
            e = elo + t - 1
            et = _eidx(e, shared)
            inv = 1.0 / scale[lo + t]
            for i in range(K):
                b = 0.0
                ai = alpha[lo + t - 1, i] * inv * wg
                for j in range(K):
                    w = psi[et, i, j] * phi[lo + t, j] * beta[j]
                    b += w
                    if shared:
                        edge_m[0, i, j] += ai * w
                    else:
                        edge_m[e, i, j] = ai * w
                beta_next[i] = b * inv
            for i in range(K):
                beta[i] = beta_next[i]
                node_m[lo + t - 1, i] = wg * alpha[lo + t - 1, i] * beta[i]
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
                la[lo + t, j] = node[lo + t, j] + _logsumexp(tmp)
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
    """Directional derivative of the marginals along (vn, ve): exact Hessian-vector product of log Z.

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
                m = _logsumexp(tmp)
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
                m = _logsumexp(tmp)
                lb[t, i] = m
                d = 0.0
                if m > -np.inf:
                    for j in range(K):
                        d += np.exp(tmp[j] - m) * (ve[e, i, j] + vn[lo + t + 1, j] + db[t + 1, j])
                db[t, i] = d
        lz = _logsumexp(la[n - 1])
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
                             "chain (edges (0,1), (1,2), ... in order); use 'junction_tree' or 'auto'")
        return check_potentials(batch, node_logpot, edge_logpot)

    def log_partition(self, batch, node_logpot, edge_logpot):
        node, edge = self._check(batch, node_logpot, edge_logpot)
        return _forward_backward(node, edge, batch.node_offsets, batch.edge_offsets, False, _NO_WEIGHTS)[0]

    def marginals(self, batch, node_logpot, edge_logpot):
        node, edge = self._check(batch, node_logpot, edge_logpot)
        return Marginals(*_forward_backward(node, edge, batch.node_offsets, batch.edge_offsets, True,
                                             _NO_WEIGHTS))

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
