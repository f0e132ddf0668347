"""One entry point for every "find the mode" of the package: :func:`find_map`.

``map``, Bethe-Laplace's MAP (``bethe_laplace.laplace.maximise``), the evidence estimates and the
beta-process VI's inner theta step all minimise through :func:`find_map`, so they share one choice
of optimiser, one set of defaults, one set of stopping rules and one diagnostics record
(:class:`OptimiserDiagnostics`, the result's ``optimizer_result`` group).

Optimisers. scipy's L-BFGS-B, or the package's O(m d) L-BFGS (:func:`.lbfgs.lbfgs`);
``optimizer="auto"`` takes the latter from :data:`LARGE` = 10^4 weights on when there are no
bounds (``docs/real_data.md``), the former below that size or with bounds.

Stopping rules.

* ``"strict"``: scipy's tests, the largest gradient entry at most ``gtol`` or the relative
  decrease of one iteration ``(f_k - f_{k+1}) / max(|f_k|, |f_{k+1}|, 1)`` at most ``ftol``
  (defaults :data:`STRICT_GTOL`, :data:`STRICT_FTOL`). A run that stops on ``ftol`` (or a
  stalled line search) with a gradient entry above ``gtol`` continues with gradient-only
  steps (:func:`.lbfgs.polish`; without bounds, and when ``ftol`` <= 1e-12, i.e. the mode was
  asked for to rounding): ``f`` stops resolving the mode long before
  ``g`` does (on a 3 x 3 Ising grid with 200 samples scipy stopped at max |g| ~ 1e-5, and two
  evaluations of the same objective that differ in rounding ended 2e-7 apart). For the methods
  that need the mode itself: Laplace / Bethe-Laplace (the curvature is taken there) and the
  evidence estimates.
* ``"delta"``: CRFsuite's L-BFGS rule (Okazaki 2007; its ``delta`` and ``period`` parameters, libLBFGS's
  ``delta`` / ``past`` test): stop when the objective's relative improvement over the last
  ``period`` iterations, ``(f_{k-period} - f_k) / max(|f_k|, 1)``, is below ``delta`` (here
  1e-6 over 10 iterations; CRFsuite's default delta is 1e-5, whose MAP labelled 5 of 5700 test
  positions of the benchmark chain data, and 2 of 441 of a small chain test set, unlike the strict
  optimum, against 1 and 0 for 1e-6 at 26 % and 13 % more iterations: ``docs/benchmarks.md``,
  2026-11-28). CRFsuite's other test, ``||g|| / max(||x||, 1) < epsilon``, is left
  out: an objective running off to -inf passes it (a linear one after a single long step).
  The default of ``pmc.fit(method="map")``: a point estimate for prediction,
  where the last digits of the weights do not change a labelling (``docs/benchmarks.md``,
  2026-11-28).

Honest success. Whatever stopped the run, ``success`` is decided at the end by the same checks:

1. the objective, gradient and point are finite;
2. the run did not stop at ``maxiter`` (or scipy's limit of evaluations);
3. the objective did not keep falling at an undiminished pace to the end (its decrease over
   the last ``period`` iterations at least :data:`DIVERGING_DROP` of its scale and no smaller in
   the second half of that window than in the first): an objective unbounded below, e.g. the
   scale of a hierarchical prior collapsing to 0, stops L-BFGS only when rounding stalls its
   line search, which scipy reports as convergence;
4. the final (projected) gradient is small relative to the objective's scale:
   ``max |g_i| <= check_gtol * max(1, |f_0|, |f|)`` (``f_0`` the objective at the start).

A stop for lack of progress (a line search stalled at the limit of float precision, scipy's
``ABNORMAL_TERMINATION_IN_LNSRCH``) that passes these checks counts as converged; a stop by the
rule that fails them does not. A failed run warns (``ConvergenceWarning``) with the reason.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np
import xarray as xr
from scipy.optimize import minimize

from pymc_crf.fitters.lbfgs import lbfgs, polish
from pymc_crf.fitters.progress import fit_progress
from pymc_crf.inference.base import ConvergenceWarning, warn_at_caller
from pymc_crf.validation import positive_number, whole_number

__all__ = ["OptimiserDiagnostics", "find_map", "RULES", "OPTIMIZERS", "STRICT_GTOL", "STRICT_FTOL",
           "DELTA", "PERIOD", "CHECK_GTOL", "LARGE"]

RULES = ("strict", "delta")
_NOT_CONVERGED = "; NOT CONVERGED: "
OPTIMIZERS = ("auto", "scipy", "lbfgs")

#: the strict rule's tolerances (scipy's meaning): those Laplace and Bethe-Laplace always used
STRICT_GTOL = 1e-8
STRICT_FTOL = 1e-15
#: relative improvement ``delta`` over ``period`` iterations (CRFsuite's names; its default
#: delta is 1e-5, module docstring)
DELTA = 1e-6
PERIOD = 10
#: the strict rule polishes (gradient-only steps) a run whose ``ftol`` is at most this: such a
#: run asked for the mode to rounding; a looser ``ftol`` (e.g. 1e-6) is a deliberate early stop
POLISH_FTOL = 1e-12
#: success needs ``max |g_i| <= CHECK_GTOL * max(1, |f_0|, |f|)`` at the end
CHECK_GTOL = 1e-3
#: a decrease of at least this fraction of the objective's scale over the last ``period``
#: iterations, not slowing down, is a run still falling when it stopped
DIVERGING_DROP = 1e-3

#: from this many weights on, ``optimizer="auto"`` takes the O(m d) L-BFGS. L-BFGS-B's level-1
#: BLAS calls (scipy's OpenBLAS) start to use threads near here and then contend with numpy's
#: BLAS threads of the objective, so above it the package's L-BFGS reaches the same optimum in
#: less time (docs/benchmarks.md, "Real data: the text examples", optimiser).
LARGE = 10_000


@dataclass
class OptimiserDiagnostics:
    """What one :func:`find_map` run did: the ``optimizer_result`` group of a result.

    ``objective`` is the final value of the minimised function (for a MAP, -log posterior),
    ``grad_norm`` the Euclidean norm of its final (projected, with bounds) gradient,
    ``objective_trace`` its value after every iteration; ``rule`` and ``rule_parameters`` the
    stopping rule and its settings; ``optimizer`` the L-BFGS that ran (``"scipy"`` or
    ``"lbfgs"``); ``message`` why it stopped and, when ``success`` is False, why the point is
    not accepted as the optimum.
    """

    n_iterations: int
    n_evaluations: int
    success: bool
    objective: float
    grad_norm: float
    message: str
    rule: str
    objective_trace: np.ndarray
    rule_parameters: dict = field(default_factory=dict)
    optimizer: str = "scipy"

    def to_dict(self) -> dict:
        """The record as numpy scalars and arrays (``rule_parameters`` as a JSON string), the
        form ``build_result(diagnostics=...)`` takes."""
        return {"objective_trace": np.asarray(self.objective_trace, dtype=np.float64),
                "n_iterations": np.int64(self.n_iterations),
                "n_evaluations": np.int64(self.n_evaluations),
                "success": np.bool_(self.success), "objective": np.float64(self.objective),
                "grad_norm": np.float64(self.grad_norm), "message": str(self.message),
                "rule": str(self.rule),
                "rule_parameters": json.dumps(self.rule_parameters, sort_keys=True),
                "optimizer": str(self.optimizer)}

    def to_dataset(self) -> xr.Dataset:
        """The ``optimizer_result`` group: scalars, and ``objective_trace`` over ``iteration``."""
        return xr.Dataset({k: (("iteration",) if k == "objective_trace" else (), v)
                           for k, v in self.to_dict().items()})

    @classmethod
    def from_dataset(cls, ds: xr.Dataset) -> OptimiserDiagnostics:
        """The record back from a result's ``optimizer_result`` group."""
        return cls(n_iterations=int(ds["n_iterations"]), n_evaluations=int(ds["n_evaluations"]),
                   success=bool(ds["success"]), objective=float(ds["objective"]),
                   grad_norm=float(ds["grad_norm"]), message=str(ds["message"].values),
                   rule=str(ds["rule"].values),
                   objective_trace=np.asarray(ds["objective_trace"].values),
                   rule_parameters=json.loads(str(ds["rule_parameters"].values)),
                   optimizer=str(ds["optimizer"].values))

    @property
    def reason(self) -> str:
        """Why the point is not accepted as the optimum ("" on success)."""
        return "" if self.success else self.message.split(_NOT_CONVERGED)[-1]

    def warn(self, what: str, consequence: str) -> None:
        """A ``ConvergenceWarning`` ``"{what}: {reason}; {consequence}."`` when not
        ``success``, attributed to the user's line."""
        if not self.success:
            warn_at_caller(f"{what}: {self.reason}; {consequence}.", ConvergenceWarning)

    def settings(self) -> dict:
        """The stopping rule and its parameters, for a fit's ``attrs["settings"]``."""
        return {"rule": self.rule, **self.rule_parameters}


class _Counted:
    """The objective with a count of its evaluations and its first value (the scale of the
    success check)."""

    def __init__(self, fun: Callable[[np.ndarray], tuple[float, np.ndarray]]):
        self.fun = fun
        self.n = 0
        self.f0 = np.nan

    def __call__(self, x: np.ndarray) -> tuple[float, np.ndarray]:
        f, g = self.fun(x)
        f, g = float(f), np.asarray(g, dtype=np.float64)
        if self.n == 0:
            self.f0 = f
        self.n += 1
        return f, g


class _DeltaRule:
    """CRFsuite's stopping test (module docstring): the relative improvement over ``period``
    iterations below ``delta``."""

    def __init__(self, f0: float, delta: float, period: int):
        self.history = [f0]
        self.delta, self.period = delta, period

    def __call__(self, f: float) -> str | None:
        self.history.append(f)
        if len(self.history) > self.period:
            rate = (self.history[-1 - self.period] - f) / max(abs(f), 1.0)
            if abs(rate) < self.delta:
                return (f"CONVERGENCE: relative improvement {rate:.3g} over the last "
                        f"{self.period} iterations < delta = {self.delta:g}")
        return None


def _projected(g: np.ndarray, x: np.ndarray, bounds: np.ndarray | None) -> np.ndarray:
    """The gradient with the components that push a coordinate out through its bound zeroed."""
    if bounds is None:
        return g
    pg = g.copy()
    pg[(x <= bounds[:, 0]) & (g > 0)] = 0.0
    pg[(x >= bounds[:, 1]) & (g < 0)] = 0.0
    return pg


def _check(x: np.ndarray, f: float, g: np.ndarray, f0: float, trace: Sequence[float],
           nit: int, maxiter: int, period: int, check_gtol: float,
           limit: str | None = None) -> str | None:
    """Why the final point is not the optimum (module docstring, checks 1-4), or None."""
    if not (np.isfinite(f) and np.all(np.isfinite(g)) and np.all(np.isfinite(x))):
        return "the objective or its gradient is not finite at the final point"
    g_max = float(np.max(np.abs(g))) if g.size else 0.0
    scale = max(1.0, abs(f0) if np.isfinite(f0) else 0.0, abs(f))
    if limit is not None:
        return f"L-BFGS stopped at {limit} before converging"
    if nit >= maxiter:
        return (f"L-BFGS stopped at maxiter={maxiter} iterations before converging (gradient "
                f"norm {float(np.linalg.norm(g)):.3g}). Increase maxiter")
    if len(trace) > period:
        window = np.asarray(trace[-period - 1:], dtype=np.float64)
        drop = float(window[0] - window[-1])
        half = period // 2
        first, second = window[0] - window[half], window[half] - window[-1]
        if drop >= DIVERGING_DROP * scale and second >= first:
            return (f"the objective was still falling at an undiminished pace when L-BFGS "
                    f"stopped (by {drop:.3g} over the last {period} iterations, to {f:.6g}; "
                    f"largest gradient entry {g_max:.3g}): it looks unbounded below, e.g. the "
                    "scale of a hierarchical prior collapsing to 0")
    if g_max > check_gtol * scale:
        return (f"the final gradient is not small: its largest entry is {g_max:.3g}, "
                f"{g_max / scale:.2g} of the objective's scale {scale:.3g} (at most "
                f"{check_gtol:g} accepted)")
    return None


def find_map(objective: Callable[[np.ndarray], tuple[float, np.ndarray]], x0: np.ndarray, *,
             rule: str = "strict", maxiter: int = 2000, gtol: float = STRICT_GTOL,
             ftol: float = STRICT_FTOL, delta: float = DELTA, period: int = PERIOD,
             check_gtol: float = CHECK_GTOL,
             optimizer: str = "auto", bounds: Sequence[tuple[float, float]] | None = None,
             progress: bool = False, description: str = "MAP (L-BFGS iterations)",
             what: str = "MAP", consequence: str = "the point returned is not the mode",
             warn: bool = True) -> tuple[np.ndarray, OptimiserDiagnostics]:
    """Minimise ``objective`` from ``x0`` by L-BFGS under one stopping rule, with an honest
    success flag (module docstring).

    Parameters
    ----------
    objective : callable
        ``x -> (f, grad)``; ``f = inf`` (e.g. outside the support) makes the line search step
        back.
    x0 : array (d,)
        Starting point.
    rule : {"strict", "delta"}
        Stopping rule (module docstring).
    maxiter : int
        Iteration limit (a run stopped by it has ``success=False``).
    gtol, ftol
        The strict rule's tolerances (scipy's meaning).
    delta, period
        The delta rule's parameters (CRFsuite's names; :data:`DELTA`, :data:`PERIOD`).
    check_gtol : float
        Success needs ``max |g_i| <= check_gtol * max(1, |f_0|, |f|)`` at the end.
    optimizer : {"auto", "scipy", "lbfgs"}
        scipy's L-BFGS-B, the package's L-BFGS (no bounds), or ``"auto"``: the package's from
        :data:`LARGE` weights on when there are no bounds, else scipy's.
    bounds : sequence of (low, high), optional
        Box constraints (scipy's L-BFGS-B only).
    progress : bool
        Show a progress bar of the iterations, titled ``description``.
    what, consequence, warn
        A failed run warns (``ConvergenceWarning``, when ``warn``) as ``"{what}: {reason};
        {consequence}"``.

    Returns
    -------
    x : array (d,)
        The final point.
    diagnostics : OptimiserDiagnostics
    """
    if rule not in RULES:
        raise ValueError(f"rule must be one of {RULES}; got {rule!r}")
    if optimizer not in OPTIMIZERS:
        raise ValueError(f"optimizer must be one of {OPTIMIZERS}; got {optimizer!r}")
    maxiter = whole_number(maxiter, "maxiter")
    # scipy stops before the first iteration on a negative ftol or gtol ("FACTR < 0")
    gtol = positive_number(gtol, "gtol", allow_zero=True)
    ftol = positive_number(ftol, "ftol", allow_zero=True)
    delta = positive_number(delta, "delta", allow_zero=True)
    period = whole_number(period, "period")
    check_gtol = positive_number(check_gtol, "check_gtol")
    x0 = np.array(x0, dtype=np.float64).ravel()
    box = None if bounds is None else np.asarray(bounds, dtype=np.float64).reshape(x0.size, 2)
    if optimizer == "lbfgs" and box is not None:
        raise ValueError("optimizer='lbfgs' takes no bounds; use 'scipy'")
    own = optimizer == "lbfgs" or (optimizer == "auto" and box is None and x0.size >= LARGE)
    params = ({"gtol": gtol, "ftol": ftol} if rule == "strict"
              else {"delta": delta, "period": period})
    fun = _Counted(objective)
    trace: list[float] = []
    stop_message: list[str] = []
    with fit_progress(description, maxiter, progress) as bar:
        if own:
            res = _run_own(fun, x0, rule, maxiter, gtol, ftol, delta, period, bar, stop_message)
            trace = list(res.trace)
            x, f, g, nit = res.x, float(res.fun), np.asarray(res.jac), int(res.nit)
            message = stop_message[0] if stop_message else str(res.message)
            limit = None
        else:
            x, f, g, nit, message, limit = _run_scipy(fun, x0, rule, maxiter, gtol, ftol, delta,
                                                      period, box, bar, trace)
        g = _projected(np.asarray(g, dtype=np.float64), x, box)
        window = period if rule == "delta" else PERIOD
        why = _check(x, f, g, fun.f0, trace, nit, maxiter, window, check_gtol, limit)
        if (rule == "strict" and ftol <= POLISH_FTOL and why is None and box is None and g.size
                and np.max(np.abs(g)) > gtol):
            # the line search on f stalled in rounding near the mode before max |g| <= gtol:
            # gradient-only steps resolve it further (lbfgs.polish); the final point is checked again
            x, f, g, more = polish(fun, x, f, g, gtol=gtol, maxiter=100)
            if more:
                trace += more
                message = (f"{message}; then {len(more)} gradient-only steps to max |g| = "
                           f"{float(np.max(np.abs(g))):.3g}")
                why = _check(x, f, g, fun.f0, trace, nit, maxiter, window, check_gtol, limit)
                nit += len(more)
                for _ in more:
                    bar.advance()
    if why is not None:
        message = f"{message}{_NOT_CONVERGED}{why}"

    diag = OptimiserDiagnostics(n_iterations=nit, n_evaluations=fun.n, success=why is None,
                                objective=f, grad_norm=float(np.linalg.norm(g)), message=message,
                                rule=rule, objective_trace=np.asarray(trace, dtype=np.float64),
                                rule_parameters=params,
                                optimizer="lbfgs" if own else "scipy")
    if warn:
        diag.warn(what, consequence)
    return x, diag


def _run_own(fun: _Counted, x0, rule, maxiter, gtol, ftol, delta, period, bar,
             stop_message: list[str]):
    """The package's L-BFGS; the delta rule through its ``stop`` hook."""
    if rule == "strict":
        return lbfgs(fun, x0, maxiter=maxiter, gtol=gtol, ftol=ftol,
                     callback=lambda f: bar.advance())
    holder: dict = {}

    def stop(x, f, g):
        if "rule" not in holder:
            holder["rule"] = _DeltaRule(fun.f0, delta, period)
        msg = holder["rule"](f)
        if msg is not None:
            stop_message.append(msg)
        return msg is not None

    return lbfgs(fun, x0, maxiter=maxiter, gtol=0.0, ftol=0.0, callback=lambda f: bar.advance(),
                 stop=stop)


def _run_scipy(fun: _Counted, x0, rule, maxiter, gtol, ftol, delta, period, box, bar,
               trace: list[float]):
    """scipy's L-BFGS-B; the delta rule through its callback (``StopIteration`` ends the run)."""
    holder: dict = {}
    stopped: list[str] = []

    def callback(intermediate_result):
        f = float(intermediate_result.fun)
        trace.append(f)
        bar.advance()
        if rule == "delta":
            if "rule" not in holder:
                holder["rule"] = _DeltaRule(fun.f0, delta, period)
            msg = holder["rule"](f)
            if msg is not None:
                stopped.append(msg)
                raise StopIteration

    options = ({"maxiter": maxiter, "gtol": gtol, "ftol": ftol} if rule == "strict"
               else {"maxiter": maxiter, "gtol": 0.0, "ftol": 0.0})
    res = minimize(fun, x0, jac=True, method="L-BFGS-B", callback=callback,
                   bounds=None if box is None else [tuple(b) for b in box], options=options)
    message = stopped[0] if stopped else str(res.message)
    # scipy's other limit: 15,000 evaluations (maxfun)
    limit = "scipy's limit of evaluations" if "EVALUATIONS EXCEEDS LIMIT" in message else None
    return (np.asarray(res.x, dtype=np.float64), float(res.fun), np.asarray(res.jac), int(res.nit),
            message, limit)
