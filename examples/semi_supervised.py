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
# # Semi-supervised CRFs: missing labels summed out and imputed
#
# Labels are expensive; often only some nodes of some graphs are labelled. Pass the labels as a
# numpy masked array (or with `-1`, or NaN, at the missing ones) and `pmc.CRF` sums the missing
# labels out of its likelihood,
#
# $$\log p(y_\mathrm{obs} \mid x, w) = \log Z(x, w;\ \text{clamped to } y_\mathrm{obs}) - \log Z(x, w),$$
#
# where the clamped partition function is the same exact engine run with the observed labels fixed.
# NUTS and MAP then fit the weights as usual; graphs with no label at all contribute nothing.
# Afterwards `pmc.impute` draws the missing labels from their exact conditional
# `p(y_miss | y_obs, x, w)` for every posterior draw and averages the conditional marginals.
#
# (PyMC's automatic imputation would make the missing labels free discrete variables inside MCMC;
# for labels coupled through a graph, summing them out is exact and keeps NUTS on the continuous
# weights.)
#
# `PYMC_CRF_SMOKE=1` runs it in seconds; `PYMC_CRF_FIGURES=<directory>` saves the figures.

# %%
import os

import matplotlib.pyplot as plt
import numpy as np
import pymc as pm

import pymc_crf as pmc

SMOKE = os.environ.get("PYMC_CRF_SMOKE") == "1"
FIGURES = os.environ.get("PYMC_CRF_FIGURES")


def save(fig, name):
    """Save a figure when PYMC_CRF_FIGURES names a directory (notebooks show figures inline)."""
    if FIGURES:
        fig.savefig(os.path.join(FIGURES, f"semi_supervised_{name}.png"), dpi=80)


N_TRAIN, N_TEST = (6, 50) if SMOKE else (40, 500)
NUTS = (dict(tune=60, draws=60, chains=1, nuts_sampler="pymc", compute_convergence_checks=False)
        if SMOKE else dict(tune=1000, draws=1000, chains=2))

# %% [markdown]
# ## Data: chains with most labels hidden
#
# Chains of 8 nodes with binary labels from a probit CRF on 6 edge features (the synthetic data of
# Qi, Szummer & Minka 2005, sec. 8.1, as chains). We hide 60% of the labels at random and every
# label of the last quarter of the graphs.

# %%
train, test = pmc.datasets.bcrf_synthetic("chain", n_train=N_TRAIN, n_test=N_TEST, n_nodes=8,
                                          seed=1)
rng = np.random.default_rng(0)
hidden = rng.random(train.labels.size) < 0.6
hidden[train.graphs.node_index(range(3 * N_TRAIN // 4, N_TRAIN))] = True
labels = np.ma.masked_array(train.labels, mask=hidden)
print(f"{int(hidden.sum())} of {hidden.size} labels missing")

with pm.Model(coords=train.coords) as model:
    w = pm.Normal("w", 0.0, 5**0.5, dims=("edge_feature", "label_i", "label_j"))
    pmc.CRF("t", graphs=train.graphs, edge_features=train.edge_features, edge_weights=w,
            potential="probit", observed=labels, dims=("graph", "position"))

# %% [markdown]
# ## Fit, then impute
#
# NUTS on the exact posterior of the weights given the observed labels. `pmc.impute` returns the
# missing labels' posterior marginals (averaged conditional marginals), their argmax, and one draw
# per posterior draw; `extend_inferencedata=True` also stores the draws as
# `posterior["t_unobserved"]`, where PyMC's automatic imputation would put them.

# %%
fit = pmc.fit(model, method="nuts", random_seed=2, **NUTS)
imputed = pmc.impute(fit, model, extend_inferencedata=True)
imputed  # noqa: B018

# %%
truth = train.labels[imputed["node"].values]
print(f"imputation accuracy: {np.mean(imputed['labels'].values == truth):.3f} "
      f"on {truth.size} missing labels")
print(f"test error (average over NUTS draws): "
      f"{pmc.predict(fit, test, method='average', draws=100).error_rate:.3f}")

# %% [markdown]
# The imputed marginals of the first graphs: `p(t_i = 1 | observed labels)` per node, observed
# labels as black dots, the hidden true labels as red crosses.

# %%
G_SHOW = min(4, N_TRAIN)
fig, axes = plt.subplots(G_SHOW, 1, figsize=(6, 1.3 * G_SHOW), sharex=True)
for g, ax in enumerate(np.atleast_1d(axes)):
    nodes = train.graphs.node_index([g])
    pos = np.arange(nodes.size)
    p1 = np.full(nodes.size, np.nan)
    sel = imputed["graph"].values == g
    p1[imputed["position"].values[sel]] = imputed["marginals"].values[sel, 1]
    ax.bar(pos, p1, color="tab:blue", alpha=0.6)
    obs = ~hidden[nodes]
    ax.plot(pos[obs], train.labels[nodes][obs], "ko", ms=4)
    ax.plot(pos[~obs], train.labels[nodes][~obs], "rx", ms=6)
    ax.set_ylim(-0.1, 1.1)
    ax.set_ylabel(f"graph {g}")
np.atleast_1d(axes)[-1].set_xlabel("position")
fig.tight_layout()
save(fig, "imputed")

# %% [markdown]
# ## Against the fully labelled data
#
# The same model fitted by MAP with every label and with the observed third of them (33% at full
# size): MAP sums the missing labels out in the same way (through the engine objective, nothing
# compiled).

# %%
with pm.Model(coords=train.coords) as full_model:
    w = pm.Normal("w", 0.0, 5**0.5, dims=("edge_feature", "label_i", "label_j"))
    pmc.CRF("t", graphs=train.graphs, edge_features=train.edge_features, edge_weights=w,
            potential="probit", observed=train.labels, dims=("graph", "position"))
errors = {name: pmc.predict(pmc.fit(m, method="map"), test, method="bpe").error_rate
          for name, m in {"all labels": full_model,
                          f"{1 - hidden.mean():.0%} of labels": model}.items()}
errors  # noqa: B018

# %%
fig, ax = plt.subplots(figsize=(4, 3))
ax.bar(list(errors), list(errors.values()))
ax.set_ylabel("test error (MAP)")
fig.tight_layout()
save(fig, "errors")
plt.close("all")
