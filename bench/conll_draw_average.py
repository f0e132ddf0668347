"""CoNLL-2000 chunking: how an average of posterior draws approaches its many-draw limit, and where
it loses log loss against the MAP.

Reads the draws ``bench/conll_randomized_map.py --save-draws FILE.npy`` wrote (one row of flat
weights, W then T, per draw) with the same ``--train``, ``--test``, ``--dev`` and ``--scales``,
and fits the two MAPs of that bench again (CRFsuite's c2 = 1, and at the scales). Printed:

* the token log loss of the marginals averaged over ``n`` draws, for n = 1, 2, 4, ... and all,
  each the mean over ``--subsets`` random subsets of the draws, and the least-squares fit
  ``a + b / n`` through those with ``n >= --fit-from``: the log loss of an average of n
  draws is biased upwards by about b / n (Jensen), so ``a`` estimates the average over the
  whole posterior, to compare with the MAPs', with the sd and 95% interval of its difference
  from each MAP over ``--bootstrap`` resamples of the test sentences;
* the log loss of the draws' mean as one point;
* the difference between the average over all draws and the MAP at the scales per test token,
  split by the MAP's label being right (and its probability) or wrong, and by how many of the
  token's features are rare in training (seen on at most 3 tokens);
* mean confidence minus accuracy of the MAP and of the average (negative: under-confident).

Run:  .venv/bin/python bench/conll_draw_average.py DRAWS.npy [--train all] [--test 2012]
      [--scales bench/results_conll_nuts_scales_300.json] [--subsets 20] [--fit-from 1]
      [--pairs]
(needs ../shared/data/conll2000)
"""

from __future__ import annotations

import argparse
import json
import warnings

import numpy as np
import scipy.sparse as sp
from conll_data import chunking, map_at_scales, scales_by_group
from conll_learned_scales import SIGMA, with_weights

import pymc_crf as pmc
from pymc_crf.datasets import data_dir


def _weights(fit) -> np.ndarray:
    post = fit["posterior"].to_dataset()
    return np.concatenate([post[v].values[0, 0].ravel() for v in ("W", "T")])


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("draws", help="the .npy file of conll_randomized_map.py --save-draws")
    ap.add_argument("--train", default="all")
    ap.add_argument("--test", type=int, default=2012)
    ap.add_argument("--dev", type=int, default=500)
    ap.add_argument("--scales", default="bench/results_conll_nuts_scales_300.json")
    ap.add_argument("--subsets", type=int, default=20)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--pairs", action="store_true",
                    help="the draws are antithetic pairs (rows 2i, 2i + 1): subsets take whole "
                         "pairs, so every size is even")
    ap.add_argument("--bootstrap", type=int, default=2000,
                    help="resamples of the test sentences for the limit's uncertainty")
    ap.add_argument("--fit-from", type=int, default=1,
                    help="fit a + b / n to the subset sizes n >= this (1/n is the large-n "
                         "behaviour; a large residual over all sizes says to start later)")
    args = ap.parse_args(argv)
    if not data_dir("conll2000").exists():
        print(f"skipped: {data_dir('conll2000')} not found")
        return
    data = chunking(None if args.train == "all" else int(args.train), args.test, n_dev=args.dev)
    test, K, gold = data.test, len(data.classes), data.test.labels
    F = data.train.node_features.shape[1]
    draws = np.load(args.draws, mmap_mode="r")
    if draws.ndim != 2 or draws.shape[1] != F * K + K * K:
        raise ValueError(f"{args.draws} holds {draws.shape}; this model has {F * K + K * K} "
                         "weights: pass the --train, --dev and --scales of the run that saved it")
    with open(args.scales) as f:
        node_sd, edge_sd, _ = scales_by_group(data, json.load(f), SIGMA)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        map1, _ = map_at_scales(data.train, SIGMA, SIGMA, K)
        map_s, _ = map_at_scales(data.train, node_sd, edge_sd, K)

    def marginals(weights: np.ndarray) -> np.ndarray:
        return pmc.predict(with_weights(map1, np.asarray(weights), F, K), test, "bpe").marginals

    def token_loss(marg: np.ndarray) -> np.ndarray:
        return -np.log(np.clip(marg[np.arange(gold.size), gold], 1e-300, None))

    m1, ms = marginals(_weights(map1)), marginals(_weights(map_s))
    n = draws.shape[0]
    per_draw = np.stack([marginals(draws[i]) for i in range(n)])
    loss_1, loss_s = token_loss(m1).mean(), token_loss(ms)
    print(f"{n} draws of {F * K + K * K} weights; {gold.size} test tokens")
    print(f"token log loss: MAP c2 = 1 {loss_1:.4f}, MAP at the scales {loss_s.mean():.4f}")
    rng = np.random.default_rng(args.seed)
    unit = 2 if args.pairs else 1  # draws per unit a subset takes whole
    if n % unit:
        raise ValueError(f"--pairs needs an even number of draws; {args.draws} holds {n}")
    units = n // unit
    sizes = sorted({*[2 ** i for i in range(int(np.log2(units)) + 1)], units})
    print("| draws averaged | token log loss (mean over subsets) | sd over subsets |")
    print("|---|---|---|")
    means, per_token = [], []
    for k in sizes:
        reps = 1 if k == units else args.subsets
        vals, tokens = [], np.zeros(gold.size)
        for _ in range(reps):
            chosen = rng.choice(units, k, replace=False)
            rows = (unit * chosen[:, None] + np.arange(unit)).ravel()
            loss = token_loss(per_draw[rows].mean(0))
            vals.append(loss.mean())
            tokens += loss / reps
        means.append(np.mean(vals))
        per_token.append(tokens)
        print(f"| {unit * k} | {np.mean(vals):.4f} | {np.std(vals):.4f} |")
    sizes = [unit * k for k in sizes]
    tail = np.asarray(sizes) >= args.fit_from
    if tail.sum() < 3:
        raise ValueError(f"--fit-from {args.fit_from} leaves {int(tail.sum())} subset sizes; the "
                         "fit needs 3")
    design = np.column_stack([np.ones(int(tail.sum())), 1.0 / np.asarray(sizes)[tail]])
    (a, b), *_ = np.linalg.lstsq(design, np.asarray(means)[tail], rcond=None)
    resid = np.asarray(means)[tail] - design @ np.array([a, b])
    print(f"fit a + b / n over n >= {args.fit_from}: a = {a:.4f} (the many-draw limit), "
          f"b = {b:.4f}, largest residual {np.abs(resid).max():.4f}; limit minus MAP c2 = 1: "
          f"{a - loss_1:+.4f}, minus MAP at the scales: {a - loss_s.mean():+.4f}")
    # the fit is linear in the subset means, so a is the mean over tokens of the same fit
    # through each token's losses; resampling the test sentences (a cluster bootstrap: a
    # sentence's tokens are not independent) gives the test set's share of the uncertainty
    a_token = np.linalg.pinv(design)[0] @ np.asarray(per_token)[tail]
    lengths = np.array([len(t) for t in data.test_tags])
    starts = np.concatenate([[0], np.cumsum(lengths)[:-1]])
    boot = np.random.default_rng(args.seed + 1)
    for name, ref in (("MAP c2 = 1", token_loss(m1)), ("MAP at the scales", loss_s)):
        diff = np.add.reduceat(a_token - ref, starts)
        picks = boot.integers(0, lengths.size, size=(args.bootstrap, lengths.size))
        reps = diff[picks].sum(1) / lengths[picks].sum(1)
        lo, hi = np.percentile(reps, [2.5, 97.5])
        print(f"limit minus {name}: {diff.sum() / lengths.sum():+.4f}, sentence-bootstrap sd "
              f"{reps.std():.4f}, 95% interval {lo:+.4f} .. {hi:+.4f} ({args.bootstrap} "
              f"resamples of the {lengths.size} test sentences)")
    print(f"the draws' mean as one point: {token_loss(marginals(np.mean(draws, 0))).mean():.4f}")
    avg = per_draw.mean(0)
    delta = token_loss(avg) - loss_s
    right, conf = ms.argmax(1) == gold, ms.max(1)
    print(f"average of all {n} draws minus the MAP at the scales, per token: {delta.mean():+.4f}")
    print("| tokens | share | contribution | mean difference |")
    print("|---|---|---|---|")
    X = sp.csr_matrix(data.train.node_features)
    rare_f = np.asarray((X != 0).sum(axis=0)).ravel() <= 3
    rare = np.asarray((sp.csr_matrix(test.node_features)[:, rare_f] != 0).sum(axis=1)).ravel()
    for name, mask in (("MAP right, p > 0.99", right & (conf > 0.99)),
                       ("MAP right, 0.9 < p <= 0.99", right & (conf > 0.9) & (conf <= 0.99)),
                       ("MAP right, p <= 0.9", right & (conf <= 0.9)),
                       ("MAP wrong", ~right),
                       ("no rare feature", rare == 0),
                       ("1 or more rare features", rare > 0)):
        print(f"| {name} | {mask.mean():.3f} | {delta[mask].sum() / delta.size:+.4f} | "
              f"{delta[mask].mean():+.4f} |")
    print(f"mean confidence minus accuracy: MAP at the scales "
          f"{np.mean(conf - right):+.4f}, average {np.mean(avg.max(1) - (avg.argmax(1) == gold)):+.4f}")


if __name__ == "__main__":
    main()
