"""Annealed importance sampling of the marginal likelihood (Neal 2001): the reference estimate.

Runs anneal from the prior to the posterior through ``p_b(w) ~ p(w) p(D | w)^b``,
``0 = b_0 < ... < b_T = 1``, each run accumulating the log weight
``sum_t (b_t - b_{t-1}) log p(D | w_{t-1})`` and moving ``w`` by Hamiltonian Monte Carlo that leaves
``p_{b_t}`` invariant. ``log p(D)`` is the log of the mean weight over independent runs; its Monte
Carlo error comes from the spread of the weights (delta method).

The HMC mass matrix at ``b`` is ``Lambda^{-1} + b A_lik`` (prior precision plus ``b`` times the
likelihood curvature at the MAP): any fixed positive definite matrix leaves the targets invariant,
and this one makes every intermediate target close to a unit Gaussian, so one step size serves all.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy.linalg import cho_factor, cho_solve
from scipy.special import logsumexp

from pymc_crf.fitters.bethe_laplace.batched import BatchedLikelihood
from pymc_crf.fitters.progress import track
from pymc_crf.validation import generator, positive_number, whole_number

__all__ = ["AISRun", "BatchedLikelihood", "ais_log_evidence", "default_schedule"]


@dataclass
class AISRun:
    """AIS estimate ``value`` of log p(D), its Monte Carlo ``std_error``, the per-run
    ``log_weights``, the HMC ``acceptance_rate`` and the number of likelihood evaluations."""

    value: float
    std_error: float
    log_weights: np.ndarray
    acceptance_rate: float
    n_evaluations: int


def default_schedule(n_temps: int, power: float = 4.0) -> np.ndarray:
    """``b_t = (t / T)^power``: dense near the prior, where the weights change fastest."""
    n_temps = whole_number(n_temps, "n_temps")
    return (np.arange(n_temps + 1) / n_temps) ** power


def ais_log_evidence(lik, prior, fisher: np.ndarray, *, n_runs: int = 10, n_temps: int = 1000,
                     n_leapfrog: int = 5, step_size: float = 0.5, schedule: np.ndarray | None = None,
                     rng: np.random.Generator | int | None = None,
                     progressbar: bool = False) -> AISRun:
    """AIS estimate of ``log int p(D | w) p(w) dw``.

    Parameters
    ----------
    lik : CRFLogLikelihood or MRFLogLikelihood
        The likelihood (exact or Bethe, by its engine); all runs are evaluated together
        (:class:`BatchedLikelihood`).
    prior : GaussianLogPrior
        The independent Normal prior (``mean``, ``sd``).
    fisher : array (d, d)
        Likelihood curvature used for the HMC mass matrices (e.g. from a Laplace fit); only the
        efficiency depends on it.
    n_runs, n_temps, n_leapfrog, step_size
        Independent runs, temperatures, leapfrog steps per HMC move and their size (the step size
        is jittered uniformly in [0.8, 1.2] times it per move).
    schedule : array, optional
        Increasing temperatures from 0 to 1 (default :func:`default_schedule`).
    rng : Generator or seed
    progressbar : bool
        Show a progress bar of the temperatures.
    """
    rng = generator(rng, "rng")
    betas = default_schedule(n_temps) if schedule is None else np.asarray(schedule, float)
    if betas[0] != 0.0 or betas[-1] != 1.0 or np.any(np.diff(betas) <= 0):
        raise ValueError("schedule must increase strictly from 0 to 1")
    # the Monte Carlo error needs several runs
    R = whole_number(n_runs, "n_runs", minimum=2)
    n_leapfrog = whole_number(n_leapfrog, "n_leapfrog")
    step_size = positive_number(step_size, "step_size")
    mean, sd = prior.mean, prior.sd
    d = mean.size
    blik = BatchedLikelihood(lik, R)
    prec0 = np.diag(1.0 / sd**2)
    fisher = 0.5 * (fisher + fisher.T)
    W = mean + sd * rng.standard_normal((R, d))
    ll, gl = blik(W)
    lw = np.zeros(R)
    n_eval, n_acc = 1, 0
    for t in track(range(1, betas.size), "AIS temperatures", progressbar=progressbar):
        b_prev, b = betas[t - 1], betas[t]
        lw += (b - b_prev) * ll
        M = prec0 + b * fisher
        cf = cho_factor(M)
        Lm = np.linalg.cholesky(M)

        def logp(w, ll_, gl_, b=b):
            z = (w - mean) / sd
            return -0.5 * np.sum(z * z, axis=1) + b * ll_, -z / sd + b * gl_

        f0, g0 = logp(W, ll, gl)
        P = rng.standard_normal((R, d)) @ Lm.T
        h0 = f0 - 0.5 * np.sum(P * cho_solve(cf, P.T).T, axis=1)
        eps = step_size * rng.uniform(0.8, 1.2)
        w, g = W.copy(), g0
        P = P + 0.5 * eps * g
        for i in range(n_leapfrog):
            w = w + eps * cho_solve(cf, P.T).T
            ll_new, gl_new = blik(w)
            n_eval += 1
            f, g = logp(w, ll_new, gl_new)
            P = P + (eps if i < n_leapfrog - 1 else 0.5 * eps) * np.where(
                np.isfinite(g), g, 0.0)
        h1 = f - 0.5 * np.sum(P * cho_solve(cf, P.T).T, axis=1)
        acc = np.isfinite(h1) & (np.log(rng.uniform(size=R)) < h1 - h0)
        W[acc], ll[acc], gl[acc] = w[acc], ll_new[acc], gl_new[acc]
        n_acc += int(acc.sum())
    value = float(logsumexp(lw) - np.log(lw.size))
    wts = np.exp(lw - lw.max())
    se = float(np.std(wts, ddof=1) / np.sqrt(wts.size) / np.mean(wts))
    return AISRun(value, se, lw, n_acc / (R * (betas.size - 1)), n_eval * R)
