"""Exact tilted moments of one CRF term under a Gaussian, in the term's y-space.

A term is a mixture over label configurations ``c`` of single-direction potentials
``g(y_c)`` with weights ``pi_c``: the numerator term g_k is one configuration (the observed labels)
and the denominator term f_k of 000 eq. (30) / thesis eq. (5.32) mixes all K^2 (edge) or K (node)
configurations with the cavity label beliefs ``q^{\\k}(t_i) q^{\\k}(t_j)``.

For one direction with cavity ``y_c ~ N(mu, s2)``:

* robust probit ``g = eps + (1 - 2 eps) Phi(y)`` (000 eq. (4)): ``Z = eps + (1 - 2 eps) Phi(z)``,
  ``z = mu / sqrt(1 + s2)`` (000 eqs. (41), (45)); ``alpha = d log Z / d mu`` is 000 eq. (42)'s
  ``rho`` -- note eq. (42) as printed reads ``(1 - 2 eps N(z))``; the derivative is
  ``(1 - 2 eps) N(z)``, used here; ``gamma = d^2 log Z / d mu^2 = -alpha (alpha + mu / (1 + s2))``
  (000 eq. (48));
* log-linear ``g = exp(y)`` (000 eq. (3)): ``Z = exp(mu + s2 / 2)`` (lognormal mean), ``alpha = 1``,
  ``gamma = 0`` -- exact as well.

The mixture's moments follow in closed form (000 eqs. (35)-(40), (49)): with responsibilities
``r_c = pi_c Z_c / Z`` (the new joint label belief, 000 eq. (49)), ``g = r * alpha`` and
``M = diag(r (gamma + alpha^2)) - g g^T``, the tilted distribution in y-space has mean
``my + S g`` and covariance ``S + S M S``; i.e. 000 eqs. (33)-(34) with ``c = g`` and ``D = -M``,
obtained without inverting ``S``.
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit

__all__ = ["PROBIT", "LOGLINEAR", "log_ndtr", "direction_moments", "mixture_moments"]

PROBIT, LOGLINEAR = 0, 1
_LOG_SQRT_2PI = 0.5 * math.log(2.0 * math.pi)
_SQRT1_2 = 1.0 / math.sqrt(2.0)


@njit(cache=True)
def log_ndtr(z):
    """``log Phi(z)``, accurate in both tails (asymptotic Mills-ratio series below -20)."""
    if z > 5.0:
        return math.log1p(-0.5 * math.erfc(z * _SQRT1_2))
    if z > -20.0:
        return math.log(0.5 * math.erfc(-z * _SQRT1_2))
    # Phi(z) = N(z)/(-z) * (1 - 1/z^2 + 3/z^4 - 15/z^6 + ...), relative error < 1e-9 here
    z2 = z * z
    series = 1.0 - 1.0 / z2 + 3.0 / (z2 * z2) - 15.0 / (z2 * z2 * z2)
    return -0.5 * z2 - _LOG_SQRT_2PI - math.log(-z) + math.log(series)


@njit(cache=True)
def direction_moments(mu, s2, potential, eps):
    """``(log Z, alpha, gamma)`` of ``E[g(y)]`` for ``y ~ N(mu, s2)`` (see module docstring)."""
    if potential == LOGLINEAR:
        return mu + 0.5 * s2, 1.0, 0.0
    sd = math.sqrt(1.0 + s2)
    z = mu / sd
    lphi = log_ndtr(z)
    lpdf = -0.5 * z * z - _LOG_SQRT_2PI
    if eps > 0.0:
        a = math.log(eps)
        b = math.log1p(-2.0 * eps) + lphi
        hi = max(a, b)
        logz = hi + math.log(math.exp(a - hi) + math.exp(b - hi))
        alpha = math.exp(math.log1p(-2.0 * eps) + lpdf - logz) / sd
    else:
        logz = lphi
        alpha = math.exp(lpdf - lphi) / sd
    gamma = -alpha * (alpha + mu / (1.0 + s2))
    return logz, alpha, gamma


@njit(cache=True)
def mixture_moments(S, my, log_pi, potential, eps):
    """Tilted moments of ``sum_c pi_c g(y_c) N(y; my, S)``.

    Returns ``(log Z, r, g, M)``: the log normaliser, responsibilities ``r`` (n_c,), and the
    mean/covariance corrections: tilted mean ``my + S g``, tilted covariance ``S + S M S``.
    """
    n = my.shape[0]
    lz = np.empty(n)
    al = np.empty(n)
    ga = np.empty(n)
    for c in range(n):
        lz[c], al[c], ga[c] = direction_moments(my[c], S[c, c], potential, eps)
    w = log_pi + lz
    hi = -np.inf
    for c in range(n):
        if w[c] > hi:
            hi = w[c]
    r = np.exp(w - hi)
    tot = r.sum()
    r /= tot
    log_z = hi + math.log(tot)
    g = r * al
    M = -np.outer(g, g)
    for c in range(n):
        M[c, c] += r[c] * (ga[c] + al[c] * al[c])
    return log_z, r, g, M
