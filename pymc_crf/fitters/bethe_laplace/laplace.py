"""The Laplace approximation of a random-field weight posterior: MAP point and curvature there.

``laplace_fit`` finds the MAP weights (exact gradients, or BP beliefs in the gradient after a
pseudo-moment-matching start) and the negative Hessian of the log posterior

    A = J^T C J - (probit terms) + Lambda^{-1},

i.e. ``N Sigma^{-1} = C + (N Lambda)^{-1}`` of Welling & Parise 2006 eq. (7) (CRF version eq. (12):
C summed over the graphs), with C exact or by linear response. The fitter and the evidence
estimates are both built on it.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass, field

import numpy as np

from pymc_crf.fitters.bethe_laplace.curvature import fisher_matrix, potential_curvature
from pymc_crf.fitters.bethe_laplace.pmm import pmm_start
from pymc_crf.fitters.bethe_laplace.problem import WeightProblem, bp_engine, exact_engine
from pymc_crf.fitters.covariance import DenseGaussian, cholesky_inverse, cholesky_pd
from pymc_crf.fitters.optimise import STRICT_GTOL, find_map
from pymc_crf.inference.bp import BeliefPropagation, ConvergenceWarning

__all__ = ["LaplaceFit", "laplace_fit", "maximise", "MAP_MODES", "COVARIANCE_MODES"]

MAP_MODES = ("exact", "bp")
COVARIANCE_MODES = ("bp", "exact")


@dataclass
class LaplaceFit:
    """MAP weights, the negative log-posterior Hessian and what went into them.

    ``log_likelihood`` is ``log p(D | mean)`` with the covariance engine's log Z (Bethe for
    ``covariance="bp"``); ``bp_report`` the BP convergence report at the MAP (None for exact);
    ``cholesky`` the lower Cholesky factor of ``precision``.
    """

    mean: np.ndarray
    precision: np.ndarray
    covariance: np.ndarray
    log_likelihood: float
    log_prior: float
    n_data: int
    map_mode: str
    covariance_mode: str
    optimizer: dict
    bp_report: dict | None = None
    pmm_start: np.ndarray | None = None
    extra: dict = field(default_factory=dict)
    cholesky: np.ndarray | None = None

    def gaussian(self) -> DenseGaussian:
        """``N(mean, covariance)`` for draws: by the precision's Cholesky factor when the fit
        holds it (no second factorisation), else by factorising the precision."""
        if self.cholesky is None:
            return DenseGaussian(self.mean, self.precision)
        return DenseGaussian.from_cholesky(self.mean, self.precision, self.cholesky)

    @property
    def bp_converged(self) -> bool:
        return True if self.bp_report is None else bool(np.all(self.bp_report["converged"]))

    @property
    def bp_bound_ok(self) -> bool:
        """Whether BP's Bethe log Z at the MAP is nowhere below the score of a single labelling
        (its bound check; True for exact inference)."""
        return True if self.bp_report is None else bool(np.all(self.bp_report["bound_ok"]))


def maximise(lik, prior, x0: np.ndarray, *, maxiter: int = 2000, gtol: float = STRICT_GTOL,
             use_prior: bool = True, progressbar: bool = False,
             description: str = "MAP (L-BFGS iterations)",
             consequence: str = "the Laplace mean, covariance and evidence are those of this "
                                "point, not of the mode") -> tuple[np.ndarray, dict]:
    """Ascent of ``log p(D | w) (+ log p(w))`` by :func:`~pymc_crf.fitters.optimise.find_map`
    under its strict rule (the curvature is taken at the point: it must be the mode); returns
    the point and the optimiser record (``OptimiserDiagnostics.to_dict``), with a progress bar
    of the iterations when ``progressbar``. A run that fails find_map's checks (``maxiter``, an
    objective unbounded above, a gradient that is not small) warns, naming the
    ``consequence``."""

    def objective(x):
        ll, g = lik(x)
        if use_prior:
            lp, gp = prior(x)
            ll, g = ll + lp, g + gp
        if not np.isfinite(ll):
            return np.inf, np.zeros_like(x)
        return -ll, -g

    w, diag = find_map(objective, np.asarray(x0, dtype=np.float64), rule="strict",
                       maxiter=maxiter, gtol=gtol, progress=progressbar,
                       description=description, what=description.split(" (")[0],
                       consequence=consequence)
    return w, diag.to_dict()


class _Whitened:
    """``f(mu + sd * z)`` and its gradient in ``z``, for a function ``f(w) -> (value, grad)``:
    a MAP search in scaled coordinates. With the prior sds (prior-whitened) the curvature
    ``sd H sd + I`` stays well conditioned when some prior sds are tiny (groups of weights
    pruned by learned scales); ``diagonal_laplace.search_scale`` gives coordinates that also
    temper the curvature of frequent features."""

    def __init__(self, f, mu: np.ndarray, sd: np.ndarray):
        self.f, self.mu, self.sd = f, mu, sd

    def __call__(self, z: np.ndarray) -> tuple[float, np.ndarray]:
        v, g = self.f(self.mu + self.sd * z)
        return v, self.sd * g


def _samples(problem: WeightProblem) -> np.ndarray | None:
    """The observed labellings (S, N) of an MRF (for pseudo-moment matching), else None."""
    if problem.kind != "mrf":
        return None
    return np.asarray(problem.spec.labels, dtype=np.int64)


def laplace_fit(problem: WeightProblem, *, map: str = "exact", covariance: str = "bp",
                bp: BeliefPropagation | None = None, maxiter: int = 2000, gtol: float = 1e-8,
                start: np.ndarray | None = None, warn: bool = True,
                progressbar: bool = False, whiten: bool = False) -> LaplaceFit:
    """MAP weights and Laplace curvature of ``problem``.

    Parameters
    ----------
    problem : WeightProblem
    map : {"exact", "bp"}
        ``"exact"``: gradients from the exact engine (BL-MP); ``"bp"``: BP beliefs in the gradient,
        started at pseudo-moment matching for MRFs (at the prior mean for CRFs) (BL-BP,
        Welling & Parise 2006 sec. 7).
    covariance : {"bp", "exact"}
        C by linear response on the BP fixed point at the MAP, or exactly.

        On forests (chains, trees) BP is exact, so the ``"bp"`` modes give the exact engine's
        gradients and covariance; they are computed by the exact engine (chain
        forward-backward, junction tree), which is much faster than message passing over
        thousands of nodes, and ``bp_report`` is then None.
    bp : BeliefPropagation, optional
        The BP engine for ``"bp"`` parts (default: damping 0.5, tol 1e-11).
    maxiter, gtol
        L-BFGS settings.
    start : array (d,), optional
        Starting weights (overrides the default start).
    warn : bool
        Warn (``ConvergenceWarning``) when BP has not converged at the MAP.
    progressbar : bool
        Show a progress bar of the L-BFGS iterations.
    whiten : bool
        Search for the MAP in the prior-whitened coordinates ``z = (w - mu) / sd`` (``gtol`` then
        applies to the gradient in z): for priors whose sds span many orders of magnitude.
    """
    if map not in MAP_MODES:
        raise ValueError(f"map must be one of {MAP_MODES}; got {map!r}")
    if covariance not in COVARIANCE_MODES:
        raise ValueError(f"covariance must be one of {COVARIANCE_MODES}; got {covariance!r}")
    d = problem.size
    prior = problem.prior
    bp_eng = bp_engine(bp)
    x0 = prior.mean.copy() if start is None else np.asarray(start, dtype=np.float64).copy()
    if x0.shape != (d,):
        raise ValueError(f"start must have shape ({d},); got {x0.shape}")
    w_pmm = None
    forest = problem.batch.is_forest
    if map == "exact" or forest:
        lik_map = problem.make_likelihood(exact_engine(problem))
    else:
        lik_map = problem.make_likelihood(bp_eng)
        samples = _samples(problem)
        if samples is not None and start is None:
            w_pmm = pmm_start(lik_map, samples)
            x0 = w_pmm.copy()
    description = f"Laplace: MAP by {'BP' if map == 'bp' else 'exact'} gradients"
    if whiten:
        mu, sd = prior.mean, prior.sd
        z, info = maximise(_Whitened(lik_map, mu, sd), _Whitened(prior, mu, sd), (x0 - mu) / sd,
                           maxiter=maxiter, gtol=gtol, progressbar=progressbar,
                           description=description)
        w = mu + sd * z
    else:
        w, info = maximise(lik_map, prior, x0, maxiter=maxiter, gtol=gtol,
                           progressbar=progressbar, description=description)
    bethe = covariance == "bp" and not forest
    cov_engine = bp_eng if bethe else exact_engine(problem)
    lik_cov = problem.make_likelihood(cov_engine)
    node, edge = lik_cov.log_potentials(w)
    state, report = None, None
    if bethe:
        state = bp_eng.run(problem.batch, node, edge)
        report = {k: np.asarray(v) for k, v in state.report.items()}
        if warn and not report["converged"].all():
            bad = int((~report["converged"]).sum())
            warnings.warn(
                f"BP did not converge at the MAP weights on {bad} of {report['converged'].size} "
                f"graphs (largest final message change {report['max_change'].max():.3g}): the "
                "Bethe log Z and linear-response covariance there are unreliable (recorded in "
                "the result's diagnostics as bp_converged=False)", ConvergenceWarning,
                stacklevel=3)
    A_lik = fisher_matrix(lik_cov, w, cov_engine, state)
    if problem.potential != "loglinear":
        # the potential's curvature is weighted by the residuals of the MAP's own gradient
        # (observed minus expected statistics, exact for map="exact"): at the MAP they balance
        # the prior, which keeps A positive definite where the posterior is log-concave
        m = lik_map.engine.marginals(problem.batch, node, edge)
        extra = potential_curvature(lik_cov, w, m.node, m.edge)
        if extra is not None:
            A_lik = A_lik - extra
            A_lik = 0.5 * (A_lik + A_lik.T)
    A = A_lik.copy()  # fisher_matrix is symmetric
    A[np.diag_indices_from(A)] += 1.0 / prior.sd**2
    hint = ""
    if bethe:
        hint = ("; this fit pairs the MAP of " + ("exact" if map == "exact" else "BP")
                + " gradients with BP linear response: covariance='exact' (the exact Laplace "
                "approximation, when an exact engine can run)"
                + (" or map='bp' (BP throughout)" if map == "exact" else "")
                + " may exist where this pairing does not")
    L = cholesky_pd(A, hint)  # one factorisation: covariance, log det and draws
    cov = cholesky_inverse(L, A, hint)
    ll = float(np.sum(lik_cov.pointwise(w)))
    lp = float(prior(w)[0])
    return LaplaceFit(w, A, cov, ll, lp, problem.n_data, map, covariance, info, report, w_pmm,
                      {"fisher": A_lik}, L)


def laplace_log_evidence(fit: LaplaceFit) -> float:
    """Laplace estimate of ``log p(D)`` with all O(1) terms (Parise & Welling 2006 eq. (8); CRF
    version eqs. (10)-(13)):

        log p(D | w) + log p(w) + d/2 log(2 pi) - 1/2 log det A,

    at the MAP ``w``, ``A`` the negative log-posterior Hessian. This is eq. (8) with
    ``-d/2 log N - 1/2 log det(C - H/N) = -1/2 log det(N C - H)``; the log-likelihood uses the
    Bethe log Z when the fit's covariance is by linear response.
    """
    if fit.cholesky is None:
        logdet = np.linalg.slogdet(fit.precision)[1]
    else:
        logdet = 2.0 * np.sum(np.log(np.diag(fit.cholesky)))
    d = fit.mean.size
    return float(fit.log_likelihood + fit.log_prior + 0.5 * d * np.log(2.0 * np.pi) - 0.5 * logdet)
