"""Luo, Sun & Zhao, table V (three-class HMM sequences) and the Japanese vowels speaker task:
BP-HCRF variational inference against a MAP-trained HCRF.

One trial is one method on one split: ``"bp_hcrf_vi"`` (truncation K, R rounds, random restarts;
prediction with the plug-in weights) or ``"map_hcrf"`` (L-BFGS from a random start -- zero weights
are a symmetric saddle of the HCRF -- with predictions averaged over the fit). The vowels task
uses the copy of the data that ships with the package (:func:`pymc_crf.datasets.japanese_vowels`).
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
from pymc_crf.reproduce.report import markdown_table, mean_se, new_figure

__all__ = ["PAPER_TABLE_V", "fit_trial", "run_trial", "score_trial", "vowels_data"]

# Luo, Sun & Zhao, table V: accuracy % (mean ± sd over 5 random splits; 5 training and 100 test
# sequences per class, T = 100, K = 10, R = 4). The paper reports no Japanese vowels result.
PAPER_TABLE_V = {"BP-HCRF VI": (99.93, 0.15), "MAP-HCRF": (99.80, 0.30)}
LABELS = {"bp_hcrf_vi": "BP-HCRF VI", "map_hcrf": "MAP-HCRF"}


def vowels_data(every: int = 1):
    """(train, test) ``SequenceData`` of the Japanese vowels (9 speakers, 12 LPC features
    standardised with training statistics), every ``every``-th sequence of each split."""
    from pymc_crf.datasets.japanese_vowels import japanese_vowels

    return tuple(d.subset(np.arange(0, d.graphs.n_graphs, every)) for d in japanese_vowels())


def _hcrf_model(data, S: int, prior_sd: float = 3.0):
    import pymc as pm

    from pymc_crf.distributions.hcrf import HCRF

    F, C = data.node_features.shape[1], data.n_classes
    with pm.Model() as model:
        tx = pm.Normal("theta_x", 0.0, prior_sd, shape=(F, S))
        ty = pm.Normal("theta_y", 0.0, prior_sd, shape=(S, C))
        te = pm.Normal("theta_e", 0.0, prior_sd, shape=(S, S, C))
        HCRF("y", graphs=data.graphs, node_features=data.node_features, theta_x=tx,
             theta_y=ty, theta_e=te, observed=data.labels)
    return model


def fit_trial(train, s: dict[str, Any], seed: int):
    """The ``pmc.fit`` of one trial: ``method`` ``"bp_hcrf_vi"`` (truncation, rounds, restarts,
    EM iterations of ``s``, and its ``theta_maxiter`` if it has one) or ``"map_hcrf"``
    (``map_states`` states, ``map_maxiter`` L-BFGS iterations from a N(0, 0.5^2) start seeded by
    ``seed``)."""
    from pymc_crf.fitters.registry import fit

    if s["method"] == "bp_hcrf_vi":
        # theta_maxiter only when ``s`` sets it (the bench's option); else the fitter's default
        extra = {"theta_maxiter": s["theta_maxiter"]} if "theta_maxiter" in s else {}
        return fit(_hcrf_model(train, s["truncation"]), method="bp_hcrf_vi",
                   truncation=s["truncation"], rounds=s["rounds"], n_restarts=s["restarts"],
                   max_iter=s["max_iter"], random_seed=seed, **extra)
    model = _hcrf_model(train, s["map_states"])
    rng = np.random.default_rng(seed)
    start = {v.name: rng.normal(0.0, 0.5, size=model.initial_point()[v.name].shape)
             for v in model.value_vars}
    return fit(model, method="map", start=start, maxiter=s["map_maxiter"])


def score_trial(res, test, method: str) -> dict[str, float]:
    """Test accuracy of a :func:`fit_trial` result (BP-HCRF VI: both test-time rules, and the
    expected number of active states)."""
    from pymc_crf.fitters.beta_process import predict_bp_hcrf
    from pymc_crf.model.predictors import predict_hcrf_average

    if method == "bp_hcrf_vi":
        point = res["bp_hcrf_point"]
        return {"accuracy": 1.0 - predict_bp_hcrf(res, test).error_rate,
                "accuracy (prior-usage rule)":
                    1.0 - predict_bp_hcrf(res, test, rule="prior").error_rate,
                "active states": float(point["expected_active_states"]),
                "states used": float((point["usage"].values > 0.1).sum())}
    return {"accuracy": 1.0 - predict_hcrf_average(res, test).error_rate}


def _fit_and_score(train, test, s: dict[str, Any], seed: int) -> dict[str, float]:
    t0 = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        out = score_trial(fit_trial(train, s, seed), test, s["method"])
    return {**out, "time": time.perf_counter() - t0}


def run_trial(settings: dict[str, Any], seed: int) -> dict[str, float]:
    """One method (``settings["method"]``) on one split: the ``hmm_classes`` split ``seed``, or
    the Japanese vowels' given split (``settings["task"] == "vowels"``)."""
    from pymc_crf.datasets.hmm import hmm_classes

    if settings["task"] == "vowels":
        train, test = vowels_data(settings["every"])
    else:
        train, test = hmm_classes(n_train_per_class=settings["n_train_per_class"],
                                  n_test_per_class=settings["n_test_per_class"],
                                  T=settings["T"], seed=seed)
    return _fit_and_score(train, test, settings, seed)


_FIT_KEYS = ("truncation", "rounds", "restarts", "max_iter", "map_states", "map_maxiter")


def _trials(task: str):
    def trials(p: dict[str, Any]) -> list[Trial]:
        fit_settings = {k: p[k] for k in _FIT_KEYS}
        data = ({"every": p["every"]} if task == "vowels" else
                {k: p[k] for k in ("n_train_per_class", "n_test_per_class", "T")})
        return [Trial({"task": task, "method": m, **data, **fit_settings}, split)
                for split in range(p["splits"]) for m in p["methods"]]
    return trials


def _report(task: str):
    def report(results: Sequence[TrialResult], p: dict[str, Any]) -> Report:
        methods = list(p["methods"])
        acc = {m: [100 * r.values["accuracy"] for r in results if r.settings["method"] == m]
               for m in methods}
        rows = [[split] + [f"{acc[m][split]:.2f}" for m in methods]
                for split in range(p["splits"])]
        rows.append(["mean ± sd"] + [f"{np.mean(acc[m]):.2f} ± {np.std(acc[m], ddof=1):.2f}"
                                     if len(acc[m]) > 1 else f"{acc[m][0]:.2f}"
                                     for m in methods])
        if task == "hmm":
            rows.append(["paper (table V)"] + [
                "{:.2f} ± {:.2f}".format(*PAPER_TABLE_V[LABELS[m]]) for m in methods])
        header = ["split"] + [f"{LABELS[m]} accuracy %" for m in methods]
        vi = [r.values for r in results if r.settings["method"] == "bp_hcrf_vi"]
        text = markdown_table(header, rows)
        if vi:
            text += ("\n\nBP-HCRF: E[active states] " + ", ".join(
                f"{v['active states']:.2f}" for v in vi) + "; states with usage > 0.1: "
                + ", ".join(f"{v['states used']:.0f}" for v in vi) + " (per split).")
        if task == "vowels":
            text += "\n\nLuo, Sun & Zhao report no result on this task (no paper column)."
        text = (f"Settings: K = {p['truncation']}, R = {p['rounds']}, {p['restarts']} restarts, "
                f"{p['max_iter']} EM iterations; MAP-HCRF {p['map_states']} states, "
                f"{p['map_maxiter']} L-BFGS iterations.\n\n" + text)
        timings = markdown_table(["method", "mean s per split"], [
            [LABELS[m], mean_se([r.values["time"] for r in results
                                 if r.settings["method"] == m], digits=1)] for m in methods])
        fig, ax = new_figure()
        ax = ax[0, 0]
        for i, m in enumerate(methods):
            ax.plot(range(len(acc[m])), acc[m], marker="o", ls="", color=f"C{i}",
                    label=f"{LABELS[m]} (ours)")
            if task == "hmm":
                mu, sd = PAPER_TABLE_V[LABELS[m]]
                ax.axhspan(mu - sd, mu + sd, color=f"C{i}", alpha=0.2,
                           label=f"{LABELS[m]} (paper, mean ± sd)")
        ax.set_xlabel("split")
        ax.set_ylabel("test accuracy %")
        ax.set_title("Luo, Sun & Zhao table V" if task == "hmm" else "Japanese vowels")
        ax.legend(fontsize=7)
        fig.tight_layout()
        return Report(text, timings, fig)
    return report


def _check(name: str):
    """``check`` of the experiment ``name``: ``methods`` are the two fitters (``fit_trial`` fits
    any other name as ``"map_hcrf"``, and the report has no label for it)."""
    def check(p: dict[str, Any]) -> None:
        for m in p["methods"]:
            if m not in LABELS:
                raise bad_parameter(name, "methods",
                                    f"takes {' and / or '.join(map(repr, LABELS))}", m)
    return check


_FIT_FULL = {"methods": ["bp_hcrf_vi", "map_hcrf"], "truncation": 10, "rounds": 4,
             "restarts": 8, "max_iter": 20, "map_states": 10, "map_maxiter": 500}
_FIT_QUICK = {"methods": ["bp_hcrf_vi", "map_hcrf"], "truncation": 2, "rounds": 1,
              "restarts": 1, "max_iter": 1, "map_states": 2, "map_maxiter": 5}

register(Experiment(
    name="luo-table-v",
    description="Luo, Sun & Zhao table V: BP-HCRF VI vs MAP-HCRF accuracy on three-class HMM "
                "sequences, 5 random splits",
    sizes={"full": {**_FIT_FULL, "splits": 5, "n_train_per_class": 5, "n_test_per_class": 100,
                    "T": 100},
           "quick": {**_FIT_QUICK, "splits": 1, "n_train_per_class": 2, "n_test_per_class": 3,
                     "T": 10}},
    trials=_trials("hmm"), run_trial=run_trial, report=_report("hmm"),
    check=_check("luo-table-v")))

register(Experiment(
    name="japanese-vowels",
    description="Japanese vowels speaker identification (9 speakers): BP-HCRF VI vs MAP-HCRF "
                "(data shipped with the package)",
    sizes={"full": {**_FIT_FULL, "splits": 1, "every": 1},
           "quick": {**_FIT_QUICK, "splits": 1, "every": 30}},
    trials=_trials("vowels"), run_trial=run_trial, report=_report("vowels"),
    check=_check("japanese-vowels")))
