"""Predictive automatic relevance determination by EP for CRF features (Qi 2005, thesis ch. 4;
Qi, Minka, Picard & Ghahramani 2004).

ARD puts a zero-mean Gaussian prior ``N(0, 1/alpha_g)`` on the weights of each input feature g
(a node feature's K label weights, an edge feature's K^2 label-pair weights) and tunes the
precisions alpha. Here:

* **the EP sites as pseudo-data.** With the sites fixed, q(w) = p0(w | alpha) exp(-w^T L w / 2 +
  h^T w) (:func:`.core.site_natural_params`), so the evidence as a function of one group's alpha_g
  is that of a Gaussian regression (thesis sec. 4.3.3, eq. (4.14)). Integrating out every other
  weight leaves ``exp(-w_g^T S_g w_g / 2 + q_g^T w_g)`` for the group, and

      l_g(alpha) = sum_k [ log alpha - log(alpha + s_k) + qt_k^2 / (alpha + s_k) ] / 2

  with ``s_k`` the eigenvalues of S_g and ``qt = U^T q_g`` in its eigenbasis (Faul & Tipping 2002,
  the thesis's eq. above (4.15), summed over the group's directions; l(inf) = 0 is the group out of
  the model). For a one-weight group the maximiser is thesis eqs. (4.15)-(4.16),
  ``alpha = s^2 / (q^2 - s)`` if ``q^2 > s`` else infinity.
* **sequential updates.** Each step re-estimates or deletes the one group whose update raises the
  evidence most (Faul & Tipping 2002), then re-runs EP (a deleted group's weights are pinned at 0
  by a zero prior variance, so the factors never change and a run may start from the old sites,
  ``warm_start=True``; by default each run starts from scratch, as warm starts from sites fitted
  under another prior sometimes reached far-off states in our runs).
* **CRF sites.** Unlike the probit sites of thesis ch. 4, a CRF's EP sites include the
  denominator terms of 1/Z(w) (Qi, Szummer & Minka 2005, eq. (51)), whose precision is negative,
  so S_g can be indefinite and l_g is then unbounded as alpha -> -s_min. Measured on the 3-cycle
  data of docs/ep.md (20 graphs, 6 irrelevant features): a removed irrelevant group's Schur
  complement had an eigenvalue of -7100, "evidence" 21319 for adding it back, and the path that
  allowed additions re-added every deleted group and then stopped EP from converging. So the
  path starts from the full model and only shrinks or removes (no additions), each S_g keeps
  only its positive-curvature part (negative eigenvalues set to 0: directions in which the sites
  carry no evidence for the feature), and no precision drops below the model's prior precision.
* **leave-one-out estimates.** Removing graph i's sites from q gives the cavity q^{\\i} that does not
  depend on graph i (thesis eqs. (4.4)-(4.5), here all of the graph's numerator and denominator
  sites at once). The error of graph i's nodes under the CRF at the cavity mean is the estimate of
  thesis eq. (4.12); the mean probability of the wrong label under model averaging with the
  cavity (Qi, Szummer & Minka 2005, eqs. (59)-(60)) is the analogue of eq. (4.13).
* **the choice.** Predictive ARD keeps the step with the smallest leave-one-out error (the first
  of a tie, i.e. the one with less evidence; thesis sec. 4.3.4); evidence-ARD keeps the end of
  the path, where no update raises the evidence.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from pymc_crf.fitters.ep.average import averaged_node_marginals
from pymc_crf.fitters.ep.core import EPRun, run_ep, site_natural_params
from pymc_crf.fitters.ep.terms import EPTerms
from pymc_crf.fitters.optimise import find_map
from pymc_crf.graphs.batch import GraphBatch

__all__ = ["feature_groups", "group_evidence", "optimal_precision", "group_statistics",
           "site_evidence", "graph_cavities", "loo_estimates", "ARDStep", "ARDPath", "run_ard", "CRITERIA"]

#: how predictive ARD picks a step of the path
CRITERIA = ("loo", "loo_prob", "evidence")


def feature_groups(n_node_features: int, n_edge_features: int, K: int) -> list[np.ndarray]:
    """Flat weight indices (layout of :mod:`.terms`) of each feature's group: node feature f owns
    ``f*K + a``, edge feature f owns ``F*K + f*K^2 + c``."""
    F, Fe = int(n_node_features), int(n_edge_features)
    groups = [f * K + np.arange(K) for f in range(F)]
    groups += [F * K + f * K * K + np.arange(K * K) for f in range(Fe)]
    return groups


def group_evidence(S: np.ndarray, q: np.ndarray, alpha: float) -> float:
    """``l_g(alpha)`` of the module docstring (0 at alpha = inf; -inf where alpha + s_k <= 0)."""
    if not np.isfinite(alpha):
        return 0.0
    s, U = np.linalg.eigh(0.5 * (S + S.T))
    if alpha <= 0 or np.any(alpha + s <= 0):
        return -np.inf
    qt = U.T @ q
    return 0.5 * float(np.sum(np.log(alpha) - np.log(alpha + s) + qt ** 2 / (alpha + s)))


def optimal_precision(S: np.ndarray, q: np.ndarray, alpha_min: float = 1e-3,
                      alpha_max: float = 1e8) -> tuple[float, float]:
    """The precision maximising :func:`group_evidence` over ``[alpha_lo, alpha_max]`` or infinity,
    and the evidence there.

    ``alpha_lo = max(alpha_min, 2 * max(0, -s_min))``: where the sites' curvature in the group is
    negative (denominator sites outweigh the numerators) l_g is unbounded as alpha -> -s_min,
    an improper posterior, so alpha is kept at twice that curvature. A one-weight group with
    ``s > 0`` uses the closed form (thesis eqs. (4.15)-(4.16)).
    """
    S = np.atleast_2d(np.asarray(S, float))
    q = np.atleast_1d(np.asarray(q, float))
    s, U = np.linalg.eigh(0.5 * (S + S.T))
    lo = max(float(alpha_min), 2.0 * max(0.0, -float(s[0])))
    if q.size == 1 and s[0] > 0:
        theta = q[0] ** 2 - s[0]
        if theta <= 0:
            return np.inf, 0.0
        a = float(np.clip(s[0] ** 2 / theta, lo, alpha_max))
        return a, group_evidence(S, q, a)
    if lo >= alpha_max:
        return np.inf, 0.0
    qt2 = (U.T @ q) ** 2

    def neg(log_a: float) -> float:
        a = np.exp(log_a)
        return -0.5 * float(np.sum(log_a - np.log(a + s) + qt2 / (a + s)))

    def neg_and_grad(x: np.ndarray) -> tuple[float, np.ndarray]:
        a = float(np.exp(x[0]))
        grad = -0.5 * float(np.sum(1.0 - a / (a + s) - qt2 * a / (a + s) ** 2))
        return neg(float(x[0])), np.array([grad])

    grid = np.linspace(np.log(lo), np.log(alpha_max), 41)
    vals = np.array([neg(x) for x in grid])
    i = int(np.argmin(vals))
    lo_i, hi_i = grid[max(i - 1, 0)], grid[min(i + 1, grid.size - 1)]
    best_x, best = grid[i], vals[i]
    if hi_i > lo_i:  # the bracket's maximiser by the package's one optimiser (L-BFGS-B, bounds)
        x, diag = find_map(neg_and_grad, np.array([best_x]), bounds=[(lo_i, hi_i)],
                           warn=False)
        if diag.objective < best:
            best_x, best = float(x[0]), float(diag.objective)
    if -best <= 0.0:
        return np.inf, 0.0
    return float(np.exp(best_x)), -float(best)


def group_statistics(V: np.ndarray, m: np.ndarray, lam: np.ndarray, h: np.ndarray,
                     alpha: np.ndarray, groups: list[np.ndarray]):
    """``(S_g, q_g)`` of every group: the Gaussian that the sites and the other groups' priors
    leave on the group's weights (module docstring).

    A group in the model (finite alpha) reads them off q's marginal ``N(m_g, V_gg)``:
    ``S_g = V_gg^{-1} - alpha_g I``, ``q_g = V_gg^{-1} m_g``. A group out of the model takes the
    Schur complement through the groups in it: ``S_g = L_gg - L_gI V_II L_Ig``,
    ``q_g = h_g - L_gI m_I`` (``V_II = (A_I + L_II)^{-1}``, the EP covariance).
    """
    inc = np.concatenate([groups[g] for g in range(len(groups)) if np.isfinite(alpha[g])]
                         + [np.zeros(0, np.int64)])
    out = []
    for g, idx in enumerate(groups):
        if np.isfinite(alpha[g]):
            P = np.linalg.inv(V[np.ix_(idx, idx)])
            P = 0.5 * (P + P.T)
            out.append((P - alpha[g] * np.eye(idx.size), P @ m[idx]))
        else:
            L_gI = lam[np.ix_(idx, inc)]
            S = lam[np.ix_(idx, idx)] - L_gI @ V[np.ix_(inc, inc)] @ L_gI.T
            out.append((0.5 * (S + S.T), h[idx] - L_gI @ m[inc]))
    return out


def site_evidence(V: np.ndarray, m: np.ndarray, alpha: np.ndarray,
                  groups: list[np.ndarray]) -> float:
    """``log int p0(w | alpha) exp(-w^T L w / 2 + h^T w) dw`` with the current sites (q = N(m, V)):
    ``(sum log alpha_g |g| - log det(A_I + L_II) + h_I^T V_II h_I) / 2``, the alpha-dependent part
    of the EP evidence (thesis eq. (4.11) without the site normalisers)."""
    inc = [g for g in range(len(groups)) if np.isfinite(alpha[g])]
    if not inc:
        return 0.0
    idx = np.concatenate([groups[g] for g in inc])
    Vi = V[np.ix_(idx, idx)]
    sign, logdet_v = np.linalg.slogdet(Vi)
    hi = np.linalg.solve(Vi, m[idx])
    log_alpha = sum(groups[g].size * np.log(alpha[g]) for g in inc)
    return 0.5 * float(log_alpha + logdet_v + hi @ m[idx])


def _psd_part(S: np.ndarray) -> np.ndarray:
    """S with its negative eigenvalues set to 0 (module docstring, "CRF sites")."""
    s, U = np.linalg.eigh(0.5 * (S + S.T))
    return (U * np.maximum(s, 0.0)) @ U.T


def _graph_factors(terms: EPTerms, batch: GraphBatch) -> list[np.ndarray]:
    """Factor ids of each graph (a factor belongs to the graph of its first node)."""
    graph = batch.node_graph[terms.nodes[:, 0]]
    return [np.flatnonzero(graph == g) for g in range(batch.n_graphs)]


def graph_cavities(terms: EPTerms, run: EPRun, batch: GraphBatch):
    """Yield ``(g, mean, cov, positive_definite)`` of the cavity q^{\\g} = q / (sites of graph g)
    for every graph (thesis eqs. (4.4)-(4.5), all of the graph's sites at once), in natural
    parameters over the weights in the model (pinned weights stay at 0). A cavity whose precision
    is not positive definite comes with ``cov`` = q's covariance and ``False``."""
    V, m = run.cov, run.mean
    free = np.flatnonzero(np.diag(V) > 0)
    ff = np.ix_(free, free)
    Q = np.linalg.inv(V[ff])
    Q = 0.5 * (Q + Q.T)
    b = Q @ m[free]
    for g, facs in enumerate(_graph_factors(terms, batch)):
        lam_i, h_i = site_natural_params(terms, run.state, facs)
        Qc = Q - lam_i[ff]
        m_c = np.zeros_like(m)
        m_c[free] = np.linalg.solve(Qc, b - h_i[free])
        try:
            np.linalg.cholesky(Qc)
        except np.linalg.LinAlgError:
            yield g, m_c, V, False
            continue
        Vc = np.linalg.inv(Qc)
        V_c = np.zeros_like(V)
        V_c[ff] = 0.5 * (Vc + Vc.T)
        yield g, m_c, V_c, True


def loo_estimates(terms: EPTerms, run: EPRun, batch: GraphBatch, labels: np.ndarray,
                  node_features, edge_features, potential: str, epsilon: float):
    """Leave-one-graph-out error and wrong-label probability from EP's cavities.

    Returns ``(error, probability, n_not_pd)``: the fraction of nodes mislabelled by the CRF at the
    cavity mean of their graph (thesis eq. (4.12)), the mean probability of the wrong label under
    model averaging with the cavity (eq. (4.13)), and the number of graphs whose cavity was not
    positive definite (their probability uses q's covariance with the cavity mean).
    """
    K, N = terms.K, batch.n_total_nodes
    errors = 0
    prob_wrong = 0.0
    not_pd = 0
    for g, m_c, V_c, pd in graph_cavities(terms, run, batch):
        not_pd += not pd
        nodes = batch.node_index([g])
        sub = batch.subset([g])
        xn = None if node_features is None else node_features[nodes]
        xe = None if edge_features is None else edge_features[batch.edge_index([g])]
        t = labels[nodes]
        plug_in = averaged_node_marginals(m_c, np.zeros_like(V_c), K, sub, xn, xe, potential,
                                          epsilon)
        errors += int(np.sum(plug_in.argmax(axis=1) != t))
        marg = averaged_node_marginals(m_c, V_c, K, sub, xn, xe, potential, epsilon)
        prob_wrong += float(np.sum(1.0 - marg[np.arange(nodes.size), t]))
    return errors / N, prob_wrong / N, not_pd


@dataclass
class ARDStep:
    """One model on the ARD path."""

    alpha: np.ndarray  # (n_groups,), inf = feature out of the model
    mean: np.ndarray
    cov: np.ndarray
    loo_error: float
    loo_probability: float
    loo_not_pd: int
    site_evidence: float
    ep_iterations: int
    ep_converged: bool
    action: str  # "start", "add g", "delete g", "update g"


@dataclass
class ARDPath:
    """The sequence of models of :func:`run_ard` and the chosen one."""

    steps: list[ARDStep] = field(default_factory=list)
    converged: bool = False

    def choose(self, criterion: str) -> int:
        """Index of the step predictive ARD (``"loo"``, ``"loo_prob"``) or evidence-ARD
        (``"evidence"``: the end of the path) keeps; ties go to the earliest step."""
        if criterion not in CRITERIA:
            raise ValueError(f"criterion must be one of {CRITERIA}; got {criterion!r}")
        if criterion == "evidence":
            return len(self.steps) - 1
        key = "loo_error" if criterion == "loo" else "loo_probability"
        vals = np.array([getattr(s, key) for s in self.steps])
        return int(np.flatnonzero(vals == vals.min())[0])


def run_ard(terms: EPTerms, batch: GraphBatch, labels: np.ndarray, node_features, edge_features,
            groups: list[np.ndarray], alpha0: np.ndarray, *, potential: str = "probit",
            epsilon: float = 0.0, alpha_min=None, tol: float = 1e-3,
            max_steps: int | None = None, ep_options: dict | None = None,
            warm_start: bool = False, progress=None) -> ARDPath:
    """The sequential ARD path: EP fit, leave-one-out estimates, then the best evidence update.

    Parameters
    ----------
    terms : EPTerms
        Factors of the training batch with every feature (``d`` weights).
    batch, labels, node_features, edge_features
        The training graphs and features in the layout of ``terms`` (a shared edge table is one
        constant edge feature).
    groups : list of index arrays
        :func:`feature_groups`.
    alpha0 : (n_groups,)
        Starting precisions (``inf``: start with the group out of the model).
    alpha_min : float or (n_groups,) array, optional
        Smallest precision (largest prior variance) each group may take; default ``alpha0``
        where finite: ARD then shrinks or removes features but never widens the prior the model
        states. Without a bound, the groups of strongly predictive features drift to huge prior
        variances (their evidence keeps growing, as with separable data) and EP on the CRF
        becomes unstable.
    tol : float
        Stop when no update raises the evidence (sites fixed) by more than ``tol`` nats.
    max_steps : int, optional
        Bound on the updates (default 10 per group).
    ep_options : dict
        Keyword arguments of :func:`.core.run_ep` (step size, variant, ...).
    warm_start : bool
        Start each EP run from the previous step's sites instead of from scratch.
    """
    opts = dict(ep_options or {})
    alpha = np.asarray(alpha0, float).copy()
    if alpha.shape != (len(groups),) or np.any(alpha <= 0) or np.any(np.isnan(alpha)):
        raise ValueError("alpha0 must hold one positive precision (or inf) per feature group")
    if alpha_min is None:
        fin = alpha[np.isfinite(alpha)]
        alpha_min = np.where(np.isfinite(alpha), alpha, fin.min() if fin.size else 1e-3)
    alpha_min = np.broadcast_to(np.asarray(alpha_min, float), alpha.shape)
    if np.any(~np.isfinite(alpha_min)) or np.any(alpha_min <= 0):
        raise ValueError("alpha_min must be positive and finite")
    n_steps = 10 * len(groups) if max_steps is None else int(max_steps)
    d = terms.d
    path = ARDPath()
    state = None
    action = "start"
    for step in range(n_steps + 1):
        pv = np.zeros(d)
        for g, idx in enumerate(groups):
            if np.isfinite(alpha[g]):
                pv[idx] = 1.0 / alpha[g]
        run = run_ep(terms, np.zeros(d), pv, potential=potential, epsilon=epsilon, init=state,
                     **opts)
        state = run.state if warm_start else None
        err, prob, not_pd = loo_estimates(terms, run, batch, labels, node_features,
                                          edge_features, potential, epsilon)
        path.steps.append(ARDStep(alpha.copy(), run.mean, run.cov, err, prob, not_pd,
                                  site_evidence(run.cov, run.mean, alpha, groups),
                                  run.iterations, run.converged, action))
        if progress is not None:
            progress(step, path.steps[-1])
        if step == n_steps:
            break
        lam, h = site_natural_params(terms, run.state)
        stats = group_statistics(run.cov, run.mean, lam, h, alpha, groups)
        best_gain, best_g, best_alpha = 0.0, -1, np.inf
        for g, (S, q) in enumerate(stats):
            if not np.isfinite(alpha[g]):
                continue  # removed for good: no additions (module docstring)
            S = _psd_part(S)
            a_new, l_new = optimal_precision(S, q, float(alpha_min[g]))
            l_old = group_evidence(S, q, alpha[g])
            gain = l_new - l_old
            if gain > best_gain:
                best_gain, best_g, best_alpha = gain, g, a_new
        if best_g < 0 or best_gain < tol:
            path.converged = True
            break
        alpha[best_g] = best_alpha
        action = ("update" if np.isfinite(best_alpha) else "delete") + f" {best_g}"
    return path
