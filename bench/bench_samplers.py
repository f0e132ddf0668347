"""Speed of the random-field samplers on the 5 x 5 grid of Welling & Parise 2006, sec. 7.

For a +-1 Boltzmann machine on a 5 x 5 grid (65 weights; ``welling_parise_grid``, N data cases)
every method runs in the same process, one after the other: NUTS on the exact posterior
(junction-tree log Z), BL-MP and BL-BP (``bethe_laplace``), LV-CD, MC-BP (BetheMH) and exchange.
Printed: wall time, min ESS and max r-hat over the weights, min ESS per second (and over NUTS's),
CVM against NUTS with its Monte Carlo floor (``samplers_figures.score``), and each method's wall
time over BL-MP's (Welling & Parise 2006 report 6-16 h for LV-CD and
MC-BP against < 2 min for BL in MATLAB: a ratio of ~200-500).

    PYTHONPATH=. python bench/bench_samplers.py --n 100 --draws 2000 --tune 500 --nuts-draws 500 \
        --nuts-tune 500 --exchange-draws 1000

A long run of MC-BP alone (the budget random-walk mixing in 65 dimensions needs):

    PYTHONPATH=. python bench/bench_samplers.py --methods mc_bp --draws 20000 --tune 1000 \
        --nuts-draws 500 --nuts-tune 500

(``PYTHONPATH=.`` makes the script import this checkout's ``pymc_crf``.) The samplers run with
their fitters' defaults: Bethe-Laplace proposal and starts (``S="auto"``, ``start="auto"``).
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import pandas as pd

import pymc_crf as pmc
from pymc_crf.reproduce.samplers_models import (
    GRID_METHODS,
    faq_chain_model,
    ising_grid_model,
    run_methods,
    score,
)


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description="min-ESS/s and wall time of the samplers, 5x5 grid")
    p.add_argument("--model", choices=["grid", "chain"], default="grid",
                   help="grid: the 5 x 5 Boltzmann machine; chain: the FAQ-shaped chain CRF of "
                        "fig. 6 (--n files of 100 lines, 48 weights; BP is exact there)")
    p.add_argument("--n", type=int, default=100, help="data cases (chain: files)")
    p.add_argument("--rows", type=int, default=5)
    p.add_argument("--draws", type=int, default=5000)
    p.add_argument("--tune", type=int, default=2000)
    p.add_argument("--nuts-draws", type=int, default=2000)
    p.add_argument("--nuts-tune", type=int, default=1000)
    p.add_argument("--exchange-draws", type=int, default=None,
                   help="draws per chain of exchange (default --draws)")
    p.add_argument("--chains", type=int, default=2)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--methods", nargs="+", choices=GRID_METHODS, default=list(GRID_METHODS),
                   help="methods beside NUTS (BL-MP, the time reference, is always run)")
    args = p.parse_args(argv)
    methods = ["bl_mp"] + [m for m in args.methods if m != "bl_mp"]
    if args.model == "grid":
        data = pmc.datasets.welling_parise_grid(args.rows, args.rows, n_samples=args.n,
                                                seed=args.seed)
        model = ising_grid_model(data.samples, data.graphs)
    else:
        model = faq_chain_model(args.n, 100, 8, np.random.default_rng(args.seed))
    # warm-up: compile numba kernels and the model once, so timings exclude one-off compilation
    run_methods(model, methods, 20, 20, 1, args.seed, 20)
    t0 = time.perf_counter()
    table = score(run_methods(model, methods, args.draws, args.tune, args.chains, args.seed,
                              args.nuts_draws, args.nuts_tune, args.exchange_draws))
    table["time_over_bl_mp"] = table["wall_time"] / table.loc["bl_mp", "wall_time"]
    pd.set_option("display.width", 200)
    print(vars(args))
    table["min_ess_per_s_over_nuts"] = table["min_ess_per_s"] / table.loc["nuts", "min_ess_per_s"]
    cols = [c for c in ("wall_time", "min_ess", "max_rhat", "min_ess_per_s",
                        "min_ess_per_s_over_nuts", "cvm", "cvm_floor", "time_over_bl_mp")
            if c in table]
    print(table[cols].to_string(float_format=lambda x: f"{x:.4g}"))
    print(f"total {time.perf_counter() - t0:.0f} s")


if __name__ == "__main__":
    main()
