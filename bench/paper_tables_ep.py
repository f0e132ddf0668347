"""Thesis tables 5.1 / 5.2 (Qi 2005, sec. 5.5.1; Qi, Szummer & Minka 2005, sec. 8.1) on our
synthetic generator.

For each trial: sample training and 1000 test 3-node loops (table 5.1) or chains (table 5.2) from a
probit CRF with 24 weights (6 edge features x 2 x 2 labels) with ``pmc.datasets.bcrf_synthetic``
(seed = trial), then compare test error (all test
nodes, maximum-marginal labels):

* ML-CRF   -- maximum likelihood (L-BFGS, exact log Z), exact marginals at the estimate;
* MAP-CRF  -- MAP with the prior N(0, 5 I), exact marginals at the estimate;
* BPE-EP   -- EP (power EP, step size 0.8 or --step-size) posterior mean, exact marginals
  there (thesis 5.4.1);
* BCRF-PEP / BCRF-TEP -- EP + approximate model averaging (Qi, Szummer & Minka 2005, eqs. (57)-(63):
  q-averaged
  potential tables, then exact marginals of the averaged tables);
* true w   -- the weights that generated the data (an oracle, for scale);
* NUTS     -- gold row: Monte Carlo model averaging of p(t_i | x, w) over NUTS draws from the exact
  posterior of the pmc.CRF model (``pm.sample``, 2 chains x 500 draws after 500 tuning steps).

Paired t-tests (over trials) of BCRF-PEP against ML-CRF and MAP-CRF.

Run:   .venv/bin/python bench/paper_tables_ep.py [--trials 10] [--train 10 30] [--no-nuts]
"""

from __future__ import annotations

import argparse
import itertools
import time

import numpy as np
from scipy.optimize import minimize
from scipy.special import log_ndtr, logsumexp
from scipy.stats import ttest_rel

from pymc_crf.datasets import bcrf_synthetic
from pymc_crf.fitters.ep.average import averaged_log_potentials
from pymc_crf.fitters.ep.core import run_ep
from pymc_crf.fitters.ep.terms import build_terms

K, FE, N_NODES, PRIOR_VAR = 2, 6, 3, 5.0
CFGS = np.array(list(itertools.product(range(K), repeat=N_NODES)))


def local_edges(kind):
    return [(0, 1), (1, 2)] + ([(2, 0)] if kind == "loop" else [])


def generator(kind: str, n_train: int, n_test: int, seed: int):
    """(train, test) as (batch, edge_features, labels) from ``pmc.datasets.bcrf_synthetic`` (the
    project's generator for Qi, Szummer & Minka 2005, sec. 8.1), plus the true weights."""
    train, test = bcrf_synthetic(kind, n_train=n_train, n_test=n_test, seed=seed)
    return ((train.graphs, train.edge_features, train.labels),
            (test.graphs, test.edge_features, test.labels), train.true_weights["w"])


def config_scores(kind, Xe, W):
    """(S, G, 8) unnormalised log-probabilities of every labelling of every graph."""
    lp = log_ndtr(np.einsum("ef,sfab->seab", Xe, W))  # (S, E, K, K)
    ne = len(local_edges(kind))
    lp = lp.reshape(lp.shape[0], -1, ne, K, K)
    return sum(lp[:, :, i][:, :, CFGS[:, a], CFGS[:, b]]
               for i, (a, b) in enumerate(local_edges(kind)))


def node_config_probs(kind, Xe, W):
    sc = config_scores(kind, Xe, W)
    return np.exp(sc - logsumexp(sc, axis=2, keepdims=True))


def node_marginals_from_config(p):
    """(G, 8) labelling probabilities -> (G, 3, K) node marginals."""
    return np.stack([np.stack([p[:, CFGS[:, i] == a].sum(1) for a in range(K)], -1)
                     for i in range(N_NODES)], 1)


def error(marg, labels):
    return float(np.mean(marg.reshape(-1, K).argmax(1) != labels))


def point_estimate(kind, batch, Xe, labels, prior_var):
    """ML (prior_var None) or MAP by L-BFGS with the exact gradient (brute-force marginals)."""
    G = batch.n_graphs
    obs = (labels.reshape(G, N_NODES) * [K * K, K, 1]).sum(1)  # index into CFGS

    def f(wf):
        W = wf.reshape(1, FE, K, K)
        s = np.einsum("ef,fab->eab", Xe, W[0])
        sc = config_scores(kind, Xe, W)[0]
        lz = logsumexp(sc, axis=1)
        p = np.exp(sc - lz[:, None])
        ll = sc[np.arange(G), obs].sum() - lz.sum()
        # d ll / d s[e, a, b] = (observed indicator - marginal) * d log Phi(s) / ds
        dlog = np.exp(-0.5 * s**2 - 0.5 * np.log(2 * np.pi) - log_ndtr(s))
        ne = len(local_edges(kind))
        ind = np.zeros((G, ne, K, K))
        marg = np.zeros((G, ne, K, K))
        for i, (a, b) in enumerate(local_edges(kind)):
            np.add.at(ind[:, i], (np.arange(G), CFGS[obs, a], CFGS[obs, b]), 1.0)
            for c in range(len(CFGS)):
                marg[:, i, CFGS[c, a], CFGS[c, b]] += p[:, c]
        gs = (ind - marg).reshape(-1, K, K) * dlog
        grad = np.einsum("ef,eab->fab", Xe, gs).ravel()
        if prior_var is not None:
            ll -= 0.5 * wf @ wf / prior_var
            grad -= wf / prior_var
        return -ll, -grad

    res = minimize(f, np.zeros(FE * K * K), jac=True, method="L-BFGS-B",
                   options={"maxiter": 500})
    return res.x.reshape(FE, K, K)


def nuts_draws(batch, Xe, labels, seed):
    import pymc as pm

    from pymc_crf.distributions import CRF

    with pm.Model():
        w = pm.Normal("w", 0.0, PRIOR_VAR**0.5, shape=(FE, K, K))
        CRF("t", graphs=batch, edge_features=Xe, edge_weights=w, potential="probit",
            observed=labels)
        idata = pm.sample(draws=500, tune=500, chains=2, random_seed=seed, progressbar=False,
                          compute_convergence_checks=False)
    return idata.posterior["w"].values.reshape(-1, FE, K, K)


def trial(kind, n_train, seed, use_nuts, step_size=0.8):
    (tr_b, tr_x, tr_t), (te_b, te_x, te_t), w_true = generator(kind, n_train, 1000, seed)
    row = {"true w (oracle)": error(node_marginals_from_config(
        node_config_probs(kind, te_x, w_true[None])[0]), te_t)}
    for name, pv in (("ML-CRF", None), ("MAP-CRF", PRIOR_VAR)):
        W = point_estimate(kind, tr_b, tr_x, tr_t, pv)
        row[name] = error(node_marginals_from_config(node_config_probs(kind, te_x, W[None])[0]),
                          te_t)
    terms = build_terms(tr_b, K, tr_t, None, tr_x, use_node=False, use_edge=True)
    d = terms.d
    for variant, transform in (("PEP", 1.0), ("TEP", 0.0)):
        ep = run_ep(terms, np.zeros(d), np.full(d, PRIOR_VAR), transform=transform,
                    step_size=step_size, tol=1e-4, max_iter=300)
        row[f"_{variant} converged"] = float(ep.converged)
        row[f"_{variant} skipped per sweep"] = float(ep.skips.sum() / ep.iterations)
        if variant == "PEP":
            p = node_config_probs(kind, te_x, ep.mean.reshape(1, FE, K, K))[0]
            row["BPE-CRF-PEP"] = error(node_marginals_from_config(p), te_t)
        # approximate model averaging: q-averaged tables, exact marginals of those tables
        _, edge = averaged_log_potentials(ep.mean, ep.cov, K, te_b.n_total_nodes, None, te_x,
                                          "probit", 0.0)
        ne = len(local_edges(kind))
        lp = edge.reshape(-1, ne, K, K)
        sc = sum(lp[:, i][:, CFGS[:, a], CFGS[:, b]] for i, (a, b) in enumerate(local_edges(kind)))
        p = np.exp(sc - logsumexp(sc, axis=1, keepdims=True))
        row[f"BCRF-{variant}"] = error(node_marginals_from_config(p), te_t)
    if use_nuts:
        Wd = nuts_draws(tr_b, tr_x, tr_t, seed)
        marg = np.zeros((te_b.n_graphs, N_NODES, K))
        for s in range(0, len(Wd), 100):
            marg += node_marginals_from_config(
                node_config_probs(kind, te_x, Wd[s:s + 100]).sum(0))
        row["NUTS (gold)"] = error(marg, te_t)
    return row


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trials", type=int, default=10)
    ap.add_argument("--train", type=int, nargs="+", default=[10, 30])
    ap.add_argument("--kinds", nargs="+", default=["loop", "chain"])
    ap.add_argument("--no-nuts", action="store_true")
    ap.add_argument("--step-size", type=float, default=0.8,
                    help="EP step size lambda (the paper's 0.8 by default)")
    args = ap.parse_args()
    for kind in args.kinds:
        results = {}
        t0 = time.perf_counter()
        for n in args.train:
            rows = [trial(kind, n, 1000 * n + s, not args.no_nuts, args.step_size)
                    for s in range(args.trials)]
            results[n] = {k: np.array([r[k] for r in rows]) for k in rows[0]}
        table = "5.1 (loops)" if kind == "loop" else "5.2 (chains)"
        print(f"\nThesis table {table}: test error % (mean over {args.trials} trials, "
              f"1000 test graphs each; +- standard error) [{time.perf_counter() - t0:.0f} s]")
        print("| algorithm | " + " | ".join(f"{n} train" for n in args.train) + " |")
        print("|---|" + "---|" * len(args.train))
        for name in results[args.train[0]]:
            if name.startswith("_"):
                continue
            cells = []
            for n in args.train:
                e = 100 * results[n][name]
                cells.append(f"{e.mean():.2f} +- {e.std(ddof=1) / np.sqrt(len(e)):.2f}")
            print(f"| {name} | " + " | ".join(cells) + " |")
        for name in results[args.train[0]]:
            if name.startswith("_"):
                print(f"EP{name[1:]}: " + ", ".join(
                    f"{n} train: {results[n][name].mean():.2f}" for n in args.train))
        for other in ("ML-CRF", "MAP-CRF", "BPE-CRF-PEP", "NUTS (gold)"):
            if other not in results[args.train[0]]:
                continue
            ps = []
            for n in args.train:
                t = ttest_rel(results[n]["BCRF-PEP"], results[n][other])
                ps.append(f"{n} train: t = {t.statistic:.2f}, p = {t.pvalue:.2g}")
            print(f"paired t-test BCRF-PEP vs {other}: " + "; ".join(ps))


if __name__ == "__main__":
    main()
