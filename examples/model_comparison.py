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
# # Bayesian model comparison with the evidence
#
# The marginal likelihood (evidence) `log p(D) = log ∫ p(D | w) p(w) dw` scores a model as a whole,
# weights integrated out, so models of different size compete fairly (Parise & Welling 2006).
# `pmc.log_marginal_likelihood` estimates it for a `pmc.MRF` or `pmc.CRF` with Gaussian priors:
# by the Bethe-Laplace approximation (`"bethe_laplace"`), by Laplace with exact log Z and
# covariance (`"laplace_exact"`), by BIC, and by annealed importance sampling (`"ais"`, Neal 2001),
# the reference. See the evidence page of the user guide.
#
# Two questions: which graph structure generated samples of a random field (an MRF), and which
# edge features a CRF needs (with the evidence column of `pmc.compare`).
#
# `PYMC_CRF_SMOKE=1` runs it in seconds on less data; `PYMC_CRF_FIGURES=<directory>` saves the
# figures.

# %%
import os
import warnings

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import pymc as pm

import pymc_crf as pmc

SMOKE = os.environ.get("PYMC_CRF_SMOKE") == "1"
FIGURES = os.environ.get("PYMC_CRF_FIGURES")


def save(fig, name):
    """Save a figure when PYMC_CRF_FIGURES names a directory (notebooks show figures inline)."""
    if FIGURES:
        fig.savefig(os.path.join(FIGURES, f"model_comparison_{name}.png"), dpi=80)


N_SAMPLES = 150 if SMOKE else 500
AIS = dict(n_runs=2, n_temps=60) if SMOKE else dict(n_runs=10, n_temps=1000)
N_TRAIN = 4 if SMOKE else 30

# %% [markdown]
# ## Which structure generated the samples?
#
# A random Boltzmann machine on 5 nodes (Parise & Welling 2006, sec. 4.1; couplings of strength
# about `d = 1`) and exact samples of it. The candidates are the true graph, the true graph with one
# edge removed or one added, a chain through all nodes, and the complete graph.
# Each model puts a N(0, 1) prior on its biases and couplings.

# %%
data = pmc.datasets.parise_welling_random_structure(n_nodes=5, d=1.0, epsilon=0.1,
                                                    n_samples=N_SAMPLES, seed=4)
n = int(data.graphs.n_nodes[0])
true_edges = [tuple(int(v) for v in e) for e in data.graphs.edges]
absent = [(i, j) for i in range(n) for j in range(i + 1, n) if (i, j) not in true_edges]
candidates = {
    "true": true_edges,
    "true - 1 edge": true_edges[1:],
    "true + 1 edge": true_edges + absent[:1],
    "chain": [(i, i + 1) for i in range(n - 1)],
    "complete": [(i, j) for i in range(n) for j in range(i + 1, n)],
}
print("true edges:", true_edges)


def mrf_model(edges):
    """Biases and couplings with N(0, 1) priors on the graph with these edges."""
    graph = pmc.GraphBatch.from_edges([edges], [n])
    with pm.Model() as model:
        b = pm.Normal("b", 0.0, 1.0, shape=n)
        w = pm.Normal("w", 0.0, 1.0, shape=len(edges))
        pmc.MRF("x", graphs=graph, node_weights=b, edge_weights=w,
                parameterization=data.parameterization, observed=data.samples)
    return model


# %% [markdown]
# The three Laplace-type scores cost a MAP search and one curvature; AIS anneals from the prior to
# the posterior and reports its Monte Carlo error.

# %%
rows = {}
for name, edges in candidates.items():
    model = mrf_model(edges)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # Bethe log Z on the loopy candidates
        scores = {m: pmc.log_marginal_likelihood(model, method=m)
                  for m in ("bethe_laplace", "laplace_exact", "bic")}
        ais = pmc.log_marginal_likelihood(model, method="ais", random_seed=0, **AIS)
    rows[name] = {**{m: float(v) for m, v in scores.items()}, "ais": float(ais),
                  "ais_std_error": ais.std_error, "n_edges": len(edges)}
table = pd.DataFrame(rows).T
table  # noqa: B018

# %% [markdown]
# With equal prior probabilities on the candidates, the posterior probability of each structure is
# the softmax of its evidence:

# %%
for method in ("laplace_exact", "ais"):
    ev = table[method].to_numpy(dtype=float)
    table[f"p_{method}"] = np.exp(ev - ev.max()) / np.exp(ev - ev.max()).sum()
print(table[["n_edges", "laplace_exact", "ais", "p_laplace_exact", "p_ais"]].round(3))
print("chosen by the exact Laplace evidence:", table["laplace_exact"].idxmax())

# %%
fig, ax = plt.subplots(figsize=(7, 3.5))
x = np.arange(len(table))
for k, method in enumerate(("bethe_laplace", "laplace_exact", "bic", "ais")):
    err = table["ais_std_error"] if method == "ais" else None
    ax.bar(x + 0.2 * k - 0.3, table[method] - table["ais"].max(), width=0.2, yerr=err,
           label=method)
ax.set_xticks(x, table.index, rotation=20)
ax.set_ylabel("log evidence - best AIS")
ax.legend(fontsize=8)
ax.set_title("Evidence of each candidate structure")
fig.tight_layout()
save(fig, "structures")

# %% [markdown]
# ## Which edge features does a CRF need?
#
# The synthetic loop data of Qi, Szummer & Minka (2005, sec. 8.1) has 6 edge features. A model with
# all of them competes with one that keeps only the first two. `method="bethe_laplace"` fits a
# Gaussian posterior and stores its evidence, which `pmc.compare` shows next to the test error.

# %%
train, test = pmc.datasets.bcrf_synthetic("loop", n_train=N_TRAIN, n_test=200, seed=0)


def crf_model(features):
    with pm.Model() as model:
        w = pm.Normal("w", 0.0, 5**0.5, shape=(len(features), 2, 2))
        pmc.CRF("t", graphs=train.graphs, edge_features=train.edge_features[:, features],
                edge_weights=w, potential="probit", observed=train.labels)
    return model


feature_sets = {"all 6 features": list(range(6)), "first 2 features": [0, 1]}
fits, models = {}, {}
for name, features in feature_sets.items():
    models[name] = crf_model(features)
    fits[name] = pmc.fit(models[name], method="bethe_laplace")
    test_k = pmc.CRFData(graphs=test.graphs, edge_features=test.edge_features[:, features],
                         labels=test.labels, n_labels=2)
    fits[name].attrs["test_error"] = pmc.predict(fits[name], test_k, method="bpe").error_rate
crf_table = pmc.compare(fits, model=models)  # each fit's own model, for its corrected LOO
crf_table["test_error"] = [fits[k].attrs["test_error"] for k in crf_table.index]
crf_table[["wall_time", "log_marginal_likelihood", "elpd_loo", "test_error"]]

# %% [markdown]
# The evidence prefers the model whose test error is lower when the extra features carry signal,
# and the smaller model when they do not; here the columns can be read side by side. `elpd_loo`
# is the cross-validation view of the same question: leave-one-graph-out, corrected for the
# Bethe-Laplace approximation with each fit's own model (`model=models`).

# %%
fig, ax = plt.subplots(figsize=(5, 3))
ax.bar(crf_table.index, crf_table["log_marginal_likelihood"])
ax.set_ylabel("log evidence (Bethe-Laplace)")
fig.tight_layout()
save(fig, "crf_features")
plt.close("all")
