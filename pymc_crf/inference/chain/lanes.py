"""Scaled forward-backward of up to ``LANES`` chains in lockstep: the lane-block kernel.

The recursions are those of ``per_graph`` (Rabiner 1989, eqs. (91)-(92)) with the same exactness
test (``scaling``), run across the lanes of a block so that the K x K products vectorise. With
per-edge tables the block's tables are exponentiated into one buffer (``_lane_tables``), or, for
edge features, formed from them block by block (``_lane_feature_tables``), so no (E, K, K) array
of tables or marginals is made.
"""

from __future__ import annotations

import numpy as np

from pymc_crf.inference.chain.features import _check_finite_tables
from pymc_crf.inference.chain.scaling import (
    _FAST,
    _MIN_SCALE,
    _exp_nonpos,
    _impossible,
    _shift_range,
    _threshold,
)
from pymc_crf.kernel_cache import njit

# Chains are processed LANES at a time in lockstep over positions, with the lane (graph) index
# innermost in every buffer: the K x K products of one step are then independent across lanes and
# vectorise, instead of one chain's step waiting on the latency of the previous one (the serial
# recursion is latency-bound at ~200 cycles a step). Graphs are taken in order of length so the
# lanes of a block have (nearly) equal lengths; positions past a lane's end carry phi = 1 and are
# masked out of every output. A shared edge table is one (K, K) matrix for every lane; per-edge
# tables are exponentiated block by block into a (t, i, j, lane) buffer. Buffer offsets are
# unsigned (``_u``): numba adds a negative-index check to every signed index, which stops LLVM
# from vectorising the lane loops.
LANES = 64  # lanes of a block (fewer for small batches: a multiple of 8 covering them)
_BLOCK_ELEMS = 1 << 18  # max positions x K x lanes of one block's buffers (2 MB each)
_TABLE_ELEMS = 1 << 19  # max positions x K^2 x lanes of a block's per-edge tables (4 MB)


@njit(cache=True, inline="always")
def _u(i):
    return np.uint64(i)


@njit(cache=True, fastmath=_FAST, inline="always")
def _lane_matvec(M, src, so, dst, do, K, B):
    """``dst[do + (j, b)] = sum_i M[i, j] src[so + (i, b)]`` for all lanes b (blocks of K x B).

    Four source rows per pass over the destination: the destination row is loaded and stored
    once per four multiply-adds (the loop is bound by stores, not arithmetic)."""
    Bu = _u(B)
    for j in range(K):
        w = M[0, j]
        dj = do + _u(j) * Bu
        for b in range(B):
            dst[dj + _u(b)] = src[so + _u(b)] * w
    i = 1
    while i + 3 < K:
        a0 = so + _u(i) * Bu
        a1 = a0 + Bu
        a2 = a1 + Bu
        a3 = a2 + Bu
        for j in range(K):
            w0, w1, w2, w3 = M[i, j], M[i + 1, j], M[i + 2, j], M[i + 3, j]
            dj = do + _u(j) * Bu
            for b in range(B):
                bu = _u(b)
                dst[dj + bu] += (src[a0 + bu] * w0 + src[a1 + bu] * w1 + src[a2 + bu] * w2
                                 + src[a3 + bu] * w3)
        i += 4
    while i < K:
        a0 = so + _u(i) * Bu
        for j in range(K):
            w0 = M[i, j]
            dj = do + _u(j) * Bu
            for b in range(B):
                dst[dj + _u(b)] += src[a0 + _u(b)] * w0
        i += 1


@njit(cache=True, fastmath=_FAST, inline="always")
def _lane_matvec_tables(P, po, trans, src, so, dst, do, K, B):
    """Per-lane tables ``P[po + ((i, j), b)]``: ``dst[(j, b)] = sum_i P[i, j, b] src[(i, b)]``,
    or with ``trans`` ``dst[(i, b)] = sum_j P[i, j, b] src[(j, b)]``."""
    Bu = _u(B)
    Ku = _u(K)
    for x in range(K * B):
        dst[do + _u(x)] = 0.0
    # the table is read in (i, j) order either way; ``trans`` (a constant once inlined) only
    # swaps which of i and j indexes the destination and which the source
    for i in range(K):
        for j in range(K):
            pij = po + (_u(i) * Ku + _u(j)) * Bu
            d = do + _u(i if trans else j) * Bu
            sq = so + _u(j if trans else i) * Bu
            for b in range(B):
                dst[d + _u(b)] += P[pij + _u(b)] * src[sq + _u(b)]


@njit(cache=True, fastmath=_FAST)
def _lane_tables(edge, lane_elo, lane_n, Lb, K, B, P, lshift, lthr, xs, ks):
    """Per-edge tables of a block: ``P[(t, i, j, lane)] = exp(edge[e] - max edge[e])`` for the
    table e between positions t-1 and t of each lane (ones past a lane's end), the maxima into
    ``lshift[(t, lane)]`` and each lane's threshold into ``lthr`` (scratch ``xs``, ``ks``: K^2 B)."""
    KK = K * K
    Bu = _u(B)
    flat = edge.reshape(-1)
    for b in range(B):
        lthr[b] = _threshold(K, 0.0)
    for t in range(1, Lb):
        for b in range(B):
            mx = 0.0
            if t < lane_n[b]:
                base = (lane_elo[b] + t - 1) * KK
                mx, rg = _shift_range(flat, base, KK)
                lthr[b] = max(lthr[b], _threshold(K, rg))
                for x in range(KK):
                    xs[_u(x) * Bu + _u(b)] = flat[base + x] - mx
            else:
                for x in range(KK):
                    xs[_u(x) * Bu + _u(b)] = 0.0
            lshift[_u(t) * Bu + _u(b)] = mx
        _exp_nonpos(xs, P[t * KK * B:(t + 1) * KK * B], ks, KK * B)


# A bound under which the feature tables cannot overflow: with finite features and weights,
# |sum_f Xe[e, f] We[f, x]| <= sum_f |Xe[e, f]| max_x |We[f, x]| (the per-edge bound), and a sum
# of Fe terms rounded in floating point exceeds its exact value by a factor of at most
# 1 + Fe 2^-53. A block whose edges all bound below 1e300 therefore has finite tables (far from
# the overflow at 1.8e308 for any Fe), and the entry-by-entry test is skipped there.
_NO_OVERFLOW = 1e300


@njit(cache=True, fastmath=_FAST)
def _feature_bound(Xe, wmax, lane_elo, lane_n, B):
    """The largest per-edge bound ``sum_f |Xe[e, f]| wmax[f]`` over the block's edges (NaN
    for non-finite features, which then fail the ``< _NO_OVERFLOW`` test)."""
    bound = 0.0
    for b in range(B):
        for e in range(lane_elo[b], lane_elo[b] + max(lane_n[b] - 1, 0)):
            v = 0.0
            for f in range(Xe.shape[1]):
                v += np.abs(Xe[e, f]) * wmax[f]
            bound = v if not v <= bound else bound  # keeps a NaN
    return bound


@njit(cache=True, fastmath=_FAST)
def _lane_feature_tables(Xe, We, lane_elo, lane_n, Lb, K, B, P, lshift, lthr, xs, ks):
    """``_lane_tables`` of log-linear edge tables made from edge features: the table of edge e
    is ``sum_f Xe[e, f] We[f]`` (``We`` (Fe, K^2)), formed here block by block across the lanes,
    so no (E, K, K) array of tables is made. A non-finite entry (a product that overflows)
    raises; blocks whose features bound their tables below ``_NO_OVERFLOW`` are not tested
    entry by entry.

    Four features per pass over the block's entries (the passes are bound by the loads and
    stores of ``xs``, not by the multiply-adds); the last pass also takes each lane's maximum
    and minimum."""
    KK = K * K
    Fe = Xe.shape[1]
    Bu = _u(B)
    wmax = np.zeros(Fe)
    for f in range(Fe):
        for x in range(KK):
            wmax[f] = max(wmax[f], np.abs(We[f, x]))
    check = not _feature_bound(Xe, wmax, lane_elo, lane_n, B) < _NO_OVERFLOW
    cf = np.zeros(4 * B)  # features f..f+3 of each lane's edge at step t, zero past its end
    mx = np.empty(B)
    lo = np.empty(B)
    for b in range(B):
        lthr[b] = _threshold(K, 0.0)
    for t in range(1, Lb):
        for b in range(B):
            mx[b] = -np.inf
            lo[b] = np.inf
        for f in range(0, max(Fe, 1), 4):
            nf = min(4, Fe - f)
            for q in range(4):
                for b in range(B):
                    cf[q * B + b] = (Xe[lane_elo[b] + t - 1, f + q]
                                     if q < nf and t < lane_n[b] else 0.0)
            last = f + 4 >= Fe
            for x in range(KK):
                w0 = We[f, x] if nf > 0 else 0.0
                w1 = We[f + 1, x] if nf > 1 else 0.0
                w2 = We[f + 2, x] if nf > 2 else 0.0
                w3 = We[f + 3, x] if nf > 3 else 0.0
                xo = _u(x) * Bu
                if f == 0:
                    for b in range(B):
                        xs[xo + _u(b)] = (cf[b] * w0 + cf[B + b] * w1 + cf[2 * B + b] * w2
                                          + cf[3 * B + b] * w3)
                else:
                    for b in range(B):
                        xs[xo + _u(b)] += (cf[b] * w0 + cf[B + b] * w1 + cf[2 * B + b] * w2
                                           + cf[3 * B + b] * w3)
                if last:
                    for b in range(B):
                        v = xs[xo + _u(b)]
                        mx[b] = max(mx[b], v)
                        lo[b] = min(lo[b], v)
        if check:
            _check_finite_tables(xs, KK, B)
        for b in range(B):
            if t < lane_n[b]:
                lthr[b] = max(lthr[b], _threshold(K, mx[b] - lo[b]))
            lshift[_u(t) * Bu + _u(b)] = mx[b]
        for x in range(KK):
            xo = _u(x) * Bu
            for b in range(B):
                xs[xo + _u(b)] -= mx[b]
        _exp_nonpos(xs, P[t * KK * B:(t + 1) * KK * B], ks, KK * B)


@njit(cache=True, fastmath=_FAST)
def _fb_lane_block(node, edge, shared, psi, shift, erange, lane_lo, lane_elo, lane_n, lane_w,
                   want_marginals, phi, alpha, inv, xb, kb, beta, tmp, P, lshift, xs, ks, macc,
                   node_m, edge_m, log_z_lane, bad, Xe, We, gW):
    """Scaled forward-backward of ``len(lane_n)`` chains in lockstep (buffers laid out
    (t, j, lane)), with the shared table ``psi[0]`` or per-edge tables (made into ``P``).

    With edge features (``Xe`` (E, Fe) non-empty, ``We`` (Fe, K^2)) the per-edge tables are
    ``Xe @ We``, formed block by block (``edge`` is then not read), and instead of the edge
    marginals the expected edge features ``sum_e Xe[e, f] mu_e`` (times ``lane_w``) are added
    to ``gW`` (Fe, K^2): the block's chains need no (E, K, K) tables or marginals.

    ``lane_n[b] = 0`` marks an unused lane. Writes ``log_z_lane``, the node marginals of each
    lane's graph (times ``lane_w``), and the edge marginals: per edge into ``edge_m``, or for a
    shared table the sum over lanes and t of alpha_{t-1}(i) (phi beta / s)_t(j) into ``macc``
    (K, K). A lane that fails the exactness test is flagged in ``bad`` and left to the caller.
    """
    K = node.shape[1]
    B = lane_n.shape[0]
    Ku, Bu = _u(K), _u(B)
    KB = Ku * Bu
    KKB = Ku * KB
    Lb = np.int64(0)  # not the literal 0: numba would compile the callees for Literal[int](0) too
    for b in range(B):
        Lb = max(Lb, lane_n[b])
    psi2 = psi[0]
    psiT = np.ascontiguousarray(psi2.T)
    edge_flat = edge_m.reshape(-1)
    acc = np.zeros(B)
    prod = np.ones(B)
    s = np.empty(B)
    am = np.empty(B)
    lthr = np.empty(B)
    for b in range(B):
        bad[b] = False
    feat = Xe.shape[0] > 0
    if shared:
        th = _threshold(K, erange[0])
        for b in range(B):
            lthr[b] = th
    elif feat:
        _lane_feature_tables(Xe, We, lane_elo, lane_n, Lb, K, B, P, lshift, lthr, xs, ks)
    else:
        _lane_tables(edge, lane_elo, lane_n, Lb, K, B, P, lshift, lthr, xs, ks)
    # exp of each row minus its maximum, gathered into (t, j, lane)
    for t in range(Lb):
        for b in range(B):
            base = _u(t) * KB + _u(b)
            if t < lane_n[b]:
                row = lane_lo[b] + t
                c = -np.inf
                for j in range(K):
                    c = max(c, node[row, j])
                if c == -np.inf:
                    bad[b] = True
                    c = 0.0
                acc[b] += c
                for j in range(K):
                    xb[base + _u(j) * Bu] = node[row, j] - c
            else:
                for j in range(K):
                    xb[base + _u(j) * Bu] = 0.0
    _exp_nonpos(xb, phi, kb, Lb * K * B)
    # forward: alpha_t = (alpha_{t-1} psi) * phi_t / s_t  (Rabiner 1989 eqs. (91)-(92))
    for t in range(Lb):
        o = _u(t) * KB
        if t == 0:
            for x in range(K * B):
                alpha[_u(x)] = phi[_u(x)]
        else:
            if shared:
                _lane_matvec(psi2, alpha, o - KB, alpha, o, K, B)
            else:
                _lane_matvec_tables(P, _u(t) * KKB, False, alpha, o - KB, alpha, o, K, B)
            for x in range(K * B):
                alpha[o + _u(x)] *= phi[o + _u(x)]
        for b in range(B):
            s[_u(b)] = 0.0
            am[_u(b)] = np.inf  # smallest unnormalised entry of the lane
        for j in range(K):
            oj = o + _u(j) * Bu
            for b in range(B):
                a = alpha[oj + _u(b)]
                s[_u(b)] += a
                am[_u(b)] = min(am[_u(b)], a)
        for b in range(B):
            if t < lane_n[b] and am[b] < lthr[b] and not bad[b]:
                row = lane_lo[b] + t
                # feature tables are finite (checked as they are made): ``edge`` is then a
                # (1, K, K) table of zeros, which forbids nothing
                e = 0 if (shared or feat) else lane_elo[b] + t - 1
                for j in range(K):
                    v = alpha[o + _u(j) * Bu + _u(b)]
                    ao = max(t - 1, 0) * K * B + b  # alpha_{t-1}(0) of the lane (signed)
                    if v < lthr[b] and not (v == 0.0 and _impossible(node, row, edge, e, alpha,
                                                                     ao, B, t, j)):
                        bad[b] = True
                        break
        for b in range(B):
            ok = s[b] >= _MIN_SCALE  # below it the test has failed: keep 1 / s finite
            inv[_u(t) * Bu + _u(b)] = 1.0 / s[b] if ok else 0.0
            if t < lane_n[b]:
                if not shared and t > 0:
                    acc[b] += lshift[_u(t) * Bu + _u(b)]
                if not ok:
                    bad[b] = True
                elif s[b] < 1e-100:
                    acc[b] += np.log(s[b])
                else:
                    prod[b] *= s[b]
                    if prod[b] < 1e-200 or prod[b] > 1e200:
                        acc[b] += np.log(prod[b])
                        prod[b] = 1.0
        it = _u(t) * Bu
        for j in range(K):
            oj = o + _u(j) * Bu
            for b in range(B):
                alpha[oj + _u(b)] *= inv[it + _u(b)]
    for b in range(B):
        log_z_lane[b] = acc[b] + np.log(prod[b])
        if shared:
            log_z_lane[b] += (lane_n[b] - 1) * shift[0]
    if not want_marginals:
        return
    # backward: beta_{t-1} = psi (phi_t beta_t / s_t); lanes past their end keep beta = 1
    wm = np.empty(B)
    for b in range(B):
        wm[b] = 0.0 if (bad[b] or lane_n[b] == 0) else lane_w[b]
        # a bad lane (redone in log space by the caller) carries beta = 0 and weight 0
        b0 = 0.0 if bad[b] else 1.0
        for j in range(K):
            beta[_u(j) * Bu + _u(b)] = b0
        if lane_n[b] > 0 and not bad[b]:
            n = lane_n[b]
            for j in range(K):
                node_m[lane_lo[b] + n - 1, j] = lane_w[b] * alpha[_u(n - 1) * KB + _u(j) * Bu + _u(b)]
    for t in range(Lb - 1, 0, -1):
        o = _u(t) * KB
        p = o - KB
        it = _u(t) * Bu
        for j in range(K):
            oj = o + _u(j) * Bu
            tj = _u(j) * Bu
            for b in range(B):
                v = phi[oj + _u(b)] * beta[tj + _u(b)] * inv[it + _u(b)]
                tmp[tj + _u(b)] = v if alpha[oj + _u(b)] > 0.0 else 0.0
        if shared:
            _lane_matvec(psiT, tmp, _u(0), beta, _u(0), K, B)
        else:
            _lane_matvec_tables(P, _u(t) * KKB, True, tmp, _u(0), beta, _u(0), K, B)
        for b in range(B):
            if t >= lane_n[b]:
                b0 = 0.0 if bad[b] else 1.0
                for i in range(K):
                    beta[_u(i) * Bu + _u(b)] = b0
        for b in range(B):  # each lane's weight at step t (0 past its end)
            s[_u(b)] = wm[b] if t < lane_n[b] else 0.0
        if shared:
            for i in range(K):
                ai = p + _u(i) * Bu
                for b in range(B):
                    am[_u(b)] = alpha[ai + _u(b)] * s[_u(b)]
                for j in range(K):
                    tj = _u(j) * Bu
                    m = 0.0
                    for b in range(B):
                        m += am[_u(b)] * tmp[tj + _u(b)]
                    macc[i, j] += m
        else:
            # edge marginals w alpha_{t-1}(i) psi(i, j) (phi beta / s)_t(j), computed across
            # lanes into P (no longer needed) and then copied out lane by lane
            pt_ = _u(t) * KKB
            for i in range(K):
                ai = p + _u(i) * Bu
                for b in range(B):
                    am[_u(b)] = alpha[ai + _u(b)] * s[_u(b)]
                for j in range(K):
                    pij = pt_ + (_u(i) * Ku + _u(j)) * Bu
                    tj = _u(j) * Bu
                    for b in range(B):
                        P[pij + _u(b)] *= am[_u(b)] * tmp[tj + _u(b)]
            if feat:  # gW[f] += sum over lanes of Xe[e, f] times the lane's edge marginals
                for f in range(Xe.shape[1]):
                    for b in range(B):
                        am[_u(b)] = Xe[lane_elo[b] + t - 1, f] if s[b] != 0.0 else 0.0
                    for x in range(K * K):
                        px = pt_ + _u(x) * Bu
                        m = 0.0
                        for b in range(B):
                            m += am[_u(b)] * P[px + _u(b)]
                        gW[f, x] += m
            else:
                for b in range(B):
                    if t < lane_n[b] and not bad[b]:
                        eb = edge_flat[(lane_elo[b] + t - 1) * K * K:(lane_elo[b] + t) * K * K]
                        for x in range(K * K):
                            eb[x] = P[pt_ + _u(x) * Bu + _u(b)]
        for b in range(B):
            if t < lane_n[b] and not bad[b]:
                row = lane_lo[b] + t - 1
                for i in range(K):
                    node_m[row, i] = (lane_w[b] * alpha[p + _u(i) * Bu + _u(b)]
                                      * beta[_u(i) * Bu + _u(b)])
