"""Learned prior scales integrated over: a Gibbs sampler on ``(s, w)`` whose weight step is a
randomized MAP (``scale_method="gibbs"``).

The Monte Carlo EM of ``scales.py`` returns one value of the scales, their type-II MAP. With
many groups of weights that fire on the same tokens, that point estimate selects among the
groups (automatic relevance determination) where the posterior of the scales spreads over all
of them (docs/randomized_map.md). This sampler integrates over the scales instead, with a Markov
chain on ``(s, w)`` of three steps per sweep:

1. ``w | s``: the MAP at the current scales (warm-started at the chain's last MAP), then a
   randomized MAP there (``draws.py``) and ``refine`` HMC transitions at the scales. A
   randomized MAP has the posterior's distribution only for a quadratic log-likelihood, so the
   chain's limit is the posterior only approximately; the refinement moves each draw towards
   it. The step redraws every weight, so successive sweeps are correlated through the scales
   alone. It runs as one task per chain (on the runner's Dask workers, when it has them).
2. ``s | w``, the centred step: given the weights, each ``u_g = log s_g`` has the density

       -n_g u - R_g exp(-2 u) / 2 + log p(exp(u)) + u,    R_g = sum_{i in g} (w_i - mu_i)^2,

   log-concave for the usual scale priors, sampled exactly by slice sampling (Neal 2003,
   stepping out and shrinkage), every group at once.
3. ``s | z, D``, the non-centred step: with ``z = (w - mu) / s`` held, HMC (Neal 2011) on
   ``u`` with the log density ``log p(D | mu + s z) + log p(s) + sum u``, whose gradient

       d/du_g = sum_{i in g} (w_i - mu_i) d log p(D | w) / dw_i + d/du_g [log p(exp(u)) + u]

   costs one likelihood gradient for all groups; ``w`` follows the scales (``mu + s z``).

Steps 2 and 3 are the interweaving of Yu & Meng (2011). In the centred step a group's scale is
pinned near ``sqrt(R_g / n_g)`` by its ``n_g`` weights, most of which the data leave at their
prior, so alone it moves ``log s_g`` by about ``1 / sqrt(2 n_g)`` a sweep: Gibbs's version of
EM's crawl. The non-centred step rescales all the group's weights at once, and only the
likelihood and the scale's prior hold it, so it moves the scale freely where the data say
little about the group; where they say much the centred step mixes well.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pytensor

from pymc_crf.fitters.bethe_laplace.problem import WeightProblem
from pymc_crf.fitters.bethe_laplace.scales import SCALE_BOUNDS, group_sums
from pymc_crf.fitters.diagonal_laplace import implied_fisher, search_scale
from pymc_crf.fitters.progress import fit_progress
from pymc_crf.fitters.randomized_map.draws import DrawRunner, centre_at, map_at, one_draw
from pymc_crf.fitters.randomized_map.refine import TARGET_ACCEPT, hmc_refine
from pymc_crf.step_methods.adaptation import ScaleAdaptation

__all__ = ["ScaleDensity", "GibbsScales", "sample_scales_by_gibbs", "slice_sample",
           "SCALE_TRANSITIONS"]

#: HMC transitions on ``log s`` per sweep (the non-centred step), and its first step size
SCALE_TRANSITIONS = 3
SCALE_STEP = 0.1


class ScaleDensity:
    """Per scale entry, the log density of ``u = log s`` under the scales' priors
    (``log p(exp(u)) + u``) and its derivative, for a flat vector ``u`` (the scales' own
    priors, compiled once; PyTensor's Python linker, nothing for numba to compile). Every
    entry's prior must be its own: a univariate distribution with fixed parameters."""

    def __init__(self, model, scales):
        self.scales = scales
        rvs = [model[v.name] for v in scales]
        values = [model.rvs_to_values[rv] for rv in rvs]
        terms = model.logp(vars=rvs, jacobian=False, sum=False)
        total = sum(t.sum() for t in terms)
        grads = pytensor.grad(total, values)
        mode = pytensor.compile.mode.Mode(linker="py", optimizer="fast_compile")
        # float64 u into the scales' own dtype (float32 under floatX="float32"), as PyMC's
        # compile_fn allows
        self._fn = pytensor.function(values, [*terms, *grads], mode=mode,
                                     on_unused_input="ignore", allow_input_downcast=True)
        self._k = len(scales)
        out = self._fn(*self._parts(np.zeros(sum(v.size for v in scales))))
        for t, v in zip(out[:self._k], scales, strict=True):
            if np.shape(t) != v.shape:
                raise ValueError(f"scale_method='gibbs' samples each scale entry from its own "
                                 f"prior; the prior of {v.name!r} (shape {v.shape}) has a log "
                                 f"density of shape {np.shape(t)}, not one term per entry. Use "
                                 f"a univariate prior (pm.HalfNormal, pm.Exponential, "
                                 f"pm.InverseGamma, ...) or scale_method='em'")

    def _parts(self, u: np.ndarray) -> list[np.ndarray]:
        return [np.asarray(u[v.offset:v.offset + v.size]).reshape(v.shape) for v in self.scales]

    def __call__(self, u: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        out = self._fn(*self._parts(u))
        dens = np.concatenate([np.asarray(t, dtype=np.float64).reshape(-1)
                               for t in out[:self._k]])
        grad = np.concatenate([np.asarray(g, dtype=np.float64).reshape(-1)
                               for g in out[self._k:]])
        return dens + u, grad + 1.0


def slice_sample(log_f, x: np.ndarray, width: np.ndarray, rng: np.random.Generator,
                 max_steps: int = 60) -> np.ndarray:
    """One slice-sampling update of every entry of ``x``, each under its own univariate log
    density (``log_f(x)`` returns one value per entry; the entries are independent), with
    stepping out by ``width`` and shrinkage (Neal 2003, figs. 3 and 5), vectorised over the
    entries."""
    level = log_f(x) - rng.exponential(size=x.size)
    lo = x - width * rng.uniform(size=x.size)
    hi = lo + width
    for _ in range(max_steps):  # stepping out
        out = log_f(lo) > level
        if not out.any():
            break
        lo = np.where(out, lo - width, lo)
    for _ in range(max_steps):
        out = log_f(hi) > level
        if not out.any():
            break
        hi = np.where(out, hi + width, hi)
    new, todo = x.copy(), np.ones(x.size, dtype=bool)
    for _ in range(200):  # shrinkage: the interval halves on average at every rejection
        prop = rng.uniform(lo, hi)
        ok = todo & (log_f(prop) > level)
        new[ok] = prop[ok]
        todo &= ~ok
        if not todo.any():
            return new
        below = prop < x
        lo = np.where(todo & below, prop, lo)
        hi = np.where(todo & ~below, prop, hi)
    return np.where(todo, x, new)  # unreachable in practice: the interval shrinks onto x


@dataclass
class GibbsScales:
    """The kept sweeps of every chain: ``draws`` (chains, draws, d) and ``scales`` (chains,
    draws, G), per sweep (burn-in included) the ``trace`` of the scales and the non-centred
    step's acceptance rate, per kept draw the weight step's L-BFGS iterations
    (``map_iterations`` of its MAP, ``iterations`` of its randomized MAP), ``success`` and HMC
    ``rates`` (NaN without ``refine``)."""

    draws: np.ndarray
    scales: np.ndarray
    map_iterations: np.ndarray
    iterations: np.ndarray
    success: np.ndarray
    rates: np.ndarray
    trace: dict


def _weight_step(lik, mu: np.ndarray, sd: np.ndarray, w_map: np.ndarray, scale: np.ndarray,
                 seed, data_perturbation: bool, rule: str, gtol: float, maxiter: int,
                 refine: int, index: int) -> tuple:
    """One chain's weight step (module docstring, step 1) at the prior sds ``sd``, the MAP
    warm-started at ``w_map`` and searched in the coordinates ``(w - mu) / scale``: ``(MAP,
    diagonal Laplace sds there, draw, MAP iterations, draw iterations, success, HMC acceptance
    rate)``."""
    w_map, diag = map_at(lik, mu, sd, w_map, rule, gtol, maxiter,
                         "randomized_map: the MAP of a Gibbs sweep", scale=scale)
    centre = centre_at(lik, mu, sd, w_map)
    w, its, ok, rate = one_draw(lik, centre, None, seed, False, data_perturbation, rule, gtol,
                                maxiter, refine, index)
    return (w_map, centre.laplace_sd, w, int(diag.n_iterations), its,
            ok and bool(diag.success), rate)


def _noncentred(lik, density: ScaleDensity, index: np.ndarray, mu: np.ndarray, w: np.ndarray,
                u: np.ndarray, sd: np.ndarray, lap: np.ndarray, tuner: ScaleAdaptation,
                tune: bool, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray, float]:
    """The non-centred step (module docstring, step 3) from the weights ``w`` drawn at the prior
    sds ``sd`` (``lap``: the diagonal Laplace sds there): ``(u, w, acceptance
    rate)``."""
    G = u.size
    scaled = index >= 0
    dev = w - mu
    z = np.where(scaled, dev / np.exp(u)[np.where(scaled, index, 0)], 0.0)
    fixed = np.where(scaled, 0.0, dev)

    def weights(v):
        return mu + fixed + np.exp(v)[np.where(scaled, index, 0)] * z

    def f(v):
        x = weights(v)
        ll, g = lik(x)
        dens, dg = density(v)
        return ll + float(dens.sum()), group_sums(index, (x - mu) * g, G) + dg

    # the mass: each group's diagonal Fisher curvature sum_i (w_i - mu_i)^2 F_ii, plus one
    fisher = implied_fisher(lap, sd)
    mass_sd = 1.0 / np.sqrt(group_sums(index, dev ** 2 * fisher, G) + 1.0)
    # while tuning, every transition tunes the step (the rate returned is then NaN)
    u_new, rate, _ = hmc_refine(f, mass_sd, u, SCALE_TRANSITIONS, rng,
                                n_adapt=SCALE_TRANSITIONS if tune else 0, tuner=tuner)
    return u_new, weights(u_new), rate


def _centred(density: ScaleDensity, index: np.ndarray, n: np.ndarray, mu: np.ndarray,
             w: np.ndarray, u: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """The centred step (module docstring, step 2): new ``u`` given the weights."""
    R = group_sums(index, (w - mu) ** 2, u.size)
    lo, hi = np.log(SCALE_BOUNDS[0]), np.log(SCALE_BOUNDS[1])

    def log_f(v):
        inside = (v > lo) & (v < hi)
        v = np.clip(v, lo, hi)
        val = -n * v - 0.5 * R * np.exp(-2.0 * v) + density(v)[0]
        return np.where(inside, val, -np.inf)

    # the conditional's sd in u is about 1 / sqrt(2 n_g) where the weights pin it
    width = 3.0 / np.sqrt(2.0 * n + 1.0)
    return slice_sample(log_f, u, width, rng)


def sample_scales_by_gibbs(problem: WeightProblem, runner: DrawRunner, seeds: list, *,
                           n_chains: int, n_draws: int, tune: int, scale_init: np.ndarray,
                           progressbar: bool) -> GibbsScales:
    """``n_chains`` chains of ``tune + n_draws`` sweeps of the module docstring's sampler from
    ``scale_init``, keeping the last ``n_draws``; the weight steps of the chains run together
    on ``runner`` (on its Dask client, when it has one). ``seeds``: one ``SeedSequence`` per
    chain."""
    index = np.asarray(problem.scale_index)
    G = problem.n_scales
    n = np.bincount(index[index >= 0], minlength=G).astype(np.float64)
    density = ScaleDensity(problem.model, problem.scales)
    lik = runner.lik
    mu = problem.prior.mean
    shared_mu = runner.share(mu, broadcast=True)
    sweeps = tune + n_draws
    # per chain: the weight steps' seeds (one per sweep) and the scale steps' generator
    chain_seeds = [s.spawn(sweeps + 1) for s in seeds]
    rngs = [np.random.default_rng(cs[-1]) for cs in chain_seeds]
    tuners = [ScaleAdaptation(SCALE_STEP, TARGET_ACCEPT) for _ in range(n_chains)]
    u = [np.log(np.asarray(scale_init, dtype=np.float64)) for _ in range(n_chains)]
    w_map = [mu.copy() for _ in range(n_chains)]
    # the last sweep's prior and diagonal Laplace sds per chain: the next MAP, at new scales, is
    # searched in the coordinates of the Laplace sds they predict there (search_scale)
    last_sd: list = [None] * n_chains
    last_lap: list = [None] * n_chains
    d = mu.size
    draws = np.empty((n_chains, n_draws, d))
    scales = np.empty((n_chains, n_draws, G))
    map_iters = np.zeros((n_chains, n_draws), dtype=np.int64)
    iters = np.zeros((n_chains, n_draws), dtype=np.int64)
    ok = np.zeros((n_chains, n_draws), dtype=bool)
    rates = np.full((n_chains, n_draws), np.nan)
    trace = np.empty((n_chains, sweeps, G))
    accept = np.full((n_chains, sweeps), np.nan)
    with fit_progress("randomized MAP Gibbs sweeps (scales integrated)", sweeps,
                      progressbar) as bar:
        for t in range(sweeps):
            sds = [problem.at_scales(np.exp(u[c])).prior.sd for c in range(n_chains)]
            search = [search_scale(sds[c], last_lap[c], last_sd[c]) for c in range(n_chains)]
            calls = [(shared_mu, runner.share(sds[c]), runner.share(w_map[c]),
                      runner.share(search[c]), chain_seeds[c][t], *runner.options, t)
                     for c in range(n_chains)]
            out = runner.map(_weight_step, calls, label="Gibbs weight steps", progressbar=False)
            for c in range(n_chains):
                w_map[c], lap, w_c, m_its, its, success, rate = out[c]
                last_sd[c], last_lap[c] = sds[c], lap
                u[c] = _centred(density, index, n, mu, w_c, u[c], rngs[c])
                u[c], w_c, accept[c, t] = _noncentred(
                    lik, density, index, mu, w_c, u[c], sds[c], lap, tuners[c],
                    t < tune, rngs[c])
                trace[c, t] = np.exp(u[c])
                k = t - tune
                if k >= 0:
                    draws[c, k], scales[c, k] = w_c, np.exp(u[c])
                    map_iters[c, k], iters[c, k], ok[c, k], rates[c, k] = m_its, its, success, rate
            bar.advance()
    return GibbsScales(draws, scales, map_iters, iters, ok, rates,
                       {"scales": trace, "acceptance": accept})
