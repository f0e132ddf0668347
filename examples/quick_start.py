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
# # Quick start: a Bayesian CRF in a PyMC model
#
# A conditional random field (CRF) is a likelihood in a PyMC model like any other. This example
# fits the synthetic loop data of Qi, Szummer & Minka (2005, sec. 8.1) three ways: NUTS on the exact
# posterior (the junction tree gives the exact log partition function), MAP, and flattened power
# EP. It then looks at the results with ArviZ and `pymc_crf.plots`, scores the approximations
# against NUTS with `pmc.compare`, and predicts the labels of new graphs.
#
# Set the environment variable `PYMC_CRF_SMOKE=1` to run it in seconds on tiny data (the tests do);
# set `PYMC_CRF_FIGURES=<directory>` to save the figures as PNG files when running it as a script.

# %%
import os

import arviz as az
import matplotlib.pyplot as plt
import pymc as pm

import pymc_crf as pmc
from pymc_crf import plots

SMOKE = os.environ.get("PYMC_CRF_SMOKE") == "1"
FIGURES = os.environ.get("PYMC_CRF_FIGURES")


def save(fig, name):
    """Save a figure (or ArviZ PlotCollection) when PYMC_CRF_FIGURES names a directory
    (notebooks show figures inline)."""
    if FIGURES:
        fig.savefig(os.path.join(FIGURES, f"quick_start_{name}.png"), dpi=80)


# Smoke setting: 3 training graphs, short single-chain NUTS. PyMC's own NUTS sampler compiles
# through PyTensor's C backend, whose compiled code is cached between runs; nutpie (PyMC's default
# when installed) compiles the model afresh in every process, which costs more than a short run.
N_TRAIN, N_TEST = (3, 20) if SMOKE else (30, 1000)
NUTS = (dict(tune=50, draws=50, chains=1, nuts_sampler="pymc", compute_convergence_checks=False)
        if SMOKE else dict(tune=1000, draws=1000, chains=2))
N_DRAWS = 50 if SMOKE else 1000

# %% [markdown]
# ## Data and model
#
# Graphs of 3 vertices in a loop, 6 edge features, binary labels drawn from a probit CRF. The weight
# tensor `w` has one (2 x 2) table of label-pair weights per edge feature and the paper's N(0, 5 I)
# prior. `pmc.CRF` holds the labels of all graphs as a (graph, position) matrix, so ArviZ gets one
# log-likelihood value per graph.

# %%
train, test = pmc.datasets.bcrf_synthetic("loop", n_train=N_TRAIN, n_test=N_TEST, seed=0)

with pm.Model(coords=train.coords) as model:
    w = pm.Normal("w", 0.0, 5**0.5, dims=("edge_feature", "label_i", "label_j"))
    pmc.CRF("t", graphs=train.graphs, edge_features=train.edge_features, edge_weights=w,
            potential="probit", observed=train.labels, dims=("graph", "position"))
model  # noqa: B018

# %% [markdown]
# ## Three fits
#
# Every fitter returns an ArviZ `DataTree` with `posterior`, `log_likelihood` (per graph),
# `observed_data` and method-specific groups (see the fit contract page).

# %%
gold = pmc.fit(model, method="nuts", random_seed=1, **NUTS)  # pm.sample on the exact posterior
point = pmc.fit(model, method="map")                          # L-BFGS MAP (one draw)
ep = pmc.fit(model, method="ep", draws=N_DRAWS, random_seed=2)     # Gaussian q(w) by power EP
ep  # noqa: B018

# %%
az.summary(gold, var_names=["w"]).head(8)

# %% [markdown]
# ## Plots
#
# An ArviZ forest plot of NUTS and EP side by side (the weights of the first two edge features),
# then the marginal posteriors of the weights in the style of Welling & Parise (2006, figs. 3, 7,
# 8): NUTS filled, EP's Gaussian as a line, MAP as a dashed line, worst-fitting weights (largest
# Cramer-von Mises score) first.

# %%
pc = az.plot_forest({"nuts": gold, "ep": ep}, var_names=["w"], coords={"edge_feature": [0, 1]},
                    combined=True)
pc.add_legend("model")
save(pc, "forest")

# %%
axes = plots.plot_posterior_marginals({"nuts": gold, "ep": ep, "map": point}, reference="nuts",
                                      max_panels=8)
save(axes[0].figure, "marginals")

# %%
axes = plots.plot_convergence(ep)  # EP's change of the mean and covariance per sweep
save(axes[0].figure, "convergence")

# %% [markdown]
# ## Model checking with ArviZ
#
# The log-likelihood has one value per graph, so LOO is leave-one-graph-out cross-validation.
# EP's draws come from its Gaussian, not from the posterior: `pmc.loo` corrects for that with
# importance ratios (plain `az.loo` of EP draws is not the model's LOO; see the fit contract), and
# `az.compare` ranks the fits by it. Read the Pareto k warnings first. MAP has a single draw and
# is left out.

# %%
loo_nuts = pmc.loo(gold)
loo_ep = pmc.loo(ep, model)
print(loo_nuts)
az.compare({"nuts": loo_nuts, "ep": loo_ep})

# %% [markdown]
# ## Scores against NUTS
#
# `pmc.compare` scores each fit against the reference: run time, error of the posterior means,
# ratio of posterior sds, Cramer-von Mises score (Welling & Parise 2006, eq. 23) and test error.

# %%
table = pmc.compare({"nuts": gold, "ep": ep, "map": point}, reference="nuts", test=test,
                    model=model)
print(table)
axes = plots.plot_compare(table, reference="nuts")
save(axes[0].figure, "compare")

# %% [markdown]
# ## Predictions
#
# Marginals of new graphs averaged over NUTS draws, and EP's approximate model averaging
# (Qi, Szummer & Minka 2005, eqs. 57-63). The heat map shows the predicted marginals of the first
# test graphs, the predicted labels (crosses) and the true ones (circles).

# %%
pred_nuts = pmc.predict(gold, test, method="average", draws=N_DRAWS)
pred_ep = pmc.predict(ep, test, method="model_average")
print(pred_nuts, pred_ep, sep="\n")
ax = plots.plot_marginals_chain(pred_ep, test, graph=range(8))
save(ax.figure, "predictions")

# %%
plt.close("all")
