"""Predictive ARD by EP on CRFs with irrelevant features (Qi 2005, thesis ch. 4; docs/ep.md).

One trial (:func:`ard_trial`, a pure function of its settings and seed) draws
``bcrf_synthetic(kind, n_train, n_test, seed, n_irrelevant)`` (six relevant edge features plus
``n_irrelevant`` i.i.d. N(0, 1) ones that the labels ignore), writes the README model (N(0, 5)
prior on every weight, probit potentials) and fits it by

* ``map``            -- MAP with the fixed prior, exact marginals at the estimate;
* ``ep``             -- EP with the fixed prior, model averaging;
* ``pmc.fit(method="predictive_ard", keep_path=True)``, one ARD path, scored three ways:
  ``evidence_ard`` (the end of the path), ``predictive_ard`` (smallest leave-one-out error,
  thesis eq. (4.12)), ``predictive_prob_ard`` (smallest leave-one-out wrong-label probability,
  eq. (4.13));

the ARD models predicting by model averaging. It returns the test error of each, of every step of
the path, and, for the ARD choices, the relevant and irrelevant features kept.

Run:  nice -n 5 .venv/bin/python bench/ep_ard.py --seeds 10 --out ard.json [--workers 2]
      .venv/bin/python bench/ep_ard.py --summarise ard.json
"""

from __future__ import annotations

import argparse
import json
import time
import warnings
from concurrent.futures import ProcessPoolExecutor

import numpy as np

N_RELEVANT = 6
PRIOR_VAR = 5.0
METHODS = ("map", "ep", "evidence_ard", "predictive_ard", "predictive_prob_ard")


def ard_trial(seed: int, kind: str = "chain", n_train: int = 20, n_test: int = 300,
              n_irrelevant: int = 14) -> dict:
    """Test errors and kept features of the five fits of one data set (module docstring)."""
    import pymc as pm

    import pymc_crf as pmc
    from pymc_crf.fitters.ep.average import averaged_log_potentials
    from pymc_crf.inference.select import get_engine

    warnings.simplefilter("ignore")
    train, test = pmc.datasets.bcrf_synthetic(kind, n_train=n_train, n_test=n_test, seed=seed,
                                              n_irrelevant=n_irrelevant)
    with pm.Model(coords=train.coords) as model:
        w = pm.Normal("w", 0.0, PRIOR_VAR ** 0.5, dims=("edge_feature", "label_i", "label_j"))
        pmc.CRF("t", graphs=train.graphs, edge_features=train.edge_features, edge_weights=w,
                potential="probit", observed=train.labels)
    out: dict = {"seed": seed, "kind": kind, "n_train": n_train, "n_irrelevant": n_irrelevant}
    t = time.perf_counter()
    res = pmc.fit(model, method="map", progressbar=False)
    out["map"] = float(pmc.predict(res, test).error_rate)
    res = pmc.fit(model, method="ep", progressbar=False, log_likelihood=False)
    out["ep"] = float(pmc.predict(res, test, method="model_average").error_rate)
    res = pmc.fit(model, method="predictive_ard", keep_path=True, progressbar=False,
                  log_likelihood=False)
    ard = res["ard"]
    out["steps"] = int(ard.sizes["step"])
    out["path_converged"] = bool(ard["path_converged"])
    out["ep_unconverged_steps"] = int((~ard["ep_converged"].values).sum())
    eng = get_engine("auto", test.graphs)
    path_err = []
    for i in range(out["steps"]):
        node, edge = averaged_log_potentials(ard["path_mean"].values[i],
                                             ard["path_covariance"].values[i], 2,
                                             test.graphs.n_total_nodes, None, test.edge_features)
        path_err.append(float((eng.marginals(test.graphs, node, edge).node.argmax(1)
                               != test.labels).mean()))
    out["path_test_error"] = path_err
    out["path_loo_error"] = ard["loo_error"].values.tolist()
    out["path_loo_probability"] = ard["loo_probability"].values.tolist()
    for name, crit in (("evidence_ard", "evidence"), ("predictive_ard", "loo"),
                       ("predictive_prob_ard", "loo_prob")):
        loo = ard["loo_error"].values if crit == "loo" else ard["loo_probability"].values
        chosen = out["steps"] - 1 if crit == "evidence" else int(np.flatnonzero(loo == loo.min())[0])
        kept = ard["prior_variance"].values[chosen] > 0
        out[name] = path_err[chosen]
        out[f"{name}_relevant_kept"] = int(kept[:N_RELEVANT].sum())
        out[f"{name}_irrelevant_kept"] = int(kept[N_RELEVANT:].sum())
        out[f"{name}_chosen_step"] = chosen
    out["best_on_path"] = min(path_err)
    out["seconds"] = time.perf_counter() - t
    return out


def summarise(trials: list[dict]) -> str:
    """Markdown table: mean +- sd test error and kept features over the trials."""
    n = len(trials)
    t0 = trials[0]
    lines = [f"{t0['kind']}s, {t0['n_train']} training graphs, 6 relevant + "
             f"{t0['n_irrelevant']} irrelevant edge features, {n} data seeds", "",
             "| method | test error mean +- sd | minus MAP: mean | relevant kept | "
             "irrelevant kept |", "|---|---|---|---|---|"]
    base = np.array([t["map"] for t in trials])
    for m in METHODS:
        e = np.array([t[m] for t in trials])
        if m.endswith("ard"):
            rel = np.array([t[f"{m}_relevant_kept"] for t in trials])
            irr = np.array([t[f"{m}_irrelevant_kept"] for t in trials])
            kept = (f"{rel.mean():.1f} of {N_RELEVANT}",
                    f"{irr.mean():.1f} of {t0['n_irrelevant']}")
        else:
            kept = ("all", "all")
        lines.append(f"| {m} | {e.mean():.4f} +- {e.std(ddof=1) if n > 1 else 0:.4f} | "
                     f"{(e - base).mean():+.4f} | {kept[0]} | {kept[1]} |")
    pa, ep = np.array([t["predictive_ard"] for t in trials]), np.array([t["ep"] for t in trials])
    ev = np.array([t["evidence_ard"] for t in trials])
    lines += ["", f"predictive ARD better than / equal to / worse than fixed-prior EP on "
              f"{(pa < ep).sum()} / {(pa == ep).sum()} / {(pa > ep).sum()} of {n}; than "
              f"evidence-ARD on {(pa < ev).sum()} / {(pa == ev).sum()} / {(pa > ev).sum()}",
              f"best step of the path (oracle, by test error): "
              f"{np.mean([t['best_on_path'] for t in trials]):.4f}; steps a path "
              f"{np.mean([t['steps'] for t in trials]):.1f}, EP unconverged steps "
              f"{sum(t['ep_unconverged_steps'] for t in trials)} in all",
              f"seconds a trial (three fits): {np.mean([t['seconds'] for t in trials]):.1f}"]
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, default=10)
    ap.add_argument("--kind", default="chain", choices=("loop", "chain"))
    ap.add_argument("--n-train", type=int, default=20)
    ap.add_argument("--n-test", type=int, default=300)
    ap.add_argument("--n-irrelevant", type=int, default=14)
    ap.add_argument("--workers", type=int, default=1)
    ap.add_argument("--out", default=None)
    ap.add_argument("--summarise", default=None, help="print the table of a results file")
    a = ap.parse_args()
    if a.summarise:
        print(summarise(json.load(open(a.summarise))["trials"]))
        return
    args = [(s, a.kind, a.n_train, a.n_test, a.n_irrelevant) for s in range(a.seeds)]
    trials = []
    with ProcessPoolExecutor(max_workers=a.workers) as pool:
        for r in pool.map(ard_trial, *zip(*args, strict=True)):
            print(json.dumps(r), flush=True)
            trials.append(r)
            if a.out:
                json.dump({"settings": vars(a), "trials": trials}, open(a.out, "w"), indent=1)
    print(summarise(trials))


if __name__ == "__main__":
    main()
