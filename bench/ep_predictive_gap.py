"""Where EP's predictive error departs from NUTS's, and why (the "predictive gap" of docs/ep.md).

One trial (:func:`gap_trial`, a pure function of its settings and seed) fits one
``bcrf_synthetic(kind, n_train, n_test, seed)`` training set with the README model (N(0, 5) prior,
probit potentials) by EP, MAP and NUTS and returns test errors of controlled predictors:

* ``ep_model_average`` -- q-averaged tables, exact marginals (Qi, Szummer & Minka 2005, eqs. (57)-(63));
* ``ep_mc``            -- exact marginals averaged over draws of q (the "average" predictor);
* ``ep_bpe``           -- exact marginals at EP's mean;
* ``nuts_mc``          -- the "average" predictor over NUTS draws (the gold standard);
* ``nuts_bpe``         -- exact marginals at NUTS's posterior mean;
* ``nuts_model_average`` -- the model-average predictor with NUTS's mean and covariance
  (hypothesis (a): the predictor itself);
* ``mm_mc``            -- "average" over draws of the Gaussian moment-matched to NUTS's draws
  (hypothesis (b): is the posterior non-Gaussian in a way that matters?);
* ``epmean_nutscov`` / ``nutsmean_epcov`` -- model-average with one moment from each method
  (which of the two moments carries the gap);
* ``map``              -- exact marginals at the MAP estimate;

plus the posterior agreement (mean |m_EP - m_NUTS| / sd_NUTS, sd ratios), EP's convergence, the
disagreement of EP's inner label beliefs with the q-averaged exact training marginals
(hypothesis (c)), and the fraction of test nodes whose predicted label differs between EP and NUTS.

Run:  nice -n 5 .venv/bin/python bench/ep_predictive_gap.py --seeds 20 --kind loop --out gap.json
"""

from __future__ import annotations

import argparse
import json
import time
import warnings

import numpy as np

import pymc_crf as pmc
from pymc_crf.datasets import bcrf_synthetic
from pymc_crf.fitters import fit
from pymc_crf.fitters.ep.average import averaged_node_marginals
from pymc_crf.fitters.ep.core import run_ep
from pymc_crf.fitters.ep.terms import build_terms
from pymc_crf.inference.select import get_engine
from pymc_crf.potentials import log_potential_tables

PRIOR_VAR = 5.0


def readme_model(train):
    """The README model: w ~ N(0, 5 I) over (edge_feature, label_i, label_j), probit potentials."""
    import pymc as pm

    with pm.Model(coords=train.coords) as model:
        w = pm.Normal("w", 0.0, PRIOR_VAR**0.5, dims=("edge_feature", "label_i", "label_j"))
        pmc.CRF("t", graphs=train.graphs, edge_features=train.edge_features, edge_weights=w,
                potential="probit", observed=train.labels)
    return model


def draws_marginals(data, W: np.ndarray) -> np.ndarray:
    """Exact node marginals of ``data`` averaged over weight draws ``W`` (S, Fe, K, K)."""
    engine = get_engine("auto", data.graphs)
    acc = 0.0
    for w in W:
        node, edge, _, _ = log_potential_tables("probit", 0.0, data.graphs.n_total_nodes,
                                                w.shape[-1], None, None, data.edge_features, w)
        acc = acc + engine.marginals(data.graphs, node, edge).node
    return acc / len(W)


def averaged_marginals(data, mean: np.ndarray, cov: np.ndarray, K: int) -> np.ndarray:
    """Exact node marginals of the q-averaged tables for q = N(mean, cov)."""
    return averaged_node_marginals(mean, cov, K, data.graphs, None,
                                   np.asarray(data.edge_features, float))


def error(marg: np.ndarray, labels: np.ndarray) -> float:
    return float(np.mean(marg.argmax(1) != labels))


def gap_trial(kind: str = "loop", seed: int = 0, n_train: int = 10, n_test: int = 300,
              step_size: float = 0.5, variant: str = "pep", ep_options: dict | None = None,
              nuts_draws: int = 500, nuts_tune: int = 500, nuts_chains: int = 2,
              n_mc: int = 400) -> dict:
    """One trial of the predictive-gap study (see the module docstring); returns plain numbers."""
    train, test = bcrf_synthetic(kind, n_train=n_train, n_test=n_test, seed=seed)
    K = 2
    shape = train.true_weights["w"].shape
    d = int(np.prod(shape))
    model = readme_model(train)
    rng = np.random.default_rng(seed)
    out: dict = {"kind": kind, "seed": seed, "n_train": n_train, "n_test": n_test}
    # ---- EP
    terms = build_terms(train.graphs, K, train.labels, None,
                        np.asarray(train.edge_features, float), use_node=False, use_edge=True)
    t0 = time.perf_counter()
    run = run_ep(terms, np.zeros(d), np.full(d, PRIOR_VAR), potential="probit",
                 transform=1.0 if variant == "pep" else 0.0, step_size=step_size,
                 **(ep_options or {}))
    out["ep_time"] = time.perf_counter() - t0
    out["ep_converged"] = bool(run.converged)
    out["ep_iterations"] = int(run.iterations)
    out["ep_skipped_last"] = int(run.skips[-1].sum())
    m_ep, V_ep = run.mean, run.cov
    # ---- MAP and NUTS
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        mp = fit(model, method="map", log_likelihood=False)
        nuts = fit(model, method="nuts", draws=nuts_draws, tune=nuts_tune, chains=nuts_chains,
                   random_seed=seed, compute_convergence_checks=False)
    w_map = mp["posterior"]["w"].values.reshape(-1, *shape).mean(0)
    Wn = nuts["posterior"]["w"].values.reshape(-1, *shape)
    flat_n = Wn.reshape(len(Wn), d)
    m_n, V_n = flat_n.mean(0), np.cov(flat_n.T)
    sd_n = np.sqrt(np.diag(V_n))
    out["mean_z"] = float(np.mean(np.abs(m_ep - m_n) / sd_n))
    out["max_z"] = float(np.max(np.abs(m_ep - m_n) / sd_n))
    ratio = np.sqrt(np.diag(V_ep)) / sd_n
    out["sd_ratio_min"], out["sd_ratio_max"] = float(ratio.min()), float(ratio.max())
    # the shift of EP's mean in NUTS's own metric: many small per-weight shifts in one direction
    # can add up to a large Mahalanobis distance
    diff = m_ep - m_n
    out["mahalanobis"] = float(np.sqrt(diff @ np.linalg.solve(V_n, diff)))
    # ---- predictions
    y = test.labels
    marg = {
        "ep_model_average": averaged_marginals(test, m_ep, V_ep, K),
        "ep_mc": draws_marginals(test, rng.multivariate_normal(m_ep, V_ep, n_mc).reshape(-1, *shape)),
        "ep_bpe": draws_marginals(test, m_ep.reshape(1, *shape)),
        "nuts_mc": draws_marginals(test, Wn),
        "nuts_bpe": draws_marginals(test, m_n.reshape(1, *shape)),
        "nuts_model_average": averaged_marginals(test, m_n, V_n, K),
        "mm_mc": draws_marginals(test, rng.multivariate_normal(m_n, V_n, n_mc).reshape(-1, *shape)),
        "epmean_nutscov": averaged_marginals(test, m_ep, V_n, K),
        "nutsmean_epcov": averaged_marginals(test, m_n, V_ep, K),
        "map": draws_marginals(test, w_map.reshape(1, *shape)),
        "true_w": draws_marginals(test, train.true_weights["w"].reshape(1, *shape)),
    }
    for key, mg in marg.items():
        out[f"err_{key}"] = error(mg, y)
    out["label_disagree_ep_nuts"] = float(np.mean(marg["ep_model_average"].argmax(1)
                                                  != marg["nuts_mc"].argmax(1)))
    out["marg_mad_ep_nuts"] = float(np.mean(np.abs(marg["ep_model_average"][:, 1]
                                                   - marg["nuts_mc"][:, 1])))
    # ---- (c) EP's inner label beliefs on the training nodes against the q-averaged exact marginals
    q_inner = np.exp(run.state.logq)
    exact_q = draws_marginals(train, rng.multivariate_normal(m_ep, V_ep, n_mc).reshape(-1, *shape))
    exact_n = draws_marginals(train, Wn)
    out["inner_vs_q_exact_mad"] = float(np.mean(np.abs(q_inner[:, 1] - exact_q[:, 1])))
    out["inner_vs_nuts_exact_mad"] = float(np.mean(np.abs(q_inner[:, 1] - exact_n[:, 1])))
    out["ep_gap"] = out["err_ep_model_average"] - out["err_nuts_mc"]
    return out


ROWS = [("EP, model averaging (q-averaged tables)", "err_ep_model_average"),
        ("EP, Monte Carlo averaging over q", "err_ep_mc"),
        ("EP mean, exact marginals (BPE)", "err_ep_bpe"),
        ("NUTS, Monte Carlo averaging (gold)", "err_nuts_mc"),
        ("NUTS mean, exact marginals", "err_nuts_bpe"),
        ("NUTS mean and covariance through model averaging", "err_nuts_model_average"),
        ("Gaussian moment-matched to NUTS, Monte Carlo averaging", "err_mm_mc"),
        ("EP mean + NUTS covariance, model averaging", "err_epmean_nutscov"),
        ("NUTS mean + EP covariance, model averaging", "err_nutsmean_epcov"),
        ("MAP", "err_map")]


def markdown_table(rows: list[dict]) -> str:
    """The docs/ep.md table: mean and sd over trials of each error, its difference to the NUTS
    gold, the mean |difference|, and the posterior-agreement numbers."""
    A = {k: np.array([r[k] for r in rows], float) for k in rows[0] if not isinstance(rows[0][k], str)}
    gold = A["err_nuts_mc"]
    out = [f"| predictor ({len(rows)} trials) | test error mean +- sd | minus NUTS: mean "
           "| mean \\|minus NUTS\\| |", "|---|---|---|---|"]
    for name, key in ROWS:
        d = A[key] - gold
        out.append(f"| {name} | {A[key].mean():.4f} +- {A[key].std(ddof=1):.4f} | {d.mean():+.4f} "
                   f"| {np.abs(d).mean():.4f} |")
    out.append("")
    for key, name in (("mean_z", "mean |m_EP - m_NUTS| / sd_NUTS"),
                      ("mahalanobis", "Mahalanobis distance of m_EP from m_NUTS (NUTS covariance)"),
                      ("label_disagree_ep_nuts", "test nodes labelled differently by EP and NUTS"),
                      ("inner_vs_q_exact_mad", "EP inner beliefs vs exact marginals averaged over q "
                                               "(training nodes, mean abs diff)"),
                      ("inner_vs_nuts_exact_mad", "EP inner beliefs vs NUTS-averaged exact marginals"),
                      ("ep_converged", "EP converged (fraction)")):
        out.append(f"- {name}: {A[key].mean():.3f} +- {A[key].std(ddof=1):.3f}")
    return "\n".join(out)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--kind", default="loop")
    ap.add_argument("--seeds", type=int, default=20)
    ap.add_argument("--first-seed", type=int, default=0)
    ap.add_argument("--n-train", type=int, default=10)
    ap.add_argument("--n-test", type=int, default=300)
    ap.add_argument("--step-size", type=float, default=0.5)
    ap.add_argument("--out", default=None)
    ap.add_argument("--summarise", default=None, help="print the markdown table of a --out file")
    args = ap.parse_args()
    if args.summarise:
        with open(args.summarise) as fh:
            print(markdown_table(json.load(fh)))
        return
    rows = []
    for s in range(args.first_seed, args.first_seed + args.seeds):
        r = gap_trial(args.kind, s, args.n_train, args.n_test, args.step_size)
        rows.append(r)
        print(json.dumps(r), flush=True)
        if args.out:
            with open(args.out, "w") as fh:
                json.dump(rows, fh, indent=1)


if __name__ == "__main__":
    main()
