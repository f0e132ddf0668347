"""Stick-breaking beta-process prior of Luo, Sun & Zhao, eq. (5) (Paisley, Carin & Blei 2011) and its VI
terms.

Atom ``k`` (a hidden state) has weight ``V_k exp(-T_k)`` with ``V_k ~ Beta(1, alpha)``,
``T_k ~ Gamma(d_k - 1, alpha)`` (shape, rate; ``T_k = 0`` when ``d_k = 1``) and ``d_k`` the
stick-breaking round that produced the atom, each round contributing ``Poisson(gamma)`` atoms.
Every sequence ``n`` switches state ``k`` on with ``z_nk ~ Bernoulli(V_k exp(-T_k))`` (Luo, Sun & Zhao, eq.
(6)).

Variational factors (Luo, Sun & Zhao, eq. (20)): ``q(V_k) = Beta(a_k, b_k)``, ``q(T_k) = Gamma(u_k, v_k)``,
``q(d_k) = Categorical(psi_k)`` over rounds ``1..R``, ``q(z_nk) = Bernoulli(rho_nk)``.

Decisions (the paper defers these terms to [20] without formulas):

* ``alpha`` and ``gamma`` are fixed hyperparameters (the brief lists no q(alpha), q(gamma)).
* Prior of the round of atom ``k`` under truncation at ``K`` atoms and ``R`` rounds: with
  ``S_r = C_1 + ... + C_r ~ Poisson(r gamma)``, atom ``k`` (1-based, atoms ordered by round) is in
  round ``r`` iff ``S_{r-1} < k <= S_r``, so ``p(d_k = r) = P(S_{r-1} <= k-1) - P(S_r <= k-1)``;
  round ``R`` takes the remaining mass ``P(S_{R-1} <= k-1)``.
* ``E log(1 - V e^{-T})`` uses the Taylor series of Luo, Sun & Zhao, eq. (25) truncated at ``M`` terms, with
  ``E[V^m] = prod_j (a+j)/(a+b+j)`` and ``E[e^{-mT}] = (v / (v + m))^u``.
* ``T_k`` is unused when ``d_k = 1``; there we let its "prior" equal ``q(T_k)`` (a dummy variable
  that contributes nothing), so the bound has ``-sum_{r>1} psi_kr KL(q(T_k) || Gamma(r-1, alpha))``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy.special import betaln, digamma, gammaln, logsumexp, polygamma
from scipy.stats import poisson

from pymc_crf.fitters.optimise import find_map

__all__ = ["BetaProcessFactors", "log_prior_rounds", "bp_terms", "update_rounds", "update_v_t",
           "expected_usage", "kl_beta", "kl_gamma", "bernoulli_entropy"]


@dataclass
class BetaProcessFactors:
    """Parameters of q(V), q(T), q(d) for K atoms and R rounds."""

    a: np.ndarray    # (K,)
    b: np.ndarray    # (K,)
    u: np.ndarray    # (K,)
    v: np.ndarray    # (K,)
    psi: np.ndarray  # (K, R), rows sum to one

    def copy(self) -> BetaProcessFactors:
        return BetaProcessFactors(*(np.array(x, copy=True) for x in (self.a, self.b, self.u, self.v,
                                                               self.psi)))


def kl_beta(a, b, a0, b0):
    """KL(Beta(a, b) || Beta(a0, b0)), elementwise."""
    return (betaln(a0, b0) - betaln(a, b) + (a - a0) * digamma(a) + (b - b0) * digamma(b)
            + (a0 - a + b0 - b) * digamma(a + b))


def kl_gamma(u, v, u0, v0):
    """KL(Gamma(u, rate v) || Gamma(u0, rate v0)), elementwise."""
    return ((u - u0) * digamma(u) - gammaln(u) + gammaln(u0) + u0 * (np.log(v) - np.log(v0))
            + u * (v0 - v) / v)


def bernoulli_entropy(rho):
    r = np.clip(rho, 1e-300, 1.0)
    s = np.clip(1.0 - rho, 1e-300, 1.0)
    return -(rho * np.log(r) + (1.0 - rho) * np.log(s))


def log_prior_rounds(K: int, R: int, gamma: float) -> np.ndarray:
    """``log p(d_k = r | gamma)`` for atoms k = 1..K and rounds r = 1..R, shape (K, R)."""
    k = np.arange(K)[:, None]                    # k - 1
    r = np.arange(R + 1)[None, :]                # r = 0..R
    cdf = poisson.cdf(k, r * gamma)              # P(S_r <= k - 1); S_0 = 0 so column 0 is 1
    p = cdf[:, :-1] - cdf[:, 1:]
    p[:, -1] = cdf[:, R - 1]                     # round R lumps every later round
    return np.log(np.maximum(p, 1e-300))


def _series(a, b, u, v, M):
    """Taylor approximation of E log(1 - V exp(-T)) (Luo, Sun & Zhao, eq. (25)), shape (K,)."""
    m = np.arange(1, M + 1)[None, :]
    a_, b_, u_, v_ = (x[:, None] for x in (a, b, u, v))
    log_ev = gammaln(a_ + m) - gammaln(a_) - gammaln(a_ + b_ + m) + gammaln(a_ + b_)
    log_et = u_ * (np.log(v_) - np.log(v_ + m))
    return -np.sum(np.exp(log_ev + log_et) / m, axis=1)


def _expectations(f: BetaProcessFactors, M: int):
    ab = digamma(f.a + f.b)
    elog_v = digamma(f.a) - ab
    elog_1mv = digamma(f.b) - ab
    e_t = f.u / f.v
    series = _series(f.a, f.b, f.u, f.v, M)
    # per round r: E log p(z=1 | d=r) and E log p(z=0 | d=r), shape (K, R)
    R = f.psi.shape[1]
    l1 = np.repeat((elog_v - e_t)[:, None], R, axis=1)
    l1[:, 0] = elog_v
    l0 = np.repeat(series[:, None], R, axis=1)
    l0[:, 0] = elog_1mv
    return l1, l0


def _kl_t_rounds(f: BetaProcessFactors, alpha: float) -> np.ndarray:
    """KL(q(T_k) || Gamma(r - 1, alpha)) for r = 2..R (column 0, r = 1, is zero), (K, R)."""
    R = f.psi.shape[1]
    out = np.zeros((f.a.shape[0], R))
    for r in range(2, R + 1):
        out[:, r - 1] = kl_gamma(f.u, f.v, float(r - 1), alpha)
    return out


def bp_terms(f: BetaProcessFactors, rho: np.ndarray, alpha: float, log_pd: np.ndarray, M: int) -> float:
    """The beta-process part of the bound: ``E log p(z, V, T, d) - E log q(z, V, T, d)``.

    ``rho`` (G, K) holds ``q(z_nk = 1)`` of the sequences in the bound.
    """
    l1, l0 = _expectations(f, M)
    n1 = rho.sum(axis=0)
    n0 = (1.0 - rho).sum(axis=0)
    ez = np.sum(f.psi * (n1[:, None] * l1 + n0[:, None] * l0))
    h_z = bernoulli_entropy(rho).sum()
    kl_v = kl_beta(f.a, f.b, 1.0, alpha).sum()
    kl_t = np.sum(f.psi * _kl_t_rounds(f, alpha))
    psi = np.clip(f.psi, 1e-300, 1.0)
    d_terms = np.sum(f.psi * (log_pd - np.log(psi)))
    return float(ez + h_z - kl_v - kl_t + d_terms)


def z_natural_terms(f: BetaProcessFactors, M: int) -> np.ndarray:
    """``E_q[log p(z_k=1 | .)] - E_q[log p(z_k=0 | .)]`` per atom (K,): the prior logit of Luo, Sun & Zhao
    eq. (24) (the data term ``log f1 - log f0`` is added by the caller)."""
    l1, l0 = _expectations(f, M)
    return np.sum(f.psi * (l1 - l0), axis=1)


def update_rounds(f: BetaProcessFactors, rho: np.ndarray, alpha: float, log_pd: np.ndarray,
                  M: int) -> BetaProcessFactors:
    """Exact coordinate update of q(d_k) (a categorical over rounds)."""
    l1, l0 = _expectations(f, M)
    n1 = rho.sum(axis=0)[:, None]
    n0 = (1.0 - rho).sum(axis=0)[:, None]
    logits = log_pd - _kl_t_rounds(f, alpha) + n1 * l1 + n0 * l0
    out = f.copy()
    out.psi = np.exp(logits - logsumexp(logits, axis=1, keepdims=True))
    return out


def _v_t_gradient(f: BetaProcessFactors, rho: np.ndarray, alpha: float, M: int) -> np.ndarray:
    """Gradient of :func:`bp_terms` in ``(a, b, u, v)`` of q(V), q(T), (4 K,).

    Only the expected log-priors of z (with the Taylor term of Luo, Sun & Zhao, eq. (25)) and the
    KL terms of V and T depend on these parameters; ``psi_1 = q(d_k = 1)`` and ``psi_> = 1 - psi_1``
    weigh the round-1 terms (``E log V``, ``E log(1 - V)``) against the later ones
    (``E log V - E T``, the series)::

        d/d(.) [n1 (E log V - psi_> E T) + n0 (psi_1 E log(1 - V) + psi_> series)
                - KL(q(V) || Beta(1, alpha)) - sum_r psi_r KL(q(T) || Gamma(r - 1, alpha))]
    """
    a, b, u, v = f.a, f.b, f.u, f.v
    n1 = rho.sum(axis=0)
    n0 = (1.0 - rho).sum(axis=0)
    p1, pl = f.psi[:, 0], f.psi[:, 1:].sum(axis=1)
    tab, ta, tb = polygamma(1, a + b), polygamma(1, a), polygamma(1, b)
    # the series -sum_m E[V^m] E[exp(-m T)] / m and its log-term derivatives
    m = np.arange(1, M + 1)[None, :]
    a_, b_, u_, v_ = (x[:, None] for x in (a, b, u, v))
    t = np.exp(gammaln(a_ + m) - gammaln(a_) - gammaln(a_ + b_ + m) + gammaln(a_ + b_)
               + u_ * (np.log(v_) - np.log(v_ + m))) / m
    dab = digamma(a_ + b_) - digamma(a_ + b_ + m)
    ds_a = -np.sum(t * (digamma(a_ + m) - digamma(a_) + dab), axis=1)
    ds_b = -np.sum(t * dab, axis=1)
    ds_u = -np.sum(t * (np.log(v_) - np.log(v_ + m)), axis=1)
    ds_v = -np.sum(t * u_ * (1.0 / v_ - 1.0 / (v_ + m)), axis=1)
    kl_common = (1.0 + alpha - a - b) * tab                     # KL(Beta(a, b) || Beta(1, alpha))
    g_a = n1 * (ta - tab) - n0 * p1 * tab + n0 * pl * ds_a - ((a - 1.0) * ta + kl_common)
    g_b = -n1 * tab + n0 * p1 * (tb - tab) + n0 * pl * ds_b - ((b - alpha) * tb + kl_common)
    R = f.psi.shape[1]
    u0 = np.arange(1, R, dtype=float)[None, :]                  # Gamma(r - 1, alpha), r = 2..R
    dkl_u = np.sum(f.psi[:, 1:] * ((u[:, None] - u0) * polygamma(1, u)[:, None]
                                   + alpha / v[:, None] - 1.0), axis=1)
    dkl_v = np.sum(f.psi[:, 1:] * (u0 / v[:, None] - u[:, None] * alpha / v[:, None] ** 2),
                   axis=1)
    g_u = -n1 * pl / v + n0 * pl * ds_u - dkl_u
    g_v = n1 * pl * u / v ** 2 + n0 * pl * ds_v - dkl_v
    return np.concatenate([g_a, g_b, g_u, g_v])


def update_v_t(f: BetaProcessFactors, rho: np.ndarray, alpha: float, log_pd: np.ndarray,
               M: int, maxiter: int = 50) -> BetaProcessFactors:
    """Update q(V_k), q(T_k) by maximising the bound numerically (no closed form: the z = 0 term
    is the Taylor series): L-BFGS-B through :func:`~pymc_crf.fitters.optimise.find_map` over the
    log-parameters, with the gradient of :func:`_v_t_gradient` and scipy's default tolerances;
    the old factors are kept if not beaten."""
    K = f.a.shape[0]

    def unpack(x):
        g = f.copy()
        ex = np.exp(np.clip(x, -20.0, 20.0))
        g.a, g.b, g.u, g.v = ex[:K], ex[K:2 * K], ex[2 * K:3 * K], ex[3 * K:]
        return g

    def neg(x):
        g = unpack(x)
        val = bp_terms(g, rho, alpha, log_pd, M)
        if not np.isfinite(val):
            return 1e300, np.zeros_like(x)
        # d/dx of a function of exp(x): the parameter times its gradient
        return -val, -np.exp(x) * _v_t_gradient(g, rho, alpha, M)

    x0 = np.log(np.concatenate([f.a, f.b, f.u, f.v]))
    f0 = neg(x0)[0]
    x, diag = find_map(neg, x0, rule="strict", maxiter=maxiter, gtol=SCIPY_GTOL, ftol=SCIPY_FTOL,
                       bounds=[(-10.0, 10.0)] * (4 * K), warn=False)
    return unpack(x) if diag.objective < f0 else f


#: scipy's L-BFGS-B default tolerances, those of the inner optimisations of the fit (the theta
#: step and the q(V), q(T) step)
SCIPY_GTOL, SCIPY_FTOL = 1e-5, 2.220446049250313e-09


def expected_usage(f: BetaProcessFactors) -> np.ndarray:
    """Prior-predictive ``E_q[V_k exp(-T_k)]`` = p(z_k = 1) for a new sequence, (K,)."""
    ev = f.a / (f.a + f.b)
    e_exp_t = (f.v / (f.v + 1.0)) ** f.u
    p1 = f.psi[:, 0]
    return ev * (p1 + (1.0 - p1) * e_exp_t)
