"""Luo, Sun & Zhao, table V and the Japanese vowels speaker task: BP-HCRF VI vs MAP-HCRF.

Run::

    .venv/bin/python bench/hcrf_tables.py [--splits 5] [--restarts 2] [--max-iter 20]
                                          [--skip-vowels] [--skip-hmm]

Prints markdown tables (accuracy per split, mean and sd, inferred active states, wall times).
The vowels part reads ``../shared/data/japanese_vowels`` relative to the repository root (or
``$JAPANESE_VOWELS_DIR``) and is skipped with a message when that folder is absent.
"""

from __future__ import annotations

import argparse
import gzip
import os
import time
from pathlib import Path

import numpy as np
import pymc as pm

from pymc_crf.datasets.hmm import SequenceData, hmm_classes
from pymc_crf.distributions.hcrf import HCRF, from_sequences
from pymc_crf.fitters.beta_process import predict_bp_hcrf
from pymc_crf.fitters.predictors import predict_hcrf_average
from pymc_crf.fitters.registry import fit

REPO_ROOT = Path(__file__).resolve().parent.parent
VOWELS = Path(os.environ.get("JAPANESE_VOWELS_DIR",
                             REPO_ROOT.parent / "shared" / "data" / "japanese_vowels"))


def hcrf_model(data: SequenceData, S: int, prior_sd: float = 3.0) -> pm.Model:
    F, C = data.node_features.shape[1], data.n_classes
    with pm.Model() as model:
        tx = pm.Normal("theta_x", 0.0, prior_sd, shape=(F, S))
        ty = pm.Normal("theta_y", 0.0, prior_sd, shape=(S, C))
        te = pm.Normal("theta_e", 0.0, prior_sd, shape=(S, S, C))
        HCRF("y", graphs=data.graphs, node_features=data.node_features, theta_x=tx,
             theta_y=ty, theta_e=te, observed=data.labels)
    return model


def run_map(model: pm.Model, seed: int, maxiter: int):
    """MAP-HCRF from a random start (zero weights are a symmetric saddle of the HCRF: every hidden
    state gets the same gradient there, so L-BFGS from zero never separates the states)."""
    rng = np.random.default_rng(seed)
    start = {v.name: rng.normal(0.0, 0.5, size=model.initial_point()[v.name].shape)
             for v in model.value_vars}
    t0 = time.perf_counter()
    res = fit(model, method="map", start=start, maxiter=maxiter)
    return res, time.perf_counter() - t0


def run_vi(model, restarts, max_iter, seed):
    t0 = time.perf_counter()
    res = fit(model, method="bp_hcrf_vi", truncation=10, rounds=4, n_restarts=restarts,
              max_iter=max_iter, random_seed=seed)
    return res, time.perf_counter() - t0


def hmm_table(first: int, splits: int, restarts: int, max_iter: int, map_states: int, map_maxiter: int):
    rows = []
    for seed in range(first, first + splits):
        train, test = hmm_classes(n_train_per_class=5, n_test_per_class=100, T=100, seed=seed)
        vi, t_vi = run_vi(hcrf_model(train, 10), restarts, max_iter, seed)
        acc_vi = 1.0 - predict_bp_hcrf(vi, test).error_rate
        acc_prior = 1.0 - predict_bp_hcrf(vi, test, rule="prior").error_rate
        active = float(vi["bp_hcrf_point"]["expected_active_states"])
        used = int((vi["bp_hcrf_point"]["usage"].values > 0.1).sum())
        mp, t_map = run_map(hcrf_model(train, map_states), seed, map_maxiter)
        acc_map = 1.0 - predict_hcrf_average(mp, test).error_rate
        rows.append((seed, acc_vi, active, used, t_vi, acc_map, t_map, acc_prior))
        print(f"split {seed}: BP-HCRF {acc_vi:.4f} (prior-usage rule {acc_prior:.4f}, "
              f"E active {active:.2f}, usage>0.1: {used}, "
              f"{t_vi:.0f}s)  MAP-HCRF({map_states}) {acc_map:.4f} ({t_map:.0f}s)", flush=True)
    a = np.array([(r[1], r[5], r[2], r[3], r[7]) for r in rows])
    print("\n| split | BP-HCRF VI acc (local z) | BP-HCRF VI acc (prior usage) | E[active states] "
          "| states with usage > 0.1 | VI time (s) "
          f"| MAP-HCRF ({map_states} states) acc | MAP time (s) |")
    print("|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r[0]} | {100 * r[1]:.2f} | {100 * r[7]:.2f} | {r[2]:.2f} | {r[3]} | {r[4]:.0f} "
              f"| {100 * r[5]:.2f} "
              f"| {r[6]:.0f} |")
    print(f"| mean ± sd | {100 * a[:, 0].mean():.2f} ± {100 * a[:, 0].std(ddof=1):.2f} | "
          f"{100 * a[:, 4].mean():.2f} ± {100 * a[:, 4].std(ddof=1):.2f} | "
          f"{a[:, 2].mean():.2f} | {a[:, 3].mean():.1f} | | "
          f"{100 * a[:, 1].mean():.2f} ± {100 * a[:, 1].std(ddof=1):.2f} | |")


def _read_csv(path: Path):
    with gzip.open(path, "rt") as fh:
        header = fh.readline().strip().split(",")
        arr = np.loadtxt(fh, delimiter=",")
    seq = arr[:, header.index("seq_id")].astype(int)
    lab = arr[:, header.index("label")].astype(int)
    feats = arr[:, [i for i, h in enumerate(header) if h.startswith("lpc_")]]
    ids = np.unique(seq)
    seqs = [feats[seq == i] for i in ids]
    labels = np.array([lab[seq == i][0] for i in ids]) - 1          # speakers 1..9 -> 0..8
    return seqs, labels


def vowels_data():
    if not (VOWELS / "train.csv.gz").exists():
        return None
    tr_s, tr_y = _read_csv(VOWELS / "train.csv.gz")
    te_s, te_y = _read_csv(VOWELS / "test.csv.gz")
    allx = np.concatenate(tr_s)
    mu, sd = allx.mean(0), allx.std(0)                               # train statistics only
    out = []
    for seqs, y in ((tr_s, tr_y), (te_s, te_y)):
        batch, X = from_sequences([(s - mu) / sd for s in seqs])
        out.append(SequenceData(graphs=batch, node_features=X, labels=y, n_classes=9,
                                coords={"graph": np.arange(len(y))}))
    return out


def vowels_table(restarts, max_iter, map_states, map_maxiter):
    data = vowels_data()
    if data is None:
        print(f"\nJapanese vowels: SKIPPED, data folder {VOWELS} not found "
              "(put the data there or set JAPANESE_VOWELS_DIR)")
        return
    train, test = data
    vi, t_vi = run_vi(hcrf_model(train, 10), restarts, max_iter, 0)
    acc_vi = 1.0 - predict_bp_hcrf(vi, test).error_rate
    acc_prior = 1.0 - predict_bp_hcrf(vi, test, rule="prior").error_rate
    active = float(vi["bp_hcrf_point"]["expected_active_states"])
    mp, t_map = run_map(hcrf_model(train, map_states), 0, map_maxiter)
    acc_map = 1.0 - predict_hcrf_average(mp, test).error_rate
    print("\n| Japanese vowels (270 train / 370 test, 9 speakers) | accuracy | time (s) |")
    print("|---|---|---|")
    print(f"| BP-HCRF VI (K=10, R=4, {restarts} restarts; E active states {active:.2f}) "
          f"| {100 * acc_vi:.2f} (prior-usage rule {100 * acc_prior:.2f}) | {t_vi:.0f} |")
    print(f"| MAP-HCRF ({map_states} states) | {100 * acc_map:.2f} | {t_map:.0f} |")


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--splits", type=int, default=5)
    ap.add_argument("--first-split", type=int, default=0)
    ap.add_argument("--restarts", type=int, default=2)
    ap.add_argument("--max-iter", type=int, default=20)
    ap.add_argument("--map-states", type=int, default=10)
    ap.add_argument("--map-maxiter", type=int, default=500)
    ap.add_argument("--skip-hmm", action="store_true")
    ap.add_argument("--skip-vowels", action="store_true")
    args = ap.parse_args()
    if not args.skip_hmm:
        hmm_table(args.first_split, args.splits, args.restarts, args.max_iter, args.map_states,
                  args.map_maxiter)
    if not args.skip_vowels:
        vowels_table(args.restarts, args.max_iter, args.map_states, args.map_maxiter)


if __name__ == "__main__":
    main()
