"""The comparison of Welling & Parise 2006, sec. 7 (figs. 2, 4, 5 and 6) on our generators.

Methods, each scored by the CVM distance (Welling & Parise 2006, eq. (23); normalised by the number
of samples and summed over the weights, as ``pmc.compare``) of its draws from NUTS's draws on the
exact posterior (junction-tree / chain log Z), and by wall time:

- BL-MP: ``pmc.fit(method="bethe_laplace", map="exact")`` (Bethe-Laplace at the exact MAP),
- BL-BP: ``pmc.fit(method="bethe_laplace", map="bp")`` (MAP from the Bethe approximation),
- LV-CD: ``pmc.fit(method="langevin_cd")`` (brief Langevin, CD-1 gradients),
- MC-BP: ``pmc.fit(method="bethe_mh")`` (Metropolis-Hastings with Bethe log Z),
- exchange: ``pmc.fit(method="exchange")`` (exact auxiliary draws; exact posterior).

The samplers start at the mean of BL-BP (BL-MP where BL-BP is left out): a random walk in 65
dimensions from the prior's centre would spend most of a short run reaching the posterior (the
paper's runs took 6-16 hours). The start is the Bethe-Laplace mode, cheap to compute, and the
tuning phase still adapts the proposal from there.

Figures (one command each; sizes reduced with the options, see docs/samplers.md):

    python bench/samplers_figures.py fig2 --models 5 --n 10 100 1000
    python bench/samplers_figures.py fig4 --d 0.1 0.5 1 1.5 2 --n 100
    python bench/samplers_figures.py fig5 --d 0.1 0.5 1 1.5 2 --n 100
    python bench/samplers_figures.py fig6 --n 5 10 20

fig2: 5 x 5 +-1 Boltzmann-machine grids, weights and biases N(0, 0.25) (``welling_parise_grid``),
CVM against the number of data cases N, averaged over models. fig4 / fig5: one grid with couplings
``U([-d - eps, -d] u [d, d + eps])``, ``eps = 0.1 / 4``, ``d`` in quarters as the paper, biases 0
(fig4) or 1 (fig5). fig6: chain CRFs (node features, a shared transition table), where BP is
exact, so MC-BP is an exact sampler and BL-BP equals BL-MP (left out, as in the paper).
"""

from __future__ import annotations

import argparse
import json
import time
import warnings

import numpy as np
import pandas as pd
import pymc as pm

import pymc_crf as pmc
from pymc_crf.graphs.batch import GraphBatch
from pymc_crf.inference import get_engine

GRID_METHODS = ("bl_mp", "bl_bp", "lv_cd", "mc_bp", "exchange")
CHAIN_METHODS = ("bl_mp", "lv_cd", "mc_bp", "exchange")


def ising_grid_model(samples: np.ndarray, graph: GraphBatch, prior_sd: float = 1.0) -> pm.Model:
    """A +-1 Boltzmann machine (biases and couplings per node / edge, ``pmc.MRF`` "ising") with an
    independent N(0, prior_sd^2) prior on every weight."""
    n, E = int(graph.n_nodes[0]), graph.n_edges
    with pm.Model() as m:
        b = pm.Normal("b", 0.0, prior_sd, shape=n)
        w = pm.Normal("w", 0.0, prior_sd, shape=E)
        pmc.MRF("x", graphs=graph, node_weights=b, edge_weights=w, parameterization="ising",
                observed=samples)
    return m


def ising_samples(graph: GraphBatch, b: np.ndarray, w: np.ndarray, n: int,
                  rng: np.random.Generator) -> np.ndarray:
    """N exact samples (label 1 = spin +1) of the +-1 Boltzmann machine ``exp(b s + w s s)``."""
    node = np.stack([-b, b], axis=1)
    edge = w[:, None, None] * np.array([[1.0, -1.0], [-1.0, 1.0]])
    return get_engine("junction_tree", graph).sample(graph, node, edge, n, rng)


def chain_crf_model(n_chains: int, length: int, rng: np.random.Generator) -> pm.Model:
    """Binary log-linear chain CRF: 3 node features, W (3, 2) and a shared transition table
    T (2, 2) (true values N(0, 1)), labels drawn exactly by forward filtering backward sampling."""
    batch = GraphBatch.chains([length] * n_chains)
    X = rng.normal(size=(batch.n_total_nodes, 3))
    W0, T0 = rng.normal(size=(3, 2)), rng.normal(size=(2, 2))
    y = get_engine("chain", batch).sample(batch, X @ W0, T0[None], 1, rng)[0]
    with pm.Model() as m:
        W = pm.Normal("W", 0.0, 1.0, shape=(3, 2))
        T = pm.Normal("T", 0.0, 1.0, shape=(2, 2))
        pmc.CRF("y", graphs=batch, node_features=X, node_weights=W, edge_weights=T, observed=y)
    return m


def run_methods(model: pm.Model, methods, draws: int, tune: int, chains: int, seed: int,
                nuts_draws: int) -> dict:
    """Fit ``model`` by NUTS (reference) and each method; returns {name: DataTree}."""
    out = {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        out["nuts"] = pmc.fit(model, method="nuts", draws=nuts_draws, tune=1000, chains=chains,
                              random_seed=seed)
        start = None
        for name in methods:
            if name == "bl_mp":
                out[name] = pmc.fit(model, method="bethe_laplace", map="exact",
                                    draws=draws, chains=chains, random_seed=seed)
            elif name == "bl_bp":
                out[name] = pmc.fit(model, method="bethe_laplace", map="bp",
                                    draws=draws, chains=chains, random_seed=seed)
            else:
                if start is None:  # the samplers start at the Bethe-Laplace mode (see docstring)
                    bl = out.get("bl_bp", out.get("bl_mp"))
                    start = {k: bl["posterior"][k].mean(("chain", "draw")).values
                             for k in bl["posterior"].data_vars}
                method = {"lv_cd": "langevin_cd", "mc_bp": "bethe_mh", "exchange": "exchange"}[name]
                out[name] = pmc.fit(model, method=method, draws=draws, tune=tune, chains=chains,
                                    random_seed=seed, initvals=start)
    return out


def score(results: dict) -> pd.DataFrame:
    """``pmc.compare`` against NUTS: CVM, wall time, min ESS (samplers), min ESS per second."""
    table = pmc.compare(results, reference="nuts")
    if "min_ess" in table:
        table["min_ess_per_s"] = table["min_ess"] / table["wall_time"]
    return table


def _grid_rows(model, methods, args, **labels) -> list[dict]:
    t0 = time.perf_counter()
    table = score(run_methods(model, methods, args.draws, args.tune, args.chains, args.seed,
                              args.nuts_draws))
    rows = []
    for method, r in table.iterrows():
        rows.append({**labels, "method": method, **{k: float(v) for k, v in r.items()}})
    print(f"{labels} done in {time.perf_counter() - t0:.0f} s", flush=True)
    return rows


def fig2(args) -> pd.DataFrame:
    rows = []
    for model_seed in range(args.models):
        for n in args.n:
            data = pmc.datasets.welling_parise_grid(args.rows, args.rows, n_samples=n,
                                                    seed=model_seed)
            m = ising_grid_model(data.samples, data.graphs)
            rows += _grid_rows(m, GRID_METHODS, args, model_seed=model_seed, N=n)
    return pd.DataFrame(rows)


def fig45(args, bias: float) -> pd.DataFrame:
    rows = []
    eps = 0.1 / 4
    for d in args.d:
        rng = np.random.default_rng(args.seed)
        graph = GraphBatch.grid(args.rows, args.rows)
        dq = d / 4
        w = np.where(rng.random(graph.n_edges) < 0.5, -dq - eps * rng.random(graph.n_edges),
                     dq + eps * rng.random(graph.n_edges))
        b = np.full(args.rows * args.rows, bias)
        for n in args.n:
            samples = ising_samples(graph, b, w, n, rng)
            m = ising_grid_model(samples, graph)
            rows += _grid_rows(m, GRID_METHODS, args, d=d, bias=bias, N=n)
    return pd.DataFrame(rows)


def fig6(args) -> pd.DataFrame:
    rows = []
    for n in args.n:
        m = chain_crf_model(n, args.length, np.random.default_rng(args.seed))
        rows += _grid_rows(m, CHAIN_METHODS, args, N=n)
    return pd.DataFrame(rows)


def summary(df: pd.DataFrame, by: list[str]) -> pd.DataFrame:
    """CVM (mean over models) and wall time per method and setting."""
    keep = [c for c in ("cvm", "wall_time", "min_ess", "min_ess_per_s") if c in df]
    return df.groupby(by + ["method"])[keep].mean().unstack("method")


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("figure", choices=["fig2", "fig4", "fig5", "fig6"])
    p.add_argument("--models", type=int, default=5, help="fig2: number of random models")
    p.add_argument("--n", type=int, nargs="+", default=None, help="data cases (fig6: chains)")
    p.add_argument("--d", type=float, nargs="+", default=[0.1, 0.5, 1.0, 1.5, 2.0],
                   help="fig4/5: interaction strengths, in quarters as the paper")
    p.add_argument("--rows", type=int, default=5, help="grid side")
    p.add_argument("--length", type=int, default=20, help="fig6: chain length")
    p.add_argument("--draws", type=int, default=5000)
    p.add_argument("--tune", type=int, default=2000)
    p.add_argument("--nuts-draws", type=int, default=2000)
    p.add_argument("--chains", type=int, default=2)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", default=None, help="CSV file for the per-run rows")
    args = p.parse_args(argv)
    if args.n is None:
        args.n = [5, 10, 20] if args.figure == "fig6" else [10, 100, 1000]
    t0 = time.perf_counter()
    if args.figure == "fig2":
        df, by = fig2(args), ["N"]
    elif args.figure in ("fig4", "fig5"):
        df, by = fig45(args, 0.0 if args.figure == "fig4" else 1.0), ["d", "N"]
    else:
        df, by = fig6(args), ["N"]
    if args.out:
        df.to_csv(args.out, index=False)
    pd.set_option("display.width", 200)
    print(json.dumps({k: v for k, v in vars(args).items()}))
    print(summary(df, by).to_string(float_format=lambda x: f"{x:.4g}"))
    print(f"total {time.perf_counter() - t0:.0f} s")


if __name__ == "__main__":
    main()
