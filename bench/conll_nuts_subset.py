"""What the exact posterior reaches on a small real subset: NUTS against MAP and Laplace (issue 40).

CoNLL-2000 chunking with a feature set small enough for NUTS: the POS-tag features of CRFsuite's
token template (``postag`` and ``postag[:2]`` at offsets -2..2, and the bias; the word features
left out), node weights (F, K) and one transition table, on the first ``--train`` training
sentences; scored on the first ``--test`` test sentences by token log loss, accuracy, ECE (10
bins) and chunk F1 (Viterbi at the posterior mean; marginals averaged over the draws):

* fixed prior, every weight ``N(0, sd^2)`` with CRFsuite's ``c2 = 1`` (sd 0.707): MAP; the
  Laplace posterior (``method="laplace"``, ``covariance=--covariance``: ``"implicit"``, the
  exact covariance, by default); NUTS (``method="nuts"``);
* learned scales, one ``HalfNormal(1)`` per template and one for the transitions:
  ``method="laplace"`` (type-II MAP scales, the Laplace posterior at them), the MAP at those
  scales, and NUTS on the full hierarchical model written non-centred (``W = s[template] * Z``,
  ``Z ~ N(0, 1)``).

Run:  .venv/bin/python bench/conll_nuts_subset.py [--train 50] [--test 300] [--draws 500]
      [--covariance implicit|diagonal|exact] [--skip-nuts]
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
from pymc_crf.datasets import data_dir, token_features
from pymc_crf.metrics import chunk_f1, reliability_curve

SIGMA = 0.5**0.5


def _pos_only(sentence_features):
    return [{k: v for k, v in tok.items() if "postag" in k or k == "bias"}
            for tok in sentence_features]


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--train", type=int, default=50)
    ap.add_argument("--test", type=int, default=300)
    ap.add_argument("--draws", type=int, default=500)
    ap.add_argument("--chains", type=int, default=2)
    ap.add_argument("--covariance", default="implicit")
    ap.add_argument("--skip-nuts", action="store_true")
    args = ap.parse_args(argv)
    if not data_dir("conll2000").exists():
        print(f"skipped: {data_dir('conll2000')} not found")
        return
    warnings.simplefilter("ignore")
    data = chunking(args.train, args.test, lambda w, p: _pos_only(token_features(w, p)))
    vec, classes, tchunks, test = data.vectorizer, data.classes, data.test_tags, data.test
    X, y, batch, Xt = (data.train.node_features, data.train.labels, data.train.graphs,
                       test.node_features)
    K, F, G = len(classes), X.shape[1], len(vec.templates_)
    print(f"{args.train} sentences ({X.shape[0]} tokens), {F} features in {G} templates, K = {K}: "
          f"d = {F * K + K * K}; test {args.test} sentences ({Xt.shape[0]} tokens); NUTS "
          f"{args.chains} x {args.draws} draws after {args.draws} tuning steps")
    print("| prior | fit | token log loss | token accuracy | ECE | chunk F1 | wall time (s) | "
          "notes |")
    print("|---|---|---|---|---|---|---|---|")

    def row(prior, name, res, wall, averaged=True, note=""):
        marg = pmc.predict(res, test, "average" if averaged else "bpe").marginals
        labels = pmc.predict(res, test, "map").labels
        gold = test.labels
        p = np.clip(marg[np.arange(gold.size), gold], 1e-300, None)
        pred = data.tags(labels)
        print(f"| {prior} | {name} | {-np.mean(np.log(p)):.4f} | "
              f"{np.mean(marg.argmax(1) == gold):.4f} | "
              f"{reliability_curve(marg, gold, n_bins=10).ece:.4f} | "
              f"{chunk_f1(tchunks, pred).f1:.2f} | {wall:.1f} | {note} |", flush=True)

    def timed(model, method, **kw):
        t0 = time.perf_counter()
        res = pmc.fit(model, method=method, progressbar=False, **kw)
        return res, time.perf_counter() - t0

    with pm.Model() as fixed:
        W = pm.Normal("W", 0.0, SIGMA, shape=(F, K))
        T = pm.Normal("T", 0.0, SIGMA, shape=(K, K))
        pmc.CRF("y", graphs=batch, node_features=X, node_weights=W, edge_weights=T, observed=y)
    res, wall = timed(fixed, "map", log_likelihood=False)
    row("c2 = 1", "MAP", res, wall, averaged=False)
    cov = args.covariance
    res, wall = timed(fixed, "laplace", covariance=cov, draws=400, random_seed=0,
                      log_likelihood=False)
    row("c2 = 1", f"Laplace ({cov} covariance), averaged", res, wall)
    if not args.skip_nuts:
        res, wall = timed(fixed, "nuts", draws=args.draws, tune=args.draws, chains=args.chains,
                          random_seed=0)
        table = pmc.compare({"nuts": res})  # max_rhat needs 2 or more chains
        rhat = float(table["max_rhat"].iloc[0]) if "max_rhat" in table else float("nan")
        row("c2 = 1", "NUTS, averaged", res, wall, note=f"max r_hat {rhat:.3f}")

    with pm.Model() as learned:
        s = pm.HalfNormal("s", 1.0, shape=G)
        t = pm.HalfNormal("t", 1.0)
        W = pm.Normal("W", 0.0, s[vec.template_index_][:, None], shape=(F, K))
        T = pm.Normal("T", 0.0, t, shape=(K, K))
        pmc.CRF("y", graphs=batch, node_features=X, node_weights=W, edge_weights=T, observed=y)
    res, wall = timed(learned, "laplace", covariance=cov, draws=400, random_seed=0,
                      log_likelihood=False)
    scales = np.round(res["fit"]["scales"].values, 3).tolist()
    row("learned scales", f"Laplace ({cov}) at the type-II MAP scales, averaged", res, wall,
        note=f"scales {scales}")
    row("learned scales", "MAP at those scales", res, wall, averaged=False)
    if args.skip_nuts:
        return
    with pm.Model() as noncentred:
        s = pm.HalfNormal("s", 1.0, shape=G)
        t = pm.HalfNormal("t", 1.0)
        Z = pm.Normal("Z", 0.0, 1.0, shape=(F, K))
        U = pm.Normal("U", 0.0, 1.0, shape=(K, K))
        W = pm.Deterministic("W", s[vec.template_index_][:, None] * Z)
        T = pm.Deterministic("T", t * U)
        pmc.CRF("y", graphs=batch, node_features=X, node_weights=W, edge_weights=T, observed=y)
    res, wall = timed(noncentred, "nuts", draws=args.draws, tune=args.draws,
                      chains=args.chains, random_seed=0)
    post_s = np.round(res.posterior["s"].mean(("chain", "draw")).values, 3).tolist()
    row("learned scales", "NUTS on the hierarchical model (non-centred), averaged", res, wall,
        note=f"posterior mean scales {post_s}")


if __name__ == "__main__":
    main()
