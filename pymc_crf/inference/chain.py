"""Exact inference on chains: forward-backward, Viterbi, forward-filtering backward-sampling.

Every graph of the batch must be a canonical chain (``GraphBatch.chains``): node ``t`` of graph
``g`` is ``node_offsets[g] + t`` and edge ``(t-1, t)`` is ``edge_offsets[g] + t - 1``.

The hot kernel (log Z and marginals) is forward-backward with per-step scaling (Rabiner 1989): each
node row and edge table is exponentiated once after subtracting its maximum, and the forward
messages are renormalised at every step, so no exp of an unbounded score is taken. Every step
checks that no state's message lost relative accuracy to underflow (the test and its proof are
above ``_threshold``); then the result equals the log-space recursion to rounding for any range
of log-potentials. A chain that fails the test (messages spanning more than about 1e307, which
needs node-row plus table ranges above about 700) is recomputed in log space.

Up to 64 chains run in lockstep, the chain index innermost, so the K x K products vectorise
across chains (see ``_fb_block``); with per-edge tables each lane has its own table per step.
Log-linear per-edge tables given as edge features and weights (``log_z_and_feature_marginals``)
are formed block by block inside the same kernel, and the gradient in the weights (the expected
edge features) is summed there too, so neither the (E, K, K) tables nor their marginals are
made: for 49,000 edges and K = 10 those are two 39 MB arrays, written and read again by the
feature products, which cost more than the recursions. Chains too long for the lane blocks
(over 81 positions at K = 10) form their own tables and marginals, one chain at a time.

A batch with enough lane-block work is split into parts of whole blocks (``_block_plan``: about
equal work, at most eight, fixed by the batch alone) that run on the worker threads of
``pymc_crf.threads``; each part sums its shared-table and edge-feature terms apart, and the parts'
sums are added in part order, so the numbers do not depend on the number of threads. Blocks are
the same as in one thread, so log Z and the marginals are bit for bit those of the one-thread
kernel; only the summed terms differ from it, by rounding. Compiled PyTensor functions reach the
threads through an object-mode hand-off (``_fb_any``). The default is one thread (why, and when
more pay: ``pymc_crf.threads``); a caller that finds another call's parts on the helper threads
(nutpie runs its chains in threads) runs its parts in its own thread.
"""

from __future__ import annotations

import threading

import numpy as np
from numba import njit, objmode

from pymc_crf.allocation import empty_pages, zeros_pages
from pymc_crf.compile_notice import first_use_notice
from pymc_crf.feature_products import is_sparse
from pymc_crf.graphs.batch import GraphBatch
from pymc_crf.inference.base import (
    Engine,
    MapResult,
    Marginals,
    check_feature_tables,
    check_potentials,
)
from pymc_crf.inference.chain_small import forward_backward_small, is_small
from pymc_crf.inference.kernels import (
    MAX,
    SUM,
    TANGENT,
    log_backward,
    log_forward,
    logsumexp_1d,
    unused_arrays,
)
from pymc_crf.threads import get_num_threads, run_parts
from pymc_crf.validation import generator, whole_number

__all__ = ["ChainEngine"]

_NO_WEIGHTS = np.zeros(0)


@njit(cache=True, inline="always")
def _eidx(e, shared):
    return 0 if shared else e


@njit(cache=True)
def _log_messages(node, edge, shared, lo, elo, n):
    """Log-space forward and backward messages (n, K) of one chain (``log_forward`` /
    ``log_backward`` in the sum-product semiring)."""
    K = node.shape[1]
    noi, no2, no3 = unused_arrays()
    la = np.empty((n, K))
    lb = np.zeros((n, K))
    for j in range(K):
        la[0, j] = node[lo, j]
    log_forward(node, lo, n, edge, elo, shared, SUM, la, noi, no2, no3, no2)
    log_backward(node, lo, n, edge, elo, shared, SUM, lb, no2, no3, no2)
    return la, lb


@njit(cache=True)
def _fb_log_one(node, edge, shared, lo, elo, n, log_z, node_m, edge_m, want_marginals, w):
    """Log-space forward-backward for one chain (fallback path); writes into the outputs."""
    K = node.shape[1]
    la, lb = _log_messages(node, edge, shared, lo, elo, n)
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


# Flags that keep IEEE inf/nan semantics (-inf log-potentials are legitimate): reassociation lets
# the K-loops vectorise, contraction gives FMAs, arcp turns x / s into x * (1 / s).
_FAST = {"reassoc", "contract", "arcp", "nsz"}


@njit(cache=True, fastmath=_FAST, inline="always")
def _shift_range(flat, b, KK):
    """Maximum of the table ``flat[b:b+KK]`` (0 for an all -inf table) and its range over the
    finite entries."""
    mx = -np.inf
    lo = np.inf
    for x in range(KK):
        v = flat[b + x]
        mx = max(mx, v)
        lo = min(lo, v if v > -np.inf else np.inf)
    if mx == -np.inf:
        return 0.0, 0.0
    return mx, mx - lo


@njit(cache=True, fastmath=_FAST)
def _tables_into(edge, e0, m, psi, shift, erange, xbuf, kbuf):
    """exp of the edge tables ``edge[e0:e0+m]``, each shifted by its maximum (so every entry is in
    [0, 1]), into ``psi[:m]``; the shifts into ``shift[:m]`` and each table's range over its finite
    entries into ``erange[:m]`` (see ``_threshold``). ``xbuf``, ``kbuf``: scratch of m K^2."""
    KK = edge.shape[1] * edge.shape[2]
    flat = edge.reshape(-1)
    for e in range(m):
        b = (e0 + e) * KK
        mx, rg = _shift_range(flat, b, KK)
        shift[e] = mx
        erange[e] = rg
        for x in range(KK):
            xbuf[e * KK + x] = flat[b + x] - mx
    _exp_nonpos(xbuf, psi.reshape(-1), kbuf, m * KK)


@njit(cache=True)
def _edge_tables(edge):
    """``_tables_into`` of every edge table: (psi, shift, erange)."""
    n_tab, K = edge.shape[0], edge.shape[1]
    psi = np.empty((n_tab, K, K))
    shift = np.empty(n_tab)
    erange = np.empty(n_tab)
    _tables_into(edge, 0, n_tab, psi, shift, erange, np.empty(n_tab * K * K),
                 np.empty(n_tab * K * K))
    return psi, shift, erange


# When the scaled recursion is exact (the check every kernel below makes).
#
# Notation of one chain: alpha_{t-1} the normalised forward message (entries sum to 1), psi the
# edge table exponentiated after subtracting its maximum (entries in [0, 1]), phi_t the node row
# likewise, S_j = sum_i alpha_{t-1}(i) psi(i, j) and v_j = S_j phi_t(j) the unnormalised message,
# s_t = sum_j v_j <= K and alpha_t = v / s_t. Accept the step when every state j satisfies
#
#     v_j >= thr   or   (v_j == 0 and j is impossible: node[t, j] = -inf, or every i has
#                        alpha_{t-1}(i) = 0 or edge[i, j] = -inf),
#
# with thr = K 1e-307 if no finite table entry was flushed by the exp (table range <= 700; the
# exp flushes arguments below -708) and thr = K 1e-291 otherwise. Claim: then every nonzero
# alpha_t(j) carries a relative error of at most (t + 1) K ulp-multiples (ordinary rounding) and
# every zero is exact, so log Z, the marginals and the backward messages equal the log-space
# recursion to rounding, for any range of finite log-potentials. Proof by induction on t: the
# nonzero alpha_{t-1}(i) are >= thr / s_{t-1} >= thr / K >= 1e-307, normal numbers with small
# relative error, and the zero ones are exactly zero. A term alpha(i) psi(i, j) is then exact to
# rounding unless its value falls below 2^-1022, where gradual underflow costs at most 2^-1075;
# a flushed psi entry (true value < e^-708 < 3.3e-308) costs at most 3.3e-308 alpha(i). So S_j
# has an absolute error of at most K 2^-1075 (at most 3.3e-308 + K 2^-1075 with flushed entries),
# and phi_t(j) <= 1 carries that into v_j. A flushed phi_t(j) (row range > 708) makes v_j = 0 for
# a possible state, which the test rejects. With v_j >= thr, the absolute error is below 3e-17
# v_j: relative accuracy. A zero v_j of an impossible state is exactly zero. Finally
# alpha_t(j) = v_j / s_t with s_t <= K is >= thr / K, normal, which closes the induction.
# The backward messages need no test: with sum_j alpha_t(j) beta_t(j) = 1 every possible state
# has beta_t(j) <= 1 / alpha_t(j) <= 1e307 (no overflow), an absolute error d in beta_t(j) moves
# every marginal by at most alpha_t(j) d <= d (alpha_t is the adjoint of the backward recursion),
# and underflow there costs 2^-1075 per term; impossible states get beta = 0, exactly their
# contribution to every possible state. A rejected chain (the test fails, or a row has no
# possible label) is recomputed in log space. The test passes whenever node-row plus table
# ranges stay below about 700 (v_j >= alpha(i*) psi(i*, j) phi_t(j) with alpha(i*) >= 1 / K), so
# ranges of several hundred take the fast path; beyond that only chains whose messages really
# span more than 1e307 go to log space.
_FLUSH_RANGE = 700.0
_MIN_SCALE = 1e-307  # s_t of an accepted step is >= thr >= 2e-307


@njit(cache=True, inline="always")
def _threshold(K, erange):
    """The acceptance threshold ``thr`` of a step (see the proof above)."""
    return K * (1e-307 if erange <= _FLUSH_RANGE else 1e-291)


@njit(cache=True)
def _impossible(node, row, edge, e, alpha_prev, ao, stride, t, j):
    """Whether state j at position t (node row ``row``, edge table ``e``) has no possible
    path: a -inf node entry, or every previous state impossible (alpha exactly 0, read at
    ``alpha_prev[ao + i * stride]``) or forbidden by the table."""
    if node[row, j] == -np.inf:
        return True
    if t == 0:
        return False
    for i in range(node.shape[1]):
        if alpha_prev[ao + i * stride] != 0.0 and edge[e, i, j] > -np.inf:
            return False
    return True


@njit(cache=True, fastmath=_FAST)
def _forward_one(node, edge, lo, n, elo, psi, shift, erange, shared, phi, alpha, inv, xb, kb):
    """Scaled forward pass of one chain (Rabiner 1989, eqs. (91)-(92)); ``psi, shift, erange``
    hold the chain's own tables (``psi[t - 1]``) or the shared one.

    Fills ``phi`` (n*K, exp of each node row minus its maximum), ``alpha`` (n*K, normalised
    forward messages) and ``inv`` (n, reciprocal scales). Returns log Z, or NaN when a step
    fails the exactness test above (the caller then recomputes the graph in log space).
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
        small = np.inf
        et = 0
        if t == 0:
            for j in range(K):
                alpha[j] = phi[j]
                s += phi[j]
                small = min(small, phi[j])
            thr = _threshold(K, 0.0)
        else:
            et = 0 if shared else t - 1
            acc += shift[et]
            thr = _threshold(K, erange[et])
            b0 = t * K
            for j in range(K):
                alpha[b0 + j] = 0.0
            for i in range(K):
                a = alpha[b0 - K + i]
                for j in range(K):
                    alpha[b0 + j] += a * psi[et, i, j]
            for j in range(K):
                v = alpha[b0 + j] * phi[b0 + j]
                alpha[b0 + j] = v
                s += v
                small = min(small, v)
        if small < thr:
            e = 0 if shared else elo + t - 1
            for j in range(K):
                v = alpha[t * K + j]
                if v < thr and not (v == 0.0 and _impossible(node, lo + t, edge, e, alpha,
                                                             (t - 1) * K, 1, t, j)):
                    return np.nan
        if not (s >= _MIN_SCALE):
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
    at the end (psi does not depend on t). Impossible states (alpha = 0) carry beta = 0."""
    K = psi.shape[1]
    for j in range(K):
        beta[j] = 1.0
        node_m[lo + n - 1, j] = wg * alpha[(n - 1) * K + j]
    for t in range(n - 1, 0, -1):
        e = elo + t - 1
        et = 0 if shared else t - 1
        r = inv[t]
        for j in range(K):
            bp[j] = phi[t * K + j] * beta[j] * r if alpha[t * K + j] > 0.0 else 0.0
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


# Chains are processed LANES at a time in lockstep over positions, with the lane (graph) index
# innermost in every buffer: the K x K products of one step are then independent across lanes and
# vectorise, instead of one chain's step waiting on the latency of the previous one (the serial
# recursion is latency-bound at ~200 cycles a step). Graphs are taken in order of length so the
# lanes of a block have (nearly) equal lengths; positions past a lane's end carry phi = 1 and are
# masked out of every output. A shared edge table is one (K, K) matrix for every lane; per-edge
# tables are exponentiated block by block into a (t, i, j, lane) buffer. Buffer offsets are
# unsigned (``_u``): numba adds a negative-index check to every signed index, which stops LLVM
# from vectorising the lane loops (3x slower).
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
    if trans:
        for i in range(K):
            d = do + _u(i) * Bu
            for j in range(K):
                pij = po + (_u(i) * Ku + _u(j)) * Bu
                sj = so + _u(j) * Bu
                for b in range(B):
                    dst[d + _u(b)] += P[pij + _u(b)] * src[sj + _u(b)]
    else:
        for i in range(K):
            si = so + _u(i) * Bu
            for j in range(K):
                pij = po + (_u(i) * Ku + _u(j)) * Bu
                d = do + _u(j) * Bu
                for b in range(B):
                    dst[d + _u(b)] += P[pij + _u(b)] * src[si + _u(b)]


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


_OVERFLOW = ("log Z: the edge log-potentials Xe @ We are not finite (the product of the edge "
             "features and weights overflows)")


@njit(cache=True)
def _check_finite_tables(flat, rows, cols):
    """Raise unless the (rows, cols) block ``flat[:rows * cols]`` (edge log-potentials made from
    features) is all finite. One accumulator per column, so the column loop vectorises without
    fast-math flags, which this test must not have: under them LLVM folds ``v * 0`` to 0 and
    inf and NaN would pass. Every path of the feature kernels refuses -inf too: finite features
    and weights give -inf only by overflow, not as a forbidden transition."""
    acc = np.zeros(cols)
    for r in range(rows):
        for c in range(cols):
            acc[c] += flat[r * cols + c] * 0.0  # NaN for an inf or NaN entry
    for c in range(cols):
        if not acc[c] == 0.0:
            raise ValueError(_OVERFLOW)


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
def _fb_block(node, edge, shared, psi, shift, erange, lane_lo, lane_elo, lane_n, lane_w,
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
    Lb = 0
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
        if shared:
            for b in range(B):
                s[_u(b)] = wm[b] if t < lane_n[b] else 0.0
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
            for b in range(B):
                s[_u(b)] = wm[b] if t < lane_n[b] else 0.0
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


@njit(cache=True)
def _fb_graphs(node, edge, psi, shift, erange, node_off, edge_off, ids, want_marginals, gw, log_z,
               node_m, edge_m):
    """Scaled forward-backward of the graphs ``ids``, one at a time, written into ``log_z``,
    ``node_m`` and ``edge_m`` (a shared table's summed edge marginals are added to ``edge_m[0]``).
    A shared table's ``psi, shift, erange`` come from ``_edge_tables``; per-edge tables are
    exponentiated graph by graph into small buffers (the arguments are then not read), so no
    temporary of the size of all the tables is made. A graph that fails the exactness test is
    redone in log space."""
    K = node.shape[1]
    shared = edge.shape[0] == 1
    L = 1
    for g in ids:
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
    Lt = 1 if shared else L
    psi_g = psi if shared else np.empty((Lt, K, K))
    shift_g = shift if shared else np.empty(Lt)
    erange_g = erange if shared else np.empty(Lt)
    xt = np.empty(Lt * K * K)
    kt = np.empty(Lt * K * K)
    for g in ids:
        lo = node_off[g]
        n = node_off[g + 1] - lo
        elo = edge_off[g]
        wg = gw[g] if gw.shape[0] > 0 else 1.0
        if not shared:
            _tables_into(edge, elo, n - 1, psi_g, shift_g, erange_g, xt, kt)
        lz = _forward_one(node, edge, lo, n, elo, psi_g, shift_g, erange_g, shared, phi, alpha,
                          inv, xb, kb)
        if np.isnan(lz):
            _fb_log_one(node, edge, shared, lo, elo, n, lz1, node_m, edge_m, want_marginals, wg)
            log_z[g] = lz1[0]
            continue
        log_z[g] = lz
        if want_marginals:
            _backward_one(lo, n, elo, psi_g, shared, wg, phi, alpha, inv, beta, bp, macc, node_m,
                          edge_m)
    if shared and want_marginals:
        for i in range(K):
            for j in range(K):
                edge_m[0, i, j] += psi[0, i, j] * macc[i, j]


@njit(cache=True)
def _fb_feature_graph(node, Xe, We, lo, n, elo, want_marginals, w, node_m, gW):
    """Forward-backward of one chain whose edge tables come from edge features: its tables
    ``Xe[elo:elo+n-1] @ We`` (one BLAS product) are formed into an array of the chain's size,
    ``_fb_graphs`` runs on them (scaled, or in log space when the exactness test fails) and the
    chain's expected edge features (times ``w``) are added to ``gW`` (a second product). Returns
    log Z. For the chains the lane kernel leaves to the caller: longer than its block buffers
    (so these tables are formed, one chain at a time), alone in the batch, or failing the test
    there."""
    K = node.shape[1]
    KK = K * K
    m = n - 1
    if m > 0 and Xe.shape[1] > 0:
        flat = empty_pages((m, KK))  # large for long chains: advised huge pages
        np.dot(np.ascontiguousarray(Xe[elo:elo + m]), We, flat)
        _check_finite_tables(flat.reshape(-1), m, KK)
        tab = flat.reshape(m, K, K)
    else:
        tab = np.zeros((max(m, 1), K, K))
    node_off = np.array([lo, lo + n])
    edge_off = np.array([0, m])
    # with one edge (or none) the (1, K, K) array reads as a shared table: that table is the
    # chain's own, so the summed edge marginals are that edge's
    psi, shift, erange = _edge_tables(tab[:1])
    lz = np.empty(1)
    em = zeros_pages((tab.shape[0], K, K))
    _fb_graphs(node, tab, psi, shift, erange, node_off, edge_off, np.zeros(1, np.int64),
               want_marginals, np.full(1, w), lz, node_m, em)
    if want_marginals and m > 0 and Xe.shape[1] > 0:
        gW += np.dot(np.ascontiguousarray(Xe[elo:elo + m].T), em[:m].reshape(m, KK))
    return lz[0]


@njit(cache=True)
def _workspace_layout(sizes):
    """Where ``_workspace`` starts each buffer, and the length of the array it needs (room
    for moving the first buffer to a 4 KiB boundary included)."""
    starts = []
    pos = 0
    for k in range(len(sizes)):
        pos = ((pos + 511) // 512) * 512 + 80 * (k % 6)
        starts.append(pos)
        pos += sizes[k]
    return starts, pos + 512


@njit(cache=True)
def _workspace(sizes, buf):
    """Buffers of the given sizes carved from ``buf``, or from one new allocation when ``buf``
    is too small (empty), each starting at a different offset modulo 4 KiB (multiples of 640
    bytes). Separately allocated large buffers tend to be page-aligned alike, and a load at the
    same address modulo 4 KiB as an earlier store stalls ("4K aliasing"): that made the lane
    kernels 2.5x slower in about half of all processes."""
    starts, length = _workspace_layout(sizes)
    if buf.shape[0] < length:
        buf = empty_pages(length)
    base = ((4096 - buf.ctypes.data % 4096) % 4096) // 8  # the first buffer 4 KiB-aligned
    return [buf[base + starts[k]: base + starts[k] + sizes[k]] for k in range(len(sizes))]


@njit(cache=True)
def _block_sizes(K, B, Lbuf, shared):
    """The sizes of ``_fb_blocks``' buffers, and the length of one array that holds them all
    (``_workspace``)."""
    Lt = 0 if shared else Lbuf
    KKB = 0 if shared else K * K * B
    sizes = (Lbuf * K * B, Lbuf * K * B, Lbuf * K * B, Lbuf * K * B, Lbuf * B, K * B, K * B,
             Lt * KKB, Lt * B, KKB, KKB)
    return sizes, _workspace_layout(sizes)[1]


# Batches with at least this much lane-block work (positions x lanes x K^2, summed over blocks)
# are split into parts for the worker threads (``pymc_crf.threads``); below it a thread hand-off
# (tens of microseconds) would cost more than it saves.
_PARALLEL_WORK = 1 << 18
_MAX_PARTS = 8


@njit(cache=True)
def _block_plan(node_off, K, per_edge):
    """How ``_fb_blocked`` runs a batch: graphs in order of length (``order``), ``B`` lanes a
    block, the first ``n_blocked`` graphs in blocks (the rest are too long for the block
    buffers), ``Lbuf`` the longest blocked graph, and ``bounds``: the blocked graphs split into
    parts of whole blocks with about equal work (one part below ``_PARALLEL_WORK``). The split
    depends on the batch alone, not on the number of threads."""
    G = node_off.shape[0] - 1
    B = min(LANES, 8 * ((G + 7) // 8))
    lengths = node_off[1:] - node_off[:-1]
    order = np.argsort(lengths, kind="mergesort")
    cap = max(1, _BLOCK_ELEMS // (K * B))
    if per_edge:
        cap = max(1, min(cap, _TABLE_ELEMS // (K * K * B)))
    n_blocked = np.searchsorted(lengths[order], cap, side="right")
    Lbuf = 1
    if n_blocked > 0:
        Lbuf = lengths[order[n_blocked - 1]]
    n_blocks = (n_blocked + B - 1) // B
    work = np.zeros(n_blocks + 1)  # cumulative work: a block runs to its longest lane
    for k in range(n_blocks):
        work[k + 1] = work[k] + lengths[order[min((k + 1) * B, n_blocked) - 1]] * B * K * K
    n_parts = 1
    if work[n_blocks] >= _PARALLEL_WORK:
        n_parts = min(n_blocks, _MAX_PARTS)
    first = np.zeros(n_parts + 1, np.int64)  # each part's first block
    k = 0
    for p in range(1, n_parts):
        while k < n_blocks and work[k] < work[n_blocks] * p / n_parts:
            k += 1
        first[p] = min(max(k, first[p - 1] + 1), n_blocks - (n_parts - p))
    bounds = first * B
    bounds[n_parts] = n_blocked
    return order, lengths, B, n_blocked, Lbuf, bounds


@njit(cache=True, nogil=True)
def _fb_blocks(node, edge, psi, shift, erange, node_off, edge_off, want_marginals, gw, log_z,
               node_m, edge_m, Xe, We, gW, macc, order, lengths, B, Lbuf, first, stop, buf):
    """The blocks of ``B`` graphs ``order[first:stop]`` (``first`` a multiple of ``B``) of
    ``_fb_blocked``, each through ``_fb_block``; lanes that fail the exactness test are redone
    by the per-graph kernels. A shared table's summed edge marginals go to ``macc`` (and a
    redone lane's to ``edge_m[0]``), expected edge features to ``gW``: a part run on its own
    thread gets its own ``macc``, ``gW`` and, for a shared table, ``edge_m``. The buffers are
    carved from ``buf`` (``_block_sizes``), or allocated here when it is empty."""
    K = node.shape[1]
    feat = Xe.shape[0] > 0
    shared = edge.shape[0] == 1 and not feat
    ws = _workspace(_block_sizes(K, B, Lbuf, shared)[0], buf)
    phi, alpha, xb, kb, inv, beta, tmp, P, lshift, xs, ks = ws
    lane_lo = np.zeros(B, np.int64)
    lane_elo = np.zeros(B, np.int64)
    lane_n = np.zeros(B, np.int64)
    lane_w = np.ones(B)
    lane_g = np.zeros(B, np.int64)
    lz = np.empty(B)
    bad = np.zeros(B, np.bool_)
    lz1 = np.empty(1)
    for start in range(first, stop, B):
        for b in range(B):
            if start + b < stop:
                g = order[start + b]
                lane_g[b] = g
                lane_lo[b] = node_off[g]
                lane_elo[b] = edge_off[g]
                lane_n[b] = lengths[g]
                lane_w[b] = gw[g] if gw.shape[0] > 0 else 1.0
            else:
                lane_n[b] = 0
        _fb_block(node, edge, shared, psi, shift, erange, lane_lo, lane_elo, lane_n, lane_w,
                  want_marginals, phi, alpha, inv, xb, kb, beta, tmp, P, lshift, xs, ks, macc,
                  node_m, edge_m, lz, bad, Xe, We, gW)
        for b in range(B):
            if lane_n[b] == 0:
                continue
            g = lane_g[b]
            if bad[b] and feat:
                log_z[g] = _fb_feature_graph(node, Xe, We, lane_lo[b], lane_n[b], lane_elo[b],
                                             want_marginals, lane_w[b], node_m, gW)
            elif bad[b]:
                _fb_log_one(node, edge, shared, lane_lo[b], lane_elo[b], lane_n[b], lz1, node_m,
                            edge_m, want_marginals, lane_w[b])
                log_z[g] = lz1[0]
            else:
                log_z[g] = lz[b]


@njit(cache=True)
def _fb_rest(node, edge, psi, shift, erange, node_off, edge_off, want_marginals, gw, log_z,
             node_m, edge_m, Xe, We, gW, macc, order, lengths, n_blocked):
    """What ``_fb_blocked`` does after the blocks: a shared table's summed edge marginals
    ``psi * macc`` into ``edge_m[0]``, and the graphs too long for the blocks."""
    K = node.shape[1]
    feat = Xe.shape[0] > 0
    shared = edge.shape[0] == 1 and not feat
    G = node_off.shape[0] - 1
    if shared and want_marginals:
        for i in range(K):
            for j in range(K):
                edge_m[0, i, j] += psi[0, i, j] * macc[i, j]
    if n_blocked < G and feat:
        for g in order[n_blocked:]:
            log_z[g] = _fb_feature_graph(node, Xe, We, node_off[g], lengths[g], edge_off[g],
                                         want_marginals, gw[g] if gw.shape[0] > 0 else 1.0,
                                         node_m, gW)
    elif n_blocked < G:
        _fb_graphs(node, edge, psi, shift, erange, node_off, edge_off, order[n_blocked:],
                   want_marginals, gw, log_z, node_m, edge_m)


@njit(cache=True)
def _fb_blocked(node, edge, psi, shift, erange, node_off, edge_off, want_marginals, gw, log_z,
                node_m, edge_m, Xe, We, gW):
    """Forward-backward of a batch, up to LANES graphs at a time (graphs in order of length; any
    too long for the block buffers, or failing the exactness test, go through the per-graph
    kernels), in this thread. With edge features (``Xe`` non-empty; see ``_fb_block``) the
    expected edge features go to ``gW`` instead of edge marginals to ``edge_m``."""
    K = node.shape[1]
    per_edge = Xe.shape[0] > 0 or edge.shape[0] != 1
    order, lengths, B, n_blocked, Lbuf, _ = _block_plan(node_off, K, per_edge)
    macc = np.zeros((K, K))
    _fb_blocks(node, edge, psi, shift, erange, node_off, edge_off, want_marginals, gw, log_z,
               node_m, edge_m, Xe, We, gW, macc, order, lengths, B, Lbuf, 0, n_blocked,
               np.empty(0))
    _fb_rest(node, edge, psi, shift, erange, node_off, edge_off, want_marginals, gw, log_z,
             node_m, edge_m, Xe, We, gW, macc, order, lengths, n_blocked)


# Lane buffers of finished threaded calls, kept for the next: a fresh few-MB buffer is faulted
# in page by page on every call, and two threads faulting at once contend for the process's
# page-table lock (the per-edge objective of bench/bench_chain_paths.py took longer in two
# threads than in one that way). Each call takes its own buffers from here (concurrent callers
# never share one) and puts them back; at most _KEPT_BUFFERS are kept (each at most about 12 MB:
# the block caps bound it).
_kept_buffers: list[np.ndarray] = []
_kept_lock = threading.Lock()
_KEPT_BUFFERS = 4


def _take_buffers(n: int, length: int) -> list[np.ndarray]:
    with _kept_lock:
        taken = [_kept_buffers.pop() for _ in range(min(n, len(_kept_buffers)))]
    bufs = [b for b in taken if b.shape[0] >= length]
    return bufs + [np.empty(length) for _ in range(n - len(bufs))]


def _keep_buffers(bufs: list[np.ndarray]) -> None:
    with _kept_lock:
        _kept_buffers.extend(bufs)
        del _kept_buffers[:-_KEPT_BUFFERS]


def _fb_blocked_parts(node, edge, psi, shift, erange, node_off, edge_off, want_marginals, gw,
                      log_z, node_m, edge_m, Xe, We, gW, plan):
    """``_fb_blocked`` with the blocks in the parts of ``plan`` (``_block_plan``), run on the
    worker threads (``pymc_crf.threads``). Each part adds its shared-table and edge-feature
    sums into arrays of its own, added up here in part order. Each worker's lane buffers come
    from the ones kept from earlier calls (``_take_buffers``)."""
    order, lengths, B, n_blocked, Lbuf, bounds = plan
    K = node.shape[1]
    n_parts = len(bounds) - 1
    workers = min(get_num_threads(), n_parts)
    shared = edge.shape[0] == 1 and Xe.shape[0] == 0
    bufs = _take_buffers(workers, _block_sizes(K, B, Lbuf, shared)[1])
    maccs = np.zeros((n_parts, K, K))
    gWs = np.zeros((n_parts, *gW.shape))
    shared_sum = shared and want_marginals  # summed edge marginals: one array per part
    ems = np.zeros((n_parts, 1, K, K)) if shared_sum else None

    def part(p, w):
        _fb_blocks(node, edge, psi, shift, erange, node_off, edge_off, want_marginals, gw,
                   log_z, node_m, ems[p] if shared_sum else edge_m, Xe, We, gWs[p], maccs[p],
                   order, lengths, B, Lbuf, bounds[p], bounds[p + 1], bufs[w])

    try:
        run_parts(part, n_parts, workers)
    finally:
        _keep_buffers(bufs)
    macc = maccs[0]
    for p in range(1, n_parts):
        macc += maccs[p]
    for p in range(n_parts):
        gW += gWs[p]
        if shared_sum:
            edge_m += ems[p]
    _fb_rest(node, edge, psi, shift, erange, node_off, edge_off, want_marginals, gw, log_z,
             node_m, edge_m, Xe, We, gW, macc, order, lengths, n_blocked)


@njit(cache=True)
def _fb_outputs(node, edge, want_marginals):
    """Zeroed node and edge marginal outputs of forward-backward."""
    N, K = node.shape
    node_m = zeros_pages((N, K)) if want_marginals else np.zeros((0, K))
    if edge.shape[0] == 1 or not want_marginals:
        return node_m, np.zeros((1 if want_marginals else 0, K, K))
    # per-edge marginals: every entry is written (each edge lies on one chain), no zero-fill
    return node_m, empty_pages((edge.shape[0], K, K))


@njit(cache=True)
def _check_tables(node, edge, n_nodes, n_edges):
    """``check_potentials`` inside compiled models: the shapes of the tables against the batch
    (a wrong row count would read or write outside them) and no NaN or +inf entry."""
    K = node.shape[1]
    if node.shape[0] != n_nodes:
        raise ValueError("log Z: node log-potentials must have one row per node of the batch "
                         "(N, K); check the features' rows and the number of labels/classes")
    if K < 1:
        raise ValueError("log Z: need at least one label (K >= 1)")
    if (edge.shape[1] != K or edge.shape[2] != K
            or (edge.shape[0] != n_edges and edge.shape[0] != 1)):
        raise ValueError("log Z: edge log-potentials must have shape (E, K, K), or (1, K, K) "
                         "for a shared table, with the node tables' K")
    for table in (node.reshape(-1), edge.reshape(-1)):
        for i in range(table.size):
            if not table[i] < np.inf:  # NaN or +inf (-inf entries are forbidden labels)
                raise ValueError("log Z: log-potentials contain NaN or +inf")


@njit(cache=True)
def _forward_backward(node, edge, node_off, edge_off, want_marginals, gw):
    """Scaled forward-backward over the batch. Returns log Z (G,), node (N, K) and edge marginals
    ((E, K, K), or (1, K, K) summed over edges for a shared table).

    With a non-empty ``gw`` (G,), the marginals of graph g are multiplied by ``gw[g]``: this is the
    vector-Jacobian product of log Z, which a shared edge table needs inside the sum over edges.
    """
    G = node_off.shape[0] - 1
    log_z = np.empty(G)
    node_m, edge_m = _fb_outputs(node, edge, want_marginals)
    psi, shift, erange = _edge_tables(edge[:1])  # per-edge tables: made block by block
    if G > 1:
        no_features = np.zeros((0, 0))
        _fb_blocked(node, edge, psi, shift, erange, node_off, edge_off, want_marginals, gw, log_z,
                    node_m, edge_m, no_features, no_features, no_features)
    else:
        _fb_graphs(node, edge, psi, shift, erange, node_off, edge_off, np.arange(G),
                   want_marginals, gw, log_z, node_m, edge_m)
    return log_z, node_m, edge_m


# Batches with less forward-backward work than this (positions x K^2) run graph by graph
# (``_forward_backward_graphs``): they never compile the lane-block kernels, whose compilation
# (about 45 s of CPU) is most of a machine's first fit of a small model (docs/benchmarks.md, "Cold
# start"), while on such batches the lanes save well under a millisecond a pass. The smallest
# batches run in numpy, compiling nothing (``chain_small``).
_LANE_WORK = 1 << 18


def small_batch(n_nodes: int, n_labels: int | None) -> bool:
    """Whether a batch of ``n_nodes`` positions and ``n_labels`` labels runs graph by graph
    (False when the number of labels is not known)."""
    return n_labels is not None and n_nodes * n_labels * n_labels < _LANE_WORK


@njit(cache=True)
def _forward_backward_graphs(node, edge, node_off, edge_off, want_marginals, gw):
    """``_forward_backward`` one graph at a time (``_fb_graphs``), for small batches."""
    G = node_off.shape[0] - 1
    N, K = node.shape
    log_z = np.empty(G)
    node_m = np.zeros((N if want_marginals else 0, K))
    n_edge_m = 0 if not want_marginals else (1 if edge.shape[0] == 1 else edge.shape[0])
    edge_m = np.zeros((n_edge_m, K, K))
    psi, shift, erange = _edge_tables(edge[:1])
    _fb_graphs(node, edge, psi, shift, erange, node_off, edge_off, np.arange(G), want_marginals,
               gw, log_z, node_m, edge_m)
    return log_z, node_m, edge_m


@njit(cache=True)
def _fb_feature_graphs(node, Xe, We, node_off, edge_off, want_marginals, gw, log_z, node_m, gW):
    """``_fb_feature_graph`` of every graph in turn, into ``log_z``, ``node_m`` and ``gW``."""
    for g in range(node_off.shape[0] - 1):
        log_z[g] = _fb_feature_graph(node, Xe, We, node_off[g], node_off[g + 1] - node_off[g],
                                     edge_off[g], want_marginals,
                                     gw[g] if gw.shape[0] > 0 else 1.0, node_m, gW)


@njit(cache=True)
def _forward_backward_features_graphs(node, Xe, We, node_off, edge_off, want_marginals, gw):
    """``_forward_backward_features`` one graph at a time, for small batches."""
    N, K = node.shape
    log_z = np.empty(node_off.shape[0] - 1)
    node_m = np.zeros((N if want_marginals else 0, K))
    gW = np.zeros((We.shape[0], K * K))
    _fb_feature_graphs(node, Xe, We, node_off, edge_off, want_marginals, gw, log_z, node_m, gW)
    return log_z, node_m, gW


@njit(cache=True)
def _feature_outputs(node, We, G, want_marginals):
    """Outputs of the feature kernels (log Z, node marginals, expected edge features), and the
    all-zero shared table with its ``_edge_tables`` that the lane kernel is given in place of
    tables (read only by the exactness test's "forbidden" check)."""
    K = node.shape[1]
    node_m = zeros_pages((node.shape[0], K)) if want_marginals else np.zeros((0, K))
    zero = np.zeros((1, K, K))
    psi, shift, erange = _edge_tables(zero)
    return np.empty(G), node_m, np.zeros((We.shape[0], K * K)), zero, psi, shift, erange


@njit(cache=True)
def _forward_backward_features(node, Xe, We, node_off, edge_off, want_marginals, gw):
    """``_forward_backward`` of log-linear edge tables ``Xe @ We`` (Xe (E, Fe), We (Fe, K^2)),
    never formed whole. Returns log Z (G,), the node marginals (N, K) and the expected edge
    features ``sum_e Xe[e, f] mu_e`` (Fe, K^2), the marginals of graph g times ``gw[g]`` when
    ``gw`` is non-empty: the vector-Jacobian product of log Z in the node tables and in ``We``."""
    G = node_off.shape[0] - 1
    K = node.shape[1]
    log_z, node_m, gW, zero, psi, shift, erange = _feature_outputs(node, We, G, want_marginals)
    if G > 1 and Xe.shape[0] > 0:
        _fb_blocked(node, zero, psi, shift, erange, node_off, edge_off, want_marginals, gw,
                    log_z, node_m, np.zeros((0, K, K)), Xe, We, gW)
    else:  # one graph, or no edges (single-node chains): one chain at a time
        _fb_feature_graphs(node, Xe, We, node_off, edge_off, want_marginals, gw, log_z, node_m,
                           gW)
    return log_z, node_m, gW


@njit(cache=True)
def _splits(node_off, K, per_edge):
    """Whether ``_block_plan`` splits the batch's blocks into several parts (never for one
    graph, which ``_forward_backward`` runs by itself)."""
    return node_off.shape[0] > 2 and _block_plan(node_off, K, per_edge)[5].shape[0] > 2


def _parts_plan(node_off, K, per_edge):
    """``_block_plan`` of a batch whose blocks split into several parts, else None."""
    return _block_plan(node_off, K, per_edge) if _splits(node_off, K, per_edge) else None


def forward_backward(node, edge, node_off, edge_off, want_marginals, gw):
    """``_forward_backward``, with a large batch's lane blocks run on the worker threads (a
    small batch graph by graph, the smallest in numpy)."""
    if is_small(node_off, node.shape[1]):
        return forward_backward_small(node, edge, node_off, edge_off, want_marginals, gw)
    if small_batch(node.shape[0], node.shape[1]):
        first_use_notice(_forward_backward_graphs, "the chain engine's kernels")
        return _forward_backward_graphs(node, edge, node_off, edge_off, want_marginals, gw)
    first_use_notice(_forward_backward, "the chain engine's lane kernels")
    plan = _parts_plan(node_off, node.shape[1], edge.shape[0] != 1)
    if plan is None:
        return _forward_backward(node, edge, node_off, edge_off, want_marginals, gw)
    log_z = np.empty(node_off.shape[0] - 1)
    node_m, edge_m = _fb_outputs(node, edge, want_marginals)
    psi, shift, erange = _edge_tables(edge[:1])
    nf = np.zeros((0, 0))
    _fb_blocked_parts(node, edge, psi, shift, erange, node_off, edge_off, want_marginals, gw,
                      log_z, node_m, edge_m, nf, nf, nf, plan)
    return log_z, node_m, edge_m


def forward_backward_features(node, Xe, We, node_off, edge_off, want_marginals, gw):
    """``_forward_backward_features``, with a large batch's lane blocks run on the worker
    threads (a small batch graph by graph)."""
    K = node.shape[1]
    if is_small(node_off, K):
        E = Xe.shape[0]
        edge = (Xe @ We).reshape(E, K, K) if E else np.zeros((0, K, K))
        if not np.isfinite(edge).all():  # as every kernel path refuses them (-inf included)
            raise ValueError(_OVERFLOW)
        log_z, node_m, edge_m = forward_backward_small(node, edge, node_off, edge_off,
                                                       want_marginals, gw)
        gW = (Xe.T @ edge_m.reshape(E, K * K) if want_marginals and E
              else np.zeros((We.shape[0], K * K)))
        return log_z, node_m, np.ascontiguousarray(gW)
    if small_batch(node.shape[0], K):
        first_use_notice(_forward_backward_features_graphs, "the chain engine's kernels")
        return _forward_backward_features_graphs(node, Xe, We, node_off, edge_off, want_marginals,
                                                 gw)
    first_use_notice(_forward_backward_features, "the chain engine's lane kernels")
    plan = _parts_plan(node_off, K, True) if Xe.shape[0] > 0 else None
    if plan is None:
        return _forward_backward_features(node, Xe, We, node_off, edge_off, want_marginals, gw)
    log_z, node_m, gW, zero, psi, shift, erange = _feature_outputs(
        node, We, node_off.shape[0] - 1, want_marginals)
    _fb_blocked_parts(node, zero, psi, shift, erange, node_off, edge_off, want_marginals, gw,
                      log_z, node_m, np.zeros((0, K, K)), Xe, We, gW, plan)
    return log_z, node_m, gW


# Compiled PyTensor functions call the kernels from numba: a batch that splits into parts goes
# to the Python drivers above through object mode (a hand-off of microseconds, against the
# milliseconds of such a batch), the others stay in compiled code.
@njit(cache=True)
def _fb_any(node, edge, node_off, edge_off, want_marginals, gw):
    """``forward_backward`` from compiled code."""
    if _splits(node_off, node.shape[1], edge.shape[0] != 1):
        with objmode(lz="float64[::1]", nm="float64[:, ::1]", em="float64[:, :, ::1]"):
            lz, nm, em = forward_backward(node, edge, node_off, edge_off, want_marginals, gw)
        return lz, nm, em
    return _forward_backward(node, edge, node_off, edge_off, want_marginals, gw)


@njit(cache=True)
def _fb_features_any(node, Xe, We, node_off, edge_off, want_marginals, gw):
    """``forward_backward_features`` from compiled code."""
    if Xe.shape[0] > 0 and _splits(node_off, node.shape[1], True):
        with objmode(lz="float64[::1]", nm="float64[:, ::1]", gW="float64[:, ::1]"):
            lz, nm, gW = forward_backward_features(node, Xe, We, node_off, edge_off,
                                                   want_marginals, gw)
        return lz, nm, gW
    return _forward_backward_features(node, Xe, We, node_off, edge_off, want_marginals, gw)


@njit(cache=True)
def _viterbi(node, edge, node_off, edge_off):
    """MAP labels (N,) and their scores (G,) of every chain (``log_forward`` in the max-product
    semiring, then the back-pointers)."""
    N, K = node.shape
    G = node_off.shape[0] - 1
    shared = edge.shape[0] == 1
    labels = np.empty(N, np.int64)
    score = np.empty(G)
    L = 1
    for g in range(G):
        L = max(L, node_off[g + 1] - node_off[g])
    delta = np.empty((L, K))
    back = np.zeros((L, K), np.int64)
    _, no2, no3 = unused_arrays()
    for g in range(G):
        lo = node_off[g]
        n = node_off[g + 1] - lo
        for j in range(K):
            delta[0, j] = node[lo, j]
        log_forward(node, lo, n, edge, edge_off[g], shared, MAX, delta, back, no2, no3, no2)
        arg = np.argmax(delta[n - 1])
        score[g] = delta[n - 1, arg]
        labels[lo + n - 1] = arg
        for t in range(n - 1, 0, -1):
            arg = back[t, arg]
            labels[lo + t - 1] = arg
    return labels, score


@njit(cache=True)
def _log_forward(node, edge, node_off, edge_off):
    """Log-space forward messages (N, K) for sampling (robust to any table range)."""
    N, K = node.shape
    shared = edge.shape[0] == 1
    la = np.empty((N, K))
    noi, no2, no3 = unused_arrays()
    for g in range(node_off.shape[0] - 1):
        lo = node_off[g]
        n = node_off[g + 1] - lo
        la_g = np.empty((n, K))
        for j in range(K):
            la_g[0, j] = node[lo, j]
        log_forward(node, lo, n, edge, edge_off[g], shared, SUM, la_g, noi, no2, no3,
                    no2)
        la[lo:lo + n] = la_g
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

    Forward-mode differentiation of the log-space recursions (``log_forward`` / ``log_backward``
    in the tangent semiring): with A_t = log alpha_t and B_t = log beta_t,
    dA_t(j) = vn_t(j) + sum_i w_ij (dA_{t-1}(i) + ve(i,j)) where w_ij is the backward-looking
    posterior p(t_{t-1}=i | t_t=j, past); likewise for dB. Then dmu_t = mu_t (dA_t + dB_t - dlogZ)
    and dxi = xi (dA + ve + vn + dB - dlogZ).
    """
    N, K = node.shape
    shared = edge.shape[0] == 1
    out_n = zeros_pages((N, K))
    out_e = zeros_pages((1 if shared else edge.shape[0], K, K))
    noi = unused_arrays()[0]
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
        log_forward(node, lo, n, edge, elo, shared, TANGENT, la, noi, vn, ve, da)
        log_backward(node, lo, n, edge, elo, shared, TANGENT, lb, vn, ve, db)
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


def _closure_constants(batch: GraphBatch):
    """What the njit closures of ``ChainEngine.numba_kernels`` close over: copies of the
    batch's node and edge offsets and its node, edge and graph counts."""
    return (batch.node_offsets.copy(), batch.edge_offsets.copy(), batch.n_total_nodes,
            batch.n_edges, batch.n_graphs)


@njit(cache=True)
def _check_output_gradient(g, n_graphs):
    if g.shape[0] != n_graphs:
        raise ValueError("log Z gradient: the output gradient must have one entry per graph")


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

    def check_supported(self, batch: GraphBatch) -> None:
        """Raise a ValueError naming the first graph that is not a canonical chain."""
        if not batch.is_chain:
            bad = int(np.flatnonzero(batch.kinds != "chain")[0])
            raise ValueError(f"chain engine: graph {bad} ({batch.kinds[bad]}) is not a canonical "
                             "chain (edges (0,1), (1,2), ... in order; GraphBatch.chains builds "
                             "them); use 'junction_tree' or 'auto'")

    def _check(self, batch, node_logpot, edge_logpot):
        self.check_supported(batch)
        return check_potentials(batch, node_logpot, edge_logpot)

    def log_partition(self, batch, node_logpot, edge_logpot):
        node, edge = self._check(batch, node_logpot, edge_logpot)
        return forward_backward(node, edge, batch.node_offsets, batch.edge_offsets, False,
                                 _NO_WEIGHTS)[0]

    def marginals(self, batch, node_logpot, edge_logpot):
        node, edge = self._check(batch, node_logpot, edge_logpot)
        return Marginals(*forward_backward(node, edge, batch.node_offsets, batch.edge_offsets,
                                            True, _NO_WEIGHTS))

    def map_assignment(self, batch, node_logpot, edge_logpot):
        node, edge = self._check(batch, node_logpot, edge_logpot)
        return MapResult(*_viterbi(node, edge, batch.node_offsets, batch.edge_offsets))

    def sample(self, batch, node_logpot, edge_logpot, n_samples, rng=None):
        node, edge = self._check(batch, node_logpot, edge_logpot)
        la = _log_forward(node, edge, batch.node_offsets, batch.edge_offsets)
        n_samples = whole_number(n_samples, "n_samples", minimum=0)
        u = generator(rng, "rng").random((n_samples, batch.n_total_nodes))
        return _ffbs(la, edge, batch.node_offsets, batch.edge_offsets, u)

    def covariance_vector_product(self, batch, node_logpot, edge_logpot, v_node, v_edge):
        node, edge = self._check(batch, node_logpot, edge_logpot)
        vn = np.ascontiguousarray(v_node, dtype=np.float64)
        ve = np.ascontiguousarray(v_edge, dtype=np.float64)
        if vn.shape != node.shape or ve.shape != edge.shape:
            raise ValueError(f"direction shapes {vn.shape}, {ve.shape} do not match the tables "
                             f"{node.shape}, {edge.shape}")
        return _tangent_fb(node, edge, batch.node_offsets, batch.edge_offsets, vn, ve)

    def numba_kernels(self, batch: GraphBatch, n_labels: int | None = None):
        """Njit closures ``(log_z(node, edge), vjp(node, edge, g))`` over this batch's offsets;
        ``vjp`` returns log Z and the marginals weighted by ``g`` from one pass. With a known
        ``n_labels`` that makes the batch small (``small_batch``), they run graph by graph and
        never compile the lane-block kernels.

        Used by the PyTensor Ops' numba implementation so compiled models call the kernels directly.
        """
        if not batch.is_chain:
            return None
        no, eo, n_nodes, n_edges, n_graphs = _closure_constants(batch)
        empty = np.zeros(0)
        fb = (_forward_backward_graphs if small_batch(batch.n_total_nodes, n_labels)
              else _fb_any)

        @njit
        def log_z(node, edge):
            _check_tables(node, edge, n_nodes, n_edges)
            return fb(node, edge, no, eo, False, empty)[0]

        @njit
        def vjp(node, edge, g):
            _check_tables(node, edge, n_nodes, n_edges)
            _check_output_gradient(g, n_graphs)
            return fb(node, edge, no, eo, True, g)

        return log_z, vjp

    def feature_numba_kernels(self, batch: GraphBatch, n_labels: int | None = None):
        """Njit closures ``(log_z(node, x, w), vjp(node, x, w, g))`` of
        :meth:`log_z_and_feature_marginals` over this batch's offsets (``w`` (Fe, K^2)), for the
        edge-feature Ops' numba implementation (graph by graph for a small batch, as
        :meth:`numba_kernels`)."""
        if not batch.is_chain:
            return None
        no, eo, n_nodes, n_edges, n_graphs = _closure_constants(batch)
        empty = np.zeros(0)
        fb = (_forward_backward_features_graphs if small_batch(batch.n_total_nodes, n_labels)
              else _fb_features_any)

        @njit
        def check(node, x, w):
            _check_tables(node, np.zeros((1, node.shape[1], node.shape[1])), n_nodes, n_edges)
            if x.shape[0] != n_edges or w.shape[0] != x.shape[1]:
                raise ValueError("log Z: edge features must be (E, Fe) with one row per edge "
                                 "of the batch, and edge weights (Fe, K^2)")
            if w.shape[1] != node.shape[1] * node.shape[1]:
                raise ValueError("log Z: edge weights must be (Fe, K^2) with the node tables' K")
            for v in (x.reshape(-1), w.reshape(-1)):
                for i in range(v.size):
                    if not np.abs(v[i]) < np.inf:
                        raise ValueError("log Z: edge features or weights contain NaN or inf")

        @njit
        def log_z(node, x, w):
            check(node, x, w)
            return fb(node, x, w, no, eo, False, empty)[0]

        @njit
        def vjp(node, x, w, g):
            check(node, x, w)
            _check_output_gradient(g, n_graphs)
            return fb(node, x, w, no, eo, True, g)

        return log_z, vjp

    def log_z_and_feature_marginals(self, batch, node_logpot, edge_features, edge_weights,
                                    graph_weights=None):
        """``Engine.log_z_and_feature_marginals`` without the (E, K, K) tables: for dense edge
        features the lane kernel forms each block's tables from the features and adds the
        expected edge features up as it goes (sparse ones take the generic version)."""
        if is_sparse(edge_features):
            return super().log_z_and_feature_marginals(batch, node_logpot, edge_features,
                                                       edge_weights, graph_weights)
        K = np.shape(node_logpot)[-1]
        log_z, gn, gW = self._feature_pass(batch, node_logpot, edge_features, edge_weights,
                                           graph_weights, True)
        return log_z, gn, gW.reshape(-1, K, K)

    def feature_log_partition(self, batch, node_logpot, edge_features, edge_weights):
        """``Engine.feature_log_partition`` by the lane kernel's forward pass alone (sparse
        features take the generic version)."""
        if is_sparse(edge_features):
            return super().feature_log_partition(batch, node_logpot, edge_features, edge_weights)
        return self._feature_pass(batch, node_logpot, edge_features, edge_weights, None,
                                  False)[0]

    def _feature_pass(self, batch, node_logpot, edge_features, edge_weights, graph_weights,
                      want_marginals):
        """The checked inputs through ``_forward_backward_features``."""
        self.check_supported(batch)
        node, Xe, We, gw = check_feature_tables(batch, node_logpot, edge_features, edge_weights,
                                                graph_weights)
        Xe = np.ascontiguousarray(Xe, dtype=np.float64)
        return forward_backward_features(node, Xe, We, batch.node_offsets, batch.edge_offsets,
                                          want_marginals, gw)

    def log_z_and_weighted_marginals(self, batch, node_logpot, edge_logpot, graph_weights):
        """log Z and the marginals of graph g times ``graph_weights[g]`` (the VJP of log Z),
        one pass."""
        node, edge = self._check(batch, node_logpot, edge_logpot)
        gw = np.ascontiguousarray(graph_weights, dtype=np.float64)
        return forward_backward(node, edge, batch.node_offsets, batch.edge_offsets, True, gw)
