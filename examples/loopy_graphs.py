# ---
# jupyter:
#   jupytext:
#     formats: ipynb,py:percent
#     text_representation:
#       extension: .py
#       format_name: percent
#   kernelspec:
#     display_name: Python 3
#     language: python
#     name: python3
# ---

# %% [markdown]
# # Loopy graphs: belief propagation, tree EP and the exact junction tree
#
# On graphs with cycles, log Z and the marginals of a CRF need either an exact engine whose cost
# grows exponentially with the treewidth (the junction tree) or an approximation: loopy belief
# propagation (Bethe) or tree-structured EP (Qi 2005, thesis ch. 3). This example compares them on
# grids, reads their convergence reports, and trains a grid CRF with an exact and with a Bethe
# likelihood.
#
# `PYMC_CRF_SMOKE=1` shrinks the grids and data so it runs in seconds; `PYMC_CRF_FIGURES=<dir>`
# saves the figures as PNG files.

# %%
import os
import warnings

import matplotlib.pyplot as plt
import numpy as np
import pymc as pm

import pymc_crf as pmc
from pymc_crf import plots
from pymc_crf.inference import BeliefPropagation, ConvergenceWarning, JunctionTree, TreeEP

SMOKE = os.environ.get("PYMC_CRF_SMOKE") == "1"
FIGURES = os.environ.get("PYMC_CRF_FIGURES")


def save(fig, name):
    """Save a figure when PYMC_CRF_FIGURES names a directory (notebooks show figures inline)."""
    if FIGURES:
        fig.savefig(os.path.join(FIGURES, f"loopy_graphs_{name}.png"), dpi=80)


SIDE = 5 if SMOKE else 8          # grid side: treewidth SIDE, still easy for the junction tree
N_MODELS = 3 if SMOKE else 10     # random Ising models per coupling strength
N_TRAIN, N_TEST = (4, 2) if SMOKE else (20, 10)
rng = np.random.default_rng(0)

# %% [markdown]
# ## Engines on random Ising grids
#
# Binary models as in the thesis (secs. 3.5.1-3.5.3): node log-potentials `[theta, -theta]` with
# `theta ~ N(0, 1)`, edge log-potentials `[[c, -c], [-c, c]]` with `c ~ N(0, s^2)`. Every engine
# works on a whole `GraphBatch` (here `N_MODELS` grids at once) and returns `Marginals` with
# `log_z`, `node`, `edge` and, for the iterative ones, a per-graph convergence `report`.

# %%
batch = pmc.GraphBatch.grid(SIDE, SIDE, n_graphs=N_MODELS)
engines = {"bp": BeliefPropagation(damping=0.5, tol=1e-9, max_iter=1000),
           "tree_ep": TreeEP(tol=1e-9, max_iter=200)}
exact_engine = JunctionTree()
rows = []
for s in (0.5, 1.0, 2.0):
    theta = rng.normal(size=batch.n_total_nodes)
    c = rng.normal(0.0, s, size=batch.n_edges)
    node = np.stack([theta, -theta], axis=1)
    edge = c[:, None, None] * np.array([[1.0, -1.0], [-1.0, 1.0]])
    exact = exact_engine.marginals(batch, node, edge)
    for name, engine in engines.items():
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always", ConvergenceWarning)
            approx = engine.marginals(batch, node, edge)
        rows.append({"s": s, "engine": name,
                     "node error": float(np.abs(approx.node - exact.node)[:, 1].mean()),
                     "log Z error": float(np.abs(approx.log_z - exact.log_z).mean()),
                     "converged": f"{int(approx.report['converged'].sum())}/{N_MODELS}",
                     "max iterations": int(approx.report["iterations"].max()),
                     "warnings": len(caught)})
for r in rows:
    print("s={s:<4} {engine:8} node err {node error:.2e}  log Z err {log Z error:.2e}  "
          "converged {converged}  iterations <= {max iterations}  warnings {warnings}".format(**r))

# %% [markdown]
# Errors grow with the coupling strength s, and tree EP's stay well below BP's (the accuracy table
# of the loopy-inference page has the full comparison). When an iterative engine stops at
# `max_iter` without converging, its report says on which graphs, and one `ConvergenceWarning`
# says how many. The report of the last run (tree EP at s = 2), one entry per graph:

# %%
{k: np.asarray(v) for k, v in approx.report.items()}

# %% [markdown]
# ## A CRF on grids: exact versus Bethe likelihood
#
# Labels of `N_TRAIN + N_TEST` grids drawn exactly (junction-tree sampling) from a CRF with two node
# features, a bias and an attractive shared (2 x 2) edge table. We fit MAP twice: with the exact
# log Z of the junction tree and with the Bethe approximation of loopy BP (`inference="bp"`), and
# predict the test grids with each.

# %%
data_batch = pmc.GraphBatch.grid(SIDE, SIDE, n_graphs=N_TRAIN + N_TEST)
X = np.column_stack([rng.normal(size=(data_batch.n_total_nodes, 2)),
                     np.ones(data_batch.n_total_nodes)])
W_true = np.array([[1.5, -1.5], [-1.0, 1.0], [0.2, -0.2]])
T_true = np.array([[0.8, -0.8], [-0.8, 0.8]])
labels = exact_engine.sample(data_batch, X @ W_true, T_true[None], 1, rng)[0]
data = pmc.CRFData(data_batch, labels, node_features=X, n_labels=2)
train, test = data.subset(range(N_TRAIN)), data.subset(range(N_TRAIN, N_TRAIN + N_TEST))

fits = {}
for inference in ("junction_tree", "bp"):
    with pm.Model(coords=train.coords) as grid_model:
        W = pm.Normal("W", 0.0, 2.0, dims=("node_feature", "node_label"))
        T = pm.Normal("T", 0.0, 2.0, dims=("label_i", "label_j"))
        pmc.CRF("y", graphs=train.graphs, node_features=train.node_features, node_weights=W,
                edge_weights=T, observed=train.labels, inference=inference,
                dims=("graph", "position"))
        fits[inference] = pmc.fit(grid_model, method="map")
    print(inference, fits[inference].attrs["log_z"],
          "T =", fits[inference]["posterior"]["T"].values[0, 0].round(2).tolist())

# %% [markdown]
# Predicted marginals of the first test grid: exact marginals at the junction-tree MAP weights,
# and BP and tree-EP marginals at the Bethe MAP weights. Crosses mark wrongly labelled nodes.

# %%
preds = {"exact (junction tree)": pmc.predict(fits["junction_tree"], test, method="bpe",
                                              inference="junction_tree"),
         "BP": pmc.predict(fits["bp"], test, method="bpe", inference="bp"),
         "tree EP": pmc.predict(fits["bp"], test, method="bpe", inference="tree_ep")}
fig, axes = plt.subplots(1, 3, figsize=(11, 3.4), layout="constrained")
for ax, (name, pred) in zip(axes, preds.items(), strict=True):
    plots.plot_marginals_grid(pred, (SIDE, SIDE), test, graph=0, ax=ax)
    ax.set_title(f"{name}\n(all test grids: error rate {pred.error_rate:.2f})", fontsize="small")
save(fig, "grid_marginals")

# %%
axes = plots.plot_convergence(fits["bp"])  # the MAP objective per L-BFGS iteration
save(axes[0].figure, "map_objective")

# %%
plt.close("all")
