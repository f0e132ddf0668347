"""``pmc.fit(model, method="randomized_map")``: the fitter (package docstring)."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

import numpy as np
import pymc as pm
import xarray as xr

from pymc_crf.fitters.bethe_laplace.batched import pointwise_log_likelihood
from pymc_crf.fitters.bethe_laplace.problem import exact_engine, weight_problem
from pymc_crf.fitters.bethe_laplace.scales import (
    initial_scales,
    warn_unconverged_scales,
)
from pymc_crf.fitters.optimise import STRICT_GTOL
from pymc_crf.fitters.randomized_map.draws import (
    RULES,
    DrawRunner,
    draw_jobs,
    map_at,
)
from pymc_crf.fitters.randomized_map.gibbs import sample_scales_by_gibbs
from pymc_crf.fitters.randomized_map.scales import learn_scales_by_draws
from pymc_crf.fitters.registry import register
from pymc_crf.model.results import build_result
from pymc_crf.validation import flag, generator, positive_number, whole_number

if TYPE_CHECKING:
    from distributed import Client
    from numpy.typing import ArrayLike
    from pymc.util import RandomGenerator

__all__ = ["fit_randomized_map"]


@register("randomized_map")
def fit_randomized_map(model: pm.Model | None = None, *, draws: int = 100, chains: int = 1,
                       random_seed: RandomGenerator = None, data_perturbation: bool = True,
                       antithetic: bool = False, rule: str | None = None,
                       gtol: float | None = None,
                       maxiter: int = 2000, refine: int = 0,
                       client: Client | str | None = None, hyperprior: bool = True,
                       scale_method: str = "gibbs", tune: int = 50,
                       scale_init: float | ArrayLike = 1.0, scale_draws: int = 16,
                       scale_tol: float = 0.02, scale_maxiter: int = 30, log_likelihood: bool = True,
                       progressbar: bool = True) -> xr.DataTree:
    """Posterior draws of a CRF's weights by randomized MAP (package docstring), with learned
    prior scales chosen by Monte Carlo EM on the same kind of draws, or integrated over by a
    Gibbs sampler whose weight step is a randomized MAP.

    Parameters
    ----------
    model : pm.Model, optional
        A CRF with log-linear potentials, every label observed, inference exact (chains, trees,
        narrow junction trees) and Normal weight priors with fixed sds or learned scales
        (``s = pm.HalfNormal("s", 1, shape=G)``, ``W = pm.Normal("W", 0, s[group])``: any
        grouping written by indexing, see docs/fit_contract.md).
    draws, chains : int
        Draws per chain; ``chains * draws`` perturbed MAPs in all.
    random_seed : int or Generator, optional
    data_perturbation : bool
        Perturb the likelihood by the score of labellings drawn at the MAP (the package
        docstring's ``delta_s``); False perturbs the prior anchor only, whose draws then have
        the covariance ``A^{-1} S^{-2} A^{-1}``, less than the posterior's.
    antithetic : bool
        Draw in pairs ``(eps, delta)`` and ``(2 mu - eps, -delta)``, whose errors cancel to first
        order in the averages over draws (``draws`` and ``scale_draws`` must then be even).
    rule, gtol, maxiter
        The stopping rule of every MAP (:func:`~pymc_crf.fitters.optimise.find_map`), as for
        ``method="map"``: ``"delta"`` (CRFsuite's, the default) or ``"strict"`` with ``gtol``
        (default ``STRICT_GTOL``), the largest gradient entry in prior-whitened coordinates
        ``(w - mu) / s`` (whatever coordinates the search runs in:
        ``diagonal_laplace.search_gtol``). Giving ``gtol`` without a rule selects
        ``"strict"``; ``gtol`` with ``rule="delta"`` is refused (that rule does not read it).
    refine : int
        HMC transitions on the exact posterior (at the scales) from each randomized MAP
        (:mod:`~pymc_crf.fitters.randomized_map.refine`): their Metropolis correction moves the
        draws towards the posterior where the likelihood is far from quadratic; 0: none.
    client : distributed.Client or str, optional
        Run the draws as Dask tasks on this client (or the scheduler at this address); the
        likelihood goes to each worker once. Each draw's perturbation comes from its own seed
        (spawned from ``random_seed``), so the draws are the same wherever they run.
    hyperprior : bool
        Learned scales, ``scale_method="em"``: the type-II MAP (the scales' prior density
        added); False: type-II ML (a point estimate, so ``"gibbs"`` refuses it).
    scale_method : {"gibbs", "em"}
        Learned scales: ``"gibbs"`` (the default), the scales integrated over under their
        prior, as the model states them: ``chains`` Markov chains on (scales, weights), each
        sweep a randomized MAP at the chain's scales then two steps of the scales
        (:mod:`~pymc_crf.fitters.randomized_map.gibbs`); each draw has its own scales.
        ``"em"``, one value of the scales (their type-II MAP, or type-II ML with
        ``hyperprior=False``) by Monte Carlo EM
        (:mod:`~pymc_crf.fitters.randomized_map.scales`), every draw at it: cheaper with few
        groups, but with many groups that fire on the same tokens it selects among them and
        prunes the rest (docs/randomized_map.md).
    tune : int
        ``scale_method="gibbs"``: sweeps per chain before the ``draws`` kept (the chains start
        at ``scale_init`` and the MAP there).
    scale_init : float or array
        Learned scales: the starting scales (one value, or one per scale entry), moved into
        the scales' range ``[1e-5, 1e3]`` (``SCALE_BOUNDS``).
    scale_draws : int
        Learned scales, ``"em"``: the draws whose squared weights estimate each group's ``E[R_g]``
        (:mod:`~pymc_crf.fitters.randomized_map.scales`); the same seeds at every iteration, and
        the first ``scale_draws`` of the returned draws (at most ``chains * draws`` are used).
    scale_tol, scale_maxiter
        Learned scales, ``"em"``: stop when no ``log s`` would move by more than ``scale_tol``, or after
        ``scale_maxiter`` iterations (``diagnostics.scales_converged`` says which).
    log_likelihood, progressbar
        As for every fitter.

    Returns
    -------
    DataTree
        ``posterior`` (the draws in the model's dims), ``fit`` (``map_vector``: the
        unperturbed MAP at the scales), ``diagnostics`` (per draw: L-BFGS iterations, success,
        the distance from the MAP in prior sds and with ``refine`` the HMC acceptance rate),
        ``log_likelihood`` per graph. With learned scales and ``scale_method="gibbs"``: each
        draw's own scales in ``posterior``, their posterior means in ``fit.scales`` (no
        ``map_vector``), and in ``diagnostics`` the scales of every sweep (``scale_trace``,
        dims chain, sweep, scale_entry, the ``tune`` sweeps first), the non-centred step's
        acceptance rate (``scale_acceptance``, NaN while tuning) and each sweep's MAP
        iterations. With ``scale_method="em"``: the learned scales in ``posterior`` (the same
        in every draw) and in ``fit.scales``, and their iterations' ``scale_trace``,
        ``scale_gradient`` and ``scale_step`` in ``diagnostics``.
    """
    t0 = time.perf_counter()
    model = pm.modelcontext(model)
    problem = weight_problem(model, "randomized_map", learn_scales=True)
    if problem.kind != "crf":
        raise ValueError("method='randomized_map' takes CRFs (its data perturbation draws each "
                         "graph's labelling given its inputs); for a random field without inputs "
                         "use method='laplace', 'bethe_laplace' or 'nuts'")
    if problem.potential != "loglinear":
        raise ValueError(f"method='randomized_map' takes log-linear potentials (its data "
                         f"perturbation's covariance is the Hessian only for them); got "
                         f"{problem.potential!r}")
    n_draws, n_chains = whole_number(draws, "draws"), whole_number(chains, "chains")
    data_perturbation, antithetic = (flag(data_perturbation, "data_perturbation"),
                                     flag(antithetic, "antithetic"))
    hyperprior = flag(hyperprior, "hyperprior")
    if antithetic and n_draws % 2:
        raise ValueError(f"antithetic=True draws in pairs: draws must be even; got {n_draws}")
    if rule is None:
        rule = "delta" if gtol is None else "strict"
    if rule not in RULES:
        raise ValueError(f"rule must be one of {RULES}; got {rule!r}")
    if rule == "delta" and gtol is not None:
        # the delta rule stops on the objective's progress alone: a gtol would be ignored
        raise ValueError("gtol belongs to rule='strict'; rule='delta' stops on the objective's "
                         "relative progress (give rule='strict' with gtol, or leave out gtol)")
    gtol = positive_number(STRICT_GTOL if gtol is None else gtol, "gtol")
    maxiter = whole_number(maxiter, "maxiter")
    refine = whole_number(refine, "refine (HMC transitions per draw)", minimum=0)
    total = n_chains * n_draws
    G = problem.n_scales
    if scale_method not in ("em", "gibbs"):
        raise ValueError(f"scale_method must be 'gibbs' (the scales integrated over) or 'em' "
                         f"(one value of the scales, Monte Carlo EM); got {scale_method!r}")
    gibbs = bool(G) and scale_method == "gibbs"
    if G:
        init = initial_scales(scale_init, G)  # moved into SCALE_BOUNDS
    if gibbs:
        n_tune = whole_number(tune, "tune", minimum=0)
        if antithetic:
            raise ValueError("scale_method='gibbs' (the default with learned scales) draws "
                             "each sweep's weights afresh, one chain at a time; antithetic pairs "
                             "do not apply: antithetic=False, or scale_method='em' for draws at "
                             "one value of the scales")
        if not hyperprior:
            raise ValueError("scale_method='gibbs' (the default with learned scales) integrates "
                             "over the scales under their prior; "
                             "hyperprior=False (type-II maximum likelihood) is a point "
                             "estimate: use scale_method='em'")
    elif G:
        n_scale = min(whole_number(scale_draws, "scale_draws"), total)
        if n_scale < 2:
            raise ValueError(f"scale_draws must be at least 2 (the variance across draws sets "
                             f"the scales' step); got {scale_draws}")
        if antithetic and n_scale % 2:
            raise ValueError(f"antithetic=True draws in pairs: scale_draws must be even; got "
                             f"{scale_draws}")
        scale_tol = positive_number(scale_tol, "scale_tol")
        scale_maxiter = whole_number(scale_maxiter, "scale_maxiter")
    rng = generator(random_seed, "random_seed")
    engine = exact_engine(problem, "method='randomized_map' draws labellings from the CRF at its "
                                   "MAP, which needs exact inference; use method='bethe_laplace'")
    lik = problem.make_likelihood(engine)
    seeds = np.random.SeedSequence(int(rng.integers(2**63))).spawn(
        n_chains if gibbs else total // 2 if antithetic else total)
    jobs = draw_jobs(seeds, antithetic)
    with DrawRunner(lik, data_perturbation=data_perturbation, rule=rule, gtol=gtol,
                    maxiter=maxiter, refine=refine, client=client) as runner:
        if gibbs:
            chain = sample_scales_by_gibbs(
                problem, runner, seeds, n_chains=n_chains, n_draws=n_draws, tune=n_tune,
                scale_init=init, progressbar=progressbar)
            return _gibbs_result(model, problem, chain, time.perf_counter() - t0,
                                 log_likelihood, refine,
                                 {"draws": n_draws, "chains": n_chains,
                                  "random_seed": random_seed,
                                  "data_perturbation": data_perturbation, "rule": rule,
                                  "gtol": gtol, "maxiter": maxiter, "refine": refine,
                                  "client": None if client is None else str(client),
                                  "scale_method": "gibbs", "tune": n_tune})
        if G:
            learned = learn_scales_by_draws(
                problem, runner, jobs[:n_scale], hyperprior=hyperprior, scale_init=init,
                scale_tol=scale_tol, scale_maxiter=scale_maxiter, rule=rule, gtol=gtol,
                maxiter=maxiter, progressbar=progressbar)
            if not learned.converged:
                warn_unconverged_scales("randomized_map", scale_maxiter)
            centre, map_diag = learned.centre, learned.map_diagnostics
            done = list(zip(learned.draws, learned.iterations, learned.success, learned.rates,
                            strict=True))
        else:
            mu, sd = problem.prior.mean, problem.prior.sd
            w_map, map_diag = map_at(lik, mu, sd, mu.copy(), rule, gtol, maxiter,
                                     "randomized_map: the MAP")
            centre = runner.centre(mu, sd, w_map)
            done = []
        done += runner.run(centre, jobs[len(done):], progressbar=progressbar)
    w_map, sd = centre.w_map, centre.sd
    flat = np.stack([d[0] for d in done]).reshape(n_chains, n_draws, -1)
    iters = np.array([d[1] for d in done], dtype=np.int64)
    ok = np.array([d[2] for d in done], dtype=bool)
    rates = np.array([d[3] for d in done])
    spec = problem.spec
    post = spec.unflatten(flat)
    names = [n for v in problem.scales for n in v.entry_names()]
    for v in problem.scales:
        post[v.name] = np.broadcast_to(learned.scales[v.offset:v.offset + v.size].reshape(
            v.shape), (n_chains, n_draws, *v.shape)).copy()
    pointwise = ({spec.observed_name: pointwise_log_likelihood(problem, flat)}
                 if log_likelihood else None)
    settings = {"draws": n_draws, "chains": n_chains, "random_seed": random_seed,
                "data_perturbation": data_perturbation, "antithetic": antithetic, "rule": rule,
                "gtol": gtol, "maxiter": maxiter, "refine": refine,
                "client": None if client is None else str(client)}
    if G:
        settings.update(hyperprior=hyperprior, scale_method="em", scale_draws=n_scale,
                        scale_tol=scale_tol,
                        scale_maxiter=scale_maxiter)
    shape = (n_chains, n_draws)
    moved = np.sqrt(np.mean(((flat - w_map) / sd) ** 2, axis=-1))
    diagnostics = xr.Dataset({
        "map_iterations": ((), np.int64(map_diag.n_iterations)),
        "map_success": ((), np.bool_(map_diag.success)),
        "draw_iterations": (("chain", "draw"), iters.reshape(shape)),
        "draw_success": (("chain", "draw"), ok.reshape(shape)),
        "draw_rms_move": (("chain", "draw"), moved),
        **({"draw_acceptance": (("chain", "draw"), rates.reshape(shape))} if refine else {})},
        coords={"chain": np.arange(n_chains), "draw": np.arange(n_draws)})
    fit_group = xr.Dataset({"map_vector": (("rows",), w_map)},
                           coords={"rows": spec.param_names()})
    if G:
        tr = learned.trace
        diagnostics = diagnostics.assign({
            "scales_converged": ((), np.bool_(learned.converged)),
            "scale_trace": (("outer_iteration", "scale_entry"), tr["scales"]),
            "scale_gradient": (("outer_iteration", "scale_entry"), tr["gradient"]),
            "scale_step": (("outer_iteration", "scale_entry"), tr["step"]),
            "outer_map_iterations": (("outer_iteration",), tr["map_iterations"]),
            "outer_draw_iterations": (("outer_iteration",), tr["draw_iterations"])}
        ).assign_coords(scale_entry=names)
        fit_group = fit_group.assign({"scales": (("scale_entry",), learned.scales)}
                                     ).assign_coords(scale_entry=names)
    return build_result(model, post, "randomized_map", settings, time.perf_counter() - t0,
                        log_likelihood=False, pointwise_log_likelihood=pointwise, spec=spec,
                        extra_groups={"fit": fit_group, "diagnostics": diagnostics})


def _gibbs_result(model, problem, chain, wall: float, log_likelihood: bool, refine: int,
                  settings: dict) -> xr.DataTree:
    """The result of ``scale_method="gibbs"``: every kept sweep's weights and scales."""
    n_chains, n_draws, _ = chain.draws.shape
    spec = problem.spec
    post = spec.unflatten(chain.draws)
    names = [n for v in problem.scales for n in v.entry_names()]
    for v in problem.scales:
        post[v.name] = chain.scales[:, :, v.offset:v.offset + v.size].reshape(
            n_chains, n_draws, *v.shape)
    pointwise = ({spec.observed_name: pointwise_log_likelihood(problem, chain.draws)}
                 if log_likelihood else None)
    sweeps = chain.trace["scales"].shape[1]
    diagnostics = xr.Dataset({
        "map_iterations": (("chain", "draw"), chain.map_iterations),
        "draw_iterations": (("chain", "draw"), chain.iterations),
        "draw_success": (("chain", "draw"), chain.success),
        **({"draw_acceptance": (("chain", "draw"), chain.rates)} if refine else {}),
        "scale_trace": (("chain", "sweep", "scale_entry"), chain.trace["scales"]),
        "scale_acceptance": (("chain", "sweep"), chain.trace["acceptance"])},
        coords={"chain": np.arange(n_chains), "draw": np.arange(n_draws),
                "sweep": np.arange(sweeps), "scale_entry": names})
    fit_group = xr.Dataset({"scales": (("scale_entry",), chain.scales.mean(axis=(0, 1)))},
                           coords={"scale_entry": names})
    return build_result(model, post, "randomized_map", settings, wall, log_likelihood=False,
                        pointwise_log_likelihood=pointwise, spec=spec,
                        extra_groups={"fit": fit_group, "diagnostics": diagnostics})
