"""Exact tilted moments of one CRF term under a Gaussian, in the term's y-space.

A term is a mixture over label configurations ``c`` of single-direction potentials
``g(y_c)`` with weights ``pi_c``: the numerator term g_k is one configuration (the observed labels)
and the denominator term f_k of Qi, Szummer & Minka 2005, eq. (30) / thesis eq. (5.32) mixes all K^2 (edge) or
K (node) configurations with the cavity label beliefs ``q^{\\k}(t_i) q^{\\k}(t_j)``.

For one direction with cavity ``y_c ~ N(mu, s2)``, ``Z_c = E[g(y_c)]`` and its first two
derivatives in ``mu`` come from the potential's own definition
(:func:`pymc_crf.potentials.gaussian_moments`; exact for the robust probit, Qi, Szummer & Minka 2005, eqs.
(41)-(48), and the log-linear potential).

The mixture's moments follow in closed form (Qi, Szummer & Minka 2005, eqs. (35)-(40), (49)): with
responsibilities ``r_c = pi_c Z_c / Z`` (the new joint label belief, Qi, Szummer & Minka 2005, eq. (49)), ``g
= r * alpha`` and
``M = diag(r (gamma + alpha^2)) - g g^T``, the tilted distribution in y-space has mean
``my + S g`` and covariance ``S + S M S``; i.e. Qi, Szummer & Minka 2005, eqs. (33)-(34) with ``c = g`` and
``D = -M``, obtained without inverting ``S``.
"""

from __future__ import annotations

import math

import numpy as np

from pymc_crf.kernel_cache import njit
from pymc_crf.potentials import gaussian_moments

__all__ = ["mixture_moments"]


@njit(cache=True)
def mixture_moments(S, my, log_pi, code, eps):
    """Tilted moments of ``sum_c pi_c g(y_c) N(y; my, S)``.

    ``code`` is the potential's :attr:`~pymc_crf.potentials.Potential.code`. Returns
    ``(log Z, r, g, M)``: the log normaliser, responsibilities ``r`` (n_c,), and the
    mean/covariance corrections: tilted mean ``my + S g``, tilted covariance ``S + S M S``.
    """
    n = my.shape[0]
    lz = np.empty(n)
    al = np.empty(n)
    ga = np.empty(n)
    for c in range(n):
        lz[c], al[c], ga[c] = gaussian_moments(code, my[c], S[c, c], eps)
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
