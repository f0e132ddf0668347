"""Regularisation by evidence against a cross-validated grid: CoNLL-2000 chunking (issue 40).

What a user who asks "which c2?" (sklearn-crfsuite #55) does today, against what the posterior
offers, both through ``pmc.CRFTagger`` on the first ``--train`` training sentences (CRFsuite's
token template, ``pmc.datasets.token_features``):

* **grid**: ``GridSearchCV(CRFTagger(), {"c2": [0.01, 0.03, 0.1, 0.3, 1, 3, 10]}, cv=5)`` scored
  by chunk F1 on the held-out folds, refitted at the best c2 on all the training sentences;
* **evidence**: ``CRFTagger(c2="evidence")``: one prior sd for every weight chosen by the
  Laplace evidence (type-II ML with the implicit exact covariance), then the MAP at it.

Printed: the chosen c2, chunk F1 on the first ``--test`` test sentences, and the wall time of
each (the grid's includes its refit), with the ratio. Both run in this process, one after the
other (MAP kernels compiled beforehand by a small warm-up fit).

Run:  .venv/bin/python bench/bench_evidence_c2.py [--train 1000] [--test 2012]
(needs ../shared/data/conll2000)
"""

from __future__ import annotations

import argparse
import time
import warnings

from conll_data import tagger_split
from sklearn.model_selection import GridSearchCV, KFold

from pymc_crf import CRFTagger
from pymc_crf.datasets import data_dir
from pymc_crf.metrics import chunk_f1

GRID = [0.01, 0.03, 0.1, 0.3, 1.0, 3.0, 10.0]


def _f1(estimator, X, y) -> float:
    return chunk_f1(y, estimator.predict(X)).f1


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--train", type=int, default=1000)
    ap.add_argument("--test", type=int, default=2012)
    ap.add_argument("--folds", type=int, default=5)
    args = ap.parse_args(argv)
    if not data_dir("conll2000").exists():
        print(f"skipped: {data_dir('conll2000')} not found")
        return
    X, y, Xt, tchunks = tagger_split(args.train, args.test)
    warnings.simplefilter("ignore")
    CRFTagger().fit(X[:20], y[:20])  # compile the kernels outside the timings
    print(f"{len(X)} training sentences, {len(Xt)} test sentences; grid c2 in {GRID}, "
          f"{args.folds}-fold CV")
    print("| choice | c2 | test chunk F1 | wall time (s) |")
    print("|---|---|---|---|")
    t0 = time.perf_counter()
    search = GridSearchCV(CRFTagger(), {"c2": GRID}, scoring=_f1,
                          cv=KFold(args.folds, shuffle=True, random_state=0), refit=True)
    search.fit(X, y)
    t_grid = time.perf_counter() - t0
    f1_grid = chunk_f1(tchunks, search.best_estimator_.predict(Xt)).f1
    print(f"| {args.folds}-fold CV grid | {search.best_params_['c2']:g} | {f1_grid:.2f} | "
          f"{t_grid:.1f} |")
    t0 = time.perf_counter()
    ev = CRFTagger(c2="evidence").fit(X, y)
    t_ev = time.perf_counter() - t0
    f1_ev = chunk_f1(tchunks, ev.predict(Xt)).f1
    print(f"| Laplace evidence | {ev.c2_:.3g} | {f1_ev:.2f} | {t_ev:.1f} |")
    print(f"F1 difference (evidence - grid) {f1_ev - f1_grid:+.2f}; wall time ratio "
          f"(evidence / grid) {t_ev / t_grid:.3f}")
    for c2, m in zip(GRID, search.cv_results_["mean_test_score"], strict=True):
        print(f"  c2 = {c2:g}: mean CV chunk F1 {m:.2f}")


if __name__ == "__main__":
    main()
