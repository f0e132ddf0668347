"""Bethe-Laplace posteriors against NUTS on the exact posterior (Welling & Parise 2006 sec. 7).

Run:  .venv/bin/python bench/bethe_laplace_tables.py [--n 10 100 1000] [--seed 0] [--draws 2000]

A 5 x 5 +-1 grid Boltzmann machine (``pmc.datasets.welling_parise_grid``: weights and biases
N(0, 0.25), N exact samples), prior N(0, 0.25 I) on its 65 weights. For each N: NUTS
(``pm.sample``, junction-tree log Z, 2 chains) is the reference; BL-MP (exact MAP, linear-response
C) and BL-BP (pseudo-moment-matching start, BP gradients, linear-response C) are scored by

* ``mean_err_sd``: mean over weights of |posterior mean - NUTS mean| / NUTS sd,
* ``sd_ratio``: mean over weights of sd / NUTS sd,
* ``cvm``: ``pmc.compare.cvm_score`` (normalised, summed over the 65 weights) against the NUTS
  draws, with the score of NUTS chain 0 against chain 1 as the Monte Carlo floor,
* wall time (s).

Prints a markdown table (the one in docs/bethe_laplace.md).
"""

from __future__ import annotations

import argparse
import time
import warnings

import numpy as np
import pymc as pm

import pymc_crf as pmc
from pymc_crf.compare import cvm_score, posterior_matrix


def grid_model(n: int, seed: int) -> pm.Model:
    data = pmc.datasets.welling_parise_grid(5, 5, n_samples=n, seed=seed)
    with pm.Model() as model:
        b = pm.Normal("b", 0.0, 0.5, shape=25)
        w = pm.Normal("w", 0.0, 0.5, shape=data.graphs.n_edges)
        pmc.MRF("x", graphs=data.graphs, node_weights=b, edge_weights=w,
                parameterization="ising", observed=data.samples)
    return model


def scores(mat: np.ndarray, ref: np.ndarray) -> dict:
    sd = ref.std(0)
    return {"mean_err_sd": float(np.mean(np.abs(mat.mean(0) - ref.mean(0)) / sd)),
            "sd_ratio": float(np.mean(mat.std(0) / sd)),
            "cvm": cvm_score(mat, ref, normalize=True)}


def run(n: int, seed: int, draws: int) -> list[dict]:
    model = grid_model(n, seed)
    t0 = time.perf_counter()
    with model, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        nuts = pm.sample(draws=draws, tune=1000, chains=2, cores=1, random_seed=seed,
                         progressbar=False, compute_convergence_checks=False)
    t_nuts = time.perf_counter() - t0
    ref = posterior_matrix(nuts, ["b", "w"])
    half = ref.shape[0] // 2
    rows = [{"N": n, "method": "NUTS (chain 0 vs 1)", "wall_time": t_nuts,
             **scores(ref[:half], ref[half:])}]
    for label, mode in (("BL-MP", "exact"), ("BL-BP", "bp")):
        r = pmc.fit(model, method="bethe_laplace", map=mode, draws=ref.shape[0], random_seed=seed,
                    log_likelihood=False)
        rows.append({"N": n, "method": label, "wall_time": float(r.attrs["wall_time"]),
                     **scores(posterior_matrix(r, ["b", "w"]), ref)})
    return rows


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, nargs="+", default=[10, 100, 1000])
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--draws", type=int, default=2000)
    args = ap.parse_args()
    print("| N | method | mean error (NUTS sds) | sd ratio | CVM vs NUTS | wall time (s) |")
    print("|---|---|---|---|---|---|")
    for n in args.n:
        for row in run(n, args.seed, args.draws):
            print(f"| {row['N']} | {row['method']} | {row['mean_err_sd']:.3f} | "
                  f"{row['sd_ratio']:.3f} | {row['cvm']:.4f} | {row['wall_time']:.2f} |",
                  flush=True)


if __name__ == "__main__":
    main()
