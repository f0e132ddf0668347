"""Tuning of a step's proposal during PyMC's tuning phase: a scalar scale by a Robbins-Monro
recursion on its logarithm towards a target acceptance rate (Andrieu & Thoms 2008, sec. 5) and a
proposal covariance estimated from the chain's own tuning draws in doubling windows (Haario,
Saksman & Tamminen 2001; windows as Stan's, Carpenter et al. 2017), so that a random-walk or
Langevin proposal matches the posterior's scales and correlations.

The starting proposal is either standard deviations (a diagonal covariance) or a full covariance,
e.g. the Bethe-Laplace posterior covariance (Welling & Parise 2006, eq. (7);
:func:`pymc_crf.fitters.laplace_init`). A full starting covariance is also what the window
estimates shrink towards: a random walk's tuning draws are strongly autocorrelated, so a window of
a few hundred of them in tens of dimensions estimates the covariance poorly, and the starting
covariance counts as ``prior_weight`` draws in every estimate."""

from __future__ import annotations

import numpy as np

from pymc_crf.validation import positive_number, whole_number

__all__ = ["ProposalAdaptation", "ScaleAdaptation", "proposal_covariance",
           "random_walk_adaptation"]


def proposal_covariance(S, d: int) -> np.ndarray:
    """The (d, d) covariance of a proposal given as standard deviations (d,), a covariance
    (d, d) or None (unit); clear errors for a wrong shape, non-finite values or a covariance that
    is not symmetric positive definite."""
    if S is None:
        return np.eye(d)
    a = np.asarray(S, dtype=np.float64)
    if not np.all(np.isfinite(a)):
        raise ValueError("proposal S has non-finite entries")
    if a.shape == (d,):
        if np.any(a <= 0):
            raise ValueError("proposal standard deviations S must be positive")
        return np.diag(a**2)
    if a.shape != (d, d):
        raise ValueError(f"proposal S must be standard deviations ({d},) or a covariance "
                         f"({d}, {d}); got shape {a.shape}")
    if not np.allclose(a, a.T, rtol=1e-8, atol=1e-12):
        raise ValueError("proposal covariance S is not symmetric")
    try:
        np.linalg.cholesky(a)
    except np.linalg.LinAlgError:
        raise ValueError("proposal covariance S is not positive definite") from None
    return 0.5 * (a + a.T)


class ScaleAdaptation:
    """``log s <- log s + (alpha - target) / sqrt(t)`` after the t-th acceptance probability
    ``alpha`` since the last restart (Andrieu & Thoms 2008, sec. 5).

    The scale of the draws is the recursion's last value: its steps shrink like ``1/sqrt(t)``, so a
    few hundred tuning steps leave it close to its limit. Dual averaging (PyMC's NUTS) is not used:
    it reports an average of strongly fluctuating log scales, and since a random walk's acceptance
    rate is convex in its scale, the average of scales that accept ``target`` on average accepts
    less than ``target``.
    """

    def __init__(self, initial: float, target: float):
        self.log_scale, self.target, self.t = float(np.log(initial)), float(target), 0

    def current(self) -> float:
        return float(np.exp(self.log_scale))

    def update(self, accept_stat: float) -> None:
        self.t += 1
        self.log_scale += (float(accept_stat) - self.target) / np.sqrt(self.t)


class ProposalAdaptation:
    """Scale and covariance of a Gaussian proposal ``scale * L z`` (``L L^T`` = covariance).

    Parameters
    ----------
    d : int
        Dimension.
    initial_scale : float
        Starting scale (the scale after the first covariance update is reset to ``optimal_scale``).
    target : float
        Acceptance rate the scale's recursion aims for (0.234 random walk, 0.574 Langevin).
    window : int
        First covariance window (in draws); each later window is twice as long.
    diagonal : bool
        Adapt only the variances.
    optimal_scale : float
        Scale once the covariance is the posterior's (2.38 / sqrt(d) for a random walk).
    base_cov : array (d,) or (d, d), optional
        Proposal standard deviations (d,) or covariance (d, d) before the first covariance
        estimate (default unit standard deviations). A diagonal adaptation uses the diagonal of a
        covariance.
    prior_weight : float, optional
        Number of draws a full ``base_cov`` is worth in the window estimates, which shrink
        towards it (default ``10 d``); without a full ``base_cov`` the estimates shrink towards
        their own diagonal.
    """

    def __init__(self, d: int, initial_scale: float, target: float, window: int = 50,
                 diagonal: bool = False, optimal_scale: float | None = None,
                 base_cov: np.ndarray | None = None, prior_weight: float | None = None):
        # the steps' own keyword names, as users pass them (target_accept, adapt_window)
        if not 0.0 < target < 1.0:
            raise ValueError(f"target_accept must lie in (0, 1); got {target}")
        whole_number(window, "adapt_window")
        self.d, self.target, self.window0, self.diagonal = int(d), float(target), int(window), diagonal
        self.initial_scale = float(initial_scale)
        self.optimal_scale = float(optimal_scale if optimal_scale is not None else initial_scale)
        base = proposal_covariance(base_cov, self.d)
        self.base_sd = np.sqrt(np.diag(base))
        # the full starting covariance, the shrinkage target of the window estimates
        self.base_cov = None if (diagonal or base_cov is None or np.ndim(base_cov) == 1) else base
        self.prior_weight = float(10 * self.d if prior_weight is None else prior_weight)
        self.reset()

    def reset(self, n_tune: int | None = None) -> None:
        """Back to the untuned proposal (called at the start of every chain with its number of
        tuning steps, when known).

        The covariance windows double in length; with ``n_tune`` known, a window is stretched to
        the start of a terminal phase of ``max(window, n_tune // 5)`` steps instead of leaving
        one too short to fill, and the terminal phase tunes the scale alone (as Stan's windows):
        a covariance changed at the very end of tuning would leave the scale's recursion too few
        steps to settle the scale of the draws."""
        self.chol = (np.diag(self.base_sd) if self.base_cov is None
                     else np.linalg.cholesky(self.base_cov))
        self.sd = self.base_sd.copy()  # diagonal of chol (diag mode)
        self._scale = ScaleAdaptation(self.initial_scale, self.target)
        # a full covariance needs more draws than dimensions: a rank-deficient estimate would
        # freeze the chain in the directions it misses
        first = self.window0 if self.diagonal else max(self.window0, 2 * self.d)
        self._end_of_windows = (np.inf if n_tune is None
                                else int(n_tune) - max(self.window0, int(n_tune) // 5))
        self._t = self.window0  # tuning step at which the current window ends
        self._start_window(first, skip=self.window0)

    def _start_window(self, length: int, skip: int = 0) -> None:
        end = self._t + length
        if end + 2 * length > self._end_of_windows:  # the next window would not fit: stretch
            length = self._end_of_windows - self._t
            length = length if length >= self.window0 else 0
        self._t += length
        self._skip, self._len, self._n = int(skip), int(length), 0
        self._mean = np.zeros(self.d)
        self._m2 = np.zeros((self.d,) if self.diagonal else (self.d, self.d))

    def scale(self, tune: bool) -> float:
        """Current scale (fixed after tuning)."""
        return self._scale.current()

    def update(self, x: np.ndarray, accept_stat: float, tune: bool) -> None:
        """Record one draw and its acceptance probability."""
        if not tune:
            return
        self._scale.update(float(np.clip(accept_stat, 0.0, 1.0)))
        if self._skip > 0:  # the first window lets the chain leave its start
            self._skip -= 1
            return
        if self._len < 2:  # no room left for a covariance window: the scale alone is tuned
            return
        self._n += 1
        delta = x - self._mean
        self._mean += delta / self._n
        if self.diagonal:
            self._m2 += delta * (x - self._mean)
        else:
            self._m2 += np.outer(delta, x - self._mean)
        if self._n >= self._len:
            n = self._n
            shrink = n / (n + 5.0)  # regularised towards a small ridge, as Stan's windows
            if self.diagonal:
                var = shrink * self._m2 / (n - 1) + 1e-3 * (1 - shrink) * self.base_sd**2
                self.sd = np.sqrt(var)
                self.chol = np.diag(self.sd)
            else:
                S = self._m2 / (n - 1)
                if self.base_cov is not None:
                    # the starting covariance as n0 pseudo-draws
                    a = n / (n + self.prior_weight)
                    target = self.base_cov
                else:
                    # shrunk towards its diagonal (Ledoit & Wolf 2004 style), so every direction
                    # keeps the marginal scales of the draws
                    a = n / (n + self.d)
                    target = np.diag(np.diag(S))
                cov = a * S + (1 - a) * target + 1e-10 * np.eye(self.d)
                self.chol = np.linalg.cholesky(0.5 * (cov + cov.T))
                self.sd = np.sqrt(np.diag(cov))
            self._scale = ScaleAdaptation(self.optimal_scale, self.target)
            self._start_window(2 * self._len)

    def draw(self, rng: np.random.Generator, tune: bool) -> np.ndarray:
        """A proposal increment ``scale * L z``."""
        return self.scale(tune) * (self.chol @ rng.standard_normal(self.d))


def random_walk_adaptation(d: int, S, scaling: float | None, target: float,
                           window: int) -> ProposalAdaptation:
    """The tuning of a random-walk Metropolis proposal (BetheMH, Exchange): optimal scale
    ``2.38 / sqrt(d)`` (Roberts, Gelman & Gilks 1997), which is also the starting scale when a
    starting proposal ``S`` is given (0.1 times unit steps otherwise)."""
    optimal = 2.38 / np.sqrt(d)
    if scaling is None:
        scaling = optimal if S is not None else 0.1
    scaling = positive_number(scaling, "scaling")
    return ProposalAdaptation(d, scaling, target, window, optimal_scale=optimal, base_cov=S)
