"""Thesis ch. 4 (Qi 2005, sec. 4.4): predictive ARD against evidence-ARD, on CRFs with irrelevant
features.

The thesis tests predictive-ARD-EP on probit classifiers (a synthetic set with 190 irrelevant of
200 features, gene-expression data); the seeds do not ship those data, and the package's fitter is
for CRFs, so one trial here is one ``bcrf_synthetic(kind, n_train, n_test, seed, n_irrelevant)``
data set (six relevant edge features plus i.i.d. N(0, 1) ones the labels ignore) with the README
model (N(0, 5) prior on every weight, probit potentials), fitted by MAP and EP with that fixed
prior and by one ``pmc.fit(method="predictive_ard", keep_path=True)`` path scored three ways:
evidence-ARD (the end of the path), predictive ARD (smallest leave-one-out error, thesis
eq. (4.12)) and predictive_Prob-ARD (smallest leave-one-out wrong-label probability, eq. (4.13)).
Every Bayesian fit predicts by model averaging.
"""

from __future__ import annotations

import time
import warnings
from collections.abc import Sequence
from typing import Any

import numpy as np

from pymc_crf.reproduce.registry import (
    Experiment,
    Report,
    Trial,
    TrialResult,
    bad_parameter,
    register,
)
from pymc_crf.reproduce.report import markdown_table, new_figure

__all__ = ["METHODS", "PAPER_SEC_4_4", "run_trial"]

N_RELEVANT = 6
PRIOR_VAR = 5.0
METHODS = ("map", "ep", "evidence_ard", "predictive_ard", "predictive_prob_ard")
ARD = {"evidence_ard": "evidence", "predictive_ard": "loo", "predictive_prob_ard": "loo_prob"}

# Qi 2005 (PhD thesis), sec. 4.4: test error counts (mean +- se over 100 random splits) and the
# number of features kept, evidence-ARD-EP against predictive-ARD-EP.
PAPER_SEC_4_4 = {
    "leukaemia (36 test samples, 7129 features)": ((3.86, 0.14, 2.78), (2.80, 0.18, 513.82)),
    "colon cancer (12 test samples, 2000 features)": ((2.54, 0.13, 7.92), (1.63, 0.11, 156.76)),
}


def run_trial(settings: dict[str, Any], seed: int) -> dict[str, float]:
    """Test errors of the five fits of one data set and the features the ARD choices keep."""
    # the fits' warnings (EP sweeps, L-BFGS limits) are silenced for this trial only: a serial
    # run executes trials in the caller's process, whose warning filters stay as they were
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return _run_trial(settings, seed)


def _run_trial(settings: dict[str, Any], seed: int) -> dict[str, float]:
    import pymc as pm

    import pymc_crf as pmc
    from pymc_crf.fitters.ep.average import averaged_node_marginals

    t0 = time.perf_counter()
    train, test = pmc.datasets.bcrf_synthetic(
        settings["kind"], n_train=settings["n_train"], n_test=settings["n_test"], seed=seed,
        n_irrelevant=settings["n_irrelevant"])
    with pm.Model(coords=train.coords) as model:
        w = pm.Normal("w", 0.0, PRIOR_VAR ** 0.5, dims=("edge_feature", "label_i", "label_j"))
        pmc.CRF("t", graphs=train.graphs, edge_features=train.edge_features, edge_weights=w,
                potential="probit", observed=train.labels)
    out: dict[str, float] = {}
    res = pmc.fit(model, method="map", progressbar=False)
    out["map"] = float(pmc.predict(res, test).error_rate)
    res = pmc.fit(model, method="ep", progressbar=False, log_likelihood=False)
    out["ep"] = float(pmc.predict(res, test, method="model_average").error_rate)
    res = pmc.fit(model, method="predictive_ard", keep_path=True, progressbar=False,
                  log_likelihood=False, max_steps=settings.get("max_steps"))
    ard = res["ard"]
    n_steps = int(ard.sizes["step"])
    path_err = []
    for i in range(n_steps):
        marg = averaged_node_marginals(ard["path_mean"].values[i],
                                       ard["path_covariance"].values[i], 2, test.graphs, None,
                                       test.edge_features)
        path_err.append(float((marg.argmax(axis=1) != test.labels).mean()))
    for name, crit in ARD.items():
        if crit == "evidence":
            chosen = n_steps - 1
        else:
            key = ard["loo_error" if crit == "loo" else "loo_probability"].values
            chosen = int(np.flatnonzero(key == key.min())[0])
        kept = ard["prior_variance"].values[chosen] > 0
        out[name] = path_err[chosen]
        out[f"{name} relevant kept"] = float(kept[:N_RELEVANT].sum())
        out[f"{name} irrelevant kept"] = float(kept[N_RELEVANT:].sum())
        out[f"{name} step"] = float(chosen)
    out["best step on path"] = min(path_err)
    out["steps"] = float(n_steps)
    out["path converged"] = float(bool(ard["path_converged"]))
    out["EP unconverged steps"] = float((~ard["ep_converged"].values).sum())
    out["time"] = time.perf_counter() - t0
    return out


def _trials(p: dict[str, Any]) -> list[Trial]:
    return [Trial({"kind": k, "n_train": p["n_train"], "n_test": p["n_test"],
                   "n_irrelevant": p["n_irrelevant"], "max_steps": p["max_steps"]}, seed)
            for k in p["kinds"] for seed in range(p["seeds"])]


def _report(results: Sequence[TrialResult], p: dict[str, Any]) -> Report:
    blocks, agg = [], {}
    for kind in p["kinds"]:
        rs = [r.values for r in results if r.settings["kind"] == kind]
        n = len(rs)
        err = {m: np.array([v[m] for v in rs]) for m in METHODS}
        agg[kind] = err
        rows = []
        for m in METHODS:
            e = err[m]
            sd = e.std(ddof=1) if n > 1 else 0.0
            if m in ARD:
                rel = np.mean([v[f"{m} relevant kept"] for v in rs])
                irr = np.mean([v[f"{m} irrelevant kept"] for v in rs])
                kept = (f"{rel:.1f} of {N_RELEVANT}", f"{irr:.1f} of {p['n_irrelevant']}")
            else:
                kept = ("all", "all")
            rows.append([m, f"{e.mean():.4f} +- {sd:.4f}", f"{(e - err['map']).mean():+.4f}",
                         f"{(e - err['ep']).mean():+.4f}", *kept])
        pa, ev, ep = err["predictive_ard"], err["evidence_ard"], err["ep"]
        blocks.append(
            f"**{kind}s** ({n} data seeds, {p['n_train']} training graphs, 6 relevant + "
            f"{p['n_irrelevant']} irrelevant edge features, {p['n_test']} test graphs):\n\n"
            + markdown_table(["method", "test error mean +- sd", "minus MAP", "minus EP",
                              "relevant kept", "irrelevant kept"], rows)
            + f"\n\nPredictive ARD better / equal / worse than fixed-prior EP on "
            f"{(pa < ep).sum()} / {(pa == ep).sum()} / {(pa > ep).sum()} of {n} seeds, than "
            f"evidence-ARD on {(pa < ev).sum()} / {(pa == ev).sum()} / {(pa > ev).sum()}; the "
            f"best step of each path (by test error, an oracle) averages "
            f"{np.mean([v['best step on path'] for v in rs]):.4f}; "
            f"{np.mean([v['steps'] for v in rs]):.1f} steps a path, "
            f"{int(sum(v['path converged'] for v in rs))} of {n} paths ended by the evidence "
            f"(the rest by the step bound), "
            f"{int(sum(v['EP unconverged steps'] for v in rs))} EP runs unconverged in all.")
    paper = markdown_table(
        ["data (thesis sec. 4.4)", "evidence-ARD-EP errors", "features", "predictive-ARD-EP errors",
         "features"],
        [[k, f"{a[0]} +- {a[1]}", a[2], f"{b[0]} +- {b[1]}", b[2]]
         for k, (a, b) in PAPER_SEC_4_4.items()])
    text = ("\n\n".join(blocks) + "\n\nPaper (Qi 2005, sec. 4.4, probit classifiers on "
            "gene-expression data; test error counts, mean +- se over 100 splits):\n\n" + paper)
    timings = markdown_table(
        ["kind", "seconds a trial (MAP, EP, one ARD path)"],
        [[k, f"{np.mean([r.values['time'] for r in results if r.settings['kind'] == k]):.1f}"]
         for k in p["kinds"]])
    fig, axes = new_figure(len(p["kinds"]), width=4.5)
    for ax, kind in zip(axes[0], p["kinds"], strict=True):
        err = agg[kind]
        means = [err[m].mean() for m in METHODS]
        sds = [err[m].std(ddof=1) if err[m].size > 1 else 0.0 for m in METHODS]
        ax.bar(range(len(METHODS)), means, yerr=sds, color=[f"C{i}" for i in range(5)])
        ax.set_xticks(range(len(METHODS)), [m.replace("_", "\n") for m in METHODS], fontsize=7)
        ax.set_ylabel("test error (mean +- sd over seeds)")
        ax.set_title(f"{kind}s, {p['n_irrelevant']} irrelevant features")
    fig.tight_layout()
    return Report(text, timings, fig)


def _check(p: dict[str, Any]) -> None:
    """``kinds`` are ``bcrf_synthetic``'s graph kinds (it rejects another name, but only inside
    the first trial)."""
    for kind in p["kinds"]:
        if kind not in ("chain", "loop"):
            raise bad_parameter("thesis-ch4-ard", "kinds", 'takes "chain" and / or "loop"',
                                kind)


register(Experiment(
    name="thesis-ch4-ard",
    description="Qi 2005 ch. 4: predictive ARD vs evidence-ARD by EP vs fixed-prior EP and MAP, "
                "CRFs with irrelevant edge features (test error, features kept)",
    sizes={"full": {"kinds": ["chain", "loop"], "seeds": 20, "n_train": 20, "n_test": 300,
                    "n_irrelevant": 14, "max_steps": None},
           "quick": {"kinds": ["chain"], "seeds": 1, "n_train": 6, "n_test": 20,
                     "n_irrelevant": 2, "max_steps": 3}},
    trials=_trials, run_trial=run_trial, report=_report, zero_ok=("n_irrelevant",),
    check=_check))
