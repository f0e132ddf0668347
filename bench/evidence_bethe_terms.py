"""Which Bethe part of BP-LR-ExactGrad moves it away from Laplace-Exact (Parise & Welling 2006,
figs. 3 and 4)?

Both scores are eq. (8) at the same exact MAP; they differ in two terms only:
``log p(D | w)`` (Bethe vs exact log Z, a difference that grows with N) and ``-1/2 log det A``
(linear-response vs exact C). For each data set of ``pmc.datasets.parise_welling_random_structure``
(the true structure, N(0, 1) priors, the model of ``pymc-crf reproduce parise-welling-fig3``) this
prints the mean absolute size of each part and of their sum.

Run:  .venv/bin/python bench/evidence_bethe_terms.py [--datasets 50] [--n 1000 10000]
                                                     [--d 0.125 0.25 0.5]
"""

from __future__ import annotations

import argparse
import warnings

import numpy as np

import pymc_crf as pmc
from pymc_crf.fitters.bethe_laplace.laplace import laplace_fit
from pymc_crf.fitters.bethe_laplace.problem import weight_problem
from pymc_crf.reproduce.model_scoring import _model


def parts(d: float, n: int, seed: int) -> tuple[float, float]:
    """(log-likelihood part, log-determinant part) of Laplace-Exact minus BP-LR-ExactGrad."""
    data = pmc.datasets.parise_welling_random_structure(d=d, n_samples=n, seed=seed)
    problem = weight_problem(_model(data, n), "bench")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        lr = laplace_fit(problem, map="exact", covariance="bp")
        ex = laplace_fit(problem, map="exact", covariance="exact")
    assert np.allclose(lr.mean, ex.mean)
    ll = ex.log_likelihood - lr.log_likelihood
    det = -0.5 * (np.linalg.slogdet(ex.precision)[1] - np.linalg.slogdet(lr.precision)[1])
    return float(ll), float(det)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--datasets", type=int, default=50)
    ap.add_argument("--n", type=int, nargs="+", default=[1000, 10000])
    ap.add_argument("--d", type=float, nargs="+", default=[0.5 / 4, 1.0 / 4, 2.0 / 4])
    args = ap.parse_args(argv)
    print("| d | N | mean abs log-lik part (Bethe log Z) | mean abs log-det part (LR C) | "
          "mean abs total |")
    print("|---|---|---|---|---|")
    for d in args.d:
        for n in args.n:
            p = np.array([parts(d, n, k) for k in range(args.datasets)])
            print(f"| {d:g} | {n} | {np.mean(np.abs(p[:, 0])):.4g} | "
                  f"{np.mean(np.abs(p[:, 1])):.4g} | {np.mean(np.abs(p.sum(1))):.4g} |")


if __name__ == "__main__":
    main()
