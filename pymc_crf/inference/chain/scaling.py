"""What every scaled forward-backward kernel shares: the exp, the shifted tables, the test.

Forward-backward with per-step scaling (Rabiner 1989, eqs. (91)-(92)) exponentiates each node
row and edge table once after subtracting its maximum and renormalises the forward messages at
every step, so no exp of an unbounded score is taken. Each step is checked (``_threshold``, with
the proof above it) so that the result equals the log-space recursion to rounding; a chain that
fails the check is recomputed in log space (``log_space``).
"""

from __future__ import annotations

import numpy as np

from pymc_crf.kernel_cache import njit

# exp of non-positive arguments, vectorisable (numba may lack SVML, and libm's scalar exp keeps
# the loop from vectorising): Cody-Waite reduction x = n ln2 + r, |r| <= ln2/2, a degree-13 Taylor polynomial
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
    _tables_into(edge, np.int64(0), n_tab, psi, shift, erange, np.empty(n_tab * K * K),
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
