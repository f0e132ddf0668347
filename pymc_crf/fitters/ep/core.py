"""Flattened power EP / transformed (power) EP for the posterior over CRF weights.

q(w) = p0(w) prod_k g~_k(w) / prod_k f~_k(w)   (Qi, Szummer & Minka 2005, eq. (51), thesis eq. (5.70))

* g~_k: numerator term of factor k (its observed-label potential), standard EP with exact robust
  probit (or lognormal) moments, rank 1 (Qi, Szummer & Minka 2005, eqs. (8)-(11), (29)-(48) with one
  configuration).
* f~_k: denominator term of factor k, approximating
  ``f_k(w) = sum_{t_i, t_j} g_k(t_i, t_j; w) q^{\\k}(t_i) q^{\\k}(t_j)`` (Qi, Szummer & Minka 2005, eq. (24),
  (30)), rank n_c = K^2 (K for node factors), updated by transformed power EP with power n_k = -1 and
  transform m_k (thesis eqs. (5.16)-(5.18)): the cavity is
  ``q^{\\k} = q * f~_k^{1 - 2 m_k}`` (m_k = 1: power EP, ``q / f~_k``, Qi, Szummer & Minka 2005, eq. (15) /
  (22); m_k = 0: transformed EP, ``q * f~_k``), the new site is ``proj[f_k q^{\\k}] / q^{\\k}``
  (Qi, Szummer & Minka 2005, eq. (25)), damped with step size lambda (thesis eqs. (5.57)-(5.58)), and q is
  replaced by ``q * f~_k^old / f~_k^new`` (Qi, Szummer & Minka 2005, eq. (17); thesis eqs. (5.71)-(5.74) for
  PEP).
* the inner label beliefs q(t_i) are fully factorised; each denominator update sets the new pair
  belief to the responsibilities of the tilted mixture (Qi, Szummer & Minka 2005, eqs. (49)-(50)) and damps
  the label messages with step size xi in log space (thesis eqs. (5.61)-(5.63), (5.68)-(5.69)).

Each factor's numerator term is processed right before its denominator term (thesis sec. 5.3.4).
All updates are rank-n_c Woodbury updates of (m, V) (:mod:`.gaussian`), O(d^2) per term; a term
whose cavity or whose result is not positive definite is skipped and counted.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np

from pymc_crf.fitters.ep.gaussian import low_rank_update, low_rank_y, project, site_from_moments
from pymc_crf.fitters.ep.moments import mixture_moments
from pymc_crf.fitters.ep.terms import EPTerms
from pymc_crf.fitters.progress import track
from pymc_crf.inference.kernels import copy_into
from pymc_crf.kernel_cache import njit
from pymc_crf.potentials import get_potential
from pymc_crf.validation import positive_number, real_number, whole_number

__all__ = ["DEFAULT_MAX_STEP", "MAX_SKIPPED_SHARE", "EPState", "EPRun", "run_ep", "ep_sweep",
           "variant_transform", "site_natural_params"]

#: first sweep (0-based) from which the adaptive schedule skips a factor whose numerator cavity is
#: improper whole (:func:`ep_sweep`). Before it q is far from its fixed point (the first sweep
#: moves the mean by ~2.5 on the README's data) and an improper cavity is often transient;
#: skipping whole factors from the start froze some at nearly empty sites (10-chain seed 18:
#: numerator precision 0.045 from sweep 4 on, test error 0.376 against 0.339 and NUTS's 0.341).
FACTOR_SKIP_FROM = 10

#: largest share of the term updates (numerator and 1/Z sites) that the last sweep may skip for
#: the run to count as converged (:func:`run_ep`)
MAX_SKIPPED_SHARE = 0.1

#: default ceiling of the adaptive schedule's step (``max_step``). The site updates of real data
#: overshoot at steps near 1: with a ceiling of 1.0 PEP diverged on the shipped Japanese Vowels
#: data (3 speakers x 10 utterances, and 2 x 2, 2 x 4: variances up to 6e6 against the prior's 1,
#: with every schedule; the back-off one too) and on a 10 x 10 Weizmann horses grid (3 images:
#: |m| 1.3e4), where a ceiling of 0.5 converges in 74-121 and 118 sweeps with every variance below
#: the prior's. On ``bcrf_synthetic`` (8 seeds each of 10 loops, 10 and 30 chains) the test errors
#: are the same (0.2632 / 0.3292 / 0.2673 against 0.2638 / 0.3293 / 0.2669 with 1.0) in about 1.7
#: times the sweeps (median 71 / 40 / 85 against 46 / 22 / 48).
DEFAULT_MAX_STEP = 0.5

#: skip counters: numerator cavity, numerator result, denominator cavity, denominator result,
#: non-finite moments
SKIP_NAMES = ("numerator_cavity", "numerator_update", "denominator_cavity",
              "denominator_update", "nonfinite_moments")


def variant_transform(variant: str, transform: float | None = None) -> float:
    """The transform m_k of thesis eq. (5.16) for a variant name: pep -> 1, tep -> 0."""
    if transform is not None:
        t = real_number(transform, "transform")
        if not 0.0 <= t <= 1.0:
            raise ValueError(f"transform m_k must lie in [0, 1] (thesis eq. (5.16)); got {t}")
        return t
    if variant == "pep":
        return 1.0
    if variant == "tep":
        return 0.0
    raise ValueError(f"variant must be 'pep' (power EP) or 'tep' (transformed EP); got {variant!r}")


@njit(cache=True)
def _log_normalise(v):
    hi = v.max()
    return v - (hi + np.log(np.exp(v - hi).sum()))


@njit(cache=True)
def _adapt_step(lam_site, k, prev, change, lam_min, lam_max, grow):
    """Per-site step of the adaptive schedule: halve ``lam_site[k]`` (down to ``lam_min``) when the
    site's undamped ``change`` (flat natural parameters) points against its change of the sweep
    before (``prev``, the site's row, overwritten), else grow it by ``grow`` up to ``lam_max``."""
    n = change.shape[0]
    dot = 0.0
    for a in range(n):
        dot += change[a] * prev[a]
        prev[a] = change[a]
    if dot < 0.0:
        lam_site[k] = max(0.5 * lam_site[k], lam_min)
    else:
        lam_site[k] = min(grow * lam_site[k], lam_max)


@njit(cache=True)
def _damped_site(S, my, h_old, mu_old, hh, mh, lam_site, k, lam_min, sign):
    """Damp a site towards its EP value and check q stays positive definite.

    The new site is ``lam * (hh, mh) + (1 - lam) * (h_old, mu_old)`` with ``lam = lam_site[k]``
    (thesis eqs. (5.57)-(5.58)); it enters q with ``sign`` (+1: a numerator site, q * g~_new /
    g~_old; -1: a denominator site, q * f~_old / f~_new, thesis eqs. (5.71)-(5.74) written
    relative to q). While that q would not be positive definite, ``lam_site[k]`` is halved (down
    to ``lam_min``, kept for later sweeps): the same direction, a smaller move, so q moves
    continuously from the old, positive definite q. Returns ``(ok, h_new, mu_new, b, K)`` with
    ``b`` and the Woodbury ``K`` of :func:`.gaussian.low_rank_update`.
    """
    while True:
        lam = lam_site[k]
        h_new = lam * hh + (1.0 - lam) * h_old
        mu_new = lam * mh + (1.0 - lam) * mu_old
        b = sign * (mu_new - mu_old)
        ok, _, _, Kmat = low_rank_y(S, my, sign * (h_new - h_old), b)
        if ok or lam_site[k] <= lam_min:
            return ok, h_new, mu_new, b, Kmat
        lam_site[k] = max(0.5 * lam_site[k], lam_min)


@njit(cache=True)
def ep_sweep(m, V, order, nodes, n_cfg, n_feat, feat, idx, obs_cfg, num_h, num_mu, den_h, den_mu,
             logmsg, logq, K, code, eps, lam_num, lam_den, lam_min, xi, c_del, denominators,
             skips, adapt, lam_max, grow, prev_num, prev_den, xi_ratio, skip_factor):
    """One sweep over all factors (numerator then denominator term of each), in place.

    ``num_h, num_mu`` (n_fac,) are the rank-1 numerator sites; ``den_h`` (n_fac, K^2, K^2) and
    ``den_mu`` (n_fac, K^2) the denominator sites (site = exp(-y^T h y / 2 + mu^T y), y = A_k^T w);
    ``logmsg`` (n_fac, 2, K) the label messages f~_k(t_i), f~_k(t_j) and ``logq`` (N, K) the label
    beliefs, both in log space. ``c_del = 1 - 2 m_k`` is the sign of the denominator deletion.
    ``denominators=False`` runs plain EP on the numerator terms only (a probit-regression posterior,
    used to test the shared machinery).

    ``lam_num``, ``lam_den`` (n_fac,) are the per-site step sizes lambda (thesis eqs. (5.57)-(5.58));
    :func:`run_ep`'s adaptive schedule passes one array as both (one step per factor).
    A site whose damped update would leave q not positive definite retries with half its step
    down to ``lam_min`` (:func:`_damped_site`); a site whose cavity is not positive definite
    halves its step for later sweeps and is skipped this time. With ``lam_min`` equal to the
    steps this is the fixed-step schedule of the thesis.

    ``adapt=True`` is the adaptive per-site schedule of :func:`run_ep`: before each damped update
    the site's undamped change is compared with the one of the previous sweep (``prev_num``
    (n_fac, 2), ``prev_den`` (n_fac, n_c + n_c^2), :func:`_adapt_step`). The factor's label
    messages then use ``xi = xi_ratio * lambda`` of its denominator site instead of the global
    ``xi``.

    ``skip_factor=True`` (the adaptive schedule after its first sweeps, :func:`run_ep`): a factor
    whose numerator cavity ``q / g~_k`` is improper is skipped whole, its denominator site and
    label messages included. Updating the 1/Z site alone moves the factor's net site
    ``g~_k / f~_k`` one way only: on the README's loops it removed more and more precision along
    the observed configuration, the numerator cavity grew more improper, and the iteration
    drifted for hundreds of sweeps (docs/ep.md, "Adaptive per-site damping").
    """
    one = np.zeros(1)
    for kk in range(order.shape[0]):
        k = order[kk]
        L = n_feat[k]
        fk = feat[k, :L]
        # ---------------- numerator term g~_k: standard EP, rank 1 ----------------
        cfg = obs_cfg[k]
        if cfg >= 0:
            P, S, my = project(V, m, fk, idx[k, cfg:cfg + 1, :L], 1, L)
            h_old = np.full((1, 1), num_h[k])
            mu_old = np.full(1, num_mu[k])
            # deletion q / g~_k   (Qi, Szummer & Minka 2005, eq. (8))
            ok, Sc, myc, _ = low_rank_y(S, my, -h_old, -mu_old)
            if not ok:
                skips[0] += 1
                lam_num[k] = max(0.5 * lam_num[k], lam_min)
                if skip_factor:
                    continue
            else:
                _, r, g, M = mixture_moments(Sc, myc, one, code, eps)
                ok, hh, mh = site_from_moments(Sc, myc, g, M)
                if not ok:
                    skips[4] += 1
                else:
                    if adapt:
                        _adapt_step(lam_num, k, prev_num[k], np.array([hh[0, 0] - num_h[k],
                                                                       mh[0] - num_mu[k]]),
                                    lam_min, lam_max, grow)
                    ok, h_new, mu_new, b, Kmat = _damped_site(S, my, h_old, mu_old, hh, mh,
                                                              lam_num, k, lam_min, 1.0)
                    if not ok:
                        skips[1] += 1
                    else:
                        low_rank_update(m, V, P, S, my, Kmat, b)
                        num_h[k] = h_new[0, 0]
                        num_mu[k] = mu_new[0]
        # ---------------- denominator term f~_k: transformed power EP, rank n_c ----------------
        if not denominators:
            continue
        n = n_cfg[k]
        P, S, my = project(V, m, fk, idx[k, :n, :L], n, L)
        h_old = den_h[k, :n, :n].copy()
        mu_old = den_mu[k, :n].copy()
        # deletion: q^{\k} = q * f~_k^{c_del}  (thesis eq. (5.16) with n_k = -1)
        ok, Sc, myc, _ = low_rank_y(S, my, c_del * h_old, c_del * mu_old)
        if not ok:
            skips[2] += 1
            lam_den[k] = max(0.5 * lam_den[k], lam_min)
            continue
        i = nodes[k, 0]
        j = nodes[k, 1]
        lci = _log_normalise(logq[i] - logmsg[k, 0])  # Qi, Szummer & Minka 2005, eq. (23)
        if j >= 0:
            lcj = _log_normalise(logq[j] - logmsg[k, 1])
            log_pi = np.empty(n)
            for a in range(K):
                for bb in range(K):
                    log_pi[a * K + bb] = lci[a] + lcj[bb]
        else:
            lcj = lci
            log_pi = lci.copy()
        _, r, g, M = mixture_moments(Sc, myc, log_pi, code, eps)
        ok, hh, mh = site_from_moments(Sc, myc, g, M)
        if not ok:
            skips[4] += 1
            continue
        if adapt:
            _adapt_step(lam_den, k, prev_den[k],
                        np.concatenate(((mh - mu_old), (hh - h_old).ravel())),
                        lam_min, lam_max, grow)
        # the site enters q as q * f~_old / f~_new
        ok, h_new, mu_new, b, Kmat = _damped_site(S, my, h_old, mu_old, hh, mh, lam_den, k,
                                                  lam_min, -1.0)
        if not ok:
            skips[3] += 1
            continue
        low_rank_update(m, V, P, S, my, Kmat, b)
        for a in range(n):
            den_mu[k, a] = mu_new[a]
            for bb in range(n):
                den_h[k, a, bb] = h_new[a, bb]
        # label beliefs: new pair belief r (Qi, Szummer & Minka 2005, eq. (49)), marginals (eq. (50)), damped
        # messages
        # f~_k(t) = fhat^xi f~_old^(1-xi) (thesis eqs. (5.61)-(5.63))
        xk = xi_ratio * lam_den[k] if adapt else xi
        qi = np.zeros(K)
        qj = np.zeros(K)
        if j >= 0:
            for a in range(K):
                for bb in range(K):
                    qi[a] += r[a * K + bb]
                    qj[bb] += r[a * K + bb]
        else:
            copy_into(qi, r)
        msg = xk * (np.log(np.maximum(qi, 1e-300)) - lci) + (1.0 - xk) * logmsg[k, 0]
        copy_into(logmsg[k, 0], msg - msg.max())
        copy_into(logq[i], _log_normalise(lci + logmsg[k, 0]))
        if j >= 0:
            msg = xk * (np.log(np.maximum(qj, 1e-300)) - lcj) + (1.0 - xk) * logmsg[k, 1]
            copy_into(logmsg[k, 1], msg - msg.max())
            copy_into(logq[j], _log_normalise(lcj + logmsg[k, 1]))
    # keep V exactly symmetric against round-off drift (O(d^2) once per sweep)
    for a in range(V.shape[0]):
        for bb in range(a + 1, V.shape[0]):
            v = 0.5 * (V[a, bb] + V[bb, a])
            V[a, bb] = v
            V[bb, a] = v


@dataclass
class EPState:
    """All EP state: q(w) = N(m, V), the sites and the label beliefs."""

    m: np.ndarray
    V: np.ndarray
    num_h: np.ndarray
    num_mu: np.ndarray
    den_h: np.ndarray
    den_mu: np.ndarray
    logmsg: np.ndarray
    logq: np.ndarray


def site_natural_params(terms: EPTerms, state: EPState,
                        factors: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Precision ``Lambda`` (d, d) and linear term ``h`` (d,) of the product of the sites of
    ``factors`` (default: all) as a Gaussian function of w, ``exp(-w^T Lambda w / 2 + h^T w)``.

    The sites live in the y-space of each factor (``y = A_k^T w``), so the same site arrays give
    these for any feature layout ``terms`` describes (a model with features added or removed
    reuses them). q(w) = p0(w) g~ / f~ (eq. (51)): numerator sites enter with +, denominator
    sites with -. For all factors, ``P0 + Lambda = V^{-1}`` and ``P0 m0 + h = V^{-1} m``.
    Each factor touches only the ``n_c * L`` weights its sparse ``A_k`` reaches.
    """
    d = terms.d
    lam = np.zeros((d, d))
    h = np.zeros(d)
    ks = range(terms.nodes.shape[0]) if factors is None else np.asarray(factors, np.int64)
    for k in ks:
        n, L = int(terms.n_cfg[k]), int(terms.n_feat[k])
        rows = terms.idx[k, :n, :L]  # (n, L): A_k[rows[c, l], c] = feat[l]
        f = terms.feat[k, :L]
        r = rows.ravel()
        cfg = int(terms.obs_cfg[k])
        if cfg >= 0:
            a_r, a_v = rows[cfg], f
            np.add.at(lam, (a_r[:, None], a_r[None, :]), state.num_h[k] * np.outer(a_v, a_v))
            np.add.at(h, a_r, state.num_mu[k] * a_v)
        # (A den_h A^T)[r_i, r_j] = f_i f_j den_h[c_i, c_j] over the (c, l) pairs i, j
        c = np.repeat(np.arange(n), L)
        v = np.tile(f, n)
        block = np.outer(v, v) * state.den_h[k][np.ix_(c, c)]
        np.add.at(lam, (r[:, None], r[None, :]), -block)
        np.add.at(h, r, -v * state.den_mu[k, c])
    return 0.5 * (lam + lam.T), h


@dataclass
class EPRun:
    """Result of :func:`run_ep`."""

    mean: np.ndarray
    cov: np.ndarray
    converged: bool
    iterations: int
    change_mean: np.ndarray  # per sweep, max |m_new - m_old|
    change_cov: np.ndarray  # per sweep, max |V_new - V_old|
    skips: np.ndarray  # per sweep, (n_sweeps, 5) counts in SKIP_NAMES order
    not_pd_sweeps: int  # sweeps after which a Cholesky check of V failed
    state: EPState
    sweep_times: np.ndarray = field(default_factory=lambda: np.zeros(0))
    step_sizes: np.ndarray = field(default_factory=lambda: np.zeros(0))  # per sweep, mean site lambda
    n_terms: int = 0  # term updates a sweep makes (numerator and 1/Z sites), skipped ones included


def run_ep(terms: EPTerms, prior_mean: np.ndarray, prior_var: np.ndarray, *,
           potential: str = "probit", epsilon: float = 0.0, transform: float = 1.0,
           step_size: float = 0.8, damping: float | None = None, tol: float = 1e-4,
           max_iter: int = 2000, min_iter: int = 2, denominators: bool = True,
           backoff: bool = True, min_step: float = 0.05, progressbar: bool = False,
           init: EPState | None = None, schedule: str | None = None,
           max_step: float = DEFAULT_MAX_STEP,
           grow: float = 1.2) -> EPRun:
    """Run flattened (transformed) power EP to convergence.

    Parameters
    ----------
    terms : EPTerms
        Factor arrays from :func:`.terms.build_terms` (with observed labels).
    prior_mean, prior_var : (d,) arrays
        Diagonal Gaussian prior p0(w). A zero variance pins that weight at its prior mean (the
        feature is out of the model, as with an infinite ARD precision).
    potential : {"probit", "loglinear"}
    epsilon : float
        Robust-probit label noise (Qi, Szummer & Minka 2005, eq. (4)); 0 is the plain probit.
    transform : float in [0, 1]
        m_k of thesis eq. (5.16): 1 = power EP, 0 = transformed EP.
    step_size : float in (0, 1]
        lambda, the damping of the weight sites (thesis eqs. (5.57)-(5.58)).
    damping : float in (0, 1] or None
        xi, the step size of the label messages (thesis eq. (5.62)); default ``step_size / 2``
        (the thesis asks for xi < lambda), and ``step_size`` with ``schedule="adaptive"`` (there
        each factor's xi follows its own lambda in the ratio ``damping / step_size``).
    tol : float
        Convergence when the max change of m and of V in one sweep are both below ``tol`` and
        that sweep skipped at most ``MAX_SKIPPED_SHARE`` of the term updates (a run that stops
        changing by skipping more stops unconverged).
    max_iter, min_iter : int
        Bounds on the number of sweeps.
    denominators : bool
        False drops the 1/Z(w) terms (plain EP on the numerator terms; for testing).
    backoff : bool
        Step back-off schedule: every site's lambda is halved (down to ``min_step``) when its
        update would leave q or its cavity not positive definite (:func:`ep_sweep`), and all
        sites' lambda and xi are halved when a sweep changes the mean more than each of the two
        sweeps before it (the oscillation of thesis figs. 5-6, 5-7), at most once per 5 sweeps.
        Damping does not move EP's fixed points, only the path to them. False keeps lambda
        fixed (the thesis's schedule).
    min_step : float
        Floor of the backed-off lambda (and of xi, relative to lambda).
    schedule : {"adaptive", "backoff", "fixed"} or None
        Step schedule. ``"backoff"`` is the global back-off above; ``"fixed"`` keeps lambda and
        xi fixed; ``"adaptive"`` gives every factor its own lambda for its numerator and 1/Z
        sites: halved when a site's undamped change reverses direction from one sweep to the next
        (a per-site oscillation), multiplied by ``sqrt(grow)`` per site update (``grow`` per
        sweep, up to ``max_step``) when it does not, with the positive
        definiteness back-off of :func:`ep_sweep` kept, and from sweep ``FACTOR_SKIP_FROM``
        on a factor whose numerator cavity is improper skipped whole (docs/ep.md, "Adaptive
        per-site damping"). None: ``"backoff"`` if ``backoff`` else ``"fixed"``.
    max_step, grow : float
        Ceiling of the adaptive lambda (raised to ``step_size`` when that is larger) and its
        growth factor per sweep.
    progressbar : bool
        Show a progress bar of the sweeps (up to ``max_iter``).
    init : EPState, optional
        Warm start: the sites and label beliefs of an earlier run on the same factors (possibly
        with other features or another prior, as in :mod:`.ard`); q starts at the prior times
        those sites. If that q is not positive definite the run starts from scratch.
    """
    for name, v in (("step_size", step_size), ("damping", damping)):
        if v is not None and not (0.0 < real_number(v, name) <= 1.0):
            raise ValueError(f"{name} must lie in (0, 1]; got {v}")
    tol = positive_number(tol, "tol")
    max_iter = whole_number(max_iter, "max_iter (EP sweeps)")
    if schedule is None:
        schedule = "backoff" if backoff else "fixed"
    if schedule not in ("adaptive", "backoff", "fixed"):
        raise ValueError(f"schedule must be 'adaptive', 'backoff' or 'fixed'; got {schedule!r}")
    if not (0.0 < real_number(max_step, "max_step") <= 1.0):
        raise ValueError(f"max_step must lie in (0, 1]; got {max_step}")
    if not real_number(grow, "grow") >= 1.0:
        raise ValueError(f"grow must be >= 1; got {grow}")
    if damping is None:
        damping = step_size if schedule == "adaptive" else 0.5 * step_size
    pot = get_potential(potential).code
    d, K = terms.d, terms.K
    prior_mean = np.asarray(prior_mean, float).reshape(d)
    prior_var = np.asarray(prior_var, float).reshape(d)
    if not (np.isfinite(prior_var).all() and (prior_var >= 0).all()):
        raise ValueError("prior variances must be finite and >= 0 (0 pins a weight at its prior "
                         "mean: ARD's infinite precision)")
    # a pinned weight keeps zero rows and columns in V through every covariance-form update
    free = prior_var > 0
    n_fac = terms.nodes.shape[0]
    N = int(terms.nodes.max()) + 1 if n_fac else 0
    st = EPState(m=prior_mean.copy(), V=np.diag(prior_var).astype(float),
                 num_h=np.zeros(n_fac), num_mu=np.zeros(n_fac),
                 den_h=np.zeros((n_fac, K * K, K * K)), den_mu=np.zeros((n_fac, K * K)),
                 logmsg=np.zeros((n_fac, 2, K)), logq=np.full((N, K), -np.log(K)))
    if init is not None:
        if init.num_h.shape != (n_fac,) or init.logq.shape != (N, K):
            raise ValueError("init must be the EPState of a run on the same factors and labels")
        warm = EPState(m=st.m, V=st.V, num_h=init.num_h.copy(), num_mu=init.num_mu.copy(),
                       den_h=init.den_h.copy(), den_mu=init.den_mu.copy(),
                       logmsg=init.logmsg.copy(), logq=init.logq.copy())
        lam_s, h_s = site_natural_params(terms, warm)
        ff = np.ix_(free, free)
        prec = np.diag(1.0 / prior_var[free]) + lam_s[ff]
        try:
            np.linalg.cholesky(prec)
            pd = True
        except np.linalg.LinAlgError:
            pd = False
        if pd:
            V0 = np.linalg.inv(prec)
            warm.V = np.zeros((d, d))
            warm.V[ff] = 0.5 * (V0 + V0.T)
            warm.m = prior_mean.copy()
            warm.m[free] = V0 @ (prior_mean[free] / prior_var[free] + h_s[free]
                                 - lam_s[np.ix_(free, ~free)] @ prior_mean[~free])
            st = warm
    c_del = 1.0 - 2.0 * float(transform)
    adapt = schedule == "adaptive"
    lam_num = np.full(n_fac, float(step_size))
    # The adaptive schedule damps a factor's numerator and 1/Z sites with one step: the two
    # sites of a factor whose labels the data determine nearly cancel (g~_k / f~_k is close to
    # flat), so steps that differ (numerator halved, 1/Z grown) move f~_k further than g~_k and
    # take precision out of q sweep after sweep. One step damps the net site g~_k / f~_k as
    # one term, as the thesis's single lambda for every site does (Qi 2005, thesis eqs.
    # (5.57)-(5.58)), while each factor keeps its own step; on Japanese
    # Vowels (3 speakers, 12 utterances) separate steps drove q's variances from the prior's 1
    # to 1.6e5 by sweep 8, and the run then stopped by skipping every node factor.
    lam_den = lam_num if adapt else np.full(n_fac, float(step_size))
    xi = float(damping)
    # both sites of a factor grow the shared step, so each grows it by sqrt(grow): grow per sweep
    site_grow = float(grow) ** 0.5 if denominators else float(grow)
    global_backoff = schedule == "backoff"
    lam_min = float(step_size) if schedule == "fixed" else min(float(min_step), float(step_size))
    lam_max = max(float(max_step), float(step_size)) if adapt else float(step_size)
    prev_num = np.zeros((n_fac, 2))
    prev_den = np.zeros((n_fac, K ** 4 + K * K))
    dm, dv, sk, times, steps = [], [], [], [], []
    n_terms = int((terms.obs_cfg >= 0).sum()) + (n_fac if denominators else 0)
    last_backoff = -3  # a halving needs 5 sweeps of the new step before the next one
    not_pd = 0
    converged = False
    for it in track(range(max_iter), "EP sweeps", progressbar=progressbar):
        m0, V0 = st.m.copy(), st.V.copy()
        skips = np.zeros(5, np.int64)
        t0 = time.perf_counter()
        ep_sweep(st.m, st.V, terms.order, terms.nodes, terms.n_cfg, terms.n_feat, terms.feat,
                 terms.idx, terms.obs_cfg, st.num_h, st.num_mu, st.den_h, st.den_mu, st.logmsg,
                 st.logq, K, pot, float(epsilon), lam_num, lam_den, lam_min, xi, c_del,
                 bool(denominators), skips, adapt, lam_max, site_grow, prev_num, prev_den,
                 float(damping) / float(step_size), adapt and it >= FACTOR_SKIP_FROM)
        times.append(time.perf_counter() - t0)
        steps.append(float(np.mean(np.concatenate([lam_num, lam_den]))) if n_fac else step_size)
        if not (np.isfinite(st.m).all() and np.isfinite(st.V).all()):
            raise FloatingPointError(f"EP produced non-finite moments in sweep {it + 1}")
        try:  # one factorisation per sweep, as a check only
            np.linalg.cholesky(st.V[np.ix_(free, free)])
        except np.linalg.LinAlgError:
            not_pd += 1
        dm.append(float(np.abs(st.m - m0).max()))
        dv.append(float(np.abs(st.V - V0).max()))
        sk.append(skips)
        if it + 1 >= min_iter and dm[-1] < tol and dv[-1] < tol:
            # A sweep that skips many term updates changes q little because it leaves that much
            # of the data out, not because the sites reached EP's fixed point (Qi, Szummer &
            # Minka 2005, eq. (17) holds only for the sites that were updated): then the run
            # stops, unconverged. On Japanese Vowels (2 speakers, 8 utterances) the last sweep
            # skipped 299 of 616 term updates while q's variances were 439 times the prior's.
            converged = int(skips.sum()) <= MAX_SKIPPED_SHARE * n_terms
            break
        if global_backoff and it >= last_backoff + 5 and dm[-1] > max(dm[-2], dm[-3]):
            # the sweep's change grew over the last two sweeps (a one-sweep rise is the zigzag of
            # a converging damped iteration): damp every site and the label messages harder,
            # then give the new step a few sweeps to settle before judging it
            np.maximum(0.5 * lam_num, lam_min, out=lam_num)
            np.maximum(0.5 * lam_den, lam_min, out=lam_den)
            xi = max(0.5 * xi, lam_min * float(damping) / float(step_size))
            last_backoff = it
    return EPRun(mean=st.m.copy(), cov=st.V.copy(), converged=converged, iterations=len(dm),
                 change_mean=np.array(dm), change_cov=np.array(dv), skips=np.array(sk),
                 not_pd_sweeps=not_pd, state=st, sweep_times=np.array(times),
                 step_sizes=np.array(steps), n_terms=n_terms)
