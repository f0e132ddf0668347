"""Benchmark: EP (method="ep") against NUTS on the same posterior, and EP sweep-time scaling.

Run:  .venv/bin/python bench/bench_ep.py

1. Same data (3-node probit loops and chains, 10 training graphs, 6 edge features, K = 2, d = 24,
   prior N(0, 5 I)), same model: wall time of ``pmc.fit(method="ep")`` (PEP and TEP) and of
   ``pm.sample`` (NUTS, 2 chains x 1000 draws + 1000 tuning), both including their compilation,
   and the accuracy of EP's mean/sd against the NUTS draws.
2. Time per EP sweep at two sizes of d with |E| fixed, and at two sizes of |E| with d fixed: the
   cost per sweep is O(|E| d^2), so 2x d should cost about 4x and 2x |E| about 2x.
"""

from __future__ import annotations

import itertools
import time

import numpy as np
import pymc as pm
from scipy.special import log_ndtr, logsumexp

from pymc_crf.distributions import CRF
from pymc_crf.fitters import fit
from pymc_crf.fitters.ep.core import run_ep
from pymc_crf.fitters.ep.terms import build_terms
from pymc_crf.graphs.batch import GraphBatch


def synthetic(kind: str, n_graphs: int, seed: int, Fe: int = 6, K: int = 2, n: int = 3):
    """Probit CRF data in the style of Qi, Szummer & Minka 2005, sec. 8.1 (edge features from one
    of 4 Gaussians)."""
    rng = np.random.default_rng(seed)
    local = [(i, i + 1) for i in range(n - 1)] + ([(n - 1, 0)] if kind == "loop" else [])
    batch = GraphBatch.from_edges([local] * n_graphs, [n] * n_graphs)
    centers = rng.normal(0, 1, (4, Fe))
    Xe = centers[rng.integers(0, 4, batch.n_edges)] + rng.normal(0, 0.5, (batch.n_edges, Fe))
    if n > 6:  # only the structure matters for timing
        return batch, Xe, rng.integers(0, K, batch.n_total_nodes)
    w = rng.normal(0, 1, (Fe, K, K))
    lp = log_ndtr(np.einsum("ef,fab->eab", Xe, w))
    cfgs = np.array(list(itertools.product(range(K), repeat=n)))
    labels = np.zeros(batch.n_total_nodes, np.int64)
    for g in range(n_graphs):
        e0 = batch.edge_offsets[g]
        sc = sum(lp[e0 + i, cfgs[:, a], cfgs[:, b]] for i, (a, b) in enumerate(local))
        o = batch.node_offsets[g]
        labels[o:o + n] = cfgs[rng.choice(len(cfgs), p=np.exp(sc - logsumexp(sc)))]
    return batch, Xe, labels


def ep_vs_nuts(kind: str) -> None:
    batch, Xe, labels = synthetic(kind, 10, seed=1)
    with pm.Model() as model:
        w = pm.Normal("w", 0.0, 5**0.5, shape=(6, 2, 2))
        CRF("t", graphs=batch, edge_features=Xe, edge_weights=w, potential="probit",
            observed=labels)
    t0 = time.perf_counter()
    idata = pm.sample(draws=1000, tune=1000, chains=2, random_seed=0, progressbar=False,
                      compute_convergence_checks=False, model=model)
    t_nuts = time.perf_counter() - t0
    x = idata.posterior["w"].values.reshape(-1, 24)
    mu, sd = x.mean(0), x.std(0)
    for variant in ("pep", "tep"):
        fit(model, method="ep", variant=variant, log_likelihood=False)  # warm numba's cache
        t0 = time.perf_counter()
        res = fit(model, method="ep", variant=variant, log_likelihood=False)
        t_ep = time.perf_counter() - t0
        m = res["fit"]["mean_vector"].values
        s = np.sqrt(np.diag(res["fit"]["covariance_matrix"].values))
        print(f"{kind:5s} {variant}: EP fit {t_ep:6.2f} s ({int(res['diagnostics']['iterations'])}"
              f" sweeps, {float(res['diagnostics']['sweep_time'].sum()):.3f} s in sweeps) | "
              f"NUTS {t_nuts:6.1f} s | ratio {t_nuts / t_ep:6.0f}x | "
              f"max |dmean|/sd {np.max(np.abs(m - mu) / sd):.2f}, "
              f"sd ratio [{(s / sd).min():.2f}, {(s / sd).max():.2f}]")


def sweep_time(n_graphs: int, length: int, Fe: int, K: int = 2, sweeps: int = 5) -> float:
    batch, Xe, labels = synthetic("chain", n_graphs, seed=0, Fe=Fe, K=K, n=length)
    terms = build_terms(batch, K, labels, None, Xe, use_node=False, use_edge=True)
    run = run_ep(terms, np.zeros(terms.d), np.full(terms.d, 5.0), tol=0.0, max_iter=sweeps,
                 min_iter=sweeps)
    return float(np.median(run.sweep_times[1:])), terms.d, batch.n_edges


def scaling() -> None:
    sweep_time(2, 10, 2)  # compile / load numba cache
    rows = [sweep_time(50, 10, Fe) for Fe in (25, 50, 100)]
    rows.append(sweep_time(100, 10, 50))
    for t, d, E in rows:
        print(f"|E| = {E:5d}, d = {d:4d}: {t * 1e3:8.2f} ms per sweep, "
              f"{t / (E * d * d) * 1e9:6.2f} ns per |E| d^2")
    (t1, d1, _), (t2, d2, _), (t3, d3, _), (t4, _, _) = rows
    print(f"d {d1} -> {d2}: x{t2 / t1:.1f} (O(d^2) predicts x{(d2 / d1) ** 2:.0f}); "
          f"d {d2} -> {d3}: x{t3 / t2:.1f} (predicts x{(d3 / d2) ** 2:.0f}); "
          f"|E| x2 at d = {d2}: x{t4 / t2:.1f} (predicts x2)")


if __name__ == "__main__":
    for kind in ("loop", "chain"):
        ep_vs_nuts(kind)
    scaling()
