"""``method="randomized_map"``: posterior draws as MAPs of randomly perturbed objectives.

Randomized maximum likelihood (Oliver, He & Reynolds 1996; "randomize-then-optimize", Bardsley
et al. 2014; perturb-and-MAP, Papandreou & Yuille 2010): each draw is the maximiser of

    log p(D | w) + delta_s . w + log N(w; eps_s, S^2),

with a prior anchor ``eps_s ~ N(mu, S^2)`` (the prior's own draw) and a data perturbation
``delta_s = grad_w log p(y~_s | x, w*)``, the score of labellings ``y~_s`` drawn from the CRF at
its MAP ``w*`` (one per training graph, exact forward-filtering backward-sampling). For log-linear
potentials the score's covariance is the Fisher information ``Cov[phi(y~)] = H_lik(w*)``, so if
the log-likelihood were quadratic, ``w_s - w* = A^{-1} (delta_s + S^{-2} (eps_s - mu))`` with
``A = H_lik + S^{-2}`` would have covariance ``A^{-1} (H_lik + S^{-2}) A^{-1} = A^{-1}``: the
Laplace posterior's mean and covariance, exactly. A CRF's log-likelihood is not quadratic: the
weight of a (feature, label) pair that the rest of the model already predicts is flat on one
side of the mode and falls off on the other. Each draw re-optimises the real likelihood, so it
keeps that shape, where a Gaussian at the mode puts half its mass on the side the data exclude
(docs/bethe_laplace.md, "On CoNLL-2000").

Cost: one MAP per draw, warm-started at ``w*``, each independent of the others.
"""

from __future__ import annotations

import time

import numpy as np
import pymc as pm
import xarray as xr

from pymc_crf.fitters.bethe_laplace.batched import pointwise_log_likelihood
from pymc_crf.fitters.bethe_laplace.laplace import _Whitened
from pymc_crf.fitters.bethe_laplace.problem import exact_engine, weight_problem
from pymc_crf.fitters.optimise import DELTA, STRICT_GTOL, find_map
from pymc_crf.fitters.progress import fit_progress
from pymc_crf.fitters.registry import register
from pymc_crf.model.results import build_result
from pymc_crf.validation import flag, generator, positive_number, whole_number

__all__ = ["fit_randomized_map", "perturbed_objective", "score_perturbation"]

RULES = ("delta", "strict")


def score_perturbation(lik, w: np.ndarray, grad_at_w: np.ndarray, rng) -> np.ndarray:
    """``grad_w log p(y~ | x, w)`` for labellings ``y~`` drawn from the CRF at ``w`` (one per
    graph): ``phi(y~) - phi(y) + grad_at_w``, ``grad_at_w`` the observed labels' gradient there.
    Its mean is 0 and its covariance the Fisher information at ``w``."""
    b, K = lik.batch, lik.K
    node, edge = lik.log_potentials(w)
    drawn = np.asarray(lik.engine.sample(b, node, edge, 1, rng)[0], dtype=np.int64)
    dn = np.zeros((b.n_total_nodes, K))
    dn[lik.rows, drawn] += 1.0
    dn[lik.rows, lik.y] -= 1.0
    if lik.spec.edge_weights is None:
        de = None
    else:
        u, v = b.edges[:, 0], b.edges[:, 1]
        if lik.Xe is None:  # a shared table: pair counts summed over the edges
            de = np.zeros((1, K, K))
            np.add.at(de[0], (drawn[u], drawn[v]), 1.0)
            np.add.at(de[0], (lik.yu, lik.yv), -1.0)
        else:
            de = np.zeros((b.n_edges, K, K))
            e = np.arange(b.n_edges)
            de[e, drawn[u], drawn[v]] += 1.0
            de[e, lik.yu, lik.yv] -= 1.0
    return grad_at_w + lik.pullback(w, dn, de)


def perturbed_objective(lik, delta: np.ndarray, anchor: np.ndarray, sd: np.ndarray):
    """``w -> -(log p(D | w) + delta . w + log N(w; anchor, sd^2))`` (up to a constant) and its
    gradient, for :func:`~pymc_crf.fitters.optimise.find_map` in the prior-whitened coordinates
    ``z = (w - mu) / sd`` (wrap with ``_Whitened``)."""

    def f(w):
        ll, g = lik(w)
        r = (w - anchor) / sd
        value = ll + float(delta @ w) - 0.5 * float(r @ r)
        if not np.isfinite(value):
            return -np.inf, np.zeros_like(w)
        return value, g + delta - r / sd

    return f


def _minimise(f, mu: np.ndarray, sd: np.ndarray, start: np.ndarray, rule: str, gtol: float,
              maxiter: int, what: str):
    """Maximise ``f`` (``w -> (value, grad)``) from ``start`` in the prior-whitened coordinates
    ``(w - mu) / sd``: ``(w, OptimiserDiagnostics)``."""
    whitened = _Whitened(f, mu, sd)

    def objective(z):
        v, g = whitened(z)
        return -v, -g

    z, diag = find_map(objective, (start - mu) / sd, rule=rule, gtol=gtol, delta=DELTA,
                       maxiter=maxiter, what=what,
                       consequence="this draw is not the perturbed objective's maximiser")
    return mu + sd * z, diag


def _draw(lik, mu: np.ndarray, sd: np.ndarray, w_map: np.ndarray, g_map: np.ndarray,
          seed: np.random.SeedSequence, mirror: bool, data_perturbation: bool, rule: str,
          gtol: float, maxiter: int, index: int) -> tuple[np.ndarray, int, bool]:
    """One randomized MAP: its perturbation drawn from ``seed`` alone (so draws do not depend on
    where or in which order they run), negated when ``mirror`` (the antithetic partner)."""
    rng = np.random.default_rng(seed)
    eps = mu + sd * rng.standard_normal(mu.size)
    delta = score_perturbation(lik, w_map, g_map, rng) if data_perturbation \
        else np.zeros_like(mu)
    if mirror:
        eps, delta = 2.0 * mu - eps, -delta
    w, diag = _minimise(perturbed_objective(lik, delta, eps, sd), mu, sd, w_map, rule, gtol,
                        maxiter, f"randomized_map: draw {index}")
    return w, int(diag.n_iterations), bool(diag.success)


def _run_draws(args: tuple, options: tuple, seeds: list, antithetic: bool, client,
               progressbar: bool) -> list:
    """Every draw's ``(w, iterations, success)``, in this process or as Dask tasks on
    ``client`` (the likelihood and the MAP sent to each worker once)."""
    total = 2 * len(seeds) if antithetic else len(seeds)
    jobs = [(seeds[i // 2] if antithetic else seeds[i], antithetic and i % 2 == 1, i)
            for i in range(total)]
    out: list = [None] * total
    with fit_progress("randomized MAP draws", total, progressbar) as bar:
        if client is None:
            for seed, mirror, i in jobs:
                out[i] = _draw(*args, seed, mirror, *options, i)
                bar.advance()
            return out
        from distributed import Client, as_completed

        own = isinstance(client, str)  # a scheduler address: a client of our own, closed here
        c = Client(client) if own else client
        try:
            shared = c.scatter(list(args), broadcast=True)
            futures = {c.submit(_draw, *shared, seed, mirror, *options, i,
                                 pure=False): i
                       for seed, mirror, i in jobs}
            for fut in as_completed(futures):
                out[futures[fut]] = fut.result()
                bar.advance()
        finally:
            if own:
                c.close()
    return out


@register("randomized_map")
def fit_randomized_map(model: pm.Model | None = None, *, draws: int = 100, chains: int = 1,
                       random_seed=None, data_perturbation: bool = True,
                       antithetic: bool = False, rule: str = "delta", gtol: float = STRICT_GTOL,
                       maxiter: int = 2000, client=None, log_likelihood: bool = True,
                       progressbar: bool = True) -> xr.DataTree:
    """Posterior draws of a CRF's weights by randomized MAP (module docstring).

    Parameters
    ----------
    model : pm.Model, optional
        A CRF with log-linear potentials, every label observed, inference exact (chains, trees,
        narrow junction trees) and fixed Normal weight priors. For learned prior scales, fix them
        first (e.g. at ``pmc.fit(model, method="laplace")``'s type-II values or at a NUTS fit's
        posterior means on a subset).
    draws, chains : int
        Draws per chain; ``chains * draws`` perturbed MAPs in all.
    random_seed : int or Generator, optional
    data_perturbation : bool
        Perturb the likelihood by the score of labellings drawn at the MAP (the module
        docstring's ``delta_s``); False perturbs the prior anchor only, whose draws then have
        the covariance ``A^{-1} S^{-2} A^{-1}``, less than the posterior's.
    antithetic : bool
        Draw in pairs ``(eps, delta)`` and ``(2 mu - eps, -delta)``, whose errors cancel to first
        order in the averages over draws (``draws`` must then be even).
    rule, gtol, maxiter
        The stopping rule of every MAP (:func:`~pymc_crf.fitters.optimise.find_map`):
        ``"delta"`` (CRFsuite's, the default of ``method="map"``) or ``"strict"`` with ``gtol``.
    client : distributed.Client or str, optional
        Run the draws as Dask tasks on this client (or the scheduler at this address); the
        likelihood and the MAP go to each worker once. Each draw's perturbation comes from its
        own seed (spawned from ``random_seed``), so the draws are the same wherever they run.
    log_likelihood, progressbar
        As for every fitter.

    Returns
    -------
    DataTree
        ``posterior`` (the draws in the model's dims), ``fit`` (``map_vector``: the unperturbed
        MAP), ``diagnostics`` (per draw: L-BFGS iterations, success, and the distance from the
        MAP in prior sds), ``log_likelihood`` per graph.
    """
    t0 = time.perf_counter()
    model = pm.modelcontext(model)
    problem = weight_problem(model, "randomized_map")
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
    if antithetic and n_draws % 2:
        raise ValueError(f"antithetic=True draws in pairs: draws must be even; got {n_draws}")
    if rule not in RULES:
        raise ValueError(f"rule must be one of {RULES}; got {rule!r}")
    gtol = positive_number(gtol, "gtol")
    maxiter = whole_number(maxiter, "maxiter")
    rng = generator(random_seed, "random_seed")
    engine = exact_engine(problem, "method='randomized_map' draws labellings from the CRF at its "
                                   "MAP, which needs exact inference; use method='bethe_laplace'")
    lik = problem.make_likelihood(engine)
    mu, sd = problem.prior.mean, problem.prior.sd
    w_map, map_diag = _minimise(perturbed_objective(lik, np.zeros_like(mu), mu, sd), mu, sd,
                                mu.copy(), rule, gtol, maxiter, "randomized_map: the MAP")
    _, g_map = lik(w_map)
    total = n_chains * n_draws
    seeds = np.random.SeedSequence(int(rng.integers(2**63))).spawn(
        total // 2 if antithetic else total)
    draws = _run_draws((lik, mu, sd, w_map, g_map), (data_perturbation, rule, gtol, maxiter),
                       seeds, antithetic, client, progressbar)
    flat = np.stack([d[0] for d in draws])
    iters = np.array([d[1] for d in draws], dtype=np.int64)
    ok = np.array([d[2] for d in draws], dtype=bool)
    flat = flat.reshape(n_chains, n_draws, -1)
    spec = problem.spec
    post = spec.unflatten(flat)
    pointwise = ({spec.observed_name: pointwise_log_likelihood(problem, flat)}
                 if log_likelihood else None)
    settings = {"draws": n_draws, "chains": n_chains, "random_seed": random_seed,
                "data_perturbation": data_perturbation, "antithetic": antithetic, "rule": rule,
                "gtol": gtol, "maxiter": maxiter, "client": None if client is None else str(client)}
    shape = (n_chains, n_draws)
    moved = np.sqrt(np.mean(((flat - w_map) / sd) ** 2, axis=-1))
    diagnostics = xr.Dataset({
        "map_iterations": ((), np.int64(map_diag.n_iterations)),
        "map_success": ((), np.bool_(map_diag.success)),
        "draw_iterations": (("chain", "draw"), iters.reshape(shape)),
        "draw_success": (("chain", "draw"), ok.reshape(shape)),
        "draw_rms_move": (("chain", "draw"), moved)},
        coords={"chain": np.arange(n_chains), "draw": np.arange(n_draws)})
    fit_group = xr.Dataset({"map_vector": (("rows",), w_map)},
                           coords={"rows": spec.param_names()})
    return build_result(model, post, "randomized_map", settings, time.perf_counter() - t0,
                        log_likelihood=False, pointwise_log_likelihood=pointwise, spec=spec,
                        extra_groups={"fit": fit_group, "diagnostics": diagnostics})
