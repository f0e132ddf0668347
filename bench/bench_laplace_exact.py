"""Benchmark: the Laplace fit with the exact dense covariance of a chain CRF, d = 4,030 weights.

Run:  .venv/bin/python bench/bench_laplace_exact.py [--draws 200] [--fd-columns 0]

(Single-threaded BLAS unless ``OPENBLAS_NUM_THREADS`` is set, as in the other benchmarks of this
shared 2-core machine.)

The model is the synthetic chain CRF of ``bench/bench_covariance.py`` (issue 38 item 5): 26
labels, 128 dense features uniform in [0, 1] plus a bias column, one (26, 26) transition table,
387 positions in 45 chains of lengths 4 to 14, N(0, 1) priors: d = 129 * 26 + 676 = 4,030.

1. Wall time of ``pmc.fit(model, method="laplace", covariance="exact", draws=...)`` and of
   ``method="bethe_laplace", map="exact", covariance="exact"`` (the same computation), MAP,
   covariance, draws, per-graph log-likelihood of the draws and result included; the engine's
   kernels loaded by a fit of a small model first.
2. Where the time goes: the ``laplace`` fit once more under ``cProfile``, the cumulative time
   of each stage.
3. The exact Hessian ``J^T C J`` at the MAP (``exact_fisher_matrix``) against central
   differences of the engine's gradient (step 1e-5) on all d columns (``--fd-columns n``: the
   edge columns and a random choice of node columns, n in all): the largest absolute
   difference; and against the column blocks of unit directions through the chain recursions
   (``CurvatureOperator``, the path used for every column before), with both timings.
"""

from __future__ import annotations

import os

for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS",
             "PYMC_CRF_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import argparse  # noqa: E402
import cProfile  # noqa: E402
import pstats  # noqa: E402
import time  # noqa: E402
import warnings  # noqa: E402

import numpy as np  # noqa: E402
from bench_covariance import dense_model  # noqa: E402

import pymc_crf as pmc  # noqa: E402
from pymc_crf.fitters import extract_crf  # noqa: E402
from pymc_crf.fitters.bethe_laplace.hessian import CurvatureOperator, exact_fisher_matrix  # noqa: E402
from pymc_crf.model.objective import CRFLogLikelihood  # noqa: E402

#: the stages of the fit, as (label, file suffix, function name) of the profile
STAGES = [
    ("model read (weight_problem)", "bethe_laplace/problem.py", "weight_problem"),
    ("MAP (L-BFGS)", "bethe_laplace/laplace.py", "maximise"),
    ("exact Hessian J^T C J", "bethe_laplace/hessian.py", "exact_fisher_matrix"),
    ("Cholesky factor", "fitters/covariance.py", "cholesky_pd"),
    ("covariance (potri)", "fitters/covariance.py", "cholesky_inverse"),
    ("log-likelihood at the MAP", "model/objective.py", "pointwise"),
    ("evidence", "bethe_laplace/laplace.py", "laplace_log_evidence"),
    ("draws", "fitters/covariance.py", "sample"),
    ("log-likelihood of the draws", "bethe_laplace/fitter.py", "_pointwise"),
    ("result (DataTree)", "model/results.py", "build_result"),
]


def laplace(model, method: str, draws: int):
    kw = {"map": "exact"} if method == "bethe_laplace" else {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return pmc.fit(model, method=method, covariance="exact", draws=draws, random_seed=0,
                       progressbar=False, **kw)


def breakdown(model, draws: int) -> None:
    prof = cProfile.Profile()
    t0 = time.perf_counter()
    prof.enable()
    laplace(model, "laplace", draws)
    prof.disable()
    wall = time.perf_counter() - t0
    stats = pstats.Stats(prof).stats
    print(f"\n2. where the time goes (method='laplace' under cProfile: {wall:.2f} s)")
    print("| stage | s |\n|---|---|")
    total = 0.0
    for label, path, name in STAGES:
        t = sum(v[3] for (f, _, fn), v in stats.items() if fn == name and f.endswith(path))
        total += t
        print(f"| {label} | {t:.2f} |")
    print(f"| other | {wall - total:.2f} |")


def hessian_check(model, w: np.ndarray, fd_columns: int) -> None:
    spec = extract_crf(model)
    lik = CRFLogLikelihood(spec)
    d, dn = spec.flat_size, spec.node_weights.size
    lik(w)
    t0 = time.perf_counter()
    H = exact_fisher_matrix(lik, w)
    t_new = time.perf_counter() - t0
    op = CurvatureOperator(lik, w)
    t0 = time.perf_counter()
    block = op._chain_matmat(None, units=np.arange(d))
    t_block = time.perf_counter() - t0
    block = 0.5 * (block + block.T)
    if fd_columns <= 0 or fd_columns >= d:
        cols = np.arange(d)
    else:
        rng = np.random.default_rng(2)
        node = rng.choice(dn, size=max(fd_columns - (d - dn), 0), replace=False)
        cols = np.sort(np.concatenate([node, np.arange(dn, d)]))
    h = 1e-5
    t0 = time.perf_counter()
    fd = np.empty((d, cols.size))
    for k, j in enumerate(cols):
        e = np.zeros(d)
        e[j] = h
        fd[:, k] = -(lik(w + e)[1] - lik(w - e)[1]) / (2 * h)
    t_fd = time.perf_counter() - t0
    print(f"\n3. exact Hessian at the MAP (d = {d}, largest entry {np.abs(H).max():.1f})")
    print(f"  pairwise covariances (exact_fisher_matrix): {t_new:.2f} s; column blocks through "
          f"the chain recursions: {t_block:.2f} s; max |difference| {np.abs(H - block).max():.1e}")
    print(f"  central differences of the engine's gradient on {cols.size} columns "
          f"({t_fd:.0f} s): max |H - H_fd| = {np.abs(H[:, cols] - fd).max():.1e}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--draws", type=int, default=200)
    ap.add_argument("--fd-columns", type=int, default=0,
                    help="finite-difference columns: 0 (default) all, else the edge columns "
                         "and random node columns, this many in all")
    args = ap.parse_args()
    print(f"load average at start: {os.getloadavg()[0]:.1f} (2 cores); BLAS threads "
          f"{os.environ['OPENBLAS_NUM_THREADS']}")
    laplace(dense_model(N=60, G=8), "laplace", 10)  # the engine's kernels loaded
    model = dense_model()
    spec = extract_crf(model)
    print(f"d = {spec.flat_size}, N = {spec.batch.n_total_nodes} positions in "
          f"{spec.batch.n_graphs} chains, K = {spec.n_labels}, draws = {args.draws}")
    print("\n1. fit wall time\n| method | wall (s) | log evidence |\n|---|---|---|")
    res = None
    for method in ("laplace", "bethe_laplace"):
        t0 = time.perf_counter()
        r = laplace(model, method, args.draws)
        wall = time.perf_counter() - t0
        res = r if res is None else res
        print(f"| {method} | {wall:.2f} | {r.attrs['log_marginal_likelihood']:.3f} |")
    breakdown(model, args.draws)
    hessian_check(model, np.asarray(res["fit"]["mean_vector"].values), args.fd_columns)
    print(f"\nload average at the end: {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
