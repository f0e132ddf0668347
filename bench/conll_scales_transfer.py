"""CoNLL-2000 chunking at full size with prior scales learned on a subset (issue 40).

The exact posterior of the learned-scale model is out of reach at full size (2.4 million
weights), but the scales of a hierarchical prior describe the population of weights, not the
amount of data. This fits the MAP on every training sentence but the dev split at the scales that
``bench/conll_learned_scales.py --groups template-frequency --nuts N --save-scales FILE`` saved
(NUTS's posterior-mean scales on its subset), one per feature template and training-count bucket
(1, 2-3, 4-15, 16 and more tokens, counted in the full training set), against the MAP at
CRFsuite's prior (c2 = 1, every sd 0.707). A group the subset did not have takes the sd 0.707.

Printed: token log loss, token accuracy, ECE (10 bins) and chunk F1 of the Viterbi labels on the
first ``--test`` test sentences, and the wall time of each MAP.

Run:  .venv/bin/python bench/conll_scales_transfer.py scales.json [--test 2012]
(needs ../shared/data/conll2000)
"""

from __future__ import annotations

import argparse
import json

import numpy as np
from conll_data import chunking, group_names, map_at_scales, scales_by_group

import pymc_crf as pmc
from pymc_crf.datasets import data_dir
from pymc_crf.metrics import chunk_f1, reliability_curve

SIGMA = 0.5 ** 0.5


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("scales", help="JSON written by conll_learned_scales.py --save-scales")
    ap.add_argument("--test", type=int, default=2012)
    ap.add_argument("--dev", type=int, default=500)
    args = ap.parse_args(argv)
    if not data_dir("conll2000").exists():
        print(f"skipped: {data_dir('conll2000')} not found")
        return
    with open(args.scales) as f:
        saved = json.load(f)
    data = chunking(None, args.test, n_dev=args.dev)
    test = data.test
    X, batch = data.train.node_features, data.train.graphs
    K, F = len(data.classes), X.shape[1]
    sd, transition, missing = scales_by_group(data, saved, SIGMA)
    n_groups = len(set(group_names(data)))
    print(f"{batch.n_graphs} training sentences, {F} features, K = {K}: {F * K + K * K} weights; "
          f"scales learned on {saved['train']} sentences, {missing} of {n_groups} groups "
          f"not among them (sd {SIGMA:.3f})")
    print("| fit | token log loss | token accuracy | ECE | chunk F1 | wall time (s) |")
    print("|---|---|---|---|---|---|")
    for name, node_sd, edge_sd in (("MAP, c2 = 1", np.full(F, SIGMA), SIGMA),
                                   ("MAP at the transferred scales", sd, transition)):
        fit, wall = map_at_scales(data.train, node_sd, edge_sd, K)
        marg = pmc.predict(fit, test, "bpe").marginals
        gold = test.labels
        p = np.clip(marg[np.arange(gold.size), gold], 1e-300, None)
        f1 = chunk_f1(data.test_tags, data.tags(pmc.predict(fit, test, "map").labels)).f1
        print(f"| {name} | {-np.mean(np.log(p)):.4f} | {np.mean(marg.argmax(1) == gold):.4f} | "
              f"{reliability_curve(marg, gold, n_bins=10).ece:.4f} | {f1:.2f} | {wall:.0f} |",
              flush=True)


if __name__ == "__main__":
    main()
