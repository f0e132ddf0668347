"""MAP stopping rules: ``pmc.fit(method="map")`` with the delta rule (default) and the strict rule
against CRFsuite, each timed in a fresh process.

Run:  .venv/bin/python bench/bench_map_stopping.py [--repeats 3] [--c2 1.0]
      [--data synthetic|conll2000|ptb] [--no-strict]

Data (``--data synthetic``, the default): a synthetic stand-in of the size of an OCR-style chain
task (the handwritten-word data sets): 626 training sequences of length 4-14 (uniform), K = 26
labels, 129 dense node features in [0, 1] (128 "pixels" and a bias column of ones), and 626
held-out test sequences. Labels follow an HMM-like chain (a random sparse transition matrix:
each label has 5 likely successors); the pixels of a position are its label's prototype ``0.5 +
0.3 (b - 0.5)``, ``b ~ Beta(0.5, 0.5)`` per pixel, plus N(0, 0.45^2) noise, clipped to [0, 1]
(the nearest prototype alone mislabels about 30 % of positions). Seeded: every process builds
the same data.
``--data conll2000``: the CoNLL-2000 chunking corpus (8,936 training, 2,012 test sentences) with
sklearn-crfsuite's tutorial features (``pmc.datasets.token_features``) through ``pmc.FeatureVectorizer``;
``--data ptb``: the Penn Treebank WSJ sample (POS tags; section 00 trains, the rest tests, as
``examples/ptb_pos.py``), same template without POS columns. Both read ``../shared/data``.
CRFsuite gets exactly the vectorizer's columns (``features.crfsuite_fit_predict``).

Learners (same objective: node weights (129, K), one (K, K) transition table, Normal(0, sigma)
prior with ``sigma^2 = 1 / (2 c2)``, i.e. CRFsuite's ``c2 ||w||^2`` with every attribute x label
and label x label feature present):

* ``map delta``: ``pmc.fit(model, method="map")``, the default rule (relative improvement below
  1e-6 over 10 iterations: CRFsuite's ``delta`` / ``period`` test, a tighter ``delta``);
* ``map strict``: ``rule="strict"`` (gtol 1e-8, ftol 1e-15, the Laplace methods' rule);
* ``CRFsuite``: python-crfsuite, ``lbfgs``, ``c2``, its default ``delta`` 1e-5 / ``period`` 10
  (and ``epsilon`` 1e-5); the attributes are the columns, with their values.

Each timed fit runs in its own fresh Python process (``subprocess``: imports done, including
``pymc_crf.fitters``, which ``pmc.fit`` would otherwise import on first use; data built; then the
clock starts): ours times model construction + ``pmc.fit``, CRFsuite times ``train``
only (its data loading excluded), as ``bench_conll.py`` does. One untimed warm-up process first
fills numba's on-disk cache, so no timed run compiles. Printed: per learner the median (and the
individual) wall and CPU times over ``--repeats`` fresh processes, iterations, the test token
error, and the ratios of map to CRFsuite (target of issue 38: at most 0.6 at equal test error,
+-0.002). BLAS and the package's kernels run single-threaded (CRFsuite is single-threaded).
"""

from __future__ import annotations

import os
import sys

for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS",
             "PYMC_CRF_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import argparse  # noqa: E402
import json  # noqa: E402
import subprocess  # noqa: E402
import time  # noqa: E402

import numpy as np  # noqa: E402

N_TRAIN = N_TEST = 626
K, PIXELS = 26, 128


def make_data(seed: int = 0):
    """(train lengths, X, y), (test lengths, X, y): module docstring."""
    rng = np.random.default_rng(seed)
    proto = 0.5 + 0.3 * (rng.beta(0.5, 0.5, size=(K, PIXELS)) - 0.5)
    trans = np.full((K, K), 0.02)
    for a in range(K):
        trans[a, rng.choice(K, 5, replace=False)] += rng.dirichlet(np.ones(5)) * 3.0
    trans /= trans.sum(1, keepdims=True)

    def draw(n):
        lengths = rng.integers(4, 15, size=n)
        ys = []
        for n_i in lengths:
            y = [rng.integers(K)]
            for _ in range(n_i - 1):
                y.append(rng.choice(K, p=trans[y[-1]]))
            ys.append(y)
        y = np.concatenate(ys).astype(np.int64)
        pix = np.clip(proto[y] + rng.normal(0.0, 0.45, size=(y.size, PIXELS)), 0.0, 1.0)
        X = np.hstack([pix, np.ones((y.size, 1))])
        return lengths, X, y

    return draw(N_TRAIN), draw(N_TEST)


def text_data(name: str):
    """The vectorizer, (train lengths, X, y, tags), (test lengths, X, y) and K of a text corpus."""
    import pymc_crf as pmc
    from pymc_crf.datasets import read_conll2000, read_ptb_sample, token_features
    from pymc_crf.features import encode_tags

    if name == "conll2000":
        words, pos, tags = read_conll2000("train")
        twords, tpos, ttags = read_conll2000("test")
        feats = [token_features(w, p) for w, p in zip(words, pos, strict=True)]
        tfeats = [token_features(w, p) for w, p in zip(twords, tpos, strict=True)]
    else:
        sents, all_tags = read_ptb_sample()
        section_00 = 1921  # sentences of wsj_0001 .. wsj_0099 (examples/ptb_pos.py)
        words, tags = sents[:section_00], all_tags[:section_00]
        twords, ttags = sents[section_00:], all_tags[section_00:]
        feats, tfeats = [token_features(w) for w in words], [token_features(w) for w in twords]
    vec = pmc.FeatureVectorizer(min_freq=1)
    X, Xt = vec.fit_transform(feats), vec.transform(tfeats)
    classes = sorted({t for s in list(tags) + list(ttags) for t in s})
    y, _ = encode_tags(tags, classes)
    yt, _ = encode_tags(ttags, classes)
    lens, tlens = np.array([len(w) for w in words]), np.array([len(w) for w in twords])
    return vec, (lens, X, y, tags), (tlens, Xt, yt), len(classes), classes


def load(name: str):
    """(train lengths, X, y), (test lengths, X, y), K of ``--data``."""
    if name == "synthetic":
        return (*make_data(), K)
    _, (lens, X, y, _), test, k, _ = text_data(name)
    return (lens, X, y), test, k


def split(flat, lengths):
    out, i = [], 0
    for n in lengths:
        out.append(flat[i:i + n])
        i += n
    return out


def run_ours(rule: str, c2: float, data: str) -> dict:
    import pymc as pm

    import pymc_crf as pmc
    import pymc_crf.fitters  # noqa: F401  (pmc.fit imports it lazily: an import, not the fit)
    from pymc_crf.features import sequence_batch

    (lens, X, y), (tlens, Xt, yt), K = load(data)
    sigma = (1.0 / (2.0 * c2)) ** 0.5
    t0, c0 = time.perf_counter(), time.process_time()
    with pm.Model() as model:
        W = pm.Normal("W", 0.0, sigma, shape=(X.shape[1], K))
        T = pm.Normal("T", 0.0, sigma, shape=(K, K))
        pmc.CRF("y", graphs=sequence_batch(lens), node_features=X, node_weights=W,
                edge_weights=T, observed=y)
    fit = pmc.fit(model, method="map", rule=rule, log_likelihood=False, progressbar=False)
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    pred = pmc.predict(fit, pmc.CRFData(sequence_batch(tlens), None, Xt, n_labels=K), "map").labels
    opt = fit.optimizer_result
    return {"wall": wall, "cpu": cpu, "iterations": int(opt.n_iterations),
            "error": float(np.mean(np.asarray(pred) != yt)), "objective": float(opt.objective),
            "success": bool(opt.success), "message": str(opt.message.values),
            "pred": np.asarray(pred).tolist()}


def run_crfsuite(c2: float, data: str) -> dict:
    import tempfile

    import pycrfsuite

    if data != "synthetic":
        from pymc_crf.features import crfsuite_fit_predict

        vec, (lens, X, y, tags), (tlens, Xt, yt), _, classes = text_data(data)
        cs = crfsuite_fit_predict(vec, X, lens, tags, Xt, tlens, c2=c2)
        index = {c: i for i, c in enumerate(classes)}
        pred = np.array([index[t] for s in cs.tags for t in s])
        return {"wall": cs.wall_time, "cpu": cs.cpu_time, "iterations": cs.n_iterations,
                "error": float(np.mean(pred != yt)), "objective": float("nan"),
                "success": True, "message": "", "pred": pred.tolist()}
    (lens, X, y), (tlens, Xt, yt) = make_data()
    names = [f"x{j}" for j in range(X.shape[1])]

    def items(M, lengths):
        return [[dict(zip(names, row.tolist(), strict=True)) for row in seq]
                for seq in split(M, lengths)]

    trainer = pycrfsuite.Trainer(verbose=False)
    for xs, ys in zip(items(X, lens), split(y, lens), strict=True):
        trainer.append(xs, [str(v) for v in ys])
    trainer.select("lbfgs")
    trainer.set_params({"c1": 0.0, "c2": float(c2), "feature.possible_states": True,
                        "feature.possible_transitions": True})
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "model.crfsuite")
        t0, c0 = time.perf_counter(), time.process_time()
        trainer.train(path)
        wall, cpu = time.perf_counter() - t0, time.process_time() - c0
        tagger = pycrfsuite.Tagger()
        tagger.open(path)
        pred = np.concatenate([[int(t) for t in tagger.tag(xs)] for xs in items(Xt, tlens)])
        tagger.close()
    last = trainer.logparser.last_iteration
    return {"wall": wall, "cpu": cpu, "iterations": int(last["num"]),
            "error": float(np.mean(pred != yt)), "objective": float(last["loss"]),
            "success": True, "message": "", "pred": pred.tolist()}


def fresh(args: list[str]) -> dict:
    """One learner in a fresh Python process; its JSON line."""
    out = subprocess.run([sys.executable, __file__, "--child", *args], check=True,
                         capture_output=True, text=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--c2", type=float, default=1.0)
    ap.add_argument("--data", choices=["synthetic", "conll2000", "ptb"], default="synthetic")
    ap.add_argument("--no-strict", action="store_true",
                    help="leave out the strict rule (the default rule against CRFsuite only)")
    ap.add_argument("--child", nargs="+", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        kind = args.child[0]
        res = (run_crfsuite(args.c2, args.data) if kind == "crfsuite"
               else run_ours(kind, args.c2, args.data))
        print(json.dumps(res))
        return
    (lens, X, _), (tlens, _, _), k = load(args.data)
    print(f"data {args.data}: train {lens.size} sequences ({lens.sum()} positions), test "
          f"{tlens.size} ({tlens.sum()} positions), K = {k}, F = {X.shape[1]} features; "
          f"c2 = {args.c2} (sigma = {(1 / (2 * args.c2)) ** 0.5:.4f})")
    common = ["--c2", str(args.c2), "--data", args.data]
    fresh(["delta", *common])  # warm-up: numba's cache, not timed
    learners = {"map delta": ["delta"], "map strict": ["strict"], "CRFsuite": ["crfsuite"]}
    if args.no_strict:
        del learners["map strict"]
    runs: dict[str, list[dict]] = {k: [] for k in learners}
    for _ in range(args.repeats):  # interleaved rounds: each round sees the same machine
        for name, a in learners.items():
            runs[name].append(fresh([*a, *common]))
    print(f"\n{'learner':12s} {'wall s (median; runs)':>34s} {'CPU s':>7s} {'iters':>6s} "
          f"{'test error':>11s} {'objective':>12s} success")
    med = {}
    for name, rs in runs.items():
        wall = [r["wall"] for r in rs]
        med[name] = (float(np.median(wall)), float(np.median([r["cpu"] for r in rs])))
        r0 = rs[0]
        print(f"{name:12s} {med[name][0]:8.2f} ({', '.join(f'{w:.2f}' for w in wall):>22s}) "
              f"{med[name][1]:7.2f} {r0['iterations']:6d} {r0['error']:11.4f} "
              f"{r0['objective']:12.3f} {r0['success']}")
    delta = runs["map delta"][0]
    if "map strict" in runs:
        strict = runs["map strict"][0]
        changed = int(np.sum(np.asarray(delta["pred"]) != np.asarray(strict["pred"])))
        print(f"\ntest labels that differ between map delta and map strict: {changed} of "
              f"{len(delta['pred'])}")
    for name in (n for n in ("map delta", "map strict") if n in runs):
        print(f"ratio {name} / CRFsuite: wall {med[name][0] / med['CRFsuite'][0]:.2f}, CPU "
              f"{med[name][1] / med['CRFsuite'][1]:.2f}; test error difference "
              f"{runs[name][0]['error'] - runs['CRFsuite'][0]['error']:+.4f} "
              "(target: wall ratio <= 0.6 at +-0.002)")
    print(f"map delta stop: {delta['message']}")


if __name__ == "__main__":
    main()
