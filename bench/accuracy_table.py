"""Accuracy of BP, TreeEP and mean field against exact inference (issue 4 table).

Binary Ising models in the setting of the thesis (Qi 2005, secs. 3.5.1-3.5.3): node potentials
``[theta_j, -theta_j]`` with ``theta_j ~ N(0, 1)`` and edge potentials ``[[w, -w], [-w, w]]`` with
``w ~ N(0, s^2)``; 4-node complete graphs (the thesis uses ``s = 3 / sqrt(n - 1)``, i.e. 1.73 for
n = 4) and 5x5 / 8x8 grids (the thesis uses ``s = 1``), each at several coupling strengths ``s``.
Errors are against the junction tree engine; node error = |P(x_j = 1) - exact|, averaged over
nodes and trials ("mean"), and the thesis' per-graph maximum averaged over trials ("max").

Run: ``.venv/bin/python bench/accuracy_table.py [--trials 10] [--seed 0]``
"""

from __future__ import annotations

import argparse
import time
import warnings

import networkx as nx
import numpy as np

from pymc_crf.graphs.batch import GraphBatch
from pymc_crf.inference.bp import BeliefPropagation, ConvergenceWarning
from pymc_crf.inference.junction_tree import JunctionTree
from pymc_crf.inference.mean_field import MeanField
from pymc_crf.inference.tree_ep import TreeEP

SETTINGS = [
    ("complete K4", lambda: nx.complete_graph(4), (0.5, 1.0, 3 / np.sqrt(3), 3.0)),
    ("grid 5x5", lambda: nx.grid_2d_graph(5, 5), (0.25, 0.5, 1.0, 2.0)),
    ("grid 8x8", lambda: nx.grid_2d_graph(8, 8), (0.25, 0.5, 1.0, 2.0)),
]


def ising(batch: GraphBatch, s: float, rng: np.random.Generator):
    th = rng.normal(0.0, 1.0, batch.n_total_nodes)
    w = rng.normal(0.0, s, batch.n_edges)
    node = np.stack([th, -th], 1)
    edge = np.stack([np.stack([w, -w], 1), np.stack([-w, w], 1)], 1)
    return node, edge


def main(argv=None) -> list[dict]:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--trials", type=int, default=10)
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)
    rng = np.random.default_rng(args.seed)
    engines = {
        "BP": BeliefPropagation(damping=0.5, tol=1e-9, max_iter=5000, warn=False),
        "TreeEP": TreeEP(tol=1e-9, max_iter=500, warn=False),
        "MF": MeanField(tol=1e-9, max_iter=5000, warn=False),
    }
    rows = []
    for name, make, strengths in SETTINGS:
        batch = GraphBatch.from_networkx([make() for _ in range(args.trials)])
        for s in strengths:
            node, edge = ising(batch, s, rng)
            exact = JunctionTree().marginals(batch, node, edge)
            row = {"graph": name, "s": s}
            for label, eng in engines.items():
                t = time.perf_counter()
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore", ConvergenceWarning)
                    m = eng.marginals(batch, node, edge)
                row[f"{label} time"] = time.perf_counter() - t
                err = np.abs(m.node[:, 1] - exact.node[:, 1])
                row[f"{label} node"] = err.mean()
                row[f"{label} max"] = np.mean([err[batch.node_index([g])].max()
                                               for g in range(batch.n_graphs)])
                row[f"{label} logZ"] = np.abs(m.log_z - exact.log_z).mean()
                row[f"{label} unconv"] = int((~m.report["converged"]).sum())
            rows.append(row)

    print(f"{args.trials} random models per row, seed {args.seed}; errors against the junction "
          "tree. node = mean |P(x=1) error|, max = per-graph max averaged over graphs, "
          "logZ = mean |log Z error|; n.c. = graphs not converged.\n")
    head = ("| graph | s | BP node | TreeEP node | MF node | BP max | TreeEP max | MF max "
            "| BP logZ | TreeEP logZ | MF logZ | BP n.c. | TreeEP n.c. |")
    print(head)
    print("|" + "---|" * (head.count("|") - 1))
    for r in rows:
        print(f"| {r['graph']} | {r['s']:.2f} | {r['BP node']:.2e} | {r['TreeEP node']:.2e} | "
              f"{r['MF node']:.2e} | {r['BP max']:.2e} | {r['TreeEP max']:.2e} | "
              f"{r['MF max']:.2e} | {r['BP logZ']:.2e} | {r['TreeEP logZ']:.2e} | "
              f"{r['MF logZ']:.2e} | {r['BP unconv']} | {r['TreeEP unconv']} |")
    ep = np.array([r["TreeEP node"] for r in rows])
    bp = np.array([r["BP node"] for r in rows])
    epz = np.array([r["TreeEP logZ"] for r in rows])
    bpz = np.array([r["BP logZ"] for r in rows])
    print(f"\nAverage over rows: node error BP {bp.mean():.3e}, TreeEP {ep.mean():.3e} "
          f"(TreeEP below BP: {ep.mean() < bp.mean()}, in {int((ep < bp).sum())} of {len(rows)} "
          f"rows); log Z error BP {bpz.mean():.3e}, TreeEP {epz.mean():.3e} (TreeEP below BP: "
          f"{epz.mean() < bpz.mean()}, in {int((epz < bpz).sum())} of {len(rows)} rows)")
    return rows


if __name__ == "__main__":
    main()
