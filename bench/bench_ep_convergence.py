"""EP sweeps and wall time on hard data sets, against NUTS (issue 38 item 4).

Run:  .venv/bin/python bench/bench_ep_convergence.py [--seeds 20] [--n-test 300]
      [--nuts-seeds 0 1 ...] [--schedules adaptive backoff]

For the README's model (``bcrf_synthetic(kind, n_train, seed)``, probit edge potentials,
w ~ N(0, 5 I), power EP with step 0.5) on loops and chains with 10 training graphs (the README)
and chains with 30 (the demo), data seeds ``0 .. seeds-1``, fits EP with ``pmc.fit`` under each
of ``--schedules`` (default: the default ``"adaptive"``) and prints per seed the sweeps, whether EP
converged (max |change of the mean| and max |change of the covariance| in one sweep both below
``tol`` = 1e-4, the fitter's criterion), the fit's wall time and the test error of the
model-averaged prediction (Qi, Szummer & Minka 2005, eqs. (57)-(63)). On ``--nuts-seeds``
(default: every seed) it also runs NUTS (2 chains x 300 draws after 300 tuning) and prints its
wall time, its test error (Monte Carlo averaging over its draws) and the wall-time ratio NUTS / EP
(first schedule), both measured in this run. Each setting ends with its max sweeps and the
minimum NUTS / EP ratio.
"""

from __future__ import annotations

import argparse
import time
import warnings

import numpy as np

import pymc_crf as pmc
from pymc_crf.datasets import bcrf_model

SETTINGS = (("loop", 10), ("chain", 10), ("chain", 30))


def ep_fit(model, test, schedule: str) -> tuple[int, bool, float, float]:
    """Sweeps, converged, wall time and model-averaged test error of one EP fit."""
    t0 = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        res = pmc.fit(model, method="ep", step_size=0.5, schedule=schedule, draws=10,
                      log_likelihood=False, progressbar=False, random_seed=0)
    wall = time.perf_counter() - t0
    err = pmc.predict(res, test, method="model_average").error_rate
    d = res["diagnostics"]
    return int(d["iterations"]), bool(d["converged"]), wall, float(err)


def nuts_fit(model, test, seed: int) -> tuple[float, float]:
    """Wall time and Monte Carlo averaged test error of one NUTS fit."""
    t0 = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        gold = pmc.fit(model, method="nuts", draws=300, tune=300, chains=2, random_seed=seed,
                       progressbar=False)
    wall = time.perf_counter() - t0
    return wall, float(pmc.predict(gold, test, method="average").error_rate)


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, default=20)
    ap.add_argument("--n-test", type=int, default=300)
    ap.add_argument("--nuts-seeds", type=int, nargs="*", default=None,
                    help="seeds with a NUTS fit (default: all; none: no NUTS)")
    ap.add_argument("--schedules", nargs="+", default=["adaptive"],
                    choices=["adaptive", "backoff", "fixed"])
    ap.add_argument("--settings", nargs="+", default=[f"{k}{n}" for k, n in SETTINGS],
                    help="which of loop10 chain10 chain30")
    args = ap.parse_args(argv)
    nuts_seeds = range(args.seeds) if args.nuts_seeds is None else args.nuts_seeds
    settings = [(k, n) for k, n in SETTINGS if f"{k}{n}" in args.settings]
    # compile numba's kernels and PyMC's NUTS graph once before timing
    tr, te = pmc.datasets.bcrf_synthetic("loop", n_train=2, n_test=2, seed=0)
    for sched in args.schedules:
        ep_fit(bcrf_model(tr), te, sched)
    if nuts_seeds:
        nuts_fit(bcrf_model(tr), te, 0)
    head = " | ".join(f"{s}: sweeps conv wall error" for s in args.schedules)
    for kind, n_train in settings:
        print(f"\n{kind}, n_train={n_train}")
        print(f"seed | {head} | NUTS: wall error | NUTS/EP")
        worst = dict.fromkeys(args.schedules, 0)
        ratios = []
        for seed in range(args.seeds):
            train, test = pmc.datasets.bcrf_synthetic(kind, n_train=n_train, n_test=args.n_test,
                                                      seed=seed)
            model = bcrf_model(train)
            row = f"{seed:4d} |"
            walls = []
            for sched in args.schedules:
                s, c, w, e = ep_fit(model, test, sched)
                worst[sched] = max(worst[sched], s)
                walls.append(w)
                row += f" {s:5d} {'y' if c else 'N'} {w:6.2f}s {e:.4f} |"
            if seed in nuts_seeds:
                w_nuts, e_nuts = nuts_fit(model, test, seed)
                ratios.append(w_nuts / walls[0])
                row += f" {w_nuts:6.1f}s {e_nuts:.4f} | {ratios[-1]:6.1f}x"
            print(row, flush=True)
        tail = ", ".join(f"{s} {worst[s]}" for s in args.schedules)
        rat = f"; min NUTS/EP {min(ratios):.1f}x on {len(ratios)} seeds" if ratios else ""
        print(f"max sweeps: {tail}{rat}")


if __name__ == "__main__":
    np.seterr(all="ignore")
    main()
