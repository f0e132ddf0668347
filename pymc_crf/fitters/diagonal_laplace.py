"""A diagonal Laplace approximation around the MAP, for CRFs with millions of weights.

The full Laplace approximation (``method="bethe_laplace"``, Welling & Parise 2006) needs the d x d
Hessian, out of reach for a text CRF with d ~ 10^6 weights. Its diagonal is cheap: the negative
Hessian of the log-likelihood of log-linear node weights ``W[f, k]`` is the covariance of their
feature counts, ``sum_ij x_if x_jf Cov(1[y_i = k], 1[y_j = k])``. Keeping only the ``i = j`` terms
gives ``sum_i x_if^2 mu_ik (1 - mu_ik)`` (the per-token Fisher information, one sparse product),
exact when positions are independent and an approximation along a chain; per-edge weights get the
same form from the edge marginals. The approximate posterior is then
``N(w_MAP, diag(1 / (1 / sigma^2 + fisher)))``, independently per weight. A shared (K, K)
transition table, whose K^2 weights are each pinned by the counts of all edges, is kept at its MAP
(standard deviation 0).

:func:`diagonal_laplace_draws` draws the weights from that approximation one draw at a time, so
that :func:`~pymc_crf.model.predictors.averaged_marginals` averages the exact node marginals of new
data over them (Monte Carlo model averaging, as ``pmc.predict(method="average")`` does with stored
draws) without forming the (draws, F, K) array.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np

from pymc_crf.feature_products import as_feature_matrix, features_tdot
from pymc_crf.model.objective import CRFLogLikelihood, GaussianLogPrior
from pymc_crf.model.spec import CRFSpec, require_all_labels, require_gaussian_prior
from pymc_crf.validation import generator, whole_number

__all__ = ["diagonal_laplace_draws", "diagonal_laplace_sd", "diagonal_fisher",
           "posterior_sd", "implied_fisher", "rescaled_laplace_sd", "search_scale",
           "search_gtol"]


def _squared(x):
    x = as_feature_matrix(x)
    return x.multiply(x).tocsr() if hasattr(x, "multiply") else x * x


def diagonal_laplace_sd(spec: CRFSpec, w_map: np.ndarray, shared_table: str = "map"
                        ) -> np.ndarray:
    """Posterior standard deviations (flat weight order) of the diagonal Laplace approximation at
    ``w_map`` (module docstring); log-linear potentials and fixed Normal priors only.

    ``shared_table``: a transition table shared by every edge is kept at its MAP (sd 0,
    ``"map"``), or given its own diagonal Fisher information, the edge marginals' Bernoulli
    variances summed over the edges (``"fisher"``)."""
    require_gaussian_prior(spec, "diagonal Laplace")
    # missing labels would need the clamped marginals' covariance subtracted; refused instead
    require_all_labels(spec, "diagonal Laplace")
    if spec.potential != "loglinear":
        raise ValueError("the diagonal Laplace approximation takes log-linear potentials; got "
                         f"{spec.potential!r}")
    if shared_table not in ("map", "fisher"):
        raise ValueError(f"shared_table must be 'map' or 'fisher'; got {shared_table!r}")
    lik, prior = CRFLogLikelihood(spec), GaussianLogPrior(spec)
    return posterior_sd(diagonal_fisher(lik, w_map, shared_table), prior.sd)


def diagonal_fisher(lik: CRFLogLikelihood, w: np.ndarray, shared_table: str = "map"
                    ) -> np.ndarray:
    """The diagonal of the log-likelihood's Fisher information at ``w`` (flat weight order; the
    per-token approximation of the module docstring) of the log-linear CRF likelihood ``lik``;
    a shared transition table's entries are ``inf`` with ``shared_table="map"`` (kept at
    ``w``), its edges' summed Bernoulli variances with ``"fisher"``."""
    spec = lik.spec
    node, edge = lik.log_potentials(w)
    if spec.edge_weights is not None and lik.Xe is None and shared_table == "fisher":
        # one table per edge, so the engine gives per-edge marginals (not their sum)
        edge = np.repeat(edge, spec.batch.n_edges, axis=0)
    m = lik.engine.marginals(spec.batch, node, edge)
    fisher = []
    if lik.X is not None:
        fisher.append(features_tdot(_squared(lik.X), m.node * (1.0 - m.node)).ravel())
    if spec.edge_weights is not None:
        if lik.Xe is None and shared_table == "map":
            fisher.append(np.full(spec.n_labels**2, np.inf))  # kept at its MAP
        elif lik.Xe is None:
            fisher.append((m.edge * (1.0 - m.edge)).reshape(-1, spec.n_labels**2).sum(axis=0))
        else:
            fisher.append(features_tdot(_squared(lik.Xe), m.edge * (1.0 - m.edge)).ravel())
    return np.concatenate(fisher)


def posterior_sd(fisher: np.ndarray, prior_sd: np.ndarray) -> np.ndarray:
    """The diagonal Laplace posterior sds from the likelihood's diagonal curvature ``fisher``
    and the prior sds: ``1 / sqrt(fisher + 1 / prior_sd^2)``."""
    return 1.0 / np.sqrt(fisher + np.asarray(prior_sd, dtype=np.float64) ** -2.0)


def implied_fisher(laplace_sd: np.ndarray, prior_sd: np.ndarray) -> np.ndarray:
    """The likelihood's diagonal curvature that diagonal Laplace sds imply under the prior sds
    ``prior_sd`` (:func:`posterior_sd` inverted): ``1 / laplace_sd^2 - 1 / prior_sd^2``, and 0
    where it cannot be recovered (a Laplace sd of 0 or not finite; rounding that makes it
    negative, for a prior sd far below the likelihood's scale)."""
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        fisher = np.asarray(laplace_sd, dtype=np.float64) ** -2.0 - np.asarray(
            prior_sd, dtype=np.float64) ** -2.0
    return np.where(np.isfinite(fisher) & (fisher > 0.0), fisher, 0.0)


def rescaled_laplace_sd(laplace_sd: np.ndarray, prior_sd: np.ndarray,
                        new_prior_sd: np.ndarray) -> np.ndarray:
    """The diagonal Laplace sds under the prior sds ``new_prior_sd``, predicted from
    ``laplace_sd`` (those under ``prior_sd``) with the likelihood's diagonal curvature held
    (:func:`implied_fisher`)."""
    return posterior_sd(implied_fisher(laplace_sd, prior_sd), new_prior_sd)


def search_scale(prior_sd: np.ndarray, laplace_sd: np.ndarray | None = None,
                 laplace_prior_sd: np.ndarray | None = None) -> np.ndarray:
    """The coordinates ``(w - mu) / scale`` in which the package's L-BFGS searches for a MAP or
    a randomized MAP under the prior sds ``prior_sd`` near a known diagonal Laplace
    approximation: the geometric mean of the prior and the diagonal Laplace sds (the prior sds
    alone when ``laplace_sd`` is None). ``laplace_prior_sd``: the prior sds ``laplace_sd`` were
    computed under, when they are not ``prior_sd`` (the MAP at new scales, near the last
    scales' one); they are then rescaled to ``prior_sd`` first (:func:`rescaled_laplace_sd`).

    Whitened by the prior sds, the curvature's diagonal is ``1 + sd^2 fisher``, large for
    frequent features; whitened by the Laplace sds it is 1, but features that fire on the same
    tokens then share one strongly curved direction. The geometric mean sits between the two and
    was chosen by measurement (``docs/benchmarks.md``): on 300 CoNLL-2000 sentences the
    randomized MAP's draws took 234 L-BFGS iterations in prior-whitened coordinates, 367 in
    Laplace-whitened ones and 189 in these (exponents 1/4 and 3/4: 186 and 237), on all 8,436
    training sentences 882 against 476. The learned-scale Laplace fit's MAPs at new scales in
    these coordinates made that fit 1.47x faster at 300 sentences; the Gibbs sweeps' MAPs
    took 84 iterations on average against 96."""
    if laplace_sd is None:
        return prior_sd
    if laplace_prior_sd is not None:
        laplace_sd = rescaled_laplace_sd(laplace_sd, laplace_prior_sd, prior_sd)
    return np.sqrt(prior_sd * laplace_sd)


def search_gtol(gtol: float, prior_sd: np.ndarray, scale: np.ndarray) -> float:
    """The tolerance on the largest gradient entry in the coordinates ``(w - mu) / scale`` that
    keeps the largest entry in prior-whitened coordinates ``(w - mu) / prior_sd`` at most
    ``gtol``, the meaning ``gtol`` has for every MAP of the package: ``gtol`` times the least
    ``scale / prior_sd`` (1 for prior-whitened coordinates)."""
    ratio = np.asarray(scale, dtype=np.float64) / np.asarray(prior_sd, dtype=np.float64)
    return float(gtol * min(1.0, float(np.min(ratio)))) if ratio.size else float(gtol)


def diagonal_laplace_draws(spec: CRFSpec, mean: np.ndarray, sd: np.ndarray, draws: int = 30,
                           random_seed: int | None = None) -> Iterator[dict[str, np.ndarray]]:
    """``draws`` weight draws from ``N(mean, diag(sd^2))`` (flat weight order of ``spec``), made
    one at a time, each as ``{"node_weights": ..., "edge_weights": ...}``: the weight sets
    :func:`~pymc_crf.model.predictors.averaged_marginals` averages over, with the layout
    :func:`~pymc_crf.model.predictors.crf_layout` of ``spec``."""
    rng = generator(random_seed, "random_seed")
    draws = whole_number(draws, "draws")
    mean, sd = np.asarray(mean, dtype=np.float64), np.asarray(sd, dtype=np.float64)
    roles = [(key, w.name) for key, w in (("node_weights", spec.node_weights),
                                          ("edge_weights", spec.edge_weights)) if w is not None]

    def one_at_a_time():  # the arguments are checked above, when the function is called
        for _ in range(draws):
            parts = spec.unflatten(mean + sd * rng.standard_normal(mean.size))
            yield {key: parts[name] for key, name in roles}

    return one_at_a_time()
