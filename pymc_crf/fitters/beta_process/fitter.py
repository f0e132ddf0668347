"""``method="bp_hcrf_vi"``: the beta-process hidden CRF of Luo, Sun & Zhao by mean-field variational EM.

The PyMC model supplies the data and the shapes: one observed :class:`pymc_crf.HCRF` likelihood
whose weights ``theta_x`` (F, S), ``theta_y`` (S, C), ``theta_e`` (S, S, C) are the only free
variables. The BP-HCRF *replaces* the model's priors on those weights by its own hierarchy
(Luo, Sun & Zhao, eqs. (5)-(14)): per-sequence state indicators ``z`` under a stick-breaking beta-process
prior, Beta compatibilities ``pi`` and positive weights ``theta``, with ``S`` = the truncation level.
The updates and every decision taken where the paper is ambiguous are documented in
:mod:`.vi`, :mod:`.likelihood` and :mod:`.stick_breaking`.

How the fit maps back to the model's weights. For a *new* sequence nothing in ``X`` alone informs
``z`` under a conditional model (``sum_y p(y | X, z) = 1``), so its state indicators follow the
prior predictive ``p(z_k = 1) = E_q[V_k exp(-T_k)]`` (the "usage" of state ``k``). A draw of
``pi ~ q(pi)`` and ``z ~ Bernoulli(usage)`` gives ordinary HCRF weights

    theta_x[i, k] = (W+[i, k] - W-[i, k]) z_k,  theta_y[k, c] = W_y[k, c] z_k,
    theta_e[j, k, c] = W_e[j, k, c] z_j z_k,     W = theta * log pi

(``W+``/``W-``: the halves of the sign-split features), which are the ``posterior`` draws. The
point prediction (``pmc.predict(result, data, method="bp_hcrf")``) uses the mean-field plug-in
weights (``E log pi``, ``E z``), stored in the ``bp_hcrf_point`` group.
"""

from __future__ import annotations

import time

import numpy as np
import pymc as pm
import xarray as xr

from pymc_crf.distributions.hcrf import find_hcrf
from pymc_crf.fitters.beta_process.likelihood import HCRFData, data_term
from pymc_crf.fitters.beta_process.stick_breaking import expected_usage
from pymc_crf.fitters.beta_process.vi import VISettings, effective_weights, elog_pi, fit_restarts
from pymc_crf.fitters.registry import register
from pymc_crf.model.results import build_result
from pymc_crf.validation import generator, positive_number, whole_number

__all__ = ["fit_bp_hcrf_vi", "sign_split", "plug_in_weights"]


def sign_split(X: np.ndarray) -> np.ndarray:
    """``[X, -X]``: lets non-positive effective weights act with either sign (vi.py decision 6)."""
    return np.concatenate([X, -X], axis=1)


def _to_model_weights(wx, wy, we, z_node, z_pair):
    """Model-shaped HCRF weights from effective BP-HCRF weights and (expected) indicators."""
    F = wx.shape[0] // 2
    tx = (wx[:F] - wx[F:]) * z_node[None, :]
    ty = wy * z_node[:, None]
    te = we * z_pair[:, :, None]
    return tx, ty, te


def _pair(z):
    zz = np.outer(z, z)
    idx = np.arange(z.size)
    zz[idx, idx] = z
    return zz


def plug_in_weights(state) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The mean-field point weights for new sequences (E log pi, E z = prior usage)."""
    W = effective_weights(state)
    u = expected_usage(state.bp)
    return _to_model_weights(W["x"], W["y"], W["e"], u, _pair(u))


def _draws(state, n, rng, data=None):
    """Draws of the variational posterior, mapped to model weights, and of the factors; with
    ``data`` (the training sequences) also the pointwise log-likelihood of every draw, (n, G).

    The model weights of a draw are those of one homogeneous pair chain per (class, sequence)
    with every sequence's indicators at the draw's ``z`` (``theta_e = W_e z_j z_k`` on every
    edge, ``z_k^2 = z_k``), so ``log p(y_n | X_n, draw)`` is the data term's per-sequence value
    at ``rho_n = z`` (:func:`.likelihood.data_term`'s compiled pass, no model compiled)."""
    th = {k: np.exp(v) for k, v in state.log_theta.items()}
    u = expected_usage(state.bp)
    out = {"theta_x": [], "theta_y": [], "theta_e": []}
    fac = {"pi_x": [], "pi_y": [], "pi_e": [], "V": [], "T": [], "z_new": []}
    pointwise = []
    for _ in range(n):
        pi = {k: rng.beta(state.mu1[k], state.mu2[k]) for k in th}
        z = (rng.random(u.size) < u).astype(float)
        W = {k: th[k] * np.log(np.maximum(pi[k], 1e-300)) for k in th}
        if data is not None:
            rho = np.broadcast_to(z, (data.batch.n_graphs, z.size))
            pointwise.append(data_term(data, None, W["x"], W["y"], W["e"], rho,
                                       want_grad=False).per_graph)
        tx, ty, te = _to_model_weights(W["x"], W["y"], W["e"], z, _pair(z))
        for k, v in zip(("theta_x", "theta_y", "theta_e"), (tx, ty, te), strict=True):
            out[k].append(v)
        for k in ("x", "y", "e"):
            fac[f"pi_{k}"].append(pi[k])
        fac["V"].append(rng.beta(state.bp.a, state.bp.b))
        fac["T"].append(rng.gamma(state.bp.u, 1.0 / state.bp.v))
        fac["z_new"].append(z)
    return ({k: np.asarray(v)[None] for k, v in out.items()},
            {k: np.asarray(v)[None] for k, v in fac.items()},
            np.asarray(pointwise).reshape(n, -1)[None] if data is not None else None)


@register("bp_hcrf_vi")
def fit_bp_hcrf_vi(model: pm.Model, *, truncation: int | None = None, rounds: int = 4,
                   n_restarts: int = 3, max_iter: int = 50, tol: float = 1e-6,
                   alpha: float = 1.0, gamma: float = 2.0, alpha_pi: float = 1.0,
                   theta_prior_sd: float = 10.0, taylor_terms: int = 30, theta_maxiter: int = 10,
                   draws: int = 200, random_seed: int | None = 0, log_likelihood: bool = True,
                   progressbar: bool = True) -> xr.DataTree:
    """BP-HCRF (Luo, Sun & Zhao) by variational EM with random restarts; the best final bound is kept.

    Parameters
    ----------
    model : pm.Model
        One observed ``pmc.HCRF`` on chains; its free variables must be exactly the three weights.
    truncation : int, optional
        Number of hidden states K of the truncated beta process (Luo, Sun & Zhao: 10). Must equal the model's
        ``n_states`` (the default takes it from the model).
    rounds : int
        Stick-breaking rounds R (Luo, Sun & Zhao: 4).
    n_restarts : int
        Random initialisations (Luo, Sun & Zhao, sec. VI: "several"); the best final bound is returned.
        Small training sets have poor local optima: on one ``hmm_classes`` split (5 sequences per
        class) 3 of 8 single-restart fits classified 67-93 % of the test set against 97-100 % for
        the others, and the poor fits had the lowest bounds (docs/hcrf.md); the table V
        reproduction uses 8.
    max_iter, tol
        Outer iterations (>= 1) and relative bound tolerance (>= 0) of each run.
    alpha, gamma
        Beta-process concentration and mass (fixed, > 0).
    alpha_pi
        ``pi ~ Beta(1, alpha_pi)`` (Luo, Sun & Zhao, eq. (11)), > 0.
    theta_prior_sd
        Half-normal prior scale of theta, > 0 (``np.inf``: the paper's maximum likelihood).
    taylor_terms
        Terms of the series for ``E_q[log p(z = 0 | .)]`` of the stick-breaking construction
        (the Taylor expansion of Luo, Sun & Zhao; the bound's truncation error falls with it), >= 1.
    theta_maxiter
        L-BFGS iterations of each M-step on theta, >= 1. The step starts from the previous
        theta and need only raise the bound (a partial M-step of generalised EM, Neal & Hinton
        1998), so the default 10 stops short of the step's optimum (time and accuracy against
        30 on the Japanese vowels: docs/benchmarks.md, 2026-11-29).
    log_likelihood
        Add the per-graph ``log_likelihood`` group (of the draws).
    draws
        Draws of the variational posterior in the ``posterior`` group.
    random_seed
        Seed of the restarts' initialisations and of the draws.
    progressbar : bool
        Show a progress bar of the VI iterations of each restart (PyMC's; ``False`` silences
        it).

    Returns
    -------
    xarray.DataTree
        ``posterior`` (model weights drawn from q), ``log_likelihood``, ``observed_data``;
        ``variational_posterior`` (draws of pi, V, T, z for a new sequence);
        ``bp_hcrf_point`` (theta point estimate, plug-in weights, q parameters, usage per state,
        expected number of active states, final bound of every restart); ``diagnostics`` (bound
        after every step and the step's name); attrs ``method``, settings, ``wall_time``.
    """
    t0 = time.perf_counter()
    rv, info, labels = find_hcrf(model)
    if truncation is not None:
        whole_number(truncation, "bp_hcrf_vi: truncation")
    whole_number(rounds, "bp_hcrf_vi: rounds")
    whole_number(n_restarts, "bp_hcrf_vi: n_restarts")
    max_iter = whole_number(max_iter, "bp_hcrf_vi: max_iter")
    taylor_terms = whole_number(taylor_terms, "bp_hcrf_vi: taylor_terms")
    theta_maxiter = whole_number(theta_maxiter, "bp_hcrf_vi: theta_maxiter")
    draws = whole_number(draws, "bp_hcrf_vi: draws")
    tol = positive_number(tol, "bp_hcrf_vi: tol", allow_zero=True)
    alpha, gamma, alpha_pi = (positive_number(v, f"bp_hcrf_vi: {n}") for v, n in
                              ((alpha, "alpha"), (gamma, "gamma"), (alpha_pi, "alpha_pi")))
    theta_prior_sd = positive_number(theta_prior_sd, "bp_hcrf_vi: theta_prior_sd",
                                     allow_inf=True)
    K = info.n_states if truncation is None else int(truncation)
    if K != info.n_states:
        raise ValueError(f"bp_hcrf_vi: truncation={K} but the model's HCRF has n_states="
                         f"{info.n_states}; build the model with {K} states (the truncation level "
                         "is the number of hidden states)")
    if not info.batch.is_chain:
        raise ValueError("bp_hcrf_vi needs every graph to be a chain (forward-backward); "
                         "use method='map' or 'nuts' for other graphs")
    weights = rv.owner.op.weights(rv.owner)
    extra = [v for v in model.free_RVs if v not in weights]
    if extra or len([w for w in weights if w in model.free_RVs]) != 3:
        raise ValueError("bp_hcrf_vi needs a model whose only free variables are the HCRF weights "
                         f"theta_x, theta_y, theta_e; found extra {[v.name for v in extra]}")
    data = HCRFData(info.batch, sign_split(info.node_features), labels, info.n_classes)
    engine = None      # the data term's compiled pass over the pair chains (likelihood.py)
    settings = VISettings(truncation=K, rounds=int(rounds), alpha=alpha, gamma=gamma,
                          alpha_pi=alpha_pi, theta_prior_sd=theta_prior_sd,
                          taylor_terms=taylor_terms, max_iter=max_iter, tol=tol,
                          theta_maxiter=theta_maxiter)
    rng = generator(random_seed, "random_seed")
    state, finals, _ = fit_restarts(data, engine, settings, int(n_restarts), rng, progressbar)
    weight_draws, factors, pointwise = _draws(state, draws, rng,
                                              data if log_likelihood else None)
    names = [w.name for w in weights]
    posterior = dict(zip(names, (weight_draws["theta_x"], weight_draws["theta_y"],
                                 weight_draws["theta_e"]), strict=True))
    usage = expected_usage(state.bp)
    tx, ty, te = plug_in_weights(state)
    el = elog_pi(state)
    point = xr.Dataset({
        **{f"theta_{k}": (tuple(f"{k}_dim_{i}" for i in range(v.ndim)), np.exp(v))
           for k, v in state.log_theta.items()},
        **{f"E_log_pi_{k}": (tuple(f"{k}_dim_{i}" for i in range(v.ndim)), v)
           for k, v in el.items()},
        **{f"mu1_{k}": (tuple(f"{k}_dim_{i}" for i in range(v.ndim)), v)
           for k, v in state.mu1.items()},
        **{f"mu2_{k}": (tuple(f"{k}_dim_{i}" for i in range(v.ndim)), v)
           for k, v in state.mu2.items()},
        "plugin_theta_x": (("feature", "state"), tx),
        "plugin_theta_y": (("state", "class"), ty),
        "plugin_theta_e": (("state", "state_to", "class"), te),
        "usage": (("state",), usage),
        "rho_train": (("graph", "state"), state.rho),
        "q_V_a": (("state",), state.bp.a), "q_V_b": (("state",), state.bp.b),
        "q_T_shape": (("state",), state.bp.u), "q_T_rate": (("state",), state.bp.v),
        "q_d": (("state", "round"), state.bp.psi),
        "restart_final_bounds": (("restart",), np.asarray(finals)),
        "expected_active_states": ((), float(usage.sum())),
        "expected_active_states_train": ((), float(state.rho.sum(axis=1).mean())),
    })
    variational = xr.Dataset({
        k: (("chain", "draw") + tuple(f"{k}_dim_{i}" for i in range(v.ndim - 2)), v)
        for k, v in factors.items()})
    steps = np.array([n for n, _ in state.trace])
    diagnostics = {"bound": np.array([v for _, v in state.trace]), "step": steps,
                   "final_bound": np.float64(state.trace[-1][1]),
                   "n_iterations": np.int64((steps == "theta").sum())}
    opts = {"truncation": K, "rounds": int(rounds), "n_restarts": int(n_restarts),
            "max_iter": max_iter, "tol": tol, "alpha": alpha, "gamma": gamma,
            "alpha_pi": alpha_pi, "theta_prior_sd": theta_prior_sd,
            "taylor_terms": taylor_terms, "theta_maxiter": theta_maxiter, "draws": draws,
            "random_seed": random_seed}
    result = build_result(model, posterior, "bp_hcrf_vi", opts, time.perf_counter() - t0,
                          diagnostics=diagnostics, log_likelihood=log_likelihood,
                          pointwise_log_likelihood=(None if pointwise is None
                                                    else {rv.name: pointwise}),
                          extra_groups={"bp_hcrf_point": point,
                                        "variational_posterior": variational},
                          attrs={"hcrf_weights": names})
    return result
