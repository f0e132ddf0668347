"""``log_marginal_likelihood(model, method=...)``: evidence of a CRF / MRF with a Gaussian prior.

Methods (Parise & Welling 2006 sec. 4 names in brackets):

* ``"bethe_laplace"`` [BP-LR; BP-LR-ExactGrad with ``map="exact"``]: eq. (8) with all O(1)
  terms, log Z by the Bethe free energy and C by linear response (CRF version eqs. (10)-(13));
* ``"laplace_exact"`` [Laplace-Exact]: eq. (8) with exact MAP, log Z and C;
* ``"bic"`` [BIC-ML]: terms 1, 2 and 5 of eq. (8) at the maximum-likelihood weights,
  ``log p(D | w_ML) - d/2 log N``;
* ``"map"`` [MAP]: terms 1-3, the penalised log-likelihood at the MAP;
* ``"ais"``: annealed importance sampling (Neal 2001), the reference, with its Monte Carlo error.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

import numpy as np
import pymc as pm

from pymc_crf.fitters.bethe_laplace.laplace import (
    MAP_MODES,
    laplace_fit,
    laplace_log_evidence,
    maximise,
)
from pymc_crf.fitters.bethe_laplace.problem import bp_engine, exact_engine, weight_problem
from pymc_crf.fitters.evidence.ais import ais_log_evidence
from pymc_crf.validation import generator

if TYPE_CHECKING:
    from pymc_crf.inference.bp import BeliefPropagation

__all__ = ["LogEvidence", "log_marginal_likelihood", "EVIDENCE_METHODS"]

EVIDENCE_METHODS = ("bethe_laplace", "laplace_exact", "bic", "map", "ais")


class LogEvidence(float):
    """A log marginal likelihood: a float with ``method``, ``std_error`` (Monte Carlo error for
    ``"ais"``, 0 for the deterministic estimates), ``wall_time`` (s) and ``details`` (dict)."""

    method: str
    std_error: float
    wall_time: float
    details: dict

    def __new__(cls, value: float, method: str, std_error: float = 0.0, wall_time: float = 0.0,
                details: dict | None = None):
        obj = super().__new__(cls, float(value))
        obj.method, obj.std_error, obj.wall_time = method, float(std_error), float(wall_time)
        obj.details = dict(details or {})
        return obj

    def __reduce__(self):
        # float's own reduction would call __new__ without method (copy, deepcopy, pickle)
        return (type(self), (float(self), self.method, self.std_error, self.wall_time,
                             self.details))

    def __repr__(self) -> str:
        err = f" +- {self.std_error:.3g}" if self.std_error else ""
        return f"LogEvidence({float(self):.6g}{err}, method={self.method!r})"


def log_marginal_likelihood(model: pm.Model | None = None, method: str = "bethe_laplace", *,
                            map: str | None = None, bp: BeliefPropagation | None = None,
                            maxiter: int = 5000,
                            gtol: float = 1e-8, engine: str = "exact", n_runs: int = 10,
                            n_temps: int = 1000, n_leapfrog: int = 5, step_size: float = 0.5,
                            random_seed: int | np.random.Generator | None = None,
                            progressbar: bool = True) -> LogEvidence:
    """Log marginal likelihood ``log int p(D | w) p(w) dw`` of a CRF or MRF model.

    Parameters
    ----------
    model : pm.Model, optional
        One observed ``pmc.CRF`` / ``pmc.MRF`` with fixed Normal priors on its weights (taken from
        the context when omitted).
    method : {"bethe_laplace", "laplace_exact", "bic", "map", "ais"}
        See the module docstring.
    map : {"exact", "bp"}, optional
        How ``"bethe_laplace"`` and ``"map"`` find the MAP: BP beliefs in the gradient (``"bp"``,
        the default for ``"bethe_laplace"``: BP-LR, which starts an MRF at the pseudo-moment
        matching solution; ``"map"`` starts at the prior mean) or exact gradients (``"exact"``,
        the default for ``"map"``: BP-LR-ExactGrad for ``"bethe_laplace"``).
    bp : BeliefPropagation, optional
        BP engine of the Bethe parts.
    maxiter, gtol
        L-BFGS settings of the MAP / ML searches.
    engine : {"exact", "bp"}
        log Z of the AIS likelihood.
    n_runs, n_temps, n_leapfrog, step_size, random_seed
        AIS settings (independent runs, temperatures, HMC leapfrog steps and step size).
    progressbar : bool
        Show progress bars of the MAP search and of AIS's temperatures (PyMC's; ``False``
        silences them).

    Returns
    -------
    LogEvidence
        The estimate (a float) with ``std_error`` (AIS's Monte Carlo error), ``wall_time`` and
        ``details``.
    """
    t0 = time.perf_counter()
    if method not in EVIDENCE_METHODS:
        raise ValueError(f"unknown evidence method {method!r}; choose one of {EVIDENCE_METHODS}")
    if map is not None and method not in ("bethe_laplace", "map"):
        raise ValueError(f"map= applies to methods 'bethe_laplace' and 'map', not {method!r}")
    if map is not None and map not in MAP_MODES:
        raise ValueError(f"map must be one of {MAP_MODES}; got {map!r}")
    if engine not in ("exact", "bp"):
        raise ValueError(f"engine must be 'exact' or 'bp'; got {engine!r}")
    if engine != "exact" and method != "ais":
        raise ValueError(f"engine= applies to method 'ais', not {method!r}")
    # before the Laplace fit that AIS starts with
    rng = generator(random_seed, "random_seed")
    problem = weight_problem(model, f"log_marginal_likelihood/{method}")
    too_wide = {"laplace_exact": "use method='bethe_laplace' (the Bethe approximation)",
                "bic": "use method='bethe_laplace' or method='ais' with engine='bp'",
                "map": "use map='bp' or method='bethe_laplace'",
                "ais": "use engine='bp' (AIS on the Bethe likelihood) or method='bethe_laplace'"}
    if method == "bethe_laplace":
        fit = laplace_fit(problem, map=map or "bp", covariance="bp", bp=bp, maxiter=maxiter,
                          gtol=gtol, progressbar=progressbar)
        return LogEvidence(laplace_log_evidence(fit), method, 0.0, time.perf_counter() - t0,
                           {"map": fit.map_mode, "bp_converged": fit.bp_converged,
                            "map_converged": bool(fit.optimizer["success"])})
    if method == "laplace_exact":
        exact_engine(problem, too_wide[method])
        fit = laplace_fit(problem, map="exact", covariance="exact", maxiter=maxiter, gtol=gtol,
                          progressbar=progressbar)
        return LogEvidence(laplace_log_evidence(fit), method, 0.0, time.perf_counter() - t0,
                           {"map_converged": bool(fit.optimizer["success"])})
    if method == "map":
        mode = map or "exact"
        lik = problem.make_likelihood(exact_engine(problem, too_wide[method]) if mode == "exact"
                                      else bp_engine(bp))
        w, info = maximise(lik, problem.prior, problem.prior.mean, maxiter=maxiter, gtol=gtol,
                           progressbar=progressbar,
                           consequence="the estimate is the log joint at this point, not at "
                                       "the mode")
        value = float(np.sum(lik.pointwise(w)) + problem.prior(w)[0])
        return LogEvidence(value, method, 0.0, time.perf_counter() - t0,
                           {"map": mode, "map_converged": bool(info["success"])})
    if method == "bic":
        lik = problem.make_likelihood(exact_engine(problem, too_wide[method]))
        w, info = maximise(lik, problem.prior, problem.prior.mean, maxiter=maxiter, gtol=gtol,
                           use_prior=False, progressbar=progressbar,
                           description="BIC: maximum likelihood (L-BFGS iterations)",
                           consequence="BIC is computed at this point, not at the maximum")
        value = float(np.sum(lik.pointwise(w))) - 0.5 * problem.size * np.log(problem.n_data)
        return LogEvidence(value, method, 0.0, time.perf_counter() - t0,
                           {"ml_converged": bool(info["success"])})
    # AIS: the mass matrices come from the exact Laplace curvature (efficiency only)
    eng = exact_engine(problem, too_wide[method]) if engine == "exact" else bp_engine(bp)
    fit = laplace_fit(problem, map="exact" if engine == "exact" else "bp",
                      covariance="exact" if engine == "exact" else "bp", bp=bp, maxiter=maxiter,
                      gtol=gtol, progressbar=progressbar)
    run = ais_log_evidence(problem.make_likelihood(eng), problem.prior, fit.extra["fisher"],
                           n_runs=n_runs, n_temps=n_temps, n_leapfrog=n_leapfrog,
                           step_size=step_size, rng=rng, progressbar=progressbar)
    return LogEvidence(run.value, method, run.std_error, time.perf_counter() - t0,
                       {"log_weights": run.log_weights, "acceptance_rate": run.acceptance_rate,
                        "n_evaluations": run.n_evaluations, "engine": engine})
