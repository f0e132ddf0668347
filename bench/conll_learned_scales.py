"""CoNLL-2000 chunking: MAP at CRFsuite's prior against learned per-template prior scales.

The chunking CRF of ``examples/conll2000_chunking.py`` (CRFsuite's token template through
``pmc.FeatureVectorizer``) on the first ``--train`` training sentences, scored on the first
``--test`` test sentences:

* **MAP, c2 = 1**: every weight N(0, 1/2) (CRFsuite's L2 objective ``c2 ||w||^2`` as a prior,
  sd = 1/sqrt(2)); marginals at the MAP, Viterbi labels.
* **learned scales**: node weights ``N(0, s[group]^2)`` with one ``s ~ HalfNormal(1)`` per
  group of features, the transition table ``N(0, t^2)`` with its own ``t ~ HalfNormal(1)``;
  ``pmc.fit(method="laplace", covariance=--covariance)`` (type-II MAP scales by the Laplace
  evidence), marginals averaged over ``--draws`` of its draws (``pmc.predict(...,
  "average")``), Viterbi labels at the posterior mean. ``--groups template``: one scale per
  feature template (``vec.templates_``); ``template-frequency``: one per template and
  training-count bucket of the feature (1, 2-3, 4-15, 16 and more tokens), so rare features
  can get smaller scales than frequent ones of the same template.

Printed: token log loss (mean -log p(gold label) under the marginals), token accuracy (argmax
of the marginals), expected calibration error (10 bins), chunk F1 of the Viterbi labels, wall
time, and the learned scales.

Run:  .venv/bin/python bench/conll_learned_scales.py [--train 300] [--test 500] [--draws 30]
      [--groups template|template-frequency] [--covariance diagonal|implicit]
(needs ../shared/data/conll2000)
"""

from __future__ import annotations

import argparse
import time
import warnings

import numpy as np
import pymc as pm
import scipy.sparse as sp
from conll_data import chunking

import pymc_crf as pmc
from pymc_crf.datasets import data_dir
from pymc_crf.metrics import chunk_f1, reliability_curve

SIGMA = 0.5 ** 0.5  # CRFsuite's c2 = 1


def _scores(name, marg, labels_pred, test, tchunks, classes, wall):
    gold = test.labels
    p = np.clip(marg[np.arange(gold.size), gold], 1e-300, None)
    pred_tags, i = [], 0
    for s in tchunks:
        pred_tags.append([classes[k] for k in labels_pred[i:i + len(s)]])
        i += len(s)
    f1 = chunk_f1(tchunks, pred_tags).f1
    ece = reliability_curve(marg, gold, n_bins=10).ece
    print(f"| {name} | {-np.mean(np.log(p)):.4f} | {np.mean(marg.argmax(1) == gold):.4f} | "
          f"{ece:.4f} | {f1:.2f} | {wall:.1f} |")


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--train", type=int, default=300)
    ap.add_argument("--test", type=int, default=500)
    ap.add_argument("--draws", type=int, default=30)
    ap.add_argument("--scale-maxiter", type=int, default=30)
    ap.add_argument("--groups", choices=["template", "template-frequency"], default="template")
    ap.add_argument("--covariance", choices=["diagonal", "implicit"], default="diagonal")
    args = ap.parse_args(argv)
    if not data_dir("conll2000").exists():
        print(f"skipped: {data_dir('conll2000')} not found")
        return
    data = chunking(args.train, args.test)
    vec, classes, tchunks, test = data.vectorizer, data.classes, data.test_tags, data.test
    X, y, batch, Xt = (data.train.node_features, data.train.labels, data.train.graphs,
                       test.node_features)
    K, F, G = len(classes), X.shape[1], len(vec.templates_)
    print(f"{args.train} sentences, {X.shape[0]} tokens, {F} features in {G} templates, K = {K}: "
          f"{F * K + K * K} weights; test {args.test} sentences, {Xt.shape[0]} tokens")
    print("| fit | token log loss | token accuracy | ECE | chunk F1 | wall time (s) |")
    print("|---|---|---|---|---|---|")
    with pm.Model() as fixed:
        W = pm.Normal("W", 0.0, SIGMA, shape=(F, K))
        T = pm.Normal("T", 0.0, SIGMA, shape=(K, K))
        pmc.CRF("y", graphs=batch, node_features=X, node_weights=W, edge_weights=T, observed=y)
    t0 = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        fit = pmc.fit(fixed, method="map", log_likelihood=False, progressbar=False)
    wall = time.perf_counter() - t0
    _scores("MAP, c2 = 1 (sd 0.707)", pmc.predict(fit, test, "bpe").marginals,
            pmc.predict(fit, test, "map").labels, test, tchunks, classes, wall)
    group = np.asarray(vec.template_index_)
    names = list(vec.templates_)
    if args.groups == "template-frequency":
        count = np.asarray((sp.csr_matrix(X) != 0).sum(axis=0)).ravel()
        bucket = np.digitize(count, [2, 4, 16])
        labels = ["1", "2-3", "4-15", "16+"]
        used, group = np.unique(group * 4 + bucket, return_inverse=True)
        names = [f"{vec.templates_[u // 4]} (count {labels[u % 4]})" for u in used]
    with pm.Model() as learned:
        s = pm.HalfNormal("s", 1.0, shape=len(names))
        t = pm.HalfNormal("t", 1.0)
        W = pm.Normal("W", 0.0, s[group][:, None], shape=(F, K))
        T = pm.Normal("T", 0.0, t, shape=(K, K))
        pmc.CRF("y", graphs=batch, node_features=X, node_weights=W, edge_weights=T, observed=y)
    t0 = time.perf_counter()
    res = pmc.fit(learned, method="laplace", covariance=args.covariance, draws=args.draws,
                  random_seed=0, log_likelihood=False, progressbar=False,
                  scale_maxiter=args.scale_maxiter)
    wall = time.perf_counter() - t0
    labels_at_mean = pmc.predict(res, test, "map").labels
    _scores(f"learned scales ({args.groups}, {args.covariance}), averaged over {args.draws} "
            "draws", pmc.predict(res, test, "average").marginals, labels_at_mean, test, tchunks,
            classes, wall)
    _scores("learned scales, marginals at the posterior mean",
            pmc.predict(res, test, "bpe").marginals, labels_at_mean, test, tchunks, classes, wall)
    d = res["diagnostics"]
    print(f"outer iterations {d['log_evidence'].size}, converged {bool(d['scales_converged'])}, "
          f"log evidence {float(res['fit']['log_evidence_at_scales']):.1f} "
          f"(start {float(d['log_evidence'][0]):.1f})")
    names = [*names, "transition"]
    for n, v in sorted(zip(names, res["fit"]["scales"].values, strict=True), key=lambda a: -a[1]):
        print(f"  {n}: {v:.3g}")


if __name__ == "__main__":
    main()
