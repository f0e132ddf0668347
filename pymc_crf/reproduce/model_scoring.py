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
Fig. 2 scores the models of a random nested sequence around the true structure (sec. 4.1: "a
model appearing later in the sequence contains all edges from models appearing earlier") at
N = 50 and N = 10000, one data set per sequence.
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
from pymc_crf.reproduce.report import label_axes, markdown_table, new_figure

__all__ = ["METHODS", "PAPER_CLAIMS", "run_trial"]

METHODS = {"MAP": ("map", {}), "BIC-ML": ("bic", {}), "BP-LR": ("bethe_laplace", {"map": "bp"}),
           "BP-LR-ExactGrad": ("bethe_laplace", {"map": "exact"}),
           "Laplace-Exact": ("laplace_exact", {})}

# Parise & Welling 2006, sec. 4.1: figs. 2, 3 and 4 are plots without printed numbers; these
# are the paper's statements about them.
PAPER_CLAIMS = {
    "fig2": "BP-LR is very accurate at low N; BIC-ML tends to over-penalize model complexity; at "
            "large N the performance of all methods improves but BP-LR does slightly worse than "
            "BIC-ML.",
    "fig3": "all BP-LR methods are about two orders of magnitude more accurate than methods that "
            "ignore the O(1) term based on C; as N grows, BP-LR with the MAP from BP deteriorates "
            "significantly, BP-LR-ExactGrad and Laplace-Exact do not (they perform identically).",
    "fig4": "as expected all BP based methods deteriorate with increasing d; the exact methods "
            "show that a more accurate MAP improves the score (N = 10000).",
}


def _model(data, n: int, graphs=None):
    """The scored model: N(0, 1) priors on biases and couplings of ``graphs`` (default: the true
    structure) and the first ``n`` samples of ``data``."""
    import pymc as pm

    import pymc_crf as pmc

    graphs = data.graphs if graphs is None else graphs
    with pm.Model() as model:
        b = pm.Normal("b", 0.0, 1.0, shape=int(graphs.n_nodes[0]))
        w = pm.Normal("w", 0.0, 1.0, shape=graphs.n_edges)
        pmc.MRF("x", graphs=graphs, node_weights=b, edge_weights=w,
                parameterization=data.parameterization, observed=data.samples[:n])
    return model


def nested_sequence(true_edges: np.ndarray, n_nodes: int, seed: int) -> list[np.ndarray]:
    """A random nested sequence of structures through the true one (Parise & Welling 2006,
    sec. 4.1, fig. 1): element ``k - 1`` has ``k`` edges, for ``k = 1 ... n (n - 1) / 2``. The
    first ``|E*|`` models are growing prefixes of a random order of the true edges, the rest add
    the missing node pairs in a random order, so every model contains all edges of the ones
    before it and model ``|E*|`` is the true structure."""
    rng = np.random.default_rng([seed, 2006])
    true = [tuple(sorted(map(int, e))) for e in np.asarray(true_edges).reshape(-1, 2)]
    others = [(i, j) for i in range(n_nodes) for j in range(i + 1, n_nodes)
              if (i, j) not in set(true)]
    order = [true[i] for i in rng.permutation(len(true))]
    order += [others[i] for i in rng.permutation(len(others))]
    return [np.array(order[:k], dtype=np.int64) for k in range(1, len(order) + 1)]


def run_trial(settings: dict[str, Any], seed: int) -> dict[str, float]:
    """|score - AIS| of every method on data set ``seed`` (its first ``settings["n"]`` samples of
    ``settings["n_samples"]``) at edge strength ``settings["d"]``, for the true structure or, with
    ``settings["edges"] = k``, for the model with ``k`` edges of :func:`nested_sequence`."""
    import pymc_crf as pmc
    from pymc_crf.fitters.evidence import log_marginal_likelihood
    from pymc_crf.graphs.batch import GraphBatch

    data = pmc.datasets.parise_welling_random_structure(d=settings["d"],
                                                        n_samples=settings["n_samples"],
                                                        seed=seed)
    row = {}
    graphs = None
    if "edges" in settings:
        n_nodes = int(data.graphs.n_nodes[0])
        seq = nested_sequence(data.graphs.edges, n_nodes, seed)
        graphs = GraphBatch.from_edges([seq[settings["edges"] - 1]], [n_nodes])
        row["true edges"] = float(data.graphs.n_edges)
    model = _model(data, settings["n"], graphs)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        t0 = time.perf_counter()
        ref = log_marginal_likelihood(model, "ais", n_temps=settings["n_temps"],
                                      n_runs=settings["n_runs"], random_seed=seed)
        row["time AIS"] = time.perf_counter() - t0
        row["AIS MC error"] = float(ref.std_error)
        for name, (meth, kw) in METHODS.items():
            t0 = time.perf_counter()
            diff = float(log_marginal_likelihood(model, meth, **kw)) - float(ref)
            row[f"time {name}"] = time.perf_counter() - t0
            row[name] = abs(diff)
            if graphs is not None:  # fig. 2 also reports the sign (BIC-ML's over-penalising)
                row[f"{name} - AIS"] = diff
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


N_PAIRS = 5 * 4 // 2  # parise_welling_random_structure's default 5 nodes


def _check(name: str):
    """``check`` of the experiment ``name``: coupling strengths ``d`` > 0 and finite (the data
    sets' ``U{[-d, -d + eps] u [d, d + eps]}``) and, for fig. 2, ``edges`` ``"all"`` or model
    sizes from 1 to the 10 node pairs; anything else raises only inside a trial."""
    def check(p: dict[str, Any]) -> None:
        for d in p["d"] if isinstance(p["d"], list) else [p["d"]]:
            if not (d > 0 and np.isfinite(d)):
                raise bad_parameter(name, "d", "takes coupling strengths > 0", p["d"])
        edges = p.get("edges", "all")
        if edges != "all" and not (isinstance(edges, list)
                                   and all(1 <= k <= N_PAIRS for k in edges)):
            raise bad_parameter(name, "edges", f'takes "all" or a list of edge counts from 1 to '
                                f"{N_PAIRS}", edges)
    return check


def _sequence_trials(p: dict[str, Any]) -> list[Trial]:
    ks = range(1, N_PAIRS + 1) if p["edges"] == "all" else p["edges"]
    return [Trial({"n": n, "d": p["d"], "n_samples": max(p["n"]), "n_temps": p["n_temps"],
                   "n_runs": p["n_runs"], "edges": int(k)}, seed)
            for n in p["n"] for k in ks for seed in range(p["datasets"])]


def _sequence_report(results: Sequence[TrialResult], p: dict[str, Any]) -> Report:
    ns = list(p["n"])
    ks = sorted({r.settings["edges"] for r in results})
    cols = [*METHODS, "AIS MC error"]

    def mean(rs, key):
        return float(np.mean([r.values[key] for r in rs])) if rs else float("nan")

    def cell(rs, key):
        return f"{mean(rs, key):.3g}" if rs else "—"

    by_n = {n: [r for r in results if r.settings["n"] == n] for n in ns}
    true = {n: [r for r in by_n[n] if r.settings["edges"] == r.values["true edges"]] for n in ns}
    summary = markdown_table(
        ["N", "models"] + cols,
        [[n, f"all {len(by_n[n])}"] + [cell(by_n[n], c) for c in cols] for n in ns]
        + [[n, f"true {len(true[n])}"] + [cell(true[n], c) for c in cols] for n in ns])
    signed = markdown_table(
        ["N"] + [f"{m} - AIS" for m in METHODS],
        [[n] + [cell(by_n[n], f"{m} - AIS") for m in METHODS] for n in ns])
    per_k = markdown_table(
        ["N", "edges"] + cols,
        [[n, k] + [cell([r for r in by_n[n] if r.settings["edges"] == k], c) for c in cols]
         for n in ns for k in ks])
    text = (f"Mean |score - AIS| over {p['datasets']} nested model sequences (one per data set, "
            f"d = {p['d']}; each sequence runs from 1 edge to the complete graph through the true "
            f"structure; AIS {p['n_runs']} runs x {p['n_temps']} temperatures, exact log Z). "
            "'all' averages over every model of every sequence, 'true' over the true structures "
            f"only.\n\n{summary}\n\nMean signed difference (a score below AIS penalises the "
            f"model too much):\n\n{signed}\n\nBy the number of edges of the scored model:\n\n{per_k}\n\n"
            f"Paper (Parise & Welling 2006, fig. 2; a plot, no printed numbers): "
            f"{PAPER_CLAIMS['fig2']}")
    timings = markdown_table(["N", "AIS", *METHODS], [
        [n] + [f"{mean(by_n[n], f'time {m}'):.2f}" for m in ["AIS", *METHODS]] for n in ns])
    fig, axes = new_figure(ncols=len(ns), width=4.5)
    for ax, n in zip(axes[0], ns, strict=True):
        for m in cols:
            ys = [mean([r for r in by_n[n] if r.settings["edges"] == k], m) for k in ks]
            ax.plot(ks, ys, "k:" if m == "AIS MC error" else "-", marker=None
                    if m == "AIS MC error" else "o", label=m)
        label_axes(ax, "edges in the scored model", "mean |score - AIS|",
                   f"Parise & Welling 2006 fig. 2 (ours), N = {n}", logy=True)
    return Report(text, timings, fig)


register(Experiment(
    name="parise-welling-fig2",
    description="Parise & Welling 2006 fig. 2: evidence scores against AIS along random nested "
                "model sequences, N = 50 and 10000, 5-node Boltzmann machines",
    sizes={"full": {"n": [50, 10000], "edges": "all", "d": 0.5 / 4, "datasets": 50,
                    "n_temps": 1000, "n_runs": 10},
           "quick": {"n": [50], "edges": [1, 10], "d": 0.5 / 4, "datasets": 1, "n_temps": 50,
                     "n_runs": 2}},
    trials=_sequence_trials, run_trial=run_trial, report=_sequence_report,
    check=_check("parise-welling-fig2")))

register(Experiment(
    name="parise-welling-fig3",
    description="Parise & Welling 2006 fig. 3: evidence scores (BP-LR, BIC, MAP, Laplace) "
                "against AIS as N grows, 5-node Boltzmann machines",
    sizes={"full": {"n": [10, 30, 100, 300, 1000, 3000, 10000], "d": 0.5 / 4, "datasets": 50,
                    "n_temps": 1000, "n_runs": 10},
           "quick": {"n": [10, 100], "d": 0.5 / 4, "datasets": 1, "n_temps": 50, "n_runs": 2}},
    trials=_trials("n"), run_trial=run_trial, report=_report("n", "fig3"),
    check=_check("parise-welling-fig3")))

register(Experiment(
    name="parise-welling-fig4",
    description="Parise & Welling 2006 fig. 4: evidence scores against AIS as the coupling "
                "strength d grows (N = 10000)",
    sizes={"full": {"d": [0.1 / 4, 0.2 / 4, 0.5 / 4, 1.0 / 4, 1.5 / 4, 2.0 / 4], "n": 10000,
                    "datasets": 50, "n_temps": 1000, "n_runs": 10},
           "quick": {"d": [0.5 / 4, 2.0 / 4], "n": 100, "datasets": 1, "n_temps": 50,
                     "n_runs": 2}},
    trials=_trials("d"), run_trial=run_trial, report=_report("d", "fig4"),
    check=_check("parise-welling-fig4")))
