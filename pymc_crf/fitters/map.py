"""``method="map"``: the maximum a posteriori point by L-BFGS on the compiled log posterior."""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import TYPE_CHECKING

import numpy as np
import pymc as pm
from pymc.blocking import DictToArrayBijection
from pymc.util import get_default_varnames

from pymc_crf.fitters.optimise import (
    DELTA,
    OPTIMIZERS,
    PERIOD,
    RULES,
    STRICT_FTOL,
    STRICT_GTOL,
    OptimiserDiagnostics,
    find_map,
)
from pymc_crf.fitters.registry import register
from pymc_crf.inference.base import warn_at_caller
from pymc_crf.model.objective import CRFLogLikelihood, GaussianLogPrior
from pymc_crf.model.random_field import MRFSpec, find_random_field
from pymc_crf.model.results import build_result
from pymc_crf.model.spec import (
    CRFSpec,
    extract_crf,
    other_model_terms,
    refuse_free_scales,
    require_gaussian_prior,
)
from pymc_crf.validation import flag, generator, positive_number, whole_number

if TYPE_CHECKING:
    from xarray import DataTree

__all__ = ["fit_map"]


@register("map")
def fit_map(model: pm.Model, *, rule: str | None = None, maxiter: int = 2000,
            gtol: float | None = None, ftol: float | None = None, delta: float | None = None,
            period: int | None = None, start: dict | None = None, jacobian: bool = False,
            log_likelihood: bool = True, jitter: float = 0.0, random_seed: int | None = None,
            engine_objective: bool | None = None, optimizer: str = "auto",
            progressbar: bool = True) -> DataTree:
    """MAP estimate of every free variable of ``model`` by L-BFGS (scipy's L-BFGS-B, or the
    package's own L-BFGS for large models: see ``optimizer``).

    The objective is the model's log posterior in the unconstrained space (without the Jacobian of
    the transforms by default, i.e. the mode of the posterior density of the original variables),
    compiled with its gradient once.

    Parameters
    ----------
    model : pm.Model
        The model (``pmc.fit`` passes the context's).
    rule : {"delta", "strict"}, optional
        Stopping rule of :func:`~pymc_crf.fitters.optimise.find_map`. ``"delta"`` (the default):
        CRFsuite's, stop when the objective improved by less than ``delta`` (relative) over the
        last ``period`` iterations, a point estimate whose test predictions no longer change
        (docs/benchmarks.md, 2026-11-28); ``"strict"``: scipy's ``gtol`` / ``ftol``, the mode to
        the last digits. Default: ``"strict"`` when ``gtol`` or ``ftol`` is given, else
        ``"delta"``.
    maxiter : int
        Iteration limit (a run stopped there warns and has ``success=False``).
    gtol, ftol
        The strict rule's tolerances (scipy's meaning: largest gradient entry, and relative
        decrease of the objective per iteration; defaults 1e-8 and 1e-15, those of the Laplace
        methods).
    delta, period
        The delta rule's parameters (defaults 1e-6 and 10; CRFsuite's delta is 1e-5, which
        changed a few test labels against the strict optimum in docs/benchmarks.md, 2026-11-28).
    start : dict, optional
        Starting values by variable name (default: the model's initial point).
    jacobian : bool
        Include the log-Jacobian of the transforms (the mode in the unconstrained space).
    log_likelihood : bool
        Add the per-graph ``log_likelihood`` group.
    jitter, random_seed
        ``jitter`` > 0 adds N(0, jitter^2) noise to the starting point (seeded by
        ``random_seed``): models with symmetric hidden states (``pmc.HCRF``) have a saddle at the
        all-zero start that L-BFGS never leaves.
    engine_objective : bool, optional
        Evaluate the log posterior and its gradient with the inference engine directly
        (:class:`~pymc_crf.model.objective.CRFLogLikelihood`) instead of a compiled PyTensor
        function: the same function (to rounding), with nothing to compile. Possible when the
        model is one ``pmc.CRF`` likelihood with an exact engine and fixed Normal priors on its
        weights, and nothing else: no other free or observed variables and no potentials
        (deterministics of the weights are fine). ``None`` (default): whenever possible; ``True``:
        raise if it is not possible; ``False``: always compile the model.
    optimizer : {"auto", "scipy", "lbfgs"}
        ``"scipy"``: scipy's L-BFGS-B; ``"lbfgs"``: the package's unbounded L-BFGS
        (:func:`~pymc_crf.fitters.lbfgs.lbfgs`, O(m d) work per iteration; the same stopping
        rules); ``"auto"``: ``"lbfgs"`` from 10^4 weights on (there
        L-BFGS-B's own work per iteration, its BLAS calls slowed by numpy's spinning BLAS
        threads, exceeds the objective's: docs/real_data.md), else ``"scipy"``.
    progressbar : bool
        Show a progress bar of the optimiser's iterations.

    Returns
    -------
    xarray.DataTree
        A one-draw ``posterior`` and an ``optimizer_result`` group
        (:class:`~pymc_crf.fitters.optimise.OptimiserDiagnostics`: ``n_iterations``,
        ``n_evaluations``, ``success``, ``objective`` = -log posterior, ``grad_norm``,
        ``message``, ``rule``, ``rule_parameters``, ``optimizer``) with the objective per
        iteration; ``attrs["settings"]`` records the rule and its parameters and whether the
        engine objective was used. ``success`` is False, with a ``ConvergenceWarning`` naming the
        reason, when the point is not a mode: ``maxiter`` reached, an objective that fell without
        limit (e.g. a hierarchical prior's scale collapsing to 0), a final gradient that is not
        small.
    """
    # the model's pmc.CRF or pmc.MRF, read once and handed on; None (an HCRF, another
    # likelihood, a refused one): the compiled path
    field = find_random_field(model)
    refuse_free_scales(field, "map")  # learned prior scales: laplace / bethe_laplace
    t0 = time.perf_counter()
    jitter = positive_number(jitter, "jitter", allow_zero=True)
    if engine_objective is not None:
        engine_objective = flag(engine_objective, "engine_objective")
    rule, stopping = _stopping_rule(rule, gtol, ftol, delta, period)
    maxiter = whole_number(maxiter, "maxiter")
    if optimizer not in OPTIMIZERS:
        raise ValueError(f"optimizer must be 'auto', 'scipy' or 'lbfgs'; got {optimizer!r}")
    settings = {"maxiter": maxiter, "rule": rule, **stopping, "jacobian": jacobian,
                "jitter": jitter, "random_seed": random_seed, "optimizer": optimizer}
    spec, why = (None, "") if engine_objective is False else _engine_objective_spec(model, field)
    if engine_objective and spec is None:
        raise ValueError(f"engine_objective=True is not possible for this model: {why}")
    if spec is not None:
        return _fit_map_engine(spec, t0, settings, start=start, log_likelihood=log_likelihood,
                               progressbar=progressbar)
    _check_start(start)
    initial = model.initial_point()
    _check_start_names(model, initial, start)
    point = initial if start is None else {**initial, **start}
    if jitter == 0:
        _warn_symmetric_hcrf_start(model, point)
    value_vars = model.value_vars
    x0 = DictToArrayBijection.map({v.name: point[v.name] for v in value_vars})
    if jitter > 0:
        x0 = x0._replace(data=x0.data + jitter * generator(random_seed, "random_seed").standard_normal(
            x0.data.size))
    fn = model.compile_fn([model.logp(jacobian=jacobian), model.dlogp(jacobian=jacobian)],
                          inputs=value_vars, point_fn=False)
    names = [v.name for v in value_vars]

    def objective(x):
        vals = DictToArrayBijection.rmap(x0._replace(data=x))
        lp, g = fn(*[vals[n] for n in names])
        if not np.isfinite(lp):
            return np.inf, np.zeros_like(x)
        return -float(lp), -np.asarray(g, dtype=np.float64)

    x, diag = _find_map(objective, x0.data, settings, progressbar)
    mx = {**point, **DictToArrayBijection.rmap(x0._replace(data=x))}
    out_vars = get_default_varnames(model.unobserved_value_vars, include_transformed=False)
    values = model.compile_fn(out_vars)(mx)
    draws = {v.name: np.asarray(val)[None, None] for v, val in zip(out_vars, values, strict=True)}
    return build_result(model, draws, "map", {**settings, "engine_objective": False},
                        time.perf_counter() - t0, diagnostics=diag.to_dict(),
                        diagnostics_group="optimizer_result", log_likelihood=log_likelihood,
                        spec=field)


def _stopping_rule(rule: str | None, gtol: float | None, ftol: float | None,
                   delta: float | None, period: int | None) -> tuple[str, dict]:
    """The rule (``None``: ``"strict"`` when ``gtol`` or ``ftol`` is given, else ``"delta"``)
    and its checked parameters; a tolerance of the other rule is refused by name."""
    strict_given = [n for n, v in (("gtol", gtol), ("ftol", ftol)) if v is not None]
    delta_given = [n for n, v in (("delta", delta), ("period", period)) if v is not None]
    if rule is None:
        rule = "strict" if strict_given else "delta"
    if rule not in RULES:
        raise ValueError(f"rule must be one of {RULES}; got {rule!r}")
    if rule == "strict":
        if delta_given:
            raise ValueError(f"{', '.join(delta_given)} belong(s) to rule='delta'; rule='strict' "
                             "stops on gtol / ftol")
        # scipy stops before the first iteration on a negative ftol or gtol ("FACTR < 0") and
        # the start would come back as the MAP
        return rule, {"gtol": positive_number(STRICT_GTOL if gtol is None else gtol, "gtol",
                                              allow_zero=True),
                      "ftol": positive_number(STRICT_FTOL if ftol is None else ftol, "ftol",
                                              allow_zero=True)}
    if strict_given:
        raise ValueError(f"{', '.join(strict_given)} belong(s) to rule='strict'; rule='delta' "
                         "stops on delta / period")
    return rule, {"delta": positive_number(DELTA if delta is None else delta, "delta",
                                           allow_zero=True),
                  "period": whole_number(PERIOD if period is None else period, "period")}


def _find_map(objective, x0: np.ndarray, settings: dict,
              progressbar: bool) -> tuple[np.ndarray, OptimiserDiagnostics]:
    """:func:`find_map` with the fitter's options; a start where the log posterior is -inf or
    NaN, and every point L-BFGS tried from there, is an error, not a MAP."""
    params = {k: settings[k] for k in ("gtol", "ftol", "delta", "period") if k in settings}
    try:
        x, diag = find_map(objective, x0, rule=settings["rule"], maxiter=settings["maxiter"],
                           optimizer=settings["optimizer"], progress=progressbar,
                           description="MAP (L-BFGS iterations)", what="pmc.fit(method='map')",
                           consequence="the weights returned are not the posterior mode",
                           warn=False, **params)
    except ValueError as err:  # the package's L-BFGS refuses a non-finite start
        if "not finite at the starting point" not in str(err):
            raise
        x, diag = x0, None
    if diag is None or not np.isfinite(diag.objective):
        raise ValueError("pmc.fit(method='map'): the log posterior is -inf or NaN at the start "
                         "and at every point L-BFGS tried: check the priors (e.g. a sigma <= 0) "
                         "and the start")
    diag.warn("pmc.fit(method='map')", "the weights returned are not the posterior mode")
    return x, diag


def _check_start(start: dict | None) -> None:
    """A start value that is not finite is an error naming ``start`` and the variable (it
    would otherwise surface as NaN log-potentials deep in the engine)."""
    if start is not None and not isinstance(start, Mapping):
        # a list or array failed with "'list' object has no attribute 'items'"
        raise TypeError(f"start must be a dict of variable name -> initial value (e.g. "
                        f"{{'W': np.zeros((F, K))}}); got {type(start).__name__}")
    for name, value in (start or {}).items():
        arr = np.asarray(value, dtype=np.float64)
        bad = ~np.isfinite(arr)
        if bad.any():
            where = np.argwhere(bad)[0]
            entry = f" at index {tuple(int(i) for i in where)}" if arr.ndim else ""
            raise ValueError(f"start[{name!r}] is not finite{entry} (value "
                             f"{arr[tuple(where)] if arr.ndim else float(arr)}): every start "
                             "value must be a finite number")


def _check_start_names(model: pm.Model, initial: dict, start: dict | None) -> None:
    """Every name in ``start`` is a value variable of ``model`` with that variable's shape (the
    compiled objective reads the value variables alone: unchecked, an unknown name fails only at
    the final evaluation, after the whole optimisation, with PyTensor's "Too many parameter
    passed to pytensor function", and a wrong shape with "Wrong number of dimensions" naming no
    variable)."""
    if not start:
        return
    names = [v.name for v in model.value_vars]
    unknown = sorted(set(start) - set(names))
    if unknown:
        # a transformed variable's value variable has its own name (``s_log__`` for ``s``)
        renamed = {model.values_to_rvs[v].name: v.name for v in model.value_vars
                   if model.values_to_rvs[v].name != v.name}
        hints = [f"{n!r} is given as {renamed[n]!r} (its value in the transformed space)"
                 for n in unknown if n in renamed]
        raise ValueError(f"start names unknown variables {unknown}; the free variables are "
                         f"{names}" + (f"; {', '.join(hints)}" if hints else ""))
    for name, value in start.items():
        want = np.shape(initial[name])
        if np.shape(value) != want:
            raise ValueError(f"start[{name!r}] has shape {np.shape(value)}; the variable has "
                             f"shape {want}")


def _warn_symmetric_hcrf_start(model: pm.Model, point: dict) -> None:
    """Warn when an HCRF's weights all start at one value (PyMC's initial point of a zero-mean
    Normal is 0): every hidden state then gets the same gradient and L-BFGS stays in the
    symmetric subspace, where the HCRF predicts at chance (docs/hcrf.md)."""
    from pymc_crf.distributions.hcrf import find_hcrf

    try:
        rv, _, _ = find_hcrf(model)
    except ValueError:
        return
    starts = []
    for w in rv.owner.op.weights(rv.owner):
        value = model.rvs_to_values.get(w)
        if value is None or value.name not in point:
            return  # an expression or a constant: its start is not one value by construction
        starts.append(np.ravel(point[value.name]))
    flat = np.concatenate(starts)
    # one hidden state has no symmetry between states to stay in
    if rv.owner.op.n_states > 1 and flat.size and np.all(flat == flat[0]):
        warn_at_caller("pmc.HCRF: every weight starts at the same value, where all hidden states "
                       "get the same gradient and MAP stays in the symmetric subspace (it then "
                       "predicts at chance); pass jitter=0.1 with a random_seed, or a random "
                       "start=", UserWarning)


def _engine_objective_spec(model: pm.Model, field: CRFSpec | MRFSpec | None
                           ) -> tuple[CRFSpec | None, str]:
    """The model's CRF spec (``field``, as ``fit_map`` read it) when the engine objective
    applies, else (None, the reason)."""
    if isinstance(field, MRFSpec):
        return None, "its likelihood is a pmc.MRF (the engine objective is the CRF's)"
    try:
        # no CRF read: extract_crf says why (the only second read, on the way to a refusal or
        # the compiled path)
        spec = field if field is not None else extract_crf(model)
        require_gaussian_prior(spec, "map")
    except ValueError as err:
        return None, str(err)
    if not spec.info.exact:
        return None, f"its CRF uses the approximate {spec.info.engine_name!r} engine"
    reason = other_model_terms(spec)
    if reason:
        return None, reason
    if any(model.rvs_to_initial_values.get(rv) is not None for rv in model.free_RVs):
        return None, "it sets initial values (initval); pass start= instead"
    return spec, ""


def negative_log_posterior(lik, prior):
    """``x -> (-log posterior, its gradient)`` of a log-likelihood and log prior of the flat
    weights (each ``x -> (value, gradient)``); ``inf`` where the likelihood is -inf or NaN, so the
    line search steps back."""

    def objective(x):
        ll, g = lik(x)
        lp, gp = prior(x)
        if not np.isfinite(ll):
            return np.inf, np.zeros_like(x)
        return -(ll + lp), -(g + gp)

    return objective


def weight_start(spec: CRFSpec, prior: GaussianLogPrior, start: dict | None) -> np.ndarray:
    """The flat starting weights of a weight-space MAP: the prior mean, with the weights that
    ``start`` names (checked: known names, their shapes, finite values) put in."""
    _check_start(start)
    x0 = prior.mean.copy()
    if start:
        unknown = set(start) - {w.name for w in spec.weights}
        if unknown:
            raise ValueError(f"start names unknown variables {sorted(unknown)}; the free "
                             f"variables are {[w.name for w in spec.weights]}")
        for w in spec.weights:
            if w.name in start and np.shape(start[w.name]) != w.shape:
                raise ValueError(f"start[{w.name!r}] has shape {np.shape(start[w.name])}; the "
                                 f"variable has shape {w.shape}")
        x0 = spec.flatten({**spec.unflatten(x0), **start})
    return x0


def _fit_map_engine(spec: CRFSpec, t0: float, settings: dict, *, start: dict | None,
                    log_likelihood: bool, progressbar: bool):
    """fit_map on the engine objective: log-likelihood (CRFLogLikelihood) + Normal log prior.

    The starting point is the prior mean, which is PyMC's initial point for a Normal. (``jitter``
    draws its noise in the flat weight order, node weights first, so the same seed may give a
    different start than the compiled path, which follows the model's variable order.)"""
    lik, prior = CRFLogLikelihood(spec), GaussianLogPrior(spec)
    x0 = weight_start(spec, prior, start)
    if settings["jitter"] > 0:
        rng = generator(settings["random_seed"], "random_seed")
        x0 = x0 + settings["jitter"] * rng.standard_normal(x0.size)

    x, diag = _find_map(negative_log_posterior(lik, prior), x0, settings, progressbar)
    draws = {k: v[None, None] for k, v in spec.unflatten(x).items()}
    if spec.model.deterministics:  # small graphs of the weights: compiled, without the CRF
        out_vars = get_default_varnames(spec.model.unobserved_value_vars, include_transformed=False)
        values = spec.model.compile_fn(out_vars)(spec.unflatten(x))
        draws = {v.name: np.asarray(val)[None, None]
                 for v, val in zip(out_vars, values, strict=True)}
    pointwise = ({spec.observed_name: lik.pointwise(x)[None, None]}
                 if log_likelihood else None)
    return build_result(spec.model, draws, "map", {**settings, "engine_objective": True},
                        time.perf_counter() - t0, diagnostics=diag.to_dict(),
                        diagnostics_group="optimizer_result", log_likelihood=False,
                        pointwise_log_likelihood=pointwise, spec=spec)
