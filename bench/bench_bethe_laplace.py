"""Benchmark: Bethe-Laplace against NUTS (posterior) and against AIS (evidence), one run.

Run:  OPENBLAS_NUM_THREADS=1 .venv/bin/python bench/bench_bethe_laplace.py

(The script sets single-threaded BLAS itself before numpy loads: on a shared 2-core machine
OpenBLAS threads busy-wait and make every small dense operation 10x slower for both sides.)

1. Posterior, 5 x 5 +-1 grid MRF (``welling_parise_grid``, N = 100, 65 weights, prior
   N(0, 0.25 I)): wall time of ``pm.sample`` (NUTS on the exact junction-tree posterior, 2 chains
   x 1000 draws + 1000 tuning, cores=1; total including compilation, and PyMC's own sampling time)
   against ``pmc.fit(method="bethe_laplace")`` with ``map="exact"`` (BL-MP) and ``map="bp"``
   (BL-BP), each with 2000 draws and its per-row log-likelihood.
2. Evidence, a Parise & Welling 2006 sec. 4.1 model (5 nodes, d = 0.5/4, N = 100, prior
   N(0, I)): a long AIS run (20 runs x 8000 temperatures) is the reference; the Bethe-Laplace
   error is |BP-LR - reference|; AIS is then run with 10 runs and 250, 500, ... temperatures until
   its own Monte Carlo error is at most that error, and its time is compared with BP-LR's.
"""

from __future__ import annotations

import os

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")

import sys  # noqa: E402
import time  # noqa: E402
import warnings  # noqa: E402

import pymc as pm  # noqa: E402

import pymc_crf as pmc  # noqa: E402
from pymc_crf.fitters.evidence import log_marginal_likelihood  # noqa: E402

sys.path.insert(0, os.path.dirname(__file__))
from bethe_laplace_tables import grid_model  # noqa: E402
from evidence_fig3 import model_for  # noqa: E402


def posterior_speed() -> None:
    model = grid_model(100, seed=0)
    pmc.fit(model, method="bethe_laplace", draws=10)  # numba kernels compiled before timing
    times = {}
    for label, mode in (("BL-MP", "exact"), ("BL-BP", "bp")):
        t0 = time.perf_counter()
        pmc.fit(model, method="bethe_laplace", map=mode, draws=2000, random_seed=0)
        times[label] = time.perf_counter() - t0
    t0 = time.perf_counter()
    with model, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        idata = pm.sample(draws=1000, tune=1000, chains=2, cores=1, random_seed=0,
                          progressbar=False, compute_convergence_checks=False)
    t_nuts = time.perf_counter() - t0
    t_sampling = next((float(idata[g].attrs["sampling_time"]) for g in ("posterior", "sample_stats")
                       if "sampling_time" in idata[g].attrs), float("nan"))
    print(f"posterior (5x5 grid, N=100): NUTS total {t_nuts:.1f} s (sampling {t_sampling:.1f} s)")
    for label, t in times.items():
        print(f"  {label}: {t:.2f} s -> NUTS/BL = {t_nuts / t:.0f}x total, "
              f"{t_sampling / t:.0f}x sampling only")


def evidence_speed() -> None:
    data = pmc.datasets.parise_welling_random_structure(d=0.5 / 4, n_samples=100, seed=0)
    model = model_for(data, 100)
    log_marginal_likelihood(model, "bethe_laplace")  # compile
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ref = log_marginal_likelihood(model, "ais", n_runs=20, n_temps=8000, random_seed=123)
        t0 = time.perf_counter()
        bl = log_marginal_likelihood(model, "bethe_laplace", map="bp")
        t_bl = time.perf_counter() - t0
        err = abs(float(bl) - float(ref))
        print(f"evidence (5-node model, N=100): AIS reference {float(ref):.4f} +- "
              f"{ref.std_error:.4f}; BP-LR {float(bl):.4f} in {t_bl:.3f} s, |error| {err:.4f}")
        n_temps = 250
        while True:
            t0 = time.perf_counter()
            run = log_marginal_likelihood(model, "ais", n_runs=10, n_temps=n_temps, random_seed=7)
            t = time.perf_counter() - t0
            print(f"  AIS {n_temps} temperatures: {float(run):.4f} +- {run.std_error:.4f} "
                  f"in {t:.2f} s ({t / t_bl:.0f}x BP-LR)")
            if run.std_error <= err or n_temps >= 16000:
                break
            n_temps *= 2


if __name__ == "__main__":
    posterior_speed()
    evidence_speed()
