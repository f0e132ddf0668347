"""EP sweep counts on hard data sets: the global back-off schedule against adaptive per-site damping.

Run:  .venv/bin/python bench/bench_ep_convergence.py [--seeds 20] [--n-test 300] [--nuts-seeds 0 1]

For the README's model (``bcrf_synthetic(kind, n_train, seed)``, probit edge potentials,
w ~ N(0, 5 I), power EP with step 0.5) on loops and chains with 10 training graphs (the README)
and chains with 30 (the demo), data seeds ``0 .. seeds-1``, fits EP twice with ``pmc.fit``:
``schedule="backoff"`` (the schedule before issue 38 item 4) and the default
``schedule="adaptive"``, and prints per seed the sweeps, whether EP converged, the fit's wall time
and the test error of the model-averaged prediction (Qi, Szummer & Minka 2005, eqs. (57)-(63)) of
each. On ``--nuts-seeds`` of every setting it also runs NUTS (2 chains x 300 draws after 300
tuning) and prints its test error (Monte Carlo averaging over its draws) and the wall-time ratio
NUTS / EP (adaptive), both measured in this run.
"""

from __future__ import annotations

import argparse
import time
import warnings

import numpy as np

import pymc_crf as pmc
from pymc_crf.cli import build_bcrf_model

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


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, default=20)
    ap.add_argument("--n-test", type=int, default=300)
    ap.add_argument("--nuts-seeds", type=int, nargs="*", default=[0, 1])
    ap.add_argument("--no-before", action="store_true", help="skip the back-off fits")
    args = ap.parse_args(argv)
    # compile numba's kernels once before timing
    tr, te = pmc.datasets.bcrf_synthetic("loop", n_train=2, n_test=2, seed=0)
    for sched in ("backoff", "adaptive"):
        ep_fit(build_bcrf_model(tr), te, sched)
    for kind, n_train in SETTINGS:
        print(f"\n{kind}, n_train={n_train}")
        print("seed | before: sweeps conv wall error | after: sweeps conv wall error | "
              "NUTS: error wall ratio")
        worst = [0, 0]
        for seed in range(args.seeds):
            train, test = pmc.datasets.bcrf_synthetic(kind, n_train=n_train, n_test=args.n_test,
                                                      seed=seed)
            model = build_bcrf_model(train)
            row = f"{seed:4d} |"
            if not args.no_before:
                s, c, w, e = ep_fit(model, test, "backoff")
                worst[0] = max(worst[0], s)
                row += f" {s:5d} {'y' if c else 'N'} {w:6.2f}s {e:.4f} |"
            s, c, w_ep, e = ep_fit(model, test, "adaptive")
            worst[1] = max(worst[1], s)
            row += f" {s:5d} {'y' if c else 'N'} {w_ep:6.2f}s {e:.4f} |"
            if seed in args.nuts_seeds:
                t0 = time.perf_counter()
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    gold = pmc.fit(model, method="nuts", draws=300, tune=300, chains=2,
                                   random_seed=seed, progressbar=False)
                w_nuts = time.perf_counter() - t0
                e_nuts = pmc.predict(gold, test, method="average").error_rate
                row += f" {e_nuts:.4f} {w_nuts:6.1f}s {w_nuts / w_ep:6.1f}x"
            print(row, flush=True)
        print(f"max sweeps: before {worst[0]}, after {worst[1]}")


if __name__ == "__main__":
    np.seterr(all="ignore")
    main()
