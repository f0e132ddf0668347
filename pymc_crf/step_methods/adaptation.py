"""Tuning of a step's proposal during PyMC's tuning phase: a scalar scale by dual averaging of the
acceptance rate (Hoffman & Gelman 2014, as PyMC's NUTS) and a proposal covariance estimated from the
chain's own tuning draws in doubling windows (Haario, Saksman & Tamminen 2001; windows as Stan's),
so that a random-walk or Langevin proposal matches the posterior's scales and correlations."""

from __future__ import annotations

import numpy as np
from pymc.step_methods.step_sizes import DualAverageAdaptation

__all__ = ["ProposalAdaptation"]


class ProposalAdaptation:
    """Scale and covariance of a Gaussian proposal ``scale * L z`` (``L L^T`` = covariance).

    Parameters
    ----------
    d : int
        Dimension.
    initial_scale : float
        Starting scale (the scale after the first covariance update is reset to ``optimal_scale``).
    target : float
        Acceptance rate the dual averaging aims for (0.234 random walk, 0.574 Langevin).
    window : int
        First covariance window (in draws); each later window is twice as long.
    diagonal : bool
        Adapt only the variances.
    optimal_scale : float
        Scale once the covariance is the posterior's (2.38 / sqrt(d) for a random walk).
    base_sd : array (d,), optional
        Proposal standard deviations before the first covariance estimate (default ones).
    """

    def __init__(self, d: int, initial_scale: float, target: float, window: int = 50,
                 diagonal: bool = False, optimal_scale: float | None = None,
                 base_sd: np.ndarray | None = None):
        self.d, self.target, self.window0, self.diagonal = int(d), float(target), int(window), diagonal
        self.initial_scale = float(initial_scale)
        self.optimal_scale = float(optimal_scale if optimal_scale is not None else initial_scale)
        self.base_sd = np.ones(self.d) if base_sd is None else np.asarray(base_sd, dtype=float)
        self.reset()

    def reset(self) -> None:
        """Back to the untuned proposal (called at the start of every chain)."""
        self.chol = np.diag(self.base_sd)
        self.sd = self.base_sd.copy()  # diagonal of chol (diag mode)
        self._dual = DualAverageAdaptation(self.initial_scale, self.target, 0.05, 0.75, 10)
        # a full covariance needs more draws than dimensions: a rank-deficient estimate would
        # freeze the chain in the directions it misses
        first = self.window0 if self.diagonal else max(self.window0, 2 * self.d)
        self._start_window(first, skip=self.window0)

    def _start_window(self, length: int, skip: int = 0) -> None:
        self._skip, self._len, self._n = int(skip), int(length), 0
        self._mean = np.zeros(self.d)
        self._m2 = np.zeros((self.d,) if self.diagonal else (self.d, self.d))

    def scale(self, tune: bool) -> float:
        """Current scale (tuning) or the tuned average (after tuning)."""
        return float(self._dual.current(tune))

    def update(self, x: np.ndarray, accept_stat: float, tune: bool) -> None:
        """Record one draw and its acceptance probability."""
        self._dual.update(float(np.clip(accept_stat, 0.0, 1.0)), tune)
        if not tune:
            return
        if self._skip > 0:  # the first window lets the chain leave its start
            self._skip -= 1
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
                # shrunk towards its diagonal (Ledoit & Wolf 2004 style), so every direction keeps
                # the marginal scales of the draws
                S = self._m2 / (n - 1)
                a = n / (n + self.d)
                cov = a * S + (1 - a) * np.diag(np.diag(S)) + 1e-10 * np.eye(self.d)
                self.chol = np.linalg.cholesky(0.5 * (cov + cov.T))
                self.sd = np.sqrt(np.diag(cov))
            self._dual = DualAverageAdaptation(self.optimal_scale, self.target, 0.05, 0.75, 10)
            self._start_window(2 * self._len)

    def draw(self, rng: np.random.Generator, tune: bool) -> np.ndarray:
        """A proposal increment ``scale * L z``."""
        return self.scale(tune) * (self.chol @ rng.standard_normal(self.d))
