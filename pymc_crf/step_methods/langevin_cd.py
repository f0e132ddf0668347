"""``LangevinCD`` (LV-CD): brief Langevin steps on the random-field weights whose likelihood
gradient is a contrastive-divergence estimate (Murray & Ghahramani 2004; the LV-CD method of
Welling & Parise 2006, sec. 7; CD of Hinton 2002).

The log-likelihood gradient ``sum_n (f(y_n) - E_w[f])`` needs the intractable model expectation;
CD-k replaces it by the statistics of labels reached by ``k`` Gibbs sweeps started at the data.
In weight space that is ``ll.pullback(w, data_stats - sampled_stats)``, plus the gradient of the rest
of the model (priors). The move

    w' = w + (h / 2) M g(w) + sqrt(h) M^(1/2) z,    z ~ N(0, I)

is always accepted after tuning (no Metropolis test: the likelihood cannot be evaluated), so the
chain is biased by design: by the step size and by the CD bias. ``M`` is a constant
preconditioner (full when the starting ``S`` is a covariance, e.g. the Bethe-Laplace one,
diagonal otherwise; any positive definite ``M`` leaves the Langevin diffusion's target
unchanged, Roberts & Stramer 2002) and ``h`` the squared step size, both tuned during PyMC's
tuning phase: ``M`` from the (co)variance of the tuning draws, ``h`` so that an *estimated*
MALA acceptance rate (the log-density difference integrated by the trapezoid rule along the
move from the two CD gradients) reaches ``target_accept``. During tuning only, moves also pass a
Metropolis test with that estimated ratio, so that a first step size far too large cannot throw the
chain to weights where the Gibbs sampler's potentials overflow. After tuning, a move whose estimated
log acceptance ratio is below ``-max_energy_error`` (default 10: a Metropolis test would accept it
with probability below 5e-5) is rejected and reported as ``diverging``, as NUTS reports
divergences. In a compound step another variable can change the weights' posterior scale, e.g. a
hyper-prior scale that shrinks, and a step size tuned before is then unstable: unadjusted moves
grew the weights of a hierarchical tree CRF to 1e152 within a few hundred draws. NUTS's threshold
of 1000 applies to whole trajectories; here an unstable step's error compounds from move to move,
and at 1000 the weights had already moved far enough (|W| = 8 at prior scale 0.14) to trap the
NUTS step on the scale.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
from scipy.linalg import solve_triangular

from pymc_crf.inference.gibbs import Gibbs
from pymc_crf.step_methods.adaptation import ProposalAdaptation
from pymc_crf.step_methods.base import RandomFieldStep
from pymc_crf.validation import positive_number, whole_number

if TYPE_CHECKING:
    from collections.abc import Sequence

    import pymc as pm
    from pymc.util import RandomGenerator
    from pytensor.graph.basic import Variable

    from pymc_crf.model.random_field import MRFSpec
    from pymc_crf.model.spec import CRFSpec

__all__ = ["LangevinCD"]


class LangevinCD(RandomFieldStep):
    """Brief Langevin sampler with contrastive-divergence gradients.

    Parameters
    ----------
    vars : list, optional
        The random-field weight variables (default: all; one block).
    step_size : float, optional
        Initial step size ``sqrt(h)`` (in units of the preconditioner's standard deviations).
        Default ``1.65 d^(-1/6)`` when ``S`` is given (Roberts & Rosenthal 1998), else 0.05.
    cd_steps : int
        Gibbs sweeps from the data per gradient (CD-k; default 1).
    target_accept : float
        Estimated MALA acceptance rate aimed for in tuning (0.574, Roberts & Rosenthal 1998).
    adapt_window : int
        First preconditioner window of the tuning phase, in draws.
    max_energy_error : float
        After tuning, moves whose estimated log acceptance ratio is below ``-max_energy_error``
        are rejected as divergent (default 10; see the module notes).
    S : array (d,) or (d, d), optional
        Starting preconditioner: standard deviations (d,) (a diagonal preconditioner) or a
        covariance (d, d), e.g. the Bethe-Laplace posterior's (as
        :class:`~pymc_crf.step_methods.BetheMH`; a full preconditioner, re-estimated from the
        tuning draws in windows and shrunk towards ``S``); default unit standard deviations.
    tune, model, rng, initial_point, compile_kwargs, blocked, spec
        As for :class:`~pymc_crf.step_methods.BetheMH`.

    Notes
    -----
    Stats: ``tune``, ``step_size``, ``accept_rate`` (the estimated MALA acceptance rate of the
    move), ``accepted`` (after tuning every move that is not divergent; in tuning, the estimated
    Metropolis test), ``diverging`` (a move rejected after tuning for its estimated log
    acceptance ratio below ``-max_energy_error``), ``grad_norm`` (of the CD gradient of the log
    posterior).
    """

    name = "langevin_cd"
    method_name = "LangevinCD"
    stats_dtypes_shapes = {
        "tune": (bool, []),
        "step_size": (np.float64, []),
        "accept_rate": (np.float64, []),
        "accepted": (np.float64, []),  # pm.Metropolis's dtype (see METROPOLIS_STATS)
        "diverging": (bool, []),
        "grad_norm": (np.float64, []),
    }

    def __init__(self, vars: Sequence[Variable] | None = None, *,
                 step_size: float | None = None, cd_steps: int = 1,
                 target_accept: float = 0.574, adapt_window: int = 50,
                 max_energy_error: float = 10.0, S: np.ndarray | None = None, tune: bool = True,
                 model: pm.Model | None = None, rng: RandomGenerator = None,
                 initial_point: dict[str, np.ndarray] | None = None,
                 compile_kwargs: dict | None = None, blocked: bool = True,
                 spec: CRFSpec | MRFSpec | None = None):
        super().__init__(vars, model=model, rng=rng, initial_point=initial_point,
                         compile_kwargs=compile_kwargs, blocked=blocked, tune=tune,
                         spec=spec)
        self.max_energy_error = positive_number(max_energy_error, "max_energy_error",
                                                allow_inf=True)
        self.cd_steps = whole_number(cd_steps, "cd_steps")
        self.gibbs = Gibbs(burn_in=0, thin=self.cd_steps, n_samples=1)
        self.likelihood = self.field.likelihood()
        self._data_stats = self.field.statistics(self.field.labels)
        # optimal MALA scale ~ 1.65 d^(-1/6) (Roberts & Rosenthal 1998)
        optimal = 1.65 * self.d ** (-1 / 6)
        S = self._proposal_base(S)
        if step_size is None:
            step_size = optimal if S is not None else 0.05
        step_size = positive_number(step_size, "step_size")
        # a full starting covariance makes the preconditioner full (a posterior with correlated
        # directions, e.g. the label-sum directions of log-linear weights, moves along them);
        # standard deviations or none keep it diagonal
        full = S is not None and np.ndim(S) == 2
        self.adaptation = ProposalAdaptation(self.d, step_size, target_accept, adapt_window,
                                             diagonal=not full, optimal_scale=optimal,
                                             base_cov=S)
        self.reset_chain()

    def reset_chain(self) -> None:
        self.adaptation.reset(self.n_tune)
        self._cache = None  # (q, CD log-likelihood gradient) of the current state

    def cd_gradient(self, q: np.ndarray) -> np.ndarray:
        """CD-k estimate of the log-likelihood gradient at ``q`` (one Gibbs run from the data).

        Parameters
        ----------
        q : ndarray (d,)
            Flat weights.

        Returns
        -------
        ndarray (d,)
            The data's sufficient statistics minus those of ``cd_steps`` Gibbs sweeps from the
            data, pulled back to the weights.
        """
        f = self.field
        x = f.gibbs_from_data(self.gibbs, self.likelihood.log_potentials(q), self.rng)
        s_node, s_edge = f.statistics(x)
        d_node, d_edge = self._data_stats
        return self.likelihood.pullback(q, d_node - s_node, d_edge - s_edge)

    def _propose(self, q0: np.ndarray, tune: bool) -> tuple[np.ndarray, dict]:
        if self._cache is None or not np.array_equal(self._cache[0], q0):
            self._cache = (q0.copy(), self.cd_gradient(q0))
        g_ll0 = self._cache[1]
        r0, g_r0 = self.rest(q0)
        g0 = g_ll0 + g_r0
        eps = self.adaptation.scale(tune)
        L = self.adaptation.chol  # M = L L^T
        h = eps * eps
        z = self.rng.standard_normal(self.d)
        mean0 = q0 + 0.5 * h * (L @ (L.T @ g0))
        q1 = mean0 + eps * (L @ z)
        g_ll1 = self.cd_gradient(q1)
        r1, g_r1 = self.rest(q1)
        g1 = g_ll1 + g_r1
        # estimated MALA ratio: likelihood difference by the trapezoid rule on the CD gradients
        step = q1 - q0
        delta = r1 - r0 + 0.5 * float((g_ll0 + g_ll1) @ step)
        mean1 = q1 + 0.5 * h * (L @ (L.T @ g1))
        log_q10 = -0.5 * float(z @ z)
        back = solve_triangular(L, q0 - mean1, lower=True)
        log_q01 = -0.5 * float(back @ back) / h
        log_ratio = delta + log_q01 - log_q10
        accepted, accept_rate = self._metropolis(log_ratio, test=tune)
        diverging = not tune and not log_ratio >= -self.max_energy_error  # NaN too
        if diverging:
            accepted = False
        if accepted:
            self._cache = (q1.copy(), g_ll1)
        q = q1 if accepted else q0
        self.adaptation.update(q, accept_rate, tune)
        return q, {"step_size": eps, "accept_rate": accept_rate, "accepted": float(accepted),
                   "diverging": diverging,
                   "grad_norm": float(np.linalg.norm(g1 if accepted else g0))}
