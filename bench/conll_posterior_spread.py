"""Why the Gaussian-prior posterior does not pay off on CoNLL-2000 chunking (issue 40).

The chunking CRF of ``examples/conll2000_chunking.py`` (CRFsuite's token template through
``pmc.FeatureVectorizer``, node weights (F, 23), one transition table) on the first ``--train``
training sentences, every weight ``N(0, sd^2)``, scored on the first ``--test`` test sentences.

1. **Spread.** At ``sd = 1/sqrt(2 c2)`` (``--c2``, CRFsuite's default 1): token log loss,
   accuracy and ECE (10 bins) of the marginals at the MAP, and of the marginals averaged over
   ``--draws`` draws of ``pmc.fit(method="laplace")`` with the implicit exact covariance
   (perturbation-optimisation draws) and with the diagonal one, and of the exact draws pulled
   towards the mode, ``w* + sqrt(T) (w - w*)`` (the Laplace posterior tempered to temperature
   ``T``).
2. **Evidence against sd** (``--evidence``): the Laplace log evidence of the same model at each
   sd of ``--sds``, with the implicit covariance (Lanczos log det) and with the diagonal one
   (the sum of the diagonal's logs, an upper bound on the log det), and the test chunk F1 of the
   MAP at each sd; then MacKay's fixed point for one shared learned scale
   (``s ~ HalfNormal(1)``, type-II ML, diagonal covariance), whose curvature is held fixed.

Run:  .venv/bin/python bench/conll_posterior_spread.py [--train 300] [--test 500] [--draws 32]
      [--evidence --sds 0.25 0.44 0.7 1 1.5 2.5 4]
(needs ../shared/data/conll2000)
"""

from __future__ import annotations

import argparse
import time
import warnings

import numpy as np
import pymc as pm
from conll_data import chunking

import pymc_crf as pmc
from pymc_crf.datasets import data_dir
from pymc_crf.metrics import chunk_f1, reliability_curve


def _data(n_train: int, n_test: int):
    d = chunking(n_train, n_test)
    return (d.train.graphs, d.train.node_features, d.train.labels, d.test, d.test_tags,
            d.classes)


def _model(batch, X, y, K, sd):
    with pm.Model() as m:
        if sd is None:
            sd = pm.HalfNormal("s", 1.0)
        W = pm.Normal("W", 0.0, sd, shape=(X.shape[1], K))
        T = pm.Normal("T", 0.0, sd, shape=(K, K))
        pmc.CRF("y", graphs=batch, node_features=X, node_weights=W, edge_weights=T, observed=y)
    return m


def _row(name, marg, test, wall=None):
    gold = test.labels
    p = np.clip(marg[np.arange(gold.size), gold], 1e-300, None)
    ece = reliability_curve(marg, gold, n_bins=10).ece
    w = "" if wall is None else f"{wall:.1f}"
    print(f"| {name} | {-np.mean(np.log(p)):.4f} | {np.mean(marg.argmax(1) == gold):.4f} | "
          f"{ece:.4f} | {w} |", flush=True)


def _averaged(res, test, mean=None, T=1.0):
    """Marginals averaged over the result's draws, pulled towards ``mean`` by ``sqrt(T)``."""
    if T != 1.0:
        res = res.copy(deep=True)
        for name in ("W", "T"):
            v = res["posterior"][name].values
            m = mean[name]
            res["posterior"][name].values[...] = m + np.sqrt(T) * (v - m)
    return pmc.predict(res, test, "average").marginals


def spread(batch, X, y, test, K, c2, draws):
    sd = (1.0 / (2.0 * c2)) ** 0.5
    m = _model(batch, X, y, K, sd)
    print(f"\n1. Spread at c2 = {c2:g} (sd {sd:.3f}), {draws} draws\n")
    print("| marginals | token log loss | token accuracy | ECE | fit wall time (s) |")
    print("|---|---|---|---|---|")
    t0 = time.perf_counter()
    fit = pmc.fit(m, method="map", log_likelihood=False, progressbar=False)
    _row("MAP", pmc.predict(fit, test, "bpe").marginals, test, time.perf_counter() - t0)
    for cov in ("implicit", "diagonal"):
        t0 = time.perf_counter()
        res = pmc.fit(m, method="laplace", covariance=cov, draws=draws, random_seed=0,
                      log_likelihood=False, progressbar=False)
        wall = time.perf_counter() - t0
        _row(f"Laplace ({cov} covariance), averaged", _averaged(res, test), test, wall)
        if cov == "implicit":
            mean = {n: res["posterior"][n].values.mean(axis=(0, 1)) for n in ("W", "T")}
            for T in (0.01, 0.1, 0.3):
                _row(f"Laplace (implicit), tempered T = {T:g}, averaged",
                     _averaged(res, test, mean, T), test)


def evidence(batch, X, y, test, tchunks, classes, sds):
    K = len(classes)
    print("\n2. Laplace evidence against the prior sd\n")
    print("| sd | c2 | log evidence, implicit (Lanczos) | log evidence, diagonal | "
          "MAP test chunk F1 |")
    print("|---|---|---|---|---|")
    for sd in sds:
        m = _model(batch, X, y, K, sd)
        ev = {}
        for cov in ("implicit", "diagonal"):
            res = pmc.fit(m, method="laplace", covariance=cov, draws=2, random_seed=0,
                          log_likelihood=False, progressbar=False)
            ev[cov] = res.attrs["log_marginal_likelihood"]
        labels = pmc.predict(res, test, "map").labels  # the MAP (the mean of either)
        pred, i = [], 0
        for s in tchunks:
            pred.append([classes[k] for k in labels[i:i + len(s)]])
            i += len(s)
        print(f"| {sd:g} | {1 / (2 * sd * sd):.3g} | {ev['implicit']:.1f} | "
              f"{ev['diagonal']:.1f} | {chunk_f1(tchunks, pred).f1:.2f} |", flush=True)
    m = _model(batch, X, y, K, None)
    res = pmc.fit(m, method="laplace", covariance="diagonal", hyperprior=False, draws=2,
                  log_likelihood=False, progressbar=False, scale_tol=1e-3)
    s = float(res["fit"]["scales"][0])
    print(f"\nMacKay's fixed point (diagonal covariance, curvature held fixed): s = {s:.3f} "
          f"(c2 = {1 / (2 * s * s):.3g})")


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--train", type=int, default=300)
    ap.add_argument("--test", type=int, default=500)
    ap.add_argument("--draws", type=int, default=32)
    ap.add_argument("--c2", type=float, default=1.0)
    ap.add_argument("--evidence", action="store_true")
    ap.add_argument("--skip-spread", action="store_true")
    ap.add_argument("--sds", type=float, nargs="+", default=[0.25, 0.44, 0.7, 1.0, 1.5, 2.5, 4.0])
    args = ap.parse_args(argv)
    if not data_dir("conll2000").exists():
        print(f"skipped: {data_dir('conll2000')} not found")
        return
    warnings.simplefilter("ignore")
    batch, X, y, test, tchunks, classes = _data(args.train, args.test)
    K = len(classes)
    print(f"{args.train} training sentences, {X.shape[0]} tokens, {X.shape[1]} features, "
          f"K = {K}: d = {X.shape[1] * K + K * K}; {args.test} test sentences")
    if not args.skip_spread:
        spread(batch, X, y, test, K, args.c2, args.draws)
    if args.evidence:
        evidence(batch, X, y, test, tchunks, classes, args.sds)


if __name__ == "__main__":
    main()
