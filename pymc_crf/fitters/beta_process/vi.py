"""Mean-field variational EM for the BP-HCRF (Luo, Sun & Zhao, secs. IV-V), with random restarts.

The bound (one objective for every step, so each step can be checked to increase it; called the
bound after the paper, though it is not a guaranteed lower bound on ``log p(y | X)``: see
likelihood.py)::

    L = ell(theta, q(pi), q(z))                                   data term, see likelihood.py
        - sum KL(q(pi) || Beta(1, alpha_pi))                       Luo, Sun & Zhao, eqs. (11), (20)
        + E log p(z, V, T, d) - E log q(z, V, T, d)                 stick-breaking BP, eq. (5)
        - sum theta^2 / (2 theta_prior_sd^2)                       (half-normal prior on theta)

Decisions where the paper's equations are ambiguous or inconsistent (each also noted at the code):

1. The paper drops ``log Z`` from the bound (eq. 19) when updating q(pi), q(z), but Z depends on
   pi and z; its eqs. (21)-(23) and (27)-(29) also contain ``log(1 - pi)`` and ``log(1 - z)`` sums
   that do not come from the model of eq. (14) (they are carried over from the DP stick-breaking
   of the DPM-HCRF). Here every factor is updated on the full bound above, including ``log Z``.
2. q(pi) (Beta): the mean-field fixed point for an exponential family, natural parameters
   ``(mu1 - 1, mu2 - 1) = (0, alpha - 1) + (d ell / d E[log pi], 0)``, which reduces to the form of
   eq. (21) (``1 + counts``, ``alpha``) with counts = clamped minus free expected counts times
   ``theta * rho`` (the ``- free`` part is the contribution of ``log Z``). Because ``log Z`` makes
   the data term non-conjugate, the step is taken as a damped natural-gradient step
   (``mu <- (1 - lam) mu + lam mu*``), halving ``lam`` until ``mu1 > 0`` and the bound increases;
   the three blocks (x, y, e) move together, their targets from one gradient of the data term.
3. q(z) (Bernoulli per sequence and state, eq. 24): ``logit rho* = d ell / d rho + E log p(z=1|.)
   - E log p(z=0|.)`` (the paper's ``log f1 - log f0`` plus the BP prior terms of eq. 24), applied
   with the same per-sequence backtracking (the data term is not linear in rho).
4. q(d) exact categorical update; q(V), q(T) by numerical maximisation of their terms (the Taylor
   term of eq. 25 has no closed-form optimum; [20] also uses gradient steps).
5. theta: L-BFGS on ``log theta`` (Luo, Sun & Zhao: "optimized through their logarithm", theta > 0), on the
   same bound (eq. 30 plus the prior term). Default ``theta_prior_sd = 10`` (a weak half-normal
   prior, MAP-EM) because with five sequences per class the ML weights diverge; ``np.inf``
   recovers the paper's ML.
6. Because ``theta > 0`` and ``E log pi < 0``, every effective weight is <= 0. The fitter therefore
   splits every feature ``f`` into ``(f, -f)`` so a state can prefer either sign of a feature.
7. alpha (BP concentration), gamma (BP mass) and the Beta prior parameters of pi are fixed
   hyperparameters.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np
from scipy.special import digamma, expit

from pymc_crf.fitters.beta_process.likelihood import HCRFData, data_term, per_graph_subset
from pymc_crf.fitters.beta_process.stick_breaking import (
    SCIPY_FTOL,
    SCIPY_GTOL,
    BetaProcessFactors,
    bernoulli_entropy,
    bp_terms,
    kl_beta,
    log_prior_rounds,
    update_rounds,
    update_v_t,
    z_natural_terms,
)
from pymc_crf.fitters.optimise import find_map
from pymc_crf.fitters.progress import track

__all__ = ["VIState", "VISettings", "run_vi", "fit_restarts", "bound", "effective_weights",
           "local_z_objective", "z_step"]

BLOCKS = ("x", "y", "e")


@dataclass
class VISettings:
    truncation: int = 10
    rounds: int = 4
    alpha: float = 1.0            # BP concentration
    gamma: float = 2.0            # BP mass (expected atoms per round)
    alpha_pi: float = 1.0         # Beta(1, alpha_pi) prior of every pi
    theta_prior_sd: float = 10.0
    taylor_terms: int = 30
    max_iter: int = 50
    tol: float = 1e-6
    theta_maxiter: int = 10       # a partial M-step (Neal & Hinton 1998): see _update_theta
    max_halvings: int = 8


@dataclass
class VIState:
    log_theta: dict            # "x": (F, S), "y": (S, C), "e": (S, S, C)
    mu1: dict                  # Beta parameters of q(pi), same keys and shapes
    mu2: dict
    rho: np.ndarray            # (G, S) q(z_nk = 1)
    bp: BetaProcessFactors
    trace: list = field(default_factory=list)   # (step name, bound) after every step

    def copy(self) -> VIState:
        return VIState({k: v.copy() for k, v in self.log_theta.items()},
                       {k: v.copy() for k, v in self.mu1.items()},
                       {k: v.copy() for k, v in self.mu2.items()},
                       self.rho.copy(), self.bp.copy(), list(self.trace))


def elog_pi(state: VIState) -> dict:
    return {k: digamma(state.mu1[k]) - digamma(state.mu1[k] + state.mu2[k]) for k in BLOCKS}


def effective_weights(state: VIState) -> dict:
    """``W = theta * E[log pi]`` per block (Luo, Sun & Zhao, eq. (14) with expectations)."""
    el = elog_pi(state)
    return {k: np.exp(state.log_theta[k]) * el[k] for k in BLOCKS}


def _pi_kl(state: VIState, s: VISettings) -> float:
    return float(sum(kl_beta(state.mu1[k], state.mu2[k], 1.0, s.alpha_pi).sum() for k in BLOCKS))


def _theta_prior(state: VIState, s: VISettings) -> float:
    if not np.isfinite(s.theta_prior_sd):
        return 0.0
    return float(-sum((np.exp(2 * state.log_theta[k])).sum() for k in BLOCKS)
                 / (2.0 * s.theta_prior_sd ** 2))


def bound(data: HCRFData, engine, state: VIState, s: VISettings, log_pd) -> float:
    W = effective_weights(state)
    ell = data_term(data, engine, W["x"], W["y"], W["e"], state.rho, want_grad=False).value
    return (ell - _pi_kl(state, s) + bp_terms(state.bp, state.rho, s.alpha, log_pd,
                                              s.taylor_terms) + _theta_prior(state, s))


# ---------------------------------------------------------------------------- steps
def _update_pi(data, engine, state, s, log_pd, current):
    """Damped natural-gradient (mean-field fixed point) step of the three q(pi) blocks together
    (decision 2), from one gradient of the data term.

    Every block moves towards its target by ``lam_k = min(lam, f_k)``, ``f_k`` the largest of
    ``1, 1/2, 1/4, ...`` that keeps the block's ``mu1 > 1e-3``; ``lam`` is halved until the
    bound does not decrease (at most ``max_halvings`` times, else the old factors are kept).
    The gradient is usually the theta step's last evaluation, and the accepted trial's gradient
    is the one the z step starts from (both found in ``data.recent``), so a step costs one
    forward-backward pass with gradients when its first trial is accepted.
    """
    W = effective_weights(state)
    lg = data_term(data, engine, W["x"], W["y"], W["e"], state.rho)
    grad_w = {"x": lg.g_wx, "y": lg.g_wy, "e": lg.g_we}
    old1, old2 = dict(state.mu1), dict(state.mu2)
    # Luo, Sun & Zhao, eqs. (21)-(23), with log Z kept (decision 2)
    target1 = {k: 1.0 + np.exp(state.log_theta[k]) * grad_w[k] for k in BLOCKS}
    feasible = {}
    for k in BLOCKS:
        f = 1.0
        for _ in range(s.max_halvings + 1):
            if ((1 - f) * old1[k] + f * target1[k] > 1e-3).all():
                break
            f *= 0.5
        else:
            f = 0.0
        feasible[k] = f
    lam = 1.0
    for _ in range(s.max_halvings + 1):
        for k in BLOCKS:
            lk = min(lam, feasible[k])
            state.mu1[k] = (1 - lk) * old1[k] + lk * target1[k]
            state.mu2[k] = (1 - lk) * old2[k] + lk * s.alpha_pi
        W = effective_weights(state)
        data_term(data, engine, W["x"], W["y"], W["e"], state.rho)
        val = bound(data, engine, state, s, log_pd)
        if val >= current:
            return val
        lam *= 0.5
    state.mu1, state.mu2 = old1, old2
    return current


def local_z_objective(per_graph, rho, prior_logit):
    """The part of the bound that depends on one sequence's q(z_n), per sequence (G,):
    ``log p(y_n | X_n; rho_n) + sum_k [rho_nk * prior_logit_k + H(rho_nk)]`` (the constant
    ``E log p(z = 0 | .)`` left out: it is the same for every rho)."""
    return per_graph + (rho * prior_logit).sum(axis=1) + bernoulli_entropy(rho).sum(axis=1)


def z_step(data, engine, W, rho, prior_logit, max_halvings):
    """One per-sequence q(z_n) step (decision 3, Luo, Sun & Zhao, eq. (24)) with backtracking.

    The target ``logit rho* = d ell / d rho + prior_logit`` is approached by ``(1 - lam) rho +
    lam rho*``, ``lam`` halved per sequence until its local objective does not decrease (the data
    term is not linear in rho). A halving evaluates only the sequences not yet accepted
    (:func:`.likelihood.per_graph_subset`). Returns the new ``rho`` (G, S) and its local
    objectives (G,).
    """
    lg = data_term(data, engine, W["x"], W["y"], W["e"], rho)
    target = np.clip(expit(lg.g_rho + prior_logit[None]), 1e-6, 1 - 1e-6)
    old_local = local_z_objective(lg.per_graph, rho, prior_logit)
    new, local = rho.copy(), old_local.copy()
    pending = np.arange(rho.shape[0])
    lam = 1.0
    for _ in range(max_halvings + 1):
        trial = (1 - lam) * rho[pending] + lam * target[pending]
        full = new.copy()
        full[pending] = trial
        per = per_graph_subset(data, engine, W["x"], W["y"], W["e"], full, pending)
        trial_local = local_z_objective(per, trial, prior_logit)
        ok = trial_local >= old_local[pending]
        new[pending[ok]] = trial[ok]
        local[pending[ok]] = trial_local[ok]
        pending = pending[~ok]
        if pending.size == 0:
            break
        lam *= 0.5
    return new, local


def _update_z(data, engine, state, s, log_pd, current):
    """Per-sequence q(z_n) step for the training sequences (:func:`z_step`)."""
    old = state.rho.copy()
    state.rho, _ = z_step(data, engine, effective_weights(state), state.rho,
                          z_natural_terms(state.bp, s.taylor_terms), s.max_halvings)
    val = bound(data, engine, state, s, log_pd)
    if val < current:          # numerical safety: never accept a decrease
        state.rho = old
        return current
    return val


def _update_bp(data, engine, state, s, log_pd, current):
    state.bp = update_rounds(state.bp, state.rho, s.alpha, log_pd, s.taylor_terms)
    state.bp = update_v_t(state.bp, state.rho, s.alpha, log_pd, s.taylor_terms)
    return bound(data, engine, state, s, log_pd)


def _update_theta(data, engine, state, s, log_pd, current):
    """L-BFGS on log theta of the bound (Luo, Sun & Zhao, eqs. (30)-(33), decision 5)."""
    el = elog_pi(state)
    shapes = [state.log_theta[k].shape for k in BLOCKS]
    sizes = [int(np.prod(sh)) for sh in shapes]
    inv_var = 0.0 if not np.isfinite(s.theta_prior_sd) else 1.0 / s.theta_prior_sd ** 2

    def unpack(x):
        parts = np.split(x, np.cumsum(sizes)[:-1])
        return {k: p.reshape(sh) for k, p, sh in zip(BLOCKS, parts, shapes, strict=True)}

    def neg(x):
        lt = unpack(x)
        th = {k: np.exp(lt[k]) for k in BLOCKS}
        lg = data_term(data, engine, th["x"] * el["x"], th["y"] * el["y"], th["e"] * el["e"],
                       state.rho)
        gw = {"x": lg.g_wx, "y": lg.g_wy, "e": lg.g_we}
        val = lg.value - 0.5 * inv_var * sum((th[k] ** 2).sum() for k in BLOCKS)
        grad = np.concatenate([(th[k] * (el[k] * gw[k] - inv_var * th[k])).ravel()
                               for k in BLOCKS])
        return -val, -grad

    x0 = np.concatenate([state.log_theta[k].ravel() for k in BLOCKS])
    # a partial M step (theta_maxiter iterations, scipy's default tolerances) from the current
    # theta: generalised EM needs each step only to raise the bound (Neal & Hinton 1998), so a
    # run stopped short is expected and not warned about; the bound test below guards the step
    x, _ = find_map(neg, x0, rule="strict", maxiter=s.theta_maxiter, gtol=SCIPY_GTOL,
                    ftol=SCIPY_FTOL, bounds=[(-15.0, 8.0)] * x0.size, warn=False)
    old = state.log_theta
    state.log_theta = unpack(x)
    val = bound(data, engine, state, s, log_pd)
    if val < current:
        state.log_theta = old
        return current
    return val


STEPS = (("pi", _update_pi), ("z", _update_z), ("bp", _update_bp), ("theta", _update_theta))


# ---------------------------------------------------------------------------- driver
def init_state(data: HCRFData, s: VISettings, rng: np.random.Generator) -> VIState:
    F, S, C, G = data.X.shape[1], s.truncation, data.n_classes, data.batch.n_graphs
    shapes = {"x": (F, S), "y": (S, C), "e": (S, S, C)}
    log_theta = {k: rng.normal(0.0, 0.5, size=sh) for k, sh in shapes.items()}
    mu1 = {k: np.exp(rng.normal(0.0, 0.3, size=sh)) for k, sh in shapes.items()}
    mu2 = {k: np.full(sh, s.alpha_pi) for k, sh in shapes.items()}
    rho = rng.uniform(0.3, 0.9, size=(G, S))
    log_pd = log_prior_rounds(S, s.rounds, s.gamma)
    bp = BetaProcessFactors(a=np.ones(S), b=np.full(S, s.alpha), u=np.ones(S), v=np.full(S, s.alpha),
                   psi=np.exp(log_pd))
    return VIState(log_theta, mu1, mu2, rho, bp)


def run_vi(data: HCRFData, engine, s: VISettings, state: VIState,
           progressbar: bool = False) -> VIState:
    """Coordinate ascent until the relative bound change is below ``tol`` (or ``max_iter``), with
    a progress bar of the iterations when ``progressbar``."""
    log_pd = log_prior_rounds(s.truncation, s.rounds, s.gamma)
    current = bound(data, engine, state, s, log_pd)
    state.trace.append(("init", current))
    for _ in track(range(s.max_iter), "VI iterations", progressbar=progressbar):
        start = current
        for name, step in STEPS:
            current = step(data, engine, state, s, log_pd, current)
            state.trace.append((name, current))
        if abs(current - start) <= s.tol * max(1.0, abs(current)):
            break
    return state


def fit_restarts(data: HCRFData, engine, s: VISettings, n_restarts: int,
                 rng: np.random.Generator,
                 progressbar: bool = False) -> tuple[VIState, list[float], float]:
    """Run from ``n_restarts`` random initialisations; keep the best final bound (Luo, Sun & Zhao, sec.
    VI). ``progressbar`` shows one bar of the iterations per restart."""
    t0 = time.perf_counter()
    best, finals = None, []
    for _ in range(n_restarts):
        st = run_vi(data, engine, s, init_state(data, s, rng), progressbar)
        finals.append(st.trace[-1][1])
        if best is None or finals[-1] > best.trace[-1][1]:
            best = st
    return best, finals, time.perf_counter() - t0
