"""Learned prior scales from the sklearn interface: ``CRFTagger(c2="learned")`` against
CRFsuite's default ``CRFTagger(c2=1)`` on CoNLL-2000 chunking (issue 40).

Both taggers are fitted through ``pmc.CRFTagger`` on the first ``--train`` training sentences
(CRFsuite's token template, ``pmc.datasets.token_features``) and scored on the first ``--test``
test sentences: token log loss and ECE (10 bins) of the MAP's marginals, and chunk F1 of its
Viterbi labels (log loss and ECE over the test tokens whose tag the training sentences have;
chunk F1 over all). ``c2="learned"`` integrates over one ``HalfNormal(1)`` prior scale per
feature template and training-count bucket (and the transitions') by the randomized MAP's Gibbs
sweeps,
then fits the MAP at their posterior means; its sweeps run on a local Dask cluster of
``--workers`` processes (0: in this process). Printed: the table with wall times, and the
learned scales' range.

Run:  .venv/bin/python bench/conll_tagger_learned.py [--train 300] [--test 2012] [--workers 2]
      [--chains 2 --tune 30 --draws 70 --refine 10]
(needs ../shared/data/conll2000)
"""

from __future__ import annotations

import argparse
import time
import warnings

import numpy as np
from conll_data import tagger_split
from conll_randomized_map import _client

from pymc_crf import CRFTagger
from pymc_crf.datasets import data_dir
from pymc_crf.metrics import chunk_f1, expected_calibration_error
from pymc_crf.tagger import LEARNED_SCALE_OPTIONS


def _scores(tagger: CRFTagger, X, gold) -> tuple[float, float, float]:
    """Token log loss and ECE of the MAP's marginals, and chunk F1 of its labels."""
    marg = tagger.marginals_array(X, average=False)
    index = {t: k for k, t in enumerate(tagger.classes_)}
    flat = np.array([index.get(t, -1) for s in gold for t in s])
    seen = flat >= 0  # tokens whose tag the training sentences have
    p = marg[np.flatnonzero(seen), flat[seen]]
    loss = float(-np.log(np.clip(p, 1e-300, None)).mean())
    ece = expected_calibration_error(marg[seen], flat[seen])
    return loss, ece, chunk_f1(gold, tagger.predict(X)).f1


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--train", type=int, default=300)
    ap.add_argument("--test", type=int, default=2012)
    ap.add_argument("--workers", type=int, default=2)
    for k, v in LEARNED_SCALE_OPTIONS.items():
        ap.add_argument(f"--{k}", type=int, default=v)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    if not data_dir("conll2000").exists():
        print(f"skipped: {data_dir('conll2000')} not found")
        return
    X, y, Xt, tchunks = tagger_split(args.train, args.test)
    warnings.simplefilter("ignore")
    CRFTagger().fit(X[:20], y[:20])  # compile the MAP's kernels outside the timings
    tags = {t for s in y for t in s}
    unseen = sum(t not in tags for s in tchunks for t in s)
    print(f"{len(X)} training sentences, {len(Xt)} test sentences ({sum(map(len, Xt))} tokens, "
          f"{unseen} of them with a tag the training sentences lack)")
    print("| tagger | token log loss | ECE | chunk F1 | wall time (s) |")
    print("|---|---|---|---|---|")
    t0 = time.perf_counter()
    base = CRFTagger(c2=1.0).fit(X, y)
    t_base = time.perf_counter() - t0
    loss, ece, f1 = _scores(base, Xt, tchunks)
    print(f"| CRFTagger(c2=1) | {loss:.4f} | {ece:.4f} | {f1:.2f} | {t_base:.1f} |", flush=True)
    opts = {k: getattr(args, k) for k in LEARNED_SCALE_OPTIONS}
    with _client(args.workers) as client:
        t0 = time.perf_counter()
        learned = CRFTagger(c2="learned", random_state=args.seed,
                            scale_options={**opts, "client": client}).fit(X, y)
        t_learned = time.perf_counter() - t0
    loss, ece, f1 = _scores(learned, Xt, tchunks)
    print(f"| CRFTagger(c2=\"learned\"), {opts} | {loss:.4f} | {ece:.4f} | {f1:.2f} | "
          f"{t_learned:.1f} |")
    s = np.array(list(learned.prior_scales_.values()))
    print(f"{s.size} learned prior sds (posterior means): median {np.median(s):.3g}, range "
          f"{s.min():.3g} .. {s.max():.3g}; transitions {learned.prior_scales_['transitions']:.3g}")


if __name__ == "__main__":
    main()
