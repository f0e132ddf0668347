"""Parise & Welling 2006, figs. 3 and 4: accuracy of evidence scores against AIS.

Random 5-node Boltzmann machines (``pmc.datasets.parise_welling_random_structure``, biases
U[-1, 1], couplings ``U{[-d, -d + eps] u [d, d + eps]}``, exact samples), scored with the true
structure under a N(0, I) prior on biases and weights. One trial is one data set at one N and d:
AIS (exact log Z) is the reference, and the trial returns |score - AIS| for

* MAP: penalised log-likelihood at the MAP (terms 1-3 of eq. (8)),
* BIC-ML: terms 1, 2, 5 at the maximum-likelihood weights,
* BP-LR: eq. (8), Bethe log Z, linear-response C, MAP by BP gradients,
* BP-LR-ExactGrad: the same with the exact MAP,
* Laplace-Exact: eq. (8) with everything exact,

and the Monte Carlo error of AIS. Fig. 3 varies N at d = 0.5/4; fig. 4 varies d at N = 10000.
"""

from __future__ import annotations

import time
import warnings
from collections.abc import Sequence
from typing import Any

import numpy as np

from pymc_crf.reproduce.registry import Experiment, Report, Trial, TrialResult, register
from pymc_crf.reproduce.report import label_axes, markdown_table, new_figure

__all__ = ["METHODS", "PAPER_CLAIMS", "run_trial"]

METHODS = {"MAP": ("map", {}), "BIC-ML": ("bic", {}), "BP-LR": ("bethe_laplace", {"map": "bp"}),
           "BP-LR-ExactGrad": ("bethe_laplace", {"map": "exact"}),
           "Laplace-Exact": ("laplace_exact", {})}

# Parise & Welling 2006, sec. 4.1: figs. 3 and 4 are plots without printed numbers; these are the
# paper's statements about them.
PAPER_CLAIMS = {
    "fig3": "all BP-LR methods are about two orders of magnitude more accurate than methods that "
            "ignore the O(1) term based on C; as N grows, BP-LR with the MAP from BP deteriorates "
            "significantly, BP-LR-ExactGrad and Laplace-Exact do not (they perform identically).",
    "fig4": "as expected all BP based methods deteriorate with increasing d; the exact methods "
            "show that a more accurate MAP improves the score (N = 10000).",
}


def _model(data, n: int):
    import pymc as pm

    import pymc_crf as pmc

    with pm.Model() as model:
        b = pm.Normal("b", 0.0, 1.0, shape=int(data.graphs.n_nodes[0]))
        w = pm.Normal("w", 0.0, 1.0, shape=data.graphs.n_edges)
        pmc.MRF("x", graphs=data.graphs, node_weights=b, edge_weights=w,
                parameterization=data.parameterization, observed=data.samples[:n])
    return model


def run_trial(settings: dict[str, Any], seed: int) -> dict[str, float]:
    """|score - AIS| of every method on data set ``seed`` (its first ``settings["n"]`` samples of
    ``settings["n_samples"]``) at edge strength ``settings["d"]``."""
    import pymc_crf as pmc
    from pymc_crf.fitters.evidence import log_marginal_likelihood

    data = pmc.datasets.parise_welling_random_structure(d=settings["d"],
                                                        n_samples=settings["n_samples"],
                                                        seed=seed)
    model = _model(data, settings["n"])
    row = {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        t0 = time.perf_counter()
        ref = log_marginal_likelihood(model, "ais", n_temps=settings["n_temps"],
                                      n_runs=settings["n_runs"], random_seed=seed)
        row["time AIS"] = time.perf_counter() - t0
        row["AIS MC error"] = float(ref.std_error)
        for name, (meth, kw) in METHODS.items():
            t0 = time.perf_counter()
            row[name] = abs(float(log_marginal_likelihood(model, meth, **kw)) - float(ref))
            row[f"time {name}"] = time.perf_counter() - t0
    return row


def _trials(axis: str):
    def trials(p: dict[str, Any]) -> list[Trial]:
        out = []
        for x in p[axis]:
            n = x if axis == "n" else p["n"]
            d = x if axis == "d" else p["d"]
            n_samples = max(p["n"]) if axis == "n" else n
            for k in range(p["datasets"]):
                out.append(Trial({"n": n, "d": d, "n_samples": n_samples,
                                  "n_temps": p["n_temps"], "n_runs": p["n_runs"]}, k))
        return out
    return trials


def _report(axis: str, figure: str):
    def report(results: Sequence[TrialResult], p: dict[str, Any]) -> Report:
        xs = list(p[axis])
        mean = {}
        for x in xs:
            rs = [r.values for r in results if r.settings[axis] == x]
            mean[x] = {k: float(np.mean([v[k] for v in rs])) for k in rs[0]}
        label = "N" if axis == "n" else "d"
        rows = [[x] + [f"{mean[x][m]:.3g}" for m in METHODS] + [f"{mean[x]['AIS MC error']:.3g}",
                f"{mean[x]['BIC-ML'] / mean[x]['BP-LR']:.0f}x"] for x in xs]
        table = markdown_table([label] + list(METHODS) + ["AIS MC error", "BIC-ML / BP-LR"],
                               rows)
        fixed = (f"d = {p['d']}" if axis == "n" else f"N = {p['n']}")
        text = (f"Mean |score - AIS| over {p['datasets']} data sets ({fixed}; AIS {p['n_runs']} "
                f"runs x {p['n_temps']} temperatures, exact log Z).\n\n{table}\n\n"
                f"Paper (Parise & Welling 2006, fig. {figure[3:]}; a plot, no printed numbers): "
                f"{PAPER_CLAIMS[figure]}")
        timings = markdown_table(
            [label] + ["AIS"] + list(METHODS),
            [[x] + [f"{mean[x][f'time {m}']:.2f}" for m in ["AIS", *METHODS]] for x in xs])
        fig, ax = new_figure()
        ax = ax[0, 0]
        for m in METHODS:
            ax.plot(xs, [mean[x][m] for x in xs], marker="o", label=m)
        ax.plot(xs, [mean[x]["AIS MC error"] for x in xs], "k:", label="AIS MC error")
        label_axes(ax, label, "mean |score - AIS|",
                   f"Parise & Welling 2006 fig. {figure[3:]} (ours)", logx=axis == "n", logy=True)
        return Report(text, timings, fig)
    return report


register(Experiment(
    name="parise-welling-fig3",
    description="Parise & Welling 2006 fig. 3: evidence scores (BP-LR, BIC, MAP, Laplace) "
                "against AIS as N grows, 5-node Boltzmann machines",
    sizes={"full": {"n": [10, 30, 100, 300, 1000, 3000, 10000], "d": 0.5 / 4, "datasets": 50,
                    "n_temps": 1000, "n_runs": 10},
           "quick": {"n": [10, 100], "d": 0.5 / 4, "datasets": 1, "n_temps": 50, "n_runs": 2}},
    trials=_trials("n"), run_trial=run_trial, report=_report("n", "fig3")))

register(Experiment(
    name="parise-welling-fig4",
    description="Parise & Welling 2006 fig. 4: evidence scores against AIS as the coupling "
                "strength d grows (N = 10000)",
    sizes={"full": {"d": [0.1 / 4, 0.2 / 4, 0.5 / 4, 1.0 / 4, 1.5 / 4, 2.0 / 4], "n": 10000,
                    "datasets": 50, "n_temps": 1000, "n_runs": 10},
           "quick": {"d": [0.5 / 4, 2.0 / 4], "n": 100, "datasets": 1, "n_temps": 50,
                     "n_runs": 2}},
    trials=_trials("d"), run_trial=run_trial, report=_report("d", "fig4")))
