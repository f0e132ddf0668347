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

With ``--nuts N``: also NUTS (``pmc.fit(method="nuts")``, ``--chains`` chains of N draws after
N tuning steps) on the same hierarchical model written non-centred (``W = s[group] * Z``,
``Z ~ N(0, 1)``), its marginals averaged over the draws: what the exact posterior of the learned-scale model
reaches (11 minutes at 300 sentences on the loaded 2-core machine, about 3 of them nutpie
compiling the model; out of reach at full size).

Printed: token log loss (mean -log p(gold label) under the marginals), token accuracy (argmax
of the marginals), expected calibration error (10 bins), chunk F1 of the Viterbi labels, wall
time, and the learned scales.

Run:  .venv/bin/python bench/conll_learned_scales.py [--train 300] [--test 500] [--draws 30]
      [--groups template|template-frequency] [--covariance diagonal|implicit] [--nuts 300]
      [--chains 1]
      [--skip-laplace] [--save-scales scales.json]
(needs ../shared/data/conll2000)
"""

from __future__ import annotations

import argparse
import json
import time
import warnings

import numpy as np
import pymc as pm
from conll_data import chunking, group_names, map_at_scales

import pymc_crf as pmc
from pymc_crf.calibration import fit_temperature, tempered
from pymc_crf.datasets import data_dir
from pymc_crf.metrics import chunk_f1, reliability_curve

SIGMA = 0.5 ** 0.5  # CRFsuite's c2 = 1


def _row(name, result, marg, labels_pred, data, draws, wall) -> dict:
    """One table row: token log loss, accuracy, ECE, chunk F1 and span ECE (the probability that
    each predicted chunk is exactly right, averaged over ``draws`` posterior draws)."""
    test, gold = data.test, data.test.labels
    p = np.clip(marg[np.arange(gold.size), gold], 1e-300, None)
    spans = pmc.queries.span_probabilities(result, test, data.classes, draws=draws,
                                           random_seed=0)
    row = {"name": name, "log loss": float(-np.mean(np.log(p))),
           "accuracy": float(np.mean(marg.argmax(1) == gold)),
           "ECE": float(reliability_curve(marg, gold, n_bins=10).ece),
           "F1": float(chunk_f1(data.test_tags, data.tags(labels_pred)).f1),
           "span ECE": float(spans.reliability(10).ece), "wall": wall}
    print(f"| {name} | {row['log loss']:.4f} | {row['accuracy']:.4f} | {row['ECE']:.4f} | "
          f"{row['F1']:.2f} | {row['span ECE']:.4f} | {wall:.1f} |", flush=True)
    return row


def _point(result, F: int, K: int, vector: str = "mean_vector"):
    """``result`` with one posterior draw, the flat weights ``fit/<vector>`` (W then T): the
    Laplace mean (the MAP at the learned scales), or a randomized MAP's ``map_vector``."""
    return with_weights(result, np.asarray(result["fit"][vector].values), F, K)


def with_weights(result, weights: np.ndarray, F: int, K: int):
    """``result`` with one posterior draw, the flat weights ``weights`` (W (F, K) then T (K, K))."""
    if weights.size != F * K + K * K:
        raise ValueError(f"{weights.size} weights given, not the model's {F * K + K * K}")
    post = result["posterior"].to_dataset().isel(chain=[0], draw=[0]).copy(deep=True)
    post["W"].values[0, 0] = weights[:F * K].reshape(F, K)
    post["T"].values[0, 0] = weights[F * K:].reshape(K, K)
    point = result.copy()
    point["posterior"] = post
    return point


def _checks(rows: dict, which: str = "averaged", at: str = "map_ls") -> None:
    """Issue 40's criteria for a learned-scale posterior's averaged marginals (``which``) against
    the MAP at c2 = 1 and the MAP at the learned scales (``at``), as measured."""
    avg, base, at_ls = rows[which], rows["map"], rows[at]
    better = min(base["ECE"], at_ls["ECE"])
    for what, ok in (
            (f"log loss {avg['log loss']:.4f} < MAP at c2 = 1 ({base['log loss']:.4f})",
             avg["log loss"] < base["log loss"]),
            (f"log loss {avg['log loss']:.4f} <= MAP at the learned scales "
             f"({at_ls['log loss']:.4f})", avg["log loss"] <= at_ls["log loss"]),
            (f"ECE {avg['ECE']:.4f} within 0.01 of the better MAP's ({better:.4f})",
             avg["ECE"] <= better + 0.01),
            (f"chunk F1 {avg['F1']:.2f} >= MAP's - 0.2 ({base['F1'] - 0.2:.2f})",
             avg["F1"] >= base["F1"] - 0.2)):
        print(f"  {'met    ' if ok else 'NOT met'}  {what}")


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--train", default="300",
                    help="training sentences, or 'all' (every one but the dev split)")
    ap.add_argument("--test", type=int, default=500)
    ap.add_argument("--dev", type=int, default=500)
    ap.add_argument("--draws", type=int, default=30)
    ap.add_argument("--scale-maxiter", type=int, default=200,
                    help="most of MacKay's steps (the fitter's default; about 50 at 300 "
                         "sentences)")
    ap.add_argument("--groups", choices=["template", "frequency", "template-frequency"],
                    default="template")
    ap.add_argument("--covariance", choices=["diagonal", "implicit"], default="diagonal")
    ap.add_argument("--skip-laplace", action="store_true",
                    help="no Laplace fit (at full size its scale search takes hours)")
    ap.add_argument("--save-scales", default=None,
                    help="JSON file for NUTS's posterior-mean scales by group name (read by "
                         "bench/conll_scales_transfer.py)")
    ap.add_argument("--chains", type=int, default=1, help="NUTS chains (nutpie runs them in "
                    "threads)")
    ap.add_argument("--nuts", type=int, default=0,
                    help="NUTS draws (and tuning steps) on the hierarchical model; 0: no NUTS")
    args = ap.parse_args(argv)
    if not data_dir("conll2000").exists():
        print(f"skipped: {data_dir('conll2000')} not found")
        return
    data = chunking(None if args.train == "all" else int(args.train), args.test,
                    n_dev=args.dev)
    vec, classes, test = data.vectorizer, data.classes, data.test
    X, y, batch, Xt = (data.train.node_features, data.train.labels, data.train.graphs,
                       test.node_features)
    K, F, G = len(classes), X.shape[1], len(vec.templates_)
    print(f"{batch.n_graphs} training sentences, {X.shape[0]} tokens, {F} features in {G} "
          f"templates, K = {K}: {F * K + K * K} weights; dev {args.dev} sentences (the last of "
          f"the training file); test {args.test} sentences, {Xt.shape[0]} tokens")
    print("| fit | token log loss | token accuracy | ECE | chunk F1 | span ECE | wall time (s) |")
    print("|---|---|---|---|---|---|---|")
    fit, wall = map_at_scales(data.train, SIGMA, SIGMA, K)
    viterbi = pmc.predict(fit, test, "map").labels
    rows = {"map": _row("MAP, c2 = 1 (sd 0.707)", fit, pmc.predict(fit, test, "bpe").marginals,
                        viterbi, data, None, wall)}
    temperature = fit_temperature(fit, data.dev)
    hot = tempered(fit, temperature)
    rows["tempered"] = _row(f"MAP, c2 = 1, temperature {temperature:.3f} (fitted on dev)", hot,
                            pmc.predict(hot, test, "bpe").marginals, viterbi, data, None, wall)
    names, group = np.unique(group_names(data, args.groups), return_inverse=True)
    names = list(names)
    if not args.skip_laplace:
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
        point = _point(res, F, K)
        rows["map_ls"] = _row("MAP at the learned scales (the posterior mean)", point,
                              pmc.predict(res, test, "bpe").marginals, labels_at_mean, data, None,
                              wall)
        rows["averaged"] = _row(
            f"learned scales ({args.groups}, {args.covariance}), averaged over {args.draws} draws",
            res, pmc.predict(res, test, "average").marginals, labels_at_mean, data, args.draws, wall)
    if args.nuts:
        with pm.Model() as noncentred:
            s = pm.HalfNormal("s", 1.0, shape=len(names))
            t = pm.HalfNormal("t", 1.0)
            Z = pm.Normal("Z", 0.0, 1.0, shape=(F, K))
            U = pm.Normal("U", 0.0, 1.0, shape=(K, K))
            W = pm.Deterministic("W", s[group][:, None] * Z)
            T = pm.Deterministic("T", t * U)
            pmc.CRF("y", graphs=batch, node_features=X, node_weights=W, edge_weights=T,
                    observed=y)
        t0 = time.perf_counter()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            nuts = pmc.fit(noncentred, method="nuts", draws=args.nuts, tune=args.nuts,
                           chains=args.chains,
                           random_seed=0, progressbar=False, log_likelihood=False)
        wall = time.perf_counter() - t0
        labels_nuts = pmc.predict(nuts, test, "map").labels
        if args.chains * args.nuts > 200:  # the Monte Carlo error of fewer draws, for scale
            _row("NUTS, averaged over 200 of its draws", nuts,
                 pmc.predict(nuts, test, "average", draws=200).marginals, labels_nuts, data,
                 args.draws, wall)
        rows["nuts"] = _row(f"NUTS on the hierarchical model ({args.groups}, non-centred), "
                            f"averaged over all {args.chains} x {args.nuts} draws", nuts,
                            pmc.predict(nuts, test, "average", draws=None).marginals,
                            labels_nuts, data, args.draws, wall)
        s_mean = nuts["posterior"]["s"].mean(("chain", "draw")).values
        t_mean = float(nuts["posterior"]["t"].mean())
        fit_at, wall = map_at_scales(data.train, s_mean[group], t_mean, K)
        rows["map_nuts_scales"] = _row(
            "MAP at NUTS's posterior-mean scales", fit_at,
            pmc.predict(fit_at, test, "bpe").marginals, pmc.predict(fit_at, test, "map").labels,
            data, None, wall)
    if not args.skip_laplace:
        print("the learned-scale Laplace posterior's averaged marginals against the MAPs:")
        _checks(rows)
    if args.nuts:
        print("NUTS on the hierarchical model against the MAPs (at its posterior-mean scales):")
        _checks(rows, "nuts", "map_nuts_scales")
        if args.save_scales:
            with open(args.save_scales, "w") as f:
                json.dump({"groups": args.groups, "train": args.train, "transition": t_mean,
                           "scales": dict(zip(names, map(float, s_mean), strict=True))}, f,
                          indent=1)
        print("NUTS posterior-mean scales: " + ", ".join(
            f"{n} {v:.3g}" for n, v in zip([*names, "transition"], [*s_mean, t_mean],
                                              strict=True)))
    if args.skip_laplace:
        return
    d = res["diagnostics"]
    print(f"outer iterations {d['log_evidence'].size}, converged {bool(d['scales_converged'])}, "
          f"log evidence {float(res['fit']['log_evidence_at_scales']):.1f} "
          f"(start {float(d['log_evidence'][0]):.1f})")
    names = [*names, "transition"]
    for n, v in sorted(zip(names, res["fit"]["scales"].values, strict=True), key=lambda a: -a[1]):
        print(f"  {n}: {v:.3g}")


if __name__ == "__main__":
    main()
