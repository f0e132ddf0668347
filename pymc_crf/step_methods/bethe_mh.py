"""``BetheMH`` (MC-BP): random-walk Metropolis-Hastings on the random-field weights with log Z
replaced by minus the Bethe free energy from loopy BP (Murray & Ghahramani 2004; the MC-BP method of
Welling & Parise 2006, sec. 7).

The posterior ``p(w | D) ∝ p(w) exp(sum_n score(w, y_n)) / Z(w)^G`` cannot be evaluated because of
``Z(w)`` (Welling & Parise 2006, eq. (3)); the accept rule uses ``log Z ≈ -F_Bethe(w)`` at the
current and proposed weights. On trees BP is exact, so the chain leaves the exact posterior
invariant; on loopy graphs it targets the Bethe-approximate posterior.
"""

from __future__ import annotations

import warnings
from typing import TYPE_CHECKING

import numpy as np

from pymc_crf.step_methods.adaptation import random_walk_adaptation
from pymc_crf.step_methods.base import METROPOLIS_STATS, RandomFieldStep
from pymc_crf.step_methods.warm_bp import WarmStartBP

if TYPE_CHECKING:
    from collections.abc import Sequence

    import pymc as pm
    from pymc.util import RandomGenerator
    from pytensor.graph.basic import Variable

    from pymc_crf.model.random_field import MRFSpec
    from pymc_crf.model.spec import CRFSpec

__all__ = ["BetheMH"]


class BetheMH(RandomFieldStep):
    """Metropolis-Hastings on the weights with Bethe log Z (MC-BP).

    Parameters
    ----------
    vars : list, optional
        The random-field weight variables (default: all of them; they are sampled as one block).
    scaling : float, optional
        Initial proposal scale, a multiple of ``S`` (tuned to ``target_accept``
        during tuning; the proposal covariance is estimated from the tuning draws). Default
        ``2.38 / sqrt(d)`` when ``S`` is given (optimal for a proposal covariance equal to the
        posterior's; Roberts, Gelman & Gilks 1997), else 0.1.
    S : array (d,) or (d, d), optional
        Starting proposal, as ``pm.Metropolis``'s ``S``: standard deviations (d,) or a covariance
        (d, d) in the flat weight order (default unit standard deviations), e.g. the
        Bethe-Laplace posterior covariance (:func:`pymc_crf.fitters.laplace_init`; needs fixed
        Normal weight priors and nothing else free). A full covariance is also what the tuning
        estimates shrink towards.
    target_accept : float
        Acceptance rate aimed for in tuning (0.234, Roberts, Gelman & Gilks 1997).
    adapt_window : int
        First covariance window of the tuning phase, in draws.
    damping, tol, max_iter, schedule
        Loopy BP settings (warm-started from the current state's messages at every step).
    tune, model, rng, initial_point, compile_kwargs
        As for PyMC's step methods (``tune``: adapt the proposal in the tuning phase).
    blocked : bool
        Must be True: all the weights move as one block (``blocked=False`` is refused).
    spec : CRFSpec or MRFSpec, optional
        The model's random field as already read (:func:`pymc_crf.model.extract_random_field`;
        ``pmc.fit`` hands on the one it read), else read from the model.

    Notes
    -----
    Stats: ``tune``, ``accepted`` (1.0 or 0.0), ``accept_rate`` (min(1, MH ratio)), ``scaling``,
    ``log_z`` (Bethe log Z at the current state, summed over graphs), ``bp_iterations`` (sweeps of the
    proposal's BP run), ``bp_nonconverged`` (graphs whose BP run stopped before ``tol``; their
    Bethe value is still used), ``bp_bound_violations`` (graphs whose Bethe log Z at the
    proposal is below the score of a single labelling, BP's bound check: far off there).
    """

    name = "bethe_mh"
    method_name = "BetheMH"
    stats_dtypes_shapes = {
        **METROPOLIS_STATS,
        "log_z": (np.float64, []),
        "bp_iterations": (np.int64, []),
        "bp_nonconverged": (np.int64, []),
        "bp_bound_violations": (np.int64, []),
    }

    def __init__(self, vars: Sequence[Variable] | None = None, *, scaling: float | None = None,
                 S: np.ndarray | None = None, target_accept: float = 0.234,
                 adapt_window: int = 50, damping: float = 0.5, tol: float = 1e-8,
                 max_iter: int = 1000, schedule: str = "parallel", tune: bool = True,
                 model: pm.Model | None = None, rng: RandomGenerator = None,
                 initial_point: dict[str, np.ndarray] | None = None,
                 compile_kwargs: dict | None = None, blocked: bool = True,
                 spec: CRFSpec | MRFSpec | None = None):
        super().__init__(vars, model=model, rng=rng, initial_point=initial_point,
                         compile_kwargs=compile_kwargs, blocked=blocked, tune=tune,
                         spec=spec)
        self.engine = WarmStartBP(damping=damping, schedule=schedule, tol=tol, max_iter=max_iter)
        self.likelihood = self.field.likelihood(self.engine)
        self.adaptation = random_walk_adaptation(self.d, self._proposal_base(S), scaling,
                                                 target_accept, adapt_window)
        self.reset_chain()

    def reset_chain(self) -> None:
        self.adaptation.reset(self.n_tune)
        self._cache = None  # (q, log-likelihood, BP messages, log Z) of the current state
        self._warned = False

    def _log_likelihood(self, q: np.ndarray, messages
                        ) -> tuple[float, int, int, np.ndarray, float, int]:
        """Score - Bethe log Z at ``q`` (BP warm-started at ``messages``), BP's largest sweep
        count, its non-converged graphs, its messages, the summed Bethe log Z and the graphs
        failing BP's bound check."""
        self.engine.messages = messages
        loglik = float(np.sum(self.likelihood.pointwise(q)))
        st = self.engine.last_state
        rep = st.report
        bad = int(np.sum(~np.asarray(rep["converged"], dtype=bool)))
        if bad and not self._warned:
            self._warned = True
            warnings.warn(f"BetheMH: loopy BP did not converge on {bad} graph(s) at some weights; "
                          "their Bethe log Z is used as it is (count in sample_stats "
                          "'bp_nonconverged')", RuntimeWarning, stacklevel=2)
        return (loglik, int(np.max(rep["iterations"])), bad, st.messages,
                float(np.sum(st.log_z)), int(np.sum(~np.asarray(rep["bound_ok"], dtype=bool))))

    def _propose(self, q0: np.ndarray, tune: bool) -> tuple[np.ndarray, dict]:
        # the likelihood of the current state is cached; the rest of the model is not (in a
        # compound step other variables, e.g. hyper-parameters of the prior, change in between)
        if self._cache is None or not np.array_equal(self._cache[0], q0):
            ll0, _, _, msg0, lz0, _ = self._log_likelihood(q0, None)
            self._cache = (q0.copy(), ll0, msg0, lz0)
        _, ll0, msg0, lz0 = self._cache
        q1 = q0 + self.adaptation.draw(self.rng, tune)
        ll1, iters, bad, msg1, lz1, low = self._log_likelihood(q1, msg0)
        log_ratio = self.rest(q1)[0] + ll1 - self.rest(q0)[0] - ll0
        accepted, accept_rate = self._metropolis(log_ratio)
        scale = self.adaptation.scale(tune)
        if accepted:
            self._cache = (q1.copy(), ll1, msg1, lz1)
        q = q1 if accepted else q0
        self.adaptation.update(q, accept_rate, tune)
        return q, {"accepted": float(accepted), "accept_rate": accept_rate, "scaling": scale,
                   "log_z": self._cache[3], "bp_iterations": iters, "bp_nonconverged": bad,
                   "bp_bound_violations": low}
