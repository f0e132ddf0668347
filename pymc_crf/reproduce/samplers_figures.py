"""Welling & Parise 2006, figs. 2, 4, 5 and 6, by the functions of ``samplers_models``.

That module defines the models (``ising_grid_model``, ``ising_samples``, ``faq_chain_model``), the
method runs (``run_methods``: NUTS on the exact posterior as reference and the paper's methods,
BL-MP, BL-BP, LV-CD and MC-BP on the grids, BL-MP and LV-CD on the chains) and the scoring
(``score``: ``pmc.compare`` CVM against NUTS, wall time); this module only lays them out as grids
of independent trials.

Fig. 2: 5 x 5 grids, weights and biases N(0, 0.25) (``welling_parise_grid``, one model per seed),
CVM against N. Figs. 4 / 5: one grid with couplings ``U([-d - eps, -d] u [d, d + eps])``,
``eps = 0.1 / 4``, ``d`` in quarters, biases 0 / 1. Fig. 6: chain CRFs shaped like the paper's
newsgroup-FAQ CRF (BP is exact, so BL-BP is left out as in the paper).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from pymc_crf.reproduce import samplers_models as sf
from pymc_crf.reproduce.registry import (
    Experiment,
    Report,
    Trial,
    TrialResult,
    bad_parameter,
    register,
)
from pymc_crf.reproduce.report import label_axes, markdown_table, new_figure

__all__ = ["PAPER_CLAIMS", "run_trial"]

# Welling & Parise 2006, sec. 7: the figures are plots without printed numbers; these are the
# paper's statements about them.
PAPER_CLAIMS = {
    "fig2": "the Bethe-Laplace methods are accurate at small N; BL-MP's score rises at N = 5000 "
            "(non-Gaussian marginals, fig. 3); BL-BP's score grows with N as the BP bias in the MAP "
            "is exposed; LV-CD and MC-BP took 6-16 hours per N, BL-MP and BL-BP under 2 minutes.",
    "fig4": "with biases 0 loopy BP fails to converge around d = 1.5 (quarters); BL-BP "
            "deteriorates with d; LV-CD is less accurate in the easy domain but more robust to the "
            "interaction strength.",
    "fig5": "biases 1: the Bethe-Laplace approximation is very accurate when the MAP is accurate; "
            "BP-based methods deteriorate with d, LV-CD is more robust.",
    "fig6": "chain CRFs: BL-MP and LV-CD (BP is exact on chains, so MC-BP is the ground-truth "
            "sampler and BL-BP equals BL-MP).",
}


def _model(s: dict[str, Any], seed: int):
    import pymc_crf as pmc

    if s["figure"] == "fig2":
        data = pmc.datasets.welling_parise_grid(s["rows"], s["rows"], n_samples=s["n"], seed=seed)
        return (sf.ising_grid_model(data.samples, data.graphs, s["prior_sd"]),
                sf.PAPER_GRID_METHODS)
    if s["figure"] == "fig6":
        return sf.faq_chain_model(s["n"], s["length"], s["features"],
                                  np.random.default_rng(seed)), \
            sf.PAPER_CHAIN_METHODS
    rng = np.random.default_rng(seed)
    graph, b, w = sf.coupling_grid(s["rows"], s["d"], 0.0 if s["figure"] == "fig4" else 1.0, rng)
    samples = sf.ising_samples(graph, b, w, s["n"], rng)
    return sf.ising_grid_model(samples, graph, s["prior_sd"]), sf.PAPER_GRID_METHODS


def run_trial(settings: dict[str, Any], seed: int) -> dict[str, float]:
    """CVM against NUTS and wall time of every method on one model (``settings["figure"]``)."""
    model, methods = _model(settings, seed)
    table = sf.score(sf.run_methods(model, methods, settings["draws"], settings["tune"],
                                    settings["chains"], seed, settings["nuts_draws"]))
    row = {}
    for method, r in table.iterrows():
        if "cvm" in r and method != "nuts":
            row[f"cvm {method}"] = float(r["cvm"])
        row[f"time {method}"] = float(r["wall_time"])
    return row


_RUN_KEYS = ("draws", "tune", "nuts_draws", "chains")


def _trials(figure: str):
    def trials(p: dict[str, Any]) -> list[Trial]:
        run = {k: p[k] for k in _RUN_KEYS}
        if figure == "fig2":
            return [Trial({"figure": figure, "rows": p["rows"], "n": n,
                           "prior_sd": p["prior_sd"], **run}, m)
                    for n in p["n"] for m in range(p["models"])]
        if figure == "fig6":
            return [Trial({"figure": figure, "length": p["length"], "features": p["features"],
                           "n": n, **run}, p["seed"])
                    for n in p["n"]]
        return [Trial({"figure": figure, "rows": p["rows"], "n": p["n"], "d": d,
                       "prior_sd": p["prior_sd"], **run}, p["seed"]) for d in p["d"]]
    return trials


def _report(figure: str):
    axis = "d" if figure in ("fig4", "fig5") else "n"

    def report(results: Sequence[TrialResult], p: dict[str, Any]) -> Report:
        xs = list(p[axis]) if axis == "d" else list(p["n"])
        methods = [k[4:] for k in results[0].values if k.startswith("cvm ")]
        mean = {x: {k: float(np.mean([r.values[k] for r in results if r.settings[axis] == x]))
                    for k in results[0].values} for x in xs}
        label = "d (quarters)" if axis == "d" else ("chains" if figure == "fig6" else "N")
        table = markdown_table([label] + [f"CVM {m}" for m in methods],
                               [[x] + [f"{mean[x][f'cvm {m}']:.4g}" for m in methods]
                                for x in xs])
        # pmc.compare divides eq. (23)'s sum by the number of pooled draws (normalize=True), so
        # the numbers are mean squared CDF differences, not the paper's raw sums
        text = (f"CVM distance to NUTS draws (Welling & Parise 2006, eq. (23) divided by the "
                f"number of pooled draws, summed over the weights), mean over "
                f"{p.get('models', 1)} model(s); {p['draws']} draws after "
                f"{p['tune']} tuning steps x {p['chains']} chains, NUTS {p['nuts_draws']} draws."
                f"\n\n{table}\n\nPaper (Welling & Parise 2006, fig. {figure[3:]}; a plot, no "
                f"printed numbers): {PAPER_CLAIMS[figure]}")
        timings = markdown_table([label] + ["nuts", *methods],
                                 [[x] + [f"{mean[x][f'time {m}']:.2f}" for m in ["nuts", *methods]]
                                  for x in xs])
        fig, ax = new_figure()
        ax = ax[0, 0]
        for m in methods:
            ax.plot(xs, [mean[x][f"cvm {m}"] for x in xs], marker="o", label=m)
        label_axes(ax, label, "CVM vs NUTS", f"Welling & Parise 2006 fig. {figure[3:]} (ours)",
                   logx=figure == "fig2", logy=True)
        return Report(text, timings, fig)
    return report


# a random walk in 65 dimensions needs ~20000 draws per chain for r-hat < 1.1 on every weight
# (docs/samplers.md)
_RUN_FULL = {"draws": 20000, "tune": 3000, "nuts_draws": 2000, "chains": 2}
_RUN_QUICK = {"draws": 40, "tune": 40, "nuts_draws": 40, "chains": 1}
_SIZES = {
    # fig. 2's prior is its generating distribution N(0, 0.25) (sd 0.5); figs. 4 / 5 draw their
    # couplings from intervals, with N(0, 1) priors
    "fig2": {"full": {"rows": 5, "n": [10, 100, 1000], "models": 5, "prior_sd": 0.5,
                      **_RUN_FULL},
             "quick": {"rows": 3, "n": [20], "models": 1, "prior_sd": 0.5, **_RUN_QUICK}},
    "fig4": {"full": {"rows": 5, "n": 100, "d": [0.1, 0.5, 1.0, 1.5, 2.0], "seed": 0,
                      "prior_sd": 1.0, **_RUN_FULL},
             "quick": {"rows": 3, "n": 20, "d": [0.5], "seed": 0, "prior_sd": 1.0,
                       **_RUN_QUICK}},
    "fig6": {"full": {"length": 100, "features": 8, "n": [10, 20, 30, 40, 48], "seed": 0,
                      **_RUN_FULL},
             "quick": {"length": 5, "features": 2, "n": [3], "seed": 0, **_RUN_QUICK}},
}
_SIZES["fig5"] = _SIZES["fig4"]
_METHODS = {"fig2": "BL-MP, BL-BP, LV-CD, MC-BP", "fig4": "BL-MP, BL-BP, LV-CD, MC-BP",
            "fig5": "BL-MP, BL-BP, LV-CD, MC-BP", "fig6": "BL-MP, LV-CD"}
_WHAT = {"fig2": "CVM vs N on 5x5 Boltzmann-machine grids",
         "fig4": "CVM vs coupling strength, biases 0", "fig5": "CVM vs coupling strength, biases 1",
         "fig6": "CVM vs number of chains, chain CRFs"}

def _check(name: str):
    """``check`` of the experiment ``name``: grids of at least 2 x 2 nodes (``rows=1`` has no
    edges to weigh), a prior sd > 0 and coupling strengths ``d`` >= 0 (with a prior sd <= 0
    NUTS fails inside the trial, with "All initialization points failed")."""
    def check(p: dict[str, Any]) -> None:
        if p.get("rows", 2) < 2:
            raise bad_parameter(name, "rows", "takes grids of at least 2 rows", p["rows"])
        if "prior_sd" in p and not (p["prior_sd"] > 0 and np.isfinite(p["prior_sd"])):
            raise bad_parameter(name, "prior_sd", "takes a prior sd > 0", p["prior_sd"])
        for d in p.get("d", []):
            if not (d >= 0 and np.isfinite(d)):
                raise bad_parameter(name, "d", "takes coupling strengths >= 0 (in quarters)",
                                    p["d"])
    return check


for _fig in ("fig2", "fig4", "fig5", "fig6"):
    register(Experiment(
        name=f"welling-parise-{_fig}",
        description=f"Welling & Parise 2006 fig. {_fig[3:]}: {_METHODS[_fig]} against NUTS, "
                    f"{_WHAT[_fig]}",
        sizes=_SIZES[_fig], trials=_trials(_fig), run_trial=run_trial, report=_report(_fig),
        check=_check(f"welling-parise-{_fig}"),
    ))
