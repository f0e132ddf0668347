"""CoNLL-2000 chunking: ``pmc.fit(method="map")`` against python-crfsuite on the same objective.

Run:  nice -n 5 .venv/bin/python bench/bench_conll.py [--c2 1.0] [--ftol 1e-6] [--sentences N]
      [--user-blas]

Both learners get exactly the same features: sklearn-crfsuite's tutorial features (``token_features``,
+-2 window) mapped by ``pmc.FeatureVectorizer(min_freq=1)``; CRFsuite reads them back through
``FeatureVectorizer.inverse_transform``, so its attributes are our columns. The objective is the same
L2-penalised log-likelihood: CRFsuite minimises ``-log L + c2 ||w||^2`` with every attribute x label
and label x label feature present (``feature.possible_states`` / ``possible_transitions``), which is
``pmc.CRF`` with node weights (F, K), one (K, K) transition table and a Normal(0, sigma) prior,
``sigma^2 = 1 / (2 c2)``. Both use L-BFGS; CRFsuite stops when the objective improves by less
than ``delta`` (relative) over ``period`` = 10 iterations, ours (``pymc_crf.fitters.lbfgs`` at this
size) when it improves by less than ``ftol`` (relative) in one iteration.

Printed: training wall and CPU time of each (ours: model construction + ``pmc.fit``; CRFsuite:
``train`` only, its data loading excluded), their ratios (target <= 0.6; on a loaded shared machine
the CPU-time ratio is the fair one, both learners being single-threaded here), iterations, test
chunk F1 (conlleval rules, ``pmc.metrics.chunk_f1``; target: within 0.3 points of CRFsuite) and
token accuracy, and the
process's peak resident memory after our fit (``resource.getrusage``, target < 4 GB). With
``--crfsuite-default`` a second CRFsuite run with its default sparse feature set (only attribute x
label pairs seen in training) is printed for reference.
"""

from __future__ import annotations

import os
import sys

# CRFsuite is single-threaded; so is this run (the CPU-time ratio compares like with like). The
# package's chain kernels follow PYMC_CRF_NUM_THREADS (pymc_crf.threads) and run in one thread
# here too. ``--user-blas`` keeps the environment's settings instead (a user's process: BLAS
# with a thread per core), before numpy loads.
USER_BLAS = "--user-blas" in sys.argv[1:]
if not USER_BLAS:
    for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS",
                 "PYMC_CRF_NUM_THREADS"):
        os.environ.setdefault(_var, "1")

import argparse  # noqa: E402
import resource  # noqa: E402
import time  # noqa: E402

import numpy as np  # noqa: E402
import pymc as pm  # noqa: E402

import pymc_crf as pmc  # noqa: E402
from pymc_crf.datasets import data_dir, read_conll2000, token_features  # noqa: E402
from pymc_crf.features import crfsuite_fit_predict, encode_tags, sequence_batch  # noqa: E402
from pymc_crf.metrics import chunk_f1  # noqa: E402


def peak_rss_gb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20  # kB on Linux


def split(flat, lengths):
    out, i = [], 0
    for n in lengths:
        out.append(flat[i:i + n])
        i += n
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--c2", type=float, default=1.0)
    ap.add_argument("--ftol", type=float, default=1e-6)
    ap.add_argument("--delta", type=float, default=1e-5)
    ap.add_argument("--sentences", type=int, default=None, help="first N training sentences")
    ap.add_argument("--crfsuite-default", action="store_true",
                    help="also train CRFsuite with its default (sparse) feature set")
    ap.add_argument("--user-blas", action="store_true",
                    help="keep the environment's BLAS thread settings (default: one thread)")
    args = ap.parse_args()
    if not data_dir("conll2000").exists():
        sys.exit(f"skipped: {data_dir('conll2000')} not found (the shared data folder)")

    words, pos, chunks = read_conll2000("train")
    twords, tpos, tchunks = read_conll2000("test")
    if args.sentences:
        words, pos, chunks = words[:args.sentences], pos[:args.sentences], chunks[:args.sentences]
    t0 = time.perf_counter()
    vec = pmc.FeatureVectorizer(min_freq=1)
    X = vec.fit_transform([token_features(w, p) for w, p in zip(words, pos, strict=True)])
    Xt = vec.transform([token_features(w, p) for w, p in zip(twords, tpos, strict=True)])
    classes = sorted({t for s in chunks + tchunks for t in s})
    y, _ = encode_tags(chunks, classes)
    K, F = len(classes), X.shape[1]
    print(f"features: {time.perf_counter() - t0:.1f} s; train {len(words)} sentences, "
          f"{X.shape[0]} tokens, F = {F} features, nnz = {X.nnz}, K = {K}; test {Xt.shape[0]} "
          f"tokens, {vec.n_unseen_} unseen feature occurrences ignored")
    sigma = (1.0 / (2.0 * args.c2)) ** 0.5
    gold = tchunks

    # ---- ours
    t0, c0 = time.perf_counter(), time.process_time()
    batch = sequence_batch(words)
    with pm.Model() as model:
        W = pm.Normal("W", 0.0, sigma, shape=(F, K))
        T = pm.Normal("T", 0.0, sigma, shape=(K, K))
        pmc.CRF("y", graphs=batch, node_features=X, node_weights=W, edge_weights=T, observed=y)
    fit = pmc.fit(model, method="map", ftol=args.ftol, gtol=1e-5, log_likelihood=False)
    ours_wall, ours_cpu = time.perf_counter() - t0, time.process_time() - c0
    ours_iter = int(fit.optimizer_result.n_iterations)
    rss = peak_rss_gb()
    test = pmc.CRFData(sequence_batch(twords), None, Xt, n_labels=K)
    pred = pmc.predict(fit, test, "map").labels
    ours_pred = split([classes[i] for i in pred], [len(s) for s in twords])

    # ---- CRFsuite (same features, read back from our matrix)
    rows = [("pmc.fit(map)", ours_wall, ours_cpu, ours_iter, ours_pred)]
    runs = [("CRFsuite (same objective)", True)]
    if args.crfsuite_default:
        runs.append(("CRFsuite (default, sparse)", False))
    for label, all_pairs in runs:
        cs = crfsuite_fit_predict(vec, X, [len(s) for s in words], chunks, Xt,
                                  [len(s) for s in twords], c2=args.c2, all_pairs=all_pairs,
                                  delta=args.delta)
        rows.append((label, cs.wall_time, cs.cpu_time, cs.n_iterations, cs.tags))

    flat_gold = [t for s in gold for t in s]
    print("\nBLAS threads: " + ("as the environment sets them" if USER_BLAS else "one"))
    print(f"c2 = {args.c2} (sigma = {sigma:.4f}); ours ftol = {args.ftol}, CRFsuite delta = "
          f"{args.delta}, period 10")
    print(f"{'learner':28s} {'wall s':>8s} {'CPU s':>8s} {'iters':>6s} {'chunk F1':>9s} "
          f"{'token acc':>10s}")
    for label, wall, cpu, n_iter, p in rows:
        score = chunk_f1(gold, p)
        acc = np.mean([a == b for a, b in zip(flat_gold, [t for s in p for t in s], strict=True)])
        print(f"{label:28s} {wall:8.1f} {cpu:8.1f} {n_iter:6d} {score.f1:9.2f} {100 * acc:10.2f}")
    print(f"\nratio ours / CRFsuite (same objective): wall {rows[0][1] / rows[1][1]:.2f}, CPU "
          f"{rows[0][2] / rows[1][2]:.2f} (target <= 0.6)")
    print(f"peak RSS after our fit: {rss:.2f} GB (target < 4)")
    print(f"our optimizer: {fit.optimizer_result.message.values}; objective "
          f"{float(fit.optimizer_result.objective):.3f}")


if __name__ == "__main__":
    main()
