"""The randomized MAP's draws: perturbations, the perturbed objective and where draws run.

Each draw maximises ``log p(D | w) + delta . w + log N(w; eps, S^2)`` (package docstring); its
perturbation comes from its own seed alone, so a draw is the same serially and on a Dask worker,
and the same seed at other scales gives the same standard-normal anchor and labelling uniforms
(common random numbers, which the scale search of ``scales.py`` relies on).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from pymc_crf.fitters.bethe_laplace.laplace import _Whitened
from pymc_crf.fitters.diagonal_laplace import (
    diagonal_fisher,
    posterior_sd,
    search_gtol,
    search_scale,
)
from pymc_crf.fitters.optimise import DELTA, find_map
from pymc_crf.fitters.progress import fit_progress
from pymc_crf.fitters.randomized_map.refine import hmc_refine

__all__ = ["perturbed_objective", "score_perturbation", "minimise", "map_at", "Centre",
           "centre_at", "DrawRunner", "draw_jobs", "one_draw", "laplace_sd"]

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


def minimise(f, mu: np.ndarray, sd: np.ndarray, start: np.ndarray, rule: str, gtol: float,
             maxiter: int, what: str, scale: np.ndarray | None = None):
    """Maximise ``f`` (``w -> (value, grad)``, its prior sds ``sd``) from ``start`` in the
    coordinates ``(w - mu) / scale`` (default the prior sds; :func:`search_scale` near a known
    diagonal Laplace approximation), ``gtol`` bounding the largest prior-whitened gradient
    entry whatever the coordinates (``search_gtol``): ``(w, OptimiserDiagnostics)``."""
    scale = sd if scale is None else scale
    whitened = _Whitened(f, mu, scale)

    def objective(z):
        v, g = whitened(z)
        return -v, -g

    z, diag = find_map(objective, (start - mu) / scale, rule=rule,
                       gtol=search_gtol(gtol, sd, scale), delta=DELTA, maxiter=maxiter,
                       what=what,
                       consequence="this draw is not the perturbed objective's maximiser")
    return mu + scale * z, diag


def map_at(lik, mu: np.ndarray, sd: np.ndarray, start: np.ndarray, rule: str, gtol: float,
           maxiter: int, what: str, scale: np.ndarray | None = None):
    """The unperturbed MAP under the prior ``N(mu, sd^2)``, searched from ``start`` in the
    coordinates ``(w - mu) / scale`` (:func:`minimise`; where the scales change between MAPs,
    ``search_scale`` of the last MAP's Laplace sds): ``(w, OptimiserDiagnostics)``."""
    return minimise(perturbed_objective(lik, np.zeros_like(mu), mu, sd), mu, sd, start, rule,
                    gtol, maxiter, what, scale)


def laplace_sd(lik, sd: np.ndarray, w: np.ndarray) -> np.ndarray:
    """The diagonal Laplace posterior sds at ``w`` under the prior sds ``sd``: the likelihood's
    diagonal Fisher information there (a shared transition table's summed over its edges) plus
    the prior precision."""
    return posterior_sd(diagonal_fisher(lik, w, shared_table="fisher"), sd)


@dataclass
class Centre:
    """What every draw at one setting of the scales shares: the prior mean and sds, the MAP and
    the observed labels' gradient there, and the diagonal Laplace posterior sds at the MAP
    (``laplace_sd``; None: not computed).

    ``laplace_sd`` is the HMC refinement's mass matrix and sets the coordinates of each draw's
    L-BFGS search, ``(w - mu) / sqrt(S * laplace_sd)`` (``search_scale``: a perturbed
    objective's curvature is the posterior's, ``H + S^-2``, and these coordinates precondition
    it; on 300 CoNLL-2000 sentences, 257,013 weights, four draws took 189 L-BFGS iterations on
    average against 234 in prior-whitened coordinates, the same maximisers to 2e-4 rms)."""

    mu: np.ndarray
    sd: np.ndarray
    w_map: np.ndarray
    g_map: np.ndarray
    laplace_sd: np.ndarray | None = None


def centre_at(lik, mu: np.ndarray, sd: np.ndarray, w_map: np.ndarray,
              laplace: bool = True) -> Centre:
    """The :class:`Centre` of draws at the MAP ``w_map`` of the prior ``N(mu, sd^2)``: the
    observed labels' gradient there and, with ``laplace``, the diagonal Laplace sds."""
    _, g_map = lik(w_map)
    return Centre(mu, sd, w_map, g_map, laplace_sd(lik, sd, w_map) if laplace else None)


def one_draw(lik, centre: Centre, start: np.ndarray | None, seed: np.random.SeedSequence,
          mirror: bool, data_perturbation: bool, rule: str, gtol: float, maxiter: int,
          refine: int, index: int) -> tuple[np.ndarray, int, bool, float]:
    """One randomized MAP, started at ``start`` (the MAP when None), then ``refine`` HMC
    transitions (``refine.py``): its perturbation and its HMC moves drawn from ``seed`` alone (so
    draws do not depend on where or in which order they run), the perturbation negated when
    ``mirror`` (the antithetic partner). ``(w, L-BFGS iterations, success, HMC acceptance
    rate)``."""
    mu, sd, w_map = centre.mu, centre.sd, centre.w_map
    rng = np.random.default_rng(seed)
    eps = mu + sd * rng.standard_normal(mu.size)
    delta = score_perturbation(lik, w_map, centre.g_map, rng) if data_perturbation \
        else np.zeros_like(mu)
    if mirror:
        eps, delta = 2.0 * mu - eps, -delta
    w, diag = minimise(perturbed_objective(lik, delta, eps, sd), mu, sd,
                       w_map if start is None else start, rule, gtol, maxiter,
                       f"randomized_map: draw {index}", search_scale(sd, centre.laplace_sd))
    rate = float("nan")
    if refine:
        hmc_rng = np.random.default_rng([*seed.generate_state(2), int(mirror)])
        posterior = perturbed_objective(lik, np.zeros_like(mu), mu, sd)
        w, rate, _ = hmc_refine(posterior, centre.laplace_sd, w, refine, hmc_rng)
    return w, int(diag.n_iterations), bool(diag.success), rate


def draw_jobs(seeds: list, antithetic: bool) -> list[tuple]:
    """``(seed, mirror, index)`` of every draw: one per seed, or with ``antithetic`` a pair per
    seed (the second mirrored)."""
    total = 2 * len(seeds) if antithetic else len(seeds)
    return [(seeds[i // 2] if antithetic else seeds[i], antithetic and i % 2 == 1, i)
            for i in range(total)]


class DrawRunner:
    """Runs batches of draws in this process or as Dask tasks on ``client`` (a
    ``distributed.Client`` or a scheduler address, whose own client is closed by
    :meth:`close`); the likelihood goes to each worker once, however many batches run."""

    def __init__(self, lik, *, data_perturbation: bool, rule: str, gtol: float, maxiter: int,
                 refine: int, precondition: bool = True, client=None):
        self.lik, self.refine, self.precondition = lik, refine, precondition
        self.options = (data_perturbation, rule, gtol, maxiter, refine)
        self._own = isinstance(client, str)
        self.client = client
        self._lik = lik
        if client is not None:
            from distributed import Client

            self.client = Client(client) if self._own else client
            self._lik = self.client.scatter(lik, broadcast=True, hash=False)

    def centre(self, mu: np.ndarray, sd: np.ndarray, w_map: np.ndarray) -> Centre:
        """The :class:`Centre` of draws at the MAP ``w_map`` of the prior ``N(mu, sd^2)``,
        with the diagonal Laplace sds there when ``precondition`` or when draws are
        refined."""
        return centre_at(self.lik, mu, sd, w_map, bool(self.precondition or self.refine))

    def share(self, value, broadcast: bool = False):
        """``value`` as the tasks' argument: itself in this process, scattered to the workers
        (once, to every worker with ``broadcast``) on a Dask client."""
        if self.client is None:
            return value
        # a fresh key for every call: with keys hashed from the content, an equal value (the
        # same centre at unchanged scales) reuses the key of a future just released, and the
        # scheduler loses its data ("Could not find data") or the scatter never returns
        return self.client.scatter(value, broadcast=broadcast, hash=False)

    def map(self, fn, calls: list[tuple], *, label: str, progressbar: bool = True) -> list:
        """``fn(lik, *args)`` for every ``args`` of ``calls``, in this process or as Dask tasks
        (large arguments passed through :meth:`share`), in the order of ``calls``."""
        out: list = [None] * len(calls)
        with fit_progress(label, len(calls), progressbar) as bar:
            if self.client is None:
                for k, args in enumerate(calls):
                    out[k] = fn(self.lik, *args)
                    bar.advance()
                return out
            from distributed import as_completed

            futures = {self.client.submit(fn, self._lik, *args, pure=False): k
                        for k, args in enumerate(calls)}
            for fut in as_completed(futures):
                out[futures[fut]] = fut.result()
                bar.advance()
        return out

    def run(self, centre: Centre | list[Centre], jobs: list[tuple], starts: list | None = None,
            *, label: str = "randomized MAP draws", progressbar: bool = True) -> list:
        """Every job's ``(w, iterations, success, acceptance rate)``, each draw started at
        ``starts[i]`` (its centre's ``w_map`` when ``starts`` is None); ``centre``: one for
        every job, or one per job."""
        per_job = isinstance(centre, list)
        shared = None if per_job else self.share(centre, broadcast=True)
        calls = [(self.share(centre[k]) if per_job else shared,
                  None if starts is None or starts[k] is None else self.share(starts[k]),
                  seed, mirror, *self.options, i)
                 for k, (seed, mirror, i) in enumerate(jobs)]
        return self.map(one_draw, calls, label=label, progressbar=progressbar)

    def close(self) -> None:
        if self._own and self.client is not None:
            self.client.close()

    def __enter__(self) -> DrawRunner:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
