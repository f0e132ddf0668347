"""The comparison of Welling & Parise 2006, sec. 7 (figs. 2, 4, 5 and 6) on our generators.

Methods, each scored by the CVM distance (Welling & Parise 2006, eq. (23); normalised by the number
of samples and summed over the weights, as ``pmc.compare``) of its draws from NUTS's draws on the
exact posterior (junction-tree / chain log Z), and by wall time:

- BL-MP: ``pmc.fit(method="bethe_laplace", map="exact")`` (Bethe-Laplace at the exact MAP),
- BL-BP: ``pmc.fit(method="bethe_laplace", map="bp")`` (MAP from the Bethe approximation),
- LV-CD: ``pmc.fit(method="langevin_cd")`` (brief Langevin, CD-1 gradients),
- MC-BP: ``pmc.fit(method="bethe_mh")`` (Metropolis-Hastings with Bethe log Z),
- exchange: ``pmc.fit(method="exchange")`` (exact auxiliary draws; exact posterior),
- Laplace (exact), on request (``--methods``): exact MAP and exact Hessian, the Laplace
  approximation with nothing of Bethe in it, which separates the Gaussian's own error from the
  Bethe approximation's.

The samplers run with their fitters' defaults: each computes its own BL-BP fit (counted in its
wall time), takes its covariance as the starting proposal (LV-CD: as its full
preconditioner) and starts each chain at a draw from it (``S="auto"``, ``start="auto"``; see
docs/samplers.md). A random walk in 65 dimensions from the prior's centre with unit proposals
would spend most of a short run reaching the posterior (the paper's runs took 6-16 hours).

Figures (one command each, writing ``docs/samplers_<figure>.png`` and the per-run CSV; the
budgets of docs/samplers.md; ``PYTHONPATH=.`` imports this checkout):

    S="--draws 20000 --tune 3000 --nuts-draws 2000 --nuts-tune 1000"
    PYTHONPATH=. python bench/samplers_figures.py fig2 $S
    PYTHONPATH=. python bench/samplers_figures.py fig2 --prior-sd 0.5 --n 10 100 \
        --methods bl_mp bl_bp lv_cd mc_bp laplace_exact \
        --out docs/samplers_fig2_prior05.csv --png docs/samplers_fig2_prior05.png $S
    PYTHONPATH=. python bench/samplers_figures.py fig4 $S
    S5="--draws 5000 --tune 2000 --nuts-draws 2000 --nuts-tune 1000"
    PYTHONPATH=. python bench/samplers_figures.py fig5 --n 100 $S5
    PYTHONPATH=. python bench/samplers_figures.py fig6 $S5

fig2: 5 x 5 +-1 Boltzmann-machine grids, weights and biases N(0, 0.25) (``welling_parise_grid``),
CVM against the number of data cases N, averaged over models. fig4 / fig5: one grid with couplings
``U([-d - eps, -d] u [d, d + eps])``, ``eps = 0.1 / 4``, ``d`` in quarters as the paper, biases 0
(fig4) or 1 (fig5). fig6: chain CRFs shaped like the paper's newsgroup-FAQ CRF (``faq_chain_model``:
files of 100 lines, binary line features in the node and transition potentials, 48 weights),
where BP is exact, so MC-BP is an exact sampler and BL-BP equals BL-MP (left out, as in the
paper).
"""

from __future__ import annotations

import argparse
import json
import time

import matplotlib
import numpy as np
import pandas as pd

import pymc_crf as pmc
from pymc_crf.reproduce.samplers_models import (
    GRID_METHODS,
    LABELS,
    PAPER_CHAIN_METHODS,
    PAPER_GRID_METHODS,
    coupling_grid,
    faq_chain_model,
    ising_grid_model,
    ising_samples,
    run_methods,
    score,
)


def _done(args, labels: dict) -> list[dict] | None:
    """The rows of a setting already in ``args.done`` (``--resume``), else None."""
    if args.done is None:
        return None
    sel = np.ones(len(args.done), dtype=bool)
    for k, v in labels.items():
        sel &= np.isclose(args.done[k].to_numpy(dtype=float), float(v))
    return args.done[sel].to_dict("records") if sel.any() else None


def _grid_rows(model, methods, args, **labels) -> list[dict]:
    """Fit and score one setting; the rows so far are written to the CSV after each setting,
    so an interrupted run keeps its finished settings (``--resume`` skips them)."""
    done = _done(args, labels)
    if done is not None:
        args.rows_so_far += done
        return done
    t0 = time.perf_counter()
    table = score(run_methods(model, methods, args.draws, args.tune, args.chains, args.seed,
                              args.nuts_draws, args.nuts_tune))
    rows = []
    for method, r in table.iterrows():
        rows.append({**labels, "method": method, **{k: float(v) for k, v in r.items()}})
    print(f"{labels} done in {time.perf_counter() - t0:.0f} s", flush=True)
    args.rows_so_far += rows
    pd.DataFrame(args.rows_so_far).to_csv(args.out, index=False)
    return rows


def fig2(args) -> pd.DataFrame:
    rows = []
    for model_seed in range(args.models):
        for n in args.n:
            data = pmc.datasets.welling_parise_grid(args.rows, args.rows, n_samples=n,
                                                    seed=model_seed)
            m = ising_grid_model(data.samples, data.graphs, args.prior_sd)
            rows += _grid_rows(m, args.methods, args, model_seed=model_seed, N=n)
    return pd.DataFrame(rows)


def fig45(args, bias: float) -> pd.DataFrame:
    rows = []
    for d in args.d:
        rng = np.random.default_rng(args.seed)
        graph, b, w = coupling_grid(args.rows, d, bias, rng)
        for n in args.n:
            samples = ising_samples(graph, b, w, n, rng)
            m = ising_grid_model(samples, graph, args.prior_sd)
            rows += _grid_rows(m, args.methods, args, d=d, bias=bias, N=n)
    return pd.DataFrame(rows)


def fig6(args) -> pd.DataFrame:
    rows = []
    for n in args.n:
        m = faq_chain_model(n, args.length, args.features, np.random.default_rng(args.seed))
        rows += _grid_rows(m, args.methods, args, N=n)
    return pd.DataFrame(rows)


def summary(df: pd.DataFrame, by: list[str]) -> pd.DataFrame:
    """CVM (mean over models) and wall time per method and setting."""
    keep = [c for c in ("cvm", "cvm_floor", "wall_time", "min_ess", "max_rhat") if c in df]
    return df.groupby(by + ["method"])[keep].mean().unstack("method")


def plot(df: pd.DataFrame, x: str, title: str, path: str) -> None:
    """CVM against ``x`` per method (mean over models; dotted: the Monte Carlo floor of the
    samplers), log scale, as the paper's figures; against ``d`` one panel per N (a mean over N
    would mix the small-N Gaussian error into the coupling curve)."""
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    df = df[df["method"] != "nuts"]
    panels = sorted(df["N"].unique()) if x == "d" else [None]
    fig, axes = plt.subplots(1, len(panels), figsize=(5.5 + 3.5 * (len(panels) - 1), 4),
                             sharey=True, squeeze=False)
    for ax, n in zip(axes[0], panels, strict=True):
        sub = df if n is None else df[df["N"] == n]
        mean = sub.groupby(["method", x])[["cvm", "cvm_floor"]].mean()
        for method in mean.index.get_level_values(0).unique():
            m = mean.loc[method]
            line, = ax.plot(m.index, m["cvm"], "o-", label=LABELS.get(method, method))
            if method in ("lv_cd", "mc_bp", "exchange"):
                ax.plot(m.index, m["cvm_floor"], ":", color=line.get_color())
        ax.set_xscale("log" if x == "N" else "linear")
        ax.set_yscale("log")
        ax.set_xlabel({"N": "number of data cases N", "d": "interaction strength d (x 1/4)"}[x])
        if n is not None and len(panels) > 1:
            ax.set_title(f"N = {n}", fontsize=9)
    axes[0][0].set_ylabel("CVM vs NUTS (normalised, summed over weights)")
    axes[0][0].legend(fontsize=8)
    fig.suptitle(title, fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("figure", choices=["fig2", "fig4", "fig5", "fig6"])
    p.add_argument("--models", type=int, default=5, help="fig2: number of random models")
    p.add_argument("--n", type=int, nargs="+", default=None, help="data cases (fig6: chains)")
    p.add_argument("--d", type=float, nargs="+", default=[0.1, 0.5, 1.0, 1.5, 2.0],
                   help="fig4/5: interaction strengths, in quarters as the paper")
    p.add_argument("--rows", type=int, default=5, help="grid side")
    p.add_argument("--prior-sd", type=float, default=1.0,
                   help="fig2/4/5: sd of the N(0, sd^2) prior on every weight (0.5 is fig. 2's "
                        "generating distribution, N(0, 0.25))")
    p.add_argument("--length", type=int, default=100, help="fig6: lines per file (chain length)")
    p.add_argument("--features", type=int, default=8,
                   help="fig6: features per line incl. the bias (6 x features weights)")
    p.add_argument("--draws", type=int, default=5000)
    p.add_argument("--tune", type=int, default=2000)
    p.add_argument("--nuts-draws", type=int, default=2000)
    p.add_argument("--nuts-tune", type=int, default=1000)
    p.add_argument("--chains", type=int, default=2)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--methods", nargs="+", choices=GRID_METHODS, default=None,
                   help="methods (default the paper's: fig2/4/5 BL-MP, BL-BP, LV-CD, MC-BP; "
                        "fig6 BL-MP, LV-CD)")
    p.add_argument("--out", default=None,
                   help="CSV file for the per-run rows (default docs/samplers_<figure>.csv)")
    p.add_argument("--png", default=None, help="figure file (default docs/samplers_<figure>.png)")
    p.add_argument("--resume", action="store_true",
                   help="keep the settings already in the CSV (--out) and fit only the others")
    p.add_argument("--from-csv", default=None,
                   help="redraw the figure and table from a CSV of an earlier run (no fitting)")
    args = p.parse_args(argv)
    if args.n is None:
        args.n = [10, 20, 30, 40, 48] if args.figure == "fig6" else [10, 100, 1000]
    if args.methods is None:
        args.methods = PAPER_CHAIN_METHODS if args.figure == "fig6" else PAPER_GRID_METHODS
    args.out = args.out or f"docs/samplers_{args.figure}.csv"
    args.rows_so_far = []
    args.done = pd.read_csv(args.out) if args.resume else None
    t0 = time.perf_counter()
    by = ["d", "N"] if args.figure in ("fig4", "fig5") else ["N"]
    if args.from_csv:
        df = pd.read_csv(args.from_csv)
    else:
        if args.figure == "fig2":
            df = fig2(args)
        elif args.figure in ("fig4", "fig5"):
            df = fig45(args, 0.0 if args.figure == "fig4" else 1.0)
        else:
            df = fig6(args)
        df.to_csv(args.out, index=False)
    pd.set_option("display.width", 200)
    print(json.dumps({k: v for k, v in vars(args).items()
                      if k not in ("rows_so_far", "done")}))
    print(summary(df, by).to_string(float_format=lambda x: f"{x:.4g}"))
    x = "d" if args.figure in ("fig4", "fig5") else "N"
    title = (f"{args.figure} (Welling & Parise 2006), reduced:\n"
             + (f"{args.models} model(s), " if args.figure == "fig2" else "")
             + f"{args.chains} x {args.draws} draws (+{args.tune} tune), "
             f"NUTS {args.chains} x {args.nuts_draws} (+{args.nuts_tune})")
    plot(df, x, title, args.png or f"docs/samplers_{args.figure}.png")
    print(f"total {time.perf_counter() - t0:.0f} s")


if __name__ == "__main__":
    main()
