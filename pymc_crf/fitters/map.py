"""``method="map"``: the maximum a posteriori point by L-BFGS on the compiled log posterior."""

from __future__ import annotations

import time

import numpy as np
import pymc as pm
from pymc.blocking import DictToArrayBijection
from pymc.util import get_default_varnames
from scipy.optimize import minimize

from pymc_crf.fitters.lbfgs import lbfgs, warn_iteration_limit
from pymc_crf.fitters.objective import CRFLogLikelihood, GaussianLogPrior
from pymc_crf.fitters.progress import fit_progress
from pymc_crf.fitters.registry import register
from pymc_crf.fitters.results import build_result
from pymc_crf.fitters.spec import (
    CRFSpec,
    check_observed_labels,
    extract_crf,
    other_model_terms,
    refuse_free_scales,
    require_gaussian_prior,
)
from pymc_crf.inference.base import warn_at_caller
from pymc_crf.validation import flag, generator, positive_number, whole_number

__all__ = ["fit_map"]


@register("map")
def fit_map(model: pm.Model, *, maxiter: int = 2000, gtol: float = 1e-6, ftol: float = 1e-12,
            start: dict | None = None, jacobian: bool = False, log_likelihood: bool = True,
            jitter: float = 0.0, random_seed: int | None = None,
            engine_objective: bool | None = None, optimizer: str = "auto",
            progressbar: bool = True):
    """MAP estimate of every free variable of ``model`` by L-BFGS (scipy's L-BFGS-B, or the
    package's own L-BFGS for large models: see ``optimizer``).

    The objective is the model's log posterior in the unconstrained space (without the Jacobian of
    the transforms by default, i.e. the mode of the posterior density of the original variables),
    compiled with its gradient once.

    Parameters
    ----------
    maxiter, gtol, ftol
        L-BFGS-B's iteration limit and stopping tolerances (scipy's meaning: projected gradient
        norm, and relative decrease of the objective per iteration).
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
        (:class:`~pymc_crf.fitters.objective.CRFLogLikelihood`) instead of a compiled PyTensor
        function: the same function (to rounding), with nothing to compile. Possible when the
        model is one ``pmc.CRF`` likelihood with an exact engine and fixed Normal priors on its
        weights, and nothing else: no other free or observed variables and no potentials
        (deterministics of the weights are fine). ``None`` (default): whenever possible; ``True``:
        raise if it is not possible; ``False``: always compile the model.
    optimizer : {"auto", "scipy", "lbfgs"}
        ``"scipy"``: scipy's L-BFGS-B; ``"lbfgs"``: the package's unbounded L-BFGS
        (:func:`~pymc_crf.fitters.lbfgs.lbfgs`, O(m d) work per iteration; the same ``maxiter``,
        ``gtol`` and ``ftol`` rules); ``"auto"``: ``"lbfgs"`` from 10^4 weights on (there
        L-BFGS-B's own work per iteration, its BLAS calls slowed by numpy's spinning BLAS
        threads, exceeds the objective's: docs/real_data.md), else ``"scipy"``.
    progressbar : bool
        Show a progress bar of the optimiser's iterations.

    Returns
    -------
    xarray.DataTree
        A one-draw ``posterior`` and an ``optimizer_result`` group (``n_iterations``,
        ``n_evaluations``, ``success``, ``objective`` = -log posterior, ``grad_norm``) with the
        objective per iteration; ``attrs["settings"]`` records whether the engine objective was
        used.
    """
    refuse_free_scales(model, "map")  # learned prior scales: laplace / bethe_laplace
    t0 = time.perf_counter()
    jitter = positive_number(jitter, "jitter", allow_zero=True)
    if engine_objective is not None:
        engine_objective = flag(engine_objective, "engine_objective")
    # scipy stops before the first iteration on a negative ftol or gtol ("FACTR < 0") and the
    # start would come back as the MAP
    maxiter = whole_number(maxiter, "maxiter")
    gtol = positive_number(gtol, "gtol", allow_zero=True)
    ftol = positive_number(ftol, "ftol", allow_zero=True)
    if optimizer not in ("auto", "scipy", "lbfgs"):
        raise ValueError(f"optimizer must be 'auto', 'scipy' or 'lbfgs'; got {optimizer!r}")
    check_observed_labels(model)
    settings = {"maxiter": maxiter, "gtol": gtol, "ftol": ftol, "jacobian": jacobian,
                "jitter": jitter, "random_seed": random_seed, "optimizer": optimizer}
    spec, why = (None, "") if engine_objective is False else _engine_objective_spec(model)
    if engine_objective and spec is None:
        raise ValueError(f"engine_objective=True is not possible for this model: {why}")
    if spec is not None:
        return _fit_map_engine(spec, t0, settings, start=start, log_likelihood=log_likelihood,
                               progressbar=progressbar)
    point = model.initial_point() if start is None else {**model.initial_point(), **start}
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

    res, trace = _lbfgs(objective, x0.data, settings, progressbar)
    mx = {**point, **DictToArrayBijection.rmap(x0._replace(data=res.x))}
    out_vars = get_default_varnames(model.unobserved_value_vars, include_transformed=False)
    values = model.compile_fn(out_vars)(mx)
    draws = {v.name: np.asarray(val)[None, None] for v, val in zip(out_vars, values, strict=True)}
    return build_result(model, draws, "map", {**settings, "engine_objective": False},
                        time.perf_counter() - t0, diagnostics=_diagnostics(res, trace),
                        diagnostics_group="optimizer_result", log_likelihood=log_likelihood)


#: from this many weights on, ``optimizer="auto"`` takes the O(m d) L-BFGS. L-BFGS-B's level-1
#: BLAS calls (scipy's OpenBLAS) start to use threads near here and then contend with numpy's
#: BLAS threads of the objective: CoNLL-2000 subsets with d = 11,472 / 26,278 / 92,625 took
#: 0.39 / 0.77 / 1.23 s with L-BFGS-B against 0.12 / 0.10 / 0.43 s, to the same objective.
_LARGE = 10_000


def _lbfgs(objective, x0: np.ndarray, settings: dict, progressbar: bool):
    """L-BFGS with the fitter's options (:func:`pymc_crf.fitters.lbfgs.lbfgs` for large problems
    or when asked, else scipy's L-BFGS-B); returns the result and the objective trace, and
    warns when ``maxiter`` stopped the run."""
    own = settings["optimizer"] == "lbfgs" or (settings["optimizer"] == "auto"
                                              and x0.size >= _LARGE)
    trace: list[float] = []
    with fit_progress("MAP (L-BFGS iterations)", settings["maxiter"], progressbar) as bar:
        if own:
            res = lbfgs(objective, x0, maxiter=settings["maxiter"], gtol=settings["gtol"],
                        ftol=settings["ftol"], callback=lambda f: bar.advance())
            trace = res.trace
        else:

            def callback(intermediate_result):
                trace.append(float(intermediate_result.fun))
                bar.advance()

            res = minimize(objective, x0, jac=True, method="L-BFGS-B", callback=callback,
                           options={"maxiter": settings["maxiter"], "gtol": settings["gtol"],
                                    "ftol": settings["ftol"]})
    if not np.isfinite(res.fun):
        raise ValueError("pmc.fit(method='map'): the log posterior is -inf or NaN at the start "
                         "and at every point L-BFGS tried: check the priors (e.g. a sigma <= 0) "
                         "and the start")
    warn_iteration_limit(res, settings["maxiter"], "pmc.fit(method='map')",
                         "the weights returned are not the posterior mode")
    return res, trace


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
    if flat.size and np.all(flat == flat[0]):
        warn_at_caller("pmc.HCRF: every weight starts at the same value, where all hidden states "
                       "get the same gradient and MAP stays in the symmetric subspace (it then "
                       "predicts at chance); pass jitter=0.1 with a random_seed, or a random "
                       "start=", UserWarning)


def _diagnostics(res, trace: list[float]) -> dict:
    return {"objective_trace": np.asarray(trace), "n_iterations": np.int64(res.nit),
            "n_evaluations": np.int64(res.nfev), "success": np.bool_(res.success),
            "objective": np.float64(res.fun), "grad_norm": np.float64(np.linalg.norm(res.jac)),
            "message": str(res.message)}


def _engine_objective_spec(model: pm.Model) -> tuple[CRFSpec | None, str]:
    """The model's CRF spec when the engine objective applies, else (None, the reason)."""
    try:
        spec = extract_crf(model)
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


def _fit_map_engine(spec: CRFSpec, t0: float, settings: dict, *, start: dict | None,
                    log_likelihood: bool, progressbar: bool):
    """fit_map on the engine objective: log-likelihood (CRFLogLikelihood) + Normal log prior.

    The starting point is the prior mean, which is PyMC's initial point for a Normal. (``jitter``
    draws its noise in the flat weight order, node weights first, so the same seed may give a
    different start than the compiled path, which follows the model's variable order.)"""
    lik, prior = CRFLogLikelihood(spec), GaussianLogPrior(spec)
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
    if settings["jitter"] > 0:
        rng = generator(settings["random_seed"], "random_seed")
        x0 = x0 + settings["jitter"] * rng.standard_normal(x0.size)

    def objective(x):
        ll, g = lik(x)
        lp, gp = prior(x)
        if not np.isfinite(ll):
            return np.inf, np.zeros_like(x)
        return -(ll + lp), -(g + gp)

    res, trace = _lbfgs(objective, x0, settings, progressbar)
    draws = {k: v[None, None] for k, v in spec.unflatten(res.x).items()}
    if spec.model.deterministics:  # small graphs of the weights: compiled, without the CRF
        out_vars = get_default_varnames(spec.model.unobserved_value_vars, include_transformed=False)
        values = spec.model.compile_fn(out_vars)(spec.unflatten(res.x))
        draws = {v.name: np.asarray(val)[None, None]
                 for v, val in zip(out_vars, values, strict=True)}
    pointwise = ({spec.observed_name: lik.pointwise(res.x)[None, None]}
                 if log_likelihood else None)
    return build_result(spec.model, draws, "map", {**settings, "engine_objective": True},
                        time.perf_counter() - t0, diagnostics=_diagnostics(res, trace),
                        diagnostics_group="optimizer_result", log_likelihood=False,
                        pointwise_log_likelihood=pointwise)
