"""Thesis ch. 3 (Qi 2005, secs. 3.5.1-3.5.3): accuracy and cost of TreeEP against BP and mean field.

Binary Ising models: node potentials ``[theta_j, -theta_j]`` with ``theta_j ~ N(0, 1)`` and edge
potentials ``[[w, -w], [-w, w]]`` with ``w ~ N(0, s^2)`` on 4-node complete graphs (the thesis
uses ``s = 3 / sqrt(n - 1)``, 1.73 for n = 4) and 5x5 / 8x8 grids (the thesis uses ``s = 1``), each
at several coupling strengths. One trial is one random model; errors are against the junction
tree: node error = |P(x_j = 1) - exact| (mean over nodes, and the per-graph maximum, the thesis'
measure), and |log Z error|.
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

__all__ = ["GRAPHS", "PAPER_TABLE_3_1", "run_trial"]

GRAPHS = {"complete K4": ("complete", 4), "grid 5x5": ("grid", 5), "grid 8x8": ("grid", 8)}
ENGINES = ("BP", "TreeEP", "MF")

# Qi 2005 (PhD thesis), table 3.1: one random binary model on the complete graph of 4 nodes
# (potentials from the authors' website, not available): max |error| of the node means and FLOPS.
# Figs. 3-5 / 3-6 (complete graphs of 4-14 nodes and grids, 10 potentials per point) are plots
# without printed numbers; their claim is that TreeEP's error is below BP's throughout.
PAPER_TABLE_3_1 = {"TreeEP": (0.008, 800), "BP": (0.035, 500), "MF": (0.474, 11500)}


def _engines() -> dict:
    from pymc_crf.inference.bp import BeliefPropagation
    from pymc_crf.inference.mean_field import MeanField
    from pymc_crf.inference.tree_ep import TreeEP

    return {"BP": BeliefPropagation(damping=0.5, tol=1e-9, max_iter=5000, warn=False),
            "TreeEP": TreeEP(tol=1e-9, max_iter=500, warn=False),
            "MF": MeanField(tol=1e-9, max_iter=5000, warn=False)}


def run_trial(settings: dict[str, Any], seed: int) -> dict[str, float]:
    """One random Ising model on ``settings["graph"]`` with coupling sd ``settings["s"]``."""
    import networkx as nx

    from pymc_crf.graphs.batch import GraphBatch
    from pymc_crf.inference.bp import ConvergenceWarning
    from pymc_crf.inference.junction_tree import JunctionTree

    shape, n = GRAPHS[settings["graph"]]
    g = nx.complete_graph(n) if shape == "complete" else nx.grid_2d_graph(n, n)
    batch = GraphBatch.from_networkx([g])
    rng = np.random.default_rng(seed)
    th = rng.normal(0.0, 1.0, batch.n_total_nodes)
    w = rng.normal(0.0, settings["s"], batch.n_edges)
    node = np.stack([th, -th], 1)
    edge = np.stack([np.stack([w, -w], 1), np.stack([-w, w], 1)], 1)
    exact = JunctionTree().marginals(batch, node, edge)
    row = {}
    for label, eng in _engines().items():
        t = time.perf_counter()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ConvergenceWarning)
            m = eng.marginals(batch, node, edge)
        row[f"time {label}"] = time.perf_counter() - t
        err = np.abs(m.node[:, 1] - exact.node[:, 1])
        row[f"{label} node"] = err.mean()
        row[f"{label} max"] = err.max()
        row[f"{label} logZ"] = float(np.abs(m.log_z - exact.log_z).mean())
        row[f"{label} unconverged"] = float((~m.report["converged"]).sum())
    return row


def _rows(p: dict[str, Any]) -> list[tuple[str, float]]:
    return [(g, float(s)) for g in p["graphs"] for s in p["strengths"][g]]


def _trials(p: dict[str, Any]) -> list[Trial]:
    return [Trial({"graph": g, "s": s}, 1000 * i + t)
            for i, (g, s) in enumerate(_rows(p)) for t in range(p["trials"])]


def _report(results: Sequence[TrialResult], p: dict[str, Any]) -> Report:
    rows, trows, agg = [], [], {}
    for g, s in _rows(p):
        rs = [r.values for r in results if r.settings == {"graph": g, "s": s}]
        m = {k: float(np.mean([v[k] for v in rs])) for k in rs[0]}
        agg[(g, s)] = m
        rows.append([g, f"{s:.2f}"] + [f"{m[f'{e} max']:.2e}" for e in ENGINES]
                    + [f"{m[f'{e} node']:.2e}" for e in ENGINES]
                    + [f"{m[f'{e} logZ']:.2e}" for e in ENGINES]
                    + [int(sum(v[f"{e} unconverged"] for v in rs)) for e in ("BP", "TreeEP")])
        trows.append([g, f"{s:.2f}"] + [f"{1e3 * m[f'time {e}']:.2f}" for e in ENGINES])
    header = (["graph", "s"] + [f"{e} max" for e in ENGINES] + [f"{e} node" for e in ENGINES]
              + [f"{e} logZ" for e in ENGINES] + ["BP n.c.", "TreeEP n.c."])
    ep = np.array([m["TreeEP max"] for m in agg.values()])
    bp = np.array([m["BP max"] for m in agg.values()])
    paper = markdown_table(["method", "max node error", "FLOPS"],
                           [[k, v[0], v[1]] for k, v in PAPER_TABLE_3_1.items()])
    text = (f"{p['trials']} random models per row; errors against the junction tree. max = "
            "per-graph maximum |P(x=1) error| averaged over models (the thesis' measure), node = "
            "mean over nodes, logZ = mean |log Z error|; n.c. = models not converged.\n\n"
            + markdown_table(header, rows)
            + f"\n\nTreeEP's max error is below BP's in {int((ep < bp).sum())} of {len(ep)} rows "
            f"(mean {ep.mean():.2e} against {bp.mean():.2e}).\n\n"
            "Paper (Qi 2005, table 3.1; one random model on K4, potentials not published):\n\n"
            + paper)
    timings = markdown_table(["graph", "s"] + [f"{e} ms" for e in ENGINES], trows)
    fig, axes = new_figure(len(p["graphs"]), width=4.0)
    for ax, g in zip(axes[0], p["graphs"], strict=True):
        ss = [s for gg, s in agg if gg == g]
        for i, e in enumerate(ENGINES):
            ax.semilogy(ss, [agg[(g, s)][f"{e} max"] for s in ss], marker="o", color=f"C{i}",
                        label=e)
        if g == "complete K4":
            for i, e in enumerate(ENGINES):
                ax.axhline(PAPER_TABLE_3_1[e][0], color=f"C{i}", ls=":", lw=1,
                           label=f"{e} (paper table 3.1)")
        ax.set_title(g)
        ax.set_xlabel("coupling sd s")
        ax.set_ylabel("max node error")
        ax.legend(fontsize=7)
    fig.tight_layout()
    return Report(text, timings, fig)


def _check(p: dict[str, Any]) -> None:
    """Every graph is one of :data:`GRAPHS` with a non-empty list of distinct coupling sds >= 0
    in ``strengths`` (a graph without one, or an unknown name, would end the run in a KeyError
    inside a trial or the report)."""
    name = "thesis-ch3-treeep"
    unknown = [g for g in [*p["graphs"], *p["strengths"]] if g not in GRAPHS]
    if unknown:
        key = "graphs" if unknown[0] in p["graphs"] else "strengths"
        raise bad_parameter(name, key, f"names graphs from {', '.join(map(repr, GRAPHS))}",
                            unknown[0])
    for g in p["graphs"]:
        ss = p["strengths"].get(g)
        if ss is None:
            raise bad_parameter(name, "strengths", f"needs a list of coupling sds for {g!r} "
                                "(a graph of 'graphs')", p["strengths"])
        ok = (isinstance(ss, list) and ss
              and all(isinstance(s, int | float) and not isinstance(s, bool)
                      and np.isfinite(s) and s >= 0 for s in ss)
              and len(set(ss)) == len(ss))
        if not ok:
            raise bad_parameter(name, "strengths", f"takes for {g!r} a non-empty list of "
                                "distinct coupling sds >= 0", ss)


_STRENGTHS = {"complete K4": [0.5, 1.0, 3 / np.sqrt(3), 3.0], "grid 5x5": [0.25, 0.5, 1.0, 2.0],
              "grid 8x8": [0.25, 0.5, 1.0, 2.0]}

register(Experiment(
    name="thesis-ch3-treeep",
    description="Qi 2005 ch. 3: TreeEP vs BP vs mean field, node-marginal and log Z error and "
                "cost on Ising K4 and grids",
    sizes={"full": {"graphs": list(GRAPHS), "strengths": _STRENGTHS, "trials": 10},
           "quick": {"graphs": ["complete K4", "grid 5x5"],
                     "strengths": {"complete K4": [1.0], "grid 5x5": [1.0]}, "trials": 2}},
    trials=_trials, run_trial=run_trial, report=_report, check=_check))
