"""CoNLL-2000 on Dask: data-parallel MAP and distributed prediction against the local calls.

Run:  nice -n 5 .venv/bin/python bench/bench_dask.py [--workers 2] [--shards 4] [--sentences N]

One run, three ways of fitting the MAP of ``bench/bench_conll.py``'s model (CRFsuite's chunking
template, F x K node weights and a K x K transition table, Normal(0, 1/sqrt(2 c2)) priors, c2 = 1;
``ftol`` 1e-6, ``gtol`` 1e-5) on the full training split and labelling the test split (``"map"``):

1. **worker-side** (``pmc.distributed``): the workers count the vocabulary and build their shards
   from sentence ranges of the gzip file (``conll_vocabulary``, ``conll_shards``); ``fit_map`` with
   a one-sentence template model; ``predict`` of test shards built on the workers likewise. The
   client never holds the corpus.
2. **local**: the corpus read and vectorised in this process, ``pmc.fit(method="map")``,
   ``pmc.predict``.
3. **in-memory** (``pmc.distributed.fit_map(model, client, n_shards)``): the local model's graphs
   split into shards on the client and scattered; ``pmc.distributed.predict`` of the local test
   data in ``--shards`` partitions.

Printed per phase: wall time, and the client's peak resident memory above its level at the start
of the phase (``/proc/self/statm`` sampled every 20 ms by a thread: a lower bound where the
phase reuses pages freed before it; the phases run in the order above so the worker-side one
starts from the smallest client). Workers are processes with one thread each (and one BLAS
thread, as ``bench_conll.py``); their start and a warm-up fit (numba kernels load on first use in
each process) are outside the timings. Also printed: iterations, objectives, the largest
difference between the weights of each distributed fit and the local one (L-BFGS stops on the
objective's rounding, so not zero), and whether the predicted labels equal the local call's.
"""

from __future__ import annotations

import os
import sys

for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS", "PYMC_CRF_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import argparse  # noqa: E402
import logging  # noqa: E402
import resource  # noqa: E402
import threading  # noqa: E402
import time  # noqa: E402
import warnings  # noqa: E402
from contextlib import contextmanager  # noqa: E402

import numpy as np  # noqa: E402
import pymc as pm  # noqa: E402

import pymc_crf as pmc  # noqa: E402
from pymc_crf import distributed as dist  # noqa: E402
from pymc_crf.datasets import data_dir, read_conll2000, token_features  # noqa: E402
from pymc_crf.features import encode_tags, sequence_batch  # noqa: E402

PAGE = os.sysconf("SC_PAGE_SIZE")


def rss_bytes() -> int:
    with open("/proc/self/statm") as fh:
        return int(fh.read().split()[1]) * PAGE


@contextmanager
def measured(label: str, rows: list):
    """Wall time and peak RSS above the starting RSS of the block (sampled every 20 ms)."""
    start = rss_bytes()
    peak = [start]
    stop = threading.Event()

    def sample():
        while not stop.is_set():
            peak[0] = max(peak[0], rss_bytes())
            stop.wait(0.02)

    th = threading.Thread(target=sample, daemon=True)
    th.start()
    t0 = time.perf_counter()
    try:
        yield
    finally:
        wall = time.perf_counter() - t0
        stop.set()
        th.join()
        peak[0] = max(peak[0], rss_bytes())
        rows.append((label, wall, (peak[0] - start) / 2**20))
        print(f"  {label}: {wall:.1f} s, client peak +{(peak[0] - start) / 2**20:.0f} MB",
              flush=True)


def chain_model(X, y, lengths, K: int, sigma: float) -> pm.Model:
    F = X.shape[1]
    with pm.Model() as model:
        W = pm.Normal("W", 0.0, sigma, shape=(F, K))
        T = pm.Normal("T", 0.0, sigma, shape=(K, K))
        pmc.CRF("y", graphs=sequence_batch(lengths), node_features=X, node_weights=W,
                edge_weights=T, observed=y)
    return model


def template_model(path, vec, classes, sigma):
    """The model on the file's first sentence: the weights, priors and engine of the fit."""
    words, pos, tags = dist.read_conll_range(path, 0, 1)
    X = vec.transform([token_features(w, p) for w, p in zip(words, pos, strict=True)])
    y, _ = encode_tags(tags, classes)
    return chain_model(X, y, [len(words[0])], len(classes), sigma)


def weights(result) -> np.ndarray:
    return np.concatenate([result["posterior"][n].values.ravel() for n in ("W", "T")])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--shards", type=int, default=4)
    ap.add_argument("--sentences", type=int, default=None, help="first N training sentences")
    ap.add_argument("--c2", type=float, default=1.0)
    ap.add_argument("--ftol", type=float, default=1e-6)
    args = ap.parse_args()
    folder = data_dir("conll2000")
    if not folder.exists():
        sys.exit(f"skipped: {folder} not found (the shared data folder)")
    from distributed import Client, LocalCluster

    logging.getLogger("distributed").setLevel(logging.ERROR)
    train_path, test_path = folder / "train.txt.gz", folder / "test.txt.gz"
    sigma = (1.0 / (2.0 * args.c2)) ** 0.5
    opts = {"ftol": args.ftol, "gtol": 1e-5, "progressbar": False}
    n_train = args.sentences or dist.count_sentences(train_path)
    n_test = dist.count_sentences(test_path)
    rows: list = []
    env = {k: os.environ[k] for k in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS",
                                      "MKL_NUM_THREADS", "PYMC_CRF_NUM_THREADS", "PYTHONPATH",
                                      "PYMC_CRF_DATA") if k in os.environ}
    print(f"{args.workers} worker processes x 1 thread, {args.shards} shards; {n_train} training "
          f"and {n_test} test sentences; load average {os.getloadavg()[0]:.1f}", flush=True)
    cluster = LocalCluster(n_workers=args.workers, threads_per_worker=1, processes=True,
                           dashboard_address=None, env=env)
    client = Client(cluster)
    try:
        # warm-up outside the timings: numba kernels load in each process on first use
        warm_ranges = dist.sentence_ranges(40, args.workers)
        wvec, wcls = dist.conll_vocabulary(client, train_path, warm_ranges)
        wshards = dist.conll_shards(client, train_path, warm_ranges, wvec, wcls)
        with warnings.catch_warnings():  # 5 iterations do not converge, by design
            warnings.simplefilter("ignore", pmc.ConvergenceWarning)
            wfit = dist.fit_map(template_model(train_path, wvec, wcls, sigma), client,
                                shards=wshards, maxiter=5,
                                **{k: v for k, v in opts.items() if k != "ftol"})
        dist.predict(wfit, wshards, "map", client=client)
        del wshards

        print("worker-side shards:", flush=True)
        ranges = dist.sentence_ranges(n_train, args.shards)
        test_ranges = dist.sentence_ranges(n_test, args.shards)
        with measured("worker-side: vocabulary + shards", rows):
            vec, classes = dist.conll_vocabulary(client, train_path, ranges)
            _, test_tags = dist.conll_vocabulary(client, test_path, test_ranges)
            classes = sorted(set(classes) | set(test_tags))  # I-LST: test split only
            shards = dist.conll_shards(client, train_path, ranges, vec, classes)
            client.gather(client.map(lambda s: s.graphs.n_graphs, shards, pure=False))
        with measured("worker-side: fit_map", rows):
            fit_w = dist.fit_map(template_model(train_path, vec, classes, sigma), client,
                                 shards=shards, **opts)
        test_shards = dist.conll_shards(client, test_path, test_ranges, vec, classes)
        client.gather(client.map(lambda s: s.graphs.n_graphs, test_shards, pure=False))
        with measured("worker-side: predict (test shards on the workers)", rows):
            pred_w = dist.predict(fit_w, test_shards, "map", client=client)
        with measured("worker-side: predict again", rows):
            pred_w = dist.predict(fit_w, test_shards, "map", client=client)
        del shards, test_shards

        print("local:", flush=True)
        with measured("local: read + features", rows):
            words, pos, chunks = read_conll2000("train")
            words, pos, chunks = words[:n_train], pos[:n_train], chunks[:n_train]
            twords, tpos, tchunks = read_conll2000("test")
            local_vec = pmc.FeatureVectorizer(min_freq=1)
            X = local_vec.fit_transform([token_features(w, p)
                                         for w, p in zip(words, pos, strict=True)])
            Xt = local_vec.transform([token_features(w, p)
                                      for w, p in zip(twords, tpos, strict=True)])
            y, _ = encode_tags(chunks, classes)
            yt, _ = encode_tags(tchunks, classes)
        with measured("local: model + pmc.fit(map)", rows):
            model = chain_model(X, y, [len(s) for s in words], len(classes), sigma)
            fit_l = pmc.fit(model, method="map", **opts)  # ftol, gtol: the strict rule
        test = pmc.CRFData(sequence_batch(twords), yt, Xt, n_labels=len(classes))
        with measured("local: pmc.predict", rows):
            pred_l = pmc.predict(fit_l, test, "map")

        print("in-memory model on Dask:", flush=True)
        with measured("in-memory: distributed.fit_map(model, n_shards)", rows):
            fit_m = dist.fit_map(model, client, args.shards, log_likelihood=False, **opts)
        parts = [test.subset(np.arange(a, b)) for a, b in test_ranges]
        with measured("in-memory: distributed.predict (partitions scattered)", rows):
            pred_m = dist.predict(fit_l, parts, "map", client=client)
    finally:
        client.close()
        cluster.close()

    print(f"\nF = {X.shape[1]} features, K = {len(classes)}, d = {weights(fit_l).size} weights; "
          f"vocabulary equal: {vec.vocabulary_ == local_vec.vocabulary_}")
    print(f"{'phase':58s} {'wall s':>8s} {'client peak MB':>15s}")
    for label, wall, mb in rows:
        print(f"{label:58s} {wall:8.1f} {mb:15.0f}")
    for label, fit in (("local", fit_l), ("worker-side", fit_w), ("in-memory", fit_m)):
        o = fit["optimizer_result"]
        print(f"{label:12s} iterations {int(o.n_iterations):4d}, objective {float(o.objective):.3f}, "
              f"max |w - w_local| {np.max(np.abs(weights(fit) - weights(fit_l))):.2e}")
    print(f"test token accuracy: local {1 - pred_l.error_rate:.4f}, worker-side fit "
          f"{1 - pred_w.error_rate:.4f}; distributed predict of the local fit equals the local "
          f"call: {np.array_equal(pred_m.labels, pred_l.labels)} (labels), "
          f"{np.array_equal(pred_m.marginals, pred_l.marginals)} (marginals)")
    print(f"client process peak RSS over the run: "
          f"{resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20:.2f} GB; load average "
          f"{os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
